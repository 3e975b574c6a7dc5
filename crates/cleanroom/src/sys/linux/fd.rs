//! Descriptors a plan's children find in memory they copied from their parent (fork) or share
//! with it (a vfork-style clone): a slot where a child keeps a descriptor from one step to a
//! later one ([`FdSlot`]), and a descriptor the parent lends the children of one spawn
//! ([`LentFd`]); the working directory read into a buffer on the stack ([`getcwd`]); and a file
//! the kernel generates read whole in as few calls as it allows ([`read_kernel_file`]).
//!
//! Invariant: a number in memory is turned back into a descriptor only by a process in whose
//! table it names what was put there: a slot's by the process that put it, a lent one's by a
//! child started while it was lent.

use std::ffi::CStr;
use std::io;
use std::os::fd::{BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use super::fork::InChild;
use super::last_error;

/// An empty [`FdSlot`].
const EMPTY: u64 = u64::MAX;

/// Where a child keeps a descriptor it made in one step for a later one (a detached mount it
/// copied before mounting over its path). The slot records the process that put the
/// descriptor, and only that process takes it back: children of a vfork-style clone share the
/// slot's memory with their parent and with one another, and the same number names another
/// descriptor (or none) in each of their tables. Dropping a slot closes nothing: what it holds
/// may be another process's.
#[derive(Debug)]
pub(crate) struct FdSlot(AtomicU64);

impl FdSlot {
    /// An empty slot.
    pub(crate) const fn new() -> FdSlot {
        FdSlot(AtomicU64::new(EMPTY))
    }

    /// Keeps `fd` here for the calling process (whatever was kept before stays open until exec
    /// closes it: every descriptor the steps make is close-on-exec). Async-signal-safe.
    pub(crate) fn put(&self, fd: OwnedFd) {
        let pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
        let fd = fd.into_raw_fd() as u32;
        self.0
            .store(u64::from(pid) << 32 | u64::from(fd), Ordering::Relaxed);
    }

    /// Takes back the descriptor the calling process kept here, if it kept one (the slot is
    /// then empty). Async-signal-safe.
    pub(crate) fn take(&self) -> Option<OwnedFd> {
        let pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
        let kept = self.0.load(Ordering::Relaxed);
        if kept == EMPTY || (kept >> 32) as u32 != pid {
            return None;
        }
        if self
            .0
            .compare_exchange(kept, EMPTY, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let fd = kept as u32 as RawFd;
        // SAFETY: `put` stored this number from an `OwnedFd` of this very process (the pid
        // matches, and a pid names one living process) and gave up its ownership to the slot;
        // the exchange took it out, so it is turned back into an owner once.
        Some(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// A descriptor a parent lends the children it starts while one spawn lasts (the write end of a
/// report pipe): a child finds it by number in the parent's memory, where it names the child's
/// copy of it. The lender owns it until [`LentFd::withdraw`] or the drop closes it.
#[derive(Debug)]
pub(crate) struct LentFd(AtomicI32);

impl LentFd {
    /// Nothing lent.
    pub(crate) const fn new() -> LentFd {
        LentFd(AtomicI32::new(-1))
    }

    /// Lends `fd` to the children started from now on, until [`LentFd::withdraw`] with the
    /// returned [`Lending`]; while another descriptor is lent (a spawn whose lending has not
    /// ended), nothing changes and `fd` comes back as the error: that spawn's children keep
    /// finding their own.
    pub(crate) fn lend(&self, fd: OwnedFd) -> Result<Lending, OwnedFd> {
        let raw = fd.into_raw_fd();
        match self
            .0
            .compare_exchange(-1, raw, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => Ok(Lending(raw)),
            // SAFETY: `raw` came from `fd` just above and was not stored: its ownership is
            // handed back, once.
            Err(_) => Err(unsafe { OwnedFd::from_raw_fd(raw) }),
        }
    }

    /// Ends `lending`: its descriptor, to be closed by its owner again; `None` when it ended
    /// already (a later lending is never taken for it).
    pub(crate) fn withdraw(&self, lending: &Lending) -> Option<OwnedFd> {
        self.0
            .compare_exchange(lending.0, -1, Ordering::Relaxed, Ordering::Relaxed)
            .ok()
            // SAFETY: a number in the cell was stored by `lend` from an `OwnedFd` whose
            // ownership the cell took; exchanging it out hands that ownership back, once.
            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// The lent descriptor, in a child started while it was lent. Async-signal-safe.
    pub(crate) fn get<'a>(&'a self, _child: &'a InChild) -> Option<BorrowedFd<'a>> {
        let fd = self.0.load(Ordering::Relaxed);
        // SAFETY: the caller is a child (`InChild`): it has one thread and copied its parent's
        // descriptor table when it was started, while the parent owned the lent descriptor (a
        // parent lends for one spawn, before it starts the child, and withdraws after), so the
        // number names the child's copy of it; the child programs close no descriptor they
        // were not given to close, so it stays open while borrowed.
        (fd >= 0).then(|| unsafe { BorrowedFd::borrow_raw(fd) })
    }
}

/// One lending of a [`LentFd`]: what [`LentFd::withdraw`] ends.
#[derive(Debug)]
pub(crate) struct Lending(RawFd);

impl Drop for LentFd {
    fn drop(&mut self) {
        let fd = *self.0.get_mut();
        // SAFETY: as in `withdraw`: a number left in the cell is owned by it, and the cell
        // goes with this drop.
        (fd >= 0).then(|| drop(unsafe { OwnedFd::from_raw_fd(fd) }));
    }
}

/// Writes the working directory into `buf` (`getcwd` with a buffer: no allocation, so
/// async-signal-safe); the path, NUL-terminated in `buf`.
pub(crate) fn getcwd(buf: &mut [u8]) -> io::Result<&CStr> {
    // SAFETY: `buf` is writable for its length, which is passed; getcwd with a buffer does not
    // allocate.
    if unsafe { libc::getcwd(buf.as_mut_ptr().cast(), buf.len()) }.is_null() {
        return Err(last_error());
    }
    CStr::from_bytes_until_nul(buf).map_err(|_| io::Error::from_raw_os_error(libc::ERANGE))
}

/// Reads a file the kernel generates (procfs, cgroupfs) to its end in as few calls as it allows.
/// Such files report size 0, so `fs::read` would stat them, seek, and grow from a 32-byte
/// probe, a read per doubling; this only reads, into room for what they usually hold.
pub fn read_kernel_file(mut file: std::fs::File) -> io::Result<Vec<u8>> {
    let mut data = vec![0; 16 << 10];
    let mut len = 0;
    loop {
        if len == data.len() {
            data.resize(len * 2, 0);
        }
        match io::Read::read(&mut file, &mut data[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    data.truncate(len);
    Ok(data)
}

/// [`read_kernel_file`] of `path`.
pub(crate) fn read_kernel_path(path: impl AsRef<std::path::Path>) -> io::Result<Vec<u8>> {
    read_kernel_file(std::fs::File::open(path)?)
}

/// [`read_kernel_file`] of `path`, as text.
pub fn read_kernel_text(path: impl AsRef<std::path::Path>) -> io::Result<String> {
    String::from_utf8(read_kernel_path(path)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}
