//! Protection through the real binary: by default a run cannot write into the real home (the
//! runner's HOME before it moves) while its own root works; `--require-protection` refuses to
//! start where Landlock is absent (simulated with the documented test switch
//! `CLEANROOM_TEST_LANDLOCK_ABSENT=1`, which only weakens the policy); `--net none` leaves only
//! loopback; `doctor --json` describes this machine.

mod common;

use common::Sandbox;

#[test]
fn the_default_run_cannot_write_into_the_real_home_but_can_write_its_own() {
    let sandbox = Sandbox::new("protect-home");
    // Outside the run's working directory (the scratch dir), which stays writable.
    let real_home = sandbox.scratch().parent().unwrap().join("real-home");
    std::fs::create_dir(&real_home).unwrap();
    std::fs::write(real_home.join(".claude.json"), "{\"session\":\"live\"}").unwrap();
    let (mut cmd, report) = sandbox.run_command(
        &[],
        &[
            "sh",
            "-c",
            "echo '{}' > \"$REAL/.claude.json\" && exit 10; mkdir \"$REAL/.codex\" && exit 11; \
             echo ok > \"$HOME/.claude.json\" || exit 12; exit 0",
        ],
    );
    cmd.env("HOME", &real_home).env("REAL", &real_home);
    let run = sandbox.finish(cmd, &report);
    run.assert_status(0);
    assert_eq!(
        std::fs::read_to_string(real_home.join(".claude.json")).unwrap(),
        "{\"session\":\"live\"}"
    );
    assert!(!real_home.join(".codex").exists());
    assert_eq!(run.report()["protection"]["enforcement"], "full");
    sandbox.assert_namespace_empty();
}

#[test]
fn require_protection_refuses_to_start_where_landlock_is_absent() {
    let sandbox = Sandbox::new("protect-require");
    let started = sandbox.scratch().join("started");
    let (mut cmd, report) = sandbox.run_command(
        &["--require-protection"],
        &["touch", started.to_str().unwrap()],
    );
    cmd.env("CLEANROOM_TEST_LANDLOCK_ABSENT", "1");
    let refused = sandbox.finish(cmd, &report);
    refused.assert_status(125);
    assert_eq!(refused.stderr.lines().count(), 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("cleanroom:"), "{}", refused.stderr);
    assert!(
        !started.exists(),
        "the command ran although protection was required"
    );
    sandbox.assert_namespace_empty();

    let (mut cmd, report) = sandbox.run_command(&[], &["touch", started.to_str().unwrap()]);
    cmd.env("CLEANROOM_TEST_LANDLOCK_ABSENT", "1");
    let warned = sandbox.finish(cmd, &report);
    warned.assert_status(0);
    assert_eq!(
        warned.stderr.matches("warning").count(),
        1,
        "exactly one warning expected:\n{}",
        warned.stderr
    );
    assert!(started.exists());
    assert_eq!(warned.report()["protection"]["enforcement"], "none");
}

#[test]
fn net_none_leaves_only_loopback_up() {
    let sandbox = Sandbox::new("protect-net");
    let run = sandbox.run(&["--net", "none"], &["ip", "-o", "link", "show"]);
    run.assert_status(0);
    let links: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(links.len(), 1, "{}", run.stdout);
    assert!(
        links[0].contains(": lo:") && links[0].contains("UP"),
        "{}",
        run.stdout
    );
    let unreachable = sandbox.run(
        &["--net", "none"],
        &["perl", "-MIO::Socket::INET", "-e", "IO::Socket::INET->new(PeerAddr => '192.0.2.1:9', Timeout => 2) or do { print $!; exit 3 }"],
    );
    unreachable.assert_status(3);
    assert!(
        unreachable.stdout.contains("unreachable"),
        "{}",
        unreachable.stdout
    );
}

#[test]
fn doctor_describes_this_machine() {
    let sandbox = Sandbox::new("doctor");
    let out = sandbox.command(&["doctor", "--json"]).output().unwrap();
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor --json");
    let text = report.to_string();
    assert!(text.contains("landlock"), "{text}");
    let human = sandbox.command(&["doctor"]).output().unwrap();
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(human.contains("cleanroom run will use"), "{human}");
    assert!(human.contains("containment"), "{human}");
}
