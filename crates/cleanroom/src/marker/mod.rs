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
//! Version 2 adds one field, `kept`, saying why the root was kept after its run (see [`Kept`]);
//! a marker is written as version 1 whenever it has no `kept` to record, so that ordinary roots
//! stay readable by builds that know only version 1 (to which a version 2 marker is foreign:
//! never touched).
//!
//! Invariants: written with O_EXCL (never replacing anything), mode 0600, before the root is
//! published; the one exception is [`Marker::replace`], by the owner holding the root's lock, to
//! record why the root is kept once its run is over. Read strictly: the file must be a regular
//! file with exactly one link, owned by the effective uid, at most [`MAX_MARKER_BYTES`], with
//! exactly the fields of its version and a known version. Anything else is "not ours to judge"
//! and the root is left alone.
//!
//! The owner is a [`User`]: `euid` on Unix, `owner_sid` on Windows, exactly one of the two in
//! the file (in `euid`'s place). Windows adds a liveness lock on the marker (`windows.rs`).
//! This file holds the one [`Marker`] and its strict parser; the file operations are the
//! private `os` child's: fd-relative with `O_NOFOLLOW` on Unix, on paths without following
//! reparse points on Windows.
//!
//! Durability: the marker is not synced to disk. Every reader that matters sees it through the
//! page cache; only a crash of the machine can lose it, and then the boot id changes, so what
//! survives is either the whole marker (whose owner is then provably dead) or an absent, short or
//! invalid one, which the strict reader refuses: the root is left alone and listed as unproven.
//! No crash can turn a marker into a valid one naming another root (the run id must match the
//! directory's name), so safety never depended on the sync; only reclaiming roots of runs that
//! were in flight during a power loss did, and that is what the ~0.8 ms per run bought.

#[cfg(unix)]
#[path = "unix.rs"]
mod os;
#[cfg(windows)]
#[path = "windows.rs"]
mod os;

use serde::{Deserialize, Serialize};

use crate::namespace::User;
use crate::process::{Host, ProcessId};

pub use crate::layout::{MARKER_FILE, MARKER_FORMAT, MARKER_VERSION, MAX_MARKER_BYTES};
#[cfg(windows)]
pub use os::MarkerFile;

/// The version of a marker that records why its root was kept ([`Marker::kept`]).
pub const KEPT_MARKER_VERSION: u32 = 2;

/// The content of a root's ownership marker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "MarkerWire", into = "MarkerWire")]
pub struct Marker {
    /// Always [`MARKER_FORMAT`].
    pub format: String,
    /// Always [`MARKER_VERSION`] for markers this build writes.
    pub version: u32,
    /// The run's id; the root's name is `run-<run_id>`.
    pub run_id: String,
    /// The owner: its effective uid (Unix) or user SID (Windows).
    pub user: User,
    /// The process that owns the root (the runner or the exec-server).
    pub owner: ProcessId,
    /// The boot, pid namespace (Linux) and host of the owner.
    pub host: Host,
    /// When the root was created, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// The command the run executes (for `list` and reports).
    pub command: Vec<String>,
    /// `--keep-root`: gc leaves this root alone unless asked to reclaim kept roots.
    pub keep: bool,
    /// The cgroup the run's processes live in, if one was used.
    pub cgroup: Option<String>,
    /// Why the root was kept after its run (version 2 only; `keep` is then true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<Kept>,
}

/// The marker as it is written: the owner is `euid` or `owner_sid`, exactly one of them, in
/// this place of the field order (Linux's text is byte for byte that of the builds before the
/// marker had one definition for every platform).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MarkerWire {
    format: String,
    version: u32,
    run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    euid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner_sid: Option<String>,
    owner: ProcessId,
    host: Host,
    created_unix_ms: u64,
    command: Vec<String>,
    keep: bool,
    cgroup: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kept: Option<Kept>,
}

impl TryFrom<MarkerWire> for Marker {
    type Error = String;

    fn try_from(wire: MarkerWire) -> Result<Marker, String> {
        let user = User::from_fields(wire.euid, wire.owner_sid, "owner")?;
        Ok(Marker {
            format: wire.format,
            version: wire.version,
            run_id: wire.run_id,
            user,
            owner: wire.owner,
            host: wire.host,
            created_unix_ms: wire.created_unix_ms,
            command: wire.command,
            keep: wire.keep,
            cgroup: wire.cgroup,
            kept: wire.kept,
        })
    }
}

impl From<Marker> for MarkerWire {
    fn from(marker: Marker) -> MarkerWire {
        let (euid, owner_sid) = marker.user.into_fields();
        MarkerWire {
            format: marker.format,
            version: marker.version,
            run_id: marker.run_id,
            euid,
            owner_sid,
            owner: marker.owner,
            host: marker.host,
            created_unix_ms: marker.created_unix_ms,
            command: marker.command,
            keep: marker.keep,
            cgroup: marker.cgroup,
            kept: marker.kept,
        }
    }
}

/// Why a root was kept once its run was over. A version 2 marker's `kept` records only
/// [`Kept::OnFailure`] (a root kept always says so with version 1's `keep`); `list --json` shows
/// either ([`Marker::kept_because`]): `{"when":"always"}`, or `{"when":"on-failure",
/// "exit_status":1,"retain":3}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "when", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Kept {
    /// `--keep-root` (`=always`): until `gc --kept`.
    Always,
    /// `--keep-root=on-failure`: the run failed (its exit status is not 0).
    OnFailure {
        /// The status the run exited with.
        exit_status: u8,
        /// The root stays while fewer than this many newer roots of the namespace were kept
        /// on failure; then gc reclaims it.
        retain: u32,
    },
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
    /// The marker's text: its JSON and a newline.
    fn to_bytes(&self) -> std::io::Result<Vec<u8>> {
        let mut bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    /// Why its root is kept, if it is: what `kept` records, else `always` when `keep` says so.
    pub fn kept_because(&self) -> Option<Kept> {
        self.keep.then_some(self.kept.unwrap_or(Kept::Always))
    }

    /// Parses marker text strictly, expecting owner `user`.
    pub fn parse(text: &str, user: &User) -> Result<Marker, MarkerProblem> {
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
        if probe.version != MARKER_VERSION && probe.version != KEPT_MARKER_VERSION {
            return Err(MarkerProblem::refused(format!(
                "unknown marker version {}",
                probe.version
            )));
        }
        let marker: Marker = serde_json::from_str(text)
            .map_err(|e| MarkerProblem::refused(format!("marker is not valid: {e}")))?;
        let shape_fits = match marker.kept {
            None => marker.version == MARKER_VERSION,
            Some(Kept::OnFailure { .. }) => marker.version == KEPT_MARKER_VERSION && marker.keep,
            Some(Kept::Always) => false,
        };
        if !shape_fits {
            return Err(MarkerProblem::refused(format!(
                "marker is not valid: version {} with{} `kept`",
                marker.version,
                if marker.kept.is_some() { "" } else { "out" }
            )));
        }
        if marker.user != *user {
            let expected = match user {
                User::Uid(uid) => uid.to_string(),
                User::Sid(sid) => sid.clone(),
            };
            return Err(MarkerProblem::refused(format!(
                "marker belongs to {}, not {expected}",
                marker.user
            )));
        }
        if !crate::layout::is_valid_run_id(&marker.run_id) {
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

    const UID: User = User::Uid(1000);

    fn sample() -> Marker {
        Marker {
            format: MARKER_FORMAT.into(),
            version: MARKER_VERSION,
            run_id: "20261129T093000Z-0123456789abcdef".into(),
            user: User::Uid(1000),
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
            kept: None,
        }
    }

    #[test]
    fn round_trips_and_refuses_other_shapes() {
        let text = serde_json::to_string(&sample()).unwrap();
        assert_eq!(Marker::parse(&text, &UID).unwrap(), sample());
        assert!(Marker::parse(&text, &User::Uid(1001))
            .unwrap_err()
            .reason
            .contains("uid 1000"));
        let v2 = text.replace("\"version\":1", "\"version\":2");
        assert!(Marker::parse(&v2, &UID)
            .unwrap_err()
            .reason
            .contains("version 2"));
        let extra = text.replacen('{', "{\"surprise\":1,", 1);
        assert!(Marker::parse(&extra, &UID).is_err());
        assert!(Marker::parse("{}", &UID).is_err());
        let cut = Marker::parse(&text[..text.len() / 2], &UID).unwrap_err();
        assert!(cut.damaged, "{cut}");
        assert!(Marker::parse("", &UID).unwrap_err().damaged);
        assert!(!Marker::parse(&v2, &UID).unwrap_err().damaged);
        let v3 = text.replace("\"version\":1", "\"version\":3");
        assert!(Marker::parse(&v3, &UID)
            .unwrap_err()
            .reason
            .contains("version 3"));
    }

    #[test]
    fn the_owner_is_a_uid_or_a_sid_and_exactly_one() {
        let text = serde_json::to_string(&sample()).unwrap();
        let sid = User::Sid("S-1-5-21-1-2-3-1001".into());
        let windows = text.replace(r#""euid":1000"#, r#""owner_sid":"S-1-5-21-1-2-3-1001""#);
        let parsed = Marker::parse(&windows, &sid).unwrap();
        assert_eq!(parsed.user, sid);
        assert_eq!(serde_json::to_string(&parsed).unwrap(), windows);
        let refused = Marker::parse(&windows, &UID).unwrap_err();
        assert!(!refused.damaged);
        assert!(
            refused.reason.contains("belongs to S-1-5-21-1-2-3-1001"),
            "{refused}"
        );
        let both = text.replace(r#""euid":1000"#, r#""euid":1000,"owner_sid":"S-1-5-21-1""#);
        let none = text.replace(r#""euid":1000,"#, "");
        let null = text.replace(r#""euid":1000"#, r#""euid":null"#);
        for (text, why) in [(both, "two owners"), (none, "no owner"), (null, "no owner")] {
            let problem = Marker::parse(&text, &UID).unwrap_err();
            assert!(
                !problem.damaged && problem.reason.contains(why),
                "{problem}"
            );
        }
    }

    #[test]
    fn version_2_and_only_version_2_records_why_a_root_was_kept() {
        let kept = Marker {
            version: KEPT_MARKER_VERSION,
            keep: true,
            kept: Some(Kept::OnFailure {
                exit_status: 1,
                retain: 3,
            }),
            ..sample()
        };
        let text = serde_json::to_string(&kept).unwrap();
        assert!(
            text.contains(r#""kept":{"when":"on-failure","exit_status":1,"retain":3}"#),
            "{text}"
        );
        assert_eq!(Marker::parse(&text, &UID).unwrap(), kept);
        assert!(!serde_json::to_string(&sample()).unwrap().contains("kept"));
        let as_v1 = text.replace("\"version\":2", "\"version\":1");
        assert!(
            Marker::parse(&as_v1, &UID).is_err(),
            "a version 1 marker has no `kept`"
        );
        let v2 = serde_json::to_string(&sample())
            .unwrap()
            .replace("\"version\":1", "\"version\":2");
        assert!(
            Marker::parse(&v2, &UID).is_err(),
            "a version 2 marker has one"
        );
        let unkept = text.replace("\"keep\":true", "\"keep\":false");
        assert!(Marker::parse(&unkept, &UID).is_err(), "a kept root is kept");
        let always = text.replace(
            r#"{"when":"on-failure","exit_status":1,"retain":3}"#,
            r#"{"when":"always"}"#,
        );
        assert!(
            Marker::parse(&always, &UID).is_err(),
            "version 1's keep says always"
        );
        let extra = text.replace(r#""retain":3"#, r#""retain":3,"more":1"#);
        assert!(Marker::parse(&extra, &UID).is_err(), "{extra}");
        assert_eq!(kept.kept_because(), kept.kept);
        let kept_always = Marker {
            keep: true,
            ..sample()
        };
        assert_eq!(kept_always.kept_because(), Some(Kept::Always));
        assert_eq!(sample().kept_because(), None);
    }
}
