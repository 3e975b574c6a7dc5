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
//!   and another pid namespace are live, kept roots wait for `gc --kept`;
//! - a removal that fails part-way is reported (exit 1, the `.trash-` path) and finished by the
//!   next gc, even when the root was kept; an empty quarantine is removed, a marker-less one with
//!   contents is not; an unprivileged gc (and run) removes read-only trees it owns, the root's own
//!   directory included, and never chmods a mount it meets;
//! - hundreds of stale roots are all reclaimed under a low descriptor limit;
//! - `--dry-run` changes nothing; `--json` and `list --json/--sizes` report every field and state;
//! - the removal walk handles trees deeper than PATH_MAX, leaves bind mounts (and what they
//!   show) in place, and removes symlinks and hard links without touching their targets.
//!
//! Every test owns a private state directory on tmpfs; root-only cases (chattr, mounts, other
//! uids) skip themselves when not run as root, and every guard undoes what it did.

mod common;
mod gc_support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use gc_support::*;

/// The root, the processes and the cgroup a `cleanroom run` leaves when its runner is SIGKILLed.
struct Crashed {
    root: std::path::PathBuf,
    orphans: Vec<Owner>,
    marker: String,
    _reaper: Reaper,
}

/// Starts a run whose command leaves a `setsid` daemon and a background child, waits until they
/// are all up, then SIGKILLs the runner (only the runner).
fn crash_a_run(sandbox: &Sandbox, extra: &[&str]) -> Crashed {
    let marker = unique("orphan");
    let script = r#"setsid sh -c 'sleep 300; :' "$0-setsid" &
sh -c 'sleep 300; :' "$0-bg" &
echo up > "$HOME/up"
sleep 300"#;
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["--", "sh", "-c", script, &marker]);
    let child = spawn_run(sandbox, &args);
    let runner = child.id() as i32;
    let mut reaper = Reaper::of(child);
    let root = wait_for_root(sandbox);
    // The runner, the command, the two inner shells: all carry the marker in argv.
    // sh, the setsid sh and the background sh (with the marker in argv), and 3 sleeps.
    let up = wait_until(Duration::from_secs(10), || {
        root.join("home/up").exists()
            && processes_with(&marker).len() >= 4
            && descendants(runner).len() >= 6
    });
    assert!(up, "the run's processes did not start");
    let orphans = descendants(runner);
    reaper.processes = orphans.clone();
    let child = reaper.child.as_mut().unwrap();
    child.kill().unwrap(); // SIGKILL to the runner alone
    child.wait().unwrap();
    assert!(
        orphans.iter().any(|p| is_alive(*p)),
        "the runner's processes must outlive it for this test to mean anything"
    );
    Crashed {
        root,
        orphans,
        marker,
        _reaper: reaper,
    }
}

#[test]
fn sigkilled_runner_root_and_orphans_are_gone_after_gc() {
    let sandbox = Sandbox::new();
    let crashed = crash_a_run(&sandbox, &["--contain", "session"]);
    let name = crashed
        .root
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let (state, reason) = sandbox.state_of(&name);
    assert_eq!(state, "stale", "{reason}");

    let marked = processes_with(&crashed.marker);
    assert!(
        marked.len() >= 2,
        "the orphaned shells should be alive: {marked:?}"
    );

    let out = sandbox.output(&["gc"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
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
    let survivors: Vec<_> = crashed.orphans.iter().filter(|p| is_alive(**p)).collect();
    assert!(survivors.is_empty(), "survived gc: {survivors:?}");
    assert_eq!(sandbox.names(), Vec::<String>::new());
}

#[test]
fn sigkilled_runner_in_a_cgroup_is_reclaimed_with_its_cgroup() {
    if skip_unless_root("sigkilled_runner_in_a_cgroup_is_reclaimed_with_its_cgroup") {
        return;
    }
    let sandbox = Sandbox::new();
    let crashed = crash_a_run(&sandbox, &["--contain", "cgroup"]);
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
    assert!(crashed.orphans.iter().all(|p| !is_alive(*p)));
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
    let mut cases: Vec<(String, &str)> = Vec::new();
    let mut add = |name: String, reason: &'static str| cases.push((name, reason));

    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::remove_file(root.join(MARKER)).unwrap();
    add(spec.name(), "no marker");

    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::write(root.join(MARKER), "{\"format\":\"cleanroom-root-marker\",").unwrap();
    add(spec.name(), "marker is not valid");

    let spec = RootSpec {
        version: 2,
        ..RootSpec::stale(&sandbox)
    };
    spec.create(&sandbox);
    add(spec.name(), "unknown marker version 2");

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

    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::remove_file(root.join(MARKER)).unwrap();
    fs::create_dir(root.join(MARKER)).unwrap();
    add(spec.name(), "marker is not a regular file");

    // Not our naming at all, with a perfectly valid stale marker inside.
    let spec = RootSpec::stale(&sandbox);
    spec.create_as(&sandbox, "run-not-an-id");
    add("run-not-an-id".into(), "name is not cleanroom's");

    if is_root() {
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
    for (name, reason) in &cases {
        let e = &listed[name];
        assert_eq!(e["state"], "foreign", "{name}: {e}");
        let got = e["reason"].as_str().unwrap();
        assert!(got.contains(reason), "{name}: want {reason:?}, got {got:?}");
    }
    for extra in [&["--dry-run"][..], &[][..], &["--kept"][..]] {
        let (summary, code) = sandbox.gc_json(extra);
        assert_eq!(code, 0, "{summary}");
        assert_eq!(summary["foreign"], cases.len(), "{summary}");
        assert_eq!(summary["removed"], 0, "{summary}");
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
fn live_owner_and_other_pid_namespace_are_live_and_untouched() {
    let sandbox = Sandbox::new();
    let alive = RootSpec::stale(&sandbox).owned_by(own_process());
    alive.create(&sandbox);
    let other_ns = RootSpec {
        host: HostInfo {
            pid_ns: host_now().pid_ns + 1,
            ..host_now()
        },
        ..RootSpec::stale(&sandbox)
    };
    other_ns.create(&sandbox);
    let other_host = RootSpec {
        host: HostInfo {
            hostname: "another-machine".into(),
            ..host_now()
        },
        ..RootSpec::stale(&sandbox)
    };
    other_host.create(&sandbox);
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
    if skip_unless_root("removal_failing_part_way_is_reported_and_finished_by_the_next_gc") {
        return;
    }
    let sandbox = Sandbox::new();
    let spec = RootSpec::stale(&sandbox);
    let root = spec.create(&sandbox);
    fs::write(root.join("home/pinned"), "immutable\n").unwrap();
    let immutable = ImmutableGuard::set(&root.join("home/pinned"));
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
    if skip_unless_root("unprivileged_gc_removes_read_only_and_unreadable_trees") {
        return;
    }
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
    if skip_unless_root("unprivileged_gc_removes_a_root_whose_own_directory_is_read_only") {
        return;
    }
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
    RootSpec::stale(&sandbox)
        .owned_by(own_process())
        .create(&sandbox);
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
    let before = snapshot(&sandbox.ns);

    let (summary, code) = sandbox.gc_json(&["--dry-run"]);
    assert_eq!(code, 0, "{summary}");
    for (field, kind) in [
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

    let out = sandbox.output(&["gc", "--dry-run"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("would remove"));

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
    live.create(&sandbox);
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
    if skip_unless_root("bind_mount_inside_a_stale_root_is_left_in_place_and_reported") {
        return;
    }
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
    if skip_unless_root("unprivileged_gc_does_not_chmod_an_unreadable_mounted_directory") {
        return;
    }
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
    if skip_unless_root("unprivileged_run_that_makes_its_root_read_only_is_still_cleaned_up") {
        return;
    }
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
fn empty_quarantine_is_removed_but_a_marker_less_one_with_contents_is_foreign() {
    let sandbox = Sandbox::new();
    let empty = format!(".trash-{}", root_name(&new_run_id()));
    fs::create_dir(sandbox.ns.join(&empty)).unwrap();
    let full = format!(".trash-{}", root_name(&new_run_id()));
    fs::create_dir(sandbox.ns.join(&full)).unwrap();
    fs::write(sandbox.ns.join(&full).join("data"), "kept\n").unwrap();
    assert_eq!(sandbox.state_of(&empty).0, "leftover");
    assert_eq!(sandbox.state_of(&full).0, "foreign");
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
#[ignore = "timing-dependent (a writer must win a race against the walk); run with --ignored"]
fn a_root_that_cannot_be_emptied_keeps_its_marker_for_the_next_gc() {
    // Something outside the run (no CLEANROOM_RUN_ID, so gc does not kill it) keeps creating
    // entries at the top of a stale root, so the final rmdir keeps failing. The leftover must
    // keep its marker: without it, no later gc could ever prove it is ours. The writer wins the
    // race almost always; the scenario is repeated until it does (a removal that succeeds
    // proves nothing here).
    let sandbox = Sandbox::new();
    for _ in 0..10 {
        let spec = RootSpec::stale(&sandbox);
        let root = spec.create(&sandbox);
        let mut writer = std::process::Command::new("perl")
            // Eight names, recreated as fast as the walk removes them: never more than 8 inodes.
            .args(["-e", "while (1) { mkdir \"d$_\" for 0 .. 7 }"])
            .current_dir(&root)
            .spawn()
            .unwrap();
        assert!(wait_until(Duration::from_secs(10), || root
            .join("d7")
            .exists()));
        let (summary, status) = sandbox.gc_json(&[]);
        writer.kill().unwrap();
        writer.wait().unwrap();
        if status == 0 {
            assert!(!root.exists(), "{summary}");
            continue;
        }
        assert_eq!(status, 1, "{summary}");
        let trash = format!(".trash-{}", spec.name());
        let leftover = sandbox.ns.join(&trash);
        assert!(
            leftover.join(MARKER).is_file(),
            "the leftover lost its marker: {summary}"
        );
        assert_eq!(sandbox.state_of(&trash).0, "leftover");
        let (summary, status) = sandbox.gc_json(&[]);
        assert_eq!(status, 0, "{summary}");
        assert!(!leftover.exists());
        return;
    }
    panic!("the writer never kept the root from being removed in 10 tries");
}
