//! The shape of a namespace and of its roots, the same on every platform: the names of
//! namespace entries and run ids, and the directories every root has.
//!
//! Invariant: an entry is ours to judge only when its whole name parses ([`classify`]); run ids
//! sort by creation time and carry 64 random bits, so two runs never share a name.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

/// The marker's name and format: one definition, so every platform writes and reads the same
/// markers (see `marker` for what a marker holds).
/// File name of the marker inside a root.
pub const MARKER_FILE: &str = "cleanroom-root.json";
/// Value of the `format` field.
pub const MARKER_FORMAT: &str = "cleanroom-root-marker";
/// The marker version this build writes and the only one it reads.
pub const MARKER_VERSION: u32 = 1;
/// Markers larger than this are refused unread.
pub const MAX_MARKER_BYTES: u64 = 64 * 1024;

/// The kinds of entry a namespace holds, told apart by name alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// `run-<id>`: a published root.
    Root,
    /// `.pending-run-<id>`: a root being created (or whose creator died while creating it).
    Pending,
    /// `.trash-run-<id>`: a root renamed for removal whose removal has not finished.
    Trash,
    /// `locks`: the directory of exclusive-run locks.
    Locks,
    /// Anything else: never ours.
    Foreign,
}

/// Prefix of a published root's name.
pub const ROOT_PREFIX: &str = "run-";
/// Prefix of a root that is still being created.
pub const PENDING_PREFIX: &str = ".pending-";
/// Prefix of a root that has been quarantined for removal.
pub const TRASH_PREFIX: &str = ".trash-";
/// Name of the directory of exclusive-run locks.
pub const LOCKS_DIR: &str = "locks";

/// Classifies a namespace entry by its name, and returns the run id it names (if any).
pub fn classify(name: &OsStr) -> (EntryKind, Option<&str>) {
    let Some(name) = name.to_str() else {
        return (EntryKind::Foreign, None);
    };
    if name == LOCKS_DIR {
        return (EntryKind::Locks, None);
    }
    let (kind, rest) = if let Some(rest) = name.strip_prefix(PENDING_PREFIX) {
        (EntryKind::Pending, rest)
    } else if let Some(rest) = name.strip_prefix(TRASH_PREFIX) {
        (EntryKind::Trash, rest)
    } else {
        (EntryKind::Root, name)
    };
    match rest.strip_prefix(ROOT_PREFIX) {
        Some(id) if is_valid_run_id(id) => (kind, Some(id)),
        _ => (EntryKind::Foreign, None),
    }
}

/// Run ids are `<YYYYmmddTHHMMSSZ>-<16 hex digits>`.
pub fn is_valid_run_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    bytes.len() == 33
        && bytes[..8].iter().all(u8::is_ascii_digit)
        && bytes[8] == b'T'
        && bytes[9..15].iter().all(u8::is_ascii_digit)
        && bytes[15] == b'Z'
        && bytes[16] == b'-'
        && bytes[17..]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// The creation time a run id carries (`YYYYmmddTHHMMSSZ`), in seconds since the Unix epoch.
///
/// The time comes from the id's creator and is used only to leave young entries to it: never as
/// proof of anything.
pub fn run_id_unix_secs(id: &str) -> Option<u64> {
    if !is_valid_run_id(id) {
        return None;
    }
    let num = |range: std::ops::Range<usize>| id[range].parse::<i64>().ok();
    let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hour, minute, second) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    // Days-from-civil (Howard Hinnant's algorithm), the inverse of the root's stamp.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hour * 3600 + minute * 60 + second).ok()
}

/// The directories every root has, as absolute paths.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Layout {
    /// `home/`: HOME.
    pub home: PathBuf,
    /// `tmp/`: TMPDIR, TMP, TEMP.
    pub tmp: PathBuf,
    /// `xdg/config`: XDG_CONFIG_HOME (made by the first program that writes there).
    pub xdg_config: PathBuf,
    /// `xdg/cache`: XDG_CACHE_HOME (likewise).
    pub xdg_cache: PathBuf,
    /// `xdg/data`: XDG_DATA_HOME (likewise).
    pub xdg_data: PathBuf,
    /// `xdg/state`: XDG_STATE_HOME (likewise).
    pub xdg_state: PathBuf,
    /// `xdg/runtime`: XDG_RUNTIME_DIR (0700 as the spec requires).
    pub xdg_runtime: PathBuf,
    /// `homes/<VAR>`: one directory per pinned or re-pointed tool-home variable.
    pub homes: BTreeMap<String, PathBuf>,
}

/// The directories a root is created with, relative to it, in creation order (`homes` only
/// when a tool-home variable needs a directory in it).
///
/// `xdg/{config,cache,data,state}` are not among them: the XDG base directory specification
/// makes the program that writes to a missing base directory create it (mode 0700), and the
/// root is writable to the run, so creating four directories no `true` or `cargo test` needs
/// (and removing them, which costs ~70 µs per directory on ext4 here) is left to the programs
/// that do. `XDG_RUNTIME_DIR` must exist with mode 0700 before anyone uses it, so it is made.
pub const LAYOUT_DIRS: [&str; 5] = ["home", "tmp", "xdg", "xdg/runtime", "homes"];

/// A fresh run id: `<UTC time>-<64 random bits>`, sortable by creation time.
pub fn new_run_id() -> Result<String> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random)
        .map_err(|e| Error::sys("read random bytes", std::io::Error::other(e.to_string())))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{}-{hex}", utc_stamp(now.as_secs())))
}

/// Formats Unix seconds as `YYYYmmddTHHMMSSZ`.
fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

impl Layout {
    pub(crate) fn of(path: &Path, homes: &[String]) -> Layout {
        Layout {
            home: path.join("home"),
            tmp: path.join("tmp"),
            xdg_config: path.join("xdg").join("config"),
            xdg_cache: path.join("xdg").join("cache"),
            xdg_data: path.join("xdg").join("data"),
            xdg_state: path.join("xdg").join("state"),
            xdg_runtime: path.join("xdg").join("runtime"),
            homes: homes
                .iter()
                .map(|v| (v.clone(), path.join("homes").join(v)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_carry_their_creation_time() {
        assert_eq!(
            run_id_unix_secs("20261129T093000Z-0123456789abcdef"),
            Some(1_795_944_600)
        );
        assert_eq!(
            run_id_unix_secs("19700101T000000Z-0123456789abcdef"),
            Some(0)
        );
        assert_eq!(run_id_unix_secs("20261329T093000Z-0123456789abcdef"), None);
        assert_eq!(run_id_unix_secs("not an id"), None);
    }

    #[test]
    fn names_are_classified_strictly() {
        let id = "20261129T093000Z-0123456789abcdef";
        assert_eq!(
            classify(OsStr::new(&format!("run-{id}"))),
            (EntryKind::Root, Some(id))
        );
        assert_eq!(
            classify(OsStr::new(&format!(".pending-run-{id}"))),
            (EntryKind::Pending, Some(id))
        );
        assert_eq!(
            classify(OsStr::new(&format!(".trash-run-{id}"))),
            (EntryKind::Trash, Some(id))
        );
        assert_eq!(classify(OsStr::new("locks")), (EntryKind::Locks, None));
        for foreign in [
            "run-",
            "run-x",
            "opencodex-test-1",
            ".trash-foo",
            &format!("run-{id}0"),
        ] {
            assert_eq!(
                classify(OsStr::new(foreign)).0,
                EntryKind::Foreign,
                "{foreign}"
            );
        }
    }

    #[test]
    fn stamps_are_utc_and_sortable() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        assert_eq!(utc_stamp(1_795_944_600), "20261129T093000Z");
        let id = new_run_id().unwrap();
        assert!(crate::layout::is_valid_run_id(&id), "{id}");
    }
}
