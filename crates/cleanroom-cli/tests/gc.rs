//! `cleanroom gc` and `cleanroom list`, driven through the real binary against real processes,
//! real markers and real files (issue 4).
//!
//! What this proves:
//! - a SIGKILLed runner's root and every process it left are gone after `gc`, which names them;
//! - a live run's root survives any number of concurrent `gc` runs;
//! - nothing gc cannot prove is its own is touched: symlinks in the namespace, directories with
//!   no, malformed, foreign, hard-linked or symlinked markers, other owners; each is reported as
//!   foreign with the reason;
//! - ownership and death are judged right: reused pid and another boot are stale, a live owner
//!   and another pid namespace are live, kept roots wait for `gc --kept`; a live pid that does
//!   not hold a published root's lock is not its owner (a run that forged its own marker and
//!   killed its runner is still reclaimed; while its runner lives, it stays live);
//! - a dead run's orphans are killed only when every entry of its run id is provably dead, never
//!   those of a kept root (even holding its lock) by a plain gc; a lock held outside the run
//!   keeps its root; only a pending skeleton of empty layout directories goes without a marker;
//! - a removal that fails part-way is reported (exit 1, the `.trash-` path) and finished by the
//!   next gc, even when the root was kept; an empty quarantine is removed, a marker-less one with
//!   contents is not; an unprivileged gc (and run) removes read-only trees it owns, the root's own
//!   directory included, and never chmods a mount it meets;
//! - hundreds of stale roots are all reclaimed under a low descriptor limit;
//! - `--dry-run` changes nothing; `--json` and `list --json/--sizes` report every field and state;
//! - the removal walk handles trees deeper than PATH_MAX, leaves bind mounts (and what they
//!   show) in place, and removes symlinks and hard links without touching their targets;
//! - what a command leaves in `locks/` (writable to every protected command) is shown by `list`
//!   with its size and removed by `gc`, without following links, while a held lock's files stay.
//!
//! Every test owns a private state directory on tmpfs; root-only cases (chattr, mounts, other
//! uids, cgroups) fail with a message naming what they need when not run as root (CI runs as
//! root), and every guard undoes what it did.

mod common;
mod gc_support;

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use gc_support::*;

/// What a `cleanroom run` leaves when its runner is SIGKILLed: its root, the processes it
/// started (all alive), the marker in their command lines.
struct Left {
    root: std::path::PathBuf,
    name: String,
    processes: Vec<Owner>,
    marker: String,
    _reaper: Reaper,
}

/// Starts `cleanroom run EXTRA -- sh -c SCRIPT MARKER`, waits until `$HOME/up` exists and the
/// runner has at least `min` descendants, then SIGKILLs the runner — and, first, stops any
/// watchdog that would kill the run with it (a fork of the runner outside its tree), as the
/// OOM killer or `kill -9 -1` would: gc is what is left then.
fn kill_runner_of(sandbox: &Sandbox, extra: &[&str], script: &str, min: usize) -> Left {
    let marker = unique("left");
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["--", "sh", "-c", script, &marker]);
    let child = spawn_run(sandbox, &args);
    let runner = child.id() as i32;
    let mut reaper = Reaper::of(child);
    let root = wait_for_root(sandbox);
    // The watchdog too must be up, titled (it writes its title after the fork, when first
    // scheduled): one not yet titled would not be stopped below, and would do gc's work.
    let up = wait_until(Duration::from_secs(60), || {
        root.join("home/up").exists()
            && descendants(runner).len() >= min
            && !twins_of(runner).is_empty()
    });
    assert!(up, "the run's processes and its watchdog did not start");
    let twins = twins_of(runner);
    let processes: Vec<Owner> = descendants(runner)
        .into_iter()
        .filter(|p| !twins.contains(p))
        .collect();
    reaper.processes = processes.iter().chain(&twins).copied().collect();
    signal_all(&twins, rustix::process::Signal::STOP);
    let child = reaper.child.as_mut().unwrap();
    child.kill().unwrap(); // SIGKILL to the runner alone
    child.wait().unwrap();
    signal_all(&twins, rustix::process::Signal::KILL);
    assert!(
        processes.iter().all(|p| is_alive(*p)),
        "the runner's processes must outlive it for this test to mean anything"
    );
    let name = root.file_name().unwrap().to_str().unwrap().to_string();
    Left {
        root,
        name,
        processes,
        marker,
        _reaper: reaper,
    }
}

/// A setsid daemon and a background child, all tagged: what a crashed runner leaves.
const CRASH_SCRIPT: &str = r#"setsid sh -c 'sleep 300; :' "$0-setsid" &
sh -c 'sleep 300; :' "$0-bg" &
echo up > "$HOME/up"
sleep 300"#;

/// The sandboxes and containment a regression test covers: the session rung as root and as an
/// unprivileged user (through setpriv), and the cgroup rung (root).
fn rungs() -> Vec<(Sandbox, &'static str)> {
    require_root("the rungs of a regression test");
    vec![
        (Sandbox::new(), "session"),
        (Sandbox::for_nobody(), "session"),
        (Sandbox::new(), "cgroup"),
    ]
}

#[test]
fn sigkilled_runner_root_and_orphans_are_gone_after_gc() {
    let sandbox = Sandbox::new();
    let crashed = kill_runner_of(&sandbox, &["--contain", "session"], CRASH_SCRIPT, 6);
    let (state, reason) = sandbox.state_of(&crashed.name);
    assert_eq!(state, "stale", "{reason}");

    let marked = processes_with(&crashed.marker);
    assert!(
        marked.len() >= 2,
        "the orphaned shells should be alive: {marked:?}"
    );

    let out = sandbox.output(&["gc", "-v"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The kill loop proved the orphans gone; it did not give up at its bound.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("survived"), "{stderr}");
    assert!(
        stdout.contains(&format!("removed {}", crashed.root.display())),
        "{stdout}"
    );
    for p in &marked {
        assert!(
            stdout.contains(&format!("killed orphan pid {}:", p.pid)),
            "gc must name orphan {}: {stdout}",
            p.pid
        );
    }
    assert!(!crashed.root.exists());
    assert_eq!(
        processes_with(&crashed.marker),
        vec![],
        "orphans survived gc"
    );
    let survivors: Vec<_> = crashed.processes.iter().filter(|p| is_alive(**p)).collect();
    assert!(survivors.is_empty(), "survived gc: {survivors:?}");
    assert_eq!(sandbox.names(), Vec::<String>::new());
}

#[test]
fn sigkilled_runner_in_a_cgroup_is_reclaimed_with_its_cgroup() {
    require_root("sigkilled_runner_in_a_cgroup_is_reclaimed_with_its_cgroup");
    let sandbox = Sandbox::new();
    let crashed = kill_runner_of(&sandbox, &["--contain", "cgroup"], CRASH_SCRIPT, 6);
    let marker: serde_json::Value =
        serde_json::from_slice(&fs::read(crashed.root.join(MARKER)).unwrap()).unwrap();
    let cgroup = marker["cgroup"].as_str().expect("a cgroup was recorded");
    assert!(Path::new(cgroup).exists());

    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(summary["removed"], 1, "{summary}");
    let killed: Vec<String> = summary["killed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["command"].as_str().unwrap().to_string())
        .collect();
    assert!(
        killed.iter().any(|c| c.contains(&crashed.marker)),
        "gc must name the orphans it killed: {killed:?}"
    );
    assert!(!crashed.root.exists());
    assert!(!Path::new(cgroup).exists(), "the run's cgroup is left");
    assert_eq!(processes_with(&crashed.marker), vec![]);
    assert!(crashed.processes.iter().all(|p| !is_alive(*p)));
}

/// `sh -c FORGE_SCRIPT TAG MODE`: the run's command rewrites its own root's marker so that its
/// owner is pid 1 (with pid 1's real start time: a live process) and writes `$HOME/forged`;
/// then, with MODE `kill`, it SIGKILLs its runner (the marker's owner before) and sleeps; with
/// MODE `wait`, it waits for `$HOME/go` and exits 0. It exits 9 if it cannot forge the marker.
const FORGE_SCRIPT: &str = r#"python3 - "$CLEANROOM_ROOT/cleanroom-root.json" "$1" <<'EOF' || exit 9
import json, os, signal, sys
path, mode = sys.argv[1], sys.argv[2]
with open(path) as f:
    marker = json.load(f)
runner = marker["owner"]["pid"]
stat = open("/proc/1/stat").read()
marker["owner"] = {"pid": 1, "start_time": int(stat[stat.rindex(")") + 2:].split()[19])}
with open(path, "w") as f:
    f.write(json.dumps(marker) + "\n")
open(os.path.join(os.environ["HOME"], "forged"), "w").close()
if mode == "kill":
    os.kill(runner, signal.SIGKILL)
EOF
if [ "$1" = kill ]; then sleep 300; fi
while [ ! -e "$HOME/go" ]; do sleep 0.05; done"#;

/// Starts `cleanroom run --contain CONTAIN -- sh -c FORGE_SCRIPT TAG MODE` and waits for its
/// root: the tag, the reaper holding the runner, the root and its name.
fn start_forging_run(
    sandbox: &Sandbox,
    contain: &str,
    mode: &str,
) -> (String, Reaper, std::path::PathBuf, String) {
    let tag = unique("forged");
    let args = [
        "--contain",
        contain,
        "--",
        "sh",
        "-c",
        FORGE_SCRIPT,
        &tag,
        mode,
    ];
    let reaper = Reaper::of(spawn_run(sandbox, &args));
    let root = wait_for_root(sandbox);
    let name = root.file_name().unwrap().to_str().unwrap().to_string();
    (tag, reaper, root, name)
}

#[test]
fn a_run_that_forges_its_marker_to_a_live_pid_and_kills_its_runner_is_still_reclaimed() {
    // Review s2, finding 2: the command may write its own root's marker and kill its runner
    // (same uid). The marker then names pid 1, alive forever; but pid 1 does not hold the
    // root's lock, so it is not the root's owner, and gc reclaims the root and its cgroup.
    for (sandbox, contain) in rungs() {
        let (tag, mut reaper, root, name) = start_forging_run(&sandbox, contain, "kill");
        let status = reaper.child.as_mut().unwrap().wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "{contain}: the command did not kill its runner: {status:?}"
        );
        let marker: serde_json::Value =
            serde_json::from_slice(&fs::read(root.join(MARKER)).unwrap()).unwrap();
        assert_eq!(marker["owner"]["pid"], 1, "{contain}: {marker}");
        let cgroup = marker["cgroup"].as_str().map(std::path::PathBuf::from);
        assert_eq!(cgroup.is_some(), contain == "cgroup", "{contain}: {marker}");
        // The watchdog kills the run when its runner dies; gc kills whatever it missed.
        let (state, reason) = sandbox.state_of(&name);
        assert_eq!(state, "stale", "{contain}: {reason}");
        assert!(
            reason.contains("owner pid 1 is alive but does not hold the root's lock"),
            "{contain}: {reason}"
        );
        let (summary, code) = sandbox.gc_json(&[]);
        assert_eq!(code, 0, "{contain}: {summary}");
        assert_eq!(removed_names(&summary), vec![name], "{contain}: {summary}");
        assert!(!root.exists(), "{contain}");
        if let Some(cgroup) = cgroup {
            assert!(
                !cgroup.exists(),
                "the run's cgroup is left: {}",
                cgroup.display()
            );
        }
        assert!(
            wait_until(Duration::from_secs(10), || processes_with(&tag).is_empty()),
            "{contain}: the run's processes survived gc: {:?}",
            processes_with(&tag)
        );
        assert_eq!(sandbox.names(), Vec::<String>::new(), "{contain}");
    }
}

#[test]
fn a_live_run_that_forges_its_marker_to_a_live_pid_stays_live_and_still_ends_clean() {
    // While the runner holds the root's lock, the forged owner changes nothing: gc leaves the
    // root alone, and the run removes it at its end as always.
    for (sandbox, contain) in rungs() {
        let (tag, mut reaper, root, name) = start_forging_run(&sandbox, contain, "wait");
        assert!(
            wait_until(Duration::from_secs(60), || root
                .join("home/forged")
                .exists()),
            "{contain}: the command did not forge its marker"
        );
        let (state, reason) = sandbox.state_of(&name);
        assert_eq!(state, "live", "{contain}: {reason}");
        assert_eq!(reason, "owner pid 1 is alive", "{contain}");
        for _ in 0..3 {
            let (summary, code) = sandbox.gc_json(&[]);
            assert_eq!(code, 0, "{contain}: {summary}");
            assert_eq!(summary["removed"], 0, "{contain}: {summary}");
            assert_eq!(summary["skipped_live"], 1, "{contain}: {summary}");
            assert!(root.join("home/forged").exists(), "{contain}");
        }
        let go = root.join("home/go");
        fs::write(&go, "").unwrap();
        if let Some(uid) = sandbox.user {
            chown(&go, uid);
        }
        let out = reaper.child.take().unwrap().wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{contain}: {out:?}");
        assert!(!root.exists(), "{contain}");
        assert_eq!(processes_with(&tag), vec![], "{contain}");
        assert_eq!(sandbox.names(), Vec::<String>::new(), "{contain}");
    }
}

#[test]
fn live_run_survives_repeated_concurrent_gc() {
    let sandbox = Sandbox::new();
    let script = r#"set -e
mkdir "$HOME/d" "$TMPDIR/t"
for i in 1 2 3 4 5 6 7 8; do echo "home $i" > "$HOME/d/f$i"; echo "tmp $i" > "$TMPDIR/t/f$i"; done
echo written > "$HOME/written"
sleep 3
for i in 1 2 3 4 5 6 7 8; do
  [ "$(cat "$HOME/d/f$i")" = "home $i" ]; [ "$(cat "$TMPDIR/t/f$i")" = "tmp $i" ]
done
[ "$(ls "$HOME/d" | wc -l)" -eq 8 ]"#;
    let child = spawn_run(&sandbox, &["--", "sh", "-c", script]);
    let mut reaper = Reaper::of(child);
    let root = wait_for_root(&sandbox);
    assert!(wait_until(Duration::from_secs(10), || root
        .join("home/written")
        .exists()));
    let done = AtomicBool::new(false);
    let gcs = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                while !done.load(Ordering::SeqCst) {
                    let (summary, code) = sandbox.gc_json(&[]);
                    assert_eq!(code, 0, "{summary}");
                    assert_eq!(summary["removed"], 0, "gc removed something: {summary}");
                    assert!(errors(&summary).is_empty(), "{summary}");
                    gcs.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        let out = reaper.child.take().unwrap().wait_with_output().unwrap();
        done.store(true, Ordering::SeqCst);
        assert_eq!(
            out.status.code(),
            Some(0),
            "the live run was damaged: {out:?}"
        );
    });
    assert!(
        gcs.load(Ordering::SeqCst) >= 8,
        "too few gc runs to mean anything"
    );
    assert_eq!(sandbox.names(), Vec::<String>::new());
}

#[test]
fn symlinks_in_the_namespace_are_foreign_and_their_targets_survive() {
    let sandbox = Sandbox::new();
    let victim = make_victim(&sandbox.outside("victim"));
    // A victim that even looks like a stale root of ours, marker and all.
    let lookalike_spec = RootSpec::stale(&sandbox);
    let lookalike = lookalike_spec.create_as(&sandbox, "lookalike");
    let lookalike = {
        let moved = sandbox.outside("lookalike");
        fs::rename(&lookalike, &moved).unwrap();
        moved
    };
    let before = (snapshot(&victim), snapshot(&lookalike));
    let links = [
        (root_name(&new_run_id()), victim.clone()),
        (lookalike_spec.name(), lookalike.clone()),
        (
            format!(".trash-{}", root_name(&new_run_id())),
            victim.clone(),
        ),
        (
            format!(".pending-{}", root_name(&new_run_id())),
            victim.clone(),
        ),
        ("my-project".to_string(), victim.clone()),
    ];
    for (name, target) in &links {
        std::os::unix::fs::symlink(target, sandbox.ns.join(name)).unwrap();
    }
    for (name, _) in &links {
        let (state, reason) = sandbox.state_of(name);
        assert_eq!(state, "foreign", "{name}: {reason}");
    }
    assert!(sandbox.state_of(&links[0].0).1.contains("symlink"));
    assert!(sandbox.state_of(&links[1].0).1.contains("symlink"));

    for extra in [&[][..], &["--kept"][..]] {
        let (summary, code) = sandbox.gc_json(extra);
        assert_eq!(code, 0, "{summary}");
        assert_eq!(summary["foreign"], links.len(), "{summary}");
        assert_eq!(summary["removed"], 0, "{summary}");
    }
    assert_eq!(before, (snapshot(&victim), snapshot(&lookalike)));
    for (name, target) in &links {
        assert_eq!(&fs::read_link(sandbox.ns.join(name)).unwrap(), target);
    }
}

#[test]
fn foreign_directories_are_reported_with_their_reason_and_never_touched() {
    let sandbox = Sandbox::new();
    let outside = sandbox.outside("elsewhere");
    fs::create_dir(&outside).unwrap();
    // (name, state, what the reason must say)
    let mut cases: Vec<(String, &str, &str)> = Vec::new();
    // Damaged markers, as a crash or a careless run leaves them, are named like ours but never
    // proven: reported as unproven with the command that removes them.
    let mut add = |name: String, reason: &'static str| {
        let damaged = [
            "no marker",
            "marker is not valid",
            "marker is not a regular file",
        ];
        let state = if damaged.contains(&reason) {
            "unproven"
        } else {
            "foreign"
        };
        cases.push((name, state, reason));
    };

    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::remove_file(root.join(MARKER)).unwrap();
    add(spec.name(), "no marker");

    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::write(root.join(MARKER), "{\"format\":\"cleanroom-root-marker\",").unwrap();
    add(spec.name(), "marker is not valid");

    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::remove_file(root.join(MARKER)).unwrap();
    fs::create_dir(root.join(MARKER)).unwrap();
    add(spec.name(), "marker is not a regular file");

    let spec = RootSpec {
        version: 3,
        ..RootSpec::stale(&sandbox)
    };
    spec.create(&sandbox);
    add(spec.name(), "unknown marker version 3");

    // Version 2 is known, but only with the field it adds (`kept`).
    let spec = RootSpec {
        version: 2,
        ..RootSpec::stale(&sandbox)
    };
    spec.create(&sandbox);
    add(spec.name(), "version 2 without `kept`");

    let spec = RootSpec::stale(&sandbox);
    let other = RootSpec::stale(&sandbox);
    other.create_as(&sandbox, &spec.name());
    add(spec.name(), "marker names another run");

    let spec = RootSpec {
        euid: sandbox.euid() + 4242,
        ..RootSpec::stale(&sandbox)
    };
    spec.create(&sandbox);
    add(spec.name(), "marker belongs to uid");

    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::hard_link(root.join(MARKER), outside.join("second-link")).unwrap();
    add(spec.name(), "marker has 2 hard links");

    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::rename(root.join(MARKER), outside.join("real-marker.json")).unwrap();
    std::os::unix::fs::symlink(outside.join("real-marker.json"), root.join(MARKER)).unwrap();
    add(spec.name(), "marker is a symbolic link");

    // Not our naming at all, with a perfectly valid stale marker inside.
    let spec = RootSpec::stale(&sandbox);
    spec.create_as(&sandbox, "run-not-an-id");
    add("run-not-an-id".into(), "name is not cleanroom's");

    if common::root_or_skip("markers and roots owned by another uid") {
        let spec = RootSpec::stale(&sandbox);
        let root = spec.create(&sandbox);
        chown(&root.join(MARKER), NOBODY);
        add(spec.name(), "marker is owned by uid 65534");

        let spec = RootSpec::stale(&sandbox);
        let root = spec.create(&sandbox);
        chown(&root, NOBODY);
        add(spec.name(), "owned by uid 65534");
    }

    let before = snapshot(sandbox.dir.path());
    let listed = sandbox.list(false);
    for (name, state, reason) in &cases {
        let e = &listed[name];
        assert_eq!(e["state"], *state, "{name}: {e}");
        let got = e["reason"].as_str().unwrap();
        assert!(got.contains(reason), "{name}: want {reason:?}, got {got:?}");
        if *state == "unproven" {
            let remove = format!(
                "rm -rf --one-file-system -- {}",
                sandbox.ns.join(name).display()
            );
            assert!(got.contains(&remove), "{name}: {got}");
        }
    }
    let foreign = cases.iter().filter(|c| c.1 == "foreign").count();
    let mut unproven: Vec<String> = cases
        .iter()
        .filter(|c| c.1 == "unproven")
        .map(|c| c.0.clone())
        .collect();
    unproven.sort();
    for extra in [&["--dry-run"][..], &[][..], &["--kept"][..]] {
        let (summary, code) = sandbox.gc_json(extra);
        assert_eq!(code, 0, "{summary}");
        assert_eq!(summary["foreign"], foreign, "{summary}");
        assert_eq!(
            summary["unproven"],
            serde_json::json!(unproven),
            "{summary}"
        );
        assert_eq!(summary["removed"], 0, "{summary}");
    }
    let out = sandbox.output(&["gc"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for name in &unproven {
        let line = format!(
            "left {}: named like a root",
            sandbox.ns.join(name).display()
        );
        assert!(stdout.contains(&line), "{stdout}");
    }
    assert_eq!(before, snapshot(sandbox.dir.path()));
}

#[test]
fn reused_pid_with_another_start_time_is_stale_and_reclaimed() {
    let sandbox = Sandbox::new();
    let me = own_process();
    let spec = RootSpec::stale(&sandbox).owned_by(Owner {
        start_time: me.start_time + 1,
        ..me
    });
    let root = spec.create(&sandbox);
    assert_eq!(sandbox.state_of(&spec.name()).0, "stale");
    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![spec.name()]);
    assert!(!root.exists());
    assert!(is_alive(me));
}

#[test]
fn owners_in_sight_or_not_are_live_while_they_hold_their_roots_lock() {
    let sandbox = Sandbox::new();
    let alive = RootSpec::stale(&sandbox).owned_by(own_process());
    let _held = hold_as_owner(&alive.create(&sandbox));
    let other_ns = RootSpec {
        host: HostInfo {
            pid_ns: host_now().pid_ns + 1,
            ..host_now()
        },
        ..RootSpec::stale(&sandbox)
    };
    let held_ns = hold_as_owner(&other_ns.create(&sandbox));
    let other_host = RootSpec {
        host: HostInfo {
            hostname: "another-machine".into(),
            ..host_now()
        },
        ..RootSpec::stale(&sandbox)
    };
    let held_host = hold_as_owner(&other_host.create(&sandbox));
    let before = snapshot(&sandbox.ns);
    let (state, reason) = sandbox.state_of(&alive.name());
    assert_eq!(state, "live", "{reason}");
    assert!(reason.contains("alive"), "{reason}");
    for spec in [&other_ns, &other_host] {
        let (state, reason) = sandbox.state_of(&spec.name());
        assert_eq!(state, "live", "{reason}");
        assert!(reason.contains("cannot prove"), "{reason}");
    }
    let (summary, code) = sandbox.gc_json(&["--kept"]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(summary["skipped_live"], 3, "{summary}");
    assert_eq!(summary["removed"], 0, "{summary}");
    assert_eq!(before, snapshot(&sandbox.ns));
    // An owner out of sight (another pid namespace or UTS name on this kernel) holds its root's
    // lock like any other: with the lock free, the record is not its owner's (a run that forged
    // its own marker's host to pin its root).
    drop((held_ns, held_host));
    for spec in [&other_ns, &other_host] {
        let (state, reason) = sandbox.state_of(&spec.name());
        assert_eq!(state, "stale", "{reason}");
        assert!(reason.contains("does not hold the root's lock"), "{reason}");
    }
    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(summary["removed"], 2, "{summary}");
}

#[test]
fn a_live_pid_that_does_not_hold_its_roots_lock_is_not_its_owner() {
    // A live owner holds its root's shared lock for the root's whole life: a marker naming a
    // live process while the lock is free is a lie (a run that forged its own marker), and the
    // root is reclaimed as a dead owner's. A kept root stays kept.
    let sandbox = Sandbox::new();
    let me = own_process();
    let forged = RootSpec::stale(&sandbox).owned_by(me);
    let root = forged.create(&sandbox);
    let kept = RootSpec {
        keep: true,
        ..RootSpec::stale(&sandbox).owned_by(me)
    };
    let kept_root = kept.create(&sandbox);
    let (state, reason) = sandbox.state_of(&forged.name());
    assert_eq!(state, "stale", "{reason}");
    assert_eq!(
        reason,
        format!(
            "owner pid {} is alive but does not hold the root's lock: not its owner",
            me.pid
        )
    );
    assert_eq!(sandbox.state_of(&kept.name()).0, "kept");
    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![forged.name()]);
    assert!(!root.exists());
    assert!(kept_root.exists());
    assert!(is_alive(me));
    let (summary, code) = sandbox.gc_json(&["--kept"]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![kept.name()]);
}

#[test]
fn marker_from_another_boot_is_stale_even_if_its_pid_is_alive_now() {
    let sandbox = Sandbox::new();
    let spec = RootSpec {
        host: HostInfo {
            boot_id: "00000000-0000-4000-8000-000000000000".into(),
            ..host_now()
        },
        ..RootSpec::stale(&sandbox).owned_by(own_process())
    };
    let root = spec.create(&sandbox);
    assert_eq!(sandbox.state_of(&spec.name()).0, "stale");
    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![spec.name()]);
    assert!(!root.exists());
}

#[test]
fn a_marker_naming_a_pid_no_process_can_have_is_foreign_and_its_root_stays() {
    // A pid_t is an i32: -1 (every process, to kill(2)), 0 (the caller's group) and values
    // beyond it are forged. Such a marker proves nothing, so its root is foreign, not stale,
    // and gc leaves it.
    let sandbox = Sandbox::new();
    for pid in [-1i64, 0, 2_147_483_648, 4_294_967_295] {
        let spec = RootSpec::stale(&sandbox);
        let root = spec.create(&sandbox);
        let mut marker: serde_json::Value = serde_json::from_str(&spec.marker_json()).unwrap();
        marker["owner"]["pid"] = pid.into();
        fs::remove_file(root.join(MARKER)).unwrap();
        write_private(&root.join(MARKER), &marker.to_string());
        if let Some(uid) = sandbox.user {
            chown(&root.join(MARKER), uid);
        }
        let (state, reason) = sandbox.state_of(&spec.name());
        assert_eq!(state, "foreign", "pid {pid}: {reason}");
        assert!(
            reason.contains("marker is not valid"),
            "pid {pid}: {reason}"
        );
        let (summary, code) = sandbox.gc_json(&[]);
        assert_eq!(code, 0, "{summary}");
        assert_eq!(summary["removed"], 0, "pid {pid}: {summary}");
        assert!(root.join(MARKER).exists(), "pid {pid}");
    }
}

#[test]
fn kept_roots_survive_gc_and_go_with_gc_kept() {
    let sandbox = Sandbox::new();
    let made = RootSpec {
        keep: true,
        ..RootSpec::stale(&sandbox)
    };
    made.create(&sandbox);
    let out = sandbox.output(&[
        "run",
        "--keep-root",
        "--",
        "sh",
        "-c",
        "echo kept > $HOME/f",
    ]);
    assert!(out.status.success(), "{out:?}");
    let kept: Vec<String> = sandbox.names();
    assert_eq!(kept.len(), 2, "{kept:?}");
    for name in &kept {
        assert_eq!(sandbox.state_of(name).0, "kept", "{name}");
    }
    let before = snapshot(&sandbox.ns);
    for _ in 0..2 {
        let (summary, code) = sandbox.gc_json(&[]);
        assert_eq!(code, 0, "{summary}");
        assert_eq!(
            (summary["kept"].clone(), summary["removed"].clone()),
            (2.into(), 0.into())
        );
    }
    assert_eq!(before, snapshot(&sandbox.ns));
    let (summary, code) = sandbox.gc_json(&["--kept"]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(removed_names(&summary), kept);
    assert_eq!(sandbox.names(), Vec::<String>::new());
}

#[test]
fn removal_failing_part_way_is_reported_and_finished_by_the_next_gc() {
    require_root("removal_failing_part_way_is_reported_and_finished_by_the_next_gc");
    let sandbox = Sandbox::new();
    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::write(root.join("home/pinned"), "immutable\n").unwrap();
    let immutable =
        ImmutableGuard::pin(&root.join("home/pinned"), &sandbox.outside(&unique("pin")));
    let trash = sandbox.ns.join(format!(".trash-{}", spec.name()));

    let out = sandbox.output(&["gc"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr.contains(&trash.join("home/pinned").display().to_string()),
        "the error must name the leftover: {stderr}"
    );
    assert!(stderr.contains("Operation not permitted"), "{stderr}");
    assert!(trash.join("home/pinned").exists());
    assert!(
        trash.join(MARKER).exists(),
        "the marker must stay until the end"
    );
    let trash_name = format!(".trash-{}", spec.name());
    assert_eq!(sandbox.state_of(&trash_name).0, "leftover");
    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 1, "{summary}");
    assert!(errors(&summary)[0].contains(&trash.display().to_string()));

    drop(immutable);
    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![trash_name]);
    assert_eq!(sandbox.names(), Vec::<String>::new());
}

/// A stale root of [`NOBODY`] holding read-only and unreadable directories and files.
fn read_only_root(sandbox: &Sandbox) -> std::path::PathBuf {
    let spec = RootSpec::stale(sandbox);
    let root = spec.create(sandbox);
    let module = root.join("home/go/pkg/mod/example.com/m@v1.0.0");
    fs::create_dir_all(module.join("internal")).unwrap();
    fs::write(module.join("go.mod"), "module m\n").unwrap();
    fs::write(module.join("internal/x.go"), "package x\n").unwrap();
    fs::create_dir_all(root.join("tmp/sealed/inner")).unwrap();
    fs::write(root.join("tmp/sealed/inner/secret"), "s\n").unwrap();
    fs::write(root.join("tmp/sealed/top"), "t\n").unwrap();
    fs::create_dir(root.join("tmp/blind")).unwrap(); // -wx: searchable, not listable
    fs::write(root.join("tmp/blind/hidden"), "h\n").unwrap();
    chown_tree(&root, NOBODY);
    let modes: [(&str, u32); 9] = [
        ("home/go/pkg/mod/example.com/m@v1.0.0/go.mod", 0o444),
        ("home/go/pkg/mod/example.com/m@v1.0.0/internal/x.go", 0o444),
        ("home/go/pkg/mod/example.com/m@v1.0.0/internal", 0o555),
        ("home/go/pkg/mod/example.com/m@v1.0.0", 0o555),
        ("home/go/pkg/mod/example.com", 0o555),
        ("tmp/sealed/inner/secret", 0o000),
        ("tmp/sealed/inner", 0o000),
        ("tmp/sealed", 0o000),
        ("tmp/blind", 0o300),
    ];
    for (path, mode) in modes {
        fs::set_permissions(root.join(path), fs::Permissions::from_mode(mode)).unwrap();
    }
    root
}

#[test]
fn unprivileged_gc_removes_read_only_and_unreadable_trees() {
    require_root("unprivileged_gc_removes_read_only_and_unreadable_trees");
    let sandbox = Sandbox::for_nobody();
    let root = read_only_root(&sandbox);
    let name = root.file_name().unwrap().to_str().unwrap().to_string();
    // The same user cannot simply `rm -rf` it: the walk must make directories writable.
    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![name]);
    assert_eq!(sandbox.names(), Vec::<String>::new());
}

#[test]
fn unprivileged_gc_removes_a_root_whose_own_directory_is_read_only() {
    require_root("unprivileged_gc_removes_a_root_whose_own_directory_is_read_only");
    let sandbox = Sandbox::for_nobody();
    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::set_permissions(&root, fs::Permissions::from_mode(0o555)).unwrap();
    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(sandbox.names(), Vec::<String>::new());
}

#[test]
fn dry_run_changes_nothing_and_json_reports_every_field() {
    let sandbox = Sandbox::new();
    let stale: Vec<RootSpec> = (0..3).map(|_| RootSpec::stale(&sandbox)).collect();
    for spec in &stale {
        spec.create(&sandbox);
    }
    let live = RootSpec::stale(&sandbox)
        .owned_by(own_process())
        .create(&sandbox);
    let _held = hold_as_owner(&live);
    fs::create_dir(sandbox.ns.join("not-ours")).unwrap();
    // A process still tagged with a stale run's id, as a crashed runner leaves it.
    let tag = unique("tagged");
    let tagged = std::process::Command::new("sh")
        .args(["-c", "sleep 60; :", &tag])
        .env("CLEANROOM_RUN_ID", &stale[0].run_id)
        .spawn()
        .unwrap();
    let tagged_id = Owner {
        pid: tagged.id() as i32,
        start_time: start_time(tagged.id() as i32).unwrap(),
    };
    let _reaper = Reaper::of(tagged);
    // The shell must have started its sleep before gc looks (under load it may not have yet).
    let children = format!("/proc/{0}/task/{0}/children", tagged_id.pid);
    assert!(
        wait_until(Duration::from_secs(10), || {
            !fs::read_to_string(&children)
                .unwrap_or_default()
                .trim()
                .is_empty()
        }),
        "the tagged shell never started its sleep"
    );
    let before = snapshot(&sandbox.ns);

    let (summary, code) = sandbox.gc_json(&["--dry-run"]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(summary["format"], "cleanroom-gc");
    assert_eq!(summary["version"], 1);
    for (field, kind) in [
        ("unproven", "array"),
        ("locked", "array"),
        ("stuck_skipped", "array"),
        ("scanned", "number"),
        ("removed", "number"),
        ("skipped_live", "number"),
        ("kept", "number"),
        ("foreign", "number"),
        ("errors", "array"),
        ("truncated", "bool"),
        ("bytes_freed", "number"),
        ("killed", "array"),
        ("removed_names", "array"),
        ("locks_removed", "array"),
        ("dry_run", "bool"),
    ] {
        let v = &summary[field];
        let ok = match kind {
            "number" => v.is_u64(),
            "array" => v.is_array(),
            _ => v.is_boolean(),
        };
        assert!(ok, "{field} should be a {kind}: {summary}");
    }
    assert_eq!(summary["dry_run"], true);
    assert_eq!(summary["scanned"], 5);
    assert_eq!(summary["removed"], 3);
    assert_eq!(summary["skipped_live"], 1);
    assert_eq!(summary["foreign"], 1);
    assert_eq!(summary["truncated"], false);
    let mut want: Vec<String> = stale.iter().map(RootSpec::name).collect();
    want.sort();
    assert_eq!(removed_names(&summary), want);
    assert_eq!(
        before,
        snapshot(&sandbox.ns),
        "--dry-run changed the namespace"
    );
    assert!(is_alive(tagged_id), "--dry-run killed a process");
    // What it would kill and free.
    let would_kill: Vec<i64> = summary["killed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["pid"].as_i64().unwrap())
        .collect();
    // The tagged shell and the sleep it started (which inherited the tag).
    assert!(would_kill.contains(&i64::from(tagged_id.pid)), "{summary}");
    assert_eq!(would_kill.len(), 2, "{summary}");
    assert!(summary["bytes_freed"].as_u64().unwrap() > 0, "{summary}");

    let out = sandbox.output(&["gc", "--dry-run"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("would kill orphan pid {}: sh -c", tagged_id.pid)),
        "{stdout}"
    );
    assert!(stdout.contains("would remove 3"), "{stdout}");
    assert!(stdout.contains("would free"), "{stdout}");
    assert!(is_alive(tagged_id), "--dry-run killed a process");

    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(summary["removed"], 3);
    assert_eq!(summary["dry_run"], false);
    assert_eq!(summary["killed"][0]["pid"], tagged_id.pid, "{summary}");
    assert!(!is_alive(tagged_id));
    assert_eq!(sandbox.names().len(), 2);

    let missing = Sandbox::new();
    fs::remove_dir(&missing.ns).unwrap();
    let (summary, code) = missing.gc_json(&[]);
    assert_eq!((code, summary["scanned"].clone()), (0, 0.into()));
}

#[test]
fn list_shows_every_state_with_sizes() {
    let sandbox = Sandbox::new();
    let live = RootSpec::stale(&sandbox).owned_by(own_process());
    let _held = hold_as_owner(&live.create(&sandbox));
    let stale = RootSpec::stale(&sandbox);
    stale.create(&sandbox);
    let kept = RootSpec {
        keep: true,
        ..RootSpec::stale(&sandbox)
    };
    kept.create(&sandbox);
    let leftover = RootSpec::stale(&sandbox);
    let leftover_name = format!(".trash-{}", leftover.name());
    leftover.create_as(&sandbox, &leftover_name);
    fs::create_dir(sandbox.ns.join("foreign-dir")).unwrap();
    fs::write(sandbox.ns.join("foreign-dir/f"), "x").unwrap();
    let want = [
        (live.name(), "live"),
        (stale.name(), "stale"),
        (kept.name(), "kept"),
        (leftover_name, "leftover"),
        ("foreign-dir".to_string(), "foreign"),
    ];

    let plain = sandbox.list(false);
    let sized = sandbox.list(true);
    assert_eq!(plain.len(), want.len());
    for (name, state) in &want {
        assert_eq!(plain[name]["state"], *state, "{name}: {}", plain[name]);
        assert_eq!(sized[name]["state"], *state);
        assert!(plain[name]["size_bytes"].is_null());
        if *state == "foreign" {
            assert!(
                sized[name]["size_bytes"].is_null(),
                "foreign entries are not walked"
            );
        } else {
            assert!(
                sized[name]["size_bytes"].as_u64().unwrap() > 0,
                "{}",
                sized[name]
            );
            assert!(sized[name]["owner_pid"].as_i64().is_some());
        }
    }
    let out = sandbox.output(&["list", "--sizes"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for (name, state) in &want {
        let line = text.lines().find(|l| l.contains(name.as_str())).unwrap();
        assert!(line.starts_with(state), "{line}");
    }
}

#[test]
fn tree_deeper_than_path_max_is_removed() {
    let sandbox = Sandbox::new();
    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    make_deep_tree(&root.join("home"), 300, "abcdefghijklmnopqrst");
    make_deep_tree(&root.join("tmp"), 150, "abcdefghijklmnopqrst");
    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![spec.name()]);
    assert_eq!(sandbox.names(), Vec::<String>::new());
}

#[test]
fn bind_mount_inside_a_stale_root_is_left_in_place_and_reported() {
    require_root("bind_mount_inside_a_stale_root_is_left_in_place_and_reported");
    let sandbox = Sandbox::new();
    let victim = make_victim(&sandbox.outside("victim"));
    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::create_dir(root.join("home/mnt")).unwrap();
    let mount = MountGuard::bind(&victim, &root.join("home/mnt"), sandbox.dir.path());
    let before = snapshot(&victim);

    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 1, "{summary}");
    let errs = errors(&summary);
    assert!(errs.iter().any(|e| e.contains("mount point")), "{summary}");
    assert!(errs.iter().any(|e| e.contains("home/mnt")), "{summary}");
    assert_eq!(before, snapshot(&victim), "the mounted victim was touched");
    let trash = sandbox.ns.join(format!(".trash-{}", spec.name()));
    assert_eq!(mounts_below(&sandbox.ns), vec![trash.join("home/mnt")]);
    assert_eq!(
        snapshot(&trash.join("home/mnt")),
        before,
        "the mount must be left as it was"
    );

    drop(mount);
    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(sandbox.names(), Vec::<String>::new());
    assert_eq!(before, snapshot(&victim));
}

#[test]
fn unprivileged_gc_does_not_chmod_an_unreadable_mounted_directory() {
    require_root("unprivileged_gc_does_not_chmod_an_unreadable_mounted_directory");
    let sandbox = Sandbox::for_nobody();
    // The user's own private directory elsewhere, bind-mounted into a stale root.
    let victim = make_victim(&sandbox.outside("private"));
    chown_tree(&victim, NOBODY);
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o000)).unwrap();
    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::create_dir(root.join("home/mnt")).unwrap();
    chown(&root.join("home/mnt"), NOBODY);
    let mount = MountGuard::bind(&victim, &root.join("home/mnt"), sandbox.dir.path());
    let before = snapshot(&victim);

    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 1, "{summary}");
    assert!(
        errors(&summary).iter().any(|e| e.contains("mount point")),
        "{summary}"
    );
    assert_eq!(
        before,
        snapshot(&victim),
        "gc changed a directory that is not its own"
    );
    drop(mount);
}

#[test]
fn links_inside_a_root_are_removed_and_their_targets_survive() {
    let sandbox = Sandbox::new();
    let victim = make_victim(&sandbox.outside("victim"));
    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    let links = [
        ("home/dir-link", victim.clone()),
        ("home/file-link", victim.join("precious.txt")),
        ("tmp/slash", "/".into()),
        ("tmp/dangling", sandbox.outside("nothing-here")),
        ("xdg/config/relative", "../../../../victim".into()),
    ];
    for (link, target) in &links {
        std::os::unix::fs::symlink(target, root.join(link)).unwrap();
    }
    fs::hard_link(victim.join("sub/nested.txt"), root.join("home/hard")).unwrap();
    fs::create_dir(root.join("homes/X")).unwrap();
    std::os::unix::fs::symlink(&victim, root.join("homes/X/victim")).unwrap();
    // The hard link makes nested.txt's nlink 2 now and 1 afterwards; snapshots ignore nlink.
    let before = snapshot(&victim);

    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(sandbox.names(), Vec::<String>::new());
    // Unlinking the hard link changes the file's ctime, never its content, mode or mtime.
    assert_eq!(before, snapshot(&victim));
    assert_eq!(
        fs::read_to_string(victim.join("sub/nested.txt")).unwrap(),
        "nor this\n"
    );
}

#[test]
fn unprivileged_run_that_makes_its_root_read_only_is_still_cleaned_up() {
    require_root("unprivileged_run_that_makes_its_root_read_only_is_still_cleaned_up");
    let sandbox = Sandbox::for_nobody();
    for script in [
        r#"echo x > "$HOME/f" && chmod 555 "$HOME/.." "$HOME""#,
        r#"echo x > "$HOME/f" && chmod 000 "$HOME/..""#,
    ] {
        let out = sandbox.output(&["run", "--", "sh", "-c", script]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{script}: {stderr}");
        assert!(!stderr.contains("cleanup incomplete"), "{script}: {stderr}");
        assert_eq!(sandbox.names(), Vec::<String>::new(), "{script}");
    }
}

#[test]
fn empty_quarantine_is_removed_but_a_marker_less_one_with_contents_is_unproven() {
    let sandbox = Sandbox::new();
    let empty = format!(".trash-{}", root_name(&new_run_id()));
    fs::create_dir(sandbox.ns.join(&empty)).unwrap();
    let full = format!(".trash-{}", root_name(&new_run_id()));
    fs::create_dir(sandbox.ns.join(&full)).unwrap();
    fs::write(sandbox.ns.join(&full).join("data"), "kept\n").unwrap();
    assert_eq!(sandbox.state_of(&empty).0, "leftover");
    assert_eq!(sandbox.state_of(&full).0, "unproven");
    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![empty]);
    assert_eq!(sandbox.names(), vec![full]);
}

#[test]
fn half_removed_kept_root_is_finished_by_a_plain_gc() {
    let sandbox = Sandbox::new();
    // What a `gc --kept` that failed part-way leaves: a quarantined root whose marker says keep.
    let spec = RootSpec {
        keep: true,
        ..RootSpec::stale(&sandbox)
    };
    let trash = format!(".trash-{}", spec.name());
    spec.create_as(&sandbox, &trash);
    assert_eq!(sandbox.state_of(&trash).0, "leftover");
    let (summary, code) = sandbox.gc_json(&[]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![trash]);
}

#[test]
fn hundreds_of_stale_roots_are_all_reclaimed_under_a_low_descriptor_limit() {
    let sandbox = Sandbox::new();
    let template = RootSpec {
        files: 1,
        ..RootSpec::stale(&sandbox)
    };
    let n = 300;
    for _ in 0..n {
        RootSpec {
            run_id: new_run_id(),
            ..template.clone()
        }
        .create(&sandbox);
    }
    // Desktop sessions often have a soft limit of 1024 descriptors; the seed bug had 9,272 roots.
    let out = std::process::Command::new("sh")
        .args(["-c", r#"ulimit -n 128 && exec "$0" "$@""#, bin()])
        .arg("--state-dir")
        .arg(&sandbox.ns)
        .args(["gc", "--json"])
        .output()
        .unwrap();
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{summary}");
    assert_eq!(summary["foreign"], 0, "{summary}");
    assert_eq!(summary["removed"], n, "{summary}");
    assert_eq!(sandbox.names(), Vec::<String>::new());
}

#[test]
fn a_cgroup_path_forged_into_a_marker_is_never_followed() {
    // The marker lives inside the run's own root, so the run may rewrite it: gc must treat its
    // `cgroup` as a claim, and write `cgroup.kill` only in a real cgroup v2 directory named
    // after the run below the cgroup2 mount, reached without symlinks or `..`.
    let sandbox = Sandbox::new();
    let victim = sandbox.outside("victim");
    fs::create_dir_all(victim.join("cgdir")).unwrap();
    let precious = victim.join("precious.txt");
    fs::write(&precious, "precious data").unwrap();
    std::os::unix::fs::symlink(&precious, victim.join("cgdir/cgroup.kill")).unwrap();
    std::os::unix::fs::symlink(&precious, victim.join("cgdir/cgroup.procs")).unwrap();
    let mount = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .find(|l| l.contains(" - cgroup2 "))
        .and_then(|l| l.split_whitespace().nth(4).map(std::path::PathBuf::from));
    type Forge = Box<dyn Fn(&str) -> std::path::PathBuf>;
    let mut forged: Vec<Forge> = Vec::new();
    // A symlink named like the run's cgroup, pointing at the fake cgroup directory.
    let v = victim.clone();
    forged.push(Box::new(move |id| {
        let link = v.join(format!("cleanroom-{id}"));
        std::os::unix::fs::symlink(v.join("cgdir"), &link).unwrap();
        link
    }));
    if let Some(mount) = mount {
        // A path that starts at the cgroup2 mount and climbs out of it with `..`.
        let v = victim.clone();
        forged.push(Box::new(move |id| {
            let target = v.join(format!("cleanroom-{id}"));
            std::os::unix::fs::symlink(v.join("cgdir"), &target).unwrap();
            let mut path = mount.clone();
            for _ in mount.components().skip(1) {
                path.push("..");
            }
            path.join(target.strip_prefix("/").unwrap())
        }));
    }
    for make in forged {
        let mut spec = RootSpec::stale(&sandbox);
        spec.cgroup = Some(make(&spec.run_id).display().to_string());
        let root = spec.create(&sandbox);
        let (summary, status) = sandbox.gc_json(&[]);
        assert_eq!(status, 0, "{summary}");
        assert!(!root.exists(), "the stale root itself is still reclaimed");
        assert_eq!(fs::read_to_string(&precious).unwrap(), "precious data");
    }
}

#[test]
fn a_removal_whose_final_rmdir_fails_keeps_its_marker_for_the_next_gc() {
    require_root("a_removal_whose_final_rmdir_fails_keeps_its_marker_for_the_next_gc");
    // A quarantined root of a dead run in a namespace made immutable: the walk empties it, but
    // the final rmdir from the namespace fails every time. The marker went last and must be
    // written back, or no later gc could ever prove the leftover is ours.
    let sandbox = Sandbox::new();
    let spec = RootSpec::stale(&sandbox);
    let trash = format!(".trash-{}", spec.name());
    let leftover = spec.create_as(&sandbox, &trash);
    let immutable = ImmutableGuard::set(&sandbox.ns);
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 1, "{summary}");
    let errs = errors(&summary);
    assert!(
        errs.iter()
            .any(|e| e.contains(&leftover.display().to_string())
                && e.contains("Operation not permitted")),
        "{summary}"
    );
    let left: Vec<String> = fs::read_dir(&leftover)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec![MARKER.to_string()], "the walk empties the tree");
    let marker: serde_json::Value =
        serde_json::from_slice(&fs::read(leftover.join(MARKER)).unwrap()).unwrap();
    assert_eq!(marker["run_id"], spec.run_id.as_str(), "{marker}");
    // Written back at once, not only when giving up: a gc killed while it waits to retry leaves
    // the proof too. Its only sleep here is the pause between two attempts.
    let mut gc = sandbox
        .command(&["gc"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let wchan = format!("/proc/{}/wchan", gc.id());
    let pausing = wait_until(Duration::from_secs(20), || {
        fs::read_to_string(&wchan).is_ok_and(|w| w.contains("nanosleep"))
    });
    gc.kill().unwrap();
    gc.wait().unwrap();
    assert!(pausing, "gc never paused between two attempts");
    assert!(
        leftover.join(MARKER).is_file(),
        "a gc killed between two attempts left the leftover without its marker"
    );
    drop(immutable);
    assert_eq!(sandbox.state_of(&trash).0, "leftover");
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![trash]);
    assert_eq!(sandbox.names(), Vec::<String>::new());
}

/// A run whose own removal cannot finish: `cleanroom run --report FILE -- sh -c "PREFIX && …"`
/// writes `$HOME/pinned`, which the test makes immutable (`chattr +i`) before letting the command
/// end with `status`. Returns the run's output, its report, its root's path and the guard (drop it
/// to make the leftover removable).
fn run_with_a_pinned_file(
    sandbox: &Sandbox,
    prefix: &str,
    status: u8,
) -> (
    std::process::Output,
    serde_json::Value,
    std::path::PathBuf,
    ImmutableGuard,
) {
    let report = sandbox.outside(&unique("report"));
    let script = format!(
        r#"{prefix} && echo x > "$HOME/pinned" && : > "$HOME/ready"
while [ ! -e "$HOME/go" ]; do sleep 0.05; done; exit {status}"#
    );
    let report_arg = report.to_str().unwrap();
    let child = spawn_run(
        sandbox,
        &["--report", report_arg, "--", "sh", "-c", &script],
    );
    let mut reaper = Reaper::of(child);
    let root = wait_for_root(sandbox);
    let ready = wait_until(Duration::from_secs(10), || root.join("home/ready").exists());
    assert!(ready, "the run did not start");
    let immutable =
        ImmutableGuard::pin(&root.join("home/pinned"), &sandbox.outside(&unique("pin")));
    fs::write(root.join("home/go"), "").unwrap();
    let out = reaper.child.take().unwrap().wait_with_output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&fs::read(&report).unwrap()).unwrap();
    (out, report, root, immutable)
}

#[test]
fn a_runs_own_removal_retries_a_bounded_number_of_times_and_keeps_the_commands_status() {
    require_root(
        "a_runs_own_removal_retries_a_bounded_number_of_times_and_keeps_the_commands_status",
    );
    let sandbox = Sandbox::new();
    let (out, report, root, immutable) = run_with_a_pinned_file(&sandbox, "true", 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "a failed cleanup changed the status: {stderr}"
    );
    assert!(stderr.contains("cleanup incomplete"), "{stderr}");
    let cleanup = &report["cleanup"];
    assert_eq!(cleanup["status"], "leftover", "{cleanup}");
    // One walk and five retries (10, 50, 150, 400, 1000 ms apart): bounded, then it gives up.
    assert_eq!(cleanup["attempts"], 6, "{cleanup}");
    let trash = sandbox.ns.join(format!(
        ".trash-{}",
        root.file_name().unwrap().to_str().unwrap()
    ));
    assert!(
        trash.join(MARKER).is_file(),
        "the leftover must keep its marker"
    );
    drop(immutable);
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 0, "{summary}");
    assert_eq!(sandbox.names(), Vec::<String>::new());
}

#[test]
fn an_orphan_holding_its_roots_lock_after_the_runner_died_is_killed_and_the_root_reclaimed() {
    // Issue 10 item 5: the lock was taken for a live owner, and the root kept forever.
    let script = r#"flock -s "$CLEANROOM_ROOT" sh -c 'sleep 300; :' "$0-flock" &
echo up > "$HOME/up"
sleep 300"#;
    for (sandbox, contain) in rungs() {
        let left = kill_runner_of(&sandbox, &["--contain", contain], script, 5);
        let (state, reason) = sandbox.state_of(&left.name);
        assert_eq!(state, "stale", "{contain}: {reason}");
        assert!(
            reason.contains("its lock is held by processes it left"),
            "{reason}"
        );
        let (summary, status) = sandbox.gc_json(&[]);
        assert_eq!(status, 0, "{contain}: {summary}");
        assert_eq!(
            removed_names(&summary),
            vec![left.name.clone()],
            "{summary}"
        );
        assert!(!left.root.exists());
        let survivors: Vec<_> = left.processes.iter().filter(|p| is_alive(**p)).collect();
        assert!(
            survivors.is_empty(),
            "{contain}: survived gc: {survivors:?}"
        );
        assert_eq!(sandbox.names(), Vec::<String>::new());
    }
}

#[test]
fn a_lock_held_by_a_process_outside_a_dead_run_keeps_its_root_and_names_the_holder() {
    // The lock alone proves liveness: an owner that looks dead while its lock is held by a
    // process that is not the run's leaves the root alone (reported distinctly).
    let sandbox = Sandbox::new();
    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    let (holder, holder_pid) = hold_lock_outside_the_run(&root);
    let before = snapshot(&sandbox.ns);
    let (state, reason) = sandbox.state_of(&spec.name());
    assert_eq!(state, "locked", "{reason}");
    assert!(reason.contains(&format!("pid {holder_pid} ")), "{reason}");
    let listed = &sandbox.list(false)[&spec.name()];
    assert_eq!(listed["lock_holders"][0]["pid"], holder_pid, "{listed}");
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 0, "{summary}");
    assert_eq!(summary["removed"], 0, "{summary}");
    assert_eq!(
        summary["locked"][0]["name"],
        spec.name().as_str(),
        "{summary}"
    );
    assert_eq!(
        summary["locked"][0]["holders"][0]["pid"], holder_pid,
        "{summary}"
    );
    let out = sandbox.output(&["gc"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("left {}", root.display())),
        "{stdout}"
    );
    assert_eq!(before, snapshot(&sandbox.ns), "a locked root was touched");
    drop(holder);
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![spec.name()]);
}

#[test]
fn a_forged_trash_entry_never_kills_the_live_run_it_names() {
    // Issue 10 item 6: a `.trash-run-<live id>` with a dead owner made gc kill the live run (and,
    // as root, write `cgroup.kill` of its cgroup). Also from another state directory.
    let script = r#"echo up > "$HOME/up"; while [ ! -e "$HOME/go" ]; do sleep 0.05; done"#;
    for (sandbox, contain) in rungs() {
        let child = spawn_run(&sandbox, &["--contain", contain, "--", "sh", "-c", script]);
        let mut reaper = Reaper::of(child);
        let root = wait_for_root(&sandbox);
        assert!(wait_until(Duration::from_secs(10), || root
            .join("home/up")
            .exists()));
        reaper.processes = descendants(reaper.child.as_ref().unwrap().id() as i32);
        let live: serde_json::Value =
            serde_json::from_slice(&fs::read(root.join(MARKER)).unwrap()).unwrap();
        let forged = RootSpec {
            run_id: live["run_id"].as_str().unwrap().to_string(),
            cgroup: live["cgroup"].as_str().map(str::to_string),
            ..RootSpec::stale(&sandbox)
        };
        let trash = format!(".trash-{}", forged.name());
        let forged_root = forged.create_as(&sandbox, &trash);
        let elsewhere = if sandbox.user.is_some() {
            Sandbox::for_nobody()
        } else {
            Sandbox::new()
        };
        forged.create(&elsewhere);
        for ns in [&sandbox, &elsewhere] {
            let (summary, status) = ns.gc_json(&[]);
            assert_eq!(status, 0, "{contain}: {summary}");
            assert_eq!(summary["removed"], 0, "{contain}: {summary}");
            assert_eq!(
                summary["killed"],
                serde_json::json!([]),
                "{contain}: {summary}"
            );
        }
        let (state, reason) = sandbox.state_of(&trash);
        assert_eq!(state, "live", "{reason}");
        assert!(reason.contains("not provably dead"), "{reason}");
        let (state, reason) = elsewhere.state_of(&forged.name());
        assert_eq!(state, "live", "{reason}");
        assert!(reason.contains("outside this state directory"), "{reason}");
        fs::write(root.join("home/go"), "").unwrap();
        let out = reaper.child.take().unwrap().wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{contain}: the live run was killed: {out:?}"
        );
        fs::remove_dir_all(&forged_root).unwrap();
        assert_eq!(sandbox.names(), Vec::<String>::new());
    }
}

/// The command stops its own watchdog (SIGSTOP, same uid), then its runner is SIGKILLed: the
/// stopped watchdog never wakes to kill the run, and it would stay `T` forever. gc, which kills
/// what the dead run left, kills its watchdog too (named in `killed`; `--dry-run` only names
/// it), on the cgroup and session rungs and unprivileged.
#[test]
fn a_dead_runs_stopped_watchdog_is_killed_by_gc() {
    stopped_watchdog_of_a_dead_run_is_killed_by_gc(false);
}

/// The same with `--keep-root`: a plain gc keeps the directory, not the processes: the stopped
/// watchdog and the orphans of the dead run are killed and the root stays until `gc --kept`.
#[test]
fn a_kept_root_keeps_its_directory_but_gc_kills_what_its_dead_run_left() {
    stopped_watchdog_of_a_dead_run_is_killed_by_gc(true);
}

fn stopped_watchdog_of_a_dead_run_is_killed_by_gc(keep: bool) {
    let script = r#"for i in $(seq 1 1000); do
  wd=$(pgrep -f "^cleanroom watchdog $CLEANROOM_RUN_ID") && break
  sleep 0.01
done
kill -STOP $wd
echo $wd > "$HOME/wd"
echo up > "$HOME/up"
sleep 300"#;
    for (sandbox, contain) in rungs() {
        let mut args = vec!["--contain", contain];
        if keep {
            args.push("--keep-root");
        }
        args.extend(["--", "sh", "-c", script]);
        let child = spawn_run(&sandbox, &args);
        let mut reaper = Reaper::of(child);
        let root = wait_for_root(&sandbox);
        assert!(
            wait_until(Duration::from_secs(10), || root.join("home/up").exists()),
            "{contain}: the command did not start"
        );
        let pid: i32 = fs::read_to_string(root.join("home/wd"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let watchdog = Owner {
            pid,
            start_time: start_time(pid).unwrap(),
        };
        let runner = reaper.child.as_ref().unwrap().id() as i32;
        reaper.processes = descendants(runner);
        assert!(
            reaper.processes.contains(&watchdog),
            "{contain}: not the runner's child"
        );
        assert!(
            wait_until(Duration::from_secs(10), || state(pid) == Some('T')),
            "{contain}: the watchdog was not stopped"
        );
        let child = reaper.child.as_mut().unwrap();
        child.kill().unwrap(); // SIGKILL to the runner alone
        child.wait().unwrap();
        let killed = |summary: &serde_json::Value| {
            summary["killed"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["pid"] == pid && k["start_time"] == watchdog.start_time)
        };
        let (summary, status) = sandbox.gc_json(&["--dry-run"]);
        assert_eq!(status, 0, "{contain}: {summary}");
        assert!(killed(&summary), "{contain}: not named: {summary}");
        assert_eq!(state(pid), Some('T'), "{contain}: the dry run changed it");
        let (summary, status) = sandbox.gc_json(&[]);
        assert_eq!(status, 0, "{contain}: {summary}");
        let (removed, kept) = if keep { (0, 1) } else { (1, 0) };
        assert_eq!(summary["removed"], removed, "{contain}: {summary}");
        assert_eq!(summary["kept"], kept, "{contain}: {summary}");
        assert!(killed(&summary), "{contain}: not named: {summary}");
        assert!(
            wait_until(Duration::from_secs(10), || !is_alive(watchdog)),
            "{contain}: the stopped watchdog {pid} outlived gc"
        );
        let left: Vec<Owner> = reaper
            .processes
            .iter()
            .copied()
            .filter(|p| is_alive(*p))
            .collect();
        assert!(left.is_empty(), "{contain}: left after gc: {left:?}");
        if keep {
            assert!(
                root.join("home/up").exists(),
                "{contain}: the kept root went"
            );
            let (summary, status) = sandbox.gc_json(&[]);
            assert_eq!(status, 0, "{contain}: {summary}");
            assert_eq!(
                summary["killed"],
                serde_json::json!([]),
                "{contain}: {summary}"
            );
            let (summary, status) = sandbox.gc_json(&["--kept"]);
            assert_eq!(status, 0, "{contain}: {summary}");
            assert_eq!(summary["removed"], 1, "{contain}: {summary}");
        }
        assert_eq!(sandbox.names(), Vec::<String>::new(), "{contain}");
    }
}

/// A watchdog stopped while its runner lives belongs to a live run: even when gc is made to
/// judge that run dead (its run id forged into another state directory with a dead owner, and
/// no process of the run carrying the tag that would tell), the watchdog holds a pidfd on its
/// parent, the live runner, and is left alone; the runner notices and ends it.
#[test]
fn a_live_runs_stopped_watchdog_is_never_killed_by_gc() {
    for (sandbox, contain) in rungs() {
        let child = spawn_run(
            &sandbox,
            &["--contain", contain, "--", "env", "-i", "sleep", "300"],
        );
        let mut reaper = Reaper::of(child);
        let root = wait_for_root(&sandbox);
        let runner = reaper.child.as_ref().unwrap().id() as i32;
        let mut watchdogs = Vec::new();
        let started = wait_until(Duration::from_secs(10), || {
            watchdogs = twins_of(runner);
            watchdogs.len() == 1 && descendants(runner).len() == 2
        });
        assert!(started, "{contain}: the run did not start");
        reaper.processes = descendants(runner);
        signal_all(&watchdogs, rustix::process::Signal::STOP);
        assert!(wait_until(Duration::from_secs(10), || state(
            watchdogs[0].pid
        ) == Some('T')));
        let live: serde_json::Value =
            serde_json::from_slice(&fs::read(root.join(MARKER)).unwrap()).unwrap();
        let elsewhere = if sandbox.user.is_some() {
            Sandbox::for_nobody()
        } else {
            Sandbox::new()
        };
        let forged = RootSpec {
            run_id: live["run_id"].as_str().unwrap().to_string(),
            ..RootSpec::stale(&elsewhere)
        };
        forged.create(&elsewhere);
        let (summary, status) = elsewhere.gc_json(&[]);
        assert_eq!(status, 0, "{contain}: {summary}");
        assert_eq!(
            summary["killed"],
            serde_json::json!([]),
            "{contain}: {summary}"
        );
        assert!(
            is_alive(watchdogs[0]),
            "{contain}: the live run's watchdog was killed"
        );
        assert_eq!(state(watchdogs[0].pid), Some('T'), "{contain}");
        // The run goes on; its command ends and the runner ends its stopped watchdog.
        let command: Vec<Owner> = descendants(runner)
            .into_iter()
            .filter(|p| !watchdogs.contains(p))
            .collect();
        signal_all(&command, rustix::process::Signal::KILL);
        let out = reaper.child.take().unwrap().wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(137), "{contain}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("was stopped"),
            "{contain}: {out:?}"
        );
        assert!(
            !is_alive(watchdogs[0]),
            "{contain}: the runner left its watchdog"
        );
        assert_eq!(sandbox.names(), Vec::<String>::new(), "{contain}");
    }
}

#[test]
fn a_trash_entry_whose_marker_names_another_run_is_foreign_and_kills_nothing() {
    let sandbox = Sandbox::new();
    let victim = RootSpec::stale(&sandbox);
    let tagged = std::process::Command::new("sleep")
        .arg("60")
        .env("CLEANROOM_RUN_ID", &victim.run_id)
        .spawn()
        .unwrap();
    let tagged_id = Owner {
        pid: tagged.id() as i32,
        start_time: start_time(tagged.id() as i32).unwrap(),
    };
    let _reaper = Reaper::of(tagged);
    let name = format!(".trash-{}", root_name(&new_run_id()));
    victim.create_as(&sandbox, &name);
    let (state, reason) = sandbox.state_of(&name);
    assert_eq!(state, "foreign", "{reason}");
    assert!(reason.contains("marker names another run"), "{reason}");
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 0, "{summary}");
    assert_eq!(summary["killed"], serde_json::json!([]), "{summary}");
    assert!(is_alive(tagged_id));
}

#[test]
fn every_run_start_reclaims_stale_roots_when_a_pass_is_due() {
    let sandbox = Sandbox::new();
    let mut stale: Vec<String> = (0..3)
        .map(|_| {
            let spec = RootSpec::stale(&sandbox);
            spec.create(&sandbox);
            spec.name()
        })
        .collect();
    stale.sort();
    // Each start of a run makes progress within its time budget (on a loaded machine a pass may
    // be cut short; the next run continues it).
    let mut removed = Vec::new();
    while removed.len() < stale.len() {
        let (out, report) = run_with_report(&sandbox, &["--", "true"]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let now = removed_names(&report["gc"]);
        assert!(
            !now.is_empty(),
            "a due pass removed nothing: {}",
            report["gc"]
        );
        removed.extend(now);
    }
    removed.sort();
    assert_eq!(removed, stale);
    assert_eq!(sandbox.names(), Vec::<String>::new());
    // The pass is made at most once a minute, so a short command does not pay for the
    // namespace; until then, what other runs leave waits.
    let later = RootSpec::stale(&sandbox);
    later.create(&sandbox);
    let (_, report) = run_with_report(&sandbox, &["--", "true"]);
    let not_run = report["gc"]["not_run"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(not_run.contains("less than a minute"), "{}", report["gc"]);
    assert_eq!(sandbox.names(), vec![later.name()]);
    make_pass_due(&sandbox);
    let (_, report) = run_with_report(&sandbox, &["--", "true"]);
    assert_eq!(
        removed_names(&report["gc"]),
        vec![later.name()],
        "{}",
        report["gc"]
    );
}

#[test]
fn a_pass_cut_short_by_its_budget_continues_at_the_next_run() {
    let sandbox = Sandbox::new();
    let n = 40; // more than the 32 removals one run start may make
    let template = RootSpec {
        files: 0,
        ..RootSpec::stale(&sandbox)
    };
    for _ in 0..n {
        RootSpec {
            run_id: new_run_id(),
            ..template.clone()
        }
        .create(&sandbox);
    }
    let (_, first) = run_with_report(&sandbox, &["--", "true"]);
    assert_eq!(first["gc"]["truncated"], true, "{}", first["gc"]);
    assert!(
        gc_state(&sandbox)["cursor"].is_string(),
        "{}",
        gc_state(&sandbox)
    );
    let mut removed = removed_names(&first["gc"]).len();
    for _ in 0..n {
        if removed == n {
            break;
        }
        let (_, next) = run_with_report(&sandbox, &["--", "true"]);
        let now = removed_names(&next["gc"]).len();
        assert!(
            now > 0,
            "a run due to continue made no progress: {}",
            next["gc"]
        );
        removed += now;
    }
    assert_eq!(removed, n);
    assert_eq!(sandbox.names(), Vec::<String>::new());
    assert!(
        gc_state(&sandbox)["cursor"].is_null(),
        "{}",
        gc_state(&sandbox)
    );
}

#[test]
fn a_stuck_leftover_costs_one_attempt_then_runs_skip_it_until_gc() {
    require_root("a_stuck_leftover_costs_one_attempt_then_runs_skip_it_until_gc");
    let sandbox = Sandbox::new();
    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::write(root.join("home/pinned"), "immutable\n").unwrap();
    let immutable =
        ImmutableGuard::pin(&root.join("home/pinned"), &sandbox.outside(&unique("pin")));
    let trash = format!(".trash-{}", spec.name());

    let (out, first) = run_with_report(&sandbox, &["--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let errs = errors(&first["gc"]);
    assert!(
        errs.len() == 1 && errs[0].contains(&trash),
        "{}",
        first["gc"]
    );
    assert_eq!(gc_state(&sandbox)["stuck"], serde_json::json!([trash]));

    // A minute later, the next pass skips it rather than paying for it again.
    make_pass_due(&sandbox);
    let (out, second) = run_with_report(&sandbox, &["--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(second["gc"]["not_run"].is_null(), "{}", second["gc"]);
    assert_eq!(second["gc"]["stuck_skipped"], serde_json::json!([trash]));
    assert_eq!(errors(&second["gc"]), Vec::<String>::new());

    // `cleanroom gc` is asked explicitly: it tries again.
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 1, "{summary}");
    drop(immutable);
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![trash]);
    assert_eq!(gc_state(&sandbox)["stuck"], serde_json::json!([]));
    assert_eq!(sandbox.names(), Vec::<String>::new());
}

#[test]
fn a_full_disk_while_writing_the_marker_leaves_nothing_behind() {
    require_root("a_full_disk_while_writing_the_marker_leaves_nothing_behind");
    let sandbox = Sandbox::new();
    let full = sandbox.outside("full");
    fs::create_dir(&full).unwrap();
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&full)
        .status()
        .unwrap();
    assert!(status.success(), "mount -t tmpfs failed");
    let _mount = MountGuard::below(sandbox.dir.path());
    let ns = full.join("ns");
    fs::create_dir(&ns).unwrap();
    fs::set_permissions(&ns, fs::Permissions::from_mode(0o700)).unwrap();
    // Fill the filesystem: directories still fit, the marker's data does not.
    let _ = fs::write(full.join("filler"), vec![0u8; 128 * 1024]);
    let out = std::process::Command::new(bin())
        .arg("--state-dir")
        .arg(&ns)
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("cannot write marker"), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    let left: Vec<_> = fs::read_dir(&ns).unwrap().collect();
    assert!(left.is_empty(), "a failed creation left {left:?}");
}

#[test]
fn what_a_failed_creation_leaves_is_reclaimed_once_a_minute_old() {
    // A creator that died (or failed) while making its root leaves a pending directory with a
    // damaged marker and empty layout directories: nothing in it can be lost, so gc removes it
    // (by rmdir and unlink, never recursively) once it is older than a minute. An empty pending
    // directory goes the same way; a younger one is its creator's; one with anything a run
    // could have made is never touched.
    let sandbox = Sandbox::new();
    let pending = |id: &str| format!(".pending-{}", root_name(id));
    let skeleton = |name: &str, marker: &str| make_skeleton(&sandbox, name, marker);
    let empty_marker = pending(&new_run_id());
    skeleton(&empty_marker, "");
    let cut_marker = pending(&new_run_id());
    skeleton(&cut_marker, "{\"format\":\"cleanroom-root-marker\",\"vers");
    let empty_dir = pending(&new_run_id());
    fs::create_dir(sandbox.ns.join(&empty_dir)).unwrap();
    // The shape this build creates (no XDG base directories), beside the older, larger one.
    let current_shape = pending(&new_run_id());
    let dir = sandbox.ns.join(&current_shape);
    fs::create_dir(&dir).unwrap();
    write_private(&dir.join(MARKER), "");
    for sub in cleanroom::root::LAYOUT_DIRS {
        fs::create_dir(dir.join(sub)).unwrap();
    }
    let young = pending(&current_run_id());
    skeleton(&young, "");
    let with_data = pending(&new_run_id());
    let dir = skeleton(&with_data, "");
    fs::write(dir.join("home/notes.txt"), "a file no creation makes\n").unwrap();
    let marker_dir = pending(&new_run_id());
    let dir = skeleton(&marker_dir, "");
    fs::remove_file(dir.join(MARKER)).unwrap();
    fs::create_dir(dir.join(MARKER)).unwrap();
    fs::write(dir.join(MARKER).join("inside"), "x").unwrap();

    let listed = sandbox.list(false);
    for name in [&empty_marker, &cut_marker, &empty_dir, &current_shape] {
        assert_eq!(
            listed[name]["state"], "leftover",
            "{name}: {}",
            listed[name]
        );
    }
    assert_eq!(listed[&young]["state"], "live", "{}", listed[&young]);
    for name in [&with_data, &marker_dir] {
        assert_eq!(
            listed[name]["state"], "unproven",
            "{name}: {}",
            listed[name]
        );
    }
    let kept_before = (
        snapshot(&sandbox.ns.join(&with_data)),
        snapshot(&sandbox.ns.join(&marker_dir)),
        snapshot(&sandbox.ns.join(&young)),
    );
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 0, "{summary}");
    let mut want = vec![empty_marker, cut_marker, empty_dir, current_shape];
    want.sort();
    assert_eq!(removed_names(&summary), want, "{summary}");
    let mut left = vec![with_data.clone(), marker_dir.clone(), young.clone()];
    left.sort();
    assert_eq!(sandbox.names(), left);
    let kept_after = (
        snapshot(&sandbox.ns.join(&with_data)),
        snapshot(&sandbox.ns.join(&marker_dir)),
        snapshot(&sandbox.ns.join(&young)),
    );
    assert_eq!(kept_before, kept_after);
}

#[test]
fn a_run_that_deletes_or_replaces_its_marker_is_still_cleaned_up() {
    require_root("a_run_that_deletes_or_replaces_its_marker_is_still_cleaned_up");
    let sandbox = Sandbox::new();
    let m = "\"$CLEANROOM_ROOT/cleanroom-root.json\"";
    for script in [
        format!("rm {m} && mkdir {m} && echo x > {m}/inside"),
        format!("rm {m}"),
        format!("echo '{{}}' > {m}.new && mv {m}.new {m}"),
        format!("ln {m} \"$HOME/second-link\""),
    ] {
        let out = sandbox.output(&["run", "--", "sh", "-c", &script]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{script}: {stderr}");
        assert!(!stderr.contains("cleanup incomplete"), "{script}: {stderr}");
        assert_eq!(sandbox.names(), Vec::<String>::new(), "{script}");
    }
    // When the removal cannot finish, the leftover gets its true marker back, so gc can prove it
    // is ours and finish it later.
    let (out, _, root, immutable) =
        run_with_a_pinned_file(&sandbox, &format!("rm {m} && mkdir {m}"), 0);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let name = root.file_name().unwrap().to_str().unwrap().to_string();
    let trash = format!(".trash-{name}");
    assert_eq!(
        sandbox.state_of(&trash).0,
        "leftover",
        "{:?}",
        sandbox.list(false)
    );
    drop(immutable);
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 0, "{summary}");
    assert_eq!(sandbox.names(), Vec::<String>::new());
}

#[test]
fn a_dead_runs_root_without_its_marker_is_reported_with_the_command_that_removes_it() {
    let sandbox = Sandbox::new();
    let script = r#"rm "$CLEANROOM_ROOT/cleanroom-root.json"; mkdir "$CLEANROOM_ROOT/cleanroom-root.json"
echo up > "$HOME/up"; sleep 300"#;
    let left = kill_runner_of(&sandbox, &["--contain", "session"], script, 2);
    let (state, reason) = sandbox.state_of(&left.name);
    assert_eq!(state, "unproven", "{reason}");
    let remove = format!("rm -rf --one-file-system -- {}", left.root.display());
    assert!(reason.contains(&remove), "{reason}");
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 0, "{summary}");
    assert_eq!(
        summary["unproven"],
        serde_json::json!([left.name]),
        "{summary}"
    );
    assert!(
        left.root.join("home/up").exists(),
        "an unproven root was touched"
    );
    signal_all(&left.processes, rustix::process::Signal::KILL);
    fs::remove_dir_all(&left.root).unwrap();
}

#[test]
fn list_has_a_header_and_escapes_names_commands_and_reasons() {
    let sandbox = Sandbox::new();
    let evil = [
        "evil\nrun-forged line",
        "\u{1b}[2Jclear",
        "tab\there",
        "quote's",
    ];
    for name in evil {
        fs::create_dir(sandbox.ns.join(name)).unwrap();
    }
    let bad_bytes = std::ffi::OsStr::from_bytes(b"bytes-\xff\xfe");
    fs::create_dir(sandbox.ns.join(bad_bytes)).unwrap();
    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    let marker = fs::read_to_string(root.join(MARKER)).unwrap();
    let marker = marker.replace("test-made root", "line one\\nline two\\u001b[31m");
    fs::remove_file(root.join(MARKER)).unwrap();
    write_private(&root.join(MARKER), &marker);
    let out = sandbox.output(&["list"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + evil.len() + 2, "{text}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        &header[..5],
        ["STATE", "PID", "AGE", "SIZE", "NAME"],
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "{text:?}");
    for shown in [
        "$'evil\\nrun-forged line'",
        "$'\\x1b[2Jclear'",
        "$'tab\\there'",
        "$'quote\\'s'",
        "$'bytes-\\xff\\xfe'",
        "line one\\nline two\\u{1b}[31m",
    ] {
        assert!(text.contains(shown), "{shown} not in {text}");
    }
}

/// `list --json` never loses a name: names that are not UTF-8 keep `name` (with U+FFFD) and
/// carry their bytes in `name_bytes`, so two of them never come out the same; a state directory
/// whose path is not UTF-8 is listed (with `state_dir_bytes`) instead of crashing the listing.
#[test]
fn list_json_gives_every_name_without_loss() {
    let sandbox = Sandbox::new();
    let spec = RootSpec::stale(&sandbox);
    spec.create(&sandbox);
    for name in [&b"bytes-\xff"[..], b"bytes-\xfe", b"plain-\xc3\xa9"] {
        fs::create_dir(sandbox.ns.join(std::ffi::OsStr::from_bytes(name))).unwrap();
    }
    let out = sandbox.output(&["list", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entries = listing["entries"].as_array().unwrap();
    let find = |bytes: &[u8]| {
        entries
            .iter()
            .find(|e| {
                let exact =
                    e["name"].as_str().unwrap().as_bytes() == bytes && e["name_bytes"].is_null();
                let listed: Option<Vec<u8>> = e["name_bytes"]
                    .as_array()
                    .map(|b| b.iter().map(|n| n.as_u64().unwrap() as u8).collect());
                exact || listed.as_deref() == Some(bytes)
            })
            .unwrap_or_else(|| panic!("{bytes:?} not listed: {listing}"))
    };
    let ff = find(b"bytes-\xff");
    let fe = find(b"bytes-\xfe");
    assert_eq!(ff["name"], "bytes-\u{fffd}");
    assert_eq!(fe["name"], "bytes-\u{fffd}");
    assert_ne!(ff["name_bytes"], fe["name_bytes"]);
    assert_eq!(
        find("plain-\u{e9}".as_bytes())["name_bytes"],
        serde_json::Value::Null
    );
    assert_eq!(
        find(spec.name().as_bytes())["name_bytes"],
        serde_json::Value::Null
    );
    assert_eq!(listing["state_dir"], sandbox.ns.to_str().unwrap());
    assert_eq!(listing["state_dir_bytes"], serde_json::Value::Null);

    let odd = sandbox
        .outside("")
        .join(std::ffi::OsStr::from_bytes(b"ns-\xff"));
    fs::create_dir(&odd).unwrap();
    fs::set_permissions(&odd, fs::Permissions::from_mode(0o700)).unwrap();
    let out = std::process::Command::new(bin())
        .arg("--state-dir")
        .arg(&odd)
        .args(["list", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bytes: Vec<u8> = listing["state_dir_bytes"]
        .as_array()
        .unwrap_or_else(|| panic!("{listing}"))
        .iter()
        .map(|n| n.as_u64().unwrap() as u8)
        .collect();
    assert_eq!(bytes, odd.as_os_str().as_bytes());
}

/// `list` of a state directory that does not exist says so on stderr (and still prints an
/// empty listing, exit 0): an empty table alone reads as "nothing is left here".
#[test]
fn list_of_a_state_dir_that_does_not_exist_says_so() {
    let sandbox = Sandbox::new();
    let missing = sandbox.outside("no-such-ns");
    for args in [&["list"][..], &["list", "--json"]] {
        let out = std::process::Command::new(bin())
            .arg("--state-dir")
            .arg(&missing)
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("{} does not exist", missing.display())),
            "{args:?}: {stderr}"
        );
        assert!(!missing.exists(), "{args:?} created it");
    }
}

#[test]
fn gc_prints_a_summary_and_each_removed_root_only_with_verbose() {
    let sandbox = Sandbox::new();
    let make = || {
        let specs: Vec<RootSpec> = (0..3).map(|_| RootSpec::stale(&sandbox)).collect();
        for spec in &specs {
            spec.create(&sandbox);
        }
        specs
    };
    make();
    let out = sandbox.output(&["gc"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.starts_with("scanned 3: removed 3,"), "{stdout}");
    let specs = make();
    let out = sandbox.output(&["gc", "-v"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for spec in &specs {
        let line = format!("removed {}", sandbox.ns.join(spec.name()).display());
        assert!(stdout.lines().any(|l| l == line), "{stdout}");
    }
}

#[test]
fn gc_kills_a_process_whose_leader_called_pthread_exit_after_its_runner_was_sigkilled() {
    for (sandbox, contain) in rungs() {
        let payload = sandbox.outside("threadexit");
        fs::create_dir(&payload).unwrap();
        fs::set_permissions(&payload, fs::Permissions::from_mode(0o755)).unwrap();
        let bin = common::compile_c(&payload, "threadexit", common::THREAD_EXIT_C);
        // Ready once the leader is a zombie whose worker thread runs.
        let script = format!(
            "\"{}\" threadexit \"$0\" &\necho $! > \"$HOME/te.pid\"\n\
             while ! grep -q ') Z' /proc/$!/stat; do sleep 0.02; done\n\
             echo up > \"$HOME/up\"\nsleep 300",
            bin.display()
        );
        let crashed = kill_runner_of(&sandbox, &["--contain", contain], &script, 2);
        let pid: i32 = fs::read_to_string(crashed.root.join("home/te.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let leader = crashed
            .processes
            .iter()
            .copied()
            .find(|p| p.pid == pid)
            .expect("the payload is one of the run's processes");
        assert!(is_alive(leader), "{contain}: the payload must be alive");
        let out = sandbox.output(&["gc", "-v"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{contain}: {out:?}");
        assert!(
            stdout.contains(&format!("killed orphan pid {pid}:")),
            "{contain}: gc must name the thread group {pid}: {stdout}"
        );
        assert!(
            !is_alive(leader),
            "{contain}: the thread group {pid} survived gc"
        );
        let survivors: Vec<_> = crashed.processes.iter().filter(|p| is_alive(**p)).collect();
        assert!(
            survivors.is_empty(),
            "{contain}: survived gc: {survivors:?}"
        );
        assert_eq!(sandbox.names(), Vec::<String>::new());
    }
}

#[test]
fn only_a_pending_skeleton_of_empty_layout_directories_is_reclaimed_without_a_marker() {
    // What may go without a marker is exactly what `Root::create` makes before a run: the same
    // shape under a published name, a marker that is not a regular file, a file or an unknown
    // directory among the layout directories, or a layout directory that is a symlink is
    // unproven, and nothing in it or behind it is touched.
    let sandbox = Sandbox::new();
    let pending = || format!(".pending-{}", root_name(&new_run_id()));
    let published = root_name(&new_run_id());
    make_skeleton(&sandbox, &published, "");
    let fifo_marker = pending();
    let marker = make_skeleton(&sandbox, &fifo_marker, "").join(MARKER);
    fs::remove_file(&marker).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &marker,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let config_file = pending();
    let dir = make_skeleton(&sandbox, &config_file, "");
    fs::write(
        dir.join("xdg/config/settings.toml"),
        "a file no creation makes\n",
    )
    .unwrap();
    let unknown_dir = pending();
    fs::create_dir(make_skeleton(&sandbox, &unknown_dir, "").join("xdg/music")).unwrap();
    let linked_xdg = pending();
    let elsewhere = sandbox.outside("xdg-elsewhere");
    fs::create_dir_all(elsewhere.join("config")).unwrap();
    let dir = make_skeleton(&sandbox, &linked_xdg, "");
    fs::remove_dir_all(dir.join("xdg")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join("xdg")).unwrap();
    let before = (snapshot(&sandbox.ns), snapshot(&elsewhere));

    let listed = sandbox.list(false);
    for name in [
        &published,
        &fifo_marker,
        &config_file,
        &unknown_dir,
        &linked_xdg,
    ] {
        assert_eq!(
            listed[name]["state"], "unproven",
            "{name}: {}",
            listed[name]
        );
    }
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 0, "{summary}");
    assert_eq!(summary["removed"], 0, "{summary}");
    assert_eq!(before, (snapshot(&sandbox.ns), snapshot(&elsewhere)));
    assert!(elsewhere.join("config").is_dir());
}

#[test]
fn orphans_are_killed_only_when_every_entry_of_their_run_is_provably_dead() {
    // Every entry of a run id (`run-`, `.pending-run-`, `.trash-run-`) speaks for the run: one
    // whose owner is alive protects the run's processes even while its lock is free, and entries
    // that are all provably dead (owner gone, lock free) protect nothing.
    let sandbox = Sandbox::new();
    let alive = RootSpec::stale(&sandbox).owned_by(own_process());
    let _held = hold_as_owner(&alive.create(&sandbox));
    let alive_trash = format!(".trash-{}", alive.name());
    RootSpec {
        run_id: alive.run_id.clone(),
        ..RootSpec::stale(&sandbox)
    }
    .create_as(&sandbox, &alive_trash);
    let (_protected_reaper, protected) = tagged_sleep(&alive.run_id);
    let dead = RootSpec::stale(&sandbox);
    dead.create(&sandbox);
    let dead_trash = format!(".trash-{}", dead.name());
    dead.create_as(&sandbox, &dead_trash);
    let (_orphan_reaper, orphan) = tagged_sleep(&dead.run_id);
    let kept_before = snapshot(&sandbox.ns.join(&alive_trash));

    let (state, reason) = sandbox.state_of(&alive_trash);
    assert_eq!(state, "live", "{reason}");
    assert!(reason.contains("not provably dead"), "{reason}");
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 0, "{summary}");
    assert!(
        is_alive(protected),
        "a process of a live run was killed: {summary}"
    );
    assert!(!is_alive(orphan), "a dead run's orphan survived: {summary}");
    let mut removed = vec![dead.name(), dead_trash];
    removed.sort();
    assert_eq!(removed_names(&summary), removed, "{summary}");
    let mut left = vec![alive.name(), alive_trash.clone()];
    left.sort();
    assert_eq!(sandbox.names(), left);
    assert_eq!(kept_before, snapshot(&sandbox.ns.join(&alive_trash)));
}

#[test]
fn a_kept_roots_lock_held_by_its_orphan_keeps_the_root_not_the_orphan() {
    // A plain gc keeps a `--keep-root` run's directory untouched, but not what its dead run
    // left, even the process holding its lock; the root waits for `gc --kept`. A quarantined
    // root is half removed, kept or not, so its orphan is killed and it is finished. `list`
    // kills nothing.
    let sandbox = Sandbox::new();
    let kept = RootSpec {
        keep: true,
        age_secs: 7200,
        ..RootSpec::stale(&sandbox)
    };
    let kept_root = kept.create(&sandbox);
    let (_kept_reaper, kept_holder) = hold_lock(&kept_root, Some(&kept.run_id));
    let trash = RootSpec {
        keep: true,
        ..RootSpec::stale(&sandbox)
    };
    let trash_name = format!(".trash-{}", trash.name());
    let trash_root = trash.create_as(&sandbox, &trash_name);
    let (_trash_reaper, trash_holder) = hold_lock(&trash_root, Some(&trash.run_id));
    let alive = |pid: i32| start_time(pid).is_some_and(|t| is_alive(Owner { pid, start_time: t }));

    let listed = sandbox.list(false);
    let entry = &listed[&kept.name()];
    assert_eq!(entry["state"], "kept", "{entry}");
    assert!(
        entry["reason"]
            .as_str()
            .unwrap()
            .contains("its lock is held"),
        "{entry}"
    );
    let age = entry["age_secs"].as_u64().unwrap();
    assert!((7200..7260).contains(&age), "{entry}");
    assert!(alive(kept_holder), "list killed a kept run's process");
    let before = snapshot(&kept_root);
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![trash_name], "{summary}");
    assert!(!alive(trash_holder), "{summary}");
    assert!(
        wait_until(Duration::from_secs(10), || !alive(kept_holder)),
        "plain gc left a dead kept run's orphan: {summary}"
    );
    assert_eq!(summary["kept"], 1, "{summary}");
    assert_eq!(before, snapshot(&kept_root));
    let (summary, status) = sandbox.gc_json(&["--kept"]);
    assert_eq!(status, 0, "{summary}");
    assert_eq!(removed_names(&summary), vec![kept.name()], "{summary}");
}

#[test]
fn a_lock_held_outside_a_dead_run_keeps_its_root_though_the_run_left_processes() {
    // The run's own leftovers are killed, but the lock is not theirs: the root stays, reported
    // as held by a process outside the run (not as one gc would reclaim).
    let sandbox = Sandbox::new();
    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    let (_holder, holder_pid) = hold_lock_outside_the_run(&root);
    let (_orphan_reaper, orphan) = tagged_sleep(&spec.run_id);
    let (state, reason) = sandbox.state_of(&spec.name());
    assert_eq!(state, "locked", "{reason}");
    assert!(reason.contains(&format!("pid {holder_pid} ")), "{reason}");
    assert!(reason.contains("not part of the run"), "{reason}");
    let before = snapshot(&root);
    let (summary, status) = sandbox.gc_json(&[]);
    assert_eq!(status, 0, "{summary}");
    assert_eq!(summary["removed"], 0, "{summary}");
    assert_eq!(
        summary["locked"][0]["name"],
        spec.name().as_str(),
        "{summary}"
    );
    assert!(
        !is_alive(orphan),
        "the dead run's orphan survived: {summary}"
    );
    assert_eq!(before, snapshot(&root));
}

/// Review s2 finding 3: a command may write anything into the user lock directory. `list` shows
/// its size, `gc` removes what cannot be lock state (and the files of locks nobody holds), never
/// what a live holder published nor a symbolic link's target, and lock names that junk had made
/// unusable (`x.lock` a directory, `y.lock` a symbolic link) work again. Root and nobody.
#[test]
fn gc_removes_what_a_command_left_in_locks_and_keeps_a_held_lock() {
    let mut sandboxes = vec![common::Sandbox::new("gc-locks")];
    if common::root_or_skip("the unprivileged case (a run as nobody)") {
        sandboxes.push(common::Sandbox::as_user("gc-locks-nobody", common::NOBODY));
    }
    for sandbox in sandboxes {
        gc_sweeps_locks(&sandbox);
    }
}

fn gc_sweeps_locks(sandbox: &common::Sandbox) {
    let scratch = sandbox.scratch();
    let victim = scratch.join("victim");
    fs::write(&victim, "keep me\n").unwrap();
    let (held, release) = (scratch.join("held"), scratch.join("release"));
    let holder = sandbox
        .command(&[
            "run",
            "--exclusive",
            "keep",
            "--",
            "sh",
            "-c",
            &format!(
                "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
                held.display(),
                release.display()
            ),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || held.exists()),
        "the holder never started"
    );
    let junk = format!(
        r#"set -e; L=$(dirname "$CLEANROOM_ROOT")/locks; U=$(id -u)
        mkdir "$L/x.lock"; ln -s '{victim}' "$L/y.lock"; mkdir -p "$L/jd/sub"; echo f > "$L/jd/sub/f"
        dd if=/dev/zero of="$L/big" bs=64k count=16 2>/dev/null; ln "$L/big" "$L/h.lock"
        for i in $(seq 50); do : > "$L/j$i"; done; echo data > "$L/d.lock"; mkfifo "$L/z.owner.$U.json"
        : > "$L/free.lock"; echo '{{}}' > "$L/free.owner.$U.json"; echo stale > "$L/free.token.$U""#,
        victim = victim.display()
    );
    sandbox.run(&[], &["sh", "-c", &junk]).assert_status(0);
    for (name, says) in [("x", "not a regular file"), ("y", "symbolic link")] {
        let refused = sandbox.run(&["--exclusive", name], &["true"]);
        refused.assert_status(125);
        assert!(refused.stderr.contains(says), "{}", refused.stderr);
        assert!(
            refused.stderr.contains("`cleanroom gc` removes it"),
            "{}",
            refused.stderr
        );
    }
    let list = sandbox.command(&["list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout).into_owned();
    let locks_line = list.lines().find(|l| l.starts_with("locks")).expect(&list);
    assert!(
        locks_line.contains("KiB") || locks_line.contains("MiB"),
        "{list}"
    );
    assert!(locks_line.contains("`cleanroom gc` removes them"), "{list}");
    let gc = sandbox.command(&["gc", "--json"]).output().unwrap();
    let text = String::from_utf8_lossy(&gc.stdout);
    assert!(
        gc.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    let summary: serde_json::Value = serde_json::from_str(&text).unwrap();
    let removed = summary["locks_removed"].as_array().expect(&text);
    for name in [
        "x.lock",
        "y.lock",
        "jd",
        "big",
        "h.lock",
        "j7",
        "d.lock",
        "free.token.",
        "z.owner.",
    ] {
        assert!(
            removed
                .iter()
                .any(|r| r.as_str().unwrap().starts_with(&format!("locks/{name}"))),
            "{name} not in {text}"
        );
    }
    let uid = fs::metadata(sandbox.state())
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();
    let mut left: Vec<String> = fs::read_dir(sandbox.state().join("locks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let expected = [
        "free.lock".to_string(),
        "keep.lock".into(),
        format!("keep.owner.{uid}.json"),
        format!("keep.token.{uid}"),
    ];
    assert_eq!(left, expected);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "keep me\n");
    for name in ["x", "y"] {
        sandbox
            .run(&["--exclusive", name], &["true"])
            .assert_status(0);
    }
    // The holder still holds `keep`: nobody else gets it.
    let waiter = sandbox.run(
        &["--exclusive", "keep", "--lock-timeout", "200ms"],
        &["true"],
    );
    waiter.assert_status(125);
    fs::write(&release, "").unwrap();
    sandbox.assert_runner_succeeds(holder, Duration::from_secs(30));
    sandbox.assert_namespace_holds_only(&["locks"]);
}

/// gc's sweep of `locks/` never reaches through a mount: a directory of the same filesystem
/// bound onto an entry there, or onto `locks/` itself, keeps every file (a bind mount shares
/// the device; only its mount id tells it from a plain directory). Nor does it remove another
/// user's lock file there.
#[test]
fn gc_never_sweeps_through_a_mount_in_or_on_the_lock_directory() {
    if !common::root_or_skip("bind mounts in a mount namespace of the test's own") {
        return;
    }
    let sandbox = common::Sandbox::new("gc-locks-mount");
    sandbox.run(&[], &["true"]).assert_status(0);
    let locks = sandbox.state().join("locks");
    let foreign = locks.join("other.lock");
    fs::write(&foreign, "").unwrap();
    std::os::unix::fs::chown(&foreign, Some(common::NOBODY), Some(common::NOBODY)).unwrap();
    let gc = sandbox.command(&["gc"]).output().unwrap();
    assert!(foreign.exists(), "{}", String::from_utf8_lossy(&gc.stderr));
    fs::remove_file(&foreign).unwrap();
    let victim = sandbox.scratch().join("victim");
    fs::create_dir_all(victim.join("sub")).unwrap();
    // Private, as a lock directory must be, so only the mount tells it from one.
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o700)).unwrap();
    let files = ["keep.txt", "sub/deep.txt", "db.owner.0.json", "db.token.0"];
    for file in files {
        fs::write(victim.join(file), "keep").unwrap();
    }
    fs::create_dir(locks.join("junk")).unwrap();
    for target in [locks.join("junk"), locks.clone()] {
        let script = format!(
            "mount --bind '{}' '{}' && exec \"$0\" --state-dir '{}' gc",
            victim.display(),
            target.display(),
            sandbox.state().display()
        );
        let gc = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .arg(common::BIN)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&gc.stderr);
        for file in files {
            let kept = fs::read_to_string(victim.join(file)).unwrap_or_default();
            assert_eq!(
                kept,
                "keep",
                "{} through {}: {stderr}",
                file,
                target.display()
            );
        }
        assert!(
            stderr.contains("mount point"),
            "{}: {stderr}",
            target.display()
        );
    }
}
