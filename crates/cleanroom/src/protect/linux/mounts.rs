//! The mount primitives of a sandboxed child: paths opened without following links, trees copied
//! and attached by descriptor (`open_tree`, `move_mount`, `mount_setattr`), fresh filesystems
//! (`fsopen`, `fsmount`), and the mount points made for them.
//!
//! Invariant: raw, async-signal-safe system calls only (rustix's, paths passed as `CStr`s so
//! that none is copied, and `sys::linux::mount`'s), on data prepared before the fork or on the
//! stack (they run after fork); every path a step names is resolved without following a
//! symlink or a magic link, and mounts are made on the descriptor so resolved, so a component
//! another user swapped for a link after the parent checked the path fails the step instead of
//! mounting elsewhere.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags, Stat, CWD};
use rustix::io::Errno;
use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MountFlags, MountPropagationFlags, MoveMountFlags,
    OpenTreeFlags,
};

use crate::sys::linux::mount as sys_mount;

/// The `MOUNT_ATTR_*` bits a step sets on a tree.
pub(super) const MOUNT_ATTR_RDONLY: MountAttrFlags = MountAttrFlags::MOUNT_ATTR_RDONLY;
pub(super) const MOUNT_ATTR_NOSUID: MountAttrFlags = MountAttrFlags::MOUNT_ATTR_NOSUID;
pub(super) const MOUNT_ATTR_NODEV: MountAttrFlags = MountAttrFlags::MOUNT_ATTR_NODEV;
const MOUNT_ATTR_NOEXEC: MountAttrFlags = MountAttrFlags::MOUNT_ATTR_NOEXEC;
/// The longest path a mount point is made for (PATH_MAX).
const PATH_MAX: usize = 4096;

/// Where [`open_path`] may resolve.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Within {
    /// Anywhere (an absolute path, or relative to the descriptor).
    Anywhere,
    /// Beneath the descriptor only (no `..` above it, no absolute path).
    Beneath,
}

/// `openat2(dirfd, path, O_PATH | O_NOFOLLOW)` following no symlink and no magic link on the
/// way (`dirfd` may be [`CWD`]).
pub(super) fn open_path(dirfd: BorrowedFd<'_>, path: &CStr, within: Within) -> io::Result<OwnedFd> {
    let mut resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    if within == Within::Beneath {
        resolve |= ResolveFlags::BENEATH;
    }
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat2(
        dirfd,
        path,
        flags,
        Mode::empty(),
        resolve,
    )?)
}

/// `fstat` of `fd`.
pub(super) fn stat(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    Ok(rustix::fs::fstat(fd)?)
}

/// Whether `fd` is a directory.
pub(super) fn is_dir(fd: BorrowedFd<'_>) -> io::Result<bool> {
    Ok(FileType::from_raw_mode(stat(fd)?.st_mode) == FileType::Directory)
}

/// A detached copy of the mount tree at the file `fd` denotes (with the mounts below it when
/// `recursive`).
pub(super) fn copy_tree(fd: BorrowedFd<'_>, recursive: bool) -> io::Result<OwnedFd> {
    let mut flags = OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC
        | OpenTreeFlags::AT_EMPTY_PATH;
    if recursive {
        flags |= OpenTreeFlags::AT_RECURSIVE;
    }
    Ok(rustix::mount::open_tree(fd, c"", flags)?)
}

/// A detached copy of the tree at `path` (resolved without symlinks), with its submounts.
pub(super) fn copy_path(path: &CStr) -> io::Result<OwnedFd> {
    let source = open_path(CWD, path, Within::Anywhere)?;
    copy_tree(source.as_fd(), true)
}

/// Sets `attributes` on the detached or attached mount `tree` (and every mount below it).
pub(super) fn set_tree_attributes(
    tree: BorrowedFd<'_>,
    attributes: MountAttrFlags,
) -> io::Result<()> {
    sys_mount::set_attributes(
        tree,
        c"",
        (OpenTreeFlags::AT_RECURSIVE | OpenTreeFlags::AT_EMPTY_PATH).bits(),
        u64::from(attributes.bits()),
    )
}

/// Attaches the detached mount `tree` on the file `target` denotes (`tree` stays open).
pub(super) fn attach(tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    let flags = MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH;
    Ok(rustix::mount::move_mount(tree, c"", target, c"", flags)?)
}

/// Attaches the detached mount `tree` at `path` (resolved without symlinks).
pub(super) fn attach_at(tree: BorrowedFd<'_>, path: &CStr) -> io::Result<()> {
    let target = open_path(CWD, path, Within::Anywhere)?;
    attach(tree, target.as_fd())
}

/// Makes what `target` denotes read-only: a copy of its tree, read-only throughout, on top.
pub(super) fn make_read_only(target: BorrowedFd<'_>) -> io::Result<()> {
    let tree = copy_tree(target, true)?;
    set_tree_attributes(tree.as_fd(), MOUNT_ATTR_RDONLY)?;
    attach(tree.as_fd(), target)
}

/// Covers what `target` denotes: a directory with an empty, read-only tmpfs of mode 000, a file
/// with a read-only, `nodev` copy of `/dev/null` (so opening it fails).
pub(super) fn cover(target: BorrowedFd<'_>) -> io::Result<()> {
    let tree = if is_dir(target)? {
        empty_tmpfs()?
    } else {
        let null = copy_path(c"/dev/null")?;
        set_tree_attributes(null.as_fd(), MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV)?;
        null
    };
    attach(tree.as_fd(), target)
}

/// A detached, empty, read-only tmpfs of mode 000 with room for nothing.
fn empty_tmpfs() -> io::Result<OwnedFd> {
    let context = fs_context(c"tmpfs")?;
    for (key, value) in [(c"size", c"4k"), (c"nr_inodes", c"1"), (c"mode", c"000")] {
        rustix::mount::fsconfig_set_string(&context, key, value)?;
    }
    fs_mount(
        &context,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
    )
}

/// A detached mount of the mqueue filesystem of the caller's IPC namespace (`fsopen`,
/// `fsconfig(CMD_CREATE)`, `fsmount`; the filesystem is keyed on the namespace, so it is the one
/// `mq_open` uses).
pub(super) fn mqueue() -> io::Result<OwnedFd> {
    let context = fs_context(c"mqueue")?;
    fs_mount(
        &context,
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
    )
}

/// `fsopen(name)`.
fn fs_context(name: &CStr) -> io::Result<OwnedFd> {
    Ok(rustix::mount::fsopen(name, FsOpenFlags::FSOPEN_CLOEXEC)?)
}

/// Creates the filesystem of `context` and returns a detached mount of it with `attributes`.
fn fs_mount(context: &OwnedFd, attributes: MountAttrFlags) -> io::Result<OwnedFd> {
    rustix::mount::fsconfig_create(context)?;
    Ok(rustix::mount::fsmount(
        context,
        FsMountFlags::FSMOUNT_CLOEXEC,
        attributes,
    )?)
}

/// `mount(2)` of a filesystem.
pub(super) fn mount(
    source: &CStr,
    target: &CStr,
    fstype: &CStr,
    flags: MountFlags,
    data: Option<&CStr>,
) -> io::Result<()> {
    Ok(rustix::mount::mount(source, target, fstype, flags, data)?)
}

/// Makes the tree at `target` a slave of the host's, recursively: host mounts keep propagating
/// in; ours never propagate out.
pub(super) fn make_slave(target: &CStr) -> io::Result<()> {
    let flags = MountPropagationFlags::REC | MountPropagationFlags::DOWNSTREAM;
    Ok(rustix::mount::mount_change(target, flags)?)
}

/// Mounts a fresh tmpfs, world-writable with the sticky bit like `/dev/shm`, at `path`.
pub(super) fn private_tmpfs(path: &CStr) -> io::Result<()> {
    mount(
        c"tmpfs",
        path,
        c"tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        Some(c"mode=1777"),
    )
}

/// Opens the mount point `path` (absolute, resolved without symlinks), first making what is
/// missing of it, one component at a time beneath the last one opened: its directories (mode
/// 0755) and itself, a directory when `dir`, else an empty file (mode 0600). For a copy of a host
/// path whose entry the private directory's view lacks (overlayfs caches a name it once looked
/// up and did not find).
pub(super) fn open_mount_point(path: &CStr, dir: bool) -> io::Result<OwnedFd> {
    match open_path(CWD, path, Within::Anywhere) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        other => return other,
    }
    let bytes = path.to_bytes();
    if bytes.first() != Some(&b'/') || bytes.len() >= PATH_MAX {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut buf = [0u8; PATH_MAX];
    buf[..bytes.len()].copy_from_slice(bytes);
    let mut at = open_path(CWD, c"/", Within::Anywhere)?;
    let mut start = 1;
    while start < bytes.len() {
        let end = bytes[start..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(bytes.len(), |i| start + i);
        let last = end == bytes.len();
        buf[end] = 0;
        // A component of a C string, NUL-terminated just now: never the error.
        let name = CStr::from_bytes_with_nul(&buf[start..=end])
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        if !name.is_empty() {
            at = open_or_make(&at, name, dir || !last)?;
        }
        start = end + 1;
    }
    Ok(at)
}

/// Opens `name` beneath `at` without following links, making it (a directory when `dir`, else an
/// empty file) when it is missing.
fn open_or_make(at: &OwnedFd, name: &CStr, dir: bool) -> io::Result<OwnedFd> {
    match open_path(at.as_fd(), name, Within::Beneath) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        other => return other,
    }
    let made = if dir {
        rustix::fs::mkdirat(at, name, Mode::from_raw_mode(0o755))
    } else {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        rustix::fs::openat(at, name, flags, Mode::from_raw_mode(0o600)).map(drop)
    };
    match made {
        Err(e) if e != Errno::EXIST => return Err(e.into()),
        _ => {}
    }
    open_path(at.as_fd(), name, Within::Beneath)
}
