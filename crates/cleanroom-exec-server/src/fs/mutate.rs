//! The mutating `fs/*` methods (`writeFile`, `createDirectory`, `remove`, `copy`) as plans:
//! checked and planned on the call's confined thread, then carried out by [`Plan::execute`]
//! with raw system calls on descriptors, on that thread or in the child of `child.rs`.
//!
//! Invariants: a plan reaches every directory it works in again at execution, by a path resolved
//! without magic links (on the thread in the environment's view, in the child inside its own
//! mount namespace) and checked to be the directory planned (device and inode), or by one name
//! beneath a directory already reached, following no link; entries are named relative to those
//! descriptors. A symlink swapped in between planning and execution therefore cannot lead a step
//! into a magic link or out of the tree. A recursive removal never follows a link nor crosses a
//! mount. Every mutating call refuses, before anything is changed: a `..` after a symlink in
//! its target path (the kernel climbs from the link's target), a change in the kernel's
//! filesystems (procfs, sysfs, those beneath `/sys`) and a destination that is not a regular
//! file. `fs/remove` also refuses a trailing slash after a symlink (`link/` names the link's
//! target), a final `.` or `..`, a mount point in the tree (a directory or a file) and any entry
//! the call's policy does not let it change; what fails after that (the kernel's own refusal, a
//! concurrent change) stops the plan, and the answer says where and how much was done before.
//! Execution ([`steps::run`]) allocates nothing, so it is safe in a child forked from the
//! multi-threaded server.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use cleanroom::protect::view::View;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

use super::resolve::{self, c_path, refused, End, Entry, FileId, Last, Reach, Refusal};
use super::steps::{self, failed, Slot, Step, NO_LINKS, NO_LINKS_SAME_MOUNT};
use crate::protocol::RpcError;

pub use super::steps::Failure;

/// The system calls of one mutating call.
#[derive(Debug)]
pub struct Plan {
    method: &'static str,
    steps: Vec<Step>,
    /// The path each step works on, for the answer when it fails.
    shown: Vec<PathBuf>,
    slots: usize,
    /// The directories (as the kernel resolved them) in which the plan creates or removes
    /// entries.
    changes_in: Vec<PathBuf>,
}

/// A directory of a tree being walked.
struct Level {
    /// Opened at planning (for listing).
    fd: OwnedFd,
    /// Its slot at execution.
    slot: Slot,
    /// Its parent's slot, and its name there.
    at: Slot,
    name: CString,
    /// As the kernel resolved it.
    path: PathBuf,
    entries: std::vec::IntoIter<(CString, FileType)>,
}

/// A level of a tree being copied: a source directory and the new one.
struct CopyLevel {
    /// The source directory, opened at planning (for listing).
    fd: OwnedFd,
    /// The slots of the source directory and of the new one at execution.
    src: Slot,
    dest: Slot,
    /// The source directory as the client spelled it, and its entries.
    path: PathBuf,
    entries: std::vec::IntoIter<(CString, FileType)>,
}

impl CopyLevel {
    /// The level of the source directory `source` entered at planning, copied into `dest`.
    fn of(source: Level, dest: Slot) -> CopyLevel {
        CopyLevel {
            fd: source.fd,
            src: source.slot,
            dest,
            path: source.path,
            entries: source.entries,
        }
    }
}

impl Plan {
    fn new(method: &'static str) -> Plan {
        Plan {
            method,
            steps: Vec::new(),
            shown: Vec::new(),
            slots: 0,
            changes_in: Vec::new(),
        }
    }

    fn slot(&mut self) -> Slot {
        self.slots += 1;
        self.slots - 1
    }

    fn push(&mut self, step: Step, shown: &Path) {
        self.steps.push(step);
        self.shown.push(shown.to_path_buf());
    }

    /// Reaches `entry`'s parent again at execution; returns its slot. A parent hidden from the
    /// call is refused (EACCES) here, so what the kernel would tell about its entries (EEXIST)
    /// is never asked.
    fn parent(&mut self, entry: &Entry, reach: &Reach) -> io::Result<Slot> {
        reach.reveal(entry.dir.as_fd())?;
        let slot = self.slot();
        let id = FileId::of_fd(&entry.dir)?;
        let path = c_path(&entry.parent)?;
        self.push(Step::Open { path, slot, id }, &entry.parent);
        Ok(slot)
    }

    /// Records that entries are created or removed in the directory `dir`: refused in the
    /// kernel's filesystems; decides the route (see [`Plan::changes_any`]).
    fn changes(&mut self, dir: BorrowedFd<'_>, reach: &Reach) -> io::Result<()> {
        reach.may_write_in(dir)?;
        self.changes_in.push(resolve::path_of(dir)?);
        Ok(())
    }

    /// Checks the destination `entry` (the client's `path`) of a call that creates or truncates
    /// a file there (an ordinary final link followed): an existing one must not lie in the
    /// kernel's filesystems nor be a process's own procfs entry; a missing one is created where
    /// the kernel would create it (in the parent, or where a dangling final link points), which
    /// is recorded as a change there. Returns the existing file's identity.
    fn destination(
        &mut self,
        entry: &Entry,
        path: &Path,
        reach: &Reach,
    ) -> Result<Option<FileId>, RpcError> {
        let fail = |e| reach.refused(path, e);
        let how = ResolveFlags::empty();
        match resolve::open_at(&entry.dir, &entry.spelled, OFlags::PATH, Mode::empty(), how) {
            Ok(fd) => {
                let fd = reach.admit(fd).map_err(fail)?;
                reach.may_write_in(fd.as_fd()).map_err(fail)?;
                let stat = rustix::fs::fstat(&fd).map_err(|e| fail(e.into()))?;
                match resolve::kind(&stat) {
                    FileType::RegularFile | FileType::Directory => Ok(Some(FileId::of(&stat))),
                    _ => Err(not_regular(path, self.method)),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let dir = match entry.lstat() {
                    Ok(stat) if resolve::kind(&stat) == FileType::Symlink => {
                        dangling_target_dir(path, reach).map_err(fail)?
                    }
                    _ => rustix::io::dup(&entry.dir).map_err(|e| fail(e.into()))?,
                };
                self.changes(dir.as_fd(), reach).map_err(fail)?;
                Ok(None)
            }
            Err(e) => Err(fail(e)),
        }
    }

    /// Whether a step creates or removes an entry directly in one of `dirs`.
    pub fn changes_any(&self, dirs: &[PathBuf]) -> bool {
        self.changes_in.iter().any(|d| dirs.contains(d))
    }

    /// The descriptor slots [`Plan::execute_in`] needs, all closed.
    pub fn slots(&self) -> Vec<Option<OwnedFd>> {
        (0..self.slots).map(|_| None).collect()
    }

    /// Runs the plan on this thread, absolute paths resolved in `view`.
    pub fn execute(&self, view: &View) -> Result<(), Failure> {
        self.execute_in(&mut self.slots(), view)
    }

    /// Runs the plan with `slots` (from [`Plan::slots`]), absolute paths resolved in `view`:
    /// raw system calls only, no allocation, so it may run in a child forked from a
    /// multi-threaded process. Stops at the first step that fails.
    pub fn execute_in(&self, slots: &mut [Option<OwnedFd>], view: &View) -> Result<(), Failure> {
        for (i, step) in self.steps.iter().enumerate() {
            steps::run(step, slots, view).map_err(|errno| Failure { step: i, errno })?;
        }
        Ok(())
    }

    /// The answer to `failure`: the OS error for the path of the step that failed (-32004,
    /// -32600 or -32603 as [`refused`] says), saying how much was done before when anything
    /// was.
    pub fn answer(&self, failure: Failure) -> RpcError {
        let path = &self.shown[failure.step];
        let done = self.steps[..failure.step]
            .iter()
            .filter(|s| s.changes())
            .count();
        let method = self.method;
        let mut error = match failure.errno {
            failed::CHANGED => RpcError::invalid_request(format!(
                "`{}` was replaced while fs/{method} ran (it is no longer the directory checked)",
                path.display()
            )),
            failed::SAME_FILE => same_file(path),
            failed::NOT_REGULAR => not_regular(path, method),
            errno => refused(path, io::Error::from_raw_os_error(errno)),
        };
        if done > 0 {
            let changes = if done == 1 { "change" } else { "changes" };
            error.message = format!(
                "{} (at `{}`: fs/{method} stopped there after {done} {changes}; they stay)",
                error.message,
                path.display(),
            );
        }
        error
    }

    /// Enters the directory `name` of `dir` (slot `at`) at planning and at execution, as `how`
    /// allows, and lists it.
    fn descend(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        at: Slot,
        path: PathBuf,
        how: ResolveFlags,
    ) -> io::Result<Level> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        let fd = resolve::open_at(dir, name, flags, Mode::empty(), how)?;
        let id = Some(FileId::of_fd(&fd)?);
        let entries = resolve::list(&fd)?.into_iter();
        let slot = self.slot();
        let step = Step::Descend {
            at,
            name: name.to_owned(),
            slot,
            how,
            id,
        };
        self.push(step, &path);
        Ok(Level {
            fd,
            slot,
            at,
            name: name.to_owned(),
            path,
            entries,
        })
    }

    /// [`Plan::descend`] for a removal (the directory `shown` is emptied: entries are removed
    /// there); a mount point is refused naming it.
    fn enter_removal(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        at: Slot,
        shown: PathBuf,
        path: &Path,
    ) -> Result<Level, RpcError> {
        self.changes_in.push(shown.clone());
        self.descend(dir, name, at, shown.clone(), NO_LINKS_SAME_MOUNT)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EXDEV) => mount_point(path, &shown),
                _ => refused(&shown, e),
            })
    }

    /// The steps removing the directory `entry` names (slot `at`, resolved to `target`) and
    /// everything in it, deepest first, never following a link nor crossing a mount; refused
    /// before any step when the policy forbids changing part of it or a mount point is in it.
    fn remove_tree(
        &mut self,
        entry: &Entry,
        at: Slot,
        target: PathBuf,
        reach: &Reach,
        path: &Path,
    ) -> Result<(), RpcError> {
        let first = self.enter_removal(entry.dir.as_fd(), &entry.name, at, target, path)?;
        let mut stack = vec![first];
        while let Some(top) = stack.last_mut() {
            let Some((name, kind)) = top.entries.next() else {
                let done = stack.pop().expect("a level");
                self.push(Step::Close(done.slot), &done.path);
                let (at, name) = (done.at, done.name);
                self.push(Step::Rmdir { at, name }, &done.path);
                continue;
            };
            let shown = top.path.join(OsStr::from_bytes(name.as_bytes()));
            check_change(reach, &shown, path)?;
            let kind = entry_kind(&top.fd, &name, kind).map_err(|e| refused(&shown, e))?;
            if is_mount_root(&top.fd, &name, &shown, reach).map_err(|e| refused(&shown, e))? {
                return Err(mount_point(path, &shown));
            }
            if kind == FileType::Directory {
                let level = self.enter_removal(top.fd.as_fd(), &name, top.slot, shown, path)?;
                stack.push(level);
                continue;
            }
            let at = top.slot;
            self.push(Step::Unlink { at, name }, &shown);
        }
        Ok(())
    }

    /// The steps copying the directory `source` (the client's `from`) to a new directory `dest`
    /// (links as links; other special files skipped, as the reference does).
    fn copy_tree(&mut self, ends: &CopyEnds<'_>, reach: &Reach) -> Result<(), RpcError> {
        let (from, source, dest, to) = (ends.from, ends.source, ends.dest, ends.to);
        let fail_from = |e| refused(from, e);
        let src_slot = self.slot();
        let id = FileId::of_fd(source).map_err(fail_from)?;
        let path = c_path(from).map_err(fail_from)?;
        self.push(
            Step::Open {
                path,
                slot: src_slot,
                id,
            },
            from,
        );
        let dest_at = self.parent(dest, reach).map_err(|e| refused(to, e))?;
        self.changes(dest.dir.as_fd(), reach)
            .map_err(|e| refused(to, e))?;
        let entries = resolve::list(source).map_err(fail_from)?.into_iter();
        let dest_slot = self.make_dir(dest_at, &dest.name, to);
        let top = CopyLevel {
            fd: source.try_clone().map_err(fail_from)?,
            src: src_slot,
            dest: dest_slot,
            path: from.to_path_buf(),
            entries,
        };
        let mut stack = vec![top];
        while let Some(level) = stack.last_mut() {
            let Some((name, kind)) = level.entries.next() else {
                let done = stack.pop().expect("a level");
                self.push(Step::Close(done.src), &done.path);
                self.push(Step::Close(done.dest), &done.path);
                continue;
            };
            if let Some(deeper) = self.copy_entry(level, name, kind, reach)? {
                stack.push(deeper);
            }
        }
        Ok(())
    }

    /// The steps copying the entry `name` (of type `kind`) of `level`'s source directory; the
    /// level to copy next when it is a directory.
    fn copy_entry(
        &mut self,
        level: &CopyLevel,
        name: CString,
        kind: FileType,
        reach: &Reach,
    ) -> Result<Option<CopyLevel>, RpcError> {
        let (src, dst) = (level.src, level.dest);
        let dir = &level.fd;
        let entry_path = level.path.join(OsStr::from_bytes(name.as_bytes()));
        let fail = |e: io::Error| refused(&entry_path, e);
        // An entry can be a mount point showing procfs, a process's own entries included.
        let flags = OFlags::PATH | OFlags::NOFOLLOW;
        let entry = resolve::open_at(dir, &name, flags, Mode::empty(), NO_LINKS)
            .and_then(|fd| reach.admit(fd))
            .map_err(fail)?;
        match entry_kind(dir, &name, kind).map_err(fail)? {
            FileType::Directory => {
                let source = self
                    .descend(dir.as_fd(), &name, src, entry_path.clone(), NO_LINKS)
                    .map_err(fail)?;
                let dest = self.make_dir(dst, &name, &entry_path);
                return Ok(Some(CopyLevel::of(source, dest)));
            }
            FileType::RegularFile => {
                let step = Step::CopyFile {
                    from: src,
                    from_name: name.clone(),
                    to: dst,
                    to_name: name,
                    new: true,
                };
                self.push(step, &entry_path);
            }
            FileType::Symlink => {
                reach.reveal(entry.as_fd()).map_err(fail)?;
                let target =
                    rustix::fs::readlinkat(&entry, c"", Vec::new()).map_err(|e| fail(e.into()))?;
                let step = Step::Symlink {
                    target,
                    at: dst,
                    name,
                };
                self.push(step, &entry_path);
            }
            _ => {}
        }
        Ok(None)
    }

    /// The steps copying the regular file `source` (the client's `from`) to `dest` (`to`),
    /// refused when `dest` is the source itself.
    fn copy_file(&mut self, ends: &CopyEnds<'_>, reach: &Reach) -> Result<(), RpcError> {
        let (from, source, dest, to) = (ends.from, ends.source, ends.dest, ends.to);
        let fail_from = |e| refused(from, e);
        let entry = entry_of(from, reach, libc::EISDIR)?;
        let from_at = self.parent(&entry, reach).map_err(fail_from)?;
        let to_at = self.parent(dest, reach).map_err(|e| reach.refused(to, e))?;
        let source_id = FileId::of_fd(source).map_err(fail_from)?;
        if self.destination(dest, to, reach)? == Some(source_id) {
            return Err(same_file(to));
        }
        let step = Step::CopyFile {
            from: from_at,
            from_name: entry.name.clone(),
            to: to_at,
            to_name: dest.spelled.clone(),
            new: false,
        };
        self.push(step, to);
        Ok(())
    }

    /// Creates the new directory `name` in `at` and enters it; returns its slot.
    fn make_dir(&mut self, at: Slot, name: &CStr, shown: &Path) -> Slot {
        let name = name.to_owned();
        let slot = self.slot();
        let mkdir = Step::Mkdir {
            at,
            name: name.clone(),
            existing_ok: false,
        };
        self.push(mkdir, shown);
        let how = NO_LINKS_SAME_MOUNT;
        let descend = Step::Descend {
            at,
            name,
            slot,
            how,
            id: None,
        };
        self.push(descend, shown);
        slot
    }
}

/// The directory a dangling final link of `path` would have a new file created in (the kernel
/// follows it when it creates): the directory where the walk through its links finds the final
/// name missing.
fn dangling_target_dir(path: &Path, reach: &Reach) -> io::Result<OwnedFd> {
    match reach.walk(path, Last::Follow, &mut |_| Ok(()))?.end {
        End::Missing { dir, last: true } => Ok(dir),
        End::Missing { .. } => Err(io::Error::from_raw_os_error(libc::ENOENT)),
        End::Found(_) => Err(io::Error::from_raw_os_error(libc::EEXIST)),
    }
}

/// The type of the entry `name` of `dir` (`kind` as the directory said; asked when unknown).
fn entry_kind(dir: &OwnedFd, name: &CStr, kind: FileType) -> io::Result<FileType> {
    match kind {
        FileType::Unknown => rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map(|stat| resolve::kind(&stat))
            .map_err(Into::into),
        kind => Ok(kind),
    }
}

/// Whether the entry `name` of `dir` (at `shown`) is the root of a mount: in the call's view,
/// or at the same path in the server's own mount namespace, whose mounts the kernel checks when
/// the server removes an entry (EBUSY), whether the view has them or not (a mount the host made
/// later that did not propagate into the environment).
fn is_mount_root(dir: &OwnedFd, name: &CStr, shown: &Path, reach: &Reach) -> io::Result<bool> {
    let mount_root = |stx: rustix::fs::Statx| {
        let root = rustix::fs::StatxAttributes::MOUNT_ROOT;
        stx.stx_attributes_mask.contains(root) && stx.stx_attributes.contains(root)
    };
    let (flags, mask) = (AtFlags::SYMLINK_NOFOLLOW, rustix::fs::StatxFlags::empty());
    if mount_root(rustix::fs::statx(dir, name, flags, mask)?) {
        return Ok(true);
    }
    Ok(!reach.view().is_own()
        && rustix::fs::statx(rustix::fs::CWD, shown, flags, mask).is_ok_and(mount_root))
}

/// -32600: `fs/remove` refuses `path` because `shown`, in its tree, is a mount point.
fn mount_point(path: &Path, shown: &Path) -> RpcError {
    refuse_removal(
        path,
        &format!(
            "`{}` is a mount point, and fs/remove does not cross into another filesystem",
            shown.display()
        ),
    )
}

/// -32600: a destination of fs/`method` that is not a regular file.
fn not_regular(path: &Path, method: &str) -> RpcError {
    RpcError::invalid_request(format!(
        "`{}` is not a regular file: fs/{method} writes only regular files (a FIFO, a device or a \
         socket is refused)",
        path.display()
    ))
}

/// -32600: fs/copy of a file onto itself.
fn same_file(path: &Path) -> RpcError {
    RpcError::invalid_request(format!(
        "fs/copy refuses to copy a file onto itself: `{}` is the source file",
        path.display()
    ))
}

/// Refuses (-32600), before anything is planned, a mutation of `path` whose resolution passes
/// through a directory hidden from the call (whatever then exists there or not is not told),
/// or that spells a `..` after a symlink (the kernel climbs from the link's target, where the
/// reference, and the client, would climb from the link); `last`: whether a final link is
/// followed.
fn screen(path: &Path, last: Last, reach: &Reach) -> Result<(), RpcError> {
    let dotdot = resolve::names(path).contains(&&b".."[..]);
    if !dotdot && !reach.handles_reads() {
        return Ok(());
    }
    match reach.walk(path, last, &mut |dir| reach.reveal(dir)) {
        Ok(walked) if walked.dotdot_after_link => {
            Err(refused(path, Refusal::DotDotAfterLink.error()))
        }
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => Err(refused(path, e)),
        _ => Ok(()),
    }
}

/// The entry `path` names (`what_if_none`: the errno when it names none, `/`).
fn entry_of(path: &Path, reach: &Reach, what_if_none: i32) -> Result<Entry, RpcError> {
    let fail = |e| reach.refused(path, e);
    reach
        .entry(path)
        .map_err(fail)?
        .ok_or_else(|| fail(io::Error::from_raw_os_error(what_if_none)))
}

/// `fs/writeFile`: create or truncate the file (a final ordinary link followed) and write.
pub fn write_file(path: &Path, data: Vec<u8>, reach: &Reach) -> Result<Plan, RpcError> {
    screen(path, Last::Follow, reach)?;
    let entry = entry_of(path, reach, libc::EISDIR)?;
    let mut plan = Plan::new("writeFile");
    let at = plan
        .parent(&entry, reach)
        .map_err(|e| reach.refused(path, e))?;
    plan.destination(&entry, path, reach)?;
    let name = entry.spelled.clone();
    plan.push(Step::Write { at, name, data }, path);
    Ok(plan)
}

/// `fs/createDirectory` (`recursive`: every missing ancestor too, existing ones followed).
pub fn create_directory(path: &Path, recursive: bool, reach: &Reach) -> Result<Plan, RpcError> {
    let fail = |e| reach.refused(path, e);
    screen(path, Last::Follow, reach)?;
    let mut plan = Plan::new("createDirectory");
    if !recursive {
        let entry = entry_of(path, reach, libc::EEXIST)?;
        let at = plan.parent(&entry, reach).map_err(fail)?;
        plan.changes(entry.dir.as_fd(), reach).map_err(fail)?;
        let name = entry.name.clone();
        plan.push(
            Step::Mkdir {
                at,
                name,
                existing_ok: false,
            },
            path,
        );
        return Ok(plan);
    }
    let names = resolve::names(path);
    let flags = OFlags::PATH | OFlags::DIRECTORY;
    let (existing, dir) = reach.deepest_existing(&names, flags).map_err(fail)?;
    reach.reveal(dir.as_fd()).map_err(fail)?;
    if existing == names.len() {
        return Ok(plan);
    }
    plan.changes(dir.as_fd(), reach).map_err(fail)?;
    let prefix = resolve::prefix_path(&names[..existing]);
    let mut at = plan.slot();
    let id = FileId::of_fd(&dir).map_err(fail)?;
    let c_prefix = c_path(&prefix).map_err(fail)?;
    plan.push(
        Step::Open {
            path: c_prefix,
            slot: at,
            id,
        },
        &prefix,
    );
    for (i, name) in names.iter().enumerate().skip(existing) {
        let shown = resolve::prefix_path(&names[..=i]);
        let name = CString::new(*name).map_err(|_| fail(io::ErrorKind::InvalidInput.into()))?;
        plan.push(
            Step::Mkdir {
                at,
                name: name.clone(),
                existing_ok: true,
            },
            &shown,
        );
        if i + 1 < names.len() {
            let slot = plan.slot();
            plan.push(Step::Enter { at, name, slot }, &shown);
            // One directory open at a time, however deep the path.
            plan.push(Step::Close(at), &shown);
            at = slot;
        }
    }
    Ok(plan)
}

/// `fs/remove` (see the module's invariants for what is refused before anything is removed).
pub fn remove(path: &Path, recursive: bool, force: bool, reach: &Reach) -> Result<Plan, RpcError> {
    let fail = |e| reach.refused(path, e);
    screen(path, Last::NoFollow, reach)?;
    let mut plan = Plan::new("remove");
    // Missing is fine with `force`, unless the call may not know it (beneath a hidden path).
    let missing = |e: io::Error| match reach.hide(path, e) {
        e if force && e.kind() == io::ErrorKind::NotFound => Ok(()),
        e => Err(refused(path, e)),
    };
    let entry = match reach.entry(path) {
        Ok(Some(entry)) if !entry.is_dot() => entry,
        Ok(_) => return Err(refuse_removal(path, "it names no entry of a directory")),
        Err(e) => return missing(e).map(|()| plan),
    };
    reach.reveal(entry.dir.as_fd()).map_err(fail)?;
    let stat = match entry.lstat() {
        Ok(stat) => stat,
        Err(e) => return missing(e).map(|()| plan),
    };
    let kind = resolve::kind(&stat);
    if entry.trailing_slash && kind == FileType::Symlink {
        return Err(refuse_removal(
            path,
            "it ends in a slash after a symbolic link, so it names the link's target, and \
             fs/remove never follows a link (name the link without the slash to remove it)",
        ));
    }
    if entry.trailing_slash && kind != FileType::Directory {
        return Err(fail(io::Error::from_raw_os_error(libc::ENOTDIR)));
    }
    let target = entry.resolved_path().map_err(fail)?;
    let parent = target.parent().unwrap_or(Path::new("/")).to_path_buf();
    check_change(reach, &parent, path)?;
    check_change(reach, &target, path)?;
    let at = plan.parent(&entry, reach).map_err(fail)?;
    plan.changes(entry.dir.as_fd(), reach).map_err(fail)?;
    let name = entry.name.clone();
    match (kind, recursive) {
        (FileType::Directory, true) => plan.remove_tree(&entry, at, target, reach, path)?,
        (FileType::Directory, false) => plan.push(Step::Rmdir { at, name }, path),
        _ => plan.push(Step::Unlink { at, name }, path),
    }
    Ok(plan)
}

/// -32600: `fs/remove` refuses `path` because `why`; nothing was removed.
fn refuse_removal(path: &Path, why: &str) -> RpcError {
    RpcError::invalid_request(format!(
        "fs/remove refuses `{}`: {why}; nothing was removed",
        path.display()
    ))
}

/// -32600 unless the call's policy lets it change `entry` (as the kernel resolved it).
fn check_change(reach: &Reach, entry: &Path, path: &Path) -> Result<(), RpcError> {
    match reach.may_change(entry) {
        true => Ok(()),
        false => Err(refuse_removal(
            path,
            &format!(
                "{} at `{}` (the call's policy does not let it change that path)",
                io::Error::from_raw_os_error(libc::EACCES),
                entry.display()
            ),
        )),
    }
}

/// The two ends of an `fs/copy`: the source as the client spelled it (`from`) and opened
/// (`source`), the destination as spelled (`to`) and split into its parent and name (`dest`).
struct CopyEnds<'a> {
    from: &'a Path,
    source: &'a OwnedFd,
    dest: &'a Entry,
    to: &'a Path,
}

/// `fs/copy`: a file, a symbolic link (as a link), or with `recursive` a directory tree, never
/// into itself.
pub fn copy(from: &Path, to: &Path, recursive: bool, reach: &Reach) -> Result<Plan, RpcError> {
    let source = reach
        .open(from, OFlags::PATH, Mode::empty(), Last::NoFollow)
        .and_then(|fd| {
            reach.reveal(fd.as_fd())?;
            Ok(fd)
        })
        .map_err(|e| reach.refused(from, e))?;
    let kind = rustix::fs::fstat(&source)
        .map(|stat| resolve::kind(&stat))
        .map_err(|e| refused(from, e.into()))?;
    screen(to, Last::Follow, reach)?;
    let dest = entry_of(to, reach, libc::EEXIST)?;
    let ends = CopyEnds {
        from,
        source: &source,
        dest: &dest,
        to,
    };
    let mut plan = Plan::new("copy");
    match kind {
        FileType::Directory if !recursive => Err(RpcError::invalid_request(
            "fs/copy requires recursive: true when sourcePath is a directory",
        )),
        FileType::Directory => {
            let source_path = resolve::path_of(source.as_fd()).map_err(|e| refused(from, e))?;
            let dest_path = dest.resolved_path().map_err(|e| reach.refused(to, e))?;
            if dest_path.starts_with(&source_path) {
                return Err(RpcError::invalid_request(
                    "fs/copy cannot copy a directory to itself or one of its descendants",
                ));
            }
            plan.copy_tree(&ends, reach)?;
            Ok(plan)
        }
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(&source, c"", Vec::new())
                .map_err(|e| refused(from, e.into()))?;
            let at = plan
                .parent(&dest, reach)
                .map_err(|e| reach.refused(to, e))?;
            plan.changes(dest.dir.as_fd(), reach)
                .map_err(|e| reach.refused(to, e))?;
            let name = dest.spelled.clone();
            plan.push(Step::Symlink { target, at, name }, to);
            Ok(plan)
        }
        FileType::RegularFile => {
            plan.copy_file(&ends, reach)?;
            Ok(plan)
        }
        _ => Err(RpcError::invalid_request(
            "fs/copy only supports regular files, directories, and symlinks",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A private dir with `tree/sub/file` and `outside/keep`.
    fn layout() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        fs::create_dir_all(base.join("tree/sub")).unwrap();
        fs::create_dir(base.join("outside")).unwrap();
        fs::write(base.join("tree/sub/file"), "x").unwrap();
        fs::write(base.join("outside/keep"), "keep").unwrap();
        (dir, base)
    }

    /// Replaces the directory `path` by a symlink to `target` (the old one moved aside).
    fn swap_for_link(path: &Path, target: &Path) {
        fs::rename(path, path.with_extension("old")).unwrap();
        std::os::unix::fs::symlink(target, path).unwrap();
    }

    #[test]
    fn a_directory_swapped_for_a_link_after_planning_is_not_followed_by_the_removal() {
        let (_dir, base) = layout();
        let plan = remove(&base.join("tree"), true, false, &Reach::default()).unwrap();
        swap_for_link(&base.join("tree/sub"), &base.join("outside"));
        let failure = plan.execute(&View::own()).unwrap_err();
        // The link is not entered (O_NOFOLLOW | O_DIRECTORY, RESOLVE_NO_SYMLINKS).
        assert!(
            [libc::ELOOP, libc::ENOTDIR].contains(&failure.errno),
            "{}",
            plan.answer(failure).message
        );
        assert_eq!(
            fs::read_to_string(base.join("outside/keep")).unwrap(),
            "keep"
        );
    }

    /// A planned write of `tree/sub/new` below `base`.
    fn plan_new_file(base: &Path) -> Plan {
        write_file(
            &base.join("tree/sub/new"),
            b"data".to_vec(),
            &Reach::default(),
        )
        .unwrap()
    }

    #[test]
    fn a_parent_swapped_for_a_link_after_planning_is_not_written_through() {
        let (_dir, base) = layout();
        let plan = plan_new_file(&base);
        swap_for_link(&base.join("tree/sub"), &base.join("outside"));
        let failure = plan.execute(&View::own()).unwrap_err();
        assert_eq!(failure.errno, failed::CHANGED);
        let answer = plan.answer(failure);
        assert!(
            answer.message.contains("was replaced"),
            "{}",
            answer.message
        );
        assert!(!base.join("outside/new").exists());
    }

    #[test]
    fn a_parent_swapped_for_a_magic_link_after_planning_is_refused_at_execution() {
        let (_dir, base) = layout();
        let plan = plan_new_file(&base);
        let outside = base.join("outside");
        let magic = Path::new("/proc/self/root").join(outside.strip_prefix("/").unwrap());
        swap_for_link(&base.join("tree/sub"), &magic);
        let failure = plan.execute(&View::own()).unwrap_err();
        assert_eq!(failure.errno, libc::ELOOP);
        assert!(plan.answer(failure).message.contains("magic link"));
        assert!(!outside.join("new").exists());
    }

    #[test]
    fn a_tree_copied_into_a_directory_swapped_for_a_link_stays_out_of_it() {
        let (_dir, base) = layout();
        let plan = copy(
            &base.join("tree"),
            &base.join("copy"),
            true,
            &Reach::default(),
        )
        .unwrap();
        fs::create_dir(base.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(base.join("elsewhere"), base.join("copy")).unwrap();
        let failure = plan.execute(&View::own()).unwrap_err();
        assert_eq!(failure.errno, libc::EEXIST);
        assert_eq!(fs::read_dir(base.join("elsewhere")).unwrap().count(), 0);
    }

    #[test]
    fn a_magic_link_is_refused_wherever_it_appears_in_a_path() {
        let (_dir, base) = layout();
        std::os::unix::fs::symlink("/proc/self/root", base.join("tree/esc")).unwrap();
        let keep = base.join("outside/keep");
        let through_link = base.join("tree/esc").join(keep.strip_prefix("/").unwrap());
        for path in [
            PathBuf::from("/proc/self/root").join(keep.strip_prefix("/").unwrap()),
            through_link,
        ] {
            let answer = remove(&path, false, false, &Reach::default()).unwrap_err();
            assert_eq!(answer.code, -32600, "{}", answer.message);
            assert!(answer.message.contains("magic link"), "{}", answer.message);
            let answer = write_file(&path, b"x".to_vec(), &Reach::default()).unwrap_err();
            assert!(answer.message.contains("magic link"), "{}", answer.message);
        }
        assert_eq!(fs::read_to_string(keep).unwrap(), "keep");
    }

    #[test]
    fn a_failure_after_changes_says_where_the_call_stopped() {
        let (_dir, base) = layout();
        fs::write(base.join("tree/a"), "a").unwrap();
        let plan = remove(&base.join("tree"), true, false, &Reach::default()).unwrap();
        fs::write(base.join("tree/sub/late"), "late").unwrap();
        let failure = plan.execute(&View::own()).unwrap_err();
        assert_eq!(failure.errno, libc::ENOTEMPTY);
        let answer = plan.answer(failure);
        assert!(
            answer.message.contains("stopped there after"),
            "{}",
            answer.message
        );
        assert!(base.join("tree/sub/late").exists());
    }

    #[test]
    fn a_real_stale_handle_is_told_as_the_os_says_and_one_change_is_one() {
        let (_dir, base) = layout();
        let plan = remove(&base.join("tree"), true, false, &Reach::default()).unwrap();
        let second_change = plan
            .steps
            .iter()
            .enumerate()
            .filter(|(_, s)| s.changes())
            .nth(1)
            .unwrap()
            .0;
        let failure = Failure {
            step: second_change,
            errno: libc::ESTALE,
        };
        let answer = plan.answer(failure);
        assert!(
            answer
                .message
                .contains(&io::Error::from_raw_os_error(libc::ESTALE).to_string())
                && !answer.message.contains("was replaced")
                && answer.message.contains("after 1 change;"),
            "{}",
            answer.message
        );
    }
}
