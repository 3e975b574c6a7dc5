//! Write protection and network isolation, checked against the real kernel: each test spawns
//! real `sh -c` children with `Protection::configure` applied and looks at what the kernel
//! refused and at what is on disk afterwards.
//!
//! A temporary directory stands in for the real home (never the real one). Every fixture
//! directory is mode 0777 and every file 0666, so for an unprivileged child ordinary permissions
//! never refuse anything: what is refused, Landlock refused. Run as root (CI) the tests also run
//! their children as `nobody` through `setpriv`; run the whole binary as nobody
//! (`setpriv --reuid=65534 --regid=65534 --clear-groups <test binary>`) and they use the
//! unprivileged paths directly. No test sends traffic beyond loopback.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cleanroom::doctor;
use cleanroom::env::{HomeSource, RealHome, ToolchainHome};
use cleanroom::protect::{
    Enforcement, NetMode, ProtectMode, Protection, ProtectionRequest, TEST_LANDLOCK_ABSENT_ENV,
    TEST_LANDLOCK_MAX_ABI_ENV,
};
use cleanroom::Error;

mod support;
use support::*;

/// A fake machine: a real home, a `--protect-path`, the run's root and working directory, a
/// toolchain cache inside the home, and an ordinary directory elsewhere.
struct Fixture {
    _dir: tempfile::TempDir,
    base: PathBuf,
    home: PathBuf,
    guarded: PathBuf,
    root: PathBuf,
    cwd: PathBuf,
    cache: PathBuf,
    outside: PathBuf,
    allowed: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("cleanroom-protect-test-")
            .tempdir()
            .expect("create a temporary directory");
        let base = dir.path().canonicalize().unwrap();
        let fixture = Fixture {
            home: base.join("home"),
            guarded: base.join("guarded"),
            root: base.join("root"),
            cwd: base.join("cwd"),
            cache: base.join("home/.cargo"),
            outside: base.join("outside"),
            allowed: base.join("allowed"),
            base,
            _dir: dir,
        };
        for dir in [
            &fixture.base,
            &fixture.home,
            &fixture.home.join("sub"),
            &fixture.cache,
            &fixture.guarded,
            &fixture.root,
            &fixture.cwd,
            &fixture.outside,
            &fixture.allowed,
        ] {
            fs::create_dir_all(dir).unwrap();
            fs::set_permissions(dir, fs::Permissions::from_mode(0o777)).unwrap();
        }
        for file in [
            fixture.home.join("existing.txt"),
            fixture.home.join("sub/deep.txt"),
            fixture.guarded.join("file.txt"),
            fixture.outside.join("movable.txt"),
            fixture.root.join("movable.txt"),
        ] {
            fs::write(&file, PRECIOUS).unwrap();
            fs::set_permissions(&file, fs::Permissions::from_mode(0o666)).unwrap();
        }
        symlink(&fixture.home, fixture.base.join("link-to-home")).unwrap();
        symlink(&fixture.guarded, fixture.base.join("link-to-guarded")).unwrap();
        fixture
    }

    fn request(&self, mode: ProtectMode, net: NetMode) -> ProtectionRequest {
        ProtectionRequest {
            mode,
            protect_paths: vec![self.guarded.clone()],
            allow_write: Vec::new(),
            path_origins: Default::default(),
            net,
            require: false,
            homes: vec![RealHome {
                path: self.home.clone(),
                source: HomeSource::HomeVar,
            }],
            home_notes: Vec::new(),
            root: self.root.clone(),
            cwd: self.cwd.clone(),
            toolchain: vec![ToolchainHome {
                var: "CARGO_HOME".into(),
                path: self.cache.clone(),
                cache: true,
                writable: vec![self.cache.clone()],
            }],
            home_caches: Vec::new(),
            config: Vec::new(),
            output_dirs: Vec::new(),
            // The private /tmp has tests of its own (crates/cleanroom-cli/tests/private_tmp.rs):
            // these prepare several protections on one root.
            private_tmp: false,
            share_tmp: Vec::new(),
            sockets: Vec::new(),
        }
    }

    /// Runs `script` with `sh -c` in the working directory, as the current user or as nobody.
    fn run(&self, protection: &Protection, who: Who, script: &str) -> Output {
        let mut command = shell(who, &format!("{TRY}\n{script}"));
        command
            .current_dir(&self.cwd)
            .env("B", &self.base)
            .env("H", &self.home)
            .env("G", &self.guarded)
            .env("R", &self.root)
            .env("C", &self.cache)
            .env("O", &self.outside)
            .env("A", &self.allowed);
        protection.configure(&mut command);
        checked_output(&mut command)
    }

    /// Every entry under `dir` with its content (directories as "<dir>"), for before/after
    /// comparisons.
    fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                let meta = fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    out.insert(path.clone(), "<dir>".into());
                    stack.push(path);
                } else {
                    let content = fs::read_to_string(&path).unwrap_or_default();
                    out.insert(path, format!("{content} ({} links)", nlink(&meta)));
                }
            }
        }
        out
    }
}

fn nlink(meta: &fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::nlink(meta)
}

/// Every way to write into directory `$1` (holding `existing.txt`-like file `$2` and a
/// subdirectory `$3` or nothing), with labels prefixed by `$4`.
fn every_write_into(dir: &str, file: &str, label: &str) -> (String, Vec<String>) {
    let cases = [
        ("create", format!("write {dir}/new.txt")),
        ("overwrite", format!("write {dir}/{file}")),
        ("append", format!("append {dir}/{file}")),
        ("truncate(2)", format!("ptruncate {dir}/{file}")),
        ("truncate-shell", format!("shtruncate {dir}/{file}")),
        ("unlink", format!("rm -f {dir}/{file}")),
        ("mkdir", format!("mkdir {dir}/newdir")),
        (
            "rename-into",
            format!("mv \"$O/movable.txt\" {dir}/moved.txt"),
        ),
        (
            "rename(2)-into",
            format!("prename \"$O/movable.txt\" {dir}/moved.txt"),
        ),
        (
            "rename(2)-out",
            format!("prename {dir}/{file} \"$O/stolen.txt\""),
        ),
        ("rename-out", format!("mv {dir}/{file} \"$O/stolen.txt\"")),
        (
            "rename-within",
            format!("mv {dir}/{file} {dir}/renamed.txt"),
        ),
        (
            "hardlink-into",
            format!("ln \"$O/movable.txt\" {dir}/hardlink.txt"),
        ),
        (
            "hardlink-out",
            format!("ln {dir}/{file} \"$O/hardlink-out.txt\""),
        ),
        ("symlink", format!("ln -s /etc/passwd {dir}/symlink")),
        ("mkfifo", format!("mkfifo {dir}/fifo")),
        ("touch-new", format!("touch {dir}/touched.txt")),
    ];
    let mut script = String::new();
    let mut labels = Vec::new();
    for (name, command) in cases {
        let label = format!("{label}:{name}");
        script.push_str(&format!("try '{label}' {command}\n"));
        labels.push(label);
    }
    (script, labels)
}

fn labels(labels: &[String]) -> Vec<&str> {
    labels.iter().map(String::as_str).collect()
}

fn prepare(request: &ProtectionRequest) -> Protection {
    Protection::prepare(request).expect("prepare protection")
}

#[test]
fn home_mode_refuses_every_kind_of_write_into_the_real_home() {
    let fx = Fixture::new();
    let protection = prepare(&fx.request(ProtectMode::Home, NetMode::Host));
    assert_eq!(protection.status().enforcement, Enforcement::Full);
    let before = Fixture::snapshot(&fx.home);
    let (script, all) = every_write_into("\"$H\"", "existing.txt", "home");
    let (sub_script, sub) = every_write_into("\"$H/sub\"", "deep.txt", "home/sub");
    let output = fx.run(
        &protection,
        Who::Me,
        &format!("{script}{sub_script}try home:rmdir rmdir \"$H/sub\"\n"),
    );
    assert_all(&output, "REFUSED", &labels(&all));
    assert_all(&output, "REFUSED", &labels(&sub));
    assert_all(&output, "REFUSED", &["home:rmdir"]);
    assert_eq!(Fixture::snapshot(&fx.home), before, "the home changed");
    assert_eq!(
        fs::read_to_string(fx.outside.join("movable.txt")).unwrap(),
        PRECIOUS,
        "a refused rename must leave its source in place"
    );
    assert!(!fx.outside.join("stolen.txt").exists());
    assert!(!fx.outside.join("hardlink-out.txt").exists());
}

#[test]
fn home_mode_refuses_writes_into_the_real_home_through_a_symlink_and_relative_paths() {
    let fx = Fixture::new();
    let protection = prepare(&fx.request(ProtectMode::Home, NetMode::Host));
    let before = Fixture::snapshot(&fx.home);
    let mut script = String::new();
    let mut all = Vec::new();
    for (spelling, dir) in [
        ("symlink", "\"$B/link-to-home\""),
        ("relative", "../home"),
        ("dotted", "\"$B/cwd/../home/./sub/..\""),
        ("double-slash", "\"$B//home/\""),
        ("proc-fd", "/proc/self/cwd/../home"),
    ] {
        let (part, labels) = every_write_into(dir, "existing.txt", spelling);
        script.push_str(&part);
        all.extend(labels);
    }
    // From inside the home, with paths relative to it.
    script.push_str(
        "cd \"$B/link-to-home\" && try inside:create write new.txt && try inside:unlink rm -f existing.txt && try inside:mkdir mkdir d\n",
    );
    all.extend(["inside:create", "inside:unlink", "inside:mkdir"].map(String::from));
    let output = fx.run(&protection, Who::Me, &script);
    assert_all(&output, "REFUSED", &labels(&all));
    assert_eq!(Fixture::snapshot(&fx.home), before, "the home changed");
}

#[test]
fn home_mode_refuses_writes_into_a_protect_path_in_every_spelling() {
    let fx = Fixture::new();
    let protection = prepare(&fx.request(ProtectMode::Home, NetMode::Host));
    let before = Fixture::snapshot(&fx.guarded);
    let mut script = String::new();
    let mut all = Vec::new();
    for (spelling, dir) in [
        ("absolute", "\"$G\""),
        ("symlink", "\"$B/link-to-guarded\""),
        ("relative", "../guarded"),
    ] {
        let (part, labels) = every_write_into(dir, "file.txt", spelling);
        script.push_str(&part);
        all.extend(labels);
    }
    let output = fx.run(&protection, Who::Me, &script);
    assert_all(&output, "REFUSED", &labels(&all));
    assert_eq!(
        Fixture::snapshot(&fx.guarded),
        before,
        "the protected path changed"
    );
}

#[test]
fn home_mode_allows_writes_in_the_root_the_working_directory_the_caches_and_elsewhere() {
    let fx = Fixture::new();
    let protection = prepare(&fx.request(ProtectMode::Home, NetMode::Host));
    let output = fx.run(
        &protection,
        Who::Me,
        r#"
try root:create write "$R/new.txt"
try root:truncate ptruncate "$R/new.txt"
try root:mkdir mkdir "$R/dir"
try root:rename-to-cwd mv "$R/movable.txt" ./moved.txt
try root:hardlink-to-cwd ln ./moved.txt "$R/linked.txt"
try cwd:create write ./cwd.txt
try cwd:mkdir mkdir -p ./target/debug
try cwd:unlink rm ./cwd.txt
try cache:create write "$C/registry-entry"
try cache:mkdir mkdir -p "$C/registry/cache"
try outside:create write "$O/new.txt"
try outside:rename mv "$O/movable.txt" "$O/renamed.txt"
try dev:null write /dev/null
try dev:zero-read head -c 1 /dev/zero
"#,
    );
    assert_all(
        &output,
        "ALLOWED",
        &[
            "root:create",
            "root:truncate",
            "root:mkdir",
            "root:rename-to-cwd",
            "root:hardlink-to-cwd",
            "cwd:create",
            "cwd:mkdir",
            "cwd:unlink",
            "cache:create",
            "cache:mkdir",
            "outside:create",
            "outside:rename",
            "dev:null",
            "dev:zero-read",
        ],
    );
    assert!(fx.cache.join("registry/cache").is_dir());
    assert!(fx.cwd.join("target/debug").is_dir());
}

#[test]
fn home_mode_protects_the_real_home_from_an_unprivileged_user_that_permissions_would_allow() {
    let fx = Fixture::new();
    // Without protection, nobody may write the (0777) fake home: ordinary permissions allow it.
    let off = prepare(&fx.request(ProtectMode::Off, NetMode::Host));
    let output = fx.run(
        &off,
        Who::Nobody,
        "try control:create write \"$H/control.txt\" && try control:unlink rm \"$H/control.txt\"\nid -u",
    );
    assert_all(&output, "ALLOWED", &["control:create", "control:unlink"]);
    assert!(String::from_utf8_lossy(&output.stdout).contains(&NOBODY.to_string()));

    let protection = prepare(&fx.request(ProtectMode::Home, NetMode::Host));
    let before = Fixture::snapshot(&fx.home);
    let (script, all) = every_write_into("\"$H\"", "existing.txt", "home");
    let (guarded, guarded_labels) =
        every_write_into("\"$B/link-to-guarded\"", "file.txt", "guarded");
    let output = fx.run(
        &protection,
        Who::Nobody,
        &format!("{script}{guarded}try root:create write \"$R/nobody.txt\"\ntry cwd:create write ./nobody.txt\ntry cache:create write \"$C/nobody.txt\"\n"),
    );
    assert_all(&output, "REFUSED", &labels(&all));
    assert_all(&output, "REFUSED", &labels(&guarded_labels));
    assert_all(
        &output,
        "ALLOWED",
        &["root:create", "cwd:create", "cache:create"],
    );
    assert_eq!(
        Fixture::snapshot(&fx.home).len(),
        before.len() + 1,
        "only the cache write"
    );
}

#[test]
fn home_mode_lets_a_project_inside_the_home_write_only_its_own_directory() {
    let fx = Fixture::new();
    let project = fx.home.join("src/project");
    fs::create_dir_all(&project).unwrap();
    let mut request = fx.request(ProtectMode::Home, NetMode::Host);
    request.cwd = project.clone();
    let protection = prepare(&request);
    let mut command = shell(
        Who::Me,
        &format!(
            "{TRY}try cwd:build mkdir -p target/debug\ntry cwd:write write target/debug/out\n\
             try home-sibling write ../sibling.txt\ntry home-top write \"$H/top.txt\"\n\
             try project-itself mv \"$H/src/project\" \"$H/src/moved\"\n"
        ),
    );
    command.current_dir(&project).env("H", &fx.home);
    protection.configure(&mut command);
    let output = command.output().unwrap();
    assert_all(&output, "ALLOWED", &["cwd:build", "cwd:write"]);
    assert_all(
        &output,
        "REFUSED",
        &["home-sibling", "home-top", "project-itself"],
    );
    assert!(project.join("target/debug/out").is_file());
}

#[test]
fn home_mode_protects_a_single_file_named_with_protect_path() {
    let fx = Fixture::new();
    let secret = fx.outside.join("config.toml");
    fs::write(&secret, PRECIOUS).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o666)).unwrap();
    let mut request = fx.request(ProtectMode::Home, NetMode::Host);
    request.protect_paths.push(secret.clone());
    let protection = prepare(&request);
    let output = fx.run(
        &protection,
        Who::Nobody,
        r#"
try file:overwrite write "$O/config.toml"
try file:truncate ptruncate "$O/config.toml"
try file:unlink rm -f "$O/config.toml"
try file:replace prename "$R/movable.txt" "$O/config.toml"
try sibling:overwrite write "$O/movable.txt"
"#,
    );
    assert_all(
        &output,
        "REFUSED",
        &[
            "file:overwrite",
            "file:truncate",
            "file:unlink",
            "file:replace",
        ],
    );
    // Existing siblings stay writable (new ones cannot be created: `outside` is now an
    // ancestor of a protected path, see `no_new_entries_in`).
    assert_all(&output, "ALLOWED", &["sibling:overwrite"]);
    assert_eq!(fs::read_to_string(&secret).unwrap(), PRECIOUS);
    assert!(protection.status().no_new_entries_in.contains(&fx.outside));
}

#[test]
fn home_mode_refuses_to_move_or_replace_the_home_itself() {
    let fx = Fixture::new();
    let protection = prepare(&fx.request(ProtectMode::Home, NetMode::Host));
    let output = fx.run(
        &protection,
        Who::Me,
        r#"
try rename-away prename "$H" "$B/old-home"
try rename-over prename "$R" "$H"
try rmdir rmdir "$H"
try rm-rf rm -rf "$H"
"#,
    );
    assert_all(
        &output,
        "REFUSED",
        &["rename-away", "rename-over", "rmdir", "rm-rf"],
    );
    assert_eq!(
        fs::read_to_string(fx.home.join("existing.txt")).unwrap(),
        PRECIOUS
    );
    assert!(fx.root.is_dir());
}

#[test]
fn protection_applies_to_the_whole_process_tree() {
    let fx = Fixture::new();
    let protection = prepare(&fx.request(ProtectMode::Home, NetMode::Host));
    let output = fx.run(
        &protection,
        Who::Me,
        r#"
try grandchild sh -c 'sh -c "echo x > \"$H/grandchild.txt\""'
try detached setsid sh -c 'echo x > "$H/setsid.txt"'
(echo x > "$H/background.txt") 2>/dev/null &
wait
try env-reset env -i /bin/sh -c "echo x > '$H/env-reset.txt'"
"#,
    );
    assert_all(&output, "REFUSED", &["grandchild", "detached", "env-reset"]);
    for name in [
        "grandchild.txt",
        "setsid.txt",
        "background.txt",
        "env-reset.txt",
    ] {
        assert!(!fx.home.join(name).exists(), "{name} was written");
    }
}

#[test]
fn strict_mode_refuses_writes_outside_the_root_the_working_directory_and_allowed_paths_caches_included(
) {
    let fx = Fixture::new();
    let mut request = fx.request(ProtectMode::Strict, NetMode::Host);
    request.allow_write = vec![fx.allowed.clone()];
    let protection = prepare(&request);
    assert_eq!(protection.status().enforcement, Enforcement::Full);
    for who in [Who::Me, Who::Nobody] {
        let output = fx.run(
            &protection,
            who,
            r#"
try outside:create write "$O/new.txt"
try outside:unlink rm -f "$O/movable.txt"
try outside:mkdir mkdir "$O/d"
try base:create write "$B/new.txt"
try home:create write "$H/new.txt"
try guarded:create write "$G/new.txt"
try root:create write "$R/strict.txt"
try root:rm rm "$R/strict.txt"
try cwd:create write ./strict.txt
try cwd:rm rm ./strict.txt
try allowed:create write "$A/strict.txt"
try allowed:rm rm "$A/strict.txt"
try cache:create write "$C/strict.txt"
try dev:null write /dev/null
try dev:full-read head -c 1 /dev/full
"#,
        );
        assert_all(
            &output,
            "REFUSED",
            &[
                "outside:create",
                "outside:unlink",
                "outside:mkdir",
                "base:create",
                "home:create",
                "guarded:create",
                "cache:create",
            ],
        );
        assert_all(
            &output,
            "ALLOWED",
            &[
                "root:create",
                "root:rm",
                "cwd:create",
                "cwd:rm",
                "allowed:create",
                "allowed:rm",
                "dev:null",
                "dev:full-read",
            ],
        );
    }
    assert_eq!(
        fs::read_to_string(fx.outside.join("movable.txt")).unwrap(),
        PRECIOUS
    );
}

#[test]
fn strict_mode_keeps_the_terminal_usable_for_interactive_programs() {
    let fx = Fixture::new();
    let protection = prepare(&fx.request(ProtectMode::Strict, NetMode::Host));
    for who in [Who::Me, Who::Nobody] {
        // `script` gives the child a pseudo-terminal; opening /dev/tty afresh needs the device
        // grants (read, write and, from ABI 5, ioctl).
        let output = fx.run(
            &protection,
            who,
            r#"try tty script -qec 'stty size < /dev/tty && echo hello > /dev/tty' /dev/null"#,
        );
        assert_all(&output, "ALLOWED", &["tty"]);
    }
}

#[test]
fn off_mode_installs_no_policy() {
    let fx = Fixture::new();
    let protection = prepare(&fx.request(ProtectMode::Off, NetMode::Host));
    assert_eq!(protection.status().enforcement, Enforcement::None);
    assert!(
        protection.status().warnings.is_empty(),
        "{:?}",
        protection.status().warnings
    );
    let output = fx.run(&protection, Who::Me, "try home:create write \"$H/off.txt\"");
    assert_all(&output, "ALLOWED", &["home:create"]);
}

#[test]
fn protection_status_reports_full_enforcement_and_the_canonical_paths() {
    let fx = Fixture::new();
    let mut request = fx.request(ProtectMode::Home, NetMode::Host);
    // Spell the protect path through a symlink and with a relative component.
    request.protect_paths = vec![
        fx.base.join("link-to-guarded"),
        fx.base.join("cwd/../home/sub"),
    ];
    request.require = true;
    let protection = prepare(&request);
    let status = protection.status();
    let abi = kernel_landlock_abi().expect("this machine has Landlock");
    assert_eq!(status.landlock_abi, Some(abi));
    assert_eq!(
        status.enforcement,
        if abi >= 3 {
            Enforcement::Full
        } else {
            Enforcement::Partial
        }
    );
    assert!(status.reason.is_none(), "{:?}", status.reason);
    assert!(status.read_only.contains(&fx.home));
    assert!(status.read_only.contains(&fx.guarded));
    assert!(status.read_only.contains(&fx.home.join("sub")));
    assert!(status.writable.contains(&fx.cache) && status.writable.contains(&fx.root));
    assert!(status.no_new_entries_in.contains(&fx.base));
    assert!(status.rules > 0);
    assert!(status.warnings.is_empty(), "{:?}", status.warnings);
    let shown = status.to_string();
    assert!(
        shown.contains("protect home: full") && shown.contains(&format!("ABI {abi}")),
        "{shown}"
    );
    let json = serde_json::to_value(status).unwrap();
    assert_eq!(json["enforcement"], "full");
    assert_eq!(json["mode"], "home");
}

/// A protect path that does not exist is a rule reported absent (nothing to make read-only),
/// as every rule on a missing path; under `require` it is refused, naming the option: nothing
/// could keep the run from creating it.
#[test]
fn a_protect_path_that_does_not_exist_is_absent_and_refused_only_when_required() {
    let fx = Fixture::new();
    let mut request = fx.request(ProtectMode::Home, NetMode::Host);
    let missing = fx.base.join("missing");
    request.protect_paths = vec![missing.clone()];
    request.allow_write = vec![fx.base.join("missing-too")];
    let protection = Protection::prepare(&request).unwrap();
    let rule = protection
        .status()
        .policy
        .iter()
        .find(|r| r.path == missing)
        .unwrap_or_else(|| panic!("no rule on {}", missing.display()));
    assert_eq!(
        serde_json::to_value(rule).unwrap()["enforced_by"],
        "absent",
        "{rule:?}"
    );
    // Each is a warning naming the option (or where the caller says the path came from).
    let warned = |protection: &Protection, words: &str| {
        let warnings = &protection.status().warnings;
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with(words) && w.contains("does not exist")),
            "no {words:?}: {warnings:?}"
        );
    };
    warned(
        &protection,
        &format!("--protect-path {}", missing.display()),
    );
    let missing_too = fx.base.join("missing-too");
    warned(
        &protection,
        &format!("--allow-write {}", missing_too.display()),
    );
    request.path_origins.insert(
        missing.clone(),
        "project.toml:3: run.protect-path[0] =".into(),
    );
    let protection = Protection::prepare(&request).unwrap();
    warned(
        &protection,
        &format!(
            "project.toml:3: run.protect-path[0] = {}",
            missing.display()
        ),
    );
    request.path_origins.clear();
    request.require = true;
    let err = Protection::prepare(&request).unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("--protect-path"), "{err}");
}

#[test]
fn require_protection_fails_cleanly_where_landlock_is_absent() {
    run_scenario("landlock_absent_scenario", TEST_LANDLOCK_ABSENT_ENV, "1");
}

#[test]
fn an_abi_2_kernel_gets_partial_protection_that_misses_only_truncate() {
    run_scenario("landlock_abi_2_scenario", TEST_LANDLOCK_MAX_ABI_ENV, "2");
}

#[test]
fn an_abi_1_kernel_gets_partial_protection_and_refuses_every_cross_directory_rename() {
    run_scenario("landlock_abi_1_scenario", TEST_LANDLOCK_MAX_ABI_ENV, "1");
}

#[test]
#[ignore = "run by an_abi_2_kernel_gets_partial_protection_that_misses_only_truncate"]
fn landlock_abi_2_scenario() {
    require_switch(TEST_LANDLOCK_MAX_ABI_ENV, "2");
    let fx = Fixture::new();
    let mut request = fx.request(ProtectMode::Home, NetMode::Host);
    request.require = true;
    let err = Protection::prepare(&request).unwrap_err();
    assert!(
        matches!(&err, Error::Unsupported { reason, .. } if reason.contains("truncate")),
        "{err:?}"
    );
    request.require = false;
    let protection = prepare(&request);
    let status = protection.status();
    assert_eq!(status.enforcement, Enforcement::Partial);
    assert_eq!(status.landlock_abi, Some(2));
    assert!(status.warnings[0].contains("only partly enforced"));
    let (script, all) = every_write_into("\"$H\"", "existing.txt", "home");
    let output = fx.run(
        &protection,
        Who::Me,
        &format!("{script}try root:rename-to-cwd prename \"$R/movable.txt\" ./moved.txt\n"),
    );
    // The kernel still refuses everything but truncate(2), which ABI 2 cannot express.
    let refused: Vec<&str> = labels(&all)
        .into_iter()
        .filter(|l| *l != "home:truncate(2)")
        .collect();
    assert_all(&output, "REFUSED", &refused);
    assert_all(
        &output,
        "ALLOWED",
        &["home:truncate(2)", "root:rename-to-cwd"],
    );
    assert_eq!(
        fs::read_to_string(fx.home.join("existing.txt")).unwrap(),
        ""
    );
    let report = doctor::probe(&fx.base.join("ns"));
    assert_eq!(report.machine.landlock.abi, Some(2));
    assert_eq!(report.protection.choice, "partial");
    scenario_done("landlock_abi_2_scenario");
}

#[test]
#[ignore = "run by an_abi_1_kernel_gets_partial_protection_and_refuses_every_cross_directory_rename"]
fn landlock_abi_1_scenario() {
    require_switch(TEST_LANDLOCK_MAX_ABI_ENV, "1");
    let fx = Fixture::new();
    let protection = prepare(&fx.request(ProtectMode::Home, NetMode::Host));
    let status = protection.status();
    assert_eq!(status.enforcement, Enforcement::Partial);
    assert!(status.reason.as_deref().unwrap().contains("ABI 1"));
    let output = fx.run(
        &protection,
        Who::Me,
        r#"
try home:create write "$H/new.txt"
try home:rename-into mv "$O/movable.txt" "$H/moved.txt"
try root:rename-within prename "$R/movable.txt" "$R/renamed.txt"
try root:rename-to-cwd prename "$R/renamed.txt" ./moved.txt
"#,
    );
    assert_all(&output, "REFUSED", &["home:create", "home:rename-into"]);
    assert_all(&output, "ALLOWED", &["root:rename-within"]);
    // Without the Refer right the kernel refuses to reparent anything (EXDEV), even between
    // two writable directories; `mv` would fall back to copying, rename(2) does not.
    assert_all(&output, "REFUSED", &["root:rename-to-cwd"]);
    assert!(fx.root.join("renamed.txt").exists());
    scenario_done("landlock_abi_1_scenario");
}

#[test]
#[ignore = "run by require_protection_fails_cleanly_where_landlock_is_absent with the switch set"]
fn landlock_absent_scenario() {
    require_switch(TEST_LANDLOCK_ABSENT_ENV, "1");
    let fx = Fixture::new();
    let mut request = fx.request(ProtectMode::Home, NetMode::Host);
    request.require = true;
    let err = Protection::prepare(&request).unwrap_err();
    match &err {
        Error::Unsupported { what, reason } => {
            assert!(what.contains("--require-protection"), "{what}");
            assert!(reason.contains(TEST_LANDLOCK_ABSENT_ENV), "{reason}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }

    // Best effort: one warning, and the command runs (unprotected: the kernel gives nothing).
    request.require = false;
    let protection = prepare(&request);
    let status = protection.status();
    assert_eq!(status.enforcement, Enforcement::None);
    assert_eq!(status.landlock_abi, None);
    let warning = status.warnings.first().expect("a warning");
    assert!(
        warning.contains("not enforced") && warning.contains("--require-protection"),
        "{warning}"
    );
    let output = fx.run(
        &protection,
        Who::Me,
        "try home:create write \"$H/unprotected.txt\"",
    );
    assert_all(&output, "ALLOWED", &["home:create"]);

    // Off needs no Landlock, even when required.
    request.mode = ProtectMode::Off;
    request.require = true;
    assert!(Protection::prepare(&request).is_ok());

    let report = doctor::probe(&fx.base.join("ns"));
    assert_eq!(report.machine.landlock.abi, None);
    assert_eq!(report.protection.choice, "none");
    scenario_done("landlock_absent_scenario");
}

fn net_none_output(who: Who, script: &str) -> Output {
    let fx = Fixture::new();
    let protection = prepare(&fx.request(ProtectMode::Home, NetMode::None));
    assert_eq!(protection.status().net, NetMode::None);
    let mut command = Command::new("sh");
    command.args(["-c", script]).current_dir(&fx.cwd);
    if who == Who::Nobody {
        drop_to_nobody(&mut command);
    }
    protection.configure(&mut command);
    checked_output(&mut command)
}

const LOOPBACK_PAIR: &str = r#"perl -MIO::Socket::INET -e '
my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 1) or die "listen: $!\n";
my $c = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $l->sockport, Timeout => 5) or die "connect: $!\n";
my $s = $l->accept or die "accept: $!\n";
print $c "ping\n"; $c->flush; my $got = <$s>; print "server got $got";'"#;

const UNREACHABLE: &str = r#"perl -MIO::Socket::INET -e '
IO::Socket::INET->new(PeerAddr => "192.0.2.1", PeerPort => 9, Proto => "tcp") and die "connected\n";
print "connect: $!\n";'"#;

fn check_loopback_only(output: &Output) {
    let stdout = String::from_utf8_lossy(output.stdout.as_slice());
    let links: Vec<&str> = stdout.lines().filter(|l| l.starts_with("link ")).collect();
    assert_eq!(links.len(), 1, "expected only lo:\n{stdout}");
    assert!(
        links[0].contains(" lo:") && links[0].contains(",UP"),
        "lo is not up:\n{stdout}"
    );
    let devs: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("dev "))
        .collect();
    assert_eq!(devs, ["lo"], "/proc/net/dev:\n{stdout}");
    assert!(stdout.contains("server got ping"), "{stdout}");
    assert!(
        stdout.contains("connect: Network is unreachable"),
        "{stdout}"
    );
}

const NET_SCRIPT_TAIL: &str = r#"
ip -o link | sed 's/^/link /'
tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sed 's/^/dev /'
"#;

#[test]
fn net_none_child_sees_only_loopback_which_is_up_and_serves_a_local_pair() {
    let output = net_none_output(
        Who::Me,
        &format!("{NET_SCRIPT_TAIL}\n{LOOPBACK_PAIR}\n{UNREACHABLE}\n"),
    );
    check_loopback_only(&output);
}

#[test]
fn net_none_works_for_an_unprivileged_user_who_keeps_their_uid() {
    let output = net_none_output(
        Who::Nobody,
        &format!(
            "echo uid $(id -u) gid $(id -g)\n{NET_SCRIPT_TAIL}\n{LOOPBACK_PAIR}\n{UNREACHABLE}\n"
        ),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("uid {NOBODY} gid {NOBODY}")),
        "{stdout}"
    );
    check_loopback_only(&output);
}

#[test]
fn net_host_leaves_the_network_namespace_alone() {
    let fx = Fixture::new();
    let protection = prepare(&fx.request(ProtectMode::Off, NetMode::Host));
    let mut command = Command::new("readlink");
    command.arg("/proc/self/ns/net");
    protection.configure(&mut command);
    let child = command.output().unwrap();
    let ours = fs::read_link("/proc/self/ns/net").unwrap();
    assert_eq!(
        String::from_utf8_lossy(&child.stdout).trim(),
        ours.to_string_lossy()
    );
}

#[test]
fn doctor_reports_what_this_machine_allows() {
    let dir = tempfile::tempdir().unwrap();
    let report = doctor::probe(&dir.path().join("ns"));
    let abi = kernel_landlock_abi();
    assert_eq!(report.machine.landlock.abi, abi);
    assert_eq!(report.machine.euid, rustix::process::geteuid().as_raw());
    // Measured facts of this kind of machine (research/platform.md).
    assert!(
        report.machine.user_namespaces.available,
        "{:?}",
        report.machine.user_namespaces
    );
    assert!(
        report.machine.network_namespace.available,
        "{:?}",
        report.machine.network_namespace
    );
    assert!(report.machine.pidfd.available && report.machine.subreaper.available);
    assert_eq!(report.net_none.choice, "available");
    assert_eq!(
        report.protection.choice,
        if abi >= Some(3) { "full" } else { "partial" }
    );
    let mount = report
        .machine
        .cgroup
        .mount
        .clone()
        .expect("a cgroup2 mount");
    assert!(fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.contains(&format!(" {} ", mount.display())) && l.contains(" - cgroup2 ")));
    if running_as_root() {
        assert!(
            report.machine.cgroup.can_create,
            "{:?}",
            report.machine.cgroup
        );
        assert_eq!(report.containment.choice, "cgroup");
    } else {
        assert!(!report.machine.cgroup.can_create);
        assert_eq!(report.containment.choice, "session");
    }
    // No probe cgroup is left behind.
    let own = report.machine.cgroup.own.clone().unwrap();
    let parent = mount.join(own.trim_start_matches('/'));
    let leftovers: Vec<_> = fs::read_dir(&parent)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("cleanroom-doctor-")
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["format"], "cleanroom-doctor");
    assert_eq!(json["landlock"]["abi"], serde_json::json!(abi));
    for key in [
        "user_namespaces",
        "network_namespace",
        "cgroup",
        "pidfd",
        "subreaper",
        "containment",
        "protection",
        "net_none",
    ] {
        assert!(json.get(key).is_some(), "missing {key} in {json}");
    }
    let text = report.to_string();
    println!("{text}");
    for needle in [
        "landlock",
        "user namespaces",
        "cgroup v2",
        "pidfd",
        "subreaper",
        "containment",
        "protect home",
        "--net none",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}
