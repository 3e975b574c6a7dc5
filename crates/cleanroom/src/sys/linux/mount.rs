//! `mount_setattr`, the one mount call rustix lacks (its `mount` module has the others).
//! Async-signal-safe: a sandboxed child makes its mounts after fork.

use std::ffi::{c_uint, CStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::zero_or_errno;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(dirfd, path, flags)` setting the `MOUNT_ATTR_*` bits `attributes` (clearing
/// none, propagation unchanged).
pub(crate) fn set_attributes(
    dirfd: BorrowedFd<'_>,
    path: &CStr,
    flags: c_uint,
    attributes: u64,
) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: attributes,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is NUL-terminated and `attr` is a valid mount_attr of the size passed;
    // `dirfd` is open (borrowed).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd.as_raw_fd(),
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    zero_or_errno(rc)
}
