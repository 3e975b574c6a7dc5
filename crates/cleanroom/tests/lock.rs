//! Exclusive-run locks, driven through the library against real processes and real files.
//!
//! Holders that must be real processes (to be SIGKILLed, to present an inherited token through
//! their environment, to overlap or not) are this test binary run again on the single test
//! `helper_child_process`, an ignored test (it is no test of its own: not counted as a pass) that
//! fails when run without its `HELPER_ROLE`. Each test owns a private
//! namespace in a temporary directory, and machine-scope tests point the machine lock directory
//! into it, so nothing outside is touched and nothing is left behind.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use cleanroom::lock::{
    self, Capabilities, HeldLocks, LockEnv, LockOwner, LockRequest, LockRole, LockScope,
    MACHINE_DIR_ENV, TOKENS_ENV,
};
use cleanroom::{Error, Namespace};

const SUITE: &str = "suite";

/// How long a helper's line or a waiter's result may take before the test says so: a hang
/// guard, never a measurement (the machine may be loaded).
const PATIENCE: Duration = Duration::from_secs(60);

/// A private namespace (and machine lock directory) for one test.
struct Place {
    tmp: tempfile::TempDir,
    ns: Namespace,
}

impl Place {
    fn new() -> Place {
        let tmp = tempfile::tempdir().unwrap();
        let ns = Namespace::open_or_create(&tmp.path().join("ns")).unwrap();
        Place { tmp, ns }
    }

    fn machine_dir(&self) -> PathBuf {
        self.tmp.path().join("machine-locks")
    }

    fn env(&self, inherited: Capabilities) -> LockEnv {
        LockEnv {
            inherited,
            machine_dir: self.machine_dir(),
            user_dir: None,
        }
    }

    /// Takes `names` in this process, as a run whose command is `["in-process", tag]`.
    /// The user-scope lock `SUITE`, held (no timeout, no inherited capabilities).
    fn hold_suite(&self) -> HeldLocks {
        self.acquire(&[SUITE], LockScope::User, None, Capabilities::default())
            .unwrap()
    }

    /// One attempt at the user-scope lock `SUITE`, without waiting.
    fn try_suite_now(&self) -> cleanroom::Result<HeldLocks> {
        self.acquire(
            &[SUITE],
            LockScope::User,
            Some(Duration::ZERO),
            Capabilities::default(),
        )
    }

    fn acquire(
        &self,
        names: &[&str],
        scope: LockScope,
        timeout: Option<Duration>,
        inherited: Capabilities,
    ) -> cleanroom::Result<HeldLocks> {
        lock::acquire_in(
            &self.ns,
            &request(names, scope, timeout),
            &owner("in-process"),
            &self.env(inherited),
            &mut |_| {},
        )
    }

    fn user_lock_files(&self) -> Vec<String> {
        file_names(&self.ns.path().join("locks"))
    }

    /// Asserts that nothing but lock files is left in the lock directories.
    fn assert_only_lock_files_remain(&self) {
        for dir in [self.ns.path().join("locks"), self.machine_dir()] {
            for name in file_names(&dir) {
                assert!(name.ends_with(".lock"), "{name} left in {}", dir.display());
            }
        }
    }
}

fn request(names: &[&str], scope: LockScope, timeout: Option<Duration>) -> LockRequest {
    LockRequest {
        names: names.iter().map(|n| n.to_string()).collect(),
        scope,
        timeout,
    }
}

fn owner(tag: &str) -> LockOwner {
    LockOwner {
        run_id: cleanroom::root::new_run_id().unwrap(),
        command: vec![tag.to_string(), "--flag".to_string()],
    }
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn roles(held: &HeldLocks) -> Vec<(String, LockRole)> {
    held.roles().map(|(_, n, r)| (n.to_string(), r)).collect()
}

fn tokens_of(held: &HeldLocks) -> String {
    let env = held.child_env();
    assert_eq!(env.len(), 1);
    assert_eq!(env[0].0, TOKENS_ENV);
    env[0].1.clone()
}

// ---------------------------------------------------------------------------------------------
// The helper child process.

/// Not a test: the body of the helper processes the other tests start. It takes `HELPER_NAMES`
/// in `HELPER_SCOPE` (default user) of the namespace `HELPER_NS` through [`lock::acquire`], which
/// reads the tokens and the machine lock directory from the environment. Roles:
/// - `hold`: print `HELD <role>` and `TOKENS <child env>`, keep the locks
///   until stdin is closed;
/// - `stamp`: append `start <pid>` to `HELPER_FILE`, hold for
///   `HELPER_HOLD_MS` or until `HELPER_PEERS` starts are in the file, append `end <pid>`.
///
/// Every role prints `NOTICE <text>` for each waiting notice and `ERROR <error>` (exit 3) when
/// it cannot take its locks.
#[test]
#[ignore = "the body of the helper processes the other tests start (needs HELPER_ROLE)"]
fn helper_child_process() {
    let role = std::env::var("HELPER_ROLE")
        .expect("HELPER_ROLE: this is the helper process of the other tests, not a test");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let ns = Namespace::open(Path::new(&var("HELPER_NS"))).unwrap();
    let timeout = var("HELPER_TIMEOUT_MS")
        .parse()
        .ok()
        .map(Duration::from_millis);
    let names: Vec<&str> = var("HELPER_NAMES").leak().split(',').collect();
    let scope = var("HELPER_SCOPE").parse().unwrap_or(LockScope::User);
    let req = request(&names, scope, timeout);
    let run = owner(&format!("helper-{role}"));
    let mut notify = |text: &str| println!("NOTICE {text}");
    // `acquire` reads CLEANROOM_LOCK_TOKENS from this process's environment, as a nested
    // `cleanroom run` does.
    let held = match lock::acquire(&ns, &req, &run, &mut notify) {
        Ok(held) => held,
        Err(e) => {
            println!("ERROR {e}");
            std::process::exit(3);
        }
    };
    match role.as_str() {
        "hold" => {
            let role = match held.roles().next() {
                Some((_, _, LockRole::Member)) => "member",
                _ => "holder",
            };
            println!("HELD {role}");
            println!("TOKENS {}", tokens_of(&held));
            std::io::stdout().flush().unwrap();
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        }
        "stamp" => {
            let path = var("HELPER_FILE");
            let append = |line: String| {
                let mut file = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&path)
                    .unwrap();
                file.write_all(line.as_bytes()).unwrap();
            };
            let pid = std::process::id();
            append(format!("start {pid}\n"));
            if let Ok(peers) = var("HELPER_PEERS").parse::<usize>() {
                let give_up = Instant::now() + Duration::from_secs(5);
                let starts = || {
                    let text = std::fs::read_to_string(&path).unwrap();
                    text.lines().filter(|l| l.starts_with("start")).count()
                };
                while starts() < peers {
                    if Instant::now() > give_up {
                        append(format!("gave-up {pid}\n"));
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            } else {
                let ms = var("HELPER_HOLD_MS").parse().unwrap_or(0);
                std::thread::sleep(Duration::from_millis(ms));
            }
            append(format!("end {pid}\n"));
        }
        other => panic!("unknown helper role {other}"),
    }
    drop(held);
}

/// A running helper process, its output lines, and its stdin (closing it releases a `hold`).
struct Helper {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Helper {
    fn spawn(place: &Place, role: &str, names: &str, vars: &[(&str, String)]) -> Helper {
        let exe = std::env::current_exe().unwrap();
        Helper::spawn_as(&[], &exe, place.ns.path(), role, names, vars)
    }

    /// Starts the helper `exe` (this test binary, or a copy of it) through `wrapper` (e.g.
    /// setpriv and its options) in namespace `ns`.
    fn spawn_as(
        wrapper: &[&str],
        exe: &Path,
        ns: &Path,
        role: &str,
        names: &str,
        vars: &[(&str, String)],
    ) -> Helper {
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(exe);
                cmd
            }
            None => Command::new(exe),
        };
        cmd.args([
            "helper_child_process",
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("HELPER_ROLE", role)
        .env("HELPER_NS", ns)
        .env("HELPER_NAMES", names)
        .env_remove(TOKENS_ENV)
        .env_remove(MACHINE_DIR_ENV)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        // Both streams feed `lines`, so a helper's panic shows in the failing test's message.
        let (tx, lines) = mpsc::channel();
        let outputs: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for output in outputs {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(output).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Helper {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a line with `prefix` and a space, and returns what follows them.
    fn expect(&mut self, prefix: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    // libtest may print "test helper_child_process ... " before the first line.
                    if let Some((_, rest)) = line.split_once(&format!("{prefix} ")) {
                        return rest.to_string();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no {prefix:?} line within {within:?}; saw {:?}", self.seen)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "helper ended without a {prefix:?} line; saw {:?}",
                        self.seen
                    )
                }
            }
        }
    }

    /// Closes stdin (a `hold` releases and exits) and waits for the exit.
    fn finish(&mut self) -> ExitStatus {
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "helper {} did not exit",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// Exclusion.

#[test]
fn runs_with_the_same_name_never_overlap() {
    let place = Place::new();
    let stamps = place.tmp.path().join("stamps");
    let vars = [
        ("HELPER_FILE", stamps.display().to_string()),
        ("HELPER_HOLD_MS", "60".to_string()),
        ("HELPER_TIMEOUT_MS", "10000".to_string()),
    ];
    let mut helpers: Vec<Helper> = (0..4)
        .map(|_| Helper::spawn(&place, "stamp", SUITE, &vars))
        .collect();
    for helper in &mut helpers {
        assert!(helper.finish().success(), "{:?}", helper.seen);
    }
    let text = std::fs::read_to_string(&stamps).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("start ").expect(&text);
        let end = pair[1].strip_prefix("end ").expect(&text);
        assert_eq!(start, end, "another run started inside this one:\n{text}");
    }
    place.assert_only_lock_files_remain();
}

#[test]
fn runs_with_different_names_overlap_freely() {
    let place = Place::new();
    let stamps = place.tmp.path().join("stamps");
    let vars = [
        ("HELPER_FILE", stamps.display().to_string()),
        ("HELPER_PEERS", "2".to_string()),
        ("HELPER_TIMEOUT_MS", "5000".to_string()),
    ];
    let mut a = Helper::spawn(&place, "stamp", "alpha", &vars);
    let mut b = Helper::spawn(&place, "stamp", "beta", &vars);
    assert!(a.finish().success(), "{:?}", a.seen);
    assert!(b.finish().success(), "{:?}", b.seen);
    let text = std::fs::read_to_string(&stamps).unwrap();
    let kinds: Vec<&str> = text.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(kinds, ["start", "start", "end", "end"], "{text}");
    place.assert_only_lock_files_remain();
}

#[test]
fn requests_for_the_same_names_in_opposite_orders_do_not_deadlock() {
    let place = Place::new();
    std::thread::scope(|s| {
        for names in [["a", "b"], ["b", "a"]] {
            let place = &place;
            s.spawn(move || {
                for _ in 0..25 {
                    let timeout = Some(Duration::from_secs(5));
                    let held = place
                        .acquire(&names, LockScope::User, timeout, Capabilities::default())
                        .unwrap();
                    let taken: Vec<String> = roles(&held).into_iter().map(|r| r.0).collect();
                    assert_eq!(taken, ["a", "b"]);
                }
            });
        }
    });
    place.assert_only_lock_files_remain();
}

// ---------------------------------------------------------------------------------------------
// Crashed holders, waiting and timeouts.

#[test]
fn a_sigkilled_holders_lock_is_taken_by_the_waiter_at_once() {
    let place = Place::new();
    let mut holder = Helper::spawn(&place, "hold", SUITE, &[]);
    holder.expect("HELD", PATIENCE);
    let (notices_tx, notices) = mpsc::channel();
    let (done_tx, done) = mpsc::channel();
    std::thread::scope(|s| {
        let place = &place;
        s.spawn(move || {
            let mut notify = |text: &str| notices_tx.send(text.to_string()).unwrap();
            // No timeout: the default waits forever.
            let held = lock::acquire_in(
                &place.ns,
                &request(&[SUITE], LockScope::User, None),
                &owner("waiter"),
                &place.env(Capabilities::default()),
                &mut notify,
            );
            done_tx.send(held).unwrap();
        });
        let notice = notices.recv_timeout(PATIENCE).unwrap();
        assert!(
            notice.contains(&format!("pid {}", holder.pid())) && notice.contains("helper-hold"),
            "the first notice must name the holder: {notice}"
        );
        assert!(
            notice.starts_with("waiting for lock suite, held by run "),
            "{notice}"
        );
        // The holder would hold the lock as long as its stdin is open (for ever): a waiter with
        // no timeout that gets the lock got it from the holder's death.
        holder.child.kill().unwrap();
        let held = done.recv_timeout(PATIENCE).unwrap().unwrap();
        assert_eq!(roles(&held), [(SUITE.to_string(), LockRole::Holder)]);
        let infos = lock::list_in(&place.ns, &place.env(Capabilities::default())).unwrap();
        assert_eq!(infos.len(), 1, "{infos:?}");
        assert!(infos[0].writer_alive);
        assert_eq!(infos[0].record.owner.pid, std::process::id());
        assert_eq!(infos[0].record.command[0], "waiter");
    });
    holder.child.wait().unwrap();
    place.assert_only_lock_files_remain();
}

#[test]
fn a_lock_timeout_names_the_holders_pid_and_command() {
    let place = Place::new();
    let mut holder = Helper::spawn(&place, "hold", SUITE, &[]);
    holder.expect("HELD", PATIENCE);
    let started = Instant::now();
    let timeout = Duration::from_millis(300);
    let err = place
        .acquire(
            &[SUITE],
            LockScope::User,
            Some(timeout),
            Capabilities::default(),
        )
        .unwrap_err();
    let waited = started.elapsed();
    assert!(
        waited >= timeout,
        "gave up after {waited:?}, before its {timeout:?}"
    );
    assert!(
        matches!(&err, Error::LockTimeout { name, .. } if name == SUITE),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&format!("pid {}", holder.pid())),
        "{message}"
    );
    assert!(message.contains("command helper-hold --flag"), "{message}");
    assert!(message.starts_with("timed out waiting for lock \"suite\": held by run "));

    assert!(holder.finish().success());
    let held = place.try_suite_now().unwrap();
    drop(held);
    place.assert_only_lock_files_remain();
}

#[test]
fn a_stale_owner_record_is_described_as_dead_and_never_trusted() {
    let place = Place::new();
    let mut holder = Helper::spawn(&place, "hold", SUITE, &[]);
    holder.expect("HELD", PATIENCE);
    let tokens = holder.expect("TOKENS", PATIENCE);
    holder.child.kill().unwrap();
    holder.child.wait().unwrap();

    let infos = lock::list_in(&place.ns, &place.env(Capabilities::default())).unwrap();
    assert_eq!(infos.len(), 1, "{infos:?}");
    assert!(!infos[0].writer_alive);
    assert_eq!(infos[0].record.owner.pid, holder.pid());
    let described = infos[0].describe();
    assert!(described.contains("no longer running"), "{described}");
    assert!(
        described.contains(&format!("pid {}", holder.pid())),
        "{described}"
    );

    // The dead holder's token buys nothing: the lock is free, so this run simply holds it.
    let held = place
        .acquire(
            &[SUITE],
            LockScope::User,
            Some(Duration::ZERO),
            Capabilities::parse(&tokens),
        )
        .unwrap();
    assert_eq!(roles(&held), [(SUITE.to_string(), LockRole::Holder)]);
    assert_ne!(tokens_of(&held), tokens);
    let infos = lock::list_in(&place.ns, &place.env(Capabilities::default())).unwrap();
    assert_eq!(infos.len(), 1);
    assert!(infos[0].writer_alive);
    assert_eq!(infos[0].record.owner.pid, std::process::id());
    drop(held);
    place.assert_only_lock_files_remain();
}

// ---------------------------------------------------------------------------------------------
// Nested runs.

#[test]
fn a_nested_run_with_the_inherited_token_joins_as_a_member() {
    let place = Place::new();
    let outer = place.hold_suite();
    let inherited = tokens_of(&outer);
    let vars = [
        (TOKENS_ENV, inherited.clone()),
        ("HELPER_TIMEOUT_MS", "5000".to_string()),
    ];
    // "member", not "holder": it joined; a waiter would have reported its timeout instead.
    let mut nested = Helper::spawn(&place, "hold", SUITE, &vars);
    assert_eq!(nested.expect("HELD", PATIENCE), "member");
    // It passes the capability on, so a run nested in it joins too.
    assert_eq!(nested.expect("TOKENS", PATIENCE), inherited);
    assert!(nested.finish().success());

    // The member's exit released nothing: the outer run still holds the lock.
    let err = place.try_suite_now().unwrap_err();
    assert!(
        err.to_string().contains("command in-process --flag"),
        "{err}"
    );
    drop(outer);
    place.assert_only_lock_files_remain();
}

#[test]
fn forged_malformed_or_misdirected_tokens_never_join() {
    let place = Place::new();
    let outer = place
        .acquire(
            &[SUITE, "other"],
            LockScope::User,
            None,
            Capabilities::default(),
        )
        .unwrap();
    let real = tokens_of(&outer);
    let suite_token = real
        .split(',')
        .find_map(|e| e.strip_prefix("user:suite:"))
        .unwrap()
        .to_string();
    let mut forged_token = suite_token.clone().into_bytes();
    forged_token[31] = if forged_token[31] == b'0' { b'1' } else { b'0' };
    let forged_token = String::from_utf8(forged_token).unwrap();
    let presented = [
        format!("user:suite:{forged_token}"),
        format!("user:suite:{}", suite_token.to_uppercase()),
        format!("user:suite:{}", &suite_token[..30]),
        format!("machine:suite:{suite_token}"),
        "user:suite:".to_string(),
        format!("suite:{suite_token}"),
    ];
    let mut helpers: Vec<Helper> = presented
        .iter()
        .map(|tokens| {
            let vars = [
                (TOKENS_ENV, tokens.clone()),
                ("HELPER_TIMEOUT_MS", "300".to_string()),
            ];
            Helper::spawn(&place, "hold", SUITE, &vars)
        })
        .collect();
    for (helper, tokens) in helpers.iter_mut().zip(&presented) {
        let error = helper.expect("ERROR", PATIENCE);
        assert!(
            error.starts_with("timed out waiting for lock \"suite\""),
            "{tokens}: {error}"
        );
        assert_eq!(helper.finish().code(), Some(3), "{tokens}");
    }
    // The same token for another lock name does not open this one either (in-process check).
    let other_token = real
        .split(',')
        .find_map(|e| e.strip_prefix("user:other:"))
        .unwrap();
    let misdirected = Capabilities::parse(&format!("user:suite:{other_token}"));
    let err = place
        .acquire(&[SUITE], LockScope::User, Some(Duration::ZERO), misdirected)
        .unwrap_err();
    assert!(matches!(err, Error::LockTimeout { .. }), "{err}");
    drop(outer);
    place.assert_only_lock_files_remain();
}

#[test]
fn only_the_original_holder_releases() {
    let place = Place::new();
    let outer = place.hold_suite();
    let inherited = Capabilities::parse(&tokens_of(&outer));
    let member = place
        .acquire(&[SUITE], LockScope::User, Some(Duration::ZERO), inherited)
        .unwrap();
    assert_eq!(roles(&member), [(SUITE.to_string(), LockRole::Member)]);
    drop(member);
    let still = lock::list_in(&place.ns, &place.env(Capabilities::default())).unwrap();
    assert!(still.len() == 1 && still[0].writer_alive, "{still:?}");
    assert!(place
        .acquire(
            &[SUITE],
            LockScope::User,
            Some(Duration::ZERO),
            Capabilities::default()
        )
        .is_err());
    drop(outer);
    assert!(
        lock::list_in(&place.ns, &place.env(Capabilities::default()))
            .unwrap()
            .is_empty()
    );
    let again = place.try_suite_now().unwrap();
    assert_eq!(roles(&again), [(SUITE.to_string(), LockRole::Holder)]);
}

// ---------------------------------------------------------------------------------------------
// Files, scopes and names.

#[test]
fn a_held_lock_has_a_private_record_and_token_and_release_leaves_only_the_lock_file() {
    let place = Place::new();
    let held = place.hold_suite();
    let uid = place.ns.euid();
    let dir = place.ns.path().join("locks");
    assert_eq!(mode_of(&dir), 0o700);
    assert_eq!(
        place.user_lock_files(),
        [
            "suite.lock".to_string(),
            format!("suite.owner.{uid}.json"),
            format!("suite.token.{uid}"),
        ]
    );
    for name in place.user_lock_files() {
        assert_eq!(mode_of(&dir.join(&name)), 0o600, "{name}");
    }
    let record = std::fs::read_to_string(dir.join(format!("suite.owner.{uid}.json"))).unwrap();
    let token = tokens_of(&held).rsplit(':').next().unwrap().to_string();
    assert!(
        !record.contains(&token),
        "the record must not carry the token"
    );
    // `list` (the process's own environment) finds it too, whatever the machine directory holds.
    let listed = lock::list(&place.ns).unwrap();
    assert_eq!(
        listed
            .iter()
            .filter(|info| info.record.scope == LockScope::User)
            .count(),
        1
    );
    drop(held);
    assert_eq!(place.user_lock_files(), ["suite.lock"]);
}

#[test]
fn machine_locks_live_in_a_sticky_shared_directory_with_readable_records() {
    let place = Place::new();
    let machine = place.machine_dir();
    let held = place
        .acquire(&[SUITE], LockScope::Machine, None, Capabilities::default())
        .unwrap();
    let uid = place.ns.euid();
    assert_eq!(mode_of(&machine), 0o1777);
    assert_eq!(mode_of(&machine.join("suite.lock")), 0o644);
    assert_eq!(
        mode_of(&machine.join(format!("suite.owner.{uid}.json"))),
        0o644
    );
    assert_eq!(mode_of(&machine.join(format!("suite.token.{uid}"))), 0o600);
    let inherited = tokens_of(&held);
    assert!(inherited.starts_with("machine:suite:"));
    let member = place
        .acquire(
            &[SUITE],
            LockScope::Machine,
            Some(Duration::ZERO),
            Capabilities::parse(&inherited),
        )
        .unwrap();
    assert_eq!(roles(&member), [(SUITE.to_string(), LockRole::Member)]);
    drop(member);

    // A user lock of the same name is another lock.
    let user = place.try_suite_now().unwrap();
    let err = place
        .acquire(
            &[SUITE],
            LockScope::Machine,
            Some(Duration::ZERO),
            Capabilities::default(),
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    let listed = lock::list_in(&place.ns, &place.env(Capabilities::default())).unwrap();
    let scopes: Vec<LockScope> = listed.iter().map(|i| i.record.scope).collect();
    assert_eq!(scopes, [LockScope::User, LockScope::Machine]);
    drop((held, user));
    assert_eq!(file_names(&machine), ["suite.lock"]);
    place.assert_only_lock_files_remain();
}

const NOBODY: u32 = 65534;
const AS_NOBODY: [&str; 4] = [
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

/// Machine locks are shared between users. Run as root (as CI does), a helper dropped to uid
/// 65534 waits for root's lock and names its holder, cannot join with root's token, and, once
/// root releases, locks the root-created lock file itself while root waits for it. The helper
/// is this test binary, copied where uid 65534 can run it when the checkout is out of its reach.
#[test]
fn machine_locks_are_shared_between_users() {
    let place = Place::new();
    assert_eq!(place.ns.euid(), 0, "needs root (CI runs as root)");
    let exe = support::RunnableByNobody::new(&std::env::current_exe().unwrap());
    let exe = exe.path();
    let can_run = Command::new(AS_NOBODY[0])
        .args(&AS_NOBODY[1..])
        .args(["test", "-x"])
        .arg(exe)
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        can_run,
        "needs setpriv, and uid {NOBODY} must be able to run {}",
        exe.display()
    );
    std::fs::set_permissions(place.tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let nobody_ns = place.tmp.path().join("ns-nobody");
    std::fs::create_dir(&nobody_ns).unwrap();
    std::fs::set_permissions(&nobody_ns, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&nobody_ns, Some(NOBODY), Some(NOBODY)).unwrap();
    let machine = place.machine_dir();
    let vars = |timeout_ms: &str, tokens: &str| {
        vec![
            ("HELPER_SCOPE", "machine".to_string()),
            (MACHINE_DIR_ENV, machine.display().to_string()),
            ("HELPER_TIMEOUT_MS", timeout_ms.to_string()),
            (TOKENS_ENV, tokens.to_string()),
        ]
    };

    let held = place
        .acquire(&[SUITE], LockScope::Machine, None, Capabilities::default())
        .unwrap();
    let root_tokens = tokens_of(&held);
    let mut waiter = Helper::spawn_as(
        &AS_NOBODY,
        exe,
        &nobody_ns,
        "hold",
        SUITE,
        &vars("300", &root_tokens),
    );
    let error = waiter.expect("ERROR", PATIENCE);
    assert!(
        error.contains(&format!("pid {}", std::process::id())),
        "{error}"
    );
    assert!(error.contains("command in-process --flag"), "{error}");
    assert_eq!(waiter.finish().code(), Some(3));
    drop(held);

    let mut holder = Helper::spawn_as(
        &AS_NOBODY,
        exe,
        &nobody_ns,
        "hold",
        SUITE,
        &vars("5000", ""),
    );
    assert_eq!(holder.expect("HELD", PATIENCE), "holder");
    let record = machine.join(format!("suite.owner.{NOBODY}.json"));
    let meta = std::fs::symlink_metadata(&record).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (NOBODY, 0o644));
    let err = place
        .acquire(
            &[SUITE],
            LockScope::Machine,
            Some(Duration::ZERO),
            Capabilities::default(),
        )
        .unwrap_err();
    assert!(
        err.to_string().contains(&format!("pid {}", holder.pid())),
        "{err}"
    );
    assert!(
        err.to_string().contains("command helper-hold --flag"),
        "{err}"
    );
    assert!(holder.finish().success());
    assert_eq!(file_names(&machine), ["suite.lock"]);
}

#[test]
fn unsafe_machine_lock_directories_are_refused() {
    let place = Place::new();
    let try_dir = |dir: PathBuf| {
        lock::acquire_in(
            &place.ns,
            &request(&[SUITE], LockScope::Machine, Some(Duration::ZERO)),
            &owner("in-process"),
            &LockEnv {
                inherited: Capabilities::default(),
                machine_dir: dir,
                user_dir: None,
            },
            &mut |_| {},
        )
    };
    let real = place.tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let link = place.tmp.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let err = try_dir(link).unwrap_err().to_string();
    assert!(err.contains("symbolic link"), "{err}");

    let open = place.tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = try_dir(open.clone()).unwrap_err().to_string();
    assert!(err.contains("without the sticky bit"), "{err}");
    assert!(
        file_names(&open).is_empty(),
        "nothing may be created in a refused directory"
    );

    let file = place.tmp.path().join("file");
    std::fs::write(&file, b"").unwrap();
    assert!(try_dir(file)
        .unwrap_err()
        .to_string()
        .contains("not a directory"));
    let relative = try_dir(PathBuf::from("relative/locks")).unwrap_err();
    assert!(matches!(relative, Error::Invalid(_)), "{relative}");

    // The sticky, world-writable directory itself is fine.
    drop(try_dir(real.clone()).unwrap());
    assert_eq!(file_names(&real), ["suite.lock"]);
}

#[test]
fn lock_names_are_checked() {
    let place = Place::new();
    for bad in [
        "",
        ".hidden",
        "a/b",
        "a b",
        "a:b",
        "a,b",
        "é",
        &"x".repeat(65),
    ] {
        let err = place
            .acquire(
                &[bad],
                LockScope::User,
                Some(Duration::ZERO),
                Capabilities::default(),
            )
            .unwrap_err();
        assert!(
            matches!(&err, Error::Invalid(m) if m.contains("invalid lock name")),
            "{bad:?}"
        );
    }
    for good in ["db", "port-8080", "a.b_c", &"x".repeat(64)] {
        lock::check_name(good).unwrap();
    }
    assert!("user".parse::<LockScope>().is_ok() && "host".parse::<LockScope>().is_err());
    assert!(
        place.user_lock_files().is_empty(),
        "a refused name creates nothing"
    );
}

#[test]
fn an_owner_record_up_to_64_kib_names_its_holder_and_a_larger_one_is_ignored() {
    let place = Place::new();
    let env = place.env(Capabilities::default());
    let take = |command_len: usize| {
        let owner = LockOwner {
            run_id: cleanroom::root::new_run_id().unwrap(),
            command: vec!["x".repeat(command_len)],
        };
        let request = request(&[SUITE], LockScope::User, None);
        lock::acquire_in(&place.ns, &request, &owner, &env, &mut |_| {}).unwrap()
    };
    let record = place
        .ns
        .path()
        .join(format!("locks/{SUITE}.owner.{}.json", place.ns.euid()));
    // The record grows byte for byte with the command: size it to exactly 64 KiB, then one more.
    let probe = take(0);
    let base = std::fs::metadata(&record).unwrap().len() as usize;
    drop(probe);
    for (extra, listed) in [(0, true), (1, false)] {
        let held = take(64 * 1024 - base + extra);
        assert_eq!(
            std::fs::metadata(&record).unwrap().len() as usize,
            64 * 1024 + extra
        );
        let infos = lock::list_in(&place.ns, &env).unwrap();
        assert_eq!(infos.len(), usize::from(listed), "{extra} bytes over");
        assert!(infos.iter().all(|info| info.writer_alive));
        drop(held);
    }
}

#[test]
fn a_waiter_is_told_once_per_notice_interval_whom_it_waits_for() {
    let place = Place::new();
    let held = place.hold_suite();
    let mut notices = Vec::new();
    let err = lock::acquire_in(
        &place.ns,
        &request(&[SUITE], LockScope::User, Some(Duration::from_millis(400))),
        &owner("waiter"),
        &place.env(Capabilities::default()),
        &mut |text| notices.push(text.to_string()),
    )
    .unwrap_err();
    assert!(matches!(err, Error::LockTimeout { .. }), "{err}");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].starts_with("waiting for lock suite, held by run "));
    drop(held);
}

#[test]
fn an_existing_machine_directory_is_judged_by_its_mode_and_never_chmodded() {
    let place = Place::new();
    for (i, (mode, accepted)) in [
        (0o755, true),
        (0o700, true),
        (0o1770, true),
        (0o775, false),
        (0o757, false),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = place.tmp.path().join(format!("machine-{i}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let env = LockEnv {
            inherited: Capabilities::default(),
            machine_dir: dir.clone(),
            user_dir: None,
        };
        let request = request(&[SUITE], LockScope::Machine, Some(Duration::ZERO));
        let taken = lock::acquire_in(&place.ns, &request, &owner("in-process"), &env, &mut |_| {});
        match taken {
            Ok(held) => assert!(accepted, "{mode:04o} was accepted: {held:?}"),
            Err(e) => {
                assert!(!accepted, "{mode:04o}: {e}");
                assert!(e.to_string().contains("without the sticky bit"), "{e}");
            }
        }
        assert_eq!(
            mode_of(&dir),
            mode,
            "the mode of an existing directory changed"
        );
    }
}

#[test]
fn forged_owner_records_are_never_listed() {
    let place = Place::new();
    let held = place.hold_suite();
    let uid = place.ns.euid();
    let dir = place.ns.path().join("locks");
    let real: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join(format!("{SUITE}.owner.{uid}.json"))).unwrap(),
    )
    .unwrap();
    // A copy of the live record for lock `name`, with one field changed.
    let forged = |name: &str, field: &str, value: serde_json::Value| {
        let mut record = real.clone();
        record["name"] = name.into();
        record[field] = value;
        serde_json::to_vec(&record).unwrap()
    };
    let write = |file: &str, bytes: &[u8]| std::fs::write(dir.join(file), bytes).unwrap();
    write(
        &format!("format.owner.{uid}.json"),
        &forged("format", "format", "other".into()),
    );
    write(
        &format!("version.owner.{uid}.json"),
        &forged("version", "version", 2.into()),
    );
    write(
        &format!("scope.owner.{uid}.json"),
        &forged("scope", "scope", "machine".into()),
    );
    write(
        &format!("euid.owner.{uid}.json"),
        &forged("euid", "euid", (uid + 1).into()),
    );
    write(
        &format!("named.owner.{uid}.json"),
        &forged("other", "run_id", "x".into()),
    );
    // Well-formed, but under a file name of another uid than its owner's, or an invalid name.
    let other_uid = forged("owner", "euid", (uid + 1).into());
    write(&format!("owner.owner.{}.json", uid + 1), &other_uid);
    write(
        &format!(".hidden.owner.{uid}.json"),
        &forged(".hidden", "run_id", "x".into()),
    );
    // A symlink to a well-formed record, a FIFO (which must not block the reader), a directory.
    let elsewhere = place.tmp.path().join("elsewhere.json");
    std::fs::write(&elsewhere, forged("link", "run_id", "x".into())).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join(format!("link.owner.{uid}.json"))).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        dir.join(format!("fifo.owner.{uid}.json")),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    std::fs::create_dir(dir.join(format!("dir.owner.{uid}.json"))).unwrap();

    let listed = lock::list_in(&place.ns, &place.env(Capabilities::default())).unwrap();
    let names: Vec<&str> = listed.iter().map(|i| i.record.name.as_str()).collect();
    assert_eq!(names, [SUITE], "{listed:?}");
    drop(held);
}

#[test]
fn a_token_file_not_private_to_us_or_a_record_whose_writer_is_gone_lets_nobody_join() {
    let place = Place::new();
    let outer = place.hold_suite();
    let inherited = Capabilities::parse(&tokens_of(&outer));
    let join = || {
        place.acquire(
            &[SUITE],
            LockScope::User,
            Some(Duration::ZERO),
            inherited.clone(),
        )
    };
    drop(join().expect("the untouched token file lets the nested run join"));
    let token = place
        .ns
        .path()
        .join(format!("locks/{SUITE}.token.{}", place.ns.euid()));
    let copy = place.tmp.path().join("token-copy");
    std::fs::copy(&token, &copy).unwrap();
    let tampered: [(&str, &dyn Fn()); 4] = [
        // Each starts from the file the previous one left (the first from the real one).
        ("readable by the group", &|| {
            std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o640)).unwrap()
        }),
        ("a FIFO, which must not block the reader", &|| {
            std::fs::remove_file(&token).unwrap();
            let fifo = rustix::fs::Mode::from_raw_mode(0o600);
            rustix::fs::mknodat(rustix::fs::CWD, &token, rustix::fs::FileType::Fifo, fifo, 0)
                .unwrap();
        }),
        ("a symlink to a copy", &|| {
            std::fs::remove_file(&token).unwrap();
            std::os::unix::fs::symlink(&copy, &token).unwrap();
        }),
        ("owned by someone else", &|| {
            std::fs::remove_file(&token).unwrap();
            std::fs::copy(&copy, &token).unwrap();
            std::os::unix::fs::chown(&token, Some(place.ns.euid() + 1), None).unwrap();
        }),
    ];
    for (how, tamper) in tampered {
        if how == "owned by someone else" && !support::root_or_skip("a token file of another owner")
        {
            continue;
        }
        tamper();
        let err = join().expect_err(how);
        assert!(matches!(err, Error::LockTimeout { .. }), "{how}: {err}");
    }
    // The right token again, but the record beside it is no longer held open by its writer
    // (as a crashed holder's, while another process holds the kernel lock): not joinable.
    std::fs::remove_file(&token).unwrap();
    std::fs::copy(&copy, &token).unwrap();
    drop(join().expect("the restored token file lets the nested run join"));
    let record = place
        .ns
        .path()
        .join(format!("locks/{SUITE}.owner.{}.json", place.ns.euid()));
    let stale = place.tmp.path().join("stale-record");
    std::fs::copy(&record, &stale).unwrap();
    std::fs::rename(&stale, &record).unwrap();
    let err = join().expect_err("a stale record");
    assert!(matches!(err, Error::LockTimeout { .. }), "{err}");
    drop(outer);
}

#[test]
fn release_removes_only_the_files_it_published_and_list_creates_nothing() {
    let place = Place::new();
    let env = place.env(Capabilities::default());
    assert!(lock::list_in(&place.ns, &env).unwrap().is_empty());
    assert!(
        !place.ns.path().join("locks").exists() && !place.machine_dir().exists(),
        "list made a lock directory"
    );
    let held = place.hold_suite();
    // Someone replaced the published record and token while the lock was held: release must
    // leave what it did not write.
    let uid = place.ns.euid();
    let dir = place.ns.path().join("locks");
    for name in [
        format!("{SUITE}.owner.{uid}.json"),
        format!("{SUITE}.token.{uid}"),
    ] {
        let other = dir.join("replacement");
        std::fs::write(&other, "not the holder's").unwrap();
        std::fs::rename(&other, dir.join(&name)).unwrap();
    }
    drop(held);
    for name in [
        format!("{SUITE}.owner.{uid}.json"),
        format!("{SUITE}.token.{uid}"),
    ] {
        assert_eq!(
            std::fs::read_to_string(dir.join(&name)).unwrap(),
            "not the holder's"
        );
    }
}

#[test]
fn a_lock_file_planted_as_a_symlink_or_fifo_is_refused_and_its_target_untouched() {
    let place = Place::new();
    drop(
        place
            .acquire(&["other"], LockScope::User, None, Capabilities::default())
            .unwrap(),
    );
    let target = place.tmp.path().join("target");
    std::fs::write(&target, "precious\n").unwrap();
    let lock_file = place.ns.path().join(format!("locks/{SUITE}.lock"));
    std::os::unix::fs::symlink(&target, &lock_file).unwrap();
    let err = place.try_suite_now().unwrap_err();
    assert!(err.to_string().contains("it is a symbolic link"), "{err}");
    assert!(
        err.to_string().contains("`cleanroom gc` removes it"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n");
    std::fs::remove_file(&lock_file).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &lock_file,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let err = place.try_suite_now().unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}

/// A token file holds only the token's hash, under a format tag: one in the format of an older
/// cleanroom (the bare token) lets nobody join, not even with the right token, and the hash
/// cannot be presented as a token.
#[test]
fn a_token_file_holds_only_a_hash_and_an_older_bare_token_lets_nobody_join() {
    let place = Place::new();
    let outer = place.hold_suite();
    let caps = tokens_of(&outer);
    let token = caps.strip_prefix(&format!("user:{SUITE}:")).expect(&caps);
    let file = place
        .ns
        .path()
        .join(format!("locks/{SUITE}.token.{}", place.ns.euid()));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains(token), "{text}");
    assert!(
        text.starts_with("sha256:") && text.len() == 7 + 64 + 1,
        "{text:?}"
    );
    let join = |caps: &str| {
        place.acquire(
            &[SUITE],
            LockScope::User,
            Some(Duration::ZERO),
            Capabilities::parse(caps),
        )
    };
    drop(join(&caps).expect("the holder's token joins"));
    let hash = text.trim_end().strip_prefix("sha256:").unwrap();
    for presented in [
        format!("user:{SUITE}:{hash}"),
        format!("user:{SUITE}:{}", &hash[..32]),
    ] {
        let err = join(&presented).expect_err(&presented);
        assert!(matches!(err, Error::LockTimeout { .. }), "{err}");
    }
    // What an older holder wrote: the bare token, private to us. A run of this version waits.
    let older = place.tmp.path().join("older-token");
    std::fs::write(&older, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&older, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&older, &file).unwrap();
    let err = join(&caps).expect_err("a bare token file");
    assert!(matches!(err, Error::LockTimeout { .. }), "{err}");
}

/// `cleanroom gc` may remove a lock file while it holds it (one that is not lock state). A run
/// already waiting on that file then locks a file no longer named: it must notice and lock what
/// the name denotes, so that a third run still finds the lock taken.
#[test]
fn a_lock_file_removed_while_a_run_waits_is_never_held_by_two_runs() {
    let place = Place::new();
    drop(place.try_suite_now().unwrap());
    let lock_file = place.ns.path().join(format!("locks/{SUITE}.lock"));
    let sweeper = std::fs::File::open(&lock_file).unwrap();
    sweeper.lock().unwrap();
    let place = &place;
    std::thread::scope(|scope| {
        let (waiting_tx, waiting) = mpsc::channel();
        let waiter = scope.spawn(move || {
            lock::acquire_in(
                &place.ns,
                &request(&[SUITE], LockScope::User, Some(PATIENCE)),
                &owner("waiter"),
                &place.env(Capabilities::default()),
                &mut |_| {
                    let _ = waiting_tx.send(());
                },
            )
        });
        waiting.recv_timeout(PATIENCE).expect("the waiter waits");
        std::fs::remove_file(&lock_file).unwrap();
        drop(sweeper);
        let held = waiter.join().unwrap().expect("the waiter takes the lock");
        let err = place
            .try_suite_now()
            .expect_err("a third run while the waiter holds");
        assert!(matches!(err, Error::LockTimeout { .. }), "{err}");
        drop(held);
    });
    drop(place.try_suite_now().expect("free again"));
}
