//! CLI wiring: every option of `run` that reaches the library has a test over the real binary
//! that fails when the CLI stops passing it on (each compares the option against a run without
//! it, so a dropped option shows as "no effect"). The table names the test for each option;
//! options covered elsewhere point there.
//!
//! | option | test |
//! |---|---|
//! | `--protect-path`, `--protect off` | [`protect_path_makes_a_path_read_only_and_protect_off_lifts_it`] |
//! | `--protect strict`, `--allow-write` | [`protect_strict_refuses_writes_outside_and_allow_write_opens_one`] |
//! | `--drop-secrets`, `--keep-env` | [`drop_secrets_removes_secret_variables_and_keep_env_keeps_one`] |
//! | `--grace` | [`grace_is_how_long_a_term_handler_gets_before_kill`] |
//! | `--leak-grace` | [`leak_grace_is_how_long_a_leaked_process_gets_before_kill`] |
//! | `--contain` | [`contain_picks_the_mechanism`] |
//! | `--exclusive`, `--lock-scope` | [`exclusive_locks_live_where_lock_scope_says`] |
//! | `--lock-timeout`, `CLEANROOM_EXCLUSIVE` | exclusive.rs `a_lock_timeout_exits_125_naming_the_holder_and_starts_nothing`, `cleanroom_exclusive_in_the_environment_names_the_locks` |
//! | `--state-dir`, `CLEANROOM_STATE_DIR` | [`state_dir_flag_beats_the_variable_and_holds_the_root`] |
//! | `-v`, `-q` | [`verbose_names_the_decisions`]; cli.rs `quiet_hides_leak_lines_and_the_summary_but_not_the_status` |
//! | `--timeout`, `CLEANROOM_TIMEOUT` | cli.rs `durations_read_as_timeout_reads_them`; containment.rs `every_escape_dies_when_the_timeout_fires` |
//! | `--on-leak`, `CLEANROOM_ON_LEAK` | containment.rs `leaks_are_named_on_stderr_and_in_the_report_and_on_leak_decides_the_status`; config.rs `flags_beat_the_environment_which_beats_the_config_which_beats_the_default` |
//! | `--pin` | run.rs `pinned_variables_point_inside_the_root_which_is_gone_afterwards`; config.rs precedence test |
//! | `--keep-root` | run.rs `keep_root_keeps_it_and_gc_kept_reclaims_it` |
//! | `--keep-root=on-failure`, `--keep-root-count` | run.rs `keep_root_on_failure_keeps_the_newest_failed_roots_and_says_why`, `keep_root_comes_from_the_config_too` |
//! | `--net none` | protection.rs `net_none_leaves_only_loopback_up` |
//! | `--require-protection` | protection.rs `require_protection_refuses_to_start_where_landlock_is_absent`, `a_user_without_any_home_is_refused_under_require_protection_and_warned_otherwise` |
//! | `--pure-home`, `--pass-netrc` | protection.rs `pure_home_passes_no_configuration_and_pass_netrc_passes_it_read_only` |
//! | `--report` | run.rs `the_report_file_carries_the_documented_fields`; cli.rs `--report` tests |
//! | `--config`, `--no-config`, `CLEANROOM_CONFIG` | config.rs `a_config_others_could_have_written_is_ignored_with_a_warning_unless_named` |
//! | `--share-tmp`, `--host-tmp` (and their config keys) | private_tmp.rs `host_tmp_gives_the_hosts_tmp_and_share_tmp_keeps_one_path_the_hosts` |

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{exists, is_root, Sandbox, BIN};
use rustix::process::Signal;

/// A directory beside the scratch dir: outside the run's working directory, so only the
/// options under test decide whether the run may write it.
fn outside_dir(sandbox: &Sandbox, name: &str) -> PathBuf {
    let dir = sandbox.scratch().parent().unwrap().join(name);
    std::fs::create_dir(&dir).unwrap();
    dir
}

/// `run [args] -- sh -c 'echo x > DIR/f'`; returns whether the file was written.
fn writes(sandbox: &Sandbox, args: &[&str], dir: &Path) -> bool {
    let target = dir.join("f");
    let _ = std::fs::remove_file(&target);
    let script = format!("echo x > '{}'", target.display());
    let run = sandbox.run(args, &["sh", "-c", &script]);
    assert!(run.status.is_some(), "{}", run.stderr);
    assert_eq!(run.status == Some(0), exists(&target), "{}", run.stderr);
    exists(&target)
}

#[test]
fn protect_path_makes_a_path_read_only_and_protect_off_lifts_it() {
    let sandbox = Sandbox::new("wire-protect-path");
    let guarded = outside_dir(&sandbox, "guarded");
    let flag = guarded.to_str().unwrap();
    assert!(
        writes(&sandbox, &[], &guarded),
        "writable without the option"
    );
    assert!(!writes(&sandbox, &["--protect-path", flag], &guarded));
    assert!(writes(
        &sandbox,
        &["--protect", "off", "--protect-path", flag],
        &guarded
    ));
    sandbox.assert_namespace_empty();
}

#[test]
fn protect_strict_refuses_writes_outside_and_allow_write_opens_one() {
    let sandbox = Sandbox::new("wire-strict");
    let outside = outside_dir(&sandbox, "outside");
    let flag = outside.to_str().unwrap();
    assert!(
        writes(&sandbox, &[], &outside),
        "writable under the default mode"
    );
    assert!(!writes(&sandbox, &["--protect", "strict"], &outside));
    assert!(writes(
        &sandbox,
        &["--protect", "strict", "--allow-write", flag],
        &outside
    ));
    // The working directory stays writable under strict.
    assert!(writes(
        &sandbox,
        &["--protect", "strict"],
        sandbox.scratch()
    ));
    sandbox.assert_namespace_empty();
}

#[test]
fn drop_secrets_removes_secret_variables_and_keep_env_keeps_one() {
    let sandbox = Sandbox::new("wire-secrets");
    let show = |args: &[&str]| {
        let (mut cmd, report) = sandbox.run_command(
            args,
            &[
                "sh",
                "-c",
                "printf '%s|%s|%s' \"${CRT_API_TOKEN-gone}\" \"${CRT_DB_PASSWORD-gone}\" \
                 \"${CRT_PLAIN-gone}\"",
            ],
        );
        cmd.env("CRT_API_TOKEN", "t0k")
            .env("CRT_DB_PASSWORD", "pw")
            .env("CRT_PLAIN", "plain");
        let run = sandbox.finish(cmd, &report);
        run.assert_status(0);
        run.stdout
    };
    assert_eq!(show(&[]), "t0k|pw|plain");
    assert_eq!(show(&["--drop-secrets"]), "gone|gone|plain");
    assert_eq!(
        show(&["--drop-secrets", "--keep-env", "CRT_DB_PASSWORD"]),
        "gone|pw|plain"
    );
    sandbox.assert_namespace_empty();
}

/// A perl payload named `handler` that answers TERM by taking 2 s, then writing
/// `$CRT_DIR/graced` and exiting 0, all inside perl (no child a TERM sweep could kill). With
/// KILL at once the file never appears; with a long grace it always does.
const TERM_HANDLER: &str = r#"perl -e '
  $SIG{TERM} = sub {
    select(undef, undef, undef, 2);
    open(my $f, ">", "$ENV{CRT_DIR}/graced") or die; close $f; exit 0;
  };
  open(my $p, ">", "$ENV{CRT_DIR}/handler.pid.tmp") or die; print $p "$$\n"; close $p;
  rename("$ENV{CRT_DIR}/handler.pid.tmp", "$ENV{CRT_DIR}/handler.pid") or die;
  sleep 1 while 1;' "$CRT_MARK""#;

#[test]
fn grace_is_how_long_a_term_handler_gets_before_kill() {
    for (grace, graced) in [("0", false), ("60s", true)] {
        let sandbox = Sandbox::new("wire-grace");
        let run = sandbox.run_bash_interrupted(
            &["--grace", grace],
            &format!("exec {TERM_HANDLER}"),
            &["handler"],
            Signal::TERM,
        );
        assert_eq!(run.report()["exit"]["ending"], "interrupted");
        assert_eq!(
            exists(&sandbox.scratch().join("graced")),
            graced,
            "--grace {grace}: {}",
            run.stderr
        );
        sandbox.assert_no_survivors(&["handler"]);
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn leak_grace_is_how_long_a_leaked_process_gets_before_kill() {
    for (grace, graced) in [("0", false), ("60s", true)] {
        let sandbox = Sandbox::new("wire-leak-grace");
        let run = sandbox.run_bash(
            &["--leak-grace", grace],
            &format!("{TERM_HANDLER} &\nready handler\nexit 0"),
        );
        run.assert_status(0);
        assert!(!run.report()["leaks"].as_array().unwrap().is_empty());
        assert_eq!(
            exists(&sandbox.scratch().join("graced")),
            graced,
            "--leak-grace {grace}: {}",
            run.stderr
        );
        sandbox.assert_no_survivors(&["handler"]);
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn contain_picks_the_mechanism() {
    assert!(
        is_root(),
        "this test needs root: only root may create cgroups here, and setpriv drops to nobody"
    );
    let sandbox = Sandbox::new("wire-contain");
    let own_cgroup = &["cat", "/proc/self/cgroup"];
    let auto = sandbox.run(&[], own_cgroup);
    auto.assert_status(0);
    assert_eq!(auto.mechanism(), "cgroup");
    let cgroup = auto.report()["containment"]["cgroup"].as_str().unwrap();
    let leaf = Path::new(cgroup).file_name().unwrap().to_str().unwrap();
    assert!(
        auto.stdout.contains(leaf),
        "{} not in {}",
        leaf,
        auto.stdout
    );
    let session = sandbox.run(&["--contain", "session"], own_cgroup);
    session.assert_status(0);
    assert_eq!(session.mechanism(), "session");
    assert!(!session.stdout.contains("cleanroom"), "{}", session.stdout);
    sandbox.assert_namespace_empty();
    // An ordinary user cannot have a cgroup here: asking for one is refused.
    let user = Sandbox::as_user("wire-contain-user", common::NOBODY);
    let refused = user.run(&["--contain", "cgroup"], &["true"]);
    refused.assert_status(125);
    assert!(refused.stderr.contains("cgroup"), "{}", refused.stderr);
    user.assert_namespace_empty();
}

#[test]
fn exclusive_locks_live_where_lock_scope_says() {
    let sandbox = Sandbox::new("wire-lock-scope");
    let machine = sandbox.scratch().join("machine-locks");
    let user_lock = sandbox.state().join("locks/wired.lock");
    let machine_lock = machine.join("wired.lock");
    let run = |args: &[&str]| {
        let (mut cmd, report) = sandbox.run_command(args, &["true"]);
        cmd.env("CLEANROOM_MACHINE_LOCK_DIR", &machine);
        sandbox.finish(cmd, &report).assert_status(0);
    };
    run(&[]);
    assert!(
        !exists(&user_lock) && !exists(&machine_lock),
        "no lock asked for"
    );
    run(&["--exclusive", "wired", "--lock-scope", "machine"]);
    assert!(exists(&machine_lock), "the machine lock file");
    assert!(!exists(&user_lock));
    run(&["--exclusive", "wired"]);
    assert!(exists(&user_lock), "the user lock file (the default scope)");
    sandbox.assert_namespace_holds_only(&["locks"]);
}

#[test]
fn state_dir_flag_beats_the_variable_and_holds_the_root() {
    let sandbox = Sandbox::new("wire-state-dir");
    let from_env = sandbox.scratch().join("from-env");
    let report = sandbox.scratch().join("report.json");
    let run = |flag: Option<&Path>| {
        let mut cmd = Command::new(BIN);
        common::without_cleanroom_settings(&mut cmd);
        if let Some(dir) = flag {
            cmd.arg("--state-dir").arg(dir);
        }
        cmd.args(["run", "--report"])
            .arg(&report)
            .args(["--", "sh", "-c", "echo \"$CLEANROOM_ROOT\""])
            .env("CLEANROOM_STATE_DIR", &from_env)
            .stdin(Stdio::null());
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    };
    assert!(run(None).starts_with(&from_env));
    assert!(run(Some(sandbox.state())).starts_with(sandbox.state()));
    assert!(exists(&from_env) && exists(sandbox.state()));
    sandbox.assert_namespace_empty();
}

#[test]
fn verbose_names_the_decisions() {
    let sandbox = Sandbox::new("wire-verbose");
    let quiet = sandbox.run(&[], &["true"]);
    assert!(!quiet.stderr.contains("containment:"), "{}", quiet.stderr);
    let verbose = sandbox.run(&["-v"], &["true"]);
    for word in ["containment:", "root:", "protection:"] {
        assert!(
            verbose.stderr.contains(word),
            "-v: no {word}: {}",
            verbose.stderr
        );
    }
    sandbox.assert_namespace_empty();
}
