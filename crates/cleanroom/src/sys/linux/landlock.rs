//! The Landlock system calls (`landlock_create_ruleset`, `landlock_add_rule`,
//! `landlock_restrict_self`), which neither libc nor rustix wraps. Async-signal-safe: a sandboxed
//! child builds and applies its ruleset after fork.

use std::ffi::c_uint;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::{last_error, zero_or_errno};

/// `LANDLOCK_CREATE_RULESET_VERSION` from `<linux/landlock.h>` (not exported by libc).
const LANDLOCK_CREATE_RULESET_VERSION: c_uint = 1 << 0;
/// `LANDLOCK_RULE_PATH_BENEATH` from `<linux/landlock.h>`.
const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

/// `struct landlock_ruleset_attr`, first field only (the kernel accepts the shorter size).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The kernel's Landlock ABI (`landlock_create_ruleset(NULL, 0, VERSION)`): its number, or why
/// there is none (`ENOSYS`, `EOPNOTSUPP`, ...).
pub(crate) fn abi_version() -> io::Result<u32> {
    // SAFETY: with a NULL attribute pointer, size 0 and the VERSION flag the kernel only returns
    // the ABI number (or an error); no memory is read or written.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if rc < 0 {
        return Err(last_error());
    }
    Ok(u32::try_from(rc).unwrap_or(u32::MAX))
}

/// A new ruleset handling the filesystem rights `handled`.
pub(crate) fn create_ruleset(handled: u64) -> io::Result<OwnedFd> {
    let attr = RulesetAttr {
        handled_access_fs: handled,
    };
    // SAFETY: `attr` is a valid ruleset attribute of the size passed; flags 0.
    let ruleset = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if ruleset < 0 {
        return Err(last_error());
    }
    // SAFETY: landlock_create_ruleset returned a new descriptor, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(ruleset as RawFd) })
}

/// Adds to `ruleset` a path-beneath rule: `rights` beneath the file or directory `parent`.
pub(crate) fn add_path_beneath_rule(
    ruleset: BorrowedFd<'_>,
    parent: BorrowedFd<'_>,
    rights: u64,
) -> io::Result<()> {
    let attr = PathBeneathAttr {
        allowed_access: rights,
        parent_fd: parent.as_raw_fd(),
    };
    // SAFETY: `attr` is a valid path-beneath attribute; `ruleset` and `parent` are open
    // (borrowed); flags 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    zero_or_errno(rc)
}

/// Restricts the calling thread with `ruleset` (`landlock_restrict_self`; the caller set
/// `no_new_privs` first).
pub(crate) fn restrict_self(ruleset: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `ruleset` is an open ruleset descriptor (borrowed); flags 0.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) };
    zero_or_errno(rc)
}
