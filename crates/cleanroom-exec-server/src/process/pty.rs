//! Pseudo-terminals for `tty: true` processes: an 80×24 pair from `/dev/ptmx`, and the
//! async master side the server reads and writes.
//!
//! Invariants: both ends are close-on-exec (the child gets the slave only as fds 0–2); the child
//! becomes a session leader with the slave as its controlling terminal before exec; the master
//! is non-blocking and read through the reactor, so no thread waits on a terminal.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use rustix::fs::{Mode, OFlags};
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;
use tokio::io::Interest;

use crate::sys::reactor::Registered;

/// The master side of a terminal, registered with the reactor.
#[derive(Debug)]
pub struct Master {
    fd: Registered<OwnedFd>,
    /// The slave's path (`/dev/pts/N`), which is what holders' `/proc/<pid>/fd` links show.
    slave: PathBuf,
}

/// Opens a terminal pair sized 80×24 and makes `command` run on its slave side.
pub fn attach(command: &mut tokio::process::Command) -> io::Result<Master> {
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let name = rustix::pty::ptsname(&master, Vec::new())?;
    let slave = rustix::fs::open(
        name.as_c_str(),
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    rustix::termios::tcsetwinsize(
        &slave,
        Winsize {
            ws_row: 24,
            ws_col: 80,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )?;
    command
        .stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave));
    crate::sys::exec::take_terminal_on_exec(command.as_std_mut());
    let flags = rustix::fs::fcntl_getfl(&master)?;
    rustix::fs::fcntl_setfl(&master, flags | OFlags::NONBLOCK)?;
    let fd = crate::sys::reactor::register(master, Interest::READABLE | Interest::WRITABLE)?;
    Ok(Master {
        fd,
        slave: PathBuf::from(std::ffi::OsStr::from_bytes(name.as_bytes())),
    })
}

impl Master {
    /// The slave's path.
    pub fn slave(&self) -> &Path {
        &self.slave
    }

    /// Reads what the terminal has; `Ok(0)` once every slave descriptor is closed (EIO).
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard
                .try_io(|fd| rustix::io::read(fd.get_ref(), &mut *buf).map_err(io::Error::from))
            {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Writes all of `data` to the terminal (the child's input). The write is tried before
    /// any wait, so one the terminal has room for finishes at once.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            match rustix::io::write(self.fd.get_ref(), data) {
                Ok(n) => data = &data[n..],
                Err(rustix::io::Errno::AGAIN) => self.fd.writable().await?.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Sends `signal` to the terminal's foreground process group.
    pub fn signal_foreground(&self, signal: rustix::process::Signal) -> io::Result<()> {
        let group = rustix::termios::tcgetpgrp(self.fd.get_ref().as_fd())?;
        rustix::process::kill_process_group(group, signal)?;
        Ok(())
    }
}
