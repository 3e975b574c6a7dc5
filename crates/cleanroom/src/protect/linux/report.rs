//! What a sandboxed child tells its parent about its set-up: where it failed, folded into the one
//! word a failed `pre_exec` hook passes back (the spawn's raw OS error), and how its best-effort
//! steps turned out (sockets and host mounts it could not bind), as records on a report pipe the
//! parent armed for that spawn (or a holder's ready pipe).
//!
//! Invariant: the child side makes only raw system calls on its stack (it runs after fork); a
//! failure code is told apart from an errno by [`SETUP_FAILED`], which no errno carries, and a
//! record from the closing frame by its kind byte.

use std::io;
use std::os::fd::BorrowedFd;

/// The bit that marks a failure code (errnos are below 4096).
const SETUP_FAILED: i32 = 0x4000_0000;
/// Bits of the errno in a failure code.
const ERRNO_BITS: i32 = 12;
/// Stages below this number are fixed ones; a mount step `i` is `FIRST_STEP + i`.
const FIRST_STEP: u32 = 16;
/// The most stages a code can name.
const MAX_STAGE: u32 = (1 << 17) - 1;

/// Where in its set-up a child failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Joining the namespaces of a holder.
    Join,
    /// Joining the user namespace made for the children of a long-lived spawner, in which it
    /// makes its own namespaces (`UserNamespace`).
    UserNamespace,
    /// Making new namespaces.
    Namespaces,
    /// Making `/` a slave mount of the host's.
    Propagation,
    /// Re-entering the working directory through the new mounts.
    WorkingDirectory,
    /// Dropping capabilities from the bounding set.
    Capabilities,
    /// Building or applying the Landlock ruleset.
    Landlock,
    /// The mount step of this index (counted over the plans the child applies, in order).
    Step(usize),
}

impl Stage {
    fn number(self) -> u32 {
        match self {
            Stage::Join => 1,
            Stage::Namespaces => 2,
            Stage::Propagation => 3,
            Stage::WorkingDirectory => 4,
            Stage::Capabilities => 5,
            Stage::Landlock => 6,
            Stage::UserNamespace => 7,
            Stage::Step(i) => (FIRST_STEP + i as u32).min(MAX_STAGE),
        }
    }

    fn from_number(n: u32) -> Option<Stage> {
        Some(match n {
            1 => Stage::Join,
            2 => Stage::Namespaces,
            3 => Stage::Propagation,
            4 => Stage::WorkingDirectory,
            5 => Stage::Capabilities,
            6 => Stage::Landlock,
            7 => Stage::UserNamespace,
            n if n >= FIRST_STEP => Stage::Step((n - FIRST_STEP) as usize),
            _ => return None,
        })
    }
}

/// `err` as the failure of `stage` (no allocation: a raw OS error whose code carries both).
pub(crate) fn failed(stage: Stage, err: io::Error) -> io::Error {
    let errno = match err.raw_os_error() {
        Some(code) if (1..1 << ERRNO_BITS).contains(&code) => code,
        // Already a failure code (a nested stage), kept as it is.
        Some(code) if decode(code).is_some() => return err,
        _ => libc::EIO,
    };
    io::Error::from_raw_os_error(SETUP_FAILED | ((stage.number() as i32) << ERRNO_BITS) | errno)
}

/// The stage and errno of a failure code, if `code` is one.
pub(crate) fn decode(code: i32) -> Option<(Stage, io::Error)> {
    if code & SETUP_FAILED == 0 || code < 0 {
        return None;
    }
    let stage = Stage::from_number(((code & !SETUP_FAILED) >> ERRNO_BITS) as u32)?;
    let errno = code & ((1 << ERRNO_BITS) - 1);
    Some((stage, io::Error::from_raw_os_error(errno)))
}

/// How a best-effort step turned out, when not as planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A socket was not bound (gone, replaced, or its copy refused).
    SocketNotBound,
    /// A host mount could not be copied; its mount point is covered by an empty read-only
    /// directory (or `/dev/null`), so what lies beneath it on the host is not shown.
    MountCovered,
    /// A host mount could be neither copied nor covered: the child cannot reach its mount point
    /// (nor, with the same identity, can the command).
    MountUnreachable,
}

impl Outcome {
    fn kind(self) -> u32 {
        match self {
            Outcome::SocketNotBound => 1,
            Outcome::MountCovered => 2,
            Outcome::MountUnreachable => 3,
        }
    }
}

/// The kind byte of the frame that closes a holder's report (its errno below it).
const END: u32 = 0xff;

/// Writes the record "step `step` turned out `outcome`" to `fd` (nothing without one). Raw
/// system calls only.
pub(crate) fn note(fd: Option<BorrowedFd<'_>>, outcome: Outcome, step: usize) {
    if let Some(fd) = fd {
        write_frame(fd, outcome.kind() << 24 | (step as u32 & 0x00ff_ffff));
    }
}

/// Writes the frame that ends a holder's report: its errno (0: ready). Raw system calls only.
pub(crate) fn end(fd: BorrowedFd<'_>, errno: i32) {
    write_frame(fd, END << 24 | (errno as u32 & 0x00ff_ffff));
}

/// One write of the frame (a pipe write of 4 bytes is atomic).
fn write_frame(fd: BorrowedFd<'_>, frame: u32) {
    let _ = rustix::io::write(fd, &frame.to_ne_bytes());
}

/// What a report holds: the records, and the closing errno when there was one.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub outcomes: Vec<(Outcome, usize)>,
    pub end: Option<i32>,
}

/// Reads frames from `fd` until its end or EOF.
pub(crate) fn read(fd: &std::os::fd::OwnedFd) -> io::Result<Report> {
    let mut report = Report::default();
    let mut frame = [0u8; 4];
    loop {
        let mut got = 0;
        while got < frame.len() {
            match rustix::io::read(fd, &mut frame[got..]) {
                Ok(0) => return Ok(report),
                Ok(n) => got += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let word = u32::from_ne_bytes(frame);
        let value = word & 0x00ff_ffff;
        let outcome = match word >> 24 {
            END => {
                report.end = Some(value as i32);
                return Ok(report);
            }
            1 => Outcome::SocketNotBound,
            2 => Outcome::MountCovered,
            3 => Outcome::MountUnreachable,
            _ => continue,
        };
        report.outcomes.push((outcome, value as usize));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_codes_carry_the_stage_and_the_errno_and_are_no_errno() {
        for stage in [
            Stage::Join,
            Stage::Landlock,
            Stage::UserNamespace,
            Stage::Step(0),
            Stage::Step(300),
        ] {
            let err = failed(stage, io::Error::from_raw_os_error(libc::EACCES));
            let code = err.raw_os_error().unwrap();
            assert!(code > 4095);
            let (back, errno) = decode(code).unwrap();
            assert_eq!(back, stage);
            assert_eq!(errno.raw_os_error(), Some(libc::EACCES));
            // A failure of a failure keeps the first stage.
            let again = failed(Stage::Join, err);
            assert_eq!(decode(again.raw_os_error().unwrap()).unwrap().0, stage);
        }
        assert!(decode(libc::EACCES).is_none());
    }
}
