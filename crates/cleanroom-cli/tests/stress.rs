//! Stress: many `cleanroom run`s and `cleanroom gc` loops at once on one namespace.
//!
//! What this proves: with 32 runs in flight at all times (at least 3 each) (each writing files into its HOME and
//! TMPDIR, sleeping, and checking every file is still there and unchanged) and 4 `gc` loops
//! hammering the same namespace for ~10 s, no run fails, no gc removes anything or reports an
//! error (no root is ever stale, so any removal would be of a live root), every run's own cleanup
//! succeeds, its cgroup is gone, and nothing is left in the namespace at the end.
//!
//! It takes about 12 s (debug build, 2 vCPUs), so it is not ignored:
//! `cargo test -p cleanroom-cli --test stress`.

mod common;
mod gc_support;

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gc_support::*;

const RUNNERS: usize = 32;
const GC_LOOPS: usize = 4;
const DURATION: Duration = Duration::from_secs(10);
/// Runs each runner makes at least.
const MIN_RUNS: usize = 3;

/// Writes 20 files into HOME and TMPDIR, sleeps `$1` seconds, then checks them all.
const SCRIPT: &str = r#"set -e
mkdir "$HOME/w" "$TMPDIR/w"
i=0; while [ $i -lt 20 ]; do echo "$0 $i" > "$HOME/w/f$i"; echo "$0 $i" > "$TMPDIR/w/g$i"; i=$((i+1)); done
sleep "$1"
i=0; while [ $i -lt 20 ]; do
  [ "$(cat "$HOME/w/f$i")" = "$0 $i" ]; [ "$(cat "$TMPDIR/w/g$i")" = "$0 $i" ]; i=$((i+1))
done
[ "$(ls "$HOME/w" | wc -l)" -eq 20 ] && [ "$(ls "$TMPDIR/w" | wc -l)" -eq 20 ]"#;

#[test]
fn concurrent_runs_and_gc_loops_never_damage_a_live_root() {
    let sandbox = Sandbox::new();
    let reports = sandbox.outside("reports");
    fs::create_dir(&reports).unwrap();
    let marker = unique("stress");
    let failures = Mutex::new(Vec::<String>::new());
    let runs = AtomicUsize::new(0);
    let gcs = AtomicUsize::new(0);
    let stop_gc = AtomicBool::new(false);
    let started = Instant::now();

    std::thread::scope(|s| {
        for _ in 0..GC_LOOPS {
            s.spawn(|| {
                while !stop_gc.load(Ordering::SeqCst) {
                    let (summary, code) = sandbox.gc_json(&[]);
                    if code != 0 || summary["removed"] != 0 || !errors(&summary).is_empty() {
                        failures.lock().unwrap().push(format!("gc: {summary}"));
                    }
                    gcs.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        let workers: Vec<_> = (0..RUNNERS)
            .map(|w| {
                let (failures, runs, reports, marker) = (&failures, &runs, &reports, &marker);
                let sandbox = &sandbox;
                s.spawn(move || {
                    let mut k = 0;
                    // At least MIN_RUNS each, however loaded the machine: a count of runs
                    // tied to speed would make the test flaky, not stronger.
                    while k < MIN_RUNS || started.elapsed() < DURATION {
                        let tag = format!("{marker}-{w}-{k}");
                        let pause = format!("0.{}", (w + k) % 8 + 1);
                        let report = reports.join(format!("{w}-{k}.json"));
                        let report_arg = report.to_str().unwrap();
                        let out = sandbox.output(&[
                            "run", "--report", report_arg, "--", "sh", "-c", SCRIPT, &tag, &pause,
                        ]);
                        if let Err(problem) = check_run(&out, &report) {
                            failures.lock().unwrap().push(format!("{tag}: {problem}"));
                        }
                        runs.fetch_add(1, Ordering::SeqCst);
                        k += 1;
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop_gc.store(true, Ordering::SeqCst);
    });

    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures: {failures:#?}",
        failures.len()
    );
    let runs = runs.into_inner();
    eprintln!(
        "{runs} runs and {} gc runs in {:?}",
        gcs.into_inner(),
        started.elapsed()
    );
    assert_eq!(
        sandbox.names(),
        Vec::<String>::new(),
        "left in the namespace"
    );
    assert_eq!(
        processes_with(&marker),
        vec![],
        "processes of the runs survived"
    );
}

/// A run must exit 0, say nothing about cleanup, and report its root and cgroup gone.
fn check_run(out: &std::process::Output, report: &Path) -> Result<(), String> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() != Some(0) {
        return Err(format!("exit {:?}: {stderr}", out.status.code()));
    }
    if stderr.contains("cleanup incomplete") {
        return Err(stderr.into_owned());
    }
    let report: serde_json::Value =
        serde_json::from_slice(&fs::read(report).map_err(|e| format!("no report: {e}"))?)
            .map_err(|e| format!("bad report: {e}"))?;
    if report["cleanup"]["status"] != "removed" {
        return Err(format!("cleanup: {}", report["cleanup"]));
    }
    if report["gc"]["removed"] != 0 || !report["gc"]["errors"].as_array().unwrap().is_empty() {
        return Err(format!("the run's own gc: {}", report["gc"]));
    }
    if let Some(cgroup) = report["containment"]["cgroup"].as_str() {
        if Path::new(cgroup).exists() {
            return Err(format!("cgroup {cgroup} left behind"));
        }
    }
    Ok(())
}
