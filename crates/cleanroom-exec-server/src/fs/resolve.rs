//! Resolving a client's path: the one way every `fs/*` method reaches the filesystem.
//!
//! Owns: [`Reach`], a call's view of the filesystem: the mount namespace a process of its policy
//! works in (the environment's private `/tmp`, `/var/tmp` and `/dev/shm`, and the host paths
//! such a process binds there), entered through a descriptor of its root ([`View`]), and the call's policy asked where Landlock does not decide
//! (`stat`, `O_PATH`, `readlink` reveal what they find without a Landlock check). Through it:
//! opening an absolute path from a `file:` URI, splitting it into its parent directory and its
//! final name ([`Entry`]), walking it a name at a time ([`Reach::walk`]), and refusing what no
//! call may touch: any process's own procfs entries (`/proc/<pid>/…`, `/proc/<pid>/task/<tid>/…`,
//! `/proc/self`, `/proc/thread-self`: environments, memory, maps, descriptors), decided on the
//! object the kernel resolved, wherever procfs is mounted, and writes into the kernel's
//! filesystems (procfs, sysfs and those mounted beneath `/sys`).
//!
//! Invariant: the kernel resolves every path of a call inside the view's root and without magic
//! links (`/proc/<pid>/root`, `/proc/<pid>/cwd`, `/proc/<pid>/fd/N`, `/dev/fd/N`, the same under
//! `/proc/thread-self`): they lead to what the server's thread-group leader sees, not to what the
//! call's policy shows its thread or child, so a path through one, spelled directly or reached
//! through ordinary symlinks, is refused (ELOOP, answered -32600 naming why). What follows the
//! resolution works on the descriptors (`*at` calls on the parent and the final name), so no
//! client spelling is resolved twice by a call that follows magic links.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use cleanroom::protect::view::View;
use cleanroom::protect::{Access, EnforcedBy, Policy, Rule, Sandbox};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};

pub use cleanroom::protect::view::{c_path, open_at, path_of};

use super::os_error;
use crate::protocol::RpcError;

/// How the final component of a path is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Last {
    /// An ordinary symlink there is followed (a magic link never is).
    Follow,
    /// A symlink there is opened itself (`O_PATH`) or refused (ELOOP).
    NoFollow,
}

/// The entries of the directory `dir` (any descriptor of it, `O_PATH` too: it is opened again
/// for reading, which is what Landlock checks), without `.` and `..`, each with the type the
/// directory gives (`Unknown` where the filesystem does not say).
pub fn list(dir: impl AsFd) -> io::Result<Vec<(CString, FileType)>> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY;
    let readable = open_at(dir, c".", flags, Mode::empty(), ResolveFlags::empty())?;
    let mut reader = rustix::fs::Dir::new(readable)?;
    let mut entries = Vec::new();
    while let Some(entry) = reader.read() {
        let entry = entry?;
        if !matches!(entry.file_name().to_bytes(), b"." | b"..") {
            entries.push((entry.file_name().to_owned(), entry.file_type()));
        }
    }
    Ok(entries)
}

/// The names of the absolute `path`, as spelled (`.` and `..` kept: the kernel resolves them).
pub fn names(path: &Path) -> Vec<&[u8]> {
    path.as_os_str()
        .as_bytes()
        .split(|&b| b == b'/')
        .filter(|name| !name.is_empty())
        .collect()
}

/// `/` followed by `names`.
pub fn prefix_path(names: &[&[u8]]) -> PathBuf {
    let mut path = PathBuf::from("/");
    for name in names {
        path.push(OsStr::from_bytes(name));
    }
    path
}

/// A file's identity: device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The identity in `stat`.
    pub fn of(stat: &Stat) -> FileId {
        FileId {
            dev: stat.st_dev,
            ino: stat.st_ino,
        }
    }

    /// The identity of the file `fd` is open on.
    pub fn of_fd(fd: impl AsFd) -> io::Result<FileId> {
        Ok(FileId::of(&rustix::fs::fstat(fd)?))
    }
}

/// The file type in `stat`.
pub fn kind(stat: &Stat) -> FileType {
    FileType::from_raw_mode(stat.st_mode)
}

/// A path split into its parent directory, opened, and its final name.
#[derive(Debug)]
pub struct Entry {
    /// The parent directory (`O_PATH`), resolved without magic links, ordinary links followed.
    pub dir: OwnedFd,
    /// The parent as the client spelled it.
    pub parent: PathBuf,
    /// The final name, without the slashes that may follow it.
    pub name: CString,
    /// Whether the path ends in a slash (`link/` names the link's target, not the link).
    pub trailing_slash: bool,
    /// The final name with the slash the client put after it (the kernel's rules for it apply).
    pub spelled: CString,
}

impl Entry {
    /// `lstat` of the final name (a symlink is not followed, whatever slash follows it).
    pub fn lstat(&self) -> io::Result<Stat> {
        rustix::fs::statat(&self.dir, &self.name, AtFlags::SYMLINK_NOFOLLOW).map_err(Into::into)
    }

    /// Whether the final name is `.` or `..` (it names no entry of the parent).
    pub fn is_dot(&self) -> bool {
        matches!(self.name.as_bytes(), b"." | b"..")
    }

    /// The path of the entry: the parent as the kernel resolved it, and the name.
    pub fn resolved_path(&self) -> io::Result<PathBuf> {
        Ok(path_of(self.dir.as_fd())?.join(OsStr::from_bytes(self.name.as_bytes())))
    }
}

/// The error answering `e` for `path`: a magic link (or a loop) is -32600 naming why; the rest
/// as [`os_error`].
pub fn refused(path: &Path, e: io::Error) -> RpcError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        return RpcError::invalid_request(format!(
            "path `{}` is refused: {e}: fs/* calls do not follow magic links (/proc/<pid>/root, \
             /proc/<pid>/cwd, /proc/<pid>/fd/N, /dev/fd/N, …), and this path goes through one \
             (or its links loop)",
            path.display()
        ));
    }
    if let Some(why) = Refusal::of(&e) {
        return RpcError::invalid_request(format!("path `{}` is refused: {why}", path.display()));
    }
    os_error(e)
}

/// What no call may touch, whatever its policy, as an error a plan can carry (an errno outside
/// the kernel's range, so a real one is never taken for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A process's own procfs entries (`/proc/<pid>/…`).
    ProcessEntry,
    /// A write into procfs, sysfs or a filesystem mounted beneath `/sys`.
    KernelFs,
    /// A `..` after a symlink in a mutating call.
    DotDotAfterLink,
}

impl Refusal {
    const ERRNOS: [(Refusal, i32); 3] = [
        (Refusal::ProcessEntry, -101),
        (Refusal::KernelFs, -102),
        (Refusal::DotDotAfterLink, -103),
    ];

    /// The errno standing for it.
    pub fn errno(self) -> i32 {
        Self::ERRNOS
            .iter()
            .find(|(r, _)| *r == self)
            .map_or(-100, |(_, errno)| *errno)
    }

    /// As an I/O error.
    pub fn error(self) -> io::Error {
        io::Error::from_raw_os_error(self.errno())
    }

    /// The refusal `e` stands for, if any.
    pub fn of(e: &io::Error) -> Option<Refusal> {
        let errno = e.raw_os_error()?;
        Self::ERRNOS
            .iter()
            .find(|(_, e)| *e == errno)
            .map(|(r, _)| *r)
    }

    fn reason(self) -> &'static str {
        match self {
            Refusal::ProcessEntry => {
                "it is a process's own /proc entry (/proc/<pid>/…, /proc/self, /proc/thread-self: \
                 fs/* calls read and change no process's environment, memory, maps or \
                 descriptors, the server's included)"
            }
            Refusal::KernelFs => {
                "fs/* calls do not write into the kernel's filesystems (procfs, sysfs, and those \
                 mounted beneath /sys)"
            }
            Refusal::DotDotAfterLink => {
                "a `..` after a symbolic link climbs from the link's target, not from the link \
                 (write the path without the link, or without the `..`)"
            }
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

/// The filesystem magic numbers of procfs, sysfs and the filesystems mounted beneath `/sys`
/// (cgroup v1 and v2, securityfs, debugfs, tracefs, bpf, pstore, efivarfs, configfs).
const KERNEL_FS: [i64; 11] = [
    0x9fa0,      // proc
    0x6265_6572, // sysfs
    0x27e0eb,    // cgroup
    0x6367_7270, // cgroup2
    0x7363_6673, // securityfs
    0x6462_6720, // debugfs
    0x7472_6163, // tracefs
    0xcafe_4a11, // bpf
    0x6165_676c, // pstore
    0xde5e_81e4, // efivarfs
    0x6265_6570, // configfs
];

/// The magic number of procfs, and the inode of its root.
const PROC_MAGIC: i64 = 0x9fa0;
const PROC_ROOT_INO: u64 = 1;

/// Whether `fd` lies on one of the kernel's filesystems ([`KERNEL_FS`]) or anywhere beneath
/// `/sys`, whatever is mounted there (a host with cgroup v1 mounts a tmpfs on `/sys/fs/cgroup`
/// to hold its hierarchies): what a plan checks, in the server.
pub fn on_kernel_fs(fd: BorrowedFd<'_>) -> io::Result<bool> {
    Ok(is_kernel_fs_type(fd)? || path_of(fd)?.starts_with("/sys"))
}

/// Whether `fd` lies on one of the kernel's filesystems ([`KERNEL_FS`]), by its type alone: one
/// raw system call, nothing allocated (safe in a forked child, which re-checks a directory it
/// enters; the plan, made in the server, checked the paths with [`on_kernel_fs`]).
pub fn is_kernel_fs_type(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let magic = rustix::fs::fstatfs(fd)?.f_type as i64;
    Ok(KERNEL_FS.contains(&magic))
}

/// A call's view of the filesystem and its policy (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Reach {
    /// The rules (canonical, existing paths only); `None`: nothing restricted.
    policy: Option<Policy>,
    /// Whether some path is `none` (else every path is readable).
    handles_reads: bool,
    /// The mount namespace paths are resolved in.
    view: View,
}

impl Reach {
    /// The reach of a call confined by `sandbox` (`None`: unrestricted), in `view`.
    pub fn of(sandbox: Option<&Sandbox>, view: View) -> Reach {
        let Some(sandbox) = sandbox else {
            return Reach {
                view,
                ..Reach::default()
            };
        };
        let mut policy = Policy::new();
        policy.rules = sandbox
            .status()
            .rules
            .iter()
            .filter(|r| r.enforced_by != EnforcedBy::Absent)
            .map(|r| Rule {
                path: r.path.clone(),
                access: r.access,
                reason: r.reason.clone(),
            })
            .collect();
        Reach {
            policy: Some(policy),
            handles_reads: sandbox.status().handles_reads,
            view,
        }
    }

    /// The mount namespace the call works in.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// Whether some path is hidden from the call (a `none` rule).
    pub fn handles_reads(&self) -> bool {
        self.handles_reads
    }

    /// Opens the absolute `path` with `flags` (plus `O_CLOEXEC`) in the call's view, resolved by
    /// the kernel without magic links; with [`Last::NoFollow`] a final symlink is not followed.
    /// Per-process procfs entries are refused ([`Reach::admit`]).
    pub fn open(&self, path: &Path, flags: OFlags, mode: Mode, last: Last) -> io::Result<OwnedFd> {
        let nofollow = match last {
            Last::Follow => OFlags::empty(),
            Last::NoFollow => OFlags::NOFOLLOW,
        };
        let fd = self
            .view
            .open_path(path, flags | nofollow, mode, ResolveFlags::empty())?;
        self.admit(fd)
    }

    /// `fd`, unless it lies on procfs in a process's own entries: the first name of its resolved
    /// path below the procfs root (any procfs mount) is a pid or tid, `self` or `thread-self`.
    /// Any process's, not only the server's: a call on the blocking pool has no Landlock domain,
    /// so the kernel's ptrace scoping that keeps a sandboxed process out of other processes'
    /// entries never applies to it. A procfs object whose procfs root cannot be found (a bind
    /// mount of a process's directory elsewhere) is refused too.
    pub fn admit(&self, fd: OwnedFd) -> io::Result<OwnedFd> {
        if rustix::fs::fstatfs(&fd)?.f_type as i64 != PROC_MAGIC {
            return Ok(fd);
        }
        // Where procfs is mounted: the deepest ancestor of the resolved path that is its root.
        let path = path_of(fd.as_fd()).map_err(|_| Refusal::ProcessEntry.error())?;
        let components: Vec<Component<'_>> = path.components().collect();
        for depth in (1..=components.len()).rev() {
            let prefix: PathBuf = components[..depth].iter().collect();
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW;
            let how = ResolveFlags::NO_SYMLINKS;
            let Ok(at) = self.view.open_path(&prefix, flags, Mode::empty(), how) else {
                continue;
            };
            let root = rustix::fs::fstatfs(&at)?.f_type as i64 == PROC_MAGIC
                && rustix::fs::fstat(&at)?.st_ino == PROC_ROOT_INO;
            if root {
                return match components.get(depth) {
                    Some(Component::Normal(top)) if is_per_process(top) => {
                        Err(Refusal::ProcessEntry.error())
                    }
                    _ => Ok(fd),
                };
            }
        }
        Err(Refusal::ProcessEntry.error())
    }

    /// Splits and opens `path` (its parent in the call's view); `Ok(None)` when it has no final
    /// name (`/`).
    pub fn entry(&self, path: &Path) -> io::Result<Option<Entry>> {
        let bytes = path.as_os_str().as_bytes();
        let trimmed = match bytes.iter().rposition(|&b| b != b'/') {
            Some(last) => &bytes[..=last],
            None => return Ok(None),
        };
        let (parent, name) = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(0) => (&b"/"[..], &trimmed[1..]),
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => return Ok(None),
        };
        let parent = PathBuf::from(OsStr::from_bytes(parent));
        let flags = OFlags::PATH | OFlags::DIRECTORY;
        let dir = self.open(&parent, flags, Mode::empty(), Last::Follow)?;
        let trailing_slash = trimmed.len() < bytes.len();
        let spelled = match trailing_slash {
            true => [name, b"/"].concat(),
            false => name.to_vec(),
        };
        let c_string =
            |bytes: Vec<u8>| CString::new(bytes).map_err(|_| io::ErrorKind::InvalidInput);
        Ok(Some(Entry {
            dir,
            parent,
            name: c_string(name.to_vec())?,
            trailing_slash,
            spelled: c_string(spelled)?,
        }))
    }

    /// How many leading `names` resolve (opened with `flags`, ordinary links followed; a prefix
    /// that is missing or goes through a file does not), and the deepest of them.
    pub fn deepest_existing(&self, names: &[&[u8]], flags: OFlags) -> io::Result<(usize, OwnedFd)> {
        for n in (0..=names.len()).rev() {
            let prefix = prefix_path(&names[..n]);
            match self.open(&prefix, flags, Mode::empty(), Last::Follow) {
                Ok(fd) => return Ok((n, fd)),
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                    continue
                }
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::from_raw_os_error(libc::ENOENT))
    }

    /// Refuses (with [`Refusal::KernelFs`]) a change in the directory `dir` when it lies on one
    /// of the kernel's filesystems.
    pub fn may_write_in(&self, dir: BorrowedFd<'_>) -> io::Result<()> {
        match on_kernel_fs(dir)? {
            true => Err(Refusal::KernelFs.error()),
            false => Ok(()),
        }
    }

    /// Walks the absolute `path` a name at a time as the kernel would (each name opened alone,
    /// every ordinary symlink read and expanded here, a magic link refused with ELOOP, `..`
    /// climbing back through the directories the walk came down), calling `visit` on every
    /// directory it passes through; `last` says whether a final symlink is followed. At most 40
    /// links are expanded (then ELOOP, as the kernel).
    pub fn walk(
        &self,
        path: &Path,
        last: Last,
        visit: &mut dyn FnMut(BorrowedFd<'_>) -> io::Result<()>,
    ) -> io::Result<Walked> {
        let root = self.view.open(
            c"/",
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
            ResolveFlags::empty(),
        )?;
        let mut stack = vec![root];
        // Each name with whether it came out of a link (else the client spelled it).
        let mut pending: Vec<(Vec<u8>, bool)> = names(path)
            .iter()
            .rev()
            .map(|n| (n.to_vec(), false))
            .collect();
        let (mut links, mut after_link) = (0, false);
        let mut dotdot_after_link = false;
        while let Some((name, from_link)) = pending.pop() {
            let top = stack.last().expect("the root stays").as_fd();
            match name.as_slice() {
                b"." => continue,
                b".." => {
                    dotdot_after_link |= after_link && !from_link;
                    if stack.len() > 1 {
                        stack.pop();
                    }
                    continue;
                }
                _ => {}
            }
            let c_name = CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
            let flags = OFlags::PATH | OFlags::NOFOLLOW;
            let how = ResolveFlags::NO_SYMLINKS;
            let fd = match open_at(top, &c_name, flags, Mode::empty(), how) {
                Ok(fd) => fd,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    let dir = rustix::io::dup(top)?;
                    let last = pending.is_empty();
                    return Ok(Walked {
                        end: End::Missing { dir, last },
                        dotdot_after_link,
                    });
                }
                Err(e) => return Err(e),
            };
            let stat = rustix::fs::fstat(&fd)?;
            let follow = !pending.is_empty() || last == Last::Follow;
            if kind(&stat) == FileType::Symlink && follow {
                // The kernel refuses a magic link (ELOOP, as for a loop); an ordinary one, even a
                // dangling one, is expanded here.
                let probe = open_at(
                    top,
                    &c_name,
                    OFlags::PATH,
                    Mode::empty(),
                    ResolveFlags::empty(),
                );
                links += 1;
                if links > MAX_LINKS
                    || probe
                        .as_ref()
                        .is_err_and(|e| e.raw_os_error() == Some(libc::ELOOP))
                {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                let target = rustix::fs::readlinkat(&fd, c"", Vec::new())?;
                if target.as_bytes().starts_with(b"/") {
                    stack.truncate(1);
                }
                let target = Path::new(OsStr::from_bytes(target.as_bytes()));
                pending.extend(names(target).iter().rev().map(|n| (n.to_vec(), true)));
                after_link = true;
                continue;
            }
            if pending.is_empty() {
                return Ok(Walked {
                    end: End::Found(fd),
                    dotdot_after_link,
                });
            }
            if kind(&stat) != FileType::Directory {
                return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
            }
            visit(fd.as_fd())?;
            stack.push(fd);
        }
        let dir = stack.pop().expect("the root stays");
        Ok(Walked {
            end: End::Found(dir),
            dotdot_after_link,
        })
    }

    /// EACCES when the policy gives the file `fd` names (as the kernel resolved it) no access.
    pub fn reveal(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        match (&self.policy, self.handles_reads) {
            (Some(policy), true) if policy.access(&path_of(fd)?) == Access::None => {
                Err(io::Error::from_raw_os_error(libc::EACCES))
            }
            _ => Ok(()),
        }
    }

    /// `e`, from resolving `path`, as the call may see it: EACCES where the resolution passes
    /// through a directory hidden from it (a `none` one, reached by its name or through links),
    /// so whether something exists beneath a hidden path (ENOENT, ENOTDIR, EEXIST) is not told
    /// either.
    pub fn hide(&self, path: &Path, e: io::Error) -> io::Error {
        let telling = matches!(
            e.raw_os_error(),
            Some(libc::ENOENT | libc::ENOTDIR | libc::EEXIST)
        );
        if !(telling && self.handles_reads) {
            return e;
        }
        match self.walk(path, Last::Follow, &mut |fd| self.reveal(fd)) {
            Err(found) if found.raw_os_error() == Some(libc::EACCES) => found,
            Ok(Walked {
                end: End::Found(fd),
                ..
            }) if self.reveal(fd.as_fd()).is_err() => io::Error::from_raw_os_error(libc::EACCES),
            _ => e,
        }
    }

    /// [`refused`] for `e` as [`Reach::hide`] lets the call see it.
    pub fn refused(&self, path: &Path, e: io::Error) -> RpcError {
        refused(path, self.hide(path, e))
    }

    /// Whether the policy lets the call change `path` (canonical): write access there.
    pub fn may_change(&self, path: &Path) -> bool {
        self.policy
            .as_ref()
            .is_none_or(|policy| policy.access(path) == Access::Write)
    }
}

/// How many symlinks a walk expands before it gives up (ELOOP), as the kernel.
const MAX_LINKS: usize = 40;

/// Where a [`Reach::walk`] ended.
#[derive(Debug)]
pub struct Walked {
    pub end: End,
    /// Whether a `..` came after a symlink (it climbed from the link's target).
    pub dotdot_after_link: bool,
}

/// The end of a walk.
#[derive(Debug)]
pub enum End {
    /// The object the path names (`O_PATH`).
    Found(OwnedFd),
    /// A name is missing in `dir`; `last`: it is the path's final name (`dir` is where a call
    /// creating the path would create it).
    Missing { dir: OwnedFd, last: bool },
}

/// Whether `top`, a name in a procfs root, is a process's own directory there: a pid or tid
/// (numbered in that procfs's pid namespace), or the `self` and `thread-self` links.
fn is_per_process(top: &OsStr) -> bool {
    let name = top.as_bytes();
    let numeric = !name.is_empty() && name.iter().all(u8::is_ascii_digit);
    numeric || matches!(name, b"self" | b"thread-self")
}
