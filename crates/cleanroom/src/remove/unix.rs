//! The Unix removal walk: descriptor-relative, symlink-proof, mount-aware, depth-unbounded.
//!
//! An empty directory is removed by one `unlinkat(AT_REMOVEDIR)` without being entered.
//! Every other directory is entered with `openat(O_DIRECTORY | O_NOFOLLOW)` relative to its parent's
//! descriptor and checked with `statx` on the opened descriptor itself: a different device or
//! mount id means another filesystem (or a bind mount), which is reported and never entered.
//! At most [`FD_BUDGET`] directory descriptors are open at once; a frame whose descriptor was
//! closed is reopened through `..` of its child and must have the inode it had before.
//!
//! In a tree proven to be the caller's own ([`remove_owned_contents`]), an entry the kernel
//! refuses to unlink (EPERM: `chattr +i` or `+a` by a command running as root) has the immutable
//! and append-only flags of its directory and of itself cleared, then is unlinked once more; the
//! flags of an entry with other links, of another type than a file or directory, or on another
//! mount are never touched (Linux).

use std::ffi::{CStr, CString, OsStr};
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Dev, FileType, Mode, OFlags, RawMode, RenameFlags};
#[cfg(target_os = "linux")]
use rustix::fs::{IFlags, StatxFlags};
use rustix::io::Errno;

use super::WalkStats;
use crate::marker::{Marker, MARKER_FILE};
use crate::namespace::Namespace;

/// What the caller holds of the entry it removes: the open directory, on which it holds the
/// liveness lock (`flock`).
pub type Held = OwnedFd;

/// How long a removal keeps retrying after the backoff schedule is spent: not at all; on Unix
/// the schedule's five pauses (1.61 s in all) are the whole retry budget.
pub(crate) const RETRY_FOR: Duration = Duration::ZERO;

/// Directory descriptors the walk may hold open at once.
const FD_BUDGET: usize = 128;

/// Device, inode and mount id of a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    dev: Dev,
    ino: u64,
}

#[cfg(target_os = "linux")]
fn identity_of_fd(fd: BorrowedFd<'_>) -> Result<(Identity, Option<u64>, RawMode), Errno> {
    let stx = rustix::fs::statx(
        fd,
        c"",
        AtFlags::EMPTY_PATH,
        StatxFlags::TYPE | StatxFlags::MODE | StatxFlags::INO | StatxFlags::MNT_ID,
    )?;
    let dev = rustix::fs::makedev(stx.stx_dev_major, stx.stx_dev_minor);
    // Kernels before 5.8 do not fill the mount id (and leave it 0): ask fdinfo instead.
    let mnt = if StatxFlags::from_bits_retain(stx.stx_mask).contains(StatxFlags::MNT_ID) {
        Some(stx.stx_mnt_id)
    } else {
        fdinfo_mnt_id(fd)
    };
    Ok((
        Identity {
            dev,
            ino: stx.stx_ino,
        },
        mnt,
        RawMode::from(stx.stx_mode),
    ))
}

/// macOS has neither statx nor mount ids, nor bind mounts: every mount has its own device, so
/// the device stands in for the mount id.
#[cfg(target_os = "macos")]
fn identity_of_fd(fd: BorrowedFd<'_>) -> Result<(Identity, Option<u64>, RawMode), Errno> {
    let st = rustix::fs::fstat(fd)?;
    let identity = Identity {
        dev: st.st_dev,
        ino: st.st_ino,
    };
    Ok((identity, Some(st.st_dev as u64), st.st_mode))
}

/// The `mnt_id:` line of `/proc/self/fdinfo/<fd>`.
#[cfg(target_os = "linux")]
fn fdinfo_mnt_id(fd: BorrowedFd<'_>) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Whether two mount ids are known and equal: an unknown mount id counts as another mount, so
/// the walk never enters what it cannot prove is on the same mount.
fn same_mount(a: Option<u64>, b: Option<u64>) -> bool {
    matches!((a, b), (Some(x), Some(y)) if x == y)
}

/// Renames `name` to `trash` inside the namespace, checking that both names denote `held`, and
/// returns the name the tree now has. When `trash` is taken by something else (nothing is ever
/// replaced), the tree is removed under its own name instead.
pub(super) fn quarantine<'n>(
    ns: &Namespace,
    name: &'n str,
    trash: &'n str,
    held: &OwnedFd,
) -> Result<&'n str, String> {
    let (want, _, _) =
        identity_of_fd(held.as_fd()).map_err(|e| format!("cannot inspect the open root: {e}"))?;
    let same = |entry: &str| -> Result<bool, String> {
        let st = rustix::fs::statat(ns.dir(), entry, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| format!("cannot inspect {entry}: {e}"))?;
        Ok(FileType::from_raw_mode(st.st_mode) == FileType::Directory
            && Identity {
                dev: st.st_dev,
                ino: st.st_ino,
            } == want)
    };
    if !same(name)? {
        return Err(format!(
            "{name} is no longer the directory this process owns; preserved"
        ));
    }
    if name == trash {
        return Ok(name);
    }
    // The root, proven ours just above, may be immutable or append-only.
    let renamed = unflagged_retry(held, || {
        rustix::fs::renameat_with(ns.dir(), name, ns.dir(), trash, RenameFlags::NOREPLACE)
    });
    match renamed {
        Ok(()) => {}
        Err(Errno::EXIST) => return Ok(name),
        Err(e) => return Err(format!("cannot quarantine {name} as {trash}: {e}")),
    }
    if !same(trash)? {
        return Err(format!(
            "{trash} changed during quarantine; preserved for inspection"
        ));
    }
    Ok(trash)
}

/// Removes the marker and then the (now empty) quarantined root itself.
///
/// If the directory cannot be removed after all (something still writes into it), the marker is
/// put back, so the leftover keeps its proof of ownership and the next gc can finish it.
pub(super) fn finish(
    ns: &Namespace,
    trash: &str,
    held: &OwnedFd,
    marker: &Marker,
) -> Result<(), String> {
    let marker_name = CString::new(MARKER_FILE).expect("the marker's name has no NUL");
    match unlink(held.as_fd(), &marker_name, AtFlags::empty(), true) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => return Err(format!("{MARKER_FILE}: {e}")),
    }
    // The root itself may be immutable or append-only: its own flags, never the namespace's.
    let removed = unflagged_retry(held, || {
        rustix::fs::unlinkat(ns.dir(), trash, AtFlags::REMOVEDIR)
    });
    removed.map_err(|e| {
        let mut error = format!("{}: {e}", ns.path().join(trash).display());
        if let Err(lost) = restore_marker(held, marker) {
            error.push_str(&format!("; {lost}"));
        }
        error
    })
}

/// Makes sure the root `dir` holds exactly `marker` again: a run may have deleted, rewritten,
/// hard-linked or replaced it. Only a regular file is ever replaced (its name unlinked, never its
/// other links); the new one is created `O_EXCL`, as [`Marker::write`] always does.
pub(super) fn restore_marker(dir: &OwnedFd, marker: &Marker) -> Result<(), String> {
    if Marker::read(dir.as_fd(), &marker.user).as_ref() == Ok(marker) {
        return Ok(());
    }
    let lost = |e: &dyn std::fmt::Display| format!("{MARKER_FILE} could not be restored: {e}");
    match rustix::fs::statat(dir, MARKER_FILE, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
            return Err(lost(&"a directory is in its place"))
        }
        Ok(_) => rustix::fs::unlinkat(dir, MARKER_FILE, AtFlags::empty()).map_err(|e| lost(&e))?,
        Err(Errno::NOENT) => {}
        Err(e) => return Err(lost(&e)),
    }
    marker.write(dir.as_fd()).map_err(|e| lost(&e))
}

struct Frame {
    /// Open descriptor, or `None` when closed to stay within the budget.
    fd: Option<OwnedFd>,
    identity: Identity,
    /// Name in the parent directory (empty for the top).
    name: CString,
    /// Entries still to handle: name and the type reported by the directory (if any).
    pending: Vec<(CString, Option<FileType>)>,
}

/// Entries handled between two looks at the clock.
const DEADLINE_STRIDE: u32 = 256;

/// Removes everything inside the directory `top` except its marker (a regular file named
/// [`MARKER_FILE`]: anything else under that name is content like the rest); `display` names it
/// in errors. With a `deadline`, the walk stops between two entries once it has passed and says
/// so (`interrupted`).
pub fn remove_contents(top: &OwnedFd, display: &Path, deadline: Option<Instant>) -> WalkStats {
    walk(top, display, deadline, false)
}

/// [`remove_contents`] of a root whose ownership the caller proved: an entry the kernel refuses
/// to unlink for its immutable or append-only flag has them cleared first (see the module docs).
pub(super) fn remove_owned_contents(
    top: &OwnedFd,
    display: &Path,
    deadline: Option<Instant>,
) -> WalkStats {
    walk(top, display, deadline, true)
}

/// The walk of [`remove_contents`]; `owned`: the tree is proven the caller's.
fn walk(top: &OwnedFd, display: &Path, deadline: Option<Instant>, owned: bool) -> WalkStats {
    let mut stats = WalkStats::default();
    let (top_identity, top_mnt, top_mode) = match identity_of_fd(top.as_fd()) {
        Ok(v) => v,
        Err(e) => {
            stats.errors.push(format!("{}: {e}", display.display()));
            return stats;
        }
    };
    // The root itself may have been made read-only by the run (`chmod 555 "$HOME/.."`): like
    // every directory below it, it must be writable for its entries to be unlinked.
    if top_mode & 0o700 != 0o700 {
        if let Err(e) = rustix::fs::fchmod(top, Mode::from_raw_mode((top_mode & 0o7777) | 0o700)) {
            stats
                .errors
                .push(format!("{}: cannot make writable: {e}", display.display()));
            return stats;
        }
    }
    let top_fd = match reopen_self(top.as_fd()) {
        Ok(fd) => fd,
        Err(e) => {
            stats.errors.push(format!("{}: {e}", display.display()));
            return stats;
        }
    };
    let mut pending = match read_entries(top_fd.as_fd()) {
        Ok(p) => p,
        Err(e) => {
            stats.errors.push(format!("{}: {e}", display.display()));
            return stats;
        }
    };
    pending.retain(|(n, kind)| !is_marker_file(top_fd.as_fd(), n, *kind));
    let mut stack = vec![Frame {
        fd: Some(top_fd),
        identity: top_identity,
        name: CString::default(),
        pending,
    }];
    let mut open_fds = 1usize;
    let mut until_clock = DEADLINE_STRIDE;
    while let Some(frame) = stack.last_mut() {
        if let Some(deadline) = deadline {
            until_clock -= 1;
            if until_clock == 0 {
                until_clock = DEADLINE_STRIDE;
                if Instant::now() >= deadline {
                    stats.interrupted = true;
                    return stats;
                }
            }
        }
        let Some((name, kind)) = frame.pending.pop() else {
            let done = stack.pop().expect("frame exists");
            if done.fd.is_some() {
                open_fds -= 1;
            }
            let Some(parent) = stack.last_mut() else {
                break;
            };
            if parent.fd.is_none() {
                match reopen_parent(&done, parent.identity) {
                    Ok(fd) => {
                        parent.fd = Some(fd);
                        open_fds += 1;
                    }
                    Err(e) => {
                        stats.errors.push(format!(
                            "{}: cannot return to parent directory: {e}",
                            path_of(display, &stack, &done.name).display()
                        ));
                        return stats;
                    }
                }
            }
            let parent_fd = parent.fd.as_ref().expect("reopened").as_fd();
            match unlink(parent_fd, done.name.as_c_str(), AtFlags::REMOVEDIR, owned) {
                Ok(()) => stats.dirs += 1,
                Err(Errno::NOENT) => {}
                Err(e) => {
                    // Only report the directory if its contents were not already reported.
                    if stats.errors.is_empty() && stats.mounts.is_empty() {
                        stats.errors.push(format!(
                            "{}: {e}",
                            path_of(display, &stack, &done.name).display()
                        ));
                    }
                }
            }
            continue;
        };
        let dir_fd = frame.fd.as_ref().expect("current frame is open").as_fd();
        let is_dir = match kind {
            Some(FileType::Directory) => true,
            Some(_) => false,
            None => match rustix::fs::statat(dir_fd, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => FileType::from_raw_mode(st.st_mode) == FileType::Directory,
                Err(Errno::NOENT) => continue,
                Err(e) => {
                    stats.errors.push(format!(
                        "{}: {e}",
                        path_of(display, &stack, &name).display()
                    ));
                    continue;
                }
            },
        };
        if !is_dir {
            match unlink(dir_fd, name.as_c_str(), AtFlags::empty(), owned) {
                Ok(()) => stats.files += 1,
                Err(Errno::NOENT) => {}
                Err(Errno::ISDIR) => stack
                    .last_mut()
                    .expect("frame")
                    .pending
                    .push((name, Some(FileType::Directory))),
                Err(e) => stats.errors.push(format!(
                    "{}: {e}",
                    path_of(display, &stack, &name).display()
                )),
            }
            continue;
        }
        // An empty directory (most of a root's layout) goes with one rmdir: it removes only the
        // name, and refuses a mount point (EBUSY) or a non-directory (ENOTDIR); anything else
        // (not empty, not writable) takes the walk below, which reports what it cannot remove.
        match rustix::fs::unlinkat(dir_fd, name.as_c_str(), AtFlags::REMOVEDIR) {
            Ok(()) => {
                stats.dirs += 1;
                continue;
            }
            Err(Errno::NOENT) => continue,
            Err(_) => {}
        }
        let child = match open_dir_for_removal(dir_fd, &name) {
            Ok(Some(fd)) => fd,
            Ok(None) => continue,
            Err(e) => {
                stats.errors.push(format!(
                    "{}: {e}",
                    path_of(display, &stack, &name).display()
                ));
                continue;
            }
        };
        let (identity, mnt, mode) = match identity_of_fd(child.as_fd()) {
            Ok(v) => v,
            Err(e) => {
                stats.errors.push(format!(
                    "{}: {e}",
                    path_of(display, &stack, &name).display()
                ));
                continue;
            }
        };
        if identity.dev != top_identity.dev || !same_mount(mnt, top_mnt) {
            stats.mounts.push(path_of(display, &stack, &name));
            continue;
        }
        if mode & 0o700 != 0o700 {
            if let Err(e) = rustix::fs::fchmod(&child, Mode::from_raw_mode((mode & 0o7777) | 0o700))
            {
                stats.errors.push(format!(
                    "{}: cannot make writable: {e}",
                    path_of(display, &stack, &name).display()
                ));
            }
        }
        let entries = match read_entries(child.as_fd()) {
            Ok(e) => e,
            Err(e) => {
                stats.errors.push(format!(
                    "{}: {e}",
                    path_of(display, &stack, &name).display()
                ));
                continue;
            }
        };
        if open_fds >= FD_BUDGET {
            // Close the outermost open descriptor below the current frame (never the top).
            if let Some(old) = stack.iter_mut().skip(1).find(|f| f.fd.is_some()) {
                old.fd = None;
                open_fds -= 1;
            }
        }
        open_fds += 1;
        stack.push(Frame {
            fd: Some(child),
            identity,
            name,
            pending: entries,
        });
    }
    stats
}

/// `op` on the proven root `held` (its rename or rmdir in the namespace); when the kernel refused
/// (EPERM), once more after clearing the immutable and append-only flags of `held` alone.
fn unflagged_retry(held: &OwnedFd, op: impl Fn() -> Result<(), Errno>) -> Result<(), Errno> {
    let first = op();
    #[cfg(target_os = "linux")]
    if first == Err(Errno::PERM) && clear_flags(held.as_fd()) {
        return op();
    }
    #[cfg(not(target_os = "linux"))]
    let _ = held;
    first
}

/// `unlinkat`; when the tree is `owned` and the kernel refused (EPERM), once more after clearing
/// the immutable and append-only flags of `dir` and of the entry ([`undo_flags`]).
fn unlink(dir: BorrowedFd<'_>, name: &CStr, flags: AtFlags, owned: bool) -> Result<(), Errno> {
    let first = rustix::fs::unlinkat(dir, name, flags);
    #[cfg(target_os = "linux")]
    if first == Err(Errno::PERM) && owned && undo_flags(dir, name) {
        return rustix::fs::unlinkat(dir, name, flags);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = owned;
    first
}

/// Clears the immutable and append-only flags of the directory `dir` and of its entry `name`,
/// if that is a regular file or a directory on `dir`'s mount with no other link (a file linked
/// from elsewhere is not the tree's alone); whether any flag was cleared.
#[cfg(target_os = "linux")]
fn undo_flags(dir: BorrowedFd<'_>, name: &CStr) -> bool {
    let dir_cleared = clear_flags(dir);
    let entry_cleared = open_sole_entry(dir, name).is_ok_and(|fd| clear_flags(fd.as_fd()));
    dir_cleared || entry_cleared
}

/// Clears `FS_IMMUTABLE_FL` and `FS_APPEND_FL` of `fd` (`FS_IOC_SETFLAGS`); whether it did.
#[cfg(target_os = "linux")]
fn clear_flags(fd: BorrowedFd<'_>) -> bool {
    let stuck = IFlags::IMMUTABLE | IFlags::APPEND;
    match rustix::fs::ioctl_getflags(fd) {
        Ok(flags) if flags.intersects(stuck) => {
            rustix::fs::ioctl_setflags(fd, flags - stuck).is_ok()
        }
        _ => false,
    }
}

/// The entry `name` of `dir`, opened for an ioctl only once an `O_PATH` descriptor (which never
/// follows a symlink nor opens a device) shows a regular file or directory on `dir`'s device and
/// mount with a single link; the reopen goes through that descriptor, so it is that inode.
#[cfg(target_os = "linux")]
fn open_sole_entry(dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, Errno> {
    let pinned = rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&pinned)?;
    let (dir_id, dir_mnt, _) = identity_of_fd(dir)?;
    let (_, mnt, _) = identity_of_fd(pinned.as_fd())?;
    let kind = FileType::from_raw_mode(st.st_mode);
    let sole = match kind {
        FileType::RegularFile => st.st_nlink == 1,
        FileType::Directory => true,
        _ => false,
    };
    if !sole || st.st_dev != dir_id.dev || !same_mount(mnt, dir_mnt) {
        return Err(Errno::PERM);
    }
    rustix::fs::open(
        format!("/proc/self/fd/{}", pinned.as_raw_fd()).as_str(),
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Whether the top-level entry `name` is the marker: a regular file under the marker's name.
fn is_marker_file(top: BorrowedFd<'_>, name: &CStr, kind: Option<FileType>) -> bool {
    if name.to_bytes() != MARKER_FILE.as_bytes() {
        return false;
    }
    match kind {
        Some(kind) => kind == FileType::RegularFile,
        None => rustix::fs::statat(top, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile),
    }
}

/// Opens a child directory without following symlinks, making it searchable if it is not.
/// `Ok(None)`: it vanished or is not a directory any more (it was then unlinked as a file).
fn open_dir_for_removal(parent: BorrowedFd<'_>, name: &CStr) -> Result<Option<OwnedFd>, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(parent, name, flags, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::NOENT) => Ok(None),
        Err(Errno::NOTDIR) | Err(Errno::LOOP) => {
            // Replaced by a file or symlink since it was listed: unlink the name, not its target.
            match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => Ok(None),
                Err(e) => Err(e),
            }
        }
        #[cfg(target_os = "linux")]
        Err(Errno::ACCESS) => {
            // A directory without search or read permission (e.g. chmod 000): give ourselves
            // access through an O_PATH descriptor, which pins the very inode that was listed.
            let path_fd = rustix::fs::openat(
                parent,
                name,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            // An O_PATH open crosses mount points: if another filesystem is mounted here, its
            // root is not ours to chmod. Hand the O_PATH descriptor back; the caller sees the
            // other device or mount id and reports the mount without entering it.
            let (parent_id, parent_mnt, _) = identity_of_fd(parent)?;
            let (here_id, here_mnt, _) = identity_of_fd(path_fd.as_fd())?;
            if here_id.dev != parent_id.dev || !same_mount(here_mnt, parent_mnt) {
                return Ok(Some(path_fd));
            }
            let st = rustix::fs::fstat(&path_fd)?;
            let proc_path = format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&path_fd)
            );
            rustix::fs::chmod(
                proc_path.as_str(),
                Mode::from_raw_mode((st.st_mode & 0o7777) | 0o700),
            )?;
            rustix::fs::openat(parent, name, flags, Mode::empty()).map(Some)
        }
        #[cfg(target_os = "macos")]
        Err(Errno::ACCESS) => {
            // No O_PATH: the listed name is chmodded without following a symlink, only while it
            // is a directory on the parent's device (another mount is reported as EXDEV, never
            // chmodded); the caller then checks what it opened, as for every directory.
            let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
            let (parent_id, _, _) = identity_of_fd(parent)?;
            if st.st_dev != parent_id.dev {
                return Err(Errno::XDEV);
            }
            let mode = Mode::from_raw_mode((st.st_mode & 0o7777) | 0o700);
            rustix::fs::chmodat(parent, name, mode, AtFlags::SYMLINK_NOFOLLOW)?;
            rustix::fs::openat(parent, name, flags, Mode::empty()).map(Some)
        }
        Err(e) => Err(e),
    }
}

fn reopen_self(fd: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        fd,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn reopen_parent(child: &Frame, expected: Identity) -> Result<OwnedFd, String> {
    let child_fd = child
        .fd
        .as_ref()
        .ok_or_else(|| "child descriptor already closed".to_string())?;
    let fd = rustix::fs::openat(
        child_fd,
        c"..",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| e.to_string())?;
    let (identity, _, _) = identity_of_fd(fd.as_fd()).map_err(|e| e.to_string())?;
    if identity != expected {
        return Err("the tree was moved during removal".into());
    }
    Ok(fd)
}

/// Lists a directory the walk has just opened. The descriptor is fresh (at offset 0) and read
/// once, so it is read directly: `Dir::read_from` would duplicate it first (fcntl + openat +
/// close for every directory, a quarter of the syscalls of a gc of small roots).
fn read_entries(fd: BorrowedFd<'_>) -> Result<Vec<(CString, Option<FileType>)>, Errno> {
    let mut out = Vec::new();
    #[cfg(target_os = "linux")]
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 16 * 1024];
    #[cfg(target_os = "linux")]
    let mut dir = rustix::fs::RawDir::new(fd, &mut buf);
    // macOS has no getdents: the libc readdir of a duplicate.
    #[cfg(target_os = "macos")]
    let mut dir = rustix::fs::Dir::read_from(fd)?;
    while let Some(entry) = dir.next() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::Unknown => None,
            t => Some(t),
        };
        out.push((name.to_owned(), kind));
    }
    Ok(out)
}

/// A displayable path for an entry: the top's path plus the names of the open frames.
fn path_of(display: &Path, stack: &[Frame], name: &CStr) -> PathBuf {
    let mut path = display.to_path_buf();
    for frame in stack.iter().skip(1) {
        path.push(OsStr::from_bytes(frame.name.as_bytes()));
    }
    path.push(OsStr::from_bytes(name.to_bytes()));
    path
}
