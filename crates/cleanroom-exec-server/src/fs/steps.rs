//! The system calls a plan of `mutate.rs` is made of, and how one is run: on descriptors held
//! in numbered slots, each directory reached again at execution and checked to be the one
//! planned.
//!
//! Invariant: [`run`] makes raw system calls only (rustix's, with `&CStr` paths), allocates
//! nothing and takes no lock, so it is safe in a child forked from the multi-threaded server;
//! every path it resolves goes through [`resolve::open_at`] or [`View::open`] (no magic link
//! followed); it writes only into regular files, opened without waiting (a FIFO planted where a
//! file was expected is refused, never waited on).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use cleanroom::protect::view::View;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

use super::resolve::{self, FileId};

/// A descriptor slot of a plan.
pub type Slot = usize;

/// How a tree walk enters a directory it listed: by its name alone, no link followed.
pub const NO_LINKS: ResolveFlags = ResolveFlags::NO_SYMLINKS.union(ResolveFlags::BENEATH);

/// How a removal enters a directory: as [`NO_LINKS`], and on the same mount.
pub const NO_LINKS_SAME_MOUNT: ResolveFlags = NO_LINKS.union(ResolveFlags::NO_XDEV);

/// One system call of a plan.
#[derive(Debug)]
pub enum Step {
    /// Opens the directory at the absolute `path` (ordinary links followed) into `slot`; it must
    /// be the directory planned.
    Open {
        path: CString,
        slot: Slot,
        id: FileId,
    },
    /// Opens the directory `name` of `at` into `slot` as `how` allows, without following a final
    /// link; it must be the directory planned (`None`: one this plan made).
    Descend {
        at: Slot,
        name: CString,
        slot: Slot,
        how: ResolveFlags,
        id: Option<FileId>,
    },
    /// Opens the directory `name` of `at` into `slot`, ordinary links followed (`mkdir -p`).
    Enter { at: Slot, name: CString, slot: Slot },
    /// Creates the directory `name` in `at` (`existing_ok`: an existing directory is fine).
    Mkdir {
        at: Slot,
        name: CString,
        existing_ok: bool,
    },
    /// Creates or truncates `name` in `at` (an ordinary final link followed) and writes `data`.
    Write {
        at: Slot,
        name: CString,
        data: Vec<u8>,
    },
    /// Copies the regular file `from_name` of `from` to `to_name` in `to` with its permission
    /// bits; `new`: the destination must not exist (inside a tree this plan made).
    CopyFile {
        from: Slot,
        from_name: CString,
        to: Slot,
        to_name: CString,
        new: bool,
    },
    /// `symlinkat(target, at, name)`.
    Symlink {
        target: CString,
        at: Slot,
        name: CString,
    },
    /// `unlinkat(at, name)`.
    Unlink { at: Slot, name: CString },
    /// `unlinkat(at, name, AT_REMOVEDIR)`.
    Rmdir { at: Slot, name: CString },
    /// Closes `slot`.
    Close(Slot),
}

impl Step {
    /// Whether the step changes the filesystem (what an answer counts as done).
    pub fn changes(&self) -> bool {
        !matches!(
            self,
            Step::Open { .. } | Step::Descend { .. } | Step::Enter { .. } | Step::Close(_)
        )
    }
}

/// The step that failed and its errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Its index in the plan.
    pub step: usize,
    /// The error.
    pub errno: i32,
}

/// Why a step failed where the kernel did not refuse it: values outside the kernel's errno
/// range, so a real errno (an NFS `ESTALE`) is never taken for one of them.
pub mod failed {
    /// An id check failed: the directory is not the one planned.
    pub const CHANGED: i32 = -1;
    /// The source and the destination of a copy are the same file.
    pub const SAME_FILE: i32 = -2;
    /// A destination is not a regular file (a FIFO, a device, a socket).
    pub const NOT_REGULAR: i32 = -3;
}

/// Runs one step, absolute paths resolved in `view`; the errno when it fails. Raw system calls
/// only.
pub fn run(step: &Step, slots: &mut [Option<OwnedFd>], view: &View) -> Result<(), i32> {
    let errno = |e: rustix::io::Errno| e.raw_os_error();
    let io_errno = |e: io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let dir_flags = OFlags::PATH | OFlags::DIRECTORY;
    match step {
        Step::Open { path, slot, id } => {
            let fd = view
                .open(path, dir_flags, Mode::empty(), ResolveFlags::empty())
                .map_err(io_errno)?;
            check_id(&fd, Some(*id))?;
            slots[*slot] = Some(fd);
        }
        Step::Descend {
            at,
            name,
            slot,
            how,
            id,
        } => {
            let flags = dir_flags | OFlags::NOFOLLOW;
            let fd = resolve::open_at(dir(slots, *at)?, name, flags, Mode::empty(), *how)
                .map_err(io_errno)?;
            check_id(&fd, *id)?;
            slots[*slot] = Some(fd);
        }
        Step::Enter { at, name, slot } => {
            let fd = resolve::open_at(
                dir(slots, *at)?,
                name,
                dir_flags,
                Mode::empty(),
                ResolveFlags::empty(),
            )
            .map_err(io_errno)?;
            // A link followed here could lead into the kernel's filesystems (a cgroup made by
            // a mkdir); the plan checked only what it found.
            if resolve::is_kernel_fs_type(fd.as_fd()).map_err(io_errno)? {
                return Err(resolve::Refusal::KernelFs.errno());
            }
            slots[*slot] = Some(fd);
        }
        Step::Mkdir {
            at,
            name,
            existing_ok,
        } => {
            let at = dir(slots, *at)?;
            match rustix::fs::mkdirat(at, name, Mode::from_raw_mode(0o777)) {
                Ok(()) => {}
                Err(rustix::io::Errno::EXIST) if *existing_ok => {
                    resolve::open_at(at, name, dir_flags, Mode::empty(), ResolveFlags::empty())
                        .map_err(|_| libc::EEXIST)?;
                }
                Err(e) => return Err(errno(e)),
            }
        }
        Step::Write { at, name, data } => {
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NOCTTY | OFlags::NONBLOCK;
            let mode = Mode::from_raw_mode(0o666);
            let fd = resolve::open_at(dir(slots, *at)?, name, flags, mode, ResolveFlags::empty())
                .map_err(destination_errno)?;
            regular(&fd)?;
            rustix::fs::ftruncate(&fd, 0).map_err(errno)?;
            write_all(&fd, data)?;
        }
        Step::CopyFile {
            from,
            from_name,
            to,
            to_name,
            new,
        } => copy_file(
            (dir(slots, *from)?, from_name),
            (dir(slots, *to)?, to_name),
            *new,
        )?,
        Step::Symlink { target, at, name } => {
            rustix::fs::symlinkat(target.as_c_str(), dir(slots, *at)?, name.as_c_str())
                .map_err(errno)?
        }
        Step::Unlink { at, name } => {
            rustix::fs::unlinkat(dir(slots, *at)?, name.as_c_str(), AtFlags::empty())
                .map_err(errno)?
        }
        Step::Rmdir { at, name } => {
            rustix::fs::unlinkat(dir(slots, *at)?, name.as_c_str(), AtFlags::REMOVEDIR)
                .map_err(errno)?
        }
        Step::Close(slot) => slots[*slot] = None,
    }
    Ok(())
}

/// The open directory in `slot` (EBADF if the plan never opened it).
fn dir(slots: &[Option<OwnedFd>], slot: Slot) -> Result<BorrowedFd<'_>, i32> {
    slots
        .get(slot)
        .and_then(Option::as_ref)
        .map(AsFd::as_fd)
        .ok_or(libc::EBADF)
}

/// The errno of a destination that could not be opened for writing: a FIFO without a reader
/// (opened without waiting: ENXIO) is [`failed::NOT_REGULAR`].
fn destination_errno(e: io::Error) -> i32 {
    match e.raw_os_error() {
        Some(libc::ENXIO) => failed::NOT_REGULAR,
        errno => errno.unwrap_or(libc::EIO),
    }
}

/// [`failed::NOT_REGULAR`] unless `fd` is a regular file.
fn regular(fd: &OwnedFd) -> Result<(), i32> {
    let stat = rustix::fs::fstat(fd).map_err(|e| e.raw_os_error())?;
    match resolve::kind(&stat) {
        FileType::RegularFile => Ok(()),
        _ => Err(failed::NOT_REGULAR),
    }
}

/// [`failed::CHANGED`] unless `fd` is the file `id` (when given).
fn check_id(fd: &OwnedFd, id: Option<FileId>) -> Result<(), i32> {
    let Some(id) = id else {
        return Ok(());
    };
    let stat = rustix::fs::fstat(fd).map_err(|e| e.raw_os_error())?;
    match FileId::of(&stat) == id {
        true => Ok(()),
        false => Err(failed::CHANGED),
    }
}

/// Copies the regular file `from` to `to` (created; `new`: it must not exist, else it is
/// truncated after checking it is not the source itself), with the source's permission bits.
fn copy_file(
    from: (BorrowedFd<'_>, &CStr),
    to: (BorrowedFd<'_>, &CStr),
    new: bool,
) -> Result<(), i32> {
    let errno = |e: io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let read = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    let src = resolve::open_at(from.0, from.1, read, Mode::empty(), ResolveFlags::empty())
        .map_err(errno)?;
    let stat = rustix::fs::fstat(&src).map_err(|e| e.raw_os_error())?;
    if resolve::kind(&stat) != FileType::RegularFile {
        return Err(failed::NOT_REGULAR);
    }
    let mut write = OFlags::WRONLY | OFlags::CREATE | OFlags::NOCTTY | OFlags::NONBLOCK;
    if new {
        write |= OFlags::EXCL | OFlags::NOFOLLOW;
    }
    let dst = resolve::open_at(
        to.0,
        to.1,
        write,
        Mode::from_raw_mode(0o600),
        ResolveFlags::empty(),
    )
    .map_err(destination_errno)?;
    regular(&dst)?;
    let dst_stat = rustix::fs::fstat(&dst).map_err(|e| e.raw_os_error())?;
    if FileId::of(&dst_stat) == FileId::of(&stat) {
        return Err(failed::SAME_FILE);
    }
    rustix::fs::ftruncate(&dst, 0).map_err(|e| e.raw_os_error())?;
    let mut buf = [0u8; 64 * 1024];
    loop {
        match rustix::io::read(&src, &mut buf) {
            Ok(0) => break,
            Ok(n) => write_all(&dst, &buf[..n])?,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.raw_os_error()),
        }
    }
    let mode = Mode::from_raw_mode(stat.st_mode & 0o7777);
    rustix::fs::fchmod(&dst, mode).map_err(|e| e.raw_os_error())
}

fn write_all(fd: &OwnedFd, mut data: &[u8]) -> Result<(), i32> {
    while !data.is_empty() {
        match rustix::io::write(fd, data) {
            Ok(n) => data = &data[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.raw_os_error()),
        }
    }
    Ok(())
}
