//! What Linux and macOS share below the library's parts: the password database.

use std::ffi::{CStr, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The largest buffer [`passwd_home`] gives `getpwuid_r` for one entry's strings.
const PASSWD_BUFFER_MAX: usize = 1 << 20;

/// The home directory of `uid` in the password database (`getpwuid_r`, its buffer grown while
/// the entry does not fit, up to 1 MiB). `NotFound` when there is no entry or it has no home.
pub(crate) fn passwd_home(uid: u32) -> io::Result<PathBuf> {
    let mut size = 1024usize;
    loop {
        let mut buf = vec![0u8; size];
        // SAFETY: passwd is plain old data; all-zero is a valid value to be filled in.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: `entry` and `result` are out-parameters
        // and `buf` is a writable buffer of `size` bytes that the entry's strings point into.
        let rc = unsafe {
            libc::getpwuid_r(uid, &mut entry, buf.as_mut_ptr().cast(), size, &mut result)
        };
        if rc == libc::ERANGE && size < PASSWD_BUFFER_MAX {
            size *= 4;
            continue;
        }
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        if result.is_null() || entry.pw_dir.is_null() {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no entry"));
        }
        // SAFETY: getpwuid_r succeeded, so pw_dir points to a NUL-terminated string in `buf`,
        // which lives until the end of this iteration.
        let dir = unsafe { CStr::from_ptr(entry.pw_dir) };
        return Ok(PathBuf::from(OsStr::from_bytes(dir.to_bytes())));
    }
}
