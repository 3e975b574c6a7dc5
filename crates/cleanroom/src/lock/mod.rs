//! Exclusive runs: named OS file locks that the kernel releases when the holder dies.
//!
//! This module owns the lock directories — `locks/` in the user's namespace for
//! [`LockScope::User`], the machine lock directory for [`LockScope::Machine`] — and every file in
//! them. For a lock `NAME` held by a process of effective uid `UID`:
//!
//! | file | written by | mode (user / machine) | what it is |
//! |---|---|---|---|
//! | `NAME.lock` | whoever first needs it; never truncated, deleted only by the sweep while it holds it | 0600 / 0644 | the kernel lock on it (`flock(LOCK_EX)`; Windows: `LockFileEx`) *is* the lock |
//! | `NAME.owner.UID.json` | the holder, after acquiring (temp file + rename); removed on release | 0600 / 0644 | who holds it: for messages and `list` only |
//! | `NAME.token.UID` | the holder, before its owner record; removed on release | 0600 / 0600 | the SHA-256 of the secret that lets the holder's nested runs join (`sha256:HEX`), never the secret |
//!
//! UID is the effective uid on Unix and the user SID (`S-1-5-21-…`) on Windows (a
//! [`User`], as a root's marker names it). Lock names are 1 to 64 of `A-Z a-z 0-9 . _ -` and
//! never start with a dot, so they cannot collide with each other's files nor with the
//! dot-prefixed temporary files of a publication.
//!
//! Invariants:
//! - The kernel lock is the only truth about who holds a name: `std`'s [`File::try_lock`] on
//!   the lock file, `flock(LOCK_EX)` on Unix and `LockFileEx` over the whole file on Windows.
//!   Lock files are opened so that children never inherit them (`O_NOFOLLOW | O_CLOEXEC`; on
//!   Windows a handle that is not inheritable), so the lock dies with the holder, and are never
//!   truncated. One is deleted only by the sweep of `cleanroom gc` (Unix's `sweep.rs`) while
//!   the sweep holds its lock, and a run that takes a lock checks afterwards that the name still
//!   denotes the file it locked (else it opens the name again): a run that waited on a deleted
//!   file never holds it beside a run that locked its successor.
//! - An owner record is never proof of holding. Its writer keeps a kernel lock on it for as
//!   long as it holds the lock (`flock(LOCK_EX)`; Windows: an exclusive `LockFileEx` on a byte
//!   beyond its content, so that readers can still read it), so "the writer is alive" is a
//!   kernel fact as well (and holds across pid namespaces); a record whose lock is free, or
//!   whose pid is provably dead, is described as stale and never trusted.
//! - Several names are taken in sorted order, so runs asking for `{a, b}` and `{b, a}` cannot
//!   deadlock; a failed or timed-out request releases what it had taken and started nothing.
//! - A run joins as a *member* only when the SHA-256 of its inherited token for that scope and
//!   name equals, compared in constant time, the hash in the private token file of a holder
//!   whose record is alive and has the joiner's euid. The token itself is written nowhere: a
//!   process that can read the lock directory (every protected command can read and write the
//!   user's) learns nothing it could present. Members never take or release the kernel lock;
//!   only the original holder releases, when its [`HeldLocks`] is dropped.
//!
//! Waiting polls `try_lock` every 10 ms, backing off to 100 ms, so a timeout is honoured within
//! one pause and a lock freed by a crash is taken within 100 ms; the first "waiting for lock
//! NAME, held by run ID (pid P, command C, since T)" notice goes out after the first failed
//! attempt, and again every [`NOTICE_INTERVAL`]. A crashed holder leaves its record and token
//! file behind (described as stale, never trusted); the next holder of the same uid replaces
//! them, or `cleanroom gc` removes them.
//!
//! # Environment
//! [`acquire`] and [`list`] read two variables of the calling process ([`acquire_in`] and
//! [`list_in`] take them as a [`LockEnv`] instead):
//! - `CLEANROOM_LOCK_TOKENS` ([`TOKENS_ENV`]): the capabilities a run inherited from the runs it
//!   is nested in, as comma-separated `SCOPE:NAME:TOKEN` entries, where SCOPE is `user` or
//!   `machine` and TOKEN is 32 lowercase hex digits (128 random bits), e.g.
//!   `user:db:00112233445566778899aabbccddeeff,machine:port-8080:ffeeddccbbaa99887766554433221100`.
//!   Malformed entries are ignored (the run waits like anyone else). [`HeldLocks::child_env`]
//!   gives the value for the run's children: what was inherited plus the locks held or joined.
//! - `CLEANROOM_MACHINE_LOCK_DIR` ([`MACHINE_DIR_ENV`]): an absolute path replacing the machine
//!   lock directory, for tests and unusual installations.
//! - `CLEANROOM_USER_LOCK_DIR` ([`USER_LOCK_DIR_ENV`]): the user lock directory to use instead
//!   of `locks/` in the run's own namespace. A protected run whose namespace lies beneath its
//!   private `/tmp` sets it for its command to its namespace's `locks/` (a run nested in it
//!   keeps its roots in a namespace inside the outer root, but its user-scope locks must exclude
//!   the user's other runs). It must exist and is
//!   verified like a namespace (a real directory of the effective user, mode 0700).
//!
//! # The machine lock directory
//! Machine-scope locks live in `/tmp/cleanroom-locks` ([`DEFAULT_MACHINE_DIR`]), shared by every
//! user like `/tmp` itself: cleanroom creates it mode 1777 (sticky, world-writable). A directory
//! that is a symbolic link, not a directory, or writable by group or others without the sticky
//! bit is refused. Lock files are created 0644: `flock` needs only a read-only descriptor, so
//! every user can lock them and nobody but their creator can write them. Owner records are 0644
//! so that every waiter can name the holder; token hashes are in 0600 files of their owner, never
//! in the world-readable record, so only the holder's uid (and root) can join its machine locks.
//! Machine locks coordinate cooperating users; they are not a security boundary: the owner of the
//! directory or of a lock file can always break them by deleting files.
//!
//! # Windows
//! User-scope locks, waiting, `--lock-timeout`, owner records, [`list`] and nested-run
//! membership work as above, in `locks\` of the user's namespace (a directory verified like
//! the namespace: owned by the user SID, no reparse point, held open without
//! `FILE_SHARE_DELETE` while in use). Lock files are opened without `FILE_SHARE_DELETE` either,
//! so nobody renames or deletes one while a run holds or waits on it. What Windows has no
//! backend for is refused: [`LockScope::Machine`] (there is no machine lock directory shared
//! by every user), and [`sweep`] (`cleanroom gc` leaves `locks\` alone; a crashed holder's
//! record and token file stay, described as stale, until the name's next holder replaces
//! them). The per-file checks that Unix makes with `fstat` (owner uid, mode) are not made on
//! Windows: what is in `locks\` is trusted as far as the namespace's ACL keeps others out.
//!
//! # Parts
//! - `token.rs`: the nested-run capability ([`Capabilities`], the secret token) and the only
//!   check that lets a run join as a member;
//! - `env.rs`: [`LockEnv`], where the lock directories are and what was inherited, from the
//!   process environment;
//! - `listing.rs`: owner records (written, read back without trust, described) and [`list`];
//! - the private `os` child, picked once: opening, creating and verifying a lock directory, and
//!   the files in it (lock files, publication by rename, reading without following links,
//!   removal of only what we hold), and the kernel lock that proves a record's writer alive:
//!   `unix.rs` (descriptor-relative, with its child `sweep.rs`: [`sweep`], what `cleanroom gc`
//!   removes from the namespace's `locks/`), `windows.rs`;
//! - this file: the public API, taking and releasing locks ([`acquire`], [`HeldLocks`]), and the
//!   names of a lock's files.

mod env;
mod listing;
#[cfg(unix)]
#[path = "unix.rs"]
mod os;
#[cfg(windows)]
#[path = "windows.rs"]
mod os;
mod token;

use std::fmt;
use std::fs::{File, TryLockError};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::namespace::{Namespace, User};

pub use env::{
    LockEnv, DEFAULT_MACHINE_DIR, MACHINE_DIR_ENV, PRIVATE_TMP_ENV, TOKENS_ENV, USER_LOCK_DIR_ENV,
};
use listing::owner_record;
pub use listing::{list, list_in, LockInfo, OwnerRecord, RECORD_FORMAT, RECORD_VERSION};
#[cfg(windows)]
pub(crate) use os::probe_record_lock;
pub use os::sweep;
use os::LockDir;
pub use token::Capabilities;
use token::{Token, TokenHash};

/// How often a waiter repeats whom it is waiting for (the first notice goes out at once).
pub const NOTICE_INTERVAL: Duration = Duration::from_secs(60);

/// First and longest pause between two attempts to take a busy lock.
const POLL_FIRST: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(100);

/// Where a lock lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockScope {
    /// In the user's namespace.
    User,
    /// In a machine-wide shared directory.
    Machine,
}

impl LockScope {
    fn as_str(self) -> &'static str {
        match self {
            LockScope::User => "user",
            LockScope::Machine => "machine",
        }
    }
}

impl fmt::Display for LockScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LockScope {
    type Err = Error;

    /// Parses `user` or `machine` (the values of `--lock-scope`).
    fn from_str(s: &str) -> Result<LockScope> {
        match s {
            "user" => Ok(LockScope::User),
            "machine" => Ok(LockScope::Machine),
            _ => Err(Error::Invalid(format!(
                "invalid lock scope {s:?}: expected \"user\" or \"machine\""
            ))),
        }
    }
}

/// The locks a run asks for.
#[derive(Clone, Debug)]
pub struct LockRequest {
    /// Lock names (`--exclusive NAME`, repeatable).
    pub names: Vec<String>,
    /// Scope of every name.
    pub scope: LockScope,
    /// How long to wait; `None` waits forever.
    pub timeout: Option<Duration>,
}

/// Who is taking the locks.
#[derive(Clone, Debug)]
pub struct LockOwner {
    /// The run's id.
    pub run_id: String,
    /// The run's command.
    pub command: Vec<String>,
}

/// Whether a run took a lock itself or joined the run it is nested in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockRole {
    /// This run holds the kernel lock and releases it when its [`HeldLocks`] is dropped.
    Holder,
    /// An enclosing run holds the lock; this run presented its token and runs inside it.
    Member,
}

/// What a sweep of `locks/` removed (or would), and what it could not (see [`sweep`]).
#[derive(Clone, Debug, Default)]
pub struct Sweep {
    /// Paths removed (in a dry run: that would be).
    pub removed: Vec<PathBuf>,
    /// Entries left, with the reason.
    pub errors: Vec<String>,
}

/// Locks held (or joined) by this run; released on drop.
#[derive(Debug, Default)]
pub struct HeldLocks {
    locks: Vec<HeldLock>,
    inherited: Capabilities,
}

#[derive(Debug)]
struct HeldLock {
    scope: LockScope,
    name: String,
    token: Token,
    /// `None` for a member, which holds nothing.
    holding: Option<Holding>,
}

/// What a holder keeps open until it releases: the locked lock file, and its published files.
#[derive(Debug)]
struct Holding {
    dir: Arc<LockDir>,
    lock: File,
    record: File,
    token_file: File,
}

impl HeldLocks {
    /// Variables the run's children get so that nested runs can join instead of deadlocking:
    /// [`TOKENS_ENV`] with every inherited capability plus one per lock held or joined. Empty
    /// when there is nothing to pass on (then an inherited variable may pass through as is).
    pub fn child_env(&self) -> Vec<(String, String)> {
        let mut caps = self.inherited.clone();
        for lock in &self.locks {
            caps.tokens
                .insert((lock.scope, lock.name.clone()), lock.token);
        }
        if caps.tokens.is_empty() {
            return Vec::new();
        }
        vec![(TOKENS_ENV.to_string(), caps.to_string())]
    }

    /// The locks of this run, in the order they were taken, with how each was obtained.
    pub fn roles(&self) -> impl Iterator<Item = (LockScope, &str, LockRole)> + '_ {
        self.locks.iter().map(|l| {
            let role = if l.holding.is_some() {
                LockRole::Holder
            } else {
                LockRole::Member
            };
            (l.scope, l.name.as_str(), role)
        })
    }
}

impl Drop for HeldLocks {
    fn drop(&mut self) {
        while let Some(lock) = self.locks.pop() {
            if let Some(holding) = lock.holding {
                holding.release(&lock.name);
            }
        }
    }
}

impl Holding {
    /// Withdraws the record (so no waiter names a finished run), then the token, then unlocks.
    fn release(self, name: &str) {
        let user = self.dir.user();
        for (file_name, file) in [
            (record_name(name, &user), &self.record),
            (token_name(name, &user), &self.token_file),
        ] {
            if let Err(e) = remove_if_same(&self.dir, &file_name, file) {
                tracing::warn!(
                    "cannot remove {}: {e}",
                    self.dir.path.join(&file_name).display()
                );
            }
        }
        if let Err(e) = os::unlock(&self.lock) {
            // Closing the descriptor, just below, releases it anyway.
            tracing::warn!(
                "cannot unlock {}: {e}",
                self.dir.path.join(lock_name(name)).display()
            );
        }
    }
}

/// Takes every lock of `request`, waiting as allowed; `notify` receives "waiting for ..." lines.
///
/// Inherited capabilities and the machine lock directory come from this process's environment
/// (see [`LockEnv::from_process`]); [`acquire_in`] takes them explicitly.
pub fn acquire(
    ns: &Namespace,
    request: &LockRequest,
    owner: &LockOwner,
    notify: &mut dyn FnMut(&str),
) -> Result<HeldLocks> {
    acquire_in(ns, request, owner, &LockEnv::from_process(), notify)
}

/// [`acquire`] with an explicit environment.
///
/// Names are validated, deduplicated and taken in sorted order. For each one: take the kernel
/// lock if it is free; else join as a member if an inherited capability matches the live holder;
/// else tell `notify` whom we wait for (at once, then every [`NOTICE_INTERVAL`]) and retry until
/// the deadline, which covers the whole request. On any error, locks already taken are released.
pub fn acquire_in(
    ns: &Namespace,
    request: &LockRequest,
    owner: &LockOwner,
    env: &LockEnv,
    notify: &mut dyn FnMut(&str),
) -> Result<HeldLocks> {
    let mut names = request.names.clone();
    for name in &names {
        check_name(name)?;
    }
    names.sort();
    names.dedup();
    let mut held = HeldLocks {
        locks: Vec::new(),
        inherited: env.inherited.clone(),
    };
    if names.is_empty() {
        return Ok(held);
    }
    let deadline = request.timeout.and_then(|t| Instant::now().checked_add(t));
    let dir = Arc::new(LockDir::create(ns, request.scope, env)?);
    for name in names {
        let inherited = env.inherited.get(request.scope, &name);
        let lock = take(&dir, &name, inherited, owner, deadline, notify)?;
        held.locks.push(lock);
    }
    Ok(held)
}

/// Checks a lock name: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with a dot.
pub fn check_name(name: &str) -> Result<()> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "invalid lock name {name:?}: use 1 to 64 of the characters A-Z a-z 0-9 . _ -, \
             not starting with a dot"
        )))
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Takes one name: as holder, as member, or not at all by the deadline.
fn take(
    dir: &Arc<LockDir>,
    name: &str,
    inherited: Option<&Token>,
    owner: &LockOwner,
    deadline: Option<Instant>,
    notify: &mut dyn FnMut(&str),
) -> Result<HeldLock> {
    let mut lock = dir.open_lock_file(name)?;
    let mut pause = POLL_FIRST;
    let mut last_notice: Option<Instant> = None;
    loop {
        match lock.try_lock() {
            Ok(()) if dir.still_names(&lock_name(name), &lock)? => {
                return become_holder(dir, name, lock, owner)
            }
            Ok(()) => {
                // `cleanroom gc` removed the file while we waited (it does so only while holding
                // it): the lock now lives in whatever the name denotes.
                lock = dir.open_lock_file(name)?;
                continue;
            }
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => {
                return Err(Error::io("lock", dir.path.join(lock_name(name)), e))
            }
        }
        if let Some(token) = inherited {
            if may_join(dir, name, token)? {
                return Ok(HeldLock {
                    scope: dir.scope,
                    name: name.to_string(),
                    token: *token,
                    holding: None,
                });
            }
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(Error::LockTimeout {
                name: name.to_string(),
                holder: dir.describe_holder(name)?,
            });
        }
        if last_notice.is_none_or(|at| now.duration_since(at) >= NOTICE_INTERVAL) {
            let scope = match dir.scope {
                LockScope::User => String::new(),
                LockScope::Machine => " (machine scope)".to_string(),
            };
            notify(&format!(
                "waiting for lock {name}{scope}, {}",
                dir.describe_holder(name)?
            ));
            last_notice = Some(now);
        }
        let remaining = deadline.map_or(pause, |d| d.saturating_duration_since(now));
        std::thread::sleep(pause.min(remaining));
        pause = (pause * 2).min(POLL_MAX);
    }
}

/// Whether `token` lets this process join `name`: the live holder is our user and its
/// private token file holds the hash of exactly this token.
fn may_join(dir: &LockDir, name: &str, token: &Token) -> Result<bool> {
    let user = dir.user();
    let live_holder = dir
        .records(Some(name))?
        .iter()
        .any(|info| info.writer_alive && info.record.user == user);
    let hash = dir
        .read_published(&token_name(name, &user), &user, Published::Token)
        .and_then(|(_, text)| TokenHash::parse_file(&text));
    Ok(live_holder && hash.is_some_and(|h| h.admits(token)))
}

/// Called with the kernel lock taken: publishes the token, then the record, and keeps both.
fn become_holder(
    dir: &Arc<LockDir>,
    name: &str,
    lock: File,
    owner: &LockOwner,
) -> Result<HeldLock> {
    let token = Token::random()?;
    let user = dir.user();
    let token_file = dir.publish(
        &token_name(name, &user),
        token.hash().file_text().as_bytes(),
        Published::Token,
    )?;
    let record = match owner_record(dir, name, owner).and_then(|record| {
        let mut bytes = serde_json::to_vec(&record)
            .map_err(|e| Error::Invalid(format!("cannot encode the owner record: {e}")))?;
        bytes.push(b'\n');
        dir.publish(&record_name(name, &user), &bytes, Published::Record)
    }) {
        Ok(record) => record,
        Err(e) => {
            let _ = remove_if_same(dir, &token_name(name, &user), &token_file);
            return Err(e);
        }
    };
    Ok(HeldLock {
        scope: dir.scope,
        name: name.to_string(),
        token,
        holding: Some(Holding {
            dir: Arc::clone(dir),
            lock,
            record,
            token_file,
        }),
    })
}

// The files of a lock, named here for every platform; the `os` child opens, publishes, reads
// and removes them.

/// Which published file of a lock: how it is written, read and bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Published {
    /// `NAME.token.UID`: private to its owner, one line.
    Token,
    /// `NAME.owner.UID.json`: readable by every waiter of the scope, held by its writer.
    Record,
}

impl Published {
    /// What a file of this kind may hold at most; a larger one is ignored unread.
    fn max_bytes(self) -> u64 {
        match self {
            Published::Token => MAX_TOKEN_FILE_BYTES,
            Published::Record => listing::MAX_RECORD_BYTES,
        }
    }

    /// The text of `file`, a file of this kind the platform judged ours: at most
    /// [`Published::max_bytes`] of it, with the file kept open (a record's writer is probed
    /// through it); `None` when it cannot be read as text.
    fn read(self, mut file: File) -> Option<(File, String)> {
        use std::io::Read;
        let mut text = String::new();
        (&mut file)
            .take(self.max_bytes())
            .read_to_string(&mut text)
            .ok()?;
        Some((file, text))
    }
}

/// Token files are one short line (`sha256:` and 64 hex digits, or an older bare token).
const MAX_TOKEN_FILE_BYTES: u64 = 128;

fn lock_name(name: &str) -> String {
    format!("{name}.lock")
}

fn record_name(name: &str, user: &User) -> String {
    format!("{name}.owner.{}.json", user_key(user))
}

fn token_name(name: &str, user: &User) -> String {
    format!("{name}.token.{}", user_key(user))
}

/// The user as the file names of a lock say it: the uid in decimal, or the SID.
fn user_key(user: &User) -> String {
    match user {
        User::Uid(uid) => uid.to_string(),
        User::Sid(sid) => sid.clone(),
    }
}

/// The user a file name's key says ([`user_key`]'s inverse): digits are a uid, `S-` and
/// digits and dashes a SID; anything else names nobody.
fn user_from_key(key: &str) -> Option<User> {
    if !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit()) {
        return key.parse().ok().map(User::Uid);
    }
    let sid = key.strip_prefix("S-")?;
    (!sid.is_empty() && sid.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
        .then(|| User::Sid(key.to_string()))
}

/// Removes `file_name` from `dir` if it is still the file we hold open.
fn remove_if_same(dir: &LockDir, file_name: &str, ours: &File) -> Result<()> {
    if dir.still_names(file_name, ours)? {
        dir.remove(file_name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_say_the_user_and_nothing_else() {
        let uid = User::Uid(1000);
        let sid = User::Sid("S-1-5-21-1-2-3-1001".into());
        assert_eq!(record_name("db", &uid), "db.owner.1000.json");
        assert_eq!(token_name("db", &sid), "db.token.S-1-5-21-1-2-3-1001");
        for user in [uid, sid, User::Uid(0)] {
            assert_eq!(user_from_key(&user_key(&user)), Some(user));
        }
        for junk in [
            "",
            "S-",
            "s-1-5",
            "1000x",
            "S-1-5.json",
            "-1",
            "99999999999",
        ] {
            assert_eq!(user_from_key(junk), None, "{junk}");
        }
    }
}
