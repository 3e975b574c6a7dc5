//! Owner records: who holds a lock, for messages and `cleanroom list` only. Written by the
//! holder ([`owner_record`]), read back by anyone ([`list`], the waiting notice) and never
//! trusted: a record is shown only if it is a regular file of the uid its name says, at most
//! [`MAX_RECORD_BYTES`], consistent with its name and directory, and its writer is alive only if
//! it still holds the record open under `flock` and is not provably dead. Text from records is
//! escaped before it is shown (records in the machine directory come from other users).

use std::fs::{File, TryLockError};
use std::io::Read;
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{FileType, Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::dir::LockDir;
use super::env::LockEnv;
use super::{valid_name, LockOwner, LockScope};
use crate::error::IoContext;
use crate::error::{Error, Result};
use crate::namespace::Namespace;
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// Effective uid of the holder (also the record file's owner).
    pub euid: u32,
    /// The holding process: pid and start time.
    pub owner: ProcessId,
    /// Boot, pid namespace and host of the holder.
    pub host: Host,
    /// When the lock was taken, milliseconds since the Unix epoch.
    pub since_unix_ms: u64,
    /// The holding run's command.
    pub command: Vec<String>,
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
        (a.record.scope, &a.record.name, a.record.euid).cmp(&(
            b.record.scope,
            &b.record.name,
            b.record.euid,
        ))
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
        euid: dir.euid,
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
        let mut entries =
            rustix::fs::Dir::read_from(&self.fd).at("read lock directory", &self.path)?;
        let here = Host::current().ok();
        let mut out = Vec::new();
        while let Some(entry) = entries.read() {
            let entry = entry.at("read lock directory", &self.path)?;
            let Ok(file_name) = entry.file_name().to_str() else {
                continue;
            };
            let Some((name, uid)) = file_name
                .strip_suffix(".json")
                .and_then(|stem| stem.rsplit_once(".owner."))
            else {
                continue;
            };
            if only.is_some_and(|n| n != name) || !valid_name(name) {
                continue;
            }
            let Ok(uid) = uid.parse::<u32>() else {
                continue;
            };
            out.extend(self.read_record(file_name, name, uid, here.as_ref()));
        }
        Ok(out)
    }

    fn read_record(
        &self,
        file_name: &str,
        name: &str,
        uid: u32,
        here: Option<&Host>,
    ) -> Option<LockInfo> {
        let fd = rustix::fs::openat(
            &self.fd,
            file_name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
            || st.st_uid != uid
            || st.st_size as u64 > MAX_RECORD_BYTES
        {
            return None;
        }
        let mut file = File::from(fd);
        let mut text = String::new();
        (&mut file)
            .take(MAX_RECORD_BYTES)
            .read_to_string(&mut text)
            .ok()?;
        let record: OwnerRecord = serde_json::from_str(&text).ok()?;
        let consistent = record.format == RECORD_FORMAT
            && record.version == RECORD_VERSION
            && record.name == name
            && record.scope == self.scope
            && record.euid == uid;
        if !consistent {
            return None;
        }
        // The writer holds LOCK_EX on its record until it releases; if we can take a shared lock,
        // nobody holds the record open any more.
        let held_open = matches!(file.try_lock_shared(), Err(TryLockError::WouldBlock));
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
    fn a_shown_command_is_escaped_and_bounded() {
        assert_eq!(shown_command(&["a\x1b[2Jb\n".into()]), "a\\u{1b}[2Jb\\n");
        let long = vec!["x".repeat(300)];
        assert_eq!(shown_command(&long).chars().count(), MAX_SHOWN_COMMAND + 1);
    }
}
