//! The namespace on Windows: `<LocalAppData>\cleanroom-<SID>`, where LocalAppData is
//! the known folder of the token's user (`SHGetKnownFolderPath`, `KF_FLAG_DEFAULT_PATH`) and SID
//! is the user SID read from the process token — never USERPROFILE, LOCALAPPDATA, TEMP or
//! USERNAME, which test suites redirect.
//!
//! Invariant: the namespace is used only after it has been checked, on every open, to be a real
//! directory (not a reparse point: no junction, no symlink) whose owner is the token's user SID;
//! the check applies to the handle we then hold, and that handle is opened without
//! `FILE_SHARE_DELETE`, so the directory cannot be renamed or replaced while we hold it.

use std::os::windows::io::{AsHandle, AsRawHandle, OwnedHandle};
use std::path::{Path, PathBuf};

use windows_sys::Win32::Foundation::{LocalFree, HLOCAL};
use windows_sys::Win32::Security::Authorization::{
    ConvertSidToStringSidW, GetSecurityInfo, SE_FILE_OBJECT,
};
use windows_sys::Win32::Security::{
    GetTokenInformation, TokenUser, OWNER_SECURITY_INFORMATION, PSID, TOKEN_QUERY, TOKEN_USER,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT,
    FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT, FILE_LIST_DIRECTORY, FILE_SHARE_READ,
    FILE_SHARE_WRITE, OPEN_EXISTING, READ_CONTROL,
};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};
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
    let name = win::long_path(path);
    // SAFETY: `name` is a NUL-terminated UTF-16 string that outlives the call; no security
    // attributes or template are passed.
    win::owned(unsafe {
        CreateFileW(
            name.as_ptr(),
            FILE_LIST_DIRECTORY | READ_CONTROL,
            FILE_SHARE_READ | FILE_SHARE_WRITE,
            std::ptr::null(),
            OPEN_EXISTING,
            FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT,
            std::ptr::null_mut(),
        )
    })
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
    let owner = owner_sid(dir).map_err(|e| format!("cannot read its owner: {e}"))?;
    if owner != sid {
        return Err(format!("it is owned by {owner}, not by the user {sid}"));
    }
    Ok(())
}

/// The user SID of the process token, as a string.
pub(crate) fn user_sid() -> std::io::Result<String> {
    let mut token = std::ptr::null_mut();
    // SAFETY: the pseudo-handle of the current process is always valid; `token` is an
    // out-parameter.
    win::check(unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut token) })?;
    let token = win::owned(token)?;
    let mut buf = vec![0u64; 64];
    let mut len = 0u32;
    // SAFETY: `buf` is writable for the length passed (8-byte aligned, as TOKEN_USER needs).
    win::check(unsafe {
        GetTokenInformation(
            token.as_raw_handle(),
            TokenUser,
            buf.as_mut_ptr().cast(),
            (buf.len() * 8) as u32,
            &mut len,
        )
    })?;
    // SAFETY: GetTokenInformation filled `buf` with a TOKEN_USER whose SID lies inside `buf`.
    let user = unsafe { &*(buf.as_ptr() as *const TOKEN_USER) };
    sid_string(user.User.Sid)
}

/// The owner SID of an open object, as a string.
fn owner_sid(handle: &OwnedHandle) -> std::io::Result<String> {
    let mut owner: PSID = std::ptr::null_mut();
    let mut descriptor = std::ptr::null_mut();
    // SAFETY: `handle` is open with READ_CONTROL; the out-parameters are valid; the descriptor
    // is freed below with LocalFree as documented, after the owner SID (inside it) is read.
    let rc = unsafe {
        GetSecurityInfo(
            handle.as_raw_handle(),
            SE_FILE_OBJECT,
            OWNER_SECURITY_INFORMATION,
            &mut owner,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut descriptor,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc as i32));
    }
    let text = if owner.is_null() {
        Err(std::io::Error::other("no owner is recorded"))
    } else {
        sid_string(owner)
    };
    // SAFETY: `descriptor` was allocated by GetSecurityInfo for us to free.
    unsafe { LocalFree(descriptor as HLOCAL) };
    text
}

/// `S-1-…` for a SID.
fn sid_string(sid: PSID) -> std::io::Result<String> {
    let mut text = std::ptr::null_mut();
    // SAFETY: `sid` points to a valid SID; `text` receives a LocalAlloc'ed string we free.
    win::check(unsafe { ConvertSidToStringSidW(sid, &mut text) })?;
    // SAFETY: ConvertSidToStringSidW returned a NUL-terminated UTF-16 string.
    let value = unsafe { win::from_wide_ptr(text) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: allocated by ConvertSidToStringSidW for us to free.
    unsafe { LocalFree(text as HLOCAL) };
    Ok(value)
}

/// The default LocalAppData known folder of the token's user (not `%LOCALAPPDATA%`).
fn local_app_data() -> std::io::Result<PathBuf> {
    win::known_folder(&FOLDERID_LocalAppData)
}
