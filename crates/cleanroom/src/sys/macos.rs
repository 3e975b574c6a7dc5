//! Small helpers the macOS files of the library share: `sysctlbyname` strings and the per-user
//! temp dir from `confstr(_CS_DARWIN_USER_TEMP_DIR)`. Type-checked only (docs/macos.md).
//!
//! All `unsafe` here wraps one libc call each, with the buffer's real length passed in.

use std::ffi::{CStr, OsString};
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// The string value of the sysctl `name`.
pub fn sysctl_string(name: &CStr) -> io::Result<String> {
    let mut buf = [0u8; 256];
    let mut len = buf.len();
    // SAFETY: `buf` is writable for `len` bytes; the kernel writes at most that and updates `len`.
    let rc = unsafe {
        libc::sysctlbyname(
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let value = CStr::from_bytes_until_nul(&buf[..len])
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "sysctl string without NUL"))?;
    Ok(value.to_string_lossy().into_owned())
}

/// The per-user temp dir (`/var/folders/…/T/`), which launchd creates mode 0700 for the user;
/// `None` when confstr does not know it.
pub fn user_temp_dir() -> Option<PathBuf> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: `buf` is writable for its length; confstr returns the length it needed, NUL included.
    let needed = unsafe {
        libc::confstr(
            libc::_CS_DARWIN_USER_TEMP_DIR,
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if needed == 0 || needed > buf.len() {
        return None;
    }
    buf.truncate(needed - 1);
    Some(PathBuf::from(OsString::from_vec(buf)))
}
