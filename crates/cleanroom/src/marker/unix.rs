//! The marker's file on Unix: created `O_EXCL` (mode 0600) and read through `O_NOFOLLOW`
//! relative to the root's open directory, refused unless it is a regular file with one link
//! owned by the expected uid.

use std::io::{Read, Write};
use std::os::fd::BorrowedFd;

use rustix::fs::{FileType, Mode, OFlags};

use super::{Marker, MarkerProblem, User, MARKER_FILE, MAX_MARKER_BYTES};

impl Marker {
    /// Writes the marker into the directory `root` (must not exist yet), mode 0600 (not synced:
    /// see the module documentation).
    pub fn write(&self, root: BorrowedFd<'_>) -> std::io::Result<()> {
        let fd = rustix::fs::openat(
            root,
            MARKER_FILE,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )?;
        let mut file = std::fs::File::from(fd);
        file.write_all(&self.to_bytes()?)
    }

    /// Replaces the marker of the directory `root` with this one: written whole under a new
    /// name (`O_EXCL`, mode 0600), then renamed over the marker, so a reader sees the old marker
    /// or the new one, never a part. Only the root's owner may do it, holding the root's lock,
    /// once its run is over (to record [`Marker::kept`]). Whatever the run put under the
    /// marker's name is replaced, never followed; a directory there makes it fail.
    pub fn replace(&self, root: BorrowedFd<'_>) -> std::io::Result<()> {
        let fresh = format!(
            ".{MARKER_FILE}.{}",
            crate::layout::new_run_id().map_err(std::io::Error::other)?
        );
        let fd = rustix::fs::openat(
            root,
            fresh.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )?;
        let written = std::fs::File::from(fd)
            .write_all(&self.to_bytes()?)
            .and_then(|()| {
                Ok(rustix::fs::renameat(
                    root,
                    fresh.as_str(),
                    root,
                    MARKER_FILE,
                )?)
            });
        if written.is_err() {
            let _ = rustix::fs::unlinkat(root, fresh.as_str(), rustix::fs::AtFlags::empty());
        }
        written
    }

    /// Reads and validates the marker of the directory `root`, expecting owner `user`.
    pub fn read(root: BorrowedFd<'_>, user: &User) -> Result<Marker, MarkerProblem> {
        let fd = rustix::fs::openat(
            root,
            MARKER_FILE,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::NOENT => MarkerProblem::damaged("no marker".into()),
            rustix::io::Errno::LOOP => MarkerProblem::refused("marker is a symbolic link".into()),
            e => MarkerProblem::refused(format!("marker cannot be opened: {e}")),
        })?;
        let stat =
            rustix::fs::fstat(&fd).map_err(|e| MarkerProblem::refused(format!("marker: {e}")))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(MarkerProblem::damaged(
                "marker is not a regular file".into(),
            ));
        }
        if stat.st_nlink != 1 {
            return Err(MarkerProblem::refused(format!(
                "marker has {} hard links",
                stat.st_nlink
            )));
        }
        if Some(stat.st_uid) != user.uid() {
            return Err(MarkerProblem::refused(format!(
                "marker is owned by uid {}",
                stat.st_uid
            )));
        }
        if stat.st_size as u64 > MAX_MARKER_BYTES {
            return Err(MarkerProblem::refused("marker is too large".into()));
        }
        // Room for the whole file, so it is read in one call (not grown from a small probe).
        let mut text = String::with_capacity(stat.st_size as usize + 1);
        std::fs::File::from(fd)
            .take(MAX_MARKER_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| MarkerProblem::damaged(format!("marker is unreadable: {e}")))?;
        Marker::parse(&text, user)
    }
}
