//! The README's recipes, run for real on the sample projects in `examples/`: nextest's wrapper
//! script (every test process in its own run; a leaking test fails and its leak line shows),
//! cargo's `target.<cfg>.runner`, and `cleanroom run -- pytest` with `tmp_path`. Each sample is
//! copied into the test's sandbox and built there, so the checkout gains nothing; the real
//! `cleanroom` binary is found on PATH, as a user's would be. cargo-nextest and pytest must be
//! installed (`scripts/test.sh` installs them): a missing tool fails the test, naming it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{live_cmdline, Sandbox, BIN};

/// Copies `examples/<name>` into the sandbox; returns the copy.
fn copy_example(sandbox: &Sandbox, name: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    let status = Command::new("cp")
        .arg("-r")
        .arg(&source)
        .arg(sandbox.scratch())
        .status()
        .unwrap();
    assert!(status.success(), "copy {}", source.display());
    sandbox.scratch().join(name)
}

/// `program args` in `dir`, with the binary under test first on PATH, the sandbox's state dir,
/// a private cargo target dir, and no CLEANROOM_* setting of the tester.
fn tool(sandbox: &Sandbox, dir: &Path, program: &str, args: &[&str]) -> Command {
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin_dir.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        .env("PATH", std::env::join_paths(paths).unwrap())
        .env("CARGO_TARGET_DIR", sandbox.scratch().join("target"))
        .stdin(Stdio::null());
    common::without_cleanroom_settings(&mut cmd);
    cmd.env("CLEANROOM_STATE_DIR", sandbox.state());
    cmd
}

/// Runs `cmd`; panics naming `needed` when the program is missing.
fn output_of(mut cmd: Command, needed: &str) -> (Output, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{needed} is needed for this recipe: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// The pids named by `cleanroom: leak: pid N ...` lines.
fn leaked_pids(text: &str) -> Vec<i32> {
    text.lines()
        .filter_map(|l| l.split("cleanroom: leak: pid ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn nextest_wrapper_runs_each_test_in_its_own_run_and_fails_a_leaking_one() {
    let sandbox = Sandbox::new("recipe-nextest");
    let project = copy_example(&sandbox, "nextest");
    let (version, _) = output_of(
        tool(&sandbox, &project, "cargo", &["nextest", "--version"]),
        "cargo-nextest (0.9.98 or later, for wrapper scripts)",
    );
    assert!(
        version.status.success(),
        "cargo-nextest is needed for this recipe"
    );
    let (out, text) = output_of(
        tool(
            &sandbox,
            &project,
            "cargo",
            &["nextest", "run", "--locked", "--offline", "--no-fail-fast"],
        ),
        "cargo",
    );
    assert!(
        !out.status.success(),
        "the leaking test must fail the run:\n{text}"
    );
    for passing in [
        "tests::adds",
        "tests::each_test_gets_a_fresh_home_and_temp_dir",
    ] {
        assert!(
            text.lines()
                .any(|l| l.contains("PASS") && l.contains(passing)),
            "{passing} passes:\n{text}"
        );
    }
    assert!(
        text.lines()
            .any(|l| l.contains("FAIL") && l.contains("tests::leaves_a_daemon_behind")),
        "the leaking test is reported as failed:\n{text}"
    );
    assert!(
        text.contains("outlived the command and was killed: sleep 300"),
        "the leak line is visible in nextest's output:\n{text}"
    );
    assert!(text.contains("exit code 123"), "{text}");
    let pids = leaked_pids(&text);
    assert_eq!(pids.len(), 1, "{text}");
    assert_ne!(
        live_cmdline(pids[0]).as_deref(),
        Some("sleep 300"),
        "the leaked daemon is dead"
    );
    sandbox.assert_namespace_empty();
}

#[test]
fn cargo_runner_starts_tests_and_binaries_inside_a_run() {
    let sandbox = Sandbox::new("recipe-runner");
    let project = copy_example(&sandbox, "cargo-runner");
    let (out, text) = output_of(
        tool(
            &sandbox,
            &project,
            "cargo",
            &["test", "--locked", "--offline"],
        ),
        "cargo",
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("test tests::the_test_binary_runs_inside_a_cleanroom_root ... ok"),
        "{text}"
    );
    let (out, text) = output_of(
        tool(
            &sandbox,
            &project,
            "cargo",
            &["run", "--locked", "--offline"],
        ),
        "cargo",
    );
    assert!(out.status.success(), "{text}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let wrote = PathBuf::from(
        stdout
            .trim()
            .strip_prefix("wrote ")
            .unwrap_or_else(|| panic!("{text}")),
    );
    assert!(wrote.starts_with(sandbox.state()), "{}", wrote.display());
    assert!(!wrote.exists(), "the scratch file went with the run");
    sandbox.assert_namespace_empty();
}

#[test]
fn pytest_tmp_path_lands_in_the_root_and_is_gone_after() {
    let sandbox = Sandbox::new("recipe-pytest");
    let project = copy_example(&sandbox, "pytest");
    let (probe, text) = output_of(
        tool(&sandbox, &project, "python3", &["-c", "import pytest"]),
        "python3",
    );
    assert!(
        probe.status.success(),
        "pytest is needed for this recipe (python3 -m pip install -r \
         examples/pytest/requirements.txt; scripts/test.sh does): {text}"
    );
    let report = sandbox.scratch().join("report.json");
    let (out, text) = output_of(
        tool(
            &sandbox,
            &project,
            "cleanroom",
            &[
                "run",
                "--report",
                report.to_str().unwrap(),
                "--",
                "python3",
                "-m",
                "pytest",
                "-q",
                "-s",
                "-p",
                "no:cacheprovider",
            ],
        ),
        "cleanroom",
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("2 passed"), "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let root = PathBuf::from(report["root"].as_str().unwrap());
    let tmp_path = text
        .lines()
        .find_map(|l| l.strip_prefix("tmp_path="))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("the test prints its tmp_path:\n{text}"));
    assert!(
        tmp_path.starts_with(root.join("tmp")),
        "{}",
        tmp_path.display()
    );
    let base = tmp_path
        .ancestors()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("pytest-of-"))
        })
        .unwrap_or_else(|| panic!("no pytest-of-<user> in {}", tmp_path.display()));
    assert_eq!(base.parent(), Some(root.join("tmp").as_path()));
    assert!(!base.exists(), "{} is gone after the run", base.display());
    assert!(!root.exists());
    sandbox.assert_namespace_empty();
}
