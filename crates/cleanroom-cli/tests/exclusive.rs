//! `cleanroom run --exclusive NAME` through the real binary: runs holding the same name never
//! overlap, other names overlap freely, a crashed holder's lock is taken at once, a lock timeout
//! exits 125 naming the holder with nothing started, and a nested run joins its holder's lock
//! with the inherited capability while a forged one waits, as does one made from what the lock
//! directory holds (only the token's hash).

mod common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{send_signal, Sandbox};

/// Starts `cleanroom run [args] -- sh -c script` in the background.
fn spawn_run(sandbox: &Sandbox, run_args: &[&str], script: &str) -> Child {
    let mut args = vec!["run"];
    args.extend_from_slice(run_args);
    args.extend(["--", "sh", "-c", script]);
    sandbox
        .command(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cleanroom run")
}

/// Reads the waiter's stderr until its "waiting for lock" notice (20 s at most) and returns it;
/// the rest of its stderr is discarded.
fn waiting_notice(waiter: &mut Child) -> String {
    use std::io::BufRead;
    let stderr = waiter.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.contains("waiting for lock") {
                let _ = tx.send(Ok(line));
                return;
            }
            seen.push(line);
        }
        let _ = tx.send(Err(seen));
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(notice)) => notice,
        Ok(Err(stderr)) => panic!("the waiter ended without waiting: {stderr:?}"),
        Err(e) => panic!("the waiter never said it was waiting: {e}"),
    }
}

fn wait_for_file(path: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn runs_holding_the_same_lock_never_overlap() {
    let sandbox = Sandbox::new("excl-same");
    let log = sandbox.scratch().join("stamps");
    let script = format!(
        "echo start $$ >> {log}; sleep 0.2; echo end $$ >> {log}",
        log = log.display()
    );
    let runs: Vec<Child> = (0..4)
        .map(|_| spawn_run(&sandbox, &["--exclusive", "suite"], &script))
        .collect();
    for run in runs {
        sandbox.assert_runner_succeeds(run, Duration::from_secs(60));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("start ").expect(&text);
        let end = pair[1].strip_prefix("end ").expect(&text);
        assert_eq!(start, end, "intervals overlap:\n{text}");
    }
    sandbox.assert_namespace_holds_only(&["locks"]);
}

#[test]
fn cleanroom_exclusive_in_the_environment_names_the_locks() {
    let sandbox = Sandbox::new("excl-env");
    let held = sandbox.scratch().join("held");
    let mut holder = sandbox.command(&[
        "run",
        "--",
        "sh",
        "-c",
        &format!("touch {}; sleep 3", held.display()),
    ]);
    let holder = holder
        .env("CLEANROOM_EXCLUSIVE", "other,db")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&held);
    let waiter = sandbox.run(&["--exclusive", "db", "--lock-timeout", "300ms"], &["true"]);
    waiter.assert_status(125);
    assert!(waiter.stderr.contains("\"db\""), "{}", waiter.stderr);
    sandbox.assert_runner_succeeds(holder, Duration::from_secs(30));
    sandbox.assert_namespace_holds_only(&["locks"]);
}

#[test]
fn runs_holding_different_locks_overlap_freely() {
    let sandbox = Sandbox::new("excl-other");
    let dir = sandbox.scratch().display().to_string();
    // Each run waits (up to 10 s) for the other to have started: both succeed only if they overlap.
    let script = |me: &str, other: &str| {
        format!("touch {dir}/{me}; for i in $(seq 1 1000); do [ -e {dir}/{other} ] && exit 0; sleep 0.01; done; exit 1")
    };
    let a = spawn_run(&sandbox, &["--exclusive", "a"], &script("a", "b"));
    let b = spawn_run(&sandbox, &["--exclusive", "b"], &script("b", "a"));
    for run in [a, b] {
        sandbox.assert_runner_succeeds(run, Duration::from_secs(60));
    }
}

#[test]
fn a_lock_timeout_exits_125_naming_the_holder_and_starts_nothing() {
    let sandbox = Sandbox::new("excl-timeout");
    let held = sandbox.scratch().join("held");
    let holder = spawn_run(
        &sandbox,
        &["--exclusive", "db"],
        &format!("touch {}; sleep 3", held.display()),
    );
    wait_for_file(&held);
    let started = sandbox.scratch().join("started");
    let waiter = sandbox.run(
        &["--exclusive", "db", "--lock-timeout", "300ms"],
        &["touch", started.to_str().unwrap()],
    );
    waiter.assert_status(125);
    assert!(
        waiter.stderr.contains("timed out waiting for lock"),
        "{}",
        waiter.stderr
    );
    assert!(
        waiter.stderr.contains(&format!("pid {}", holder.id())),
        "{}",
        waiter.stderr
    );
    assert!(waiter.stderr.contains("sleep 3"), "{}", waiter.stderr);
    assert!(!started.exists(), "the waiting run's command was started");
    assert!(
        waiter.report.is_none(),
        "a run that never started wrote a report"
    );
    let out = sandbox.wait_for_runner(holder, Duration::from_secs(30));
    assert!(out.status.success());
    sandbox.assert_namespace_holds_only(&["locks"]);
}

#[test]
fn a_sigkilled_holders_lock_is_taken_by_the_waiter_at_once() {
    let sandbox = Sandbox::new("excl-crash");
    let held = sandbox.scratch().join("held");
    let holder = spawn_run(
        &sandbox,
        &["--exclusive", "db"],
        // The marker rides in the shell's own argv (`sleep 300 MARKER` would fail at once and
        // end the holder before any waiter could wait for it); what survives the runner must not
        // hold its output open.
        &format!(
            "exec >/dev/null 2>&1; touch {}; sleep 300; : {}",
            held.display(),
            sandbox.marker()
        ),
    );
    wait_for_file(&held);
    let started = sandbox.scratch().join("started");
    let mut waiter = spawn_run(
        &sandbox,
        &["--exclusive", "db"],
        &format!("touch {}", started.display()),
    );
    // The waiter must really be blocked: it says so after its first failed attempt, and its
    // command has not run.
    let notice = waiting_notice(&mut waiter);
    assert!(notice.contains("waiting for lock db,"), "{notice}");
    assert!(
        !started.exists(),
        "the waiter ran while the holder held the lock"
    );
    // The holder's command would hold the lock for 300 s: a waiter that got it within the
    // harness's 60 s got it from the holder's death.
    send_signal(&holder, rustix::process::Signal::KILL);
    let out = sandbox.wait_for_runner(waiter, Duration::from_secs(60));
    assert!(out.status.success(), "{out:?}");
    assert!(started.exists(), "the waiter's command did not run");
    let _ = sandbox.wait_for_runner(holder, Duration::from_secs(10));
    // The crashed holder left its root and its `sleep`; gc reclaims both.
    let gc = sandbox.command(&["gc"]).output().unwrap();
    assert!(
        gc.status.success(),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    sandbox.assert_no_survivors(&[]);
    sandbox.assert_namespace_holds_only(&["locks"]);
}

#[test]
fn a_nested_run_joins_its_holders_lock_and_a_forged_token_waits() {
    let sandbox = Sandbox::new("excl-nested");
    let bin = common::BIN;
    // The nested runs keep their roots where the outer run says (its namespace is read-only to
    // the command) and lock in the namespace's `locks/`, where the holder's lock is.
    let joined = sandbox.run(
        &["--exclusive", "db"],
        &[
            bin,
            "run",
            "--exclusive",
            "db",
            "--lock-timeout",
            "2s",
            "--",
            "true",
        ],
    );
    joined.assert_status(0);
    let forged = format!("user:db:{}", "0".repeat(32));
    let refused = sandbox.run(
        &["--exclusive", "db"],
        &[
            "env",
            &format!("CLEANROOM_LOCK_TOKENS={forged}"),
            bin,
            "run",
            "--exclusive",
            "db",
            "--lock-timeout",
            "300ms",
            "--",
            "true",
        ],
    );
    refused.assert_status(125);
    assert!(
        refused.stderr.contains("timed out waiting for lock"),
        "{}",
        refused.stderr
    );
    sandbox.assert_namespace_holds_only(&["locks"]);
}

/// Review s2 finding 4: every protected command can read the user lock directory, so the token
/// file must not give the token. An unrelated run that reads the holder's token file and presents
/// what it found (whole, or without its `sha256:` prefix) waits and times out; the file holds
/// neither the holder's token nor anything that is one. Root and nobody.
#[test]
fn a_token_read_from_the_lock_directory_does_not_join() {
    let mut sandboxes = vec![Sandbox::new("excl-tokfile")];
    if common::root_or_skip("the unprivileged case (a run as nobody)") {
        sandboxes.push(Sandbox::as_user("excl-tokfile-nobody", common::NOBODY));
    }
    for sandbox in sandboxes {
        token_file_does_not_join(&sandbox);
    }
}

fn token_file_does_not_join(sandbox: &Sandbox) {
    let scratch = sandbox.scratch();
    let (held, release) = (scratch.join("held"), scratch.join("release"));
    let holder = spawn_run(
        sandbox,
        &["--exclusive", "db"],
        &format!(
            "echo \"$CLEANROOM_LOCK_TOKENS\" > '{held}.tmp'; mv '{held}.tmp' '{held}'; \
             while [ ! -e '{release}' ]; do sleep 0.05; done",
            held = held.display(),
            release = release.display()
        ),
    );
    wait_for_file(&held);
    let secret = std::fs::read_to_string(&held).unwrap();
    let secret = secret
        .trim()
        .strip_prefix("user:db:")
        .expect(&secret)
        .to_string();
    let bin = sandbox.bin().display().to_string();
    let steal = format!(
        r#"F=$(dirname "$CLEANROOM_ROOT")/locks/db.token.$(id -u); T=$(cat "$F") || exit 3
        cp "$F" '{scratch}/token-file'
        for t in "$T" "${{T#sha256:}}"; do
          CLEANROOM_LOCK_TOKENS="user:db:$t" '{bin}' run --exclusive db --lock-timeout 300ms -- echo JOINED
        done; exit 0"#,
        scratch = scratch.display()
    );
    let thief = sandbox.run(&[], &["sh", "-c", &steal]);
    thief.assert_status(0);
    assert!(!thief.stdout.contains("JOINED"), "{}", thief.stdout);
    assert_eq!(
        thief.stderr.matches("timed out waiting for lock").count(),
        2,
        "{}",
        thief.stderr
    );
    let file = std::fs::read_to_string(scratch.join("token-file")).unwrap();
    assert!(
        !file.contains(&secret),
        "the token file holds the token: {file}"
    );
    let hash = file
        .strip_prefix("sha256:")
        .and_then(|h| h.strip_suffix('\n'));
    assert!(
        hash.is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())),
        "{file:?}"
    );
    std::fs::write(&release, "").unwrap();
    sandbox.assert_runner_succeeds(holder, Duration::from_secs(30));
    sandbox.assert_namespace_holds_only(&["locks"]);
}
