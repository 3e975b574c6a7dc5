//! Mutating `fs/*` calls of a server run by an ordinary user, where the call's policy needs
//! mounts (a read-only `.git` inside a writable workspace) that a thread cannot get (a user
//! namespace is for single-threaded processes only) and the Landlock cover would forbid new
//! entries in the workspace root.
//!
//! The call is planned on its confined thread (reads under the cover are exact), then a forked
//! child applies the process form of the policy (user and mount namespace, mounts, Landlock; the
//! same hook as `process/start`) and executes the plan with raw system calls only.
//!
//! Invariants: the child runs nothing but async-signal-safe calls on data prepared before the
//! fork, and exits with 0 or the errno of the first step that failed, which the parent reports
//! as that OS error; the child is registered with the reaper before it can exit, so the orphan
//! reaper never takes its status; the fork is made from an unconfined thread (a child of a
//! confined one would keep the cover on top of the mounts).

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use cleanroom::protect::Sandbox;

use super::os_error;
use crate::process::Reaper;
use crate::protocol::RpcError;

/// One system call of a plan.
#[derive(Debug)]
pub enum Step {
    /// Creates or truncates the file and writes the bytes.
    Write(CString, Vec<u8>),
    /// `mkdir`; `true`: an existing directory is fine.
    Mkdir(CString, bool),
    /// Copies a regular file's bytes and permission bits.
    CopyFile(CString, CString),
    /// `symlink(target, path)`.
    Symlink(CString, CString),
    /// `unlink`.
    Unlink(CString),
    /// `rmdir`.
    Rmdir(CString),
}

/// A path as a C string (file URIs never decode to a NUL).
pub fn c(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap_or_default()
}

/// The steps of `mkdir -p path`: every missing-or-existing ancestor, shallowest first.
pub fn mkdir_all(path: &Path) -> Vec<Step> {
    let mut prefixes: Vec<&Path> = path.ancestors().filter(|p| p.parent().is_some()).collect();
    prefixes.reverse();
    prefixes
        .into_iter()
        .map(|p| Step::Mkdir(c(p), true))
        .collect()
}

/// The steps removing the tree at `path` (not following links), deepest first.
pub fn remove_tree(path: &Path, steps: &mut Vec<Step>) -> Result<(), RpcError> {
    for entry in fs::read_dir(path).map_err(os_error)? {
        let entry = entry.map_err(os_error)?;
        match entry.file_type().map_err(os_error)?.is_dir() {
            true => remove_tree(&entry.path(), steps)?,
            false => steps.push(Step::Unlink(c(&entry.path()))),
        }
    }
    steps.push(Step::Rmdir(c(path)));
    Ok(())
}

/// The steps copying the tree at `from` to `to` (links as links).
pub fn copy_tree(from: &Path, to: &Path, steps: &mut Vec<Step>) -> Result<(), RpcError> {
    let meta = fs::symlink_metadata(from).map_err(os_error)?;
    if meta.file_type().is_symlink() {
        steps.push(Step::Symlink(
            c(&fs::read_link(from).map_err(os_error)?),
            c(to),
        ));
    } else if meta.is_dir() {
        steps.push(Step::Mkdir(c(to), false));
        for entry in fs::read_dir(from).map_err(os_error)? {
            let entry = entry.map_err(os_error)?;
            copy_tree(&entry.path(), &to.join(entry.file_name()), steps)?;
        }
    } else {
        steps.push(Step::CopyFile(c(from), c(to)));
    }
    Ok(())
}

/// Forks a child that applies `sandbox` and runs `steps`; blocking (call on a thread that is
/// not itself confined).
pub fn run(sandbox: &Sandbox, steps: &[Step], reaper: &Reaper) -> Result<(), RpcError> {
    let hook = sandbox.child_hook();
    let pid = {
        let mut guard = reaper.spawning();
        // SAFETY: the child only runs the sandbox hook (async-signal-safe by contract) and
        // `execute` (raw system calls on data prepared before the fork), then `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let code = match hook.as_ref().map_or(Ok(()), |h| h()) {
                Ok(()) => execute(steps),
                Err(e) => e.raw_os_error().unwrap_or(libc::EPERM),
            };
            // SAFETY: ends the child without running destructors or atexit handlers.
            unsafe { libc::_exit(code.clamp(0, 255)) };
        }
        if pid < 0 {
            return Err(RpcError::internal(format!(
                "cannot fork for the filesystem call: {}",
                io::Error::last_os_error()
            )));
        }
        guard.own(pid);
        pid
    };
    let mut status = 0;
    let waited = loop {
        // SAFETY: waits for our own child; `status` is a valid out-pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break rc == pid;
        }
    };
    reaper.release(pid);
    match (waited, libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, true, 0) => Ok(()),
        (true, true, errno) => Err(os_error(io::Error::from_raw_os_error(errno))),
        _ => Err(RpcError::internal("the filesystem child did not finish")),
    }
}

/// Runs `steps` in order; 0 or the errno of the first failure. Raw system calls only.
fn execute(steps: &[Step]) -> i32 {
    for step in steps {
        let result = match step {
            Step::Write(path, data) => write_file(path, data),
            Step::Mkdir(path, existing_ok) => mkdir(path, *existing_ok),
            Step::CopyFile(from, to) => copy_file(from, to),
            // SAFETY: NUL-terminated paths.
            Step::Symlink(target, path) => {
                check(unsafe { libc::symlink(target.as_ptr(), path.as_ptr()) })
            }
            // SAFETY: a NUL-terminated path.
            Step::Unlink(path) => check(unsafe { libc::unlink(path.as_ptr()) }),
            // SAFETY: a NUL-terminated path.
            Step::Rmdir(path) => check(unsafe { libc::rmdir(path.as_ptr()) }),
        };
        if let Err(errno) = result {
            return errno;
        }
    }
    0
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn check(rc: libc::c_int) -> Result<(), i32> {
    if rc == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

fn write_file(path: &CString, data: &[u8]) -> Result<(), i32> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path; the mode is an integer.
    let fd = unsafe { libc::open(path.as_ptr(), flags, 0o666) };
    if fd < 0 {
        return Err(errno());
    }
    let written = write_all(fd, data);
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    written
}

fn write_all(fd: libc::c_int, mut data: &[u8]) -> Result<(), i32> {
    while !data.is_empty() {
        // SAFETY: `data` is a valid buffer of the given length.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        match n {
            n if n > 0 => data = &data[n as usize..],
            _ if errno() == libc::EINTR => {}
            _ => return Err(errno()),
        }
    }
    Ok(())
}

fn mkdir(path: &CString, existing_ok: bool) -> Result<(), i32> {
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::mkdir(path.as_ptr(), 0o777) } == 0 {
        return Ok(());
    }
    let err = errno();
    // SAFETY: an all-zero `stat` is a valid out-buffer for stat(2).
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    let is_dir = unsafe { libc::stat(path.as_ptr(), &mut st) } == 0
        && st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    if err == libc::EEXIST && existing_ok && is_dir {
        Ok(())
    } else {
        Err(err)
    }
}

fn copy_file(from: &CString, to: &CString) -> Result<(), i32> {
    // SAFETY: a NUL-terminated path.
    let src = unsafe { libc::open(from.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if src < 0 {
        return Err(errno());
    }
    // SAFETY: an all-zero `stat` is a valid out-buffer; `src` is open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let mode = match unsafe { libc::fstat(src, &mut st) } {
        0 => st.st_mode & 0o7777,
        _ => 0o644,
    };
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path; integer flags and mode.
    let dst = unsafe { libc::open(to.as_ptr(), flags, mode as libc::c_uint) };
    let result = if dst < 0 {
        Err(errno())
    } else {
        pump(src, dst)
    };
    // SAFETY: the descriptors are ours and closed once.
    unsafe {
        libc::close(src);
        if dst >= 0 {
            libc::close(dst);
        }
    }
    result
}

fn pump(src: libc::c_int, dst: libc::c_int) -> Result<(), i32> {
    let mut buf = [0u8; 16 * 1024];
    loop {
        // SAFETY: `buf` is a valid, writable buffer of the given length.
        let n = unsafe { libc::read(src, buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 => return Ok(()),
            n if n > 0 => write_all(dst, &buf[..n as usize])?,
            _ if errno() == libc::EINTR => {}
            _ => return Err(errno()),
        }
    }
}
