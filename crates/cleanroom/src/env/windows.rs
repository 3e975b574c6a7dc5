//! The Windows side of the environment: the account's profile directory (the known folder, not
//! `%USERPROFILE%`), the profile variables pinned inside the root (USERPROFILE, HOMEDRIVE and
//! HOMEPATH, APPDATA, LOCALAPPDATA), and variables set case-insensitively as Windows names them.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf, Prefix};

use windows_sys::Win32::UI::Shell::FOLDERID_Profile;

use crate::root::Layout;
use crate::sys::windows as win;

/// The variable that names the home directory.
pub const HOME_VAR: &str = "USERPROFILE";

/// The token's user (its SID, for messages) and its profile directory.
pub fn account_home() -> (String, std::io::Result<PathBuf>) {
    let who = crate::namespace::os::user_sid()
        .map(|sid| format!("user {sid}"))
        .unwrap_or_else(|e| format!("the current user (SID unreadable: {e})"));
    (who, profile_dir())
}

/// USERPROFILE, HOMEDRIVE + HOMEPATH, APPDATA and LOCALAPPDATA, all inside the root's home.
pub fn profile_vars(layout: &Layout) -> Vec<(&'static str, OsString)> {
    let home = &layout.home;
    let (drive, rest) = split_drive(home);
    vec![
        ("USERPROFILE", home.into()),
        ("HOMEDRIVE", drive),
        ("HOMEPATH", rest),
        ("APPDATA", home.join(r"AppData\Roaming").into()),
        ("LOCALAPPDATA", home.join(r"AppData\Local").into()),
    ]
}

/// Sets `var`, replacing every host variable of the same name in another case (`Temp`, `TEMP`):
/// Windows names are case-insensitive, and a stale twin must not win in the child.
pub fn set(vars: &mut BTreeMap<OsString, OsString>, var: &str, value: OsString) {
    vars.retain(|name, _| !name.to_string_lossy().eq_ignore_ascii_case(var));
    vars.insert(var.into(), value);
}

/// Links `link` to `real` (a file symlink; it needs Developer Mode or the privilege).
pub fn link_file(real: &Path, link: &Path) -> std::io::Result<()> {
    std::os::windows::fs::symlink_file(real, link)
}

/// `C:` and `\Users\x` of `C:\Users\x` (HOMEDRIVE, HOMEPATH); a UNC path keeps its share as drive.
fn split_drive(path: &Path) -> (OsString, OsString) {
    let mut components = path.components();
    let drive: OsString = match components.next() {
        Some(Component::Prefix(p)) => match p.kind() {
            Prefix::VerbatimDisk(d) | Prefix::Disk(d) => format!("{}:", d as char).into(),
            _ => p.as_os_str().into(),
        },
        _ => OsString::new(),
    };
    let rest: PathBuf = components.collect();
    let mut rest = rest.into_os_string();
    if rest.is_empty() {
        rest.push("\\");
    }
    (drive, rest)
}

/// The user's profile directory, from the known folder (`FOLDERID_Profile`).
fn profile_dir() -> std::io::Result<PathBuf> {
    win::known_folder(&FOLDERID_Profile)
}
