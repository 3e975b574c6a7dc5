//! The ownership marker: the small versioned JSON file at the top of every root that proves the
//! root is ours and says who owns it.
//!
//! Format (version 1), documented for other tools in `docs/marker.md`:
//!
//! ```json
//! {"format":"cleanroom-root-marker","version":1,"run_id":"20261129T093000Z-0123456789abcdef",
//!  "euid":1000,"owner":{"pid":4242,"start_time":123456},
//!  "host":{"boot_id":"…","pid_ns":4026531836,"hostname":"box"},
//!  "created_unix_ms":1795944600000,"command":["cargo","test"],"keep":false,
//!  "cgroup":"/sys/fs/cgroup/cleanroom-20261129T093000Z-0123456789abcdef"}
//! ```
//!
//! Invariants: written with O_EXCL (never replacing anything), mode 0600, before the root is
//! published. Read strictly: the file must be a regular file with exactly one link, owned by the
//! effective uid, at most [`MAX_MARKER_BYTES`], with exactly the fields above and a known
//! version. Anything else is "not ours to judge" and the root is left alone.
//!
//! Durability: the marker is not synced to disk. Every reader that matters sees it through the
//! page cache; only a crash of the machine can lose it, and then the boot id changes, so what
//! survives is either the whole marker (whose owner is then provably dead) or an absent, short or
//! invalid one, which the strict reader refuses: the root is left alone and listed as unproven.
//! No crash can turn a marker into a valid one naming another root (the run id must match the
//! directory's name), so safety never depended on the sync; only reclaiming roots of runs that
//! were in flight during a power loss did, and that is what the ~0.8 ms per run bought.

use std::io::{Read, Write};
use std::os::fd::BorrowedFd;

use rustix::fs::{FileType, Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::process::{Host, ProcessId};

pub use crate::layout::{MARKER_FILE, MARKER_FORMAT, MARKER_VERSION, MAX_MARKER_BYTES};

/// The content of a root's ownership marker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Marker {
    /// Always [`MARKER_FORMAT`].
    pub format: String,
    /// Always [`MARKER_VERSION`] for markers this build writes.
    pub version: u32,
    /// The run's id; the root's name is `run-<run_id>`.
    pub run_id: String,
    /// Effective uid of the owner.
    pub euid: u32,
    /// The process that owns the root (the runner or the exec-server).
    pub owner: ProcessId,
    /// The boot, pid namespace and host of the owner.
    pub host: Host,
    /// When the root was created, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// The command the run executes (for `list` and reports).
    pub command: Vec<String>,
    /// `--keep-root`: gc leaves this root alone unless asked to reclaim kept roots.
    pub keep: bool,
    /// The cgroup the run's processes live in, if one was used.
    pub cgroup: Option<String>,
}

/// Why a marker was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerProblem {
    /// What is wrong, for people.
    pub reason: String,
    /// Whether the marker is merely damaged — absent, empty, cut short, not JSON, or not a
    /// regular file (but not a symlink) — as a crash, a full disk or a careless run leaves it.
    /// Otherwise it was refused for what it says or how it is linked (another owner, another
    /// version, hard links, a symlink), which is never a damaged root of ours.
    pub damaged: bool,
}

impl MarkerProblem {
    fn damaged(reason: String) -> MarkerProblem {
        MarkerProblem {
            reason,
            damaged: true,
        }
    }

    fn refused(reason: String) -> MarkerProblem {
        MarkerProblem {
            reason,
            damaged: false,
        }
    }
}

impl std::fmt::Display for MarkerProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

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
        let mut bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        file.write_all(&bytes)
    }

    /// Reads and validates the marker of the directory `root`, expecting owner `euid`.
    pub fn read(root: BorrowedFd<'_>, euid: u32) -> Result<Marker, MarkerProblem> {
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
        if stat.st_uid != euid {
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
        Marker::parse(&text, euid)
    }

    /// Parses marker text strictly.
    pub fn parse(text: &str, euid: u32) -> Result<Marker, MarkerProblem> {
        #[derive(Deserialize)]
        struct Probe {
            format: String,
            version: u32,
        }
        let probe: Probe = serde_json::from_str(text)
            .map_err(|e| MarkerProblem::damaged(format!("marker is not valid: {e}")))?;
        if probe.format != MARKER_FORMAT {
            return Err(MarkerProblem::refused(format!(
                "unknown marker format {:?}",
                probe.format
            )));
        }
        if probe.version != MARKER_VERSION {
            return Err(MarkerProblem::refused(format!(
                "unknown marker version {}",
                probe.version
            )));
        }
        let marker: Marker = serde_json::from_str(text)
            .map_err(|e| MarkerProblem::refused(format!("marker is not valid: {e}")))?;
        if marker.euid != euid {
            return Err(MarkerProblem::refused(format!(
                "marker belongs to uid {}, not {euid}",
                marker.euid
            )));
        }
        if !crate::namespace::is_valid_run_id(&marker.run_id) {
            return Err(MarkerProblem::refused(
                "marker has a malformed run id".into(),
            ));
        }
        Ok(marker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Marker {
        Marker {
            format: MARKER_FORMAT.into(),
            version: MARKER_VERSION,
            run_id: "20261129T093000Z-0123456789abcdef".into(),
            euid: 1000,
            owner: ProcessId {
                pid: 42,
                start_time: 7,
            },
            host: Host {
                boot_id: "b".into(),
                pid_ns: 1,
                hostname: "h".into(),
            },
            created_unix_ms: 1,
            command: vec!["true".into()],
            keep: false,
            cgroup: None,
        }
    }

    #[test]
    fn round_trips_and_refuses_other_shapes() {
        let text = serde_json::to_string(&sample()).unwrap();
        assert_eq!(Marker::parse(&text, 1000).unwrap(), sample());
        assert!(Marker::parse(&text, 1001)
            .unwrap_err()
            .reason
            .contains("uid 1000"));
        let v2 = text.replace("\"version\":1", "\"version\":2");
        assert!(Marker::parse(&v2, 1000)
            .unwrap_err()
            .reason
            .contains("version 2"));
        let extra = text.replacen('{', "{\"surprise\":1,", 1);
        assert!(Marker::parse(&extra, 1000).is_err());
        assert!(Marker::parse("{}", 1000).is_err());
        let cut = Marker::parse(&text[..text.len() / 2], 1000).unwrap_err();
        assert!(cut.damaged, "{cut}");
        assert!(Marker::parse("", 1000).unwrap_err().damaged);
        assert!(!Marker::parse(&v2, 1000).unwrap_err().damaged);
    }
}
