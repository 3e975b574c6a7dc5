//! The mount primitives of a sandboxed child: paths opened without following links, trees copied
//! and attached by descriptor (`open_tree`, `move_mount`, `mount_setattr`), fresh filesystems
//! (`fsopen`, `fsmount`), and the mount points made for them.
//!
//! Invariant: raw, async-signal-safe system calls only, on data prepared before the fork or on
//! the stack (they run after fork); every path a step names is resolved without following a
//! symlink or a magic link, and mounts are made on the descriptor so resolved, so a component
//! another user swapped for a link after the parent checked the path fails the step instead of
//! mounting elsewhere.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `AT_RECURSIVE` from `<linux/fcntl.h>`.
const AT_RECURSIVE: libc::c_uint = 0x8000;
/// `OPEN_TREE_CLONE` and `OPEN_TREE_CLOEXEC` from `<linux/mount.h>`.
const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;
/// `MOVE_MOUNT_F_EMPTY_PATH` and `MOVE_MOUNT_T_EMPTY_PATH` from `<linux/mount.h>`.
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
/// `RESOLVE_NO_MAGICLINKS`, `RESOLVE_NO_SYMLINKS` and `RESOLVE_BENEATH` from `<linux/openat2.h>`.
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;
/// `MOUNT_ATTR_RDONLY`, `MOUNT_ATTR_NOSUID`, `MOUNT_ATTR_NODEV` and `MOUNT_ATTR_NOEXEC` from
/// `<linux/mount.h>`.
pub(super) const MOUNT_ATTR_RDONLY: u64 = 1;
pub(super) const MOUNT_ATTR_NOSUID: u64 = 2;
pub(super) const MOUNT_ATTR_NODEV: u64 = 4;
const MOUNT_ATTR_NOEXEC: u64 = 8;
/// `FSOPEN_CLOEXEC`, `FSCONFIG_SET_STRING`, `FSCONFIG_CMD_CREATE` and `FSMOUNT_CLOEXEC` from
/// `<linux/mount.h>`.
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
/// The longest path a mount point is made for (PATH_MAX).
const PATH_MAX: usize = 4096;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `struct open_how` of `openat2(2)`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Where [`open_path`] may resolve.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Within {
    /// Anywhere (an absolute path, or relative to the descriptor).
    Anywhere,
    /// Beneath the descriptor only (no `..` above it, no absolute path).
    Beneath,
}

/// `openat2(dirfd, path, O_PATH | O_NOFOLLOW)` following no symlink and no magic link on the
/// way.
pub(super) fn open_path(dirfd: RawFd, path: &CStr, within: Within) -> io::Result<OwnedFd> {
    let mut resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    if within == Within::Beneath {
        resolve |= RESOLVE_BENEATH;
    }
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve,
    };
    // SAFETY: `path` is NUL-terminated and `how` a valid open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat2 returned a new descriptor, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `fstat` of `fd`.
pub(super) fn stat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: `stat` is plain old data filled in by fstat.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `stat` is a valid out-pointer; an invalid `fd` is an error.
    if unsafe { libc::fstat(fd, &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat)
}

/// Whether `fd` is a directory.
pub(super) fn is_dir(fd: RawFd) -> io::Result<bool> {
    Ok(stat(fd)?.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// A detached copy of the mount tree at the file `fd` denotes (with the mounts below it when
/// `recursive`).
pub(super) fn copy_tree(fd: RawFd, recursive: bool) -> io::Result<OwnedFd> {
    let mut flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: `fd` is an open descriptor; the empty path is NUL-terminated; integer flags.
    let tree = unsafe { libc::syscall(libc::SYS_open_tree, fd, c"".as_ptr(), flags) };
    if tree < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open_tree returned a new descriptor, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(tree as RawFd) })
}

/// A detached copy of the tree at `path` (resolved without symlinks), with its submounts.
pub(super) fn copy_path(path: &CStr) -> io::Result<OwnedFd> {
    let source = open_path(libc::AT_FDCWD, path, Within::Anywhere)?;
    copy_tree(source.as_raw_fd(), true)
}

/// Sets `attributes` on the detached or attached mount `tree` (and every mount below it).
pub(super) fn set_tree_attributes(tree: RawFd, attributes: u64) -> io::Result<()> {
    mount_setattr(
        tree,
        c"",
        AT_RECURSIVE | libc::AT_EMPTY_PATH as libc::c_uint,
        attributes,
    )
}

/// `mount_setattr(dirfd, path, flags)` setting `attributes`.
fn mount_setattr(
    dirfd: RawFd,
    path: &CStr,
    flags: libc::c_uint,
    attributes: u64,
) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: attributes,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is NUL-terminated and `attr` is a valid mount_attr of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Attaches the detached mount `tree` on the file `target` denotes (`tree` stays open).
pub(super) fn attach(tree: RawFd, target: RawFd) -> io::Result<()> {
    // SAFETY: `tree` is a detached mount and `target` an open descriptor; the empty paths are
    // NUL-terminated. Integer and pointer arguments only.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            target,
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Attaches the detached mount `tree` at `path` (resolved without symlinks).
pub(super) fn attach_at(tree: RawFd, path: &CStr) -> io::Result<()> {
    let target = open_path(libc::AT_FDCWD, path, Within::Anywhere)?;
    attach(tree, target.as_raw_fd())
}

/// Makes what `target` denotes read-only: a copy of its tree, read-only throughout, on top.
pub(super) fn make_read_only(target: RawFd) -> io::Result<()> {
    let tree = copy_tree(target, true)?;
    set_tree_attributes(tree.as_raw_fd(), MOUNT_ATTR_RDONLY)?;
    attach(tree.as_raw_fd(), target)
}

/// Covers what `target` denotes: a directory with an empty, read-only tmpfs of mode 000, a file
/// with a read-only, `nodev` copy of `/dev/null` (so opening it fails).
pub(super) fn cover(target: RawFd) -> io::Result<()> {
    let tree = if is_dir(target)? {
        empty_tmpfs()?
    } else {
        let null = copy_path(c"/dev/null")?;
        set_tree_attributes(null.as_raw_fd(), MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV)?;
        null
    };
    attach(tree.as_raw_fd(), target)
}

/// A detached, empty, read-only tmpfs of mode 000 with room for nothing.
fn empty_tmpfs() -> io::Result<OwnedFd> {
    let context = fs_context(c"tmpfs")?;
    for (key, value) in [(c"size", c"4k"), (c"nr_inodes", c"1"), (c"mode", c"000")] {
        // SAFETY: `context` is an open filesystem context; key and value are NUL-terminated.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                context.as_raw_fd(),
                FSCONFIG_SET_STRING,
                key.as_ptr(),
                value.as_ptr(),
                0,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
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
    // SAFETY: a NUL-terminated name and integer flags.
    let context = unsafe { libc::syscall(libc::SYS_fsopen, name.as_ptr(), FSOPEN_CLOEXEC) };
    if context < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fsopen returned a new descriptor, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(context as RawFd) })
}

/// Creates the filesystem of `context` and returns a detached mount of it with `attributes`.
fn fs_mount(context: &OwnedFd, attributes: u64) -> io::Result<OwnedFd> {
    // SAFETY: `context` is an open filesystem context; NULL key and value with CMD_CREATE.
    let created = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            context.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    if created != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; integer flags and attributes.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            context.as_raw_fd(),
            FSMOUNT_CLOEXEC,
            attributes,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fsmount returned a new descriptor, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `mount(2)`.
pub(super) fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let ptr = |s: Option<&CStr>| s.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is NULL or a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            ptr(source),
            target.as_ptr(),
            ptr(fstype),
            flags,
            ptr(data).cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Mounts a fresh tmpfs, world-writable with the sticky bit like `/dev/shm`, at `path`.
pub(super) fn private_tmpfs(path: &CStr) -> io::Result<()> {
    mount(
        Some(c"tmpfs"),
        path,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(c"mode=1777"),
    )
}

/// Opens the mount point `path` (absolute, resolved without symlinks), first making what is
/// missing of it, one component at a time beneath the last one opened: its directories (mode
/// 0755) and itself, a directory when `dir`, else an empty file (mode 0600). For a copy of a host
/// path whose entry the private directory's view lacks (overlayfs caches a name it once looked
/// up and did not find).
pub(super) fn open_mount_point(path: &CStr, dir: bool) -> io::Result<OwnedFd> {
    match open_path(libc::AT_FDCWD, path, Within::Anywhere) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        other => return other,
    }
    let bytes = path.to_bytes();
    if bytes.first() != Some(&b'/') || bytes.len() >= PATH_MAX {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut buf = [0u8; PATH_MAX];
    buf[..bytes.len()].copy_from_slice(bytes);
    let mut at = open_path(libc::AT_FDCWD, c"/", Within::Anywhere)?;
    let mut start = 1;
    while start < bytes.len() {
        let end = bytes[start..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(bytes.len(), |i| start + i);
        let last = end == bytes.len();
        buf[end] = 0;
        // SAFETY: `buf[start..=end]` is a NUL-terminated component.
        let name = unsafe { CStr::from_bytes_with_nul_unchecked(&buf[start..=end]) };
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
    match open_path(at.as_raw_fd(), name, Within::Beneath) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        other => return other,
    }
    // SAFETY: `at` is an open directory descriptor, `name` a NUL-terminated single component;
    // O_CREAT takes the mode argument.
    let made = unsafe {
        if dir {
            libc::mkdirat(at.as_raw_fd(), name.as_ptr(), 0o755)
        } else {
            let flags =
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            let fd = libc::openat(at.as_raw_fd(), name.as_ptr(), flags, 0o600);
            if fd >= 0 {
                libc::close(fd);
            }
            fd.min(0)
        }
    };
    if made != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
        return Err(io::Error::last_os_error());
    }
    open_path(at.as_raw_fd(), name, Within::Beneath)
}
