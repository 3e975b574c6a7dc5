//! Protection through the real binary: by default a run cannot write into the real home (the
//! runner's HOME before it moves) while its own root works; `--require-protection` refuses to
//! start where Landlock is absent (simulated with the documented test switch
//! `CLEANROOM_TEST_LANDLOCK_ABSENT=1`, which only weakens the policy); `--net none` leaves only
//! loopback; `doctor --json` describes this machine.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
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

/// What `cleanroom doctor` prints, run from `dir` with HOME `home`; it must succeed.
fn doctor_from(sandbox: &Sandbox, dir: &Path, home: &Path) -> String {
    let doctor = sandbox
        .command(&["doctor"])
        .current_dir(dir)
        .env("HOME", home)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert!(doctor.status.success(), "{text}");
    text
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
        sandbox.hand_over(&home);
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
        let script = "\"$CRT_BIN\" run -- sh -c 'echo inner > \"$CLEANROOM_ROOT/f\" && \
                      echo \"inner root $CLEANROOM_ROOT\"' && echo outer root $CLEANROOM_ROOT";
        let run = sandbox.run(&["--protect", "strict"], &["sh", "-c", script]);
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
    let text = doctor_from(&sandbox, &member, &home);
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

/// Run from the home itself, the working directory is the protected home: it stays read-only,
/// and doctor says so (one line for the home, read-only, and the warning a run prints), instead
/// of listing it both read-only and writable.
#[test]
fn doctor_and_a_run_from_the_home_agree_that_the_home_stays_read_only() {
    let sandbox = Sandbox::new("protect-from-home");
    let home = fake_home(&sandbox);
    let text = doctor_from(&sandbox, &home, &home);
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| line.contains(&format!(" {}  (", home.display())))
        .collect();
    assert_eq!(lines.len(), 1, "one rule for the home:\n{text}");
    assert!(lines[0].contains("read-only"), "{text}");
    let warning = format!("the working directory {} is protected", home.display());
    assert!(text.contains(&warning), "no warning in:\n{text}");

    let (mut cmd, report) = sandbox.run_command(&[], &["touch", "written-from-home"]);
    cmd.current_dir(&home).env("HOME", &home);
    let run = sandbox.finish(cmd, &report);
    run.assert_status(1);
    assert!(run.stderr.contains(&warning), "{}", run.stderr);
    assert!(!home.join("written-from-home").exists());
    sandbox.assert_namespace_empty();
}

/// pytest run from the `tests/` dir of a Python project without a checkout writes its cache at
/// the project's root (the directory with `pyproject.toml`), which is inside the protected home:
/// the marker makes that directory the project root, writable, so pytest warns of nothing.
#[test]
fn pytest_from_a_tests_dir_writes_its_cache_at_the_python_projects_root() {
    let sandbox = Sandbox::new("protect-pyproject");
    let home = fake_home(&sandbox);
    let project = home.join("project");
    fs::create_dir_all(project.join("tests")).unwrap();
    fs::write(
        project.join("pyproject.toml"),
        "[project]\nname = \"sample\"\nversion = \"0\"\n\n[tool.pytest.ini_options]\n",
    )
    .unwrap();
    fs::write(
        project.join("tests/test_sample.py"),
        "def test_one():\n    assert True\n",
    )
    .unwrap();
    let (mut cmd, report) = sandbox.run_command(&[], &["python3", "-m", "pytest", "-q"]);
    cmd.current_dir(project.join("tests")).env("HOME", &home);
    let run = sandbox.finish(cmd, &report);
    let output = format!("{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.status,
        Some(0),
        "pytest (needed by this test) failed:\n{output}"
    );
    assert!(!output.contains("PytestCacheWarning"), "{output}");
    assert!(project.join(".pytest_cache").is_dir(), "{output}");
    let writable = run.report()["protection"]["writable"].to_string();
    assert!(
        writable.contains(&project.display().to_string()),
        "the project root is not writable: {writable}"
    );
    sandbox.assert_namespace_empty();
}

/// A command that fails under protection is told that a write may have been refused, and which
/// option allows one; one that succeeds, or fails without protection, or runs with -q, is not.
#[test]
fn a_failed_command_under_protection_is_told_how_to_allow_a_write() {
    let sandbox = Sandbox::new("protect-hint");
    let kept = sandbox.scratch().join("kept");
    fs::create_dir(&kept).unwrap();
    let protect = ["--protect-path", kept.to_str().unwrap()];
    let write = format!("echo x > '{}/file'", kept.display());
    let denied = sandbox.run(&protect, &["sh", "-c", &write]);
    denied.assert_status(2);
    let hint = denied
        .stderr
        .lines()
        .find(|line| line.starts_with("cleanroom: hint:"))
        .unwrap_or_else(|| panic!("no hint:\n{}", denied.stderr));
    for word in ["exited 2", "--protect home", "--allow-write PATH", "-v"] {
        assert!(hint.contains(word), "{word:?} not in {hint:?}");
    }
    assert!(!kept.join("file").exists());
    for (args, command) in [
        (&protect[..], "true"),
        (&["--protect", "off"][..], "false"),
        (
            &["-q", "--protect-path", kept.to_str().unwrap()][..],
            "false",
        ),
    ] {
        let run = sandbox.run(args, &[command]);
        assert!(
            !run.stderr.contains("hint"),
            "{args:?} {command}:\n{}",
            run.stderr
        );
    }
    sandbox.assert_namespace_empty();
}

#[test]
fn a_bind_mount_that_shows_the_home_elsewhere_does_not_open_it() {
    if !common::root_or_skip("bind mounts in a mount namespace of the test's own") {
        return;
    }
    let sandbox = Sandbox::new("protect-alias");
    // On the root filesystem, so the bind of `/` shows them too.
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let base = base.path().canonicalize().unwrap();
    let (home, other, host, snap) = (
        base.join("home"),
        base.join("other"),
        base.join("host"),
        base.join("snap"),
    );
    for dir in [&home, &other, &host, &snap] {
        fs::create_dir(dir).unwrap();
    }
    fs::write(home.join("file"), "home").unwrap();
    let through = |path: &Path| host.join(path.strip_prefix("/").unwrap());
    // `/` bound at `host`, and the home's parent bound read-only inside itself.
    let mounts = format!(
        "mount --bind / '{host}' && mount --bind '{base}' '{snap}' && \
         mount -o remount,bind,ro '{snap}'",
        host = host.display(),
        base = base.display(),
        snap = snap.display()
    );
    let mut script = String::new();
    for file in [
        home.join("file"),
        through(&home.join("file")),
        snap.join("home/file"),
    ] {
        script.push_str(&format!("echo pwned > '{}' && echo WROTE;", file.display()));
    }
    for file in [other.join("a"), through(&other.join("b"))] {
        script.push_str(&format!("echo ok > '{}' && echo KEPT;", file.display()));
    }
    // `other` allowed by name: a checkout inside the real home (a 0700 /root) has it there.
    let allow = other.to_str().unwrap();
    let (inner, report) = sandbox.run_command(
        &["--protect", "home", "--allow-write", allow],
        &["sh", "-c", &script],
    );
    let mut unshare = Command::new("unshare");
    unshare
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!("{mounts} && exec \"$@\""))
        .arg("sh")
        .env("HOME", &home);
    let run = sandbox.finish(wrapping(unshare, &inner, sandbox.scratch()), &report);
    run.assert_status(0);
    assert_eq!(run.stdout.matches("KEPT").count(), 2, "{}", run.stdout);
    assert!(
        !run.stdout.contains("WROTE"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    assert_eq!(fs::read_to_string(home.join("file")).unwrap(), "home");
    sandbox.assert_namespace_empty();
}

/// A project marker another user planted in a sticky world-writable parent of the project (as
/// anyone can in /tmp) is not taken for the project's top: the project root stays the project's
/// own directory, so the parent is not bound from the host into the private /tmp, and what the
/// command writes at a fixed path there is removed with the run. For root, and for an ordinary
/// user (nobody) with the marker planted by a third uid.
#[test]
fn a_project_marker_another_user_planted_in_a_sticky_parent_is_ignored() {
    if !common::root_or_skip("planting a marker as another user (setpriv)") {
        return;
    }
    for (planted, tool) in [("pyproject.toml", "touch"), (".git", "mkdir")] {
        let users = [
            (Sandbox::new("protect-planted"), "root", common::NOBODY),
            (
                Sandbox::as_user("protect-planted-nobody", common::NOBODY),
                "nobody",
                common::NOBODY - 1,
            ),
        ];
        for (sandbox, runner, planter) in users {
            let parent = tempfile::Builder::new()
                .prefix("cleanroom-it-planted-")
                .tempdir_in("/tmp")
                .unwrap();
            let parent = parent.path();
            fs::set_permissions(parent, fs::Permissions::from_mode(0o1777)).unwrap();
            let project = parent.join("proj");
            fs::create_dir_all(project.join("src")).unwrap();
            fs::write(project.join("Cargo.toml"), "[package]\nname = \"p\"\n").unwrap();
            sandbox.hand_over(&project);
            let marker = parent.join(planted);
            let status = Command::new("setpriv")
                .args([&format!("--reuid={planter}"), &format!("--regid={planter}")])
                .args(["--clear-groups", tool])
                .arg(&marker)
                .status();
            assert!(status.unwrap().success(), "planting {}", marker.display());
            let leak = parent.join("leak");
            let (mut cmd, report) = sandbox.run_command(
                &[],
                &["sh", "-c", &format!("echo x > '{}'", leak.display())],
            );
            cmd.current_dir(project.join("src"));
            let run = sandbox.finish(cmd, &report);
            let context = format!("{planted} by uid {planter}, run as {runner}");
            run.assert_status(0);
            assert!(
                !common::exists(&leak),
                "{context}: the write outlived the run\n{}",
                run.stderr
            );
            let writable = &run.report()["protection"]["writable"];
            let has = |path: &Path| {
                let path = path.to_str().unwrap();
                writable.as_array().unwrap().iter().any(|p| p == path)
            };
            assert!(has(&project), "{context}: {writable}");
            assert!(!has(parent), "{context}: {writable}");
            let warning = format!(
                "ignoring the project marker {} (owner uid {planter})",
                marker.display()
            );
            assert!(run.stderr.contains(&warning), "{context}:\n{}", run.stderr);
            sandbox.assert_namespace_empty();
        }
    }
}

/// `wrapper` running `inner` (its program, arguments and environment) from `dir`.
fn wrapping(mut wrapper: Command, inner: &Command, dir: &Path) -> Command {
    wrapper
        .arg(inner.get_program())
        .args(inner.get_args())
        .current_dir(dir)
        .stdin(std::process::Stdio::null());
    for (key, value) in inner.get_envs() {
        match value {
            Some(value) => wrapper.env(key, value),
            None => wrapper.env_remove(key),
        };
    }
    wrapper
}

/// Clears the immutable and append-only flags below a path (`chattr -R -ia`).
fn clear_flags_below(path: &Path) {
    if path.exists() {
        let _ = Command::new("chattr")
            .arg("-R")
            .arg("-ia")
            .arg(path)
            .output();
    }
}

/// A sandbox whose state dir and scratch dir get their immutable and append-only flags cleared
/// before it is removed, so a failing test still leaves nothing behind.
struct FlagSandbox(Sandbox);

impl FlagSandbox {
    /// As root, where `chattr +i` and `+a` work on the state dir's filesystem; else a counted
    /// skip and `None`.
    fn new(tag: &str) -> Option<FlagSandbox> {
        if !common::root_or_skip("chattr +i and +a in the run's root") {
            return None;
        }
        let sandbox = FlagSandbox(Sandbox::new(tag));
        let probe = sandbox.0.scratch().join("chattr-probe");
        fs::write(&probe, "probe").unwrap();
        let set = |flags: &str| {
            Command::new("chattr")
                .arg(flags)
                .arg(&probe)
                .output()
                .is_ok_and(|out| out.status.success())
        };
        if !(set("+i") && set("-i") && set("+a") && set("-a")) {
            common::skip("chattr +i/+a is not supported on the state dir's filesystem");
            return None;
        }
        Some(sandbox)
    }
}

impl Drop for FlagSandbox {
    fn drop(&mut self) {
        clear_flags_below(self.0.state());
        clear_flags_below(self.0.scratch());
    }
}

#[test]
fn a_root_command_cannot_make_a_file_of_its_own_root_immutable_or_append_only() {
    let Some(flagged) = FlagSandbox::new("protect-immutable") else {
        return;
    };
    let sandbox = &flagged.0;
    // The home and the private /tmp are both in the run's root.
    let script = "echo x > \"$HOME/imm\" && chattr +i \"$HOME/imm\" && echo SET-IMMUTABLE; \
                  echo y > /tmp/app && chattr +a /tmp/app && echo SET-APPEND; exit 0";
    // Also from a runner whose inheritable set holds the capability: the bounding set does not
    // limit that set, which a process running as uid 0 carries into exec.
    for inheritable in [None, Some("+linux_immutable")] {
        let (inner, report) = sandbox.run_command(&[], &["sh", "-c", script]);
        let mut setpriv = Command::new("setpriv");
        if let Some(caps) = inheritable {
            setpriv.args(["--inh-caps", caps]);
        }
        let run = sandbox.finish(wrapping(setpriv, &inner, sandbox.scratch()), &report);
        run.assert_status(0);
        assert!(
            !run.stdout.contains("SET-"),
            "inheritable {inheritable:?}: {}\n{}",
            run.stdout,
            run.stderr
        );
        assert!(!run.stderr.contains("cleanup incomplete"), "{}", run.stderr);
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn a_root_marked_immutable_or_append_only_by_its_command_is_still_removed() {
    let Some(flagged) = FlagSandbox::new("protect-immutable-off") else {
        return;
    };
    let sandbox = &flagged.0;
    // Under --protect off a root command keeps CAP_LINUX_IMMUTABLE: the removal clears the flags
    // of a file, of a directory and of the root itself.
    let script = "echo x > \"$HOME/imm\" && chattr +i \"$HOME/imm\" && mkdir \"$HOME/log\" && \
                  echo y > \"$HOME/log/f\" && chattr +a \"$HOME/log/f\" \"$HOME/log\" && \
                  chattr +i \"$CLEANROOM_ROOT\" && echo SET";
    let run = sandbox.run(&["--protect", "off"], &["sh", "-c", script]);
    run.assert_status(0);
    assert!(run.stdout.contains("SET"), "{}\n{}", run.stdout, run.stderr);
    assert!(!run.stderr.contains("cleanup incomplete"), "{}", run.stderr);
    sandbox.assert_namespace_empty();
    // A file with a link outside the root is not the root's alone: its flag stays, and so does
    // the root, reported.
    let outside = sandbox.scratch().join("outside");
    fs::write(&outside, "host").unwrap();
    let script = format!(
        "ln '{}' \"$HOME/link\" && chattr +i \"$HOME/link\" && echo SET",
        outside.display()
    );
    let run = sandbox.run(&["--protect", "off"], &["sh", "-c", &script]);
    run.assert_status(0);
    assert!(run.stdout.contains("SET"), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("cleanup incomplete"), "{}", run.stderr);
    let flags = Command::new("lsattr").arg(&outside).output().unwrap();
    let flags = String::from_utf8_lossy(&flags.stdout);
    assert!(
        flags
            .split_whitespace()
            .next()
            .is_some_and(|f| f.contains('i')),
        "the flag of a file linked from outside was cleared: {flags}"
    );
}

/// Finding 5 of the final review (issues 25/27): wherever cleanroom's namespace lives (the
/// harness's /dev/shm, a directory on disk outside /tmp and /var/tmp) the command can neither
/// make an entry in it nor touch another live run's root or marker, under `home` (with and
/// without `--host-tmp`) and `strict`; its own root stays writable, and a nested run's
/// user-scope lock is taken in the namespace's `locks/`, so it is excluded by a holder outside.
#[test]
fn the_namespace_anywhere_is_read_only_to_the_command_but_for_its_root_and_locks() {
    let mut users = vec![None];
    if common::root_or_skip("the unprivileged case (a run as nobody)") {
        users.push(Some(common::NOBODY));
    }
    for uid in users {
        let sandbox = |tag: &str| match uid {
            Some(uid) => Sandbox::as_user(&format!("{tag}-nobody"), uid),
            None => Sandbox::new(tag),
        };
        assert_namespace_read_only(&sandbox("protect-ns-shm"));
        if let Some(place) = place_outside_scratch_dirs(uid.is_some()) {
            let state = place.path().join("state");
            assert_namespace_read_only(&sandbox("protect-ns-disk").with_state_dir(state));
        }
    }
}

/// A live sibling run holds the user lock `u`; runs of `sandbox` try its namespace.
fn assert_namespace_read_only(sandbox: &Sandbox) {
    let hold = "echo \"$CLEANROOM_ROOT\" > \"$CRT_DIR/holder.root\"; mark_ready holder; \
                while [ ! -e \"$CRT_DIR/done\" ]; do sleep 0.05; done";
    let (mut holder, _) = sandbox.bash_command(&["--exclusive", "u"], hold);
    holder
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut holder = holder.spawn().unwrap();
    if let Err(e) = sandbox.wait_ready(&["holder"], &holder) {
        sandbox.stop_runner(&mut holder);
        panic!("{e}");
    }
    let sibling = fs::read_to_string(sandbox.scratch().join("holder.root")).unwrap();
    let sibling = PathBuf::from(sibling.trim());
    let marker = sibling.join("cleanroom-root.json");
    let before = fs::read(&marker).unwrap();
    let script = format!(
        "{TRY}\nexport NS=\"$(dirname \"$CLEANROOM_ROOT\")\" SIB='{}'\n\
         try ns:create sh -c 'echo junk > \"$NS/crt-junk\"'\n\
         try marker:overwrite sh -c 'echo PWN > \"$SIB/cleanroom-root.json\"'\n\
         try marker:remove rm \"$SIB/cleanroom-root.json\"\n\
         try sibling:rename mv \"$SIB\" \"$SIB.x\"\n\
         try root:write sh -c 'echo own > \"$CLEANROOM_ROOT/own\"'\n\
         \"$CRT_BIN\" run --exclusive u --lock-timeout 0 -- true; echo user=$?\n",
        sibling.display()
    );
    for args in [&[][..], &["--host-tmp"], &["--protect", "strict"]] {
        let run = sandbox.run(args, &["sh", "-c", &script]);
        run.assert_status(0);
        assert_verdict(
            &run,
            "REFUSED",
            &[
                "ns:create",
                "marker:overwrite",
                "marker:remove",
                "sibling:rename",
            ],
        );
        assert_verdict(&run, "ALLOWED", &["root:write"]);
        assert!(
            run.stdout.contains("user=125"),
            "{args:?}: the nested run's user lock was not the namespace's\n{}\n{}",
            run.stdout,
            run.stderr
        );
    }
    assert_eq!(fs::read(&marker).unwrap(), before, "the sibling's marker");
    assert!(!sandbox.state().join("crt-junk").exists());
    fs::write(sandbox.scratch().join("done"), "").unwrap();
    let out = sandbox.wait_for_runner(holder, std::time::Duration::from_secs(60));
    assert!(out.status.success(), "the holder: {out:?}");
    sandbox.assert_namespace_holds_only(&["locks"]);
}

/// A new directory on a filesystem outside /tmp, /var/tmp and /dev/shm (under the target dir,
/// else under /run), open to uid 65534 when `nobody` (which must reach it), removed on drop;
/// `None`, a counted skip, where there is none.
fn place_outside_scratch_dirs(nobody: bool) -> Option<tempfile::TempDir> {
    let scratch: Vec<PathBuf> = ["/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .filter_map(|dir| fs::canonicalize(dir).ok())
        .collect();
    for candidate in [env!("CARGO_TARGET_TMPDIR"), "/run"] {
        let Ok(dir) = fs::canonicalize(candidate) else {
            continue;
        };
        if scratch.iter().any(|s| dir.starts_with(s)) || (nobody && !common::nobody_can_enter(&dir))
        {
            continue;
        }
        let Ok(place) = tempfile::Builder::new()
            .prefix("cleanroom-it-ns-")
            .tempdir_in(&dir)
        else {
            continue;
        };
        if nobody {
            fs::set_permissions(place.path(), fs::Permissions::from_mode(0o1777)).unwrap();
        }
        return Some(place);
    }
    common::skip("a state dir outside /tmp, /var/tmp and /dev/shm (none could be made)");
    None
}

/// Opens the file `$1` by its handle (`name_to_handle_at`, then `open_by_handle_at` for
/// appending) through a descriptor of each directory after it, and says `WROTE through DIR` for
/// each that let it write.
const WRITE_BY_HANDLE: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class Handle(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint), ("kind", ctypes.c_int), ("bytes", ctypes.c_ubyte * 128)]
handle, mount = Handle(), ctypes.c_int()
handle.size = 128
if libc.name_to_handle_at(-100, sys.argv[1].encode(), ctypes.byref(handle), ctypes.byref(mount), 0):
    sys.exit("name_to_handle_at: " + os.strerror(ctypes.get_errno()))
for place in sys.argv[2:]:
    fd = libc.open_by_handle_at(os.open(place, os.O_RDONLY | os.O_DIRECTORY), ctypes.byref(handle),
                                os.O_WRONLY | os.O_APPEND)
    if fd >= 0:
        os.write(fd, b"written by handle\n")
        print("WROTE through", place)
    else:
        print("refused through", place, os.strerror(ctypes.get_errno()))
"#;

/// A root command cannot write a read-only file by its handle through one of the run's own
/// writable mounts (its root, the private `/var/tmp`, its working directory, on the same
/// filesystem as the file): `open_by_handle_at` needs `CAP_DAC_READ_SEARCH`, which every
/// sandbox drops, and Landlock would judge such a file at the mount it was opened through.
#[test]
fn a_root_command_cannot_write_a_protected_file_by_its_handle() {
    if !common::root_or_skip("open_by_handle_at (CAP_DAC_READ_SEARCH)") {
        return;
    }
    let sandbox = Sandbox::new("protect-handle");
    let protected = sandbox.scratch().join("protected");
    fs::create_dir(&protected).unwrap();
    let secret = protected.join("secret");
    fs::write(&secret, "kept\n").unwrap();
    let script = format!(
        "python3 -c '{WRITE_BY_HANDLE}' '{}' \"$CLEANROOM_ROOT\" /var/tmp . \"$HOME\"; \
         grep ^CapEff /proc/self/status",
        secret.display()
    );
    for mode in ["home", "strict"] {
        let args = [
            "--protect",
            mode,
            "--protect-path",
            protected.to_str().unwrap(),
        ];
        let run = sandbox.run(&args, &["sh", "-c", &script]);
        run.assert_status(0);
        assert!(run.stdout.contains("refused through"), "{}", run.stderr);
        assert!(
            !run.stdout.contains("WROTE"),
            "--protect {mode}: {}",
            run.stdout
        );
        assert_eq!(fs::read_to_string(&secret).unwrap(), "kept\n");
        sandbox.assert_namespace_empty();
    }
}

/// An ordinary user's namespace inside a directory that user may not list (0711), under
/// Landlock alone (no mount namespace): the cover cannot enumerate that directory, yet the run's
/// root and lock directory keep the writable rules they name (each reached by its own path),
/// while the rest of the namespace stays read-only.
#[test]
fn a_namespace_in_a_directory_its_user_cannot_list_keeps_its_root_writable() {
    if !common::root_or_skip("a run as nobody (setpriv)") {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("cleanroom-unlistable-")
        .tempdir_in("/dev/shm")
        .unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o711)).unwrap();
    let ns = dir.path().join("ns");
    fs::create_dir(&ns).unwrap();
    fs::set_permissions(&ns, fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&ns, Some(common::NOBODY), Some(common::NOBODY)).unwrap();
    let bin = common::RunnableByNobody::new_in(Path::new(common::BIN), dir.path());
    let script = "echo x > \"$HOME/f\" && echo HOME-WRITTEN; \
                  touch \"$(dirname \"$CLEANROOM_ROOT\")/junk\" && echo JUNK-WRITTEN; \
                  touch \"$CLEANROOM_USER_LOCK_DIR/x.lock\" && echo LOCK-WRITTEN; exit 0";
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin.path())
        .arg("--state-dir")
        .arg(&ns)
        .args(["run", "--", "sh", "-c", script])
        .env("CLEANROOM_TEST_NO_MOUNT_NS", "1")
        .current_dir("/")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("HOME-WRITTEN"), "{stdout}{stderr}");
    assert!(stdout.contains("LOCK-WRITTEN"), "{stdout}{stderr}");
    assert!(!stdout.contains("JUNK-WRITTEN"), "{stdout}{stderr}");
}
