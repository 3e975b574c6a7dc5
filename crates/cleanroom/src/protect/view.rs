//! Where a policy's paths are looked up: the caller's own mount namespace, or another one reached
//! through a descriptor of its root directory (an established sandbox's namespace, which a thread
//! of a multi-threaded process cannot enter: `setns` into a mount namespace needs a process that
//! shares its filesystem context with no other thread).
//!
//! Owns: [`View`], and the lookups the compiler and the exec-server's `fs/*` calls make through
//! it: opening, `lstat`, listing and canonicalizing an absolute path; and handing a child's own
//! namespace to its parent ([`send_own`], [`View::receive`]).
//!
//! Invariant: in another namespace every path is resolved by the kernel inside the view's root
//! (`RESOLVE_IN_ROOT`: `..` and absolute symlinks stay within it), and no lookup of a view ever
//! follows a magic link (`RESOLVE_NO_MAGICLINKS`), so `/proc/self/root` cannot lead out of it.

use std::ffi::{CStr, CString, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags, ResolveFlags, Stat, CWD};

/// The mount namespace paths are looked up in (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct View {
    /// The root directory of another namespace; `None`: the caller's own.
    root: Option<Arc<OwnedFd>>,
    /// The namespace itself, where nothing else keeps it alive (a child's that has exited):
    /// without it the namespace is torn down, its mounts detached from the root, and the root
    /// shows what lies beneath them (the host's `/tmp`, not the private one).
    _namespace: Option<Arc<OwnedFd>>,
}

impl View {
    /// The caller's own mount namespace.
    pub fn own() -> View {
        View::default()
    }

    /// The namespace whose root directory `root` is (an `O_PATH` descriptor taken inside it).
    pub(crate) fn of_root(root: OwnedFd) -> View {
        View {
            root: Some(Arc::new(root)),
            _namespace: None,
        }
    }

    /// The namespace a child sent with [`send_own`] over `socket` (`SCM_RIGHTS`), kept alive as
    /// long as the view. Fails with the error the child sent with [`send_failure`] (its raw OS
    /// error, as its set-up returned it), or when it sent nothing (it died).
    pub fn receive(socket: BorrowedFd<'_>) -> io::Result<View> {
        let mut message = [0u8; FAILURE];
        let mut fds = receive_message(socket, &mut message)?.into_iter();
        match (fds.next(), fds.next()) {
            (Some(root), Some(namespace)) => Ok(View {
                root: Some(Arc::new(root)),
                _namespace: Some(Arc::new(namespace)),
            }),
            _ => match message {
                [FAILED, code @ ..] => Err(io::Error::from_raw_os_error(i32::from_ne_bytes(code))),
                _ => Err(io::Error::other(
                    "the child exited before it sent a view of its mount namespace",
                )),
            },
        }
    }

    /// Whether this is the caller's own namespace.
    pub fn is_own(&self) -> bool {
        self.root.is_none()
    }

    /// Opens the absolute `path` with `flags` (plus `O_CLOEXEC`), `mode` and `how` (plus
    /// `RESOLVE_NO_MAGICLINKS`, and `RESOLVE_IN_ROOT` in another namespace), retried while the
    /// kernel reports a concurrent rename (EAGAIN). Raw system calls only: safe after fork.
    pub fn open(
        &self,
        path: &CStr,
        flags: OFlags,
        mode: Mode,
        how: ResolveFlags,
    ) -> io::Result<OwnedFd> {
        match &self.root {
            Some(root) => open_at(root.as_fd(), path, flags, mode, how | ResolveFlags::IN_ROOT),
            None => open_at(CWD, path, flags, mode, how),
        }
    }

    /// [`View::open`] of a `Path`.
    pub fn open_path(
        &self,
        path: &Path,
        flags: OFlags,
        mode: Mode,
        how: ResolveFlags,
    ) -> io::Result<OwnedFd> {
        self.open(&c_path(path)?, flags, mode, how)
    }

    /// `lstat` of the absolute `path` (a final symlink is not followed; mounts are).
    pub fn lstat(&self, path: &Path) -> io::Result<Stat> {
        match &self.root {
            None => Ok(rustix::fs::lstat(path)?),
            Some(_) => {
                let fd = self.open_path(
                    path,
                    OFlags::PATH | OFlags::NOFOLLOW,
                    Mode::empty(),
                    ResolveFlags::empty(),
                )?;
                Ok(rustix::fs::fstat(fd)?)
            }
        }
    }

    /// The entries of the directory `path` (without `.` and `..`), each with its `lstat`
    /// (through the directory's descriptor: a final symlink not followed, a mount followed); an
    /// entry gone meanwhile is left out.
    pub fn list(&self, path: &Path) -> io::Result<Vec<(OsString, Stat)>> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY;
        let dir = self.open_path(path, flags, Mode::empty(), ResolveFlags::empty())?;
        let mut reader = rustix::fs::Dir::new(dir.try_clone()?)?;
        let mut entries = Vec::new();
        while let Some(entry) = reader.read() {
            let entry = entry?;
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
            if let Ok(stat) = rustix::fs::statat(&dir, name, flags) {
                entries.push((OsString::from_vec(name.to_bytes().to_vec()), stat));
            }
        }
        Ok(entries)
    }

    /// The canonical form of the absolute `path` (every link followed, never a magic one in
    /// another namespace) and whether it is a directory.
    pub fn canonicalize(&self, path: &Path) -> io::Result<(PathBuf, bool)> {
        if self.root.is_none() {
            let canonical = std::fs::canonicalize(path)?;
            let dir = canonical.is_dir();
            return Ok((canonical, dir));
        }
        let fd = self.open_path(path, OFlags::PATH, Mode::empty(), ResolveFlags::empty())?;
        let dir = rustix::fs::fstat(&fd)?.st_mode & libc::S_IFMT == libc::S_IFDIR;
        Ok((path_of(fd.as_fd())?, dir))
    }

    /// Whether the object at `path` (a final symlink not followed) is a directory.
    pub fn is_dir(&self, path: &Path) -> bool {
        self.lstat(path)
            .is_ok_and(|stat| stat.st_mode & libc::S_IFMT == libc::S_IFDIR)
    }
}

/// `openat2(dir, name, flags | O_CLOEXEC, mode, how | RESOLVE_NO_MAGICLINKS)`, retried while the
/// kernel reports a concurrent rename (EAGAIN). Raw system calls only: safe after fork.
pub fn open_at(
    dir: impl AsFd,
    name: &CStr,
    flags: OFlags,
    mode: Mode,
    how: ResolveFlags,
) -> io::Result<OwnedFd> {
    let how = how | ResolveFlags::NO_MAGICLINKS;
    loop {
        match rustix::fs::openat2(dir.as_fd(), name, flags | OFlags::CLOEXEC, mode, how) {
            Err(rustix::io::Errno::AGAIN) => continue,
            other => return other.map_err(io::Error::from),
        }
    }
}

/// The first byte of a message that carries a failure, not a view.
const FAILED: u8 = 1;
/// A failure's message: [`FAILED`] and the raw OS error.
const FAILURE: usize = 5;

/// In a child whose set-up failed with `err`: sends its raw OS error (which may encode the
/// failing stage, see [`super::Sandbox::explain`]) over `socket`, for [`View::receive`] in the
/// parent. Raw system calls only: safe after fork.
pub fn send_failure(socket: BorrowedFd<'_>, err: &io::Error) -> io::Result<()> {
    let mut message = [FAILED; FAILURE];
    let code = err.raw_os_error().unwrap_or(libc::EIO);
    message[1..].copy_from_slice(&code.to_ne_bytes());
    let sent = rustix::net::send(socket, &message, rustix::net::SendFlags::empty())?;
    match sent {
        FAILURE => Ok(()),
        _ => Err(io::Error::from_raw_os_error(libc::EMSGSIZE)),
    }
}

/// In a child: sends its root directory and its mount namespace (`O_PATH` descriptors) over
/// `socket`, for [`View::receive`] in the parent. Raw system calls only: safe after fork.
pub fn send_own(socket: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let flags = OFlags::PATH | OFlags::CLOEXEC;
    let root = rustix::fs::open("/", flags | OFlags::DIRECTORY, Mode::empty())?;
    let namespace = rustix::fs::open("/proc/self/ns/mnt", flags, Mode::empty())?;
    let fds = [root.as_fd(), namespace.as_fd()];
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
    }
    rustix::net::sendmsg(
        socket,
        &[io::IoSlice::new(&[0])],
        &mut control,
        SendFlags::empty(),
    )?;
    Ok(())
}

/// The descriptors (at most two) of one message on `socket` (`SCM_RIGHTS`), close-on-exec;
/// none when the sender closed its end without sending.
pub(crate) fn receive_fds(socket: BorrowedFd<'_>) -> io::Result<Vec<OwnedFd>> {
    receive_message(socket, &mut [0u8; 1])
}

/// [`receive_fds`], with the message's bytes read into `data` (up to its length: a message
/// small enough to arrive whole, sent with one system call).
fn receive_message(socket: BorrowedFd<'_>, data: &mut [u8]) -> io::Result<Vec<OwnedFd>> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    rustix::net::recvmsg(
        socket,
        &mut [io::IoSliceMut::new(data)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let fds = control
        .drain()
        .filter_map(|message| match message {
            RecvAncillaryMessage::ScmRights(fds) => Some(fds),
            _ => None,
        })
        .flatten()
        .collect();
    Ok(fds)
}

/// The path the kernel resolved `fd` to, relative to the root of the namespace it lies in (the
/// link of `/proc/thread-self/fd/N`, read, never followed).
pub fn path_of(fd: BorrowedFd<'_>) -> io::Result<PathBuf> {
    use std::os::fd::AsRawFd;
    let link = std::fs::read_link(format!("/proc/thread-self/fd/{}", fd.as_raw_fd()))?;
    match link.is_absolute() {
        true => Ok(link),
        false => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("the descriptor resolved to {link:?}, not a path"),
        )),
    }
}

/// A path as a C string.
pub fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}
