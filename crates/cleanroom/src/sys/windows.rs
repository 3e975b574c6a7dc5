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
    use std::os::windows::io::AsHandle;
    use windows_sys::Win32::System::JobObjects::JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    let job = create_job(JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE)?;
    assign_to_job(job.as_handle(), process)?;
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

// The Win32 calls of the namespace, root, removal, process, containment and run files, each a
// safe function, so that those files hold no `unsafe` (issue 28).

/// Opens `path` itself (`CreateFileW` on its `\\?\` form, no security attributes, no template)
/// with the access rights, sharing, disposition and flags given.
pub fn create_file(
    path: &Path,
    access: u32,
    share: u32,
    disposition: u32,
    flags: u32,
) -> io::Result<OwnedHandle> {
    use windows_sys::Win32::Storage::FileSystem::CreateFileW;
    let name = long_path(path);
    // SAFETY: `name` is a NUL-terminated UTF-16 string that outlives the call; no security
    // attributes or template are passed; the handle is owned at once.
    owned(unsafe {
        CreateFileW(
            name.as_ptr(),
            access,
            share,
            std::ptr::null(),
            disposition,
            flags,
            std::ptr::null_mut(),
        )
    })
}

/// Renames `from` to `to` (`MoveFileExW` with `flags`: without `MOVEFILE_REPLACE_EXISTING`, it
/// never replaces anything).
pub fn move_file(from: &Path, to: &Path, flags: u32) -> io::Result<()> {
    use windows_sys::Win32::Storage::FileSystem::MoveFileExW;
    let (from, to) = (long_path(from), long_path(to));
    // SAFETY: both are NUL-terminated UTF-16 paths that outlive the call.
    check(unsafe { MoveFileExW(from.as_ptr(), to.as_ptr(), flags) })
}

/// Deletes the file `path` (a link itself, never its target).
pub fn delete_file(path: &Path) -> io::Result<()> {
    use windows_sys::Win32::Storage::FileSystem::DeleteFileW;
    let name = long_path(path);
    // SAFETY: `name` is a NUL-terminated UTF-16 path that outlives the call.
    check(unsafe { DeleteFileW(name.as_ptr()) })
}

/// Removes the empty directory `path` (a directory link itself, never its target).
pub fn remove_directory(path: &Path) -> io::Result<()> {
    use windows_sys::Win32::Storage::FileSystem::RemoveDirectoryW;
    let name = long_path(path);
    // SAFETY: `name` is a NUL-terminated UTF-16 path that outlives the call.
    check(unsafe { RemoveDirectoryW(name.as_ptr()) })
}

/// Sets the attributes of `path` (`SetFileAttributesW` acts on a reparse point itself, not on
/// its target).
pub fn set_file_attributes(path: &Path, attributes: u32) -> io::Result<()> {
    use windows_sys::Win32::Storage::FileSystem::SetFileAttributesW;
    let name = long_path(path);
    // SAFETY: `name` is a NUL-terminated UTF-16 path that outlives the call.
    check(unsafe { SetFileAttributesW(name.as_ptr(), attributes) })
}

/// The user SID of the calling process's token, as `S-1-…`.
pub fn process_user_sid() -> io::Result<String> {
    use windows_sys::Win32::Security::{GetTokenInformation, TokenUser, TOKEN_QUERY, TOKEN_USER};
    use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};
    let mut token = std::ptr::null_mut();
    // SAFETY: the pseudo-handle of the current process is always valid; `token` is an
    // out-parameter.
    check(unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut token) })?;
    let token = owned(token)?;
    let mut buf = vec![0u64; 64];
    let mut len = 0u32;
    // SAFETY: `buf` is writable for the length passed (8-byte aligned, as TOKEN_USER needs).
    check(unsafe {
        GetTokenInformation(
            token.as_raw_handle(),
            TokenUser,
            buf.as_mut_ptr().cast(),
            (buf.len() * 8) as u32,
            &mut len,
        )
    })?;
    // SAFETY: GetTokenInformation filled `buf` with a TOKEN_USER whose SID lies inside `buf`,
    // which lives until the SID is converted below.
    let user = unsafe { &*(buf.as_ptr() as *const TOKEN_USER) };
    // SAFETY: the SID points into `buf` (see above).
    unsafe { sid_string(user.User.Sid) }
}

/// The owner SID of the object `handle` (opened with `READ_CONTROL`), as `S-1-…`.
pub fn file_owner_sid(handle: BorrowedHandle<'_>) -> io::Result<String> {
    use windows_sys::Win32::Foundation::{LocalFree, HLOCAL};
    use windows_sys::Win32::Security::Authorization::{GetSecurityInfo, SE_FILE_OBJECT};
    use windows_sys::Win32::Security::{OWNER_SECURITY_INFORMATION, PSID};
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
        return Err(io::Error::from_raw_os_error(rc as i32));
    }
    let text = if owner.is_null() {
        Err(io::Error::other("no owner is recorded"))
    } else {
        // SAFETY: `owner` points into `descriptor`, which is freed only below.
        unsafe { sid_string(owner) }
    };
    // SAFETY: `descriptor` was allocated by GetSecurityInfo for us to free.
    unsafe { LocalFree(descriptor as HLOCAL) };
    text
}

/// `S-1-…` for a SID.
///
/// # Safety
/// `sid` must point to a valid SID for the duration of the call.
unsafe fn sid_string(sid: windows_sys::Win32::Security::PSID) -> io::Result<String> {
    use windows_sys::Win32::Foundation::{LocalFree, HLOCAL};
    use windows_sys::Win32::Security::Authorization::ConvertSidToStringSidW;
    let mut text = std::ptr::null_mut();
    // SAFETY: the caller promises a valid SID; `text` receives a LocalAlloc'ed string we free.
    check(unsafe { ConvertSidToStringSidW(sid, &mut text) })?;
    // SAFETY: ConvertSidToStringSidW returned a NUL-terminated UTF-16 string.
    let value = unsafe { from_wide_ptr(text) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: allocated by ConvertSidToStringSidW for us to free.
    unsafe { LocalFree(text as HLOCAL) };
    Ok(value)
}

/// Opens the process `pid` with the access rights `access`.
pub fn open_process(pid: u32, access: u32) -> io::Result<OwnedHandle> {
    use windows_sys::Win32::System::Threading::OpenProcess;
    // SAFETY: no pointers; the handle returned is owned at once.
    owned(unsafe { OpenProcess(access, 0, pid) })
}

/// Whether the object `handle` (a process, opened with `SYNCHRONIZE`) is signalled (a process:
/// has exited) within `timeout_ms` milliseconds; 0 only polls.
pub fn wait_signalled(handle: BorrowedHandle<'_>, timeout_ms: u32) -> bool {
    use windows_sys::Win32::Foundation::WAIT_OBJECT_0;
    use windows_sys::Win32::System::Threading::WaitForSingleObject;
    // SAFETY: `handle` is open for the call; a bounded wait.
    unsafe { WaitForSingleObject(handle.as_raw_handle(), timeout_ms) == WAIT_OBJECT_0 }
}

/// The creation time of the process behind `handle`, in 100 ns ticks since 1601.
pub fn process_creation_time(handle: BorrowedHandle<'_>) -> io::Result<u64> {
    use windows_sys::Win32::Foundation::FILETIME;
    use windows_sys::Win32::System::Threading::GetProcessTimes;
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: `handle` is an open process handle; the four out-parameters are valid.
    check(unsafe {
        GetProcessTimes(
            handle.as_raw_handle(),
            &mut created,
            &mut exited,
            &mut kernel,
            &mut user,
        )
    })?;
    Ok(ticks(created))
}

/// The executable path of the process behind `handle`.
pub fn process_image_path(handle: BorrowedHandle<'_>) -> io::Result<String> {
    use windows_sys::Win32::System::Threading::{QueryFullProcessImageNameW, PROCESS_NAME_WIN32};
    let mut buf = vec![0u16; 32 * 1024];
    let mut len = buf.len() as u32;
    // SAFETY: `buf` is writable for `len` units; `len` is updated to the length written.
    check(unsafe {
        QueryFullProcessImageNameW(
            handle.as_raw_handle(),
            PROCESS_NAME_WIN32,
            buf.as_mut_ptr(),
            &mut len,
        )
    })?;
    Ok(String::from_utf16_lossy(&buf[..len as usize]))
}

/// The host's DNS host name.
pub fn dns_hostname() -> io::Result<String> {
    use windows_sys::Win32::System::SystemInformation::{
        ComputerNamePhysicalDnsHostname, GetComputerNameExW,
    };
    let mut buf = vec![0u16; 256];
    let mut len = buf.len() as u32;
    // SAFETY: `buf` is writable for `len` units; `len` is updated to the length written.
    check(unsafe {
        GetComputerNameExW(ComputerNamePhysicalDnsHostname, buf.as_mut_ptr(), &mut len)
    })?;
    Ok(String::from_utf16_lossy(&buf[..len as usize]))
}

/// Adds (`add`) or removes `handler` as a console control handler of this process. Windows
/// calls it on a thread of its own: a safe function can only do what is sound there.
pub fn set_console_ctrl_handler(
    handler: extern "system" fn(u32) -> i32,
    add: bool,
) -> io::Result<()> {
    use windows_sys::Win32::System::Console::SetConsoleCtrlHandler;
    let routine = handler as unsafe extern "system" fn(u32) -> i32;
    // SAFETY: `handler` is a plain function that lives as long as the program.
    check(unsafe { SetConsoleCtrlHandler(Some(routine), i32::from(add)) })
}

/// A new unnamed job with the limit flags `limit_flags` (`JOB_OBJECT_LIMIT_*`).
pub fn create_job(limit_flags: u32) -> io::Result<OwnedHandle> {
    use windows_sys::Win32::System::JobObjects::{
        CreateJobObjectW, JobObjectExtendedLimitInformation, SetInformationJobObject,
        JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    };
    // SAFETY: no security attributes, no name; the handle is owned at once.
    let job = owned(unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) })?;
    // SAFETY: plain old data; all-zero means "no limits".
    let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
    limits.BasicLimitInformation.LimitFlags = limit_flags;
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
    Ok(job)
}

/// Assigns the process `process` to `job`.
pub fn assign_to_job(job: BorrowedHandle<'_>, process: BorrowedHandle<'_>) -> io::Result<()> {
    use windows_sys::Win32::System::JobObjects::AssignProcessToJobObject;
    // SAFETY: both handles are open for the call.
    check(unsafe { AssignProcessToJobObject(job.as_raw_handle(), process.as_raw_handle()) })
}

/// The pids of the active processes of `job` (as many as a list of up to 2^20 holds).
pub fn job_process_ids(job: BorrowedHandle<'_>) -> Vec<u32> {
    use windows_sys::Win32::System::JobObjects::{
        JobObjectBasicProcessIdList, QueryInformationJobObject,
    };
    let mut capacity = 64usize;
    loop {
        // Two u32 counts, then the list of ULONG_PTR ids.
        let mut buf = vec![0usize; 1 + capacity];
        // SAFETY: `buf` is writable for the size given and aligned for the structure.
        let ok = unsafe {
            QueryInformationJobObject(
                job.as_raw_handle(),
                JobObjectBasicProcessIdList,
                buf.as_mut_ptr().cast(),
                (buf.len() * std::mem::size_of::<usize>()) as u32,
                std::ptr::null_mut(),
            )
        };
        let assigned = buf[0] as u32 as usize;
        let listed = ((buf[0] >> 32) as u32 as usize).min(capacity);
        if (ok != 0 && listed >= assigned) || capacity >= 1 << 20 {
            return buf[1..=listed].iter().map(|&p| p as u32).collect();
        }
        capacity = (assigned.max(capacity) * 2).max(64);
    }
}

/// How many processes of `job` are active.
pub fn job_active_processes(job: BorrowedHandle<'_>) -> io::Result<u32> {
    use windows_sys::Win32::System::JobObjects::{
        JobObjectBasicAccountingInformation, QueryInformationJobObject,
        JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
    };
    // SAFETY: plain old data; all-zero is a valid value to be filled in.
    let mut info: JOBOBJECT_BASIC_ACCOUNTING_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is the structure this class expects, of the size given.
    check(unsafe {
        QueryInformationJobObject(
            job.as_raw_handle(),
            JobObjectBasicAccountingInformation,
            (&mut info as *mut JOBOBJECT_BASIC_ACCOUNTING_INFORMATION).cast(),
            std::mem::size_of::<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION>() as u32,
            std::ptr::null_mut(),
        )
    })?;
    Ok(info.ActiveProcesses)
}

/// Terminates every process of `job`, which exits with `exit_code`.
pub fn terminate_job(job: BorrowedHandle<'_>, exit_code: u32) -> io::Result<()> {
    use windows_sys::Win32::System::JobObjects::TerminateJobObject;
    // SAFETY: the job handle is open for the call.
    check(unsafe { TerminateJobObject(job.as_raw_handle(), exit_code) })
}

/// Resumes every thread of the process `pid` (found in a snapshot of all threads); returns how
/// many were resumed.
pub fn resume_threads(pid: u32) -> io::Result<usize> {
    use windows_sys::Win32::System::Diagnostics::ToolHelp::{
        CreateToolhelp32Snapshot, Thread32First, Thread32Next, TH32CS_SNAPTHREAD, THREADENTRY32,
    };
    use windows_sys::Win32::System::Threading::{OpenThread, ResumeThread, THREAD_SUSPEND_RESUME};
    // SAFETY: a snapshot of all threads; owned at once.
    let snapshot = owned(unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) })?;
    // SAFETY: plain old data; dwSize is set as the API requires.
    let mut entry: THREADENTRY32 = unsafe { std::mem::zeroed() };
    entry.dwSize = std::mem::size_of::<THREADENTRY32>() as u32;
    let mut resumed = 0;
    // SAFETY: `snapshot` is open and `entry` is a valid, sized out-parameter.
    let mut more = unsafe { Thread32First(snapshot.as_raw_handle(), &mut entry) } != 0;
    while more {
        if entry.th32OwnerProcessID == pid {
            // SAFETY: no pointers; the handle is owned at once.
            let thread =
                owned(unsafe { OpenThread(THREAD_SUSPEND_RESUME, 0, entry.th32ThreadID) })?;
            // SAFETY: `thread` is open with THREAD_SUSPEND_RESUME.
            if unsafe { ResumeThread(thread.as_raw_handle()) } == u32::MAX {
                return Err(last_error());
            }
            resumed += 1;
        }
        // SAFETY: as for Thread32First.
        more = unsafe { Thread32Next(snapshot.as_raw_handle(), &mut entry) } != 0;
    }
    Ok(resumed)
}
