//! No spelling of a path lets an `fs/*` call of `cleanroom serve` reach what its policy forbids,
//! and `fs/remove` never removes what it was not asked to, driven over a real WebSocket.
//!
//! Every method (`getMetadata`, `readFile`, `open`+`readBlock`, `readDirectory`,
//! `canonicalize`, `writeFile`, `createDirectory`, `remove`, `copy` at both ends) is tried on
//! every magic-link spelling (`/proc/self/root`, `/proc/thread-self/root`, `/proc/<server
//! pid>/root`, `/proc/self/cwd`, `/dev/fd/N` and `/proc/self/fd/N` for a directory the server
//! holds open) and on an ordinary symlink inside the writable workspace pointing at each, under
//! Codex's workspace-write (read-only `.git`, a `none` entry) and with no sandbox under the
//! server's `--protect home`, for a server run by root (fs threads) and by an ordinary user
//! (Landlock alone on the thread, mutations in a forked child). The removal tests cover each
//! route a call can take: the blocking pool (nothing confines the call), the confined thread,
//! and the forked child (the plan creates or removes entries in a directory the thread's
//! Landlock cover descends, such as a workspace root holding `.git`: only the child can do that,
//! so a success there shows the child did it). No call reads another process's `/proc/<pid>`
//! entries (a sibling holding a secret), on the pool and the confined thread.

mod serve_support;
#[path = "../../cleanroom/tests/support/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};
use serve_support::{
    give_tree, path_entry, read_only, uri, workspace_write, Client, Server, NOBODY,
};

/// Who runs the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum User {
    Root,
    Ordinary,
}

/// The work dir's layout: a git workspace `ws` with a secret, a protected home `home` (the
/// server's `HOME`), a writable dir `other` outside the workspace.
struct Layout {
    ws: PathBuf,
    home: PathBuf,
    other: PathBuf,
}

impl Layout {
    fn of(work: &Path) -> Layout {
        Layout {
            ws: work.join("ws"),
            home: work.join("home"),
            other: work.join("other"),
        }
    }

    /// Creates the layout; the server runs in the workspace (its project root, writable under
    /// `--protect home`) with `HOME` the protected home.
    fn prepare(work: &Path, command: &mut Command) {
        let l = Layout::of(work);
        for dir in [
            l.ws.join(".git"),
            l.ws.join("secret"),
            l.ws.join("sub"),
            l.home.clone(),
            l.other.clone(),
        ] {
            std::fs::create_dir_all(dir).unwrap();
        }
        for (file, text) in [
            (l.ws.join(".git/config"), "[core]\n"),
            (l.ws.join("secret/key"), "s3cret"),
            (l.ws.join("file.txt"), "plain"),
            (l.home.join("file"), "home"),
            (l.other.join("precious"), "precious"),
        ] {
            std::fs::write(file, text).unwrap();
        }
        command.env("HOME", &l.home).current_dir(&l.ws);
    }
}

/// Starts a server as `user` with `args` on a fresh [`Layout`].
fn server(user: User, args: &[&str]) -> Server {
    Server::start_prepared(args, user == User::Ordinary, Layout::prepare)
}

/// Codex's workspace-write over `ws`, with `ws/secret` hidden (`none`) and `extra` entries.
fn managed_sandbox(ws: &Path, extra: Vec<Value>) -> Value {
    let mut sandbox = workspace_write(ws);
    let entries = sandbox["permissions"]["file_system"]["entries"]
        .as_array_mut()
        .unwrap();
    entries.push(path_entry(&ws.join("secret"), "none"));
    entries.extend(extra);
    sandbox
}

/// One way of spelling a path.
struct Spelling {
    label: String,
    /// What comes before the rest of the path (`None`: the plain path).
    prefix: Option<String>,
    /// How many `..` the rest needs to climb from where the prefix lands to `/`.
    depth: usize,
}

impl Spelling {
    /// `target` (absolute) in this spelling.
    fn spell(&self, target: &Path) -> PathBuf {
        let Some(prefix) = &self.prefix else {
            return target.to_path_buf();
        };
        let rest = target.strip_prefix("/").unwrap();
        PathBuf::from(format!(
            "{prefix}/{}{}",
            "../".repeat(self.depth),
            rest.display()
        ))
    }

    fn escapes(&self) -> bool {
        self.prefix.is_some()
    }
}

/// A directory the server holds open (its state dir, its root): its descriptor number and path.
fn open_directory_of(pid: u32) -> (u32, PathBuf) {
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target.is_absolute() && target.is_dir() {
            let fd = entry.file_name().to_string_lossy().parse().unwrap();
            return (fd, target);
        }
    }
    panic!("the server {pid} holds no directory open");
}

fn depth(path: &Path) -> usize {
    path.components().count() - 1
}

/// The plain spelling, every magic link, and a symlink in `ws` to each magic link.
fn spellings(server: &Server, ws: &Path, user: User) -> Vec<Spelling> {
    let pid = server.pid();
    let (fd, dir) = open_directory_of(pid);
    let magic = [
        ("/proc/self/root".to_string(), 0),
        ("/proc/thread-self/root".to_string(), 0),
        (format!("/proc/{pid}/root"), 0),
        ("/proc/self/cwd".to_string(), depth(ws)),
        (format!("/dev/fd/{fd}"), depth(&dir)),
        (format!("/proc/self/fd/{fd}"), depth(&dir)),
    ];
    let mut out = vec![Spelling {
        label: "plain".into(),
        prefix: None,
        depth: 0,
    }];
    for (i, (link, depth)) in magic.into_iter().enumerate() {
        let via = ws.join(format!("via-{i}"));
        std::os::unix::fs::symlink(&link, &via).unwrap();
        if user == User::Ordinary {
            give_tree(&via, NOBODY);
        }
        out.push(Spelling {
            label: format!("link {} -> {link}", via.display()),
            prefix: Some(via.display().to_string()),
            depth,
        });
        out.push(Spelling {
            label: link.clone(),
            prefix: Some(link),
            depth,
        });
    }
    out
}

/// What a scenario must keep from the client.
struct Targets {
    /// Names the scenario's handles.
    name: &'static str,
    /// The writable workspace.
    ws: PathBuf,
    /// A file and a directory the call may not read (for reads: `none`, or what only an escape
    /// could spell).
    read_file: PathBuf,
    read_dir: PathBuf,
    /// A file and a directory the call may not change.
    write_file: PathBuf,
    write_dir: PathBuf,
    /// The call's `sandbox`.
    sandbox: Value,
    /// Whether the policy lets the plain spelling read `read_file`.
    readable: bool,
}

impl Targets {
    /// Under [`managed_sandbox`] over `ws`: its `none` secret and its read-only `.git`.
    fn managed(name: &'static str, ws: &Path) -> Targets {
        Targets {
            name,
            ws: ws.to_path_buf(),
            read_file: ws.join("secret/key"),
            read_dir: ws.join("secret"),
            write_file: ws.join(".git/config"),
            write_dir: ws.join(".git"),
            sandbox: managed_sandbox(ws, Vec::new()),
            readable: false,
        }
    }
}

/// Calls `method` with `params` (plus the scenario's sandbox): an escape spelling must be
/// refused with -32600 naming the magic link; the plain spelling of a forbidden target must be
/// refused (-32600, or -32004 where the target is hidden); the plain spelling of a readable one
/// must work. Returns whether the call succeeded.
async fn expect(
    c: &mut Client,
    spelling: &Spelling,
    forbidden: bool,
    method: &str,
    mut params: Value,
    sandbox: &Value,
) -> bool {
    params["sandbox"] = sandbox.clone();
    let what = format!("{method} {params} ({})", spelling.label);
    match (c.call(method, params).await, spelling.escapes(), forbidden) {
        (Err((code, message)), true, _) => {
            assert_eq!(code, -32600, "{what}: {message}");
            assert!(message.contains("magic link"), "{what}: {message}");
            false
        }
        (Err((code, message)), false, true) => {
            assert!(code == -32600 || code == -32004, "{what}: {code} {message}");
            false
        }
        (Ok(result), false, false) => {
            assert!(!result.is_null(), "{what}");
            true
        }
        (outcome, _, _) => panic!("{what}: {outcome:?}"),
    }
}

/// Every method on every spelling of `t`'s targets is refused (and the plain spelling of what
/// the policy allows works); nothing the calls named changed or appeared.
async fn assert_no_spelling_reaches(c: &mut Client, spellings: &[Spelling], t: &Targets) {
    let before: Vec<(PathBuf, Vec<u8>)> = [&t.read_file, &t.write_file]
        .into_iter()
        .map(|p| (p.clone(), std::fs::read(p).unwrap()))
        .collect();
    let ws = &t.ws;
    let sb = &t.sandbox;
    for (k, s) in spellings.iter().enumerate() {
        let read = !t.readable;
        let (rf, rd) = (uri(&s.spell(&t.read_file)), uri(&s.spell(&t.read_dir)));
        let wf = uri(&s.spell(&t.write_file));
        let new = |name: &str| uri(&s.spell(&t.write_dir.join(format!("{name}-{k}"))));
        expect(c, s, read, "fs/getMetadata", json!({"path": rf}), sb).await;
        expect(c, s, read, "fs/readFile", json!({"path": rf}), sb).await;
        expect(c, s, read, "fs/readDirectory", json!({"path": rd}), sb).await;
        expect(c, s, read, "fs/canonicalize", json!({"path": rf}), sb).await;
        let handle = format!("{}{k}", t.name);
        let opened = expect(
            c,
            s,
            read,
            "fs/open",
            json!({"handleId": handle, "path": rf}),
            sb,
        )
        .await;
        let block = json!({"handleId": handle, "offset": 0, "len": 64});
        match opened {
            true => assert!(c.call("fs/readBlock", block).await.is_ok()),
            false => assert_eq!(c.call("fs/readBlock", block).await.unwrap_err().0, -32004),
        }
        let data = BASE64.encode("pwned");
        expect(
            c,
            s,
            true,
            "fs/writeFile",
            json!({"path": wf, "dataBase64": data}),
            sb,
        )
        .await;
        let created = json!({"path": new("new"), "dataBase64": data});
        expect(c, s, true, "fs/writeFile", created, sb).await;
        expect(
            c,
            s,
            true,
            "fs/createDirectory",
            json!({"path": new("made")}),
            sb,
        )
        .await;
        let single = json!({"path": wf, "recursive": false, "force": false});
        expect(c, s, true, "fs/remove", single, sb).await;
        let tree = json!({"path": uri(&s.spell(&t.write_dir))});
        expect(c, s, true, "fs/remove", tree, sb).await;
        let into =
            json!({"sourcePath": uri(&ws.join("file.txt")), "destinationPath": new("copied")});
        expect(c, s, true, "fs/copy", into, sb).await;
        let out = uri(&ws.join(format!("copied-{k}")));
        let from = json!({"sourcePath": rf, "destinationPath": out});
        if expect(c, s, read, "fs/copy", from, sb).await {
            std::fs::remove_file(ws.join(format!("copied-{k}"))).unwrap();
        }
        let out = uri(&ws.join(format!("tree-{k}")));
        let from = json!({"sourcePath": rd, "destinationPath": out, "recursive": true});
        if expect(c, s, read, "fs/copy", from, sb).await {
            std::fs::remove_dir_all(ws.join(format!("tree-{k}"))).unwrap();
        }
    }
    for (path, content) in before {
        assert_eq!(std::fs::read(&path).unwrap(), content, "{}", path.display());
    }
    let strays: Vec<String> = [&t.write_dir, ws]
        .into_iter()
        .flat_map(|dir| std::fs::read_dir(dir).unwrap().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            ["new-", "made-", "copied-", "tree-"]
                .iter()
                .any(|p| n.starts_with(p))
        })
        .collect();
    assert!(strays.is_empty(), "created: {strays:?}");
}

/// The whole matrix for a server run by `user`.
async fn no_spelling_reaches_what_the_policy_forbids(user: User) {
    let server = server(user, &[]);
    let l = Layout::of(&server.work());
    let spellings = spellings(&server, &l.ws, user);
    let mut c = server.client().await;
    let managed = Targets::managed("managed", &l.ws);
    assert_no_spelling_reaches(&mut c, &spellings, &managed).await;
    assert_what_the_policy_allows_still_answers(&mut c, &l.ws, &managed.sandbox).await;
    assert_nothing_beneath_a_hidden_path_is_told(&mut c, &l.ws, &managed.sandbox, user).await;
    let home = Targets {
        name: "home",
        ws: l.ws.clone(),
        read_file: l.home.join("file"),
        read_dir: l.home.clone(),
        write_file: l.home.join("file"),
        write_dir: l.home.clone(),
        sandbox: Value::Null,
        readable: true,
    };
    assert_no_spelling_reaches(&mut c, &spellings, &home).await;
    server.stop();
}

/// Under the same policy, a readable file's metadata, canonical path and bytes are answered
/// (the checks above refuse what the policy forbids, not everything).
async fn assert_what_the_policy_allows_still_answers(c: &mut Client, ws: &Path, sandbox: &Value) {
    let file = ws.join("file.txt");
    let path = json!({"path": uri(&file), "sandbox": sandbox});
    let meta = c.call("fs/getMetadata", path.clone()).await.unwrap();
    assert_eq!((&meta["isFile"], &meta["size"]), (&json!(true), &json!(5)));
    let canonical = c.call("fs/canonicalize", path.clone()).await.unwrap();
    assert_eq!(canonical["path"], uri(&file));
    let read = c.call("fs/readFile", path).await.unwrap();
    assert_eq!(read["dataBase64"], BASE64.encode("plain"));
}

/// Beneath a `none` path, what exists and what does not get the same -32600: a missing name, a
/// name under a missing directory, a name under a file; and the same through a symlink in the
/// workspace that leads there.
async fn assert_nothing_beneath_a_hidden_path_is_told(
    c: &mut Client,
    ws: &Path,
    sandbox: &Value,
    user: User,
) {
    let data = BASE64.encode("x");
    let mut paths = Vec::new();
    for name in ["key", "missing", "missing/deeper", "key/under-a-file"] {
        paths.push(ws.join("secret").join(name));
        let link = ws.join(format!("to-{}", name.replace('/', "-")));
        std::os::unix::fs::symlink(Path::new("secret").join(name), &link).unwrap();
        if user == User::Ordinary {
            give_tree(&link, NOBODY);
        }
        paths.push(link);
    }
    for hidden in paths {
        let name = hidden.display().to_string();
        let path = uri(&hidden);
        let file = uri(&ws.join("file.txt"));
        let mut calls = vec![
            ("fs/getMetadata", json!({"path": path})),
            ("fs/canonicalize", json!({"path": path})),
            ("fs/readFile", json!({"path": path})),
            ("fs/readDirectory", json!({"path": path})),
            ("fs/open", json!({"path": path, "handleId": "hidden"})),
            ("fs/writeFile", json!({"path": path, "dataBase64": data})),
            ("fs/createDirectory", json!({"path": path})),
            (
                "fs/copy",
                json!({"sourcePath": file, "destinationPath": path}),
            ),
        ];
        // A link in the workspace is copied and removed itself, never followed: only a hidden
        // path is refused there.
        if hidden.starts_with(ws.join("secret")) {
            let told = uri(&ws.join("told"));
            calls.push((
                "fs/copy",
                json!({"sourcePath": path, "destinationPath": told}),
            ));
            calls.push(("fs/remove", json!({"path": path, "force": true})));
            calls.push(("fs/remove", json!({"path": path, "force": false})));
        }
        for (method, mut params) in calls {
            params["sandbox"] = sandbox.clone();
            let what = format!("{method} {name}");
            let (code, message) = c.call(method, params).await.expect_err(&what);
            assert_eq!(code, -32600, "{what}: {message}");
        }
    }
    assert!(!ws.join("told").exists() && !ws.join("secret/missing").exists());
}

#[tokio::test]
async fn no_spelling_reaches_what_the_policy_forbids_as_root() {
    if skip::root_or_skip("fs/* calls of a server run by root") {
        no_spelling_reaches_what_the_policy_forbids(User::Root).await;
    }
}

#[tokio::test]
async fn no_spelling_reaches_what_the_policy_forbids_as_an_ordinary_user() {
    no_spelling_reaches_what_the_policy_forbids(User::Ordinary).await;
}

/// A directory in the host's `/tmp`, removed with what is in it on drop.
struct InHostTmp(PathBuf);

impl Drop for InHostTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The managed matrix with the workspace in the host's `/tmp`, made after the server started:
/// an `fs/*` call binds its writable roots there from the host's tree, as a process of its
/// policy does (a file it writes in the workspace is the host's), and still no spelling reaches
/// what the policy forbids.
async fn no_spelling_reaches_what_the_policy_forbids_in_the_hosts_tmp(user: User) {
    let server = server(user, &[]);
    let unique = format!(
        "crt-fs-escape-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let place = InHostTmp(Path::new("/tmp").join(unique));
    std::fs::create_dir(&place.0).unwrap();
    Layout::prepare(&place.0, &mut Command::new("true"));
    if user == User::Ordinary {
        give_tree(&place.0, NOBODY);
    }
    let l = Layout::of(&place.0);
    let spellings = spellings(&server, &l.ws, user);
    let mut c = server.client().await;
    let managed = Targets::managed("in-tmp", &l.ws);
    let written = l.ws.join("written.txt");
    let write = json!({"path": uri(&written), "dataBase64": BASE64.encode("w"),
                       "sandbox": managed.sandbox});
    c.call("fs/writeFile", write).await.unwrap();
    assert!(
        written.exists(),
        "{user:?}: the write did not reach the host's workspace"
    );
    assert_no_spelling_reaches(&mut c, &spellings, &managed).await;
    assert_what_the_policy_allows_still_answers(&mut c, &l.ws, &managed.sandbox).await;
    assert_nothing_beneath_a_hidden_path_is_told(&mut c, &l.ws, &managed.sandbox, user).await;
    server.stop();
}

#[tokio::test]
async fn no_spelling_reaches_what_the_policy_forbids_in_the_hosts_tmp_as_root() {
    if skip::root_or_skip("fs/* calls of a server run by root") {
        no_spelling_reaches_what_the_policy_forbids_in_the_hosts_tmp(User::Root).await;
    }
}

#[tokio::test]
async fn no_spelling_reaches_what_the_policy_forbids_in_the_hosts_tmp_as_an_ordinary_user() {
    no_spelling_reaches_what_the_policy_forbids_in_the_hosts_tmp(User::Ordinary).await;
}

/// The servers of the removal tests: each user with `--protect home` (calls with a managed
/// sandbox, or none: the environment's rules) and with `--protect off` (no policy at all: the
/// blocking pool).
fn removal_servers() -> Vec<(User, Server, &'static str)> {
    let mut servers = Vec::new();
    for user in [User::Root, User::Ordinary] {
        if user == User::Root && !skip::root_or_skip("removals by a server run by root") {
            continue;
        }
        servers.push((user, server(user, &[]), "home"));
        servers.push((user, server(user, &["--protect", "off"]), "off"));
    }
    servers
}

/// The routes a removal of an entry of `dir` takes on a server with `protect`: a name, where the
/// entry lives, and the call's sandbox.
fn routes(l: &Layout, protect: &str) -> Vec<(&'static str, PathBuf, Value)> {
    let sandbox = managed_sandbox(&l.ws, vec![path_entry(&l.other, "write")]);
    match protect {
        "off" => vec![("blocking pool", l.ws.join("sub"), Value::Null)],
        _ => vec![
            // `ws` holds the read-only `.git`: the thread's cover cannot change its entries.
            ("forked child", l.ws.clone(), sandbox.clone()),
            ("confined thread", l.ws.join("sub"), sandbox),
            (
                "confined thread, --protect home alone",
                l.ws.join("sub"),
                Value::Null,
            ),
        ],
    }
}

#[tokio::test]
async fn fs_remove_of_a_link_with_a_trailing_slash_removes_nothing_on_every_route() {
    for (user, server, protect) in removal_servers() {
        let l = Layout::of(&server.work());
        let mut c = server.client().await;
        for (i, (route, dir, sandbox)) in routes(&l, protect).into_iter().enumerate() {
            let link = dir.join(format!("link-{i}"));
            std::os::unix::fs::symlink(&l.other, &link).unwrap();
            if user == User::Ordinary {
                give_tree(&link, NOBODY);
            }
            for recursive in [true, false] {
                let params = json!({"path": format!("{}/", uri(&link)), "recursive": recursive,
                                    "sandbox": sandbox});
                let what = format!("{user:?} {route}: fs/remove {params}");
                let (code, message) = c.call("fs/remove", params).await.expect_err(&what);
                assert_eq!(code, -32600, "{what}: {message}");
                assert!(message.contains("nothing was removed"), "{what}: {message}");
                let why = "a symbolic link, so it names the link's target, and fs/remove never";
                assert!(message.contains(why), "{what}: {message}");
                assert!(
                    l.other.join("precious").exists(),
                    "{what}: the target's content went"
                );
                assert!(link.symlink_metadata().is_ok(), "{what}: the link went");
            }
            // Without the slash the link itself goes, never its target.
            let params = json!({"path": uri(&link), "sandbox": sandbox});
            c.call("fs/remove", params).await.unwrap();
            assert!(link.symlink_metadata().is_err() && l.other.join("precious").exists());
        }
        server.stop();
    }
}

#[tokio::test]
async fn a_recursive_remove_never_follows_a_link_on_every_route() {
    for (user, server, protect) in removal_servers() {
        let l = Layout::of(&server.work());
        let mut c = server.client().await;
        for (i, (route, dir, sandbox)) in routes(&l, protect).into_iter().enumerate() {
            let tree = dir.join(format!("tree-{i}"));
            std::fs::create_dir_all(tree.join("sub/deeper")).unwrap();
            std::fs::write(tree.join("sub/deeper/file"), "x").unwrap();
            let links = [
                (tree.join("sub/link"), relative(&tree.join("sub"), &l.other)),
                (tree.join("sub/deeper/abs"), l.other.clone()),
                (tree.join("file-link"), l.other.join("precious")),
            ];
            for (link, target) in &links {
                std::os::unix::fs::symlink(target, link).unwrap();
                assert!(
                    link.join("precious").exists() || link.exists(),
                    "{}",
                    link.display()
                );
            }
            if user == User::Ordinary {
                give_tree(&tree, NOBODY);
            }
            let params = json!({"path": uri(&tree), "sandbox": sandbox});
            let what = format!("{user:?} {route}: fs/remove {params}");
            c.call("fs/remove", params).await.expect(&what);
            assert!(
                !tree.exists() && tree.symlink_metadata().is_err(),
                "{what}: tree left"
            );
            let kept: Vec<String> = std::fs::read_dir(&l.other)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(kept, ["precious"], "{what}");
            assert_eq!(
                std::fs::read_to_string(l.other.join("precious")).unwrap(),
                "precious"
            );
        }
        server.stop();
    }
}

#[tokio::test]
async fn a_removal_its_policy_forbids_anywhere_removes_nothing() {
    for (user, server, protect) in removal_servers() {
        if protect == "off" {
            continue;
        }
        let l = Layout::of(&server.work());
        let mut c = server.client().await;
        let tree = l.ws.join("tree");
        for dir in ["a", "b/c", "ro"] {
            std::fs::create_dir_all(tree.join(dir)).unwrap();
            std::fs::write(tree.join(dir).join("f"), "x").unwrap();
        }
        if user == User::Ordinary {
            give_tree(&tree, NOBODY);
        }
        let work = server.work();
        let before = listing_of(&work);
        let read_only = managed_sandbox(&l.ws, vec![path_entry(&tree.join("ro"), "read")]);
        for (path, sandbox) in [
            (tree.clone(), read_only.clone()),
            (l.ws.join("sub/.."), read_only),
            (l.ws.clone(), managed_sandbox(&l.ws, Vec::new())),
            (l.home.clone(), Value::Null),
        ] {
            let params = json!({"path": uri(&path), "sandbox": sandbox});
            let what = format!("{user:?}: fs/remove {params}");
            let (code, message) = c.call("fs/remove", params).await.expect_err(&what);
            assert_eq!(code, -32600, "{what}: {message}");
            assert!(message.contains("nothing was removed"), "{what}: {message}");
            assert_eq!(listing_of(&work), before, "{what}");
        }
        server.stop();
    }
}

/// Every path at and beneath `path` (links not followed).
fn listing_of(path: &Path) -> Vec<PathBuf> {
    let mut all = vec![path.to_path_buf()];
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).unwrap().flatten() {
            all.extend(listing_of(&entry.path()));
        }
    }
    all.sort();
    all
}

/// The relative path from the directory `from` to `to` (both absolute, canonical).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let common = from.ancestors().find(|a| to.starts_with(a)).unwrap();
    let ups = from.strip_prefix(common).unwrap().components().count();
    PathBuf::from("../".repeat(ups)).join(to.strip_prefix(common).unwrap())
}

/// Who runs the servers of a test that needs root to set up mounts: root and an ordinary user,
/// or nobody (a counted skip) when the tests do not run as root.
fn users_with_mounts(what: &str) -> Vec<User> {
    match skip::root_or_skip(what) {
        true => vec![User::Root, User::Ordinary],
        false => Vec::new(),
    }
}

/// -32600 for `method` with `params` (plus `sandbox`); returns the message.
async fn refused(c: &mut Client, method: &str, mut params: Value, sandbox: &Value) -> String {
    params["sandbox"] = sandbox.clone();
    let what = format!("{method} {params}");
    let (code, message) = c.call(method, params).await.expect_err(&what);
    assert_eq!(code, -32600, "{what}: {message}");
    message
}

/// `path` as seen through `host`, a bind mount of `/`.
fn through(host: &Path, path: &Path) -> PathBuf {
    host.join(path.strip_prefix("/").unwrap())
}

#[tokio::test]
async fn a_bind_mount_that_shows_a_narrowed_path_elsewhere_opens_nothing() {
    for user in users_with_mounts("bind mounts that alias the workspace and /") {
        let server = Server::start_in_mount_namespace(
            &[],
            user == User::Ordinary,
            Layout::prepare,
            |work| {
                let (ws, host) = (work.join("ws"), work.join("host"));
                // Shared, so a mount made once the server runs reaches its environment too.
                format!(
                    "mkdir '{ws}/snap' '{ws}/self' '{host}' '{late}'\nmount --make-rshared /\n\
                     mount --bind '{ws}' '{ws}/snap'\nmount -o remount,bind,ro '{ws}/snap'\n\
                     mount --bind '{ws}' '{ws}/self'\nmount --bind / '{host}'",
                    ws = ws.display(),
                    host = host.display(),
                    late = work.join("other/late").display(),
                )
            },
        );
        let work = server.work();
        let (l, host) = (Layout::of(&work), work.join("host"));
        let mut c = server.client().await;
        // One more, made after the server (and its environment) started, in a directory the
        // cover grants whole: each call and process reads the mount table again when it changed.
        let late = l.other.join("late");
        let mounted = Command::new("nsenter")
            .arg(format!("--mount=/proc/{}/ns/mnt", server.pid()))
            .args(["mount", "--bind", "/"])
            .arg(&late)
            .status()
            .unwrap();
        assert!(mounted.success());
        let sandbox = managed_sandbox(&l.ws, Vec::new());
        // A work dir off the root filesystem (/dev/shm, where an ordinary user's goes when the
        // checkout is out of its reach) does not show through a bind of `/`: no place there.
        let places = |path: &str| {
            [
                l.ws.join(path),
                l.ws.join("snap").join(path),
                l.ws.join("self").join(path),
                through(&host, &l.ws.join(path)),
                through(&late, &l.ws.join(path)),
            ]
            .into_iter()
            .filter(|place| place.exists())
            .collect::<Vec<_>>()
        };
        let data = BASE64.encode("pwned");
        let mut script = String::new();
        for place in places(".git/config") {
            let params = json!({"path": uri(&place), "dataBase64": data});
            refused(&mut c, "fs/writeFile", params, &sandbox).await;
            script.push_str(&format!("echo pwned >> {} && echo WROTE;", place.display()));
        }
        for place in places("secret/key") {
            let what = format!("fs/readFile {}", place.display());
            let params = json!({"path": uri(&place), "sandbox": sandbox});
            let (code, message) = c.call("fs/readFile", params).await.expect_err(&what);
            assert!(code == -32600 || code == -32004, "{what}: {message}");
            script.push_str(&format!("cat {} && echo READ;", place.display()));
        }
        // The workspace itself stays writable wherever it shows, except where mounted read-only.
        let new = l.ws.join("self/new");
        let params = json!({"path": uri(&new), "dataBase64": data, "sandbox": sandbox});
        c.call("fs/writeFile", params)
            .await
            .unwrap_or_else(|e| panic!("{user:?}: {e:?}"));
        assert!(l.ws.join("new").exists());
        let (_, out, _) = c.run("managed", &l.ws, sandbox.clone(), &script).await;
        assert!(
            !out.contains("WROTE") && !out.contains("READ"),
            "{user:?}: {out}"
        );
        // Under --protect home alone: the home through the bind of `/`.
        let mut script = String::new();
        let home = l.home.join("file");
        let home_places = [through(&host, &home), through(&late, &home), home.clone()];
        for place in home_places.into_iter().filter(|place| place.exists()) {
            let params = json!({"path": uri(&place), "dataBase64": data});
            refused(&mut c, "fs/writeFile", params, &Value::Null).await;
            // The environment's own ruleset is built once, at start: the mount made later is
            // not known to it (the documented limit), so processes under it are not tried there.
            if !place.starts_with(&late) {
                script.push_str(&format!("echo pwned >> {} && echo WROTE;", place.display()));
            }
        }
        let (_, out, _) = c.run("home", &l.ws, Value::Null, &script).await;
        assert!(!out.contains("WROTE"), "{user:?}: {out}");
        assert_eq!(
            std::fs::read_to_string(l.ws.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert_eq!(
            std::fs::read_to_string(l.home.join("file")).unwrap(),
            "home"
        );
        server.stop();
    }
}

#[tokio::test]
async fn a_write_through_a_link_into_a_read_only_path_is_refused_on_every_route() {
    for user in [User::Root, User::Ordinary] {
        if user == User::Root && !skip::root_or_skip("writes by a server run by root") {
            continue;
        }
        let server = server(user, &[]);
        let l = Layout::of(&server.work());
        for (link, target) in [
            (l.ws.join("lnk"), PathBuf::from(".git/newfile")),
            (l.ws.join("sub/lnk"), PathBuf::from("../.git/newfile")),
            (server.work().join("lnkhome"), l.home.join("newfile")),
        ] {
            std::os::unix::fs::symlink(&target, &link).unwrap();
            if user == User::Ordinary {
                give_tree(&link, NOBODY);
            }
        }
        let mut c = server.client().await;
        let managed = managed_sandbox(&l.ws, Vec::new());
        let data = BASE64.encode("x");
        for (path, sandbox) in [
            (l.ws.join("lnk"), &managed),
            (l.ws.join("sub/lnk"), &managed),
            (server.work().join("lnkhome"), &Value::Null),
        ] {
            let write = json!({"path": uri(&path), "dataBase64": data});
            refused(&mut c, "fs/writeFile", write, sandbox).await;
            let copy =
                json!({"sourcePath": uri(&l.ws.join("file.txt")), "destinationPath": uri(&path)});
            refused(&mut c, "fs/copy", copy, sandbox).await;
        }
        assert!(!l.ws.join(".git/newfile").exists() && !l.home.join("newfile").exists());
        server.stop();
    }
}

#[tokio::test]
async fn a_write_through_a_dangling_link_lands_where_the_link_points() {
    for user in [User::Root, User::Ordinary] {
        if user == User::Root && !skip::root_or_skip("writes by a server run by root") {
            continue;
        }
        let server = server(user, &[]);
        let l = Layout::of(&server.work());
        let link = l.ws.join("sub/lnk");
        std::os::unix::fs::symlink("../newroot", &link).unwrap();
        if user == User::Ordinary {
            give_tree(&link, NOBODY);
        }
        let mut c = server.client().await;
        let sandbox = managed_sandbox(&l.ws, Vec::new());
        let params = json!({"path": uri(&link), "dataBase64": BASE64.encode("made"),
                            "sandbox": sandbox});
        c.call("fs/writeFile", params)
            .await
            .expect("a write through a dangling link");
        assert_eq!(
            std::fs::read_to_string(l.ws.join("newroot")).unwrap(),
            "made"
        );
        server.stop();
    }
}

#[tokio::test]
async fn a_dot_dot_after_a_link_is_refused_by_mutating_calls_and_nothing_changes() {
    let server = server(User::Ordinary, &["--protect", "off"]);
    let l = Layout::of(&server.work());
    std::fs::create_dir_all(l.other.join("d")).unwrap();
    std::fs::write(l.other.join("d/keep"), "keep").unwrap();
    std::fs::create_dir(l.ws.join("sub/d")).unwrap();
    std::os::unix::fs::symlink(l.other.join("d"), l.ws.join("sub/ld")).unwrap();
    give_tree(&server.work(), NOBODY);
    let mut c = server.client().await;
    let spelled = uri(&l.ws.join("sub/ld/../d"));
    let data = BASE64.encode("x");
    for (method, params) in [
        ("fs/remove", json!({"path": spelled})),
        (
            "fs/writeFile",
            json!({"path": format!("{spelled}/f"), "dataBase64": data}),
        ),
        (
            "fs/createDirectory",
            json!({"path": format!("{spelled}/new")}),
        ),
        (
            "fs/copy",
            json!({"sourcePath": uri(&l.ws.join("file.txt")),
                           "destinationPath": format!("{spelled}/c")}),
        ),
    ] {
        let message = refused(&mut c, method, params, &Value::Null).await;
        assert!(
            message.contains("after a symbolic link"),
            "{method}: {message}"
        );
    }
    assert_eq!(
        listing_of(&l.other),
        [
            l.other.clone(),
            l.other.join("d"),
            l.other.join("d/keep"),
            l.other.join("precious")
        ]
    );
    assert!(l.ws.join("sub/d").is_dir());
    server.stop();
}

#[tokio::test]
async fn a_file_mount_point_in_a_removed_tree_is_refused_before_anything_is_removed() {
    for user in users_with_mounts("a file bind-mounted into a tree") {
        let tree = |work: &Path, name: &str| work.join("ws/sub").join(name);
        let server = Server::start_in_mount_namespace(
            &[],
            user == User::Ordinary,
            |work, command| {
                Layout::prepare(work, command);
                for name in ["tree", "later"] {
                    for file in ["a", "b", "m", "z"] {
                        std::fs::create_dir_all(tree(work, name)).unwrap();
                        std::fs::write(tree(work, name).join(file), file).unwrap();
                    }
                }
            },
            |work| {
                format!(
                    "mount --bind '{}' '{}'",
                    work.join("ws/file.txt").display(),
                    tree(work, "tree").join("m").display()
                )
            },
        );
        let work = server.work();
        // A mount the server's namespace gets after the environment was set up (a host whose
        // mounts do not propagate): the kernel refuses its removal all the same.
        let mounted = Command::new("nsenter")
            .arg(format!("--mount=/proc/{}/ns/mnt", server.pid()))
            .args(["mount", "--bind"])
            .arg(work.join("ws/file.txt"))
            .arg(tree(&work, "later").join("m"))
            .status()
            .unwrap();
        assert!(mounted.success());
        let mut c = server.client().await;
        let sandbox = managed_sandbox(&work.join("ws"), Vec::new());
        for name in ["tree", "later"] {
            for sandbox in [&sandbox, &Value::Null] {
                let params = json!({"path": uri(&tree(&work, name))});
                let message = refused(&mut c, "fs/remove", params, sandbox).await;
                assert!(
                    message.contains("mount point") && message.contains("nothing was removed"),
                    "{user:?} {name}: {message}"
                );
                assert_eq!(std::fs::read_dir(tree(&work, name)).unwrap().count(), 4);
            }
        }
        server.stop();
    }
}

#[tokio::test]
async fn a_deep_create_directory_holds_one_directory_open() {
    let server = Server::start_prepared(&[], false, |work, command| {
        Layout::prepare(work, command);
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe; it only lowers this child's own limit.
        unsafe {
            command.pre_exec(|| {
                // Well below the 400 a walk holding every level open needs, with room for the
                // descriptors a compiled policy holds (one per rule, the cover's places too) of
                // a call whose thread has not yet dropped it.
                let limit = rustix::process::Rlimit {
                    current: Some(256),
                    maximum: Some(256),
                };
                rustix::process::setrlimit(rustix::process::Resource::Nofile, limit)?;
                Ok(())
            });
        }
    });
    let l = Layout::of(&server.work());
    let mut c = server.client().await;
    let deep: PathBuf = std::iter::repeat_n("a", 400).collect();
    // In `ws/sub` on the thread (or the pool), in `ws` (which holds `.git`) in the forked child.
    for (at, sandbox) in [
        (l.ws.join("sub"), managed_sandbox(&l.ws, Vec::new())),
        (l.ws.join("sub"), Value::Null),
        (l.ws.clone(), managed_sandbox(&l.ws, Vec::new())),
    ] {
        let path = at.join(&deep);
        let params = json!({"path": uri(&path), "sandbox": sandbox});
        c.call("fs/createDirectory", params)
            .await
            .expect("a deep directory");
        assert!(path.is_dir());
        std::fs::remove_dir_all(at.join("a")).unwrap();
    }
    server.stop();
}

#[tokio::test]
async fn a_fifo_is_never_written_nor_waited_for() {
    for user in [User::Root, User::Ordinary] {
        if user == User::Root && !skip::root_or_skip("writes by a server run by root") {
            continue;
        }
        let server = server(user, &[]);
        let l = Layout::of(&server.work());
        // `ws` holds `.git` (the forked child's route), `sub` does not (the thread's).
        for dir in [&l.ws, &l.ws.join("sub")] {
            rustix::fs::mkfifoat(
                rustix::fs::CWD,
                dir.join("fifo"),
                rustix::fs::Mode::from_raw_mode(0o666),
            )
            .unwrap();
            if user == User::Ordinary {
                give_tree(&dir.join("fifo"), NOBODY);
            }
        }
        let mut c = server.client().await;
        let data = BASE64.encode("x");
        let file = uri(&l.ws.join("file.txt"));
        for sandbox in [managed_sandbox(&l.ws, Vec::new()), Value::Null] {
            for fifo in [uri(&l.ws.join("fifo")), uri(&l.ws.join("sub/fifo"))] {
                let write = json!({"path": fifo, "dataBase64": data});
                let message = refused(&mut c, "fs/writeFile", write, &sandbox).await;
                assert!(message.contains("not a regular file"), "{message}");
                let copy = json!({"sourcePath": file, "destinationPath": fifo});
                let message = refused(&mut c, "fs/copy", copy, &sandbox).await;
                assert!(message.contains("not a regular file"), "{message}");
                let from = json!({"sourcePath": fifo, "destinationPath": uri(&l.ws.join("sub/c"))});
                refused(&mut c, "fs/copy", from, &sandbox).await;
            }
        }
        assert!(!l.ws.join("sub/c").exists());
        server.stop();
    }
}

#[tokio::test]
async fn a_file_copied_onto_itself_is_refused_naming_why() {
    let server = server(User::Ordinary, &[]);
    let l = Layout::of(&server.work());
    std::fs::hard_link(l.ws.join("file.txt"), l.ws.join("sub/hardlink")).unwrap();
    let mut c = server.client().await;
    let from = uri(&l.ws.join("file.txt"));
    for to in [
        from.clone(),
        uri(&l.ws.join("sub/../file.txt")),
        uri(&l.ws.join("sub/hardlink")),
    ] {
        for sandbox in [managed_sandbox(&l.ws, Vec::new()), Value::Null] {
            let params = json!({"sourcePath": from, "destinationPath": to});
            let message = refused(&mut c, "fs/copy", params, &sandbox).await;
            assert!(message.contains("onto itself"), "{to}: {message}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(l.ws.join("file.txt")).unwrap(),
        "plain"
    );
    server.stop();
}

/// The cgroup v2 directory the test runs in, as `/proc/self/cgroup` and the cgroup2 mount name
/// it (`None` without cgroup v2).
/// A directory beneath `/sys` that is not one of the kernel's filesystems: the tmpfs a cgroup v1
/// (or hybrid) host mounts on `/sys/fs/cgroup` to hold its hierarchies. `None` elsewhere.
fn tmpfs_beneath_sys() -> Option<PathBuf> {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let dir = Path::new("/sys/fs/cgroup");
    let magic = rustix::fs::statfs(dir).ok()?.f_type as i64;
    (magic == TMPFS_MAGIC).then(|| dir.to_path_buf())
}

/// Adversarial review: "beneath /sys" means whatever is mounted there. A file and a directory
/// made in the tmpfs on `/sys/fs/cgroup` are refused (as root without a sandbox, by the rule
/// of fs/*; otherwise the kernel may refuse first) and nothing appears.
async fn refuses_writes_beneath_sys(c: &mut Client, sandbox: &Value, user: User, pid: u32) {
    let Some(dir) = tmpfs_beneath_sys() else {
        eprintln!("not exercised here: /sys/fs/cgroup is not a tmpfs on this host");
        return;
    };
    let file = dir.join(format!("fs-refused-{pid}.file"));
    let made = dir.join(format!("fs-refused-{pid}.dir"));
    let write = json!({"path": uri(&file), "dataBase64": BASE64.encode("x")});
    let calls = [
        ("fs/writeFile", write),
        ("fs/createDirectory", json!({"path": uri(&made)})),
    ];
    let mut answers = Vec::new();
    for (method, mut params) in calls {
        params["sandbox"] = sandbox.clone();
        answers.push((method, c.call(method, params).await));
    }
    // Cleaned up before anything is asserted: a failure must not leave a file in the host's /sys.
    let existed = (file.exists(), made.exists());
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_dir(&made);
    assert_eq!(existed, (false, false), "{user:?} {sandbox}: {answers:?}");
    for (method, answer) in answers {
        let (code, message) = answer.expect_err(method);
        assert_eq!(code, -32600, "{user:?} {method}: {message}");
        let checked = sandbox.is_null() && user == User::Root;
        assert!(
            message.contains("kernel's filesystems") || !checked,
            "{user:?} {method}: {message}"
        );
    }
}

fn own_cgroup() -> Option<PathBuf> {
    let relative = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let relative = relative
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .to_string();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find(|l| l.contains(" - cgroup2 "))?;
    let point = mount.split(' ').nth(4)?;
    Some(Path::new(point).join(relative.trim_start_matches('/')))
}

#[tokio::test]
async fn no_call_reads_or_writes_the_servers_own_proc_entries_nor_the_kernels_files() {
    for user in users_with_mounts("procfs mounted a second time") {
        let server = Server::start_in_mount_namespace(
            &[],
            user == User::Ordinary,
            |work, command| {
                Layout::prepare(work, command);
                command.env("CLEANROOM_TEST_SERVER_MARKER", "server-marker-6b1f");
            },
            |work| {
                // procfs a second time, and the server's own `/proc/<pid>` bound into a tree.
                format!(
                    "mkdir '{p}'\nmount -t proc proc '{p}'\nmkdir -p '{t}'\nmount --bind /proc/$$ '{t}'",
                    p = work.join("proc").display(),
                    t = work.join("tree/pid").display(),
                )
            },
        );
        let (work, pid) = (server.work(), server.pid());
        let l = Layout::of(&work);
        let mut c = server.client().await;
        let managed = managed_sandbox(&l.ws, Vec::new());
        let tid = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|t| *t != pid.to_string())
            .unwrap();
        let second = work.join("proc");
        let own: Vec<PathBuf> = [
            PathBuf::from("/proc/self/environ"),
            PathBuf::from(format!("/proc/{pid}/environ")),
            PathBuf::from("/proc/thread-self/environ"),
            PathBuf::from(format!("/proc/{pid}/task/{tid}/environ")),
            PathBuf::from(format!("/proc/{tid}/environ")),
            second.join("self/environ"),
            second.join(format!("{pid}/environ")),
        ]
        .into();
        for sandbox in [&managed, &Value::Null] {
            for path in &own {
                for method in ["fs/readFile", "fs/getMetadata", "fs/canonicalize"] {
                    let message =
                        refused(&mut c, method, json!({"path": uri(path)}), sandbox).await;
                    // Unconfined and as root, only the check of fs/* refuses it; elsewhere the
                    // kernel may refuse first (Landlock, or the root-owned entries of a server
                    // that is not dumpable, for an ordinary user's).
                    let checked = sandbox.is_null() && user == User::Root;
                    assert!(
                        message.contains("process's own /proc entry") || !checked,
                        "{user:?} {method} {}: {message}",
                        path.display()
                    );
                }
                let copy =
                    json!({"sourcePath": uri(path), "destinationPath": uri(&l.ws.join("stolen"))});
                refused(&mut c, "fs/copy", copy, sandbox).await;
            }
            let fds = json!({"path": uri(Path::new("/proc/self/fd"))});
            refused(&mut c, "fs/readDirectory", fds, sandbox).await;
            let data = BASE64.encode("pwned");
            for path in ["/proc/self/comm", "/proc/self/oom_score_adj"] {
                let write = json!({"path": uri(Path::new(path)), "dataBase64": data});
                refused(&mut c, "fs/writeFile", write, sandbox).await;
            }
            // A sysctl (its own value, so nothing changes even if written) and a new cgroup.
            let sysctl = Path::new("/proc/sys/kernel/printk_ratelimit");
            let value = BASE64.encode(std::fs::read(sysctl).unwrap());
            let message = refused(
                &mut c,
                "fs/writeFile",
                json!({"path": uri(sysctl), "dataBase64": value}),
                sandbox,
            )
            .await;
            assert!(message.contains("kernel's filesystems"), "{message}");
            if let Some(cgroup) = own_cgroup() {
                let made = cgroup.join(format!("fs-refused-{pid}"));
                let result = c
                    .call(
                        "fs/createDirectory",
                        json!({"path": uri(&made), "sandbox": sandbox}),
                    )
                    .await;
                let existed = made.exists();
                let _ = std::fs::remove_dir(&made);
                assert!(!existed && result.is_err(), "{result:?}");
            }
            refuses_writes_beneath_sys(&mut c, sandbox, user, pid).await;
        }
        assert!(!l.ws.join("stolen").exists());
        // A tree holding a mount of a process's directory is not copied through it.
        for sandbox in [&managed, &Value::Null] {
            let copy = json!({"sourcePath": uri(&work.join("tree")), "recursive": true,
                              "destinationPath": uri(&l.ws.join("stolen-tree"))});
            refused(&mut c, "fs/copy", copy, sandbox).await;
            assert!(!l.ws.join("stolen-tree").exists(), "{user:?} {sandbox}");
        }
        // Reading the rest of procfs stays what the kernel allows.
        let meminfo = json!({"path": uri(Path::new("/proc/meminfo"))});
        c.call("fs/getMetadata", meminfo).await.unwrap();
        // Nor does a process the server starts, as root too, under a sandbox or --protect home.
        let script = format!("cat /proc/{pid}/environ /proc/{pid}/task/{tid}/environ");
        for (i, sandbox) in [managed, Value::Null].into_iter().enumerate() {
            let id = format!("environ-{i}");
            let (_, out, code) = c.run(&id, &l.ws, sandbox, &script).await;
            assert!(
                code != 0 && !out.contains("server-marker-6b1f"),
                "{user:?}: {out}"
            );
        }
        server.stop();
    }
}

/// A host process of the server's user holding a secret in its environment (and so in its
/// memory), as the agent host that starts the server holds its API keys; killed when dropped.
struct Sibling(std::process::Child);

/// The secret a [`Sibling`] holds.
const SIBLING_SECRET: &str = "sk-sibling-secret-51c3";

impl Sibling {
    /// Starts it as `user` (root's test: `nobody` for an ordinary user's server); returns once it
    /// runs `sleep` as that user, so what it holds is what a process of that user could read.
    fn start(user: User) -> Sibling {
        let mut command = Command::new("setpriv");
        if let (User::Ordinary, true) = (user, rustix::process::geteuid().is_root()) {
            let uid = NOBODY.to_string();
            command.args([format!("--reuid={uid}"), format!("--regid={uid}")]);
            command.arg("--clear-groups");
        }
        // Bounded, should the test be killed before it drops the sibling.
        command
            .args(["sleep", "300"])
            .env("SIBLING_SECRET", SIBLING_SECRET);
        let sibling = Sibling(command.spawn().expect("setpriv sleep starts"));
        let comm = format!("/proc/{}/comm", sibling.0.id());
        while std::fs::read_to_string(&comm).unwrap() != "sleep\n" {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        sibling
    }
}

impl Drop for Sibling {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// -32600 for `method` with `params` under `sandbox`, refused by the rule on procfs or, where a
/// Landlock domain confines the call, by the kernel.
async fn refused_as_a_process_entry(c: &mut Client, method: &str, params: Value, sandbox: &Value) {
    let message = refused(c, method, params.clone(), sandbox).await;
    assert!(
        message.contains("process's own /proc entry") || message.contains("Permission denied"),
        "{method} {params} under {sandbox}: {message}"
    );
}

/// Issue 25, review-final finding 1: a read that needs no confinement ran on a pool thread with
/// no Landlock domain, so no ptrace scoping kept it out of another process's `environ`, `maps`
/// or `mem`.
#[tokio::test]
async fn no_call_reads_another_processs_proc_entries_under_any_policy() {
    for user in [User::Root, User::Ordinary] {
        if user == User::Root && !skip::root_or_skip("reads of another process's /proc by root") {
            continue;
        }
        for protect in ["home", "off"] {
            let server = server(user, &["--protect", protect]);
            let l = Layout::of(&server.work());
            let sibling = Sibling::start(user);
            let pid = sibling.0.id();
            let mut c = server.client().await;
            let own = |rest: &str| PathBuf::from(format!("/proc/{pid}/{rest}"));
            let confined = managed_sandbox(&l.ws, Vec::new());
            for sandbox in [
                Value::Null,
                workspace_write(&l.ws),
                read_only(&l.ws),
                confined,
            ] {
                for path in [
                    own("environ"),
                    own(&format!("task/{pid}/environ")),
                    own("maps"),
                ] {
                    let read = json!({"path": uri(&path)});
                    refused_as_a_process_entry(&mut c, "fs/readFile", read, &sandbox).await;
                    let copy = json!({"sourcePath": uri(&path),
                                      "destinationPath": uri(&l.ws.join("stolen"))});
                    refused(&mut c, "fs/copy", copy, &sandbox).await;
                }
                let mem = json!({"handleId": "mem", "path": uri(&own("mem"))});
                refused_as_a_process_entry(&mut c, "fs/open", mem, &sandbox).await;
                let block = json!({"handleId": "mem", "offset": 0, "len": 64});
                assert_eq!(c.call("fs/readBlock", block).await.unwrap_err().0, -32004);
                for method in ["fs/getMetadata", "fs/readDirectory", "fs/canonicalize"] {
                    let fds = json!({"path": uri(&own("fd"))});
                    refused_as_a_process_entry(&mut c, method, fds, &sandbox).await;
                }
            }
            assert!(
                !l.ws.join("stolen").exists(),
                "{user:?} --protect {protect}"
            );
            // The rest of procfs still reads.
            let meminfo = json!({"path": uri(Path::new("/proc/meminfo"))});
            c.call("fs/readFile", meminfo).await.unwrap();
            drop(sibling);
            server.stop();
        }
    }
}
