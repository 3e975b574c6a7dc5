//! `cleanroom serve --protect home` rules a protected path where it is when a process starts or
//! an `fs/*` call comes, not where it was when the server started: a toolchain home named by
//! its variable (`CARGO_HOME`) that the host creates after the start is read-only to a process
//! started without a sandbox of its own and to an `fs/writeFile`, and one whose symlink the host
//! repoints after the start (`RUSTUP_HOME`) is read-only at its new target, and so is one the
//! host binds elsewhere after the start; under `--protect strict` the processes confined so
//! still write the shared private `/tmp` and `/dev/shm`. Checked with real
//! processes and calls over a real WebSocket; the server's established namespaces (one private
//! `/dev/shm`, `/tmp`) are kept, so the processes still share them.

mod serve_support;
#[path = "../../cleanroom/tests/support/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};
use serve_support::{path_entry, uri, workspace_write, Client, Server};

/// A bash line that tries to create `path` and says `<tag>:ok` or `<tag>:denied`.
fn try_write(tag: &str, path: &Path) -> String {
    format!(
        "if ( echo x > '{}' ) 2>/dev/null; then echo {tag}:ok; else echo {tag}:denied; fi\n",
        path.display()
    )
}

/// `fs/writeFile` of `path` without a sandbox of its own.
async fn write_file(c: &mut Client, path: &Path) -> Result<Value, (i64, String)> {
    c.call(
        "fs/writeFile",
        json!({"path": uri(path), "dataBase64": BASE64.encode("x")}),
    )
    .await
}

/// Whether the tests' work dirs lie beneath `/tmp` or `/var/tmp` (a checkout under `/tmp`: the
/// servers' work dirs then go to `/var/tmp`, see `serve_support`). The environment's processes
/// see those through its private directories, whose rules are the mounts set up once.
fn work_beneath_private_tmp() -> bool {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    ["/tmp", "/var/tmp"].iter().any(|tmp| dir.starts_with(tmp))
}

/// `--protect home`, with `--host-tmp` where the work dirs lie beneath `/tmp` or `/var/tmp`: the
/// paths these tests make or move after the start must be the host's, which the rules resolved
/// at each start govern.
fn protect_home() -> Vec<&'static str> {
    let mut args = vec!["--protect", "home"];
    if work_beneath_private_tmp() {
        args.push("--host-tmp");
    }
    args
}

/// Whether the server's protection is fully enforced (else the test records a skip).
async fn enforced(c: &mut Client) -> bool {
    let info = c.call("environment/info", json!({})).await.unwrap();
    let enforcement = &info["cleanroom"]["protection"]["enforcement"];
    if enforcement != "full" {
        skip::skip(&format!(
            "--protect home is not fully enforced: {enforcement}"
        ));
        return false;
    }
    true
}

/// Runs one process without a sandbox in `cwd` that tries each of `writes` (a tag, a path, and
/// whether the write must succeed), then an `fs/writeFile` of `refused` that must fail (`what`
/// names it); every expectation missed, for one assertion.
async fn misses(
    c: &mut Client,
    cwd: &Path,
    writes: &[(&str, PathBuf, bool)],
    (refused, what): (&Path, &str),
) -> Vec<String> {
    let script: String = writes
        .iter()
        .map(|(tag, path, _)| try_write(tag, path))
        .collect();
    let (started, out, code) = c.run("writes", cwd, Value::Null, &script).await;
    assert_eq!(started["sandboxType"], "linuxSeccomp", "{started}");
    assert_eq!(code, 0, "{out}");
    let mut failures = Vec::new();
    for (tag, _, allowed) in writes {
        let expected = format!("{tag}:{}", if *allowed { "ok" } else { "denied" });
        if !out.contains(&expected) {
            failures.push(format!("process: {expected} not in {out:?}"));
        }
    }
    let written = write_file(c, refused).await;
    if written.is_ok() {
        failures.push(format!("fs/writeFile {what}: {written:?}"));
    }
    failures
}

/// A toolchain home absent at the start and created afterwards is read-only (its `bin/` too) to
/// a process without a sandbox of its own and to `fs/writeFile`; a directory beside it stays
/// writable. Fails where the server keeps the ruleset or the rules it built at the start (the
/// home was absent then: nothing was protected there).
#[tokio::test]
async fn a_toolchain_home_created_after_the_start_is_read_only() {
    let server = Server::start_prepared(&protect_home(), false, |work, command| {
        std::fs::create_dir(work.join("sibling")).unwrap();
        command.env("CARGO_HOME", work.join("cargo"));
    });
    let work = server.work();
    let mut c = server.client().await;
    if !enforced(&mut c).await {
        server.stop();
        return;
    }
    let cargo = work.join("cargo");
    assert!(!cargo.exists());
    std::fs::create_dir_all(cargo.join("bin")).unwrap();
    let writes = [
        ("bin", cargo.join("bin/f"), false),
        ("home", cargo.join("g"), false),
        // Not directly in the work dir: the cover leaves nothing new to be made in the
        // directories above a protected path.
        ("work", work.join("sibling/other"), true),
    ];
    let refused = cargo.join("bin/w");
    let failures = misses(
        &mut c,
        &work,
        &writes,
        (&refused, "into the later CARGO_HOME"),
    )
    .await;
    write_file(&mut c, &work.join("sibling/w"))
        .await
        .expect("fs/writeFile outside the toolchain home");
    assert!(failures.is_empty(), "{failures:#?}");
    for made in ["bin/f", "g", "bin/w"] {
        assert!(!cargo.join(made).exists(), "{made}");
    }
    server.stop();
}

/// A toolchain home named through a symlink that the host repoints after the start is
/// read-only at its new target, to a process without a sandbox of its own and to
/// `fs/writeFile`. Fails where the server keeps the start's rules (they protect the old
/// target).
#[tokio::test]
async fn a_toolchain_home_repointed_after_the_start_is_read_only_at_its_new_target() {
    let server = Server::start_prepared(&protect_home(), false, |work, command| {
        // Both exist from the start, so the start's cover grants `new` (writable then).
        std::fs::create_dir(work.join("old")).unwrap();
        std::fs::create_dir(work.join("new")).unwrap();
        std::os::unix::fs::symlink("old", work.join("rustup")).unwrap();
        command.env("RUSTUP_HOME", work.join("rustup"));
    });
    let work = server.work();
    let mut c = server.client().await;
    if !enforced(&mut c).await {
        server.stop();
        return;
    }
    let new = work.join("new");
    let link = work.join("rustup");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("new", &link).unwrap();
    let writes = [
        ("new", new.join("f"), false),
        ("link", link.join("g"), false),
    ];
    let refused = new.join("w");
    let failures = misses(&mut c, &work, &writes, (&refused, "into the new target")).await;
    assert!(failures.is_empty(), "{failures:#?}");
    for made in ["f", "g", "w"] {
        assert!(!new.join(made).exists(), "{made}");
    }
    server.stop();
}

/// Under `--protect strict` a process without a sandbox of its own, confined by the rules
/// compiled for it, still writes the environment's private `/tmp` and `/dev/shm` (shared: a
/// second process reads what the first left there, which the host's do not show) and nothing
/// else of the work dir, even a directory made after the start. Where the work dir lies beneath
/// `/tmp` or `/var/tmp` the server keeps the host's (`--host-tmp`, so the work dir is the host's
/// there too) and only `/dev/shm` is checked as private.
#[tokio::test]
async fn strict_processes_keep_the_shared_private_dirs_writable_and_the_rest_read_only() {
    let host_tmp = work_beneath_private_tmp();
    let mut args = vec!["--protect", "strict"];
    let mut private = vec!["/dev/shm"];
    match host_tmp {
        true => args.push("--host-tmp"),
        false => private.push("/tmp"),
    }
    let server = Server::start(&args);
    let work = server.work();
    let mut c = server.client().await;
    if !enforced(&mut c).await {
        server.stop();
        return;
    }
    std::fs::create_dir(work.join("later")).unwrap();
    let tag = format!("cleanroom-later-{}", std::process::id());
    let mut script: String = private
        .iter()
        .map(|dir| try_write(dir, &Path::new(dir).join(&tag)))
        .collect();
    script.push_str(&try_write("later", &work.join("later/f")));
    let (started, out, _) = c.run("strict", &work, Value::Null, &script).await;
    assert_eq!(started["sandboxType"], "linuxSeccomp", "{started}");
    for dir in &private {
        assert!(out.contains(&format!("{dir}:ok")), "{dir}:ok in {out:?}");
    }
    assert!(out.contains("later:denied"), "later:denied in {out:?}");
    let files: Vec<String> = private.iter().map(|dir| format!("{dir}/{tag}")).collect();
    let read = format!("cat {}\n", files.join(" "));
    let (_, out, code) = c.run("again", &work, Value::Null, &read).await;
    assert_eq!((code, out), (0, "x\n".repeat(private.len())));
    for dir in &private {
        assert!(!Path::new(dir).join(&tag).exists(), "{dir} is the host's");
    }
    assert!(!work.join("later/f").exists());
    server.stop();
}

/// A bind mount of a protected toolchain home that the host makes after the start is read-only
/// at its new place too, to a process without a sandbox of its own and to `fs/writeFile`. Fails
/// where processes keep the ruleset built at the start (it granted the directory holding the
/// mount point whole: Landlock looks past a mount point to its parent). Root only: the server
/// runs in a mount namespace of its own, where the test mounts.
#[tokio::test]
async fn a_bind_mount_of_a_toolchain_home_made_after_the_start_is_read_only() {
    if !skip::root_or_skip("a bind mount made after the start") {
        return;
    }
    let server = Server::start_in_mount_namespace(
        &protect_home(),
        false,
        |work, command| {
            for dir in ["cargo/bin", "granted/alias", "sibling"] {
                std::fs::create_dir_all(work.join(dir)).unwrap();
            }
            command.env("CARGO_HOME", work.join("cargo"));
        },
        // Shared, so a mount made once the server runs reaches its environment too.
        |_| "mount --make-rshared /".to_string(),
    );
    let work = server.work();
    let mut c = server.client().await;
    if !enforced(&mut c).await {
        server.stop();
        return;
    }
    let (cargo, alias) = (work.join("cargo"), work.join("granted/alias"));
    let mounted = std::process::Command::new("nsenter")
        .arg(format!("--mount=/proc/{}/ns/mnt", server.pid()))
        .args(["mount", "--bind"])
        .args([&cargo, &alias])
        .status()
        .unwrap();
    assert!(mounted.success());
    let writes = [
        ("alias", alias.join("bin/f"), false),
        ("cargo", cargo.join("bin/f"), false),
        ("work", work.join("sibling/f"), true),
    ];
    let refused = alias.join("bin/w");
    let failures = misses(&mut c, &work, &writes, (&refused, "through the bind")).await;
    assert!(failures.is_empty(), "{failures:#?}");
    for made in ["bin/f", "bin/w"] {
        assert!(!cargo.join(made).exists(), "{made}");
    }
    server.stop();
}

/// Whether the environment's namespaces are shared by its processes ([`Shared::Established`],
/// the normal case from Linux 6.15) or each process sets up namespaces of its own
/// ([`Shared::Fallback`]: a private `/tmp` on a kernel before 6.15, simulated here by the
/// debug builds' test hook).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shared {
    Established,
    Fallback,
}

/// The variable of the debug builds' test hook that makes the server behave as on a kernel
/// before 6.15 (children cannot bind host paths from shared namespaces: it falls back).
const KERNEL_BEFORE_6_15: &str = "CLEANROOM_TEST_KERNEL_BEFORE_6_15";

/// A server of `--protect home` set up as `shared` asks, after `prepare` (as
/// [`Server::start_prepared`]'s); `None` (a skip recorded) where that cannot be set up.
///
/// The fallback: the debug builds' test hook, and a private `/tmp` and `/var/tmp` (the host
/// paths that force it), over empty tmpfs mounts in a mount namespace of the server's own
/// (root only), where the processes share one private `/tmp` (over a host directory with
/// entries each has an overlay of its own: see
/// [`without_shared_namespaces_processes_start_over_a_host_tmp_with_entries`]).
fn server_as(
    shared: Shared,
    prepare: impl FnOnce(&Path, &mut std::process::Command),
) -> Option<Server> {
    if shared == Shared::Established {
        return Some(Server::start_prepared(&protect_home(), false, prepare));
    }
    fallback_server(false, &[], prepare)
}

/// A server of `--protect home` that falls back (see [`server_as`]), as root or as an ordinary
/// user (`ordinary`: `nobody`, through `setpriv` once its `/tmp` and `/var/tmp` are mounted),
/// over `/tmp` and `/var/tmp` with `entries` (see [`Server::start_over_fresh_tmp`]); `None` (a
/// skip recorded) where that cannot be set up.
fn fallback_server(
    ordinary: bool,
    entries: &[&str],
    prepare: impl FnOnce(&Path, &mut std::process::Command),
) -> Option<Server> {
    if !skip::root_or_skip("the fallback of a server over fresh /tmp and /var/tmp") {
        return None;
    }
    Some(Server::start_over_fresh_tmp(
        &["--protect", "home"],
        ordinary,
        entries,
        |work, command| {
            command.env(KERNEL_BEFORE_6_15, "1");
            prepare(work, command);
        },
    ))
}

/// Whether the environment's processes share one private `/dev/shm`: a file one process puts
/// there is read by the next.
async fn shares_dev_shm(c: &mut Client, cwd: &Path) -> bool {
    let tag = format!("cleanroom-shared-{}", std::process::id());
    let script = format!("echo x > /dev/shm/{tag}\n");
    let (_, out, code) = c.run("put", cwd, Value::Null, &script).await;
    assert_eq!(code, 0, "{out}");
    let script = format!("test -e /dev/shm/{tag} && echo seen || echo unseen\n");
    let (_, out, _) = c.run("look", cwd, Value::Null, &script).await;
    assert!(
        !Path::new("/dev/shm").join(&tag).exists(),
        "the host's /dev/shm"
    );
    out.trim() == "seen"
}

/// A writable name a process of the environment can repoint (the server's working directory,
/// an output directory named by `CARGO_TARGET_DIR` that is absent at the start) made a symlink
/// into the protected home by a process without a sandbox: neither a later process (without a
/// sandbox, or with a managed one over the planted name) nor an `fs/writeFile` writes through
/// it. The rules resolved at each start sit on top of the environment's start-time ruleset,
/// which the kernel keeps as a layer beneath them (reviewer's finding: with the renewed rules
/// alone, each of them wrote into the home); where each process sets up namespaces of its own
/// (`shared`: [`Shared::Fallback`]) the start-time layer is built alone at the start, beneath
/// every `fs/*` call and managed sandbox (reviewer's finding: without it the `fs/writeFile` and
/// both managed processes wrote into the home).
async fn repointed_writable_name(
    plant: &str,
    env: &'static [(&str, &str)],
    planted: &str,
    shared: Shared,
) {
    let server = server_as(shared, |work, command| {
        std::fs::create_dir_all(work.join("home/.ssh")).unwrap();
        std::fs::create_dir_all(work.join("a/proj")).unwrap();
        command.env("HOME", work.join("home"));
        for (var, path) in env {
            command.env(var, work.join(path));
        }
        command.current_dir(work.join("a/proj"));
    });
    let Some(server) = server else {
        return;
    };
    let work = server.work();
    let mut c = server.client().await;
    if !enforced(&mut c).await {
        server.stop();
        return;
    }
    let (a, ssh) = (work.join("a"), work.join("home/.ssh"));
    let fallback = shared == Shared::Fallback;
    assert_eq!(
        shares_dev_shm(&mut c, &a).await,
        !fallback,
        "fallback: {fallback}"
    );
    let (_, out, code) = c.run("plant", &a, Value::Null, plant).await;
    assert_eq!((code, out.trim()), (0, "planted"), "the planting process");
    let writes = [("null", ssh.join("f1"), false)];
    let refused = ssh.join("f2");
    let mut failures = misses(&mut c, &a, &writes, (&refused, "through the planted name")).await;
    for (id, cwd, file) in [
        ("managed", a.clone(), "f3"),
        ("over", work.join(planted), "f4"),
    ] {
        let script = try_write(id, &ssh.join(file));
        let (_, out, _) = c.run(id, &a, workspace_write(&cwd), &script).await;
        if !out.contains(&format!("{id}:denied")) {
            failures.push(format!("{id}: {out}"));
        }
    }
    let made: Vec<_> = std::fs::read_dir(&ssh)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        failures.is_empty() && made.is_empty(),
        "written into the protected home: {made:?}, {failures:#?}"
    );
    server.stop();
}

/// The server's working directory replaced by a symlink into the home.
async fn working_directory_replaced(shared: Shared) {
    let plant = "mv proj proj.old && ln -s ../home/.ssh proj && echo planted\n";
    repointed_writable_name(plant, &[], "a/proj", shared).await;
}

/// A `CARGO_TARGET_DIR` absent at the start planted as a symlink into the home.
async fn output_directory_planted(shared: Shared) {
    let plant = "ln -s ../home/.ssh target && echo planted\n";
    let env = &[("CARGO_TARGET_DIR", "a/target")];
    repointed_writable_name(plant, env, "a/target", shared).await;
}

#[tokio::test]
async fn a_working_directory_replaced_by_a_symlink_into_the_home_grants_nothing_there() {
    working_directory_replaced(Shared::Established).await;
}

#[tokio::test]
async fn an_output_directory_planted_as_a_symlink_into_the_home_grants_nothing_there() {
    output_directory_planted(Shared::Established).await;
}

/// As [`a_working_directory_replaced_by_a_symlink_into_the_home_grants_nothing_there`], where
/// each process sets up namespaces of its own (a kernel before 6.15).
#[tokio::test]
async fn without_shared_namespaces_a_working_directory_replaced_by_a_symlink_grants_nothing() {
    working_directory_replaced(Shared::Fallback).await;
}

/// As [`an_output_directory_planted_as_a_symlink_into_the_home_grants_nothing_there`], where
/// each process sets up namespaces of its own (a kernel before 6.15).
#[tokio::test]
async fn without_shared_namespaces_an_output_directory_planted_as_a_symlink_grants_nothing() {
    output_directory_planted(Shared::Fallback).await;
}

/// A toolchain home the host moves aside (and replaces with a new directory) after the start
/// stays read-only where it went, as the new one is: the start's ruleset still holds it.
#[tokio::test]
async fn a_toolchain_home_moved_aside_after_the_start_stays_read_only() {
    let server = Server::start_prepared(&protect_home(), false, |work, command| {
        std::fs::create_dir_all(work.join("a/rustup/bin")).unwrap();
        command.env("RUSTUP_HOME", work.join("a/rustup"));
    });
    let work = server.work();
    let mut c = server.client().await;
    if !enforced(&mut c).await {
        server.stop();
        return;
    }
    let (home, old) = (work.join("a/rustup"), work.join("a/rustup.old"));
    std::fs::rename(&home, &old).unwrap();
    std::fs::create_dir_all(home.join("bin")).unwrap();
    let writes = [
        ("old", old.join("bin/f"), false),
        ("new", home.join("bin/f"), false),
    ];
    let refused = old.join("bin/w");
    let failures = misses(&mut c, &work, &writes, (&refused, "into the moved home")).await;
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(!old.join("bin/f").exists() && !old.join("bin/w").exists());
    server.stop();
}

/// Where each process sets up namespaces of its own (a kernel before 6.15), the start-time
/// layer beneath `fs/*` calls and managed sandboxes still lets them write what the start
/// allowed: a process without a sandbox and one with a managed sandbox (`workspace-write` with
/// `/dev/shm` writable) write their private (managed: the server's) `/tmp`, their private
/// `/dev/shm` (the managed one's a tmpfs of its own, which the layer, built in the child after
/// its mounts, grants as the start granted its private `/dev/shm`) and the working directory;
/// `fs/writeFile` writes the working directory and `/tmp`; the home stays unwritten. As root
/// (see [`server_as`]).
#[tokio::test]
async fn without_shared_namespaces_processes_and_fs_calls_still_write_what_the_start_allowed() {
    start_allowed_writes(false).await;
}

/// As [`without_shared_namespaces_processes_and_fs_calls_still_write_what_the_start_allowed`],
/// the server run by an ordinary user (`nobody`), whose processes run as that user. Fails where
/// each process makes a user namespace of its own: a child of the server, which is not dumpable,
/// is not either, so its `/proc/self/uid_map` is root's and it cannot write its id maps (EACCES):
/// no process started at all.
#[tokio::test]
async fn without_shared_namespaces_an_ordinary_users_processes_start_and_stay_confined() {
    start_allowed_writes(true).await;
}

/// The writes of a fallback server's processes and `fs/*` calls, the server run as root or as
/// an ordinary user (`ordinary`).
async fn start_allowed_writes(ordinary: bool) {
    let server = fallback_server(ordinary, &[], |work, command| {
        for dir in ["home/.ssh", "proj"] {
            std::fs::create_dir_all(work.join(dir)).unwrap();
        }
        command.env("HOME", work.join("home"));
        command.current_dir(work.join("proj"));
    });
    let Some(server) = server else {
        return;
    };
    let work = server.work();
    let mut c = server.client().await;
    if !enforced(&mut c).await {
        server.stop();
        return;
    }
    let proj = work.join("proj");
    assert!(!shares_dev_shm(&mut c, &proj).await, "not the fallback");
    let (_, out, _) = c.run("uid", &proj, Value::Null, "id -u\n").await;
    let uid = if ordinary { serve_support::NOBODY } else { 0 };
    assert_eq!(out.trim(), uid.to_string(), "the processes' user");
    let tag = format!("cleanroom-layer-{}", std::process::id());
    let mut failures = Vec::new();
    let mut managed = workspace_write(&proj);
    let entries = &mut managed["permissions"]["file_system"]["entries"];
    let shm = path_entry(Path::new("/dev/shm"), "write");
    entries.as_array_mut().unwrap().push(shm);
    for (id, sandbox) in [("null", Value::Null), ("managed", managed)] {
        let writes = [
            ("tmp", Path::new("/tmp").join(format!("{tag}-{id}"))),
            ("shm", Path::new("/dev/shm").join(format!("{tag}-{id}"))),
            ("proj", proj.join(id)),
            ("home", work.join("home/.ssh").join(id)),
        ];
        let script: String = writes.iter().map(|(w, path)| try_write(w, path)).collect();
        let (_, out, code) = c.run(id, &proj, sandbox, &script).await;
        for (what, _) in &writes {
            let expected = match *what {
                "home" => "denied",
                _ => "ok",
            };
            if code != 0 || !out.contains(&format!("{what}:{expected}")) {
                failures.push(format!("{id}: {what}:{expected} not in {out:?} ({code})"));
            }
        }
    }
    // A managed sandbox that hides `/dev` starts too: the layer's rule on `/dev/shm`, which its
    // own mounts hide, grants nothing (it failed at the Landlock stage, ENOENT).
    let mut devless = workspace_write(&proj);
    let entries = &mut devless["permissions"]["file_system"]["entries"];
    let dev = path_entry(Path::new("/dev"), "none");
    entries.as_array_mut().unwrap().push(dev);
    let script = format!(
        "echo x > '{}' && echo started\n",
        proj.join("devless").display()
    );
    let (_, out, code) = c.run("devless", &proj, devless, &script).await;
    if code != 0 || !out.contains("started") {
        failures.push(format!("a managed sandbox hiding /dev: {out:?} ({code})"));
    }
    for path in [proj.join("w"), PathBuf::from("/tmp").join(&tag)] {
        if let Err(e) = write_file(&mut c, &path).await {
            failures.push(format!("fs/writeFile {}: {e:?}", path.display()));
        }
    }
    let refused = work.join("home/.ssh/w");
    if let Ok(written) = write_file(&mut c, &refused).await {
        failures.push(format!("fs/writeFile into the home: {written}"));
    }
    assert!(failures.is_empty(), "{failures:#?}");
    for made in ["null", "managed", "devless", "w"] {
        assert!(proj.join(made).exists(), "{made}");
    }
    let home: Vec<_> = std::fs::read_dir(work.join("home/.ssh")).unwrap().collect();
    assert!(home.is_empty(), "written into the protected home: {home:?}");
    for left in ["null", "managed"] {
        let name = format!("{tag}-{left}");
        for dir in ["/tmp", "/dev/shm"] {
            assert!(
                !Path::new(dir).join(&name).exists(),
                "{dir}/{name} is the host's"
            );
        }
    }
    server.stop();
}

/// Where the host's `/tmp` and `/var/tmp` have entries (their private directories are overlays
/// over them, whose `volatile` work directory serves one mount only) and each process sets up
/// namespaces of its own (a kernel before 6.15), a process without a managed sandbox cannot
/// mount them again: its start fails, and the error names the step (not a raw stage code), as
/// root and as an ordinary user. Nothing is written to the host's `/tmp`. A limit documented in
/// docs/exec-server.md; this test fails when it changes, so the docs are changed with it.
#[tokio::test]
async fn without_shared_namespaces_over_a_host_tmp_with_entries_a_start_names_the_overlay() {
    for ordinary in [false, true] {
        host_tmp_with_entries(ordinary).await;
    }
}

async fn host_tmp_with_entries(ordinary: bool) {
    let entry = "cleanroom-host-entry";
    let server = fallback_server(ordinary, &[entry], |work, command| {
        std::fs::create_dir_all(work.join("proj")).unwrap();
        command.current_dir(work.join("proj"));
    });
    let Some(server) = server else {
        return;
    };
    let proj = server.work().join("proj");
    let mut c = server.client().await;
    let (code, message) = c
        .error(
            "process/start",
            json!({"processId": "p", "argv": ["/bin/sh", "-c", "echo x > /tmp/mine"],
                   "cwd": uri(&proj), "env": {}, "tty": false, "arg0": null}),
        )
        .await;
    assert!(
        message.contains("cannot mount the private overlay on /tmp")
            && !message.contains("Unknown error"),
        "as nobody: {ordinary}: {code} {message}"
    );
    let host = format!("/proc/{}/root/tmp", server.pid());
    assert!(Path::new(&host).join(entry).exists(), "{host}");
    assert!(
        !Path::new(&host).join("mine").exists(),
        "written into the host's /tmp"
    );
    server.stop();
}
