//! Managed per-process sandbox policies of `cleanroom serve`, checked from inside the child
//! with real system calls: Codex's `workspace-write` and `read-only` run (never refused) and
//! confine writes; a `none` entry cannot be read; `.git` inside a writable cwd stays read-only
//! even when the policy does not name it; `network: restricted` leaves only loopback, and a
//! loopback listener outside the child's namespace cannot be reached; what cannot be enforced is
//! refused with -32602 naming the entry.

mod serve_support;
#[path = "../../cleanroom/tests/support/skip.rs"]
mod skip;

use std::net::TcpListener;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use serve_support::{
    decode, managed, path_entry, read_only, special, uri, workspace_write, wrap, Client, Server,
};

/// A server of `--protect <protect>` run by an ordinary user (nobody as root) over [`layout`],
/// with its `ws` and `outside`.
fn ordinary_users_server_over_layout(protect: &str) -> (Server, PathBuf, PathBuf) {
    let server = Server::start_prepared(&["--protect", protect], true, |work, _| {
        layout(work);
    });
    let work = server.work();
    let (ws, outside) = (work.join("ws"), work.join("outside"));
    (server, ws, outside)
}

/// `work/ws` (a git-like workspace with a secret) and `work/outside`.
fn layout(work: &Path) -> (PathBuf, PathBuf) {
    let ws = work.join("ws");
    let outside = work.join("outside");
    for dir in [ws.join(".git"), ws.join("secret"), outside.clone()] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(ws.join("secret/key"), "s3cret\n").unwrap();
    std::fs::write(ws.join("readme"), "readable\n").unwrap();
    (ws, outside)
}

/// A bash line that tries to create `path` and says `<tag>:ok` or `<tag>:denied`.
fn try_write(tag: &str, path: &Path) -> String {
    format!(
        "if ( : > '{}' ) 2>/dev/null; then echo {tag}:ok; else echo {tag}:denied; fi\n",
        path.display()
    )
}

#[tokio::test]
async fn workspace_write_confines_writes_to_the_workspace_and_keeps_git_read_only() {
    let server = Server::start(&[]);
    let (ws, outside) = layout(&server.work());
    let mut c = server.client().await;
    let script = [
        try_write("inside", &ws.join("made")),
        try_write("outside", &outside.join("escaped")),
        try_write("git", &ws.join(".git/hooked")),
        "if ( : > \"$TMPDIR/t\" ) 2>/dev/null; then echo tmpdir:ok; fi\n".to_string(),
        "cat readme\n".to_string(),
    ]
    .concat();
    let (started, out, code) = c.run("ww", &ws, workspace_write(&ws), &script).await;
    assert_eq!(started["sandboxType"], "linuxSeccomp", "{started}");
    assert_eq!(code, 0, "{out}");
    for expected in [
        "inside:ok",
        "outside:denied",
        "git:denied",
        "tmpdir:ok",
        "readable",
    ] {
        assert!(out.contains(expected), "{expected} in {out:?}");
    }
    assert!(ws.join("made").exists());
    assert!(!outside.join("escaped").exists() && !ws.join(".git/hooked").exists());

    // A policy that does not name `.git` still keeps it read-only inside the writable cwd.
    let bare = managed(
        &ws,
        vec![
            special("root", None, "read"),
            special("current_working_directory", None, "write"),
        ],
        "enabled",
    );
    let (_, out, _) = c
        .run(
            "bare",
            &ws,
            bare,
            &[
                try_write("git", &ws.join(".git/x")),
                try_write("cwd", &ws.join("y")),
            ]
            .concat(),
        )
        .await;
    assert!(
        out.contains("git:denied") && out.contains("cwd:ok"),
        "{out}"
    );

    let (started, out, _) = c
        .run(
            "ro",
            &ws,
            read_only(&ws),
            &[try_write("ro", &ws.join("z")), "cat readme\n".into()].concat(),
        )
        .await;
    assert_eq!(started["sandboxType"], "linuxSeccomp");
    assert!(
        out.contains("ro:denied") && out.contains("readable"),
        "{out}"
    );
    assert!(!ws.join("z").exists());
    server.stop();
}

#[tokio::test]
async fn a_none_entry_cannot_be_read_and_the_most_specific_entry_wins() {
    let server = Server::start(&[]);
    let (ws, _) = layout(&server.work());
    std::fs::create_dir(ws.join("secret/open")).unwrap();
    let mut c = server.client().await;
    std::fs::create_dir(ws.join("conf")).unwrap();
    std::fs::write(ws.join("conf/prod.env"), "TOKEN=t0psecret\n").unwrap();
    let entries = |inner: &str| {
        vec![
            special("root", None, "read"),
            special("current_working_directory", None, "write"),
            path_entry(&ws.join("secret"), "none"),
            path_entry(&ws.join("secret/open"), inner),
            json!({"access": "none", "path": {"type": "glob_pattern", "pattern": "**/*.env"}}),
        ]
    };
    let script = "cat secret/key 2>/dev/null && echo key:read || echo key:denied\n\
                  echo list:$(ls -A secret 2>/dev/null | tr '\\n' ' ')end\n\
                  echo w > secret/planted 2>/dev/null && echo plant:ok || echo plant:denied\n\
                  cat conf/prod.env 2>/dev/null || echo env:denied\n\
                  cat readme\n\
                  echo w > made && echo cwd-write:ok\n";
    let (_, out, _) = c
        .run(
            "none",
            &ws,
            managed(&ws, entries("none"), "enabled"),
            script,
        )
        .await;
    for expected in [
        "key:denied",
        "list:end",
        "plant:denied",
        "env:denied",
        "readable",
        "cwd-write:ok",
    ] {
        assert!(out.contains(expected), "{expected} in {out:?}");
    }
    assert!(
        !out.contains("s3cret") && !out.contains("t0psecret"),
        "{out}"
    );
    assert!(!ws.join("secret/planted").exists());

    // Re-exposing part of a hidden tree has no mechanism here: refused, never run unenforced.
    let params = json!({"processId": "re", "argv": ["true"], "cwd": serve_support::uri(&ws),
                        "env": {}, "tty": false, "arg0": null,
                        "sandbox": managed(&ws, entries("write"), "enabled")});
    let (code, message) = c.call("process/start", params).await.unwrap_err();
    assert_eq!(code, -32602);
    assert!(
        message.contains("cannot be enforced") && message.contains("secret/open"),
        "{message}"
    );
    server.stop();
}

#[tokio::test]
async fn network_restricted_leaves_only_loopback_inside_its_own_namespace() {
    let server = Server::start(&[]);
    let (ws, _) = layout(&server.work());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut c = server.client().await;
    let script = format!(
        "echo ifaces:$(ls /sys/class/net | tr '\\n' ' ')\n\
         echo procnet:$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' ')\n\
         if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo connect:ok; else echo connect:refused; fi\n"
    );
    let (_, out, _) = c.run("net", &ws, workspace_write(&ws), &script).await;
    assert!(
        out.contains("ifaces:lo \n") || out.contains("ifaces:lo\n"),
        "{out}"
    );
    assert!(
        out.contains("procnet:lo \n") || out.contains("procnet:lo\n"),
        "{out}"
    );
    assert!(out.contains("connect:refused"), "{out}");
    assert!(
        listener.accept().is_err(),
        "the restricted child reached the host's loopback"
    );

    // The control: with the network enabled the same child reaches the listener.
    let open = managed(&ws, vec![special("root", None, "read")], "enabled");
    let (_, out, _) = c.run("open", &ws, open, &script).await;
    assert!(out.contains("connect:ok"), "{out}");
    server.stop();
}

#[tokio::test]
async fn a_shape_that_cannot_be_enforced_is_refused_naming_the_entry() {
    let server = Server::start(&["--protect", "off"]);
    let (ws, _) = layout(&server.work());
    let mut c = server.client().await;
    let unknown = managed(
        &ws,
        vec![
            special("root", None, "read"),
            special("nonesuch", None, "none"),
        ],
        "enabled",
    );
    let params = json!({"processId": "u", "argv": ["true"], "cwd": serve_support::uri(&ws),
                        "env": {}, "tty": false, "arg0": null, "sandbox": unknown});
    let (code, message) = c.call("process/start", params).await.unwrap_err();
    assert_eq!(code, -32602);
    assert!(
        message.contains("entries[1]") && message.contains("nonesuch"),
        "{message}"
    );
    let disabled = json!({"permissions": {"type": "disabled"}});
    let (started, _, code) = c.run("d", &ws, disabled, "exit 3").await;
    assert_eq!((started["sandboxType"].as_str(), code), (Some("none"), 3));
    server.stop();
}

/// The inode of a mount namespace link (`/proc/<pid>/ns/mnt`), as `ls -L` names it.
fn mount_ns_of(pid: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|m| m.ino())
}

/// Makes the mount at `/dev/shm` read-only with `mount_setattr` (Landlock refuses `mount`, not
/// this; a process running as uid 0 needs `CAP_SYS_ADMIN` for it); says `setattr:ok` or
/// `setattr:refused`.
const MAKE_DEV_SHM_READ_ONLY: &str = r#"perl -e 'my ($path, $attr) = ("/dev/shm", pack("QQQQ", 1, 0, 0, 0)); syscall(442, -100, $path, 0x8000, $attr, 32) == 0 or die "$!\n"' 2>&1 && echo setattr:ok || echo setattr:refused"#;

/// The bounding set of the process that printed `grep CapBnd /proc/self/status`.
fn bounding_set(out: &str) -> u64 {
    capability_set(out, "CapBnd:")
}

/// What a process that tried [`MAKE_DEV_SHM_READ_ONLY`] and printed its bounding set shows: the
/// kernel refused it (EPERM, so the helper did make the call) and `CAP_SYS_ADMIN` is gone, and
/// with it `CAP_LINUX_IMMUTABLE` (`chattr +i` of a file in the environment's root would keep the
/// root from being removed).
fn assert_cannot_remount(out: &str) {
    assert!(
        out.contains("Operation not permitted\nsetattr:refused"),
        "{out}"
    );
    assert_eq!(
        bounding_set(out) & (1 << 21),
        0,
        "CAP_SYS_ADMIN kept: {out}"
    );
    assert_eq!(
        bounding_set(out) & (1 << 9),
        0,
        "CAP_LINUX_IMMUTABLE kept: {out}"
    );
}

/// What `server`'s processes see: a file one writes in `/dev/shm` is read by the next, on pipes,
/// on a terminal and under managed policies (with and without namespaces of their own), all in
/// the environment's mount namespace or one made inside it, never the host's, whose own
/// `/dev/shm` never gets a file; and none of them can make the shared mounts read-only for the
/// others. Returns the environment's mount namespace inode.
async fn assert_one_private_dev_shm(server: &Server) -> u64 {
    let work = server.work();
    let mut c = server.client().await;
    let name = format!("cleanroom-shared-{}", std::process::id());
    let (_, out, code) = c
        .run(
            "w",
            &work,
            Value::Null,
            &format!(
                "echo shared > /dev/shm/{name} && {MAKE_DEV_SHM_READ_ONLY} && \
                 grep CapBnd /proc/self/status && stat -L -c %i /proc/self/ns/mnt"
            ),
        )
        .await;
    assert_eq!(code, 0, "{out}");
    assert_cannot_remount(&out);
    let writer_ns: u64 = out.lines().last().unwrap().trim().parse().unwrap();
    let (_, out, code) = c
        .run(
            "r",
            &work,
            Value::Null,
            &format!("cat /dev/shm/{name} && touch here && stat -L -c %i /proc/self/ns/mnt"),
        )
        .await;
    // A work dir beneath the private /tmp or /var/tmp (a checkout under /tmp) is bound from the
    // host for each process, in a mount namespace of its own made inside the environment's.
    let own_namespaces = ["/tmp", "/var/tmp"]
        .iter()
        .any(|private| work.starts_with(private));
    if own_namespaces {
        assert_eq!((code, out.lines().next()), (0, Some("shared")), "{out}");
    } else {
        assert_eq!((code, out), (0, format!("shared\n{writer_ns}\n")));
    }
    c.start(
        "t",
        &[
            "/bin/sh",
            "-c",
            &format!("cat /dev/shm/{name}; stat -L -c %i /proc/self/ns/mnt"),
        ],
        json!({"tty": true}),
    )
    .await;
    let last_line = match own_namespaces {
        true => "\n".to_string(),
        false => writer_ns.to_string(),
    };
    let on_terminal = c.output_until("t", &last_line).await;
    assert!(on_terminal.contains("shared"), "{on_terminal}");
    // Managed: writes everywhere in the environment's namespace (Landlock alone), then in a
    // mount and network namespace of its own made inside it.
    for (id, network, next) in [("m1", "enabled", "m2"), ("m2", "restricted", "m3")] {
        let everything = managed(&work, vec![special("root", None, "write")], network);
        let (_, out, code) = c
            .run(
                id,
                &work,
                everything,
                &format!(
                    "cat /dev/shm/{name} && echo {next} > /dev/shm/{name}-{next} && \
                     {MAKE_DEV_SHM_READ_ONLY} && grep CapBnd /proc/self/status"
                ),
            )
            .await;
        assert_eq!(
            (code, out.lines().next()),
            (0, Some("shared")),
            "{id}: {out}"
        );
        assert_cannot_remount(&out);
    }
    let (_, out, code) = c
        .run(
            "r2",
            &work,
            Value::Null,
            &format!("cat /dev/shm/{name}-m2 /dev/shm/{name}-m3"),
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "m2\nm3\n"));
    assert_ne!(Some(writer_ns), mount_ns_of("self"), "the host's namespace");
    for leaked in [name.clone(), format!("{name}-m2"), format!("{name}-m3")] {
        assert!(
            !Path::new("/dev/shm").join(&leaked).exists(),
            "{leaked} in the host's"
        );
    }
    writer_ns
}

#[tokio::test]
async fn an_environments_processes_share_one_private_dev_shm_that_ends_with_the_server() {
    for server in [Server::start(&[]), Server::start_unprivileged(&[])] {
        let namespace = assert_one_private_dev_shm(&server).await;
        server.stop();
        let holders: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
            .filter(|pid| mount_ns_of(pid) == Some(namespace))
            .collect();
        assert!(holders.is_empty(), "still in the namespace: {holders:?}");
    }
}

/// The capabilities that get a process past the server's walls: `CAP_SYS_PTRACE` (19),
/// `CAP_SYS_ADMIN` (21) and `CAP_PERFMON` (38) read another process's memory,
/// `CAP_DAC_READ_SEARCH` (2) opens a file by its handle past read-only rules; as bits of the
/// sets `/proc/<pid>/status` shows.
const ESCAPING: u64 = (1 << 2) | (1 << 19) | (1 << 21) | (1 << 38);

/// A server started with those capabilities in its inheritable and ambient sets (a service
/// manager's `AmbientCapabilities=`, `setpriv --ambient-caps`) does not hand them to its
/// processes: the bounding set limits neither set, and a process running as uid 0 carries its
/// inheritable set into its permitted set at exec, any process its ambient set. Nor do its own
/// threads keep them inheritable.
#[tokio::test]
async fn a_server_started_with_ambient_capabilities_gives_its_processes_none_that_escape() {
    if !skip::root_or_skip("a server started with ambient capabilities") {
        return;
    }
    let caps = "+dac_read_search,+sys_ptrace,+sys_admin,+perfmon";
    let server = Server::start_prepared(&[], false, |_, command| {
        let inheritable = format!("--inh-caps={caps}");
        let ambient = format!("--ambient-caps={caps}");
        wrap(command, &["setpriv", &inheritable, &ambient], &[]);
    });
    for task in std::fs::read_dir(format!("/proc/{}/task", server.pid())).unwrap() {
        let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap();
        for set in ["CapInh:", "CapAmb:"] {
            assert_eq!(
                capability_set(&status, set) & ESCAPING,
                0,
                "a thread of the server keeps one in {set}: {status}"
            );
        }
    }
    let work = server.work();
    let mut c = server.client().await;
    for (id, sandbox) in [("plain", Value::Null), ("ws", workspace_write(&work))] {
        let (_, out, code) = c
            .run(id, &work, sandbox, "grep ^Cap /proc/self/status")
            .await;
        assert_eq!(code, 0, "{out}");
        for set in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
            assert_eq!(
                capability_set(&out, set) & ESCAPING,
                0,
                "{id}: {set} keeps one: {out}"
            );
        }
    }
    server.stop();
}

/// The capability set `name` (`CapEff:`…) in a `/proc/<pid>/status` text.
fn capability_set(status: &str, name: &str) -> u64 {
    let line = status.lines().find(|l| l.starts_with(name)).unwrap();
    u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
}

/// An ordinary user's server with `--protect off` (no sandbox of its own, so nothing set up at
/// its start for one) still starts processes under Codex's `workspace-write` and `read-only`
/// (network restricted), really confined: writes only in the workspace (never `.git`), only
/// loopback, in a network namespace of its own; and under a sandbox that restricts only the
/// network, `no_new_privs` is set (it makes its namespaces in the user namespace the server
/// made for its processes, where a file-capability binary would get its capabilities back).
/// Fails where each process maps a user namespace of its own: a child of the server, which is
/// not dumpable, is not either, so its `/proc/self/uid_map` is root's and it cannot write its id
/// maps ("cannot make the sandbox's namespaces: Permission denied").
#[tokio::test]
async fn an_ordinary_users_server_without_protection_starts_confined_managed_processes() {
    let (server, ws, outside) = ordinary_users_server_over_layout("off");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut c = server.client().await;
    let probe = |id: &str| {
        [
            "echo uid:$(id -u)\n".to_string(),
            try_write("inside", &ws.join(id)),
            try_write("outside", &outside.join(id)),
            try_write("git", &ws.join(".git").join(id)),
            "echo ifaces:$(ls /sys/class/net | tr '\\n' ' ')\n".to_string(),
            format!(
                "if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo connect:ok; \
                 else echo connect:refused; fi\n"
            ),
            "grep NoNewPrivs /proc/self/status\n".to_string(),
        ]
        .concat()
    };
    let network_only = json!({"permissions": {"type": "external", "network": "restricted"}});
    let uid = match rustix::process::geteuid().is_root() {
        true => serve_support::NOBODY,
        false => rustix::process::geteuid().as_raw(),
    };
    let mut failures = Vec::new();
    for (id, sandbox, inside) in [
        ("ww", workspace_write(&ws), "ok"),
        ("ro", read_only(&ws), "denied"),
        ("net", network_only, "ok"),
    ] {
        let (started, out, code) = c.run(id, &ws, sandbox, &probe(id)).await;
        let (outside, git) = match id {
            "net" => ("ok", "ok"),
            _ => ("denied", "denied"),
        };
        let expected = [
            format!("uid:{uid}"),
            format!("inside:{inside}"),
            format!("outside:{outside}"),
            format!("git:{git}"),
            "ifaces:lo\n".to_string(),
            "connect:refused".to_string(),
            "NoNewPrivs:\t1".to_string(),
        ];
        let missing: Vec<&String> = expected.iter().filter(|e| !out.contains(*e)).collect();
        if code != 0 || started["sandboxType"] != "linuxSeccomp" || !missing.is_empty() {
            failures.push(format!(
                "{id}: {missing:?} not in {out:?} ({code}, {started})"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        listener.accept().is_err(),
        "a restricted process reached the host's loopback"
    );
    assert!(!outside.join("ww").exists() && !ws.join(".git/ww").exists());
    assert!(ws.join("ww").exists() && !ws.join("ro").exists());
    server.stop();
}

/// `security.capability` of a file whose `CAP_NET_ADMIN` is permitted and effective at exec
/// (`vfs_cap_data` revision 2: `magic_etc`, then permitted and inheritable, low and high words).
fn net_admin_file_capability() -> Vec<u8> {
    [0x0200_0001u32, 1 << 12, 0, 0, 0]
        .iter()
        .flat_map(|word| word.to_le_bytes())
        .collect()
}

/// The `CapEff` line a command started as `argv` (no shell) under `sandbox` prints.
async fn effective_capabilities(c: &mut Client, id: &str, argv: &[&str], extra: Value) -> String {
    c.start(id, argv, extra).await;
    let out: String = c
        .until_closed(id)
        .await
        .iter()
        .filter(|n| n["method"] == "process/output")
        .map(|n| decode(&n["params"]["chunk"]))
        .collect();
    out.trim().to_string()
}

/// A server run by an ordinary user gives its managed processes namespaces inside a user
/// namespace of its own, where each held every capability until exec: a binary with a file
/// capability started as the command itself (no shell between) gets none there, where
/// `CAP_NET_ADMIN` would reach the other processes' network namespaces. Under `--protect off`
/// the user namespace is the one the server made at its start (managed sandboxes); under
/// `--protect home` the shared namespaces' holder's (a process without a sandbox joins them, a
/// managed one makes its own inside). The same binary started without a sandbox gets its
/// capability (on the host, from its file), so the file's capability is real here.
#[tokio::test]
async fn a_file_capability_command_gets_no_capability_in_the_servers_user_namespace() {
    if !skip::root_or_skip("setting a file capability") {
        return;
    }
    let network_only = json!({"permissions": {"type": "external", "network": "restricted"}});
    let mut failures = Vec::new();
    for protect in ["off", "home"] {
        let (server, ws, _) = ordinary_users_server_over_layout(protect);
        let grep = server.work().join("capgrep");
        // Made after the work dir was given to the server's user: a change of owner drops it.
        std::fs::copy("/usr/bin/grep", &grep).unwrap();
        rustix::fs::setxattr(
            &grep,
            "security.capability",
            &net_admin_file_capability(),
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        let argv = [grep.to_str().unwrap(), "CapEff", "/proc/self/status"];
        let mut c = server.client().await;
        let starts = match protect {
            "off" => {
                let plain = effective_capabilities(&mut c, "plain", &argv, json!({})).await;
                if plain != "CapEff:\t0000000000001000" {
                    skip::skip(&format!(
                        "file capabilities are not honoured here: {plain:?}"
                    ));
                    server.stop();
                    return;
                }
                vec![("ww", workspace_write(&ws)), ("net", network_only.clone())]
            }
            _ => vec![("none", Value::Null), ("ww", workspace_write(&ws))],
        };
        for (id, sandbox) in starts {
            let extra = json!({"cwd": uri(&ws), "sandbox": sandbox});
            let got = effective_capabilities(&mut c, id, &argv, extra).await;
            if got != "CapEff:\t0000000000000000" {
                failures.push(format!("--protect {protect}, {id}: {got:?}"));
            }
        }
        server.stop();
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// `fs/*` calls of a server run by an ordinary user without protection, under a managed sandbox
/// that a thread cannot carry out with Landlock alone (a new entry in a workspace holding a
/// read-only `.git` is made by a forked child in mount namespaces of its own): the child makes
/// them in the user namespace the server made at its start, so the call is carried out, and
/// still confined (`.git` and a path outside the workspace refused). Without that namespace the
/// child could not map one of its own (the server is not dumpable) and every such call failed.
#[tokio::test]
async fn an_ordinary_users_server_without_protection_carries_out_forked_fs_calls() {
    use base64::Engine;
    let (server, ws, outside) = ordinary_users_server_over_layout("off");
    let mut c = server.client().await;
    let sandbox = workspace_write(&ws);
    let write = |path: &Path| {
        json!({"path": uri(path), "sandbox": sandbox.clone(),
               "dataBase64": base64::engine::general_purpose::STANDARD.encode("fs\n")})
    };
    c.call("fs/writeFile", write(&ws.join("new")))
        .await
        .unwrap_or_else(|e| panic!("fs/writeFile in the workspace: {e:?}"));
    assert_eq!(std::fs::read_to_string(ws.join("new")).unwrap(), "fs\n");
    for refused in [ws.join(".git/new"), outside.join("new")] {
        let answer = c.call("fs/writeFile", write(&refused)).await;
        assert!(answer.is_err(), "{}: {answer:?}", refused.display());
        assert!(!refused.exists(), "{}", refused.display());
    }
    server.stop();
}
