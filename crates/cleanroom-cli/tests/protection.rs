//! Protection through the real binary: by default a run cannot write into the real home (the
//! runner's HOME before it moves) while its own root works; `--require-protection` refuses to
//! start where Landlock is absent (simulated with the documented test switch
//! `CLEANROOM_TEST_LANDLOCK_ABSENT=1`, which only weakens the policy); `--net none` leaves only
//! loopback; `doctor --json` describes this machine.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// The sandboxes a test runs in: the current user, and nobody when the tests run as root (CI),
/// so both the privileged and the unprivileged paths (a user namespace) are exercised.
fn sandboxes(tag: &str) -> Vec<Sandbox> {
    let mut all = vec![Sandbox::new(tag)];
    if common::root_or_skip("the unprivileged case (a run as nobody)") {
        all.push(Sandbox::as_user(&format!("{tag}-nobody"), common::NOBODY));
    }
    all
}

/// A HOME-like directory in the scratch dir: absolute, real, and not the passwd home, so every
/// run protects it as `$HOME` (and never touches the real home of the user running the tests).
fn fake_home(sandbox: &Sandbox) -> PathBuf {
    let home = sandbox.scratch().join("home");
    fs::create_dir_all(&home).unwrap();
    home
}

/// Makes `dir` and everything in it writable for everyone, so for `nobody` only protection can
/// refuse a write.
fn open_up(dir: &Path) {
    let status = Command::new("chmod")
        .arg("-R")
        .arg("a+rwX")
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Removes a file a test may have made outside its sandbox, even when the test fails.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// `try LABEL CMD...` prints `ALLOWED LABEL` or `REFUSED LABEL`.
const TRY: &str = r#"try() { l=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "ALLOWED $l"; else echo "REFUSED $l"; fi; }"#;

#[track_caller]
fn assert_verdict(run: &common::Run, verdict: &str, labels: &[&str]) {
    for label in labels {
        assert!(
            run.stdout
                .lines()
                .any(|l| l == format!("{verdict} {label}")),
            "expected {verdict} {label}\nstdout:\n{}\nstderr:\n{}",
            run.stdout,
            run.stderr
        );
    }
}

const WORKSPACE: &[(&str, &str)] = &[
    ("ws/Cargo.toml", "[workspace]\nmembers = [\"crates/a\", \"crates/b\"]\nresolver = \"2\"\n"),
    ("ws/crates/a/Cargo.toml", "[package]\nname = \"a\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
    ("ws/crates/a/src/lib.rs", "pub fn two() -> u32 {\n    2\n}\n"),
    (
        "ws/crates/b/Cargo.toml",
        "[package]\nname = \"b\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\na = { path = \"../a\" }\n",
    ),
    ("ws/crates/b/src/lib.rs", "#[test]\nfn sums() {\n    assert_eq!(a::two() + 2, 4);\n}\n"),
];

#[test]
fn cargo_test_of_a_workspace_member_under_a_protected_home_passes() {
    for cargo in ["/usr/bin/cargo", "/usr/bin/rustc"] {
        assert!(
            Path::new(cargo).exists(),
            "this test needs {cargo} (Debian's cargo)"
        );
    }
    for sandbox in sandboxes("protect-ws") {
        let home = fake_home(&sandbox);
        for (path, text) in WORKSPACE {
            let path = home.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        fs::create_dir_all(home.join(".cargo/registry")).unwrap();
        fs::write(
            home.join(".cargo/env"),
            "export PATH=\"$HOME/.cargo/bin:$PATH\"\n",
        )
        .unwrap();
        open_up(&home);
        let member = home.join("ws/crates/b");
        let (mut cmd, report) = sandbox.run_command(
            &["--require-protection"],
            &["/usr/bin/cargo", "test", "--offline", "--quiet"],
        );
        cmd.current_dir(&member)
            .env("HOME", &home)
            .env("CARGO_HOME", home.join(".cargo"))
            .env("RUSTC", "/usr/bin/rustc")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET_DIR");
        let run = sandbox.finish(cmd, &report);
        run.assert_status(0);
        assert!(run.stdout.contains("1 passed"), "{}", run.stdout);
        assert!(
            home.join("ws/target").is_dir(),
            "the workspace's target/ was not written"
        );
        let protection = &run.report()["protection"];
        let home_text = home.to_str().unwrap();
        let read_only = protection["read_only"].as_array().unwrap();
        assert!(read_only.iter().any(|p| p == home_text), "{protection}");
        let writable = protection["writable"].as_array().unwrap();
        assert!(
            writable
                .iter()
                .any(|p| p == home.join("ws").to_str().unwrap()),
            "{protection}"
        );
        assert_eq!(
            fs::read_to_string(home.join(".cargo/env")).unwrap(),
            "export PATH=\"$HOME/.cargo/bin:$PATH\"\n"
        );
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn a_private_npm_registry_in_the_real_npmrc_is_seen_and_cannot_be_changed() {
    assert!(
        Path::new("/usr/bin/npm").exists(),
        "this test needs npm (/usr/bin/npm)"
    );
    const NPMRC: &str = "registry=http://127.0.0.1:9/private-registry/\n";
    for sandbox in sandboxes("protect-npm") {
        let home = fake_home(&sandbox);
        fs::write(home.join(".npmrc"), NPMRC).unwrap();
        let cache = sandbox.scratch().join("npm-cache");
        fs::create_dir_all(&cache).unwrap();
        open_up(sandbox.scratch());
        let script = format!(
            "{TRY}\necho registry=$(npm config get registry)\n\
             try npm:set npm config set registry http://127.0.0.1:9/evil/\n\
             try direct:append sh -c 'echo x >> \"$NPM_CONFIG_USERCONFIG\"'\n"
        );
        let (mut cmd, report) = sandbox.run_command(&[], &["sh", "-c", &script]);
        cmd.env("HOME", &home).env("npm_config_cache", &cache);
        let run = sandbox.finish(cmd, &report);
        run.assert_status(0);
        assert!(
            run.stdout
                .contains("registry=http://127.0.0.1:9/private-registry/"),
            "{}\n{}",
            run.stdout,
            run.stderr
        );
        assert_verdict(&run, "REFUSED", &["npm:set", "direct:append"]);
        assert_eq!(fs::read_to_string(home.join(".npmrc")).unwrap(), NPMRC);
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn a_file_written_to_dev_shm_is_gone_after_the_run() {
    for sandbox in sandboxes("protect-shm") {
        let leak = PathBuf::from(format!("/dev/shm/{}-leak", sandbox.marker()));
        let _remove = RemoveOnDrop(leak.clone());
        let script = format!("echo leaked > {} && cat {}", leak.display(), leak.display());
        let run = sandbox.run(&[], &["sh", "-c", &script]);
        run.assert_status(0);
        assert_eq!(run.stdout, "leaked\n");
        assert!(!leak.exists(), "{} survived the run", leak.display());
        assert_eq!(run.report()["protection"]["dev_shm"]["kind"], "private");
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn python_multiprocessing_lock_works_under_strict() {
    for sandbox in sandboxes("protect-mp") {
        let run = sandbox.run(
            &["--protect", "strict", "--require-protection"],
            &[
                "/usr/bin/python3",
                "-c",
                "import multiprocessing as m; l = m.Lock(); l.acquire(); l.release(); print('locked')",
            ],
        );
        run.assert_status(0);
        assert_eq!(run.stdout, "locked\n", "{}", run.stderr);
        sandbox.assert_namespace_empty();
    }
}

/// Runs `sh -c 'echo x > TARGET'` with HOME set as `home` says (None: unset).
fn write_with_home(
    sandbox: &Sandbox,
    home: Option<&OsStr>,
    target: &Path,
    args: &[&str],
) -> common::Run {
    let script = format!("{TRY}\ntry write sh -c 'echo x > {}'\n", target.display());
    let (mut cmd, report) = sandbox.run_command(args, &["sh", "-c", &script]);
    match home {
        Some(home) => cmd.env("HOME", home),
        None => cmd.env_remove("HOME"),
    };
    sandbox.finish(cmd, &report)
}

#[test]
fn an_unset_relative_or_foreign_home_still_protects_the_passwd_home() {
    let sandbox = Sandbox::new("protect-passwd");
    let passwd = passwd_home();
    let passwd = passwd.canonicalize().unwrap_or_else(|_| {
        panic!(
            "this test needs the passwd home {} of the current user",
            passwd.display()
        )
    });
    let victim = passwd.join(format!(".{}-victim", sandbox.marker()));
    let _remove = RemoveOnDrop(victim.clone());
    let foreign = fake_home(&sandbox);
    let cases: [(&str, Option<&OsStr>); 3] = [
        ("unset", None),
        ("relative", Some(OsStr::new("relative/home"))),
        ("foreign", Some(foreign.as_os_str())),
    ];
    for (case, home) in cases {
        let run = write_with_home(&sandbox, home, &victim, &["--require-protection"]);
        run.assert_status(0);
        assert_verdict(&run, "REFUSED", &["write"]);
        assert!(!victim.exists(), "HOME {case}: the passwd home was written");
        let protection = &run.report()["protection"];
        let homes = protection["homes"].as_array().unwrap();
        assert!(
            homes
                .iter()
                .any(|h| h["path"] == passwd.to_str().unwrap() && h["source"] == "passwd"),
            "HOME {case}: {protection}"
        );
        assert!(
            protection["read_only"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p == passwd.to_str().unwrap()),
            "HOME {case}: {protection}"
        );
        if case == "foreign" {
            assert!(homes
                .iter()
                .any(|h| h["path"] == foreign.to_str().unwrap() && h["source"] == "home_var"));
            let inside = foreign.join("victim");
            let run = write_with_home(&sandbox, home, &inside, &[]);
            assert_verdict(&run, "REFUSED", &["write"]);
            assert!(!inside.exists());
        }
    }
    sandbox.assert_namespace_empty();
}

#[test]
fn a_user_without_any_home_is_refused_under_require_protection_and_warned_otherwise() {
    assert!(
        common::is_root(),
        "this test needs root, to run as nobody (whose passwd home does not exist)"
    );
    let nobody_home = passwd_home_of(&common::NOBODY.to_string());
    assert!(
        !nobody_home.exists(),
        "nobody's passwd home {} exists here",
        nobody_home.display()
    );
    let sandbox = Sandbox::as_user("protect-nohome", common::NOBODY);
    let target = sandbox.scratch().join("never-written");
    let refused = write_with_home(&sandbox, None, &target, &["--require-protection"]);
    refused.assert_status(125);
    assert!(
        refused.stderr.contains("no home to protect"),
        "{}",
        refused.stderr
    );
    assert!(!target.exists());
    let warned = write_with_home(&sandbox, None, &target, &[]);
    warned.assert_status(0);
    assert!(
        warned.stderr.contains("warning: no home to protect"),
        "{}",
        warned.stderr
    );
    assert_eq!(
        warned.report()["protection"]["homes"],
        serde_json::json!([])
    );
    sandbox.assert_namespace_empty();
}

/// The passwd home of the user running the tests (read from /etc/passwd, without libc).
fn passwd_home() -> PathBuf {
    passwd_home_of(&rustix::process::getuid().as_raw().to_string())
}

fn passwd_home_of(uid: &str) -> PathBuf {
    fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 5 && f[2] == uid)
        .map(|f| PathBuf::from(f[5]))
        .unwrap_or_else(|| panic!("uid {uid} is not in /etc/passwd"))
}

#[test]
fn toolchain_binaries_and_env_scripts_are_read_only_and_only_their_caches_writable() {
    for sandbox in sandboxes("protect-toolchain") {
        // Outside HOME and inside the (writable) working directory: protected all the same.
        let tool = sandbox.scratch().join("cargo-home");
        fs::create_dir_all(tool.join("bin")).unwrap();
        fs::create_dir_all(tool.join("registry/cache")).unwrap();
        fs::write(tool.join("env"), "# rustup env\n").unwrap();
        fs::write(tool.join("bin/cargo"), "#!/bin/sh\n").unwrap();
        open_up(&tool);
        let script = format!(
            "{TRY}\ntry env:append sh -c 'echo evil >> \"$CARGO_HOME/env\"'\n\
             try bin:replace sh -c 'echo evil > \"$CARGO_HOME/bin/cargo\"'\n\
             try bin:create sh -c 'echo evil > \"$CARGO_HOME/bin/rustc\"'\n\
             try home:mkdir mkdir \"$CARGO_HOME/new\"\n\
             try registry:create sh -c 'echo crate > \"$CARGO_HOME/registry/cache/x.crate\"'\n"
        );
        let (mut cmd, report) = sandbox.run_command(&[], &["sh", "-c", &script]);
        cmd.env("CARGO_HOME", &tool);
        let run = sandbox.finish(cmd, &report);
        run.assert_status(0);
        assert_verdict(
            &run,
            "REFUSED",
            &["env:append", "bin:replace", "bin:create", "home:mkdir"],
        );
        assert_verdict(&run, "ALLOWED", &["registry:create"]);
        assert_eq!(
            fs::read_to_string(tool.join("env")).unwrap(),
            "# rustup env\n"
        );
        assert_eq!(
            fs::read_to_string(tool.join("bin/cargo")).unwrap(),
            "#!/bin/sh\n"
        );
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn strict_started_from_the_filesystem_root_does_not_make_it_writable() {
    for sandbox in sandboxes("protect-strict-root") {
        let victim = PathBuf::from(format!("/{}-victim", sandbox.marker()));
        let _remove = RemoveOnDrop(victim.clone());
        let script = format!(
            "{TRY}\ntry root:create sh -c 'echo x > {}'\ntry tmp:create sh -c 'echo x > \"$TMPDIR/ok\"'\n",
            victim.display()
        );
        let (mut cmd, report) =
            sandbox.run_command(&["--protect", "strict"], &["sh", "-c", &script]);
        cmd.current_dir("/");
        let run = sandbox.finish(cmd, &report);
        run.assert_status(0);
        assert_verdict(&run, "REFUSED", &["root:create"]);
        assert_verdict(&run, "ALLOWED", &["tmp:create"]);
        assert!(!victim.exists());
        assert!(
            run.stderr
                .contains("working directory / is not made writable"),
            "{}",
            run.stderr
        );
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn a_nested_run_works_under_a_strict_outer_run_in_its_own_root() {
    for sandbox in sandboxes("protect-nested") {
        let script = format!(
            "{} run -- sh -c 'echo inner > \"$CLEANROOM_ROOT/f\" && echo \"inner root $CLEANROOM_ROOT\"' && \
             echo outer root $CLEANROOM_ROOT",
            common::BIN
        );
        let run = sandbox.run(&["--protect", "strict"], &["sh", "-c", &script]);
        run.assert_status(0);
        let outer = run.report()["root"].as_str().unwrap().to_string();
        let inner = run
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("inner root "))
            .unwrap_or_else(|| panic!("no nested run:\n{}\n{}", run.stdout, run.stderr));
        assert!(
            inner.starts_with(&format!("{outer}/nested/")),
            "the nested root {inner} is not inside the outer root {outer}"
        );
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn drop_secrets_removes_credentials_and_keeps_harmless_variables() {
    let sandbox = Sandbox::new("protect-secrets");
    let secrets = [
        ("MYSQL_PWD", "hunter2"),
        ("PASSWD", "hunter2"),
        ("GITHUB_PAT", "x"),
        ("DATABASE_URL", "postgres://app:hunter2@db/app"),
        ("CI_JOB_JWT", "x"),
        ("DOCKER_AUTH_CONFIG", "{}"),
        ("SSH_AUTH_SOCK", "/tmp/agent.sock"),
        ("AWS_ACCESS_KEY_ID", "x"),
        ("TOKEN_FOR_X", "x"),
    ];
    let harmless = [
        ("KEYBOARD", "us"),
        ("TOKENIZERS_PARALLELISM", "false"),
        ("PLAIN_URL", "https://example.com/x"),
    ];
    let (mut cmd, report) = sandbox.run_command(&["--drop-secrets"], &["env"]);
    cmd.envs(secrets).envs(harmless);
    let run = sandbox.finish(cmd, &report);
    run.assert_status(0);
    let dropped = run.report()["env"]["dropped"].as_array().unwrap().clone();
    for (name, _) in secrets {
        assert!(
            !run.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{name}="))),
            "{name} passed"
        );
        assert!(
            dropped.iter().any(|d| d == name),
            "{name} not reported: {dropped:?}"
        );
    }
    for (name, value) in harmless {
        assert!(
            run.stdout.lines().any(|l| l == format!("{name}={value}")),
            "{name} dropped"
        );
    }
}

#[test]
fn net_none_hides_the_hosts_interfaces_in_sys_class_net() {
    for sandbox in sandboxes("protect-sysnet") {
        let run = sandbox.run(&["--net", "none"], &["ls", "/sys/class/net"]);
        run.assert_status(0);
        assert_eq!(run.stdout, "lo\n", "{}", run.stderr);
        assert_eq!(run.report()["protection"]["fresh_sysfs"], true);
    }
}

#[test]
fn pure_home_passes_no_configuration_and_pass_netrc_passes_it_read_only() {
    let sandbox = Sandbox::new("protect-pure");
    let home = fake_home(&sandbox);
    fs::write(
        home.join(".npmrc"),
        "registry=http://127.0.0.1:9/private/\n",
    )
    .unwrap();
    fs::write(home.join(".gitconfig"), "[user]\n\tname = Someone\n").unwrap();
    fs::write(
        home.join(".netrc"),
        "machine example.com login u password p\n",
    )
    .unwrap();
    let show = "echo npm=${NPM_CONFIG_USERCONFIG:-unset} git=${GIT_CONFIG_GLOBAL:-unset} netrc=${NETRC:-unset}";
    let run_with = |args: &[&str], script: &str| {
        let (mut cmd, report) = sandbox.run_command(args, &["sh", "-c", script]);
        cmd.env("HOME", &home);
        sandbox.finish(cmd, &report)
    };
    let default = run_with(&[], show);
    default.assert_status(0);
    assert_eq!(
        default.stdout,
        format!(
            "npm={} git={} netrc=unset\n",
            home.join(".npmrc").display(),
            home.join(".gitconfig").display()
        )
    );
    let pure = run_with(&["--pure-home"], show);
    pure.assert_status(0);
    assert_eq!(pure.stdout, "npm=unset git=unset netrc=unset\n");
    let script = format!(
        "{TRY}\ntry netrc:read grep -q example.com \"$NETRC\"\ntry home-netrc:read grep -q example.com \"$HOME/.netrc\"\n\
         try netrc:write sh -c 'echo x >> \"$NETRC\"'\n"
    );
    let netrc = run_with(&["--pass-netrc"], &script);
    netrc.assert_status(0);
    assert_verdict(&netrc, "ALLOWED", &["netrc:read", "home-netrc:read"]);
    assert_verdict(&netrc, "REFUSED", &["netrc:write"]);
    assert_eq!(
        fs::read_to_string(home.join(".netrc")).unwrap(),
        "machine example.com login u password p\n"
    );
    sandbox.assert_namespace_empty();
}

#[test]
fn doctor_and_verbose_runs_say_which_paths_are_writable_and_why() {
    let sandbox = Sandbox::new("protect-why");
    let home = fake_home(&sandbox);
    for (path, text) in WORKSPACE {
        let path = home.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
    let member = home.join("ws/crates/a");
    let ws = home.join("ws");
    let doctor = sandbox
        .command(&["doctor"])
        .current_dir(&member)
        .env("HOME", &home)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.status.success(), "{text}");
    for expected in [
        format!("read-only {}  (the real home ($HOME))", home.display()),
        format!(
            "writable  {}  (project root: the cargo workspace",
            ws.display()
        ),
        format!("writable  {}  (the working directory)", member.display()),
    ] {
        assert!(text.contains(&expected), "missing {expected:?} in:\n{text}");
    }
    let mut verbose = sandbox.command(&["-v", "run", "--", "true"]);
    verbose.current_dir(&member).env("HOME", &home);
    let run = sandbox.finish(verbose, &sandbox.scratch().join("no-report.json"));
    run.assert_status(0);
    assert!(
        run.stderr.contains(&format!(
            "Write {} (project root: the cargo workspace",
            ws.display()
        )),
        "{}",
        run.stderr
    );
}
