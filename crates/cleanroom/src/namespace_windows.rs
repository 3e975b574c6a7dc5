//! The per-user namespace on Windows: `<LocalAppData>\cleanroom-<SID>`, where LocalAppData is
//! the known folder of the token's user (`SHGetKnownFolderPath`, `KF_FLAG_DEFAULT_PATH`) and SID
//! is the user SID read from the process token — never USERPROFILE, LOCALAPPDATA, TEMP or
//! USERNAME, which test suites redirect.
//!
//! Invariant: the namespace is used only after it has been checked, on every open, to be a real
//! directory (not a reparse point: no junction, no symlink) whose owner is the token's user SID;
//! the check applies to the handle we then hold, and that handle is opened without
//! `FILE_SHARE_DELETE`, so the directory cannot be renamed or replaced while we hold it.

use std::os::windows::io::{AsRawHandle, OwnedHandle};
use std::path::{Path, PathBuf};

use windows_sys::Win32::Foundation::{LocalFree, HLOCAL};
use windows_sys::Win32::Security::Authorization::{
    ConvertSidToStringSidW, GetSecurityInfo, SE_FILE_OBJECT,
};
use windows_sys::Win32::Security::{
    GetTokenInformation, TokenUser, OWNER_SECURITY_INFORMATION, PSID, TOKEN_QUERY, TOKEN_USER,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, GetFileInformationByHandle, BY_HANDLE_FILE_INFORMATION, FILE_ATTRIBUTE_DIRECTORY,
    FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT,
    FILE_LIST_DIRECTORY, FILE_SHARE_READ, FILE_SHARE_WRITE, OPEN_EXISTING, READ_CONTROL,
};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};
use windows_sys::Win32::UI::Shell::FOLDERID_LocalAppData;

pub use crate::layout::{
    classify, is_valid_run_id, run_id_unix_secs, EntryKind, LOCKS_DIR, PENDING_PREFIX, ROOT_PREFIX,
    TRASH_PREFIX,
};

use crate::error::IoContext;
use crate::win;
use crate::{Error, Result};

/// An opened, verified namespace directory.
#[derive(Debug)]
pub struct Namespace {
    path: PathBuf,
    /// Held without `FILE_SHARE_DELETE`: nobody renames or removes the directory meanwhile.
    dir: OwnedHandle,
    sid: String,
}

impl Namespace {
    /// The default namespace of the token's user: `<LocalAppData>\cleanroom-<SID>`.
    pub fn default_path() -> Result<PathBuf> {
        let sid =
            user_sid().map_err(|e| Error::sys("read the user SID of the process token", e))?;
        let local = local_app_data().map_err(|e| Error::sys("find the LocalAppData folder", e))?;
        Ok(local.join(format!("cleanroom-{sid}")))
    }

    /// Opens `path`, creating it (its parent must exist) when it does not exist yet.
    pub fn open_or_create(path: &Path) -> Result<Namespace> {
        match std::fs::create_dir(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("create state directory", path, e)),
        }
        Namespace::open(path)
    }

    /// Opens an existing namespace and verifies it.
    pub fn open(path: &Path) -> Result<Namespace> {
        let path = std::path::absolute(path).at("resolve", path)?;
        let sid =
            user_sid().map_err(|e| Error::sys("read the user SID of the process token", e))?;
        let dir = open_dir(&path).at("open state directory", &path)?;
        check_private_dir(&dir, &sid).map_err(|reason| Error::UnsafeNamespace {
            path: path.clone(),
            reason,
        })?;
        Ok(Namespace { path, dir, sid })
    }

    /// The namespace's absolute path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The user SID (`S-1-5-21-…`) that owns this namespace.
    pub fn sid(&self) -> &str {
        &self.sid
    }

    /// Another handle on the same verified directory.
    pub fn try_clone(&self) -> Result<Namespace> {
        Ok(Namespace {
            path: self.path.clone(),
            dir: self
                .dir
                .try_clone()
                .at("duplicate the handle of", &self.path)?,
            sid: self.sid.clone(),
        })
    }
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
    // SAFETY: plain old data; all-zero is a valid value to be filled in.
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is an open handle and `info` a valid out-parameter.
    win::check(unsafe { GetFileInformationByHandle(dir.as_raw_handle(), &mut info) })
        .map_err(|e| format!("cannot inspect it: {e}"))?;
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
pub fn user_sid() -> std::io::Result<String> {
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
