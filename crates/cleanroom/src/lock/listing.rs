//! Owner records: who holds a lock, for messages and `cleanroom list` only. Written by the
//! holder ([`owner_record`]), read back by anyone ([`list`], the waiting notice) and never
//! trusted: a record is shown only if it is a regular file of the user its name says (on
//! Windows: in the user's own lock directory), at most [`MAX_RECORD_BYTES`], consistent with its
//! name and directory, and its writer is alive only if it still holds its kernel lock on the
//! record and is not provably dead. Text from records is escaped before it is shown (records in
//! the machine directory come from other users).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::env::LockEnv;
use super::os::{record_held_open, LockDir};
use super::{user_from_key, valid_name, LockOwner, LockScope, Published};
use crate::error::{Error, Result};
use crate::namespace::{Namespace, User};
use crate::process::{Host, ProcessId};
use crate::text::escape_controls as shown;

/// Value of an owner record's `format` field.
pub const RECORD_FORMAT: &str = "cleanroom-lock-owner";
/// The owner record version this build writes and the only one it reads.
pub const RECORD_VERSION: u32 = 1;

/// Owner records larger than this are ignored unread.
pub(super) const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// Commands longer than this are cut in messages.
const MAX_SHOWN_COMMAND: usize = 200;

/// The owner record beside a held lock. Written by the holder; trusted by nobody.
///
/// In the file (and in `list --json`) the user is `euid` on Unix and `owner_sid` on Windows,
/// exactly one of the two, in `euid`'s place, as in a root's marker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RecordWire", into = "RecordWire")]
pub struct OwnerRecord {
    /// Always [`RECORD_FORMAT`].
    pub format: String,
    /// Always [`RECORD_VERSION`].
    pub version: u32,
    /// The lock's name.
    pub name: String,
    /// The lock's scope.
    pub scope: LockScope,
    /// The holding run's id.
    pub run_id: String,
    /// The holder's user: its effective uid (also the record file's owner), or its user SID.
    pub user: User,
    /// The holding process: pid and start time.
    pub owner: ProcessId,
    /// Boot, pid namespace and host of the holder.
    pub host: Host,
    /// When the lock was taken, milliseconds since the Unix epoch.
    pub since_unix_ms: u64,
    /// The holding run's command.
    pub command: Vec<String>,
}

/// An owner record as it is written: the user is `euid` or `owner_sid`, exactly one of them,
/// in this place of the field order (Unix's text is byte for byte that of the builds before
/// Windows had locks).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordWire {
    format: String,
    version: u32,
    name: String,
    scope: LockScope,
    run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    euid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner_sid: Option<String>,
    owner: ProcessId,
    host: Host,
    since_unix_ms: u64,
    command: Vec<String>,
}

impl TryFrom<RecordWire> for OwnerRecord {
    type Error = String;

    fn try_from(wire: RecordWire) -> Result<OwnerRecord, String> {
        let user = User::from_fields(wire.euid, wire.owner_sid, "user")?;
        Ok(OwnerRecord {
            format: wire.format,
            version: wire.version,
            name: wire.name,
            scope: wire.scope,
            run_id: wire.run_id,
            user,
            owner: wire.owner,
            host: wire.host,
            since_unix_ms: wire.since_unix_ms,
            command: wire.command,
        })
    }
}

impl From<OwnerRecord> for RecordWire {
    fn from(record: OwnerRecord) -> RecordWire {
        let (euid, owner_sid) = record.user.into_fields();
        RecordWire {
            format: record.format,
            version: record.version,
            name: record.name,
            scope: record.scope,
            run_id: record.run_id,
            euid,
            owner_sid,
            owner: record.owner,
            host: record.host,
            since_unix_ms: record.since_unix_ms,
            command: record.command,
        }
    }
}

/// One owner record found by [`list`].
#[derive(Clone, Debug, Serialize)]
pub struct LockInfo {
    /// What the record says.
    pub record: OwnerRecord,
    /// Whether the record's writer still holds it open and is not provably dead. A record whose
    /// writer is gone is stale: its lock may be free or held by a run that has not written its
    /// record yet.
    pub writer_alive: bool,
}

impl LockInfo {
    /// One line for people: "held by run X (pid P, command C, since T)", or why it is stale.
    pub fn describe(&self) -> String {
        let r = &self.record;
        if self.writer_alive {
            format!(
                "held by run {} (pid {}, command {}, since {})",
                shown(&r.run_id),
                r.owner.pid,
                shown_command(&r.command),
                since(r.since_unix_ms)
            )
        } else {
            format!(
                "stale owner record of run {} (pid {}, command {}): that process is no longer running",
                shown(&r.run_id),
                r.owner.pid,
                shown_command(&r.command)
            )
        }
    }
}

/// Every owner record in the user's and the machine's lock directories, sorted by scope and name.
///
/// The machine lock directory comes from this process's environment; [`list_in`] takes it.
pub fn list(ns: &Namespace) -> Result<Vec<LockInfo>> {
    list_in(ns, &LockEnv::from_process())
}

/// [`list`] with an explicit environment. Creates nothing; a missing directory has no locks.
pub fn list_in(ns: &Namespace, env: &LockEnv) -> Result<Vec<LockInfo>> {
    let mut out = Vec::new();
    for scope in [LockScope::User, LockScope::Machine] {
        if let Some(dir) = LockDir::open_existing(ns, scope, env)? {
            out.extend(dir.records(None)?);
        }
    }
    out.sort_by(|a, b| {
        let key = |info: &LockInfo| {
            let r = &info.record;
            (
                r.scope,
                r.name.clone(),
                r.user.uid(),
                super::user_key(&r.user),
            )
        };
        key(a).cmp(&key(b))
    });
    Ok(out)
}

/// The record of `owner` holding `name` in `dir`, as of now.
pub(super) fn owner_record(dir: &LockDir, name: &str, owner: &LockOwner) -> Result<OwnerRecord> {
    let since_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    Ok(OwnerRecord {
        format: RECORD_FORMAT.to_string(),
        version: RECORD_VERSION,
        name: name.to_string(),
        scope: dir.scope,
        run_id: owner.run_id.clone(),
        user: dir.user(),
        owner: ProcessId::current().map_err(|e| Error::sys("identify this process", e))?,
        host: Host::current().map_err(|e| Error::sys("identify this host", e))?,
        since_unix_ms,
        command: owner.command.clone(),
    })
}

impl LockDir {
    /// "held by run X (...)" for the live holder of `name`, or what can be said without one.
    pub(super) fn describe_holder(&self, name: &str) -> Result<String> {
        let mut records = self.records(Some(name))?;
        if let Some(live) = records.iter().find(|r| r.writer_alive) {
            return Ok(live.describe());
        }
        records.sort_by_key(|r| r.record.since_unix_ms);
        Ok(match records.last() {
            Some(stale) => format!(
                "held by an unidentified process (no owner record yet; found only a {})",
                stale.describe()
            ),
            None => "held by an unidentified process (no owner record yet)".to_string(),
        })
    }

    /// The well-formed owner records in this directory (of `only` that name, if given).
    /// Malformed, foreign-looking or unreadable records are skipped: they are never trusted.
    pub(super) fn records(&self, only: Option<&str>) -> Result<Vec<LockInfo>> {
        let here = Host::current().ok();
        let mut out = Vec::new();
        for file_name in self.file_names()? {
            let Some((name, key)) = file_name
                .strip_suffix(".json")
                .and_then(|stem| stem.rsplit_once(".owner."))
            else {
                continue;
            };
            if only.is_some_and(|n| n != name) || !valid_name(name) {
                continue;
            }
            let Some(user) = user_from_key(key) else {
                continue;
            };
            out.extend(self.read_record(&file_name, name, user, here.as_ref()));
        }
        Ok(out)
    }

    fn read_record(
        &self,
        file_name: &str,
        name: &str,
        user: User,
        here: Option<&Host>,
    ) -> Option<LockInfo> {
        let (file, text) = self.read_published(file_name, &user, Published::Record)?;
        let record: OwnerRecord = serde_json::from_str(&text).ok()?;
        let consistent = record.format == RECORD_FORMAT
            && record.version == RECORD_VERSION
            && record.name == name
            && record.scope == self.scope
            && record.user == user;
        if !consistent {
            return None;
        }
        // The writer holds its kernel lock on the record until it releases (see the os child).
        let held_open = record_held_open(&file);
        let not_dead = here.is_none_or(|here| !record.owner.liveness(&record.host, here).is_dead());
        Some(LockInfo {
            writer_alive: held_open && not_dead,
            record,
        })
    }
}

fn shown_command(command: &[String]) -> String {
    let mut text = shown(&command.join(" ")).into_owned();
    if text.chars().count() > MAX_SHOWN_COMMAND {
        text = text.chars().take(MAX_SHOWN_COMMAND).collect::<String>() + "…";
    }
    text
}

/// "HH:MM:SS UTC, 2m10s ago" for a Unix time in milliseconds.
fn since(unix_ms: u64) -> String {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    let secs = unix_ms / 1000;
    let ago = now_ms.saturating_sub(unix_ms) / 1000;
    let ago = match ago {
        0..60 => format!("{ago}s"),
        60..3600 => format!("{}m{:02}s", ago / 60, ago % 60),
        _ => format!("{}h{:02}m", ago / 3600, ago / 60 % 60),
    };
    format!(
        "{:02}:{:02}:{:02} UTC, {ago} ago",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_names_its_user_as_euid_on_unix_and_owner_sid_on_windows() {
        let record = |user| OwnerRecord {
            format: RECORD_FORMAT.into(),
            version: RECORD_VERSION,
            name: "db".into(),
            scope: LockScope::User,
            run_id: "r".into(),
            user,
            owner: ProcessId {
                pid: 7,
                start_time: 8,
            },
            host: Host {
                boot_id: "b".into(),
                pid_ns: 0,
                hostname: "h".into(),
            },
            since_unix_ms: 9,
            command: vec!["true".into()],
        };
        let unix = serde_json::to_string(&record(User::Uid(1000))).unwrap();
        // Byte for byte the record of the builds before Windows had locks.
        assert_eq!(
            unix,
            r#"{"format":"cleanroom-lock-owner","version":1,"name":"db","scope":"user","run_id":"r","euid":1000,"owner":{"pid":7,"start_time":8},"host":{"boot_id":"b","pid_ns":0,"hostname":"h"},"since_unix_ms":9,"command":["true"]}"#
        );
        let windows = unix.replace(r#""euid":1000"#, r#""owner_sid":"S-1-5-21-1-2-3-1001""#);
        for (text, user) in [
            (&unix, User::Uid(1000)),
            (&windows, User::Sid("S-1-5-21-1-2-3-1001".into())),
        ] {
            let read: OwnerRecord = serde_json::from_str(text).unwrap();
            assert_eq!(read, record(user));
            assert_eq!(&serde_json::to_string(&read).unwrap(), text);
        }
        let both = unix.replace(r#""euid":1000"#, r#""euid":1000,"owner_sid":"S-1-5-21-1""#);
        let none = unix.replace(r#""euid":1000,"#, "");
        let other = unix.replace(r#""euid":1000"#, r#""euid":1000,"uid":1"#);
        for bad in [both, none, other] {
            assert!(serde_json::from_str::<OwnerRecord>(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_shown_command_is_escaped_and_bounded() {
        assert_eq!(shown_command(&["a\x1b[2Jb\n".into()]), "a\\u{1b}[2Jb\\n");
        let long = vec!["x".repeat(300)];
        assert_eq!(shown_command(&long).chars().count(), MAX_SHOWN_COMMAND + 1);
    }
}
