//! Exclusive runs: named OS file locks that the kernel releases when the holder dies.
//!
//! This module owns the lock directories — `locks/` in the user's namespace for
//! [`LockScope::User`], the machine lock directory for [`LockScope::Machine`] — and every file in
//! them. For a lock `NAME` held by a process of effective uid `UID`:
//!
//! | file | written by | mode (user / machine) | what it is |
//! |---|---|---|---|
//! | `NAME.lock` | whoever first needs it; never truncated, never deleted | 0600 / 0644 | `flock(LOCK_EX)` on it *is* the lock |
//! | `NAME.owner.UID.json` | the holder, after acquiring (temp file + rename); removed on release | 0600 / 0644 | who holds it: for messages and `list` only |
//! | `NAME.token.UID` | the holder, before its owner record; removed on release | 0600 / 0600 | the secret that lets the holder's nested runs join |
//!
//! Lock names are 1 to 64 of `A-Z a-z 0-9 . _ -` and never start with a dot, so they cannot
//! collide with each other's files nor with the dot-prefixed temporary files of a publication.
//!
//! Invariants:
//! - The kernel lock is the only truth about who holds a name. Lock files are opened
//!   `O_NOFOLLOW | O_CLOEXEC` (children never inherit the lock, so it dies with the holder) and
//!   are never truncated or deleted: deleting one would let a later run lock a new inode while the
//!   holder still locks the old one.
//! - An owner record is never proof of holding. Its writer keeps it open with `flock(LOCK_EX)`
//!   for as long as it holds the lock, so "the writer is alive" is a kernel fact as well (and
//!   holds across pid namespaces); a record whose lock is free, or whose pid is provably dead, is
//!   described as stale and never trusted.
//! - Several names are taken in sorted order, so runs asking for `{a, b}` and `{b, a}` cannot
//!   deadlock; a failed or timed-out request releases what it had taken and started nothing.
//! - A run joins as a *member* only when its inherited token for that scope and name equals,
//!   compared in constant time, the token in the private token file of a holder whose record is
//!   alive and has the joiner's euid. Members never take or release the kernel lock; only the
//!   original holder releases, when its [`HeldLocks`] is dropped.
//!
//! Waiting polls `try_lock` every 10 ms, backing off to 100 ms, so a timeout is honoured within
//! one pause and a lock freed by a crash is taken within 100 ms; the first "waiting for lock
//! NAME, held by run ID (pid P, command C, since T)" notice goes out after the first failed
//! attempt, and again every [`NOTICE_INTERVAL`]. A crashed holder leaves its record and token
//! file behind (described as stale, never trusted); the next holder of the same uid replaces
//! them.
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
//!
//! # The machine lock directory
//! Machine-scope locks live in `/tmp/cleanroom-locks` ([`DEFAULT_MACHINE_DIR`]), shared by every
//! user like `/tmp` itself: cleanroom creates it mode 1777 (sticky, world-writable). A directory
//! that is a symbolic link, not a directory, or writable by group or others without the sticky
//! bit is refused. Lock files are created 0644: `flock` needs only a read-only descriptor, so
//! every user can lock them and nobody but their creator can write them. Owner records are 0644
//! so that every waiter can name the holder; tokens are in 0600 files of their owner, never in
//! the world-readable record, so only the holder's uid (and root) can join its machine locks.
//! Machine locks coordinate cooperating users; they are not a security boundary: the owner of the
//! directory or of a lock file can always break them by deleting files.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, TryLockError};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::error::IoContext;
use crate::namespace::{Namespace, LOCKS_DIR};
use crate::process::{Host, Liveness, ProcessId};
use crate::{Error, Result};

/// Environment variable carrying inherited nested-run capabilities (format in the module doc).
pub const TOKENS_ENV: &str = "CLEANROOM_LOCK_TOKENS";
/// Environment variable overriding the machine lock directory.
pub const MACHINE_DIR_ENV: &str = "CLEANROOM_MACHINE_LOCK_DIR";
/// Where machine-scope locks live unless [`MACHINE_DIR_ENV`] says otherwise.
pub const DEFAULT_MACHINE_DIR: &str = "/tmp/cleanroom-locks";
/// How often a waiter repeats whom it is waiting for (the first notice goes out at once).
pub const NOTICE_INTERVAL: Duration = Duration::from_secs(60);
/// Value of an owner record's `format` field.
pub const RECORD_FORMAT: &str = "cleanroom-lock-owner";
/// The owner record version this build writes and the only one it reads.
pub const RECORD_VERSION: u32 = 1;

/// Owner records larger than this are ignored unread.
const MAX_RECORD_BYTES: u64 = 64 * 1024;
/// First and longest pause between two attempts to take a busy lock.
const POLL_FIRST: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(100);
/// Commands longer than this are cut in messages.
const MAX_SHOWN_COMMAND: usize = 200;

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

    /// Mode of lock files and owner records: private to the user, or readable by every waiter.
    fn shared_file_mode(self) -> Mode {
        match self {
            LockScope::User => Mode::from_raw_mode(0o600),
            LockScope::Machine => Mode::from_raw_mode(0o644),
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

/// A nested-run capability: 128 random bits. Its `Debug` never shows the secret.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Token([u8; 16]);

impl Token {
    fn random() -> Result<Token> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)
            .map_err(|e| Error::sys("read random bytes", std::io::Error::other(e.to_string())))?;
        Ok(Token(bytes))
    }

    /// Parses exactly 32 lowercase hex digits.
    fn parse(text: &str) -> Option<Token> {
        let text = text.as_bytes();
        if text.len() != 32 {
            return None;
        }
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut bytes = [0u8; 16];
        for (byte, pair) in bytes.iter_mut().zip(text.chunks_exact(2)) {
            *byte = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Some(Token(bytes))
    }

    /// Compares without an early exit, so timing does not tell how much of a guess was right.
    fn matches(&self, other: &Token) -> bool {
        let diff = self
            .0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Capabilities a run inherited from the runs it is nested in (the value of [`TOKENS_ENV`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    tokens: BTreeMap<(LockScope, String), Token>,
}

impl Capabilities {
    /// Parses `SCOPE:NAME:TOKEN[,...]`; malformed entries are dropped, never trusted.
    pub fn parse(text: &str) -> Capabilities {
        let tokens = text
            .split(',')
            .filter_map(|entry| {
                let mut parts = entry.splitn(3, ':');
                let scope = parts.next()?.parse::<LockScope>().ok()?;
                let name = parts.next().filter(|n| valid_name(n))?;
                let token = Token::parse(parts.next()?)?;
                Some(((scope, name.to_string()), token))
            })
            .collect();
        Capabilities { tokens }
    }

    /// The capabilities in this process's [`TOKENS_ENV`] (none when unset or not UTF-8).
    pub fn from_env() -> Capabilities {
        std::env::var(TOKENS_ENV)
            .map(|text| Capabilities::parse(&text))
            .unwrap_or_default()
    }

    fn get(&self, scope: LockScope, name: &str) -> Option<&Token> {
        self.tokens.get(&(scope, name.to_string()))
    }
}

impl fmt::Display for Capabilities {
    /// Formats as the value of [`TOKENS_ENV`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, ((scope, name), token)) in self.tokens.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}{scope}:{name}:{token}")?;
        }
        Ok(())
    }
}

/// What [`acquire`] and [`list`] take from the process environment, made explicit.
#[derive(Clone, Debug)]
pub struct LockEnv {
    /// Capabilities inherited from enclosing runs.
    pub inherited: Capabilities,
    /// The machine lock directory (absolute).
    pub machine_dir: PathBuf,
}

impl LockEnv {
    /// Reads [`TOKENS_ENV`] and [`MACHINE_DIR_ENV`] (unset or empty: [`DEFAULT_MACHINE_DIR`]).
    pub fn from_process() -> LockEnv {
        let machine_dir = std::env::var_os(MACHINE_DIR_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_MACHINE_DIR));
        LockEnv {
            inherited: Capabilities::from_env(),
            machine_dir,
        }
    }
}

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
        let euid = self.dir.euid;
        for (file_name, file) in [
            (record_name(name, euid), &self.record),
            (token_name(name, euid), &self.token_file),
        ] {
            if let Err(e) = remove_if_same(&self.dir, &file_name, file) {
                tracing::warn!(
                    "cannot remove {}: {e}",
                    self.dir.path.join(&file_name).display()
                );
            }
        }
        if let Err(e) = self.lock.unlock() {
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
    let dir = Arc::new(LockDir::create(ns, request.scope, &env.machine_dir)?);
    for name in names {
        let inherited = env.inherited.get(request.scope, &name);
        let lock = take(&dir, &name, inherited, owner, deadline, notify)?;
        held.locks.push(lock);
    }
    Ok(held)
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
        if let Some(dir) = LockDir::open_existing(ns, scope, &env.machine_dir)? {
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

fn lock_name(name: &str) -> String {
    format!("{name}.lock")
}

fn record_name(name: &str, euid: u32) -> String {
    format!("{name}.owner.{euid}.json")
}

fn token_name(name: &str, euid: u32) -> String {
    format!("{name}.token.{euid}")
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
    let lock = dir.open_lock_file(name)?;
    let mut pause = POLL_FIRST;
    let mut last_notice: Option<Instant> = None;
    loop {
        match lock.try_lock() {
            Ok(()) => return become_holder(dir, name, lock, owner),
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => {
                return Err(Error::io("lock", dir.path.join(lock_name(name)), e))
            }
        }
        if let Some(token) = inherited {
            if dir.may_join(name, token)? {
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

/// Called with the kernel lock taken: publishes the token, then the record, and keeps both.
fn become_holder(
    dir: &Arc<LockDir>,
    name: &str,
    lock: File,
    owner: &LockOwner,
) -> Result<HeldLock> {
    let token = Token::random()?;
    let token_file = dir.publish(
        &token_name(name, dir.euid),
        format!("{token}\n").as_bytes(),
        Mode::from_raw_mode(0o600),
        false,
    )?;
    let record = match owner_record(dir, name, owner).and_then(|record| {
        let mut bytes = serde_json::to_vec(&record)
            .map_err(|e| Error::Invalid(format!("cannot encode the owner record: {e}")))?;
        bytes.push(b'\n');
        dir.publish(
            &record_name(name, dir.euid),
            &bytes,
            dir.scope.shared_file_mode(),
            true,
        )
    }) {
        Ok(record) => record,
        Err(e) => {
            let _ = remove_if_same(dir, &token_name(name, dir.euid), &token_file);
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

fn owner_record(dir: &LockDir, name: &str, owner: &LockOwner) -> Result<OwnerRecord> {
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

/// Removes `file_name` from `dir` if it is still the file we hold open.
fn remove_if_same(dir: &LockDir, file_name: &str, ours: &File) -> Result<()> {
    let path = || dir.path.join(file_name);
    let mine = rustix::fs::fstat(ours).at("inspect", path())?;
    match rustix::fs::statat(&dir.fd, file_name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino) => {
            rustix::fs::unlinkat(&dir.fd, file_name, AtFlags::empty()).at("remove", path())
        }
        Ok(_) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(Error::io("inspect", path(), e)),
    }
}

/// An opened, verified lock directory.
#[derive(Debug)]
struct LockDir {
    scope: LockScope,
    path: PathBuf,
    fd: OwnedFd,
    euid: u32,
}

impl LockDir {
    /// Opens the directory of `scope`, creating it when needed.
    fn create(ns: &Namespace, scope: LockScope, machine_dir: &Path) -> Result<LockDir> {
        if scope == LockScope::Machine {
            check_machine_path(machine_dir)?;
            let created = match rustix::fs::mkdir(machine_dir, Mode::from_raw_mode(0o1777)) {
                Ok(()) => true,
                Err(rustix::io::Errno::EXIST) => false,
                Err(e) => return Err(Error::io("create machine lock directory", machine_dir, e)),
            };
            return LockDir::open_machine(machine_dir, created)?.ok_or_else(|| {
                Error::io(
                    "open machine lock directory",
                    machine_dir,
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                )
            });
        }
        let sub = ns.private_subdir(LOCKS_DIR)?;
        LockDir::from_private(sub, ns.euid())
    }

    /// Opens the directory of `scope` if it exists.
    fn open_existing(
        ns: &Namespace,
        scope: LockScope,
        machine_dir: &Path,
    ) -> Result<Option<LockDir>> {
        if scope == LockScope::Machine {
            check_machine_path(machine_dir)?;
            return LockDir::open_machine(machine_dir, false);
        }
        match rustix::fs::statat(ns.dir(), LOCKS_DIR, AtFlags::SYMLINK_NOFOLLOW) {
            Err(rustix::io::Errno::NOENT) => Ok(None),
            // private_subdir verifies what is there (a symlink or foreign directory is refused).
            _ => Ok(Some(LockDir::from_private(
                ns.private_subdir(LOCKS_DIR)?,
                ns.euid(),
            )?)),
        }
    }

    fn from_private(sub: Namespace, euid: u32) -> Result<LockDir> {
        let fd = sub
            .dir()
            .try_clone_to_owned()
            .at("duplicate descriptor of", sub.path())?;
        Ok(LockDir {
            scope: LockScope::User,
            path: sub.path().to_path_buf(),
            fd,
            euid,
        })
    }

    /// Opens and verifies the machine directory; `created`: we just made it, so set its mode.
    fn open_machine(path: &Path, created: bool) -> Result<Option<LockDir>> {
        let unsafe_dir = |reason: String| Error::UnsafeNamespace {
            path: path.to_path_buf(),
            reason: format!("{reason} (machine lock directory, see `cleanroom::lock`)"),
        };
        let before = match rustix::fs::lstat(path) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(Error::io("inspect machine lock directory", path, e)),
        };
        check_shared_dir(&before).map_err(unsafe_dir)?;
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .at("open machine lock directory", path)?;
        let mut after = rustix::fs::fstat(&fd).at("inspect machine lock directory", path)?;
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) {
            return Err(unsafe_dir("it was replaced while being opened".into()));
        }
        let euid = rustix::process::geteuid().as_raw();
        if created && after.st_uid == euid {
            // mkdir's mode was cut by the umask; a shared directory must be exactly 1777.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o1777))
                .at("set the mode of machine lock directory", path)?;
            after = rustix::fs::fstat(&fd).at("inspect machine lock directory", path)?;
        }
        check_shared_dir(&after).map_err(unsafe_dir)?;
        Ok(Some(LockDir {
            scope: LockScope::Machine,
            path: path.to_path_buf(),
            fd,
            euid,
        }))
    }

    /// Opens `NAME.lock` read-only (flock needs no more), creating it if missing. Never
    /// truncates; `O_CREAT` is used only with `O_EXCL`, so an existing file of another user in
    /// a sticky directory (refused by `fs.protected_regular`) is simply opened.
    fn open_lock_file(&self, name: &str) -> Result<File> {
        let file_name = lock_name(name);
        let path = || self.path.join(&file_name);
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let mode = self.scope.shared_file_mode();
        let fd = loop {
            match rustix::fs::openat(&self.fd, &file_name, flags, Mode::empty()) {
                Ok(fd) => break fd,
                Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(Error::io("open lock file", path(), e)),
            }
            match rustix::fs::openat(
                &self.fd,
                &file_name,
                flags | OFlags::CREATE | OFlags::EXCL,
                mode,
            ) {
                Ok(fd) => {
                    rustix::fs::fchmod(&fd, mode).at("set the mode of lock file", path())?;
                    break fd;
                }
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(Error::io("create lock file", path(), e)),
            }
        };
        let st = rustix::fs::fstat(&fd).at("inspect lock file", path())?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Error::io(
                "use lock file",
                path(),
                std::io::Error::other("it is not a regular file"),
            ));
        }
        Ok(File::from(fd))
    }

    /// Writes `contents` to a fresh temporary file of `mode` and renames it to `file_name`,
    /// optionally holding `flock(LOCK_EX)` on it (owner records: proof their writer lives).
    fn publish(&self, file_name: &str, contents: &[u8], mode: Mode, hold: bool) -> Result<File> {
        let suffix = Token::random()?;
        let tmp = format!(".{file_name}.{suffix}.tmp");
        let tmp_path = self.path.join(&tmp);
        let fd = rustix::fs::openat(
            &self.fd,
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            mode,
        )
        .at("create", &tmp_path)?;
        let mut file = File::from(fd);
        let written = (|| {
            rustix::fs::fchmod(&file, mode).at("set the mode of", &tmp_path)?;
            if hold {
                file.try_lock().map_err(|e| {
                    Error::io("lock", &tmp_path, std::io::Error::other(e.to_string()))
                })?;
            }
            file.write_all(contents).at("write", &tmp_path)?;
            rustix::fs::renameat(&self.fd, &tmp, &self.fd, file_name)
                .at("publish", self.path.join(file_name))
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        }
        written.map(|()| file)
    }

    /// Whether `token` lets this process join `name`: the live holder has our euid and its
    /// private token file holds exactly this token.
    fn may_join(&self, name: &str, token: &Token) -> Result<bool> {
        let live_holder = self
            .records(Some(name))?
            .iter()
            .any(|info| info.writer_alive && info.record.euid == self.euid);
        Ok(live_holder && self.read_token(name).is_some_and(|t| t.matches(token)))
    }

    /// Reads our uid's token file for `name`, if it is a private regular file of ours.
    fn read_token(&self, name: &str) -> Option<Token> {
        let fd = rustix::fs::openat(
            &self.fd,
            token_name(name, self.euid),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        let private_file = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
            && st.st_uid == self.euid
            && st.st_mode & 0o077 == 0;
        if !private_file {
            return None;
        }
        let mut text = String::new();
        File::from(fd).take(64).read_to_string(&mut text).ok()?;
        Token::parse(text.trim_end_matches('\n'))
    }

    /// "held by run X (...)" for the live holder of `name`, or what can be said without one.
    fn describe_holder(&self, name: &str) -> Result<String> {
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
    fn records(&self, only: Option<&str>) -> Result<Vec<LockInfo>> {
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
        let not_dead =
            here.is_none_or(|here| record.owner.liveness(&record.host, here) != Liveness::Dead);
        Some(LockInfo {
            writer_alive: held_open && not_dead,
            record,
        })
    }
}

fn check_machine_path(path: &Path) -> Result<()> {
    if path.is_absolute() {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "the machine lock directory must be an absolute path, not {} (set by {MACHINE_DIR_ENV}?)",
            path.display()
        )))
    }
}

/// Checks that a machine lock directory is a real directory that others cannot empty.
fn check_shared_dir(st: &rustix::fs::Stat) -> Result<(), String> {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => {}
        FileType::Symlink => return Err("it is a symbolic link".into()),
        _ => return Err("it is not a directory".into()),
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(format!(
            "its mode is {mode:04o}: writable by others without the sticky bit, so anyone could \
             delete or replace lock files (chmod 1777)"
        ));
    }
    Ok(())
}

/// Escapes control characters: records in the machine directory come from other users.
fn shown(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_debug().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

fn shown_command(command: &[String]) -> String {
    let mut text = shown(&command.join(" "));
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
    fn capabilities_round_trip_and_malformed_entries_are_dropped() {
        let good = "user:db:00112233445566778899aabbccddeeff,\
                    machine:port-8080:ffeeddccbbaa99887766554433221100";
        let caps = Capabilities::parse(good);
        assert!(caps.get(LockScope::User, "db").is_some());
        assert!(caps.get(LockScope::Machine, "port-8080").is_some());
        assert!(caps.get(LockScope::User, "port-8080").is_none());
        assert_eq!(caps.to_string(), good);
        let bad = [
            "",
            "db:00112233445566778899aabbccddeeff",
            "user:db:00112233445566778899AABBCCDDEEFF",
            "user:db:00112233445566778899aabbccddee",
            "user:db:00112233445566778899aabbccddeeff00",
            "user:.db:00112233445566778899aabbccddeeff",
            "user:d/b:00112233445566778899aabbccddeeff",
            "group:db:00112233445566778899aabbccddeeff",
            "user:db:0011223344556677889zaabbccddeeff",
            "user:db:",
        ];
        for entry in bad {
            assert_eq!(
                Capabilities::parse(entry),
                Capabilities::default(),
                "{entry}"
            );
        }
        let mixed = Capabilities::parse(&format!("garbage,{good},user:x:zz"));
        assert_eq!(mixed.to_string(), good);
    }

    #[test]
    fn tokens_compare_exactly_and_never_show_in_debug() {
        let a = Token::parse("00112233445566778899aabbccddeeff").unwrap();
        let b = Token::parse("00112233445566778899aabbccddeefe").unwrap();
        assert!(a.matches(&a));
        assert!(!a.matches(&b));
        // Two bytes off by the same bits: differences must add up, never cancel out.
        let c = Token::parse("01102233445566778899aabbccddeeff").unwrap();
        assert!(!a.matches(&c) && !c.matches(&a));
        assert_eq!(format!("{a:?}"), "Token(..)");
        assert!(!format!(
            "{:?}",
            Capabilities::parse("user:db:00112233445566778899aabbccddeeff")
        )
        .contains("0011"));
    }

    #[test]
    fn shown_text_escapes_control_characters() {
        assert_eq!(shown("a\x1b[2Jb\n"), "a\\u{1b}[2Jb\\n");
        let long = vec!["x".repeat(300)];
        assert_eq!(shown_command(&long).chars().count(), MAX_SHOWN_COMMAND + 1);
    }
}
