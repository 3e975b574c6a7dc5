//! The Unix side of the environment: the account's home from the password database, and the
//! variables set as they are named (Unix names are case-sensitive).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::root::Layout;

/// The variable that names the home directory.
pub const HOME_VAR: &str = "HOME";

/// The real uid (as `uid N`, for messages) and its home in the password database.
pub fn account_home() -> (String, std::io::Result<PathBuf>) {
    let uid = rustix::process::getuid().as_raw();
    (format!("uid {uid}"), passwd_home(uid))
}

/// Variables of the platform's user profile: none on Unix beyond HOME and XDG.
pub fn profile_vars(_layout: &Layout) -> Vec<(&'static str, OsString)> {
    Vec::new()
}

/// Sets `var` in `vars`.
pub fn set(vars: &mut BTreeMap<OsString, OsString>, var: &str, value: OsString) {
    vars.insert(var.into(), value);
}

/// Makes `link` a symlink to `real`.
pub fn link_file(real: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(real, link)
}

/// The home directory of `uid` in the password database (`getpwuid_r`).
fn passwd_home(uid: u32) -> std::io::Result<PathBuf> {
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
        if rc == libc::ERANGE && size < 1 << 20 {
            size *= 4;
            continue;
        }
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        if result.is_null() || entry.pw_dir.is_null() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no entry",
            ));
        }
        // SAFETY: getpwuid_r succeeded, so pw_dir points to a NUL-terminated string in `buf`.
        let dir = unsafe { std::ffi::CStr::from_ptr(entry.pw_dir) };
        return Ok(PathBuf::from(OsStr::from_bytes(dir.to_bytes())));
    }
}
