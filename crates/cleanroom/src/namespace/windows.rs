//! The namespace on Windows: `<LocalAppData>\cleanroom-<SID>`, where LocalAppData is
//! the known folder of the token's user (`SHGetKnownFolderPath`, `KF_FLAG_DEFAULT_PATH`) and SID
//! is the user SID read from the process token — never USERPROFILE, LOCALAPPDATA, TEMP or
//! USERNAME, which test suites redirect.
//!
//! Invariant: the namespace is used only after it has been checked, on every open, to be a real
//! directory (not a reparse point: no junction, no symlink) whose owner is the token's user SID;
//! the check applies to the handle we then hold, and that handle is opened without
//! `FILE_SHARE_DELETE`, so the directory cannot be renamed or replaced while we hold it.

use std::os::windows::io::{AsHandle, OwnedHandle};
use std::path::{Path, PathBuf};

use windows_sys::Win32::Storage::FileSystem::{
    FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_BACKUP_SEMANTICS,
    FILE_FLAG_OPEN_REPARSE_POINT, FILE_LIST_DIRECTORY, FILE_SHARE_READ, FILE_SHARE_WRITE,
    OPEN_EXISTING, READ_CONTROL,
};
use windows_sys::Win32::UI::Shell::FOLDERID_LocalAppData;

use super::User;
use crate::error::{Error, IoContext, Result};
use crate::sys::windows as win;

/// The namespace directory, held without `FILE_SHARE_DELETE`.
pub(crate) type Dir = OwnedHandle;

/// `<LocalAppData>\cleanroom-<SID>`.
pub(crate) fn default_path() -> Result<PathBuf> {
    let sid = user_sid().map_err(|e| Error::sys("read the user SID of the process token", e))?;
    let local = local_app_data().map_err(|e| Error::sys("find the LocalAppData folder", e))?;
    Ok(local.join(format!("cleanroom-{sid}")))
}

/// Creates the directory `path`; one that exists already is left to the check.
pub(crate) fn create_dir(path: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// `path` made absolute against the current directory.
pub(crate) fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).at("resolve", path)
}

/// Opens the directory at `path` (not what a reparse point names) and verifies the handle: a
/// directory owned by the token's user SID.
pub(crate) fn open_verified(path: &Path) -> Result<(OwnedHandle, User)> {
    let sid = user_sid().map_err(|e| Error::sys("read the user SID of the process token", e))?;
    let dir = open_dir(path).at("open state directory", path)?;
    check_private_dir(&dir, &sid).map_err(|reason| Error::UnsafeNamespace {
        path: path.to_path_buf(),
        reason,
    })?;
    Ok((dir, User::Sid(sid)))
}

/// Another handle on the same directory.
pub(crate) fn duplicate(dir: &OwnedHandle, path: &Path) -> Result<OwnedHandle> {
    dir.try_clone().at("duplicate the handle of", path)
}

/// Opens a directory itself (not what a reparse point names) for listing and reading its owner,
/// sharing read and write but not delete.
pub(crate) fn open_dir(path: &Path) -> std::io::Result<OwnedHandle> {
    win::create_file(
        path,
        FILE_LIST_DIRECTORY | READ_CONTROL,
        FILE_SHARE_READ | FILE_SHARE_WRITE,
        OPEN_EXISTING,
        FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT,
    )
}

/// Checks that the open handle `dir` is a directory, not a reparse point, owned by `sid`.
pub(crate) fn check_private_dir(dir: &OwnedHandle, sid: &str) -> Result<(), String> {
    let info = win::file_info(dir.as_handle()).map_err(|e| format!("cannot inspect it: {e}"))?;
    if info.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
        return Err("it is a reparse point (junction or symbolic link)".into());
    }
    if info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY == 0 {
        return Err("it is not a directory".into());
    }
    let owner =
        win::file_owner_sid(dir.as_handle()).map_err(|e| format!("cannot read its owner: {e}"))?;
    if owner != sid {
        return Err(format!("it is owned by {owner}, not by the user {sid}"));
    }
    Ok(())
}

/// The user SID of the process token, as a string.
pub(crate) fn user_sid() -> std::io::Result<String> {
    win::process_user_sid()
}

/// The default LocalAppData known folder of the token's user (not `%LOCALAPPDATA%`).
fn local_app_data() -> std::io::Result<PathBuf> {
    win::known_folder(&FOLDERID_LocalAppData)
}
