//! The Unix side of the environment: the account's home from the password database, and the
//! variables set as they are named (Unix names are case-sensitive).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::root::Layout;

/// The variable that names the home directory.
pub const HOME_VAR: &str = "HOME";

/// The real uid (as `uid N`, for messages) and its home in the password database.
pub fn account_home() -> (String, std::io::Result<PathBuf>) {
    let uid = rustix::process::getuid().as_raw();
    (format!("uid {uid}"), crate::sys::unix::passwd_home(uid))
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
