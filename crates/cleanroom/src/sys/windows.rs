//! Small helpers every Windows file of the library shares: UTF-16 paths (with the `\\?\` prefix
//! for long paths), the last error as an `io::Error`, owned handles, known folders, registry values
//! and the job queries `doctor` makes.
//!
//! All `unsafe` here wraps one Win32 call each; handles are owned (`OwnedHandle`) so none leaks.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::windows::ffi::{OsStrExt, OsStringExt};
use std::os::windows::io::{AsRawHandle, BorrowedHandle, FromRawHandle, OwnedHandle};
use std::path::{Path, PathBuf};

use windows_sys::Win32::Foundation::{HANDLE, INVALID_HANDLE_VALUE};
use windows_sys::Win32::Storage::FileSystem::{
    GetFileInformationByHandle, BY_HANDLE_FILE_INFORMATION,
};

/// `s` as a NUL-terminated UTF-16 string.
pub fn wide(s: impl AsRef<OsStr>) -> Vec<u16> {
    s.as_ref().encode_wide().chain(Some(0)).collect()
}

/// `path` as a NUL-terminated UTF-16 string in the `\\?\` form, which has no MAX_PATH limit and
/// is taken literally (no `.`/`..` or trailing-dot processing). Relative paths are made absolute.
pub fn long_path(path: &Path) -> Vec<u16> {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let text = absolute.as_os_str().to_string_lossy();
    let verbatim: PathBuf = if text.starts_with(r"\\?\") {
        absolute
    } else if let Some(unc) = text.strip_prefix(r"\\") {
        PathBuf::from(format!(r"\\?\UNC\{unc}"))
    } else {
        PathBuf::from(format!(r"\\?\{}", text.replace('/', "\\")))
    };
    wide(verbatim.as_os_str())
}

/// A UTF-16 buffer (up to its first NUL) as an `OsString`.
pub fn from_wide(buf: &[u16]) -> OsString {
    let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    OsString::from_wide(&buf[..end])
}

/// The calling thread's last error.
pub fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// Owns `handle`, or returns the last error when it is null or invalid.
pub fn owned(handle: HANDLE) -> io::Result<OwnedHandle> {
    if handle.is_null() || handle == INVALID_HANDLE_VALUE {
        return Err(last_error());
    }
    // SAFETY: the handle is valid (checked above) and was just returned to us by the caller's
    // Win32 call, so nothing else owns it.
    Ok(unsafe { OwnedHandle::from_raw_handle(handle) })
}

/// Turns a Win32 BOOL result into an `io::Result`.
pub fn check(ok: i32) -> io::Result<()> {
    if ok == 0 {
        Err(last_error())
    } else {
        Ok(())
    }
}

/// What the file system says of the open file or directory `handle`: attributes, volume serial
/// number, file index, link count.
pub fn file_info(handle: BorrowedHandle<'_>) -> io::Result<BY_HANDLE_FILE_INFORMATION> {
    // SAFETY: plain old data; all-zero is a valid value to be filled in.
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: `handle` is open for the duration of the call; `info` is a valid out-parameter.
    check(unsafe { GetFileInformationByHandle(handle.as_raw_handle(), &mut info) })?;
    Ok(info)
}

/// FILETIME-style 100 ns ticks of a `FILETIME`.
pub fn ticks(time: windows_sys::Win32::Foundation::FILETIME) -> u64 {
    (u64::from(time.dwHighDateTime) << 32) | u64::from(time.dwLowDateTime)
}

/// The NUL-terminated UTF-16 string at `text`.
///
/// # Safety
/// `text` must point to a valid NUL-terminated UTF-16 string.
pub unsafe fn from_wide_ptr(text: *const u16) -> OsString {
    // SAFETY: the caller promises a NUL-terminated string, so every unit up to the NUL is valid.
    let len = (0..).take_while(|&i| unsafe { *text.add(i) } != 0).count();
    // SAFETY: `text` holds `len` valid UTF-16 units (see above).
    OsString::from_wide(unsafe { std::slice::from_raw_parts(text, len) })
}

/// The default path of a known folder of the token's user (`SHGetKnownFolderPath` with
/// `KF_FLAG_DEFAULT_PATH`): never what an environment variable says.
pub fn known_folder(id: &windows_sys::core::GUID) -> io::Result<PathBuf> {
    use windows_sys::Win32::System::Com::CoTaskMemFree;
    use windows_sys::Win32::UI::Shell::{SHGetKnownFolderPath, KF_FLAG_DEFAULT_PATH};
    let mut path = std::ptr::null_mut();
    // SAFETY: `id` is a valid GUID; a null token means the current user; the string is freed
    // below even on failure, as documented.
    let hr = unsafe {
        SHGetKnownFolderPath(
            id,
            KF_FLAG_DEFAULT_PATH as u32,
            std::ptr::null_mut(),
            &mut path,
        )
    };
    let result = if hr < 0 || path.is_null() {
        Err(io::Error::from_raw_os_error(hr))
    } else {
        // SAFETY: on success `path` is a NUL-terminated UTF-16 string.
        Ok(PathBuf::from(unsafe { from_wide_ptr(path) }))
    };
    // SAFETY: freeing what SHGetKnownFolderPath allocated (null is allowed).
    unsafe { CoTaskMemFree(path as *const _) };
    result
}

/// A value under `HKEY_LOCAL_MACHINE\key`: a string (`REG_SZ`) as it is, a `REG_DWORD` in
/// decimal.
pub fn machine_registry_value(key: &str, name: &str) -> io::Result<String> {
    use windows_sys::Win32::System::Registry::{
        RegGetValueW, HKEY_LOCAL_MACHINE, REG_DWORD, RRF_RT_REG_DWORD, RRF_RT_REG_SZ,
    };
    let (key, name) = (wide(key), wide(name));
    let mut buf = [0u16; 256];
    let mut size = std::mem::size_of_val(&buf) as u32;
    let mut kind = 0u32;
    // SAFETY: both names are NUL-terminated; `buf` is writable for `size` bytes (the call sets
    // `size` to the bytes written); `kind` receives the value's type.
    let rc = unsafe {
        RegGetValueW(
            HKEY_LOCAL_MACHINE,
            key.as_ptr(),
            name.as_ptr(),
            RRF_RT_REG_SZ | RRF_RT_REG_DWORD,
            &mut kind,
            buf.as_mut_ptr().cast(),
            &mut size,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc as i32));
    }
    Ok(if kind == REG_DWORD {
        (u32::from(buf[0]) | (u32::from(buf[1]) << 16)).to_string()
    } else {
        let units = (size as usize / 2).min(buf.len());
        from_wide(&buf[..units]).to_string_lossy().into_owned()
    })
}

/// The limit flags (`JOB_OBJECT_LIMIT_*`) of the job the calling process is in (its immediate
/// one, when jobs are nested), or `None` when it is in no job.
pub fn own_job_limits() -> io::Result<Option<u32>> {
    use windows_sys::Win32::System::JobObjects::{
        IsProcessInJob, JobObjectExtendedLimitInformation, QueryInformationJobObject,
        JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    };
    use windows_sys::Win32::System::Threading::GetCurrentProcess;
    let mut in_job = 0;
    // SAFETY: the current process's pseudo handle needs no closing; a null job asks about any
    // job; `in_job` is a valid out-parameter.
    check(unsafe { IsProcessInJob(GetCurrentProcess(), std::ptr::null_mut(), &mut in_job) })?;
    if in_job == 0 {
        return Ok(None);
    }
    // SAFETY: plain old data; all-zero is a valid value to be filled in.
    let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: a null job means the caller's own; `limits` is the structure this information
    // class expects, of the size given.
    check(unsafe {
        QueryInformationJobObject(
            std::ptr::null_mut(),
            JobObjectExtendedLimitInformation,
            (&mut limits as *mut JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
            std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            std::ptr::null_mut(),
        )
    })?;
    Ok(Some(limits.BasicLimitInformation.LimitFlags))
}

/// A new job that kills its processes when its last handle closes (`KILL_ON_JOB_CLOSE`), with
/// the process `process` assigned to it. When `process` is in a job already, the new job is
/// nested in that one (Windows 8 and later; earlier versions refuse).
pub fn assign_to_new_job(process: BorrowedHandle<'_>) -> io::Result<OwnedHandle> {
    use windows_sys::Win32::System::JobObjects::{
        AssignProcessToJobObject, CreateJobObjectW, JobObjectExtendedLimitInformation,
        SetInformationJobObject, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
        JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    };
    // SAFETY: no security attributes, no name; the handle is owned at once.
    let job = owned(unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) })?;
    // SAFETY: plain old data; all-zero means "no limits".
    let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
    limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    // SAFETY: the job handle is open; `limits` is the structure this information class
    // expects, of the size given.
    check(unsafe {
        SetInformationJobObject(
            job.as_raw_handle(),
            JobObjectExtendedLimitInformation,
            (&limits as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
            std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
        )
    })?;
    // SAFETY: both handles are open for the call.
    check(unsafe { AssignProcessToJobObject(job.as_raw_handle(), process.as_raw_handle()) })?;
    Ok(job)
}

/// Tries to lock the `len` bytes at `offset` of the open file `file`, shared or exclusive,
/// without waiting (`LockFileEx` with `LOCKFILE_FAIL_IMMEDIATELY`): `Ok(false)` when another
/// handle holds a lock that conflicts. The range may lie beyond the end of the file. The lock
/// belongs to this handle: Windows releases it when the handle is closed, also when its
/// process dies; a lock beyond the content leaves the content readable by everyone.
pub fn try_lock_range(
    file: BorrowedHandle<'_>,
    offset: u64,
    len: u64,
    exclusive: bool,
) -> io::Result<bool> {
    use windows_sys::Win32::Foundation::ERROR_LOCK_VIOLATION;
    use windows_sys::Win32::Storage::FileSystem::{
        LockFileEx, LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY,
    };
    let mut flags = LOCKFILE_FAIL_IMMEDIATELY;
    if exclusive {
        flags |= LOCKFILE_EXCLUSIVE_LOCK;
    }
    let (low, high) = (len as u32, (len >> 32) as u32);
    // SAFETY: `file` is open for the duration of the call; `overlapped` is valid until the
    // operation completes (`at_offset` waits for it).
    let locked = at_offset(file, offset, |overlapped| unsafe {
        LockFileEx(file.as_raw_handle(), flags, 0, low, high, overlapped)
    });
    match locked {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(ERROR_LOCK_VIOLATION as i32) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Releases the lock this handle holds on the `len` bytes at `offset` of `file` (`UnlockFileEx`;
/// the range must be exactly one that was locked).
pub fn unlock_range(file: BorrowedHandle<'_>, offset: u64, len: u64) -> io::Result<()> {
    use windows_sys::Win32::Storage::FileSystem::UnlockFileEx;
    let (low, high) = (len as u32, (len >> 32) as u32);
    // SAFETY: `file` is open for the duration of the call; `overlapped` is valid until the
    // operation completes (`at_offset` waits for it).
    at_offset(file, offset, |overlapped| unsafe {
        UnlockFileEx(file.as_raw_handle(), 0, low, high, overlapped)
    })
}

/// Makes the call `op` with an `OVERLAPPED` naming `offset` of `file`, and waits for it to
/// complete if `file` was opened for overlapped I/O (`ERROR_IO_PENDING`), so the structure
/// outlives the operation whatever the handle.
fn at_offset(
    file: BorrowedHandle<'_>,
    offset: u64,
    op: impl FnOnce(*mut windows_sys::Win32::System::IO::OVERLAPPED) -> i32,
) -> io::Result<()> {
    use windows_sys::Win32::Foundation::ERROR_IO_PENDING;
    use windows_sys::Win32::System::IO::{GetOverlappedResult, OVERLAPPED};
    // SAFETY: plain old data; all-zero is a valid OVERLAPPED (no event), the offset set below.
    let mut overlapped: OVERLAPPED = unsafe { std::mem::zeroed() };
    overlapped.Anonymous.Anonymous.Offset = offset as u32;
    overlapped.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
    match check(op(&mut overlapped)) {
        Err(e) if e.raw_os_error() == Some(ERROR_IO_PENDING as i32) => {
            let mut transferred = 0;
            // SAFETY: `file` is open; `overlapped` is the structure of the pending operation,
            // and waiting (TRUE) keeps it alive until that operation has completed.
            check(unsafe {
                GetOverlappedResult(file.as_raw_handle(), &overlapped, &mut transferred, 1)
            })
        }
        result => result,
    }
}
