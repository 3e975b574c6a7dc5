//! `cleanroom serve`'s `fs/*` methods driven over a real WebSocket, as the Codex client calls
//! them: each method's success shape, the error codes the client depends on (missing: -32004
//! with the OS message, which apply_patch's add relies on; a directory read: -32600; a native
//! path: -32602), and each call's `sandbox` enforced by the kernel on the calling thread.

mod serve_support;

use std::path::Path;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};
use serve_support::{managed, path_entry, special, uri, workspace_write, Client, Server};

const MISSING: &str = "No such file or directory (os error 2)";

fn b64(text: &str) -> String {
    BASE64.encode(text)
}

async fn ok(c: &mut Client, method: &str, params: Value) -> Value {
    c.call(method, params)
        .await
        .unwrap_or_else(|e| panic!("{method}: {e:?}"))
}

async fn err(c: &mut Client, method: &str, params: Value) -> (i64, String) {
    c.call(method, params)
        .await
        .expect_err(&format!("{method} fails"))
}

fn populate(work: &Path) {
    std::fs::create_dir_all(work.join("dir/sub")).unwrap();
    std::fs::write(work.join("file.txt"), "hello\n").unwrap();
    std::fs::write(work.join("dir/sub/inner.txt"), "inner\n").unwrap();
    std::os::unix::fs::symlink("file.txt", work.join("link")).unwrap();
}

#[tokio::test]
async fn every_fs_method_answers_with_the_shapes_the_codex_client_reads() {
    let server = Server::start(&[]);
    let w = server.work();
    populate(&w);
    let mut c = server.client().await;
    let at = |p: &str| uri(&w.join(p));

    let file = ok(&mut c, "fs/getMetadata", json!({"path": at("file.txt")})).await;
    assert_eq!(
        (
            &file["isFile"],
            &file["isDirectory"],
            &file["isSymlink"],
            &file["size"]
        ),
        (&json!(true), &json!(false), &json!(false), &json!(6))
    );
    assert!(file["modifiedAtMs"].as_u64().unwrap() > 0 && file["createdAtMs"].is_u64());
    let link = ok(&mut c, "fs/getMetadata", json!({"path": at("link")})).await;
    assert_eq!(
        (&link["isFile"], &link["isSymlink"]),
        (&json!(true), &json!(true))
    );
    let dir = ok(&mut c, "fs/getMetadata", json!({"path": at("dir")})).await;
    assert_eq!(dir["isDirectory"], true);

    let read = ok(&mut c, "fs/readFile", json!({"path": at("link")})).await;
    assert_eq!(read, json!({"dataBase64": b64("hello\n")}));
    let listing = ok(&mut c, "fs/readDirectory", json!({"path": uri(&w)})).await;
    assert_eq!(
        listing["entries"],
        json!([{"fileName": "dir", "isDirectory": true, "isFile": false},
               {"fileName": "file.txt", "isDirectory": false, "isFile": true},
               {"fileName": "link", "isDirectory": false, "isFile": true}])
    );
    let canonical = ok(
        &mut c,
        "fs/canonicalize",
        json!({"path": at("dir/../link")}),
    )
    .await;
    assert_eq!(canonical, json!({"path": at("file.txt")}));

    ok(&mut c, "fs/createDirectory", json!({"path": at("new/a/b")})).await;
    ok(&mut c, "fs/createDirectory", json!({"path": at("new/a/b")})).await;
    ok(
        &mut c,
        "fs/writeFile",
        json!({"path": at("new/a/b/w.txt"), "dataBase64": b64("written")}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(w.join("new/a/b/w.txt")).unwrap(),
        "written"
    );
    ok(&mut c, "fs/copy", json!({"sourcePath": at("file.txt"), "destinationPath": at("copy.txt"), "recursive": false})).await;
    assert_eq!(
        std::fs::read_to_string(w.join("copy.txt")).unwrap(),
        "hello\n"
    );
    ok(
        &mut c,
        "fs/copy",
        json!({"sourcePath": at("dir"), "destinationPath": at("dir2"), "recursive": true}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(w.join("dir2/sub/inner.txt")).unwrap(),
        "inner\n"
    );
    ok(
        &mut c,
        "fs/copy",
        json!({"sourcePath": at("link"), "destinationPath": at("link2"), "recursive": false}),
    )
    .await;
    assert_eq!(
        std::fs::read_link(w.join("link2")).unwrap(),
        Path::new("file.txt")
    );
    ok(&mut c, "fs/remove", json!({"path": at("dir2")})).await;
    assert!(!w.join("dir2").exists());
    ok(&mut c, "fs/remove", json!({"path": at("never-there")})).await;
    ok(
        &mut c,
        "fs/remove",
        json!({"path": at("copy.txt"), "recursive": false, "force": false}),
    )
    .await;
    assert!(!w.join("copy.txt").exists());

    assert_eq!(
        ok(
            &mut c,
            "fs/open",
            json!({"handleId": "h1", "path": at("file.txt")})
        )
        .await,
        json!({"handleId": "h1"})
    );
    let block = |offset: u64, len: u64| json!({"handleId": "h1", "offset": offset, "len": len});
    assert_eq!(
        ok(&mut c, "fs/readBlock", block(0, 3)).await,
        json!({"chunk": b64("hel"), "eof": false})
    );
    assert_eq!(
        ok(&mut c, "fs/readBlock", block(3, 100)).await,
        json!({"chunk": b64("lo\n"), "eof": true})
    );
    assert_eq!(
        ok(&mut c, "fs/readBlock", block(100, 10)).await,
        json!({"chunk": "", "eof": true})
    );
    ok(&mut c, "fs/close", json!({"handleId": "h1"})).await;
    ok(&mut c, "fs/close", json!({"handleId": "h1"})).await;
    server.stop();
}

#[tokio::test]
async fn fs_errors_carry_the_codes_the_client_depends_on() {
    let server = Server::start(&[]);
    let w = server.work();
    populate(&w);
    let mut c = server.client().await;
    let at = |p: &str| uri(&w.join(p));

    // apply_patch's add: write, -32004, create the parent, write again.
    let add = json!({"path": at("sub/added.txt"), "dataBase64": b64("added\n")});
    assert_eq!(
        err(&mut c, "fs/writeFile", add.clone()).await,
        (-32004, MISSING.into())
    );
    ok(
        &mut c,
        "fs/createDirectory",
        json!({"path": at("sub"), "recursive": true}),
    )
    .await;
    ok(&mut c, "fs/writeFile", add).await;
    assert_eq!(
        std::fs::read_to_string(w.join("sub/added.txt")).unwrap(),
        "added\n"
    );

    for method in [
        "fs/getMetadata",
        "fs/readFile",
        "fs/readDirectory",
        "fs/canonicalize",
    ] {
        assert_eq!(
            err(&mut c, method, json!({"path": at("missing")})).await,
            (-32004, MISSING.into()),
            "{method}"
        );
    }
    let (code, message) = err(&mut c, "fs/readFile", json!({"path": at("dir")})).await;
    assert_eq!(code, -32600);
    assert!(message.ends_with("is not a file"), "{message}");
    let native = w.join("file.txt").display().to_string();
    assert_eq!(
        err(&mut c, "fs/getMetadata", json!({"path": native}))
            .await
            .0,
        -32602
    );
    assert_eq!(
        err(
            &mut c,
            "fs/readFile",
            json!({"path": "file://remote.example/x"})
        )
        .await
        .0,
        -32602
    );
    assert_eq!(
        err(
            &mut c,
            "fs/writeFile",
            json!({"path": at("x"), "dataBase64": "!!"})
        )
        .await
        .0,
        -32600
    );
    assert_eq!(
        err(
            &mut c,
            "fs/createDirectory",
            json!({"path": at("a/b"), "recursive": false})
        )
        .await,
        (-32004, MISSING.into())
    );
    assert_eq!(
        err(
            &mut c,
            "fs/remove",
            json!({"path": at("missing"), "force": false})
        )
        .await,
        (-32004, MISSING.into())
    );
    assert_eq!(
        err(
            &mut c,
            "fs/remove",
            json!({"path": at("dir"), "recursive": false})
        )
        .await
        .0,
        -32603
    );
    let copy = |from: &str, to: &str, recursive: bool| json!({"sourcePath": at(from), "destinationPath": at(to), "recursive": recursive});
    assert_eq!(
        err(&mut c, "fs/copy", copy("dir", "d2", false)).await.0,
        -32600
    );
    assert_eq!(
        err(&mut c, "fs/copy", copy("dir", "dir/sub/in", true))
            .await
            .0,
        -32600
    );
    assert_eq!(
        err(&mut c, "fs/copy", copy("missing", "m2", true)).await,
        (-32004, MISSING.into())
    );
    assert_eq!(
        err(
            &mut c,
            "fs/getMetadata",
            json!({"path": at("link"), "followSymlinks": false})
        )
        .await
        .0,
        -32600
    );

    assert_eq!(
        err(
            &mut c,
            "fs/open",
            json!({"handleId": "d", "path": at("dir")})
        )
        .await
        .0,
        -32600
    );
    assert_eq!(
        err(
            &mut c,
            "fs/open",
            json!({"handleId": "m", "path": at("missing")})
        )
        .await
        .0,
        -32004
    );
    assert_eq!(
        err(
            &mut c,
            "fs/open",
            json!({"handleId": "x".repeat(33), "path": at("file.txt")})
        )
        .await
        .0,
        -32600
    );
    ok(
        &mut c,
        "fs/open",
        json!({"handleId": "h", "path": at("file.txt")}),
    )
    .await;
    assert_eq!(
        err(
            &mut c,
            "fs/open",
            json!({"handleId": "h", "path": at("file.txt")})
        )
        .await
        .0,
        -32600
    );
    assert_eq!(
        err(
            &mut c,
            "fs/readBlock",
            json!({"handleId": "h", "offset": 0, "len": 0})
        )
        .await
        .0,
        -32600
    );
    assert_eq!(
        err(
            &mut c,
            "fs/readBlock",
            json!({"handleId": "h", "offset": 0, "len": 2 << 20})
        )
        .await
        .0,
        -32600
    );
    assert_eq!(
        err(
            &mut c,
            "fs/readBlock",
            json!({"handleId": "nope", "offset": 0, "len": 1})
        )
        .await
        .0,
        -32004
    );
    assert_eq!(
        err(&mut c, "fs/walk", json!({"path": uri(&w)})).await.0,
        -32601
    );
    server.stop();
}

#[tokio::test]
async fn fs_calls_are_confined_by_their_sandbox_in_the_kernel() {
    let server = Server::start(&[]);
    let w = server.work();
    let ws = w.join("workspace");
    let outside = w.join("outside");
    for dir in [ws.join(".git"), ws.join("secret"), outside.clone()] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(ws.join("secret/key"), "s3cret").unwrap();
    // A link inside the workspace to a dir outside it: a path-string check would let it by.
    std::os::unix::fs::symlink(&outside, ws.join("way-out")).unwrap();
    let mut c = server.client().await;
    let sandbox = workspace_write(&ws);
    let write = |path: &Path| json!({"path": uri(path), "dataBase64": b64("x"), "sandbox": sandbox.clone()});

    ok(&mut c, "fs/writeFile", write(&ws.join("inside.txt"))).await;
    assert!(ws.join("inside.txt").exists());
    for denied in [
        outside.join("direct.txt"),
        ws.join("way-out/linked.txt"),
        ws.join(".git/config"),
    ] {
        let (code, message) = err(&mut c, "fs/writeFile", write(&denied)).await;
        assert_eq!(code, -32600, "{}: {message}", denied.display());
        assert!(!denied.exists(), "{} was written", denied.display());
    }
    let (code, _) = err(
        &mut c,
        "fs/createDirectory",
        json!({"path": uri(&outside.join("d")), "sandbox": sandbox.clone()}),
    )
    .await;
    assert_eq!(code, -32600);
    assert!(!outside.join("d").exists());

    // `none` hides a subtree from reads; without the sandbox the same read works.
    let hidden = managed(
        &ws,
        vec![
            special("root", None, "read"),
            path_entry(&ws.join("secret"), "none"),
        ],
        "restricted",
    );
    let key = uri(&ws.join("secret/key"));
    let (code, message) = err(
        &mut c,
        "fs/readFile",
        json!({"path": key, "sandbox": hidden}),
    )
    .await;
    assert!(code == -32600 || code == -32004, "{code} {message}");
    let plain = ok(&mut c, "fs/readFile", json!({"path": key, "sandbox": null})).await;
    assert_eq!(plain["dataBase64"], b64("s3cret"));
    // A path under no entry gets nothing, reads included; under `root: read` it is readable.
    let elsewhere = outside.join("plain.txt");
    std::fs::write(&elsewhere, "p").unwrap();
    let workspace_only = managed(
        &ws,
        vec![special("project_roots", None, "write")],
        "restricted",
    );
    let read = |sandbox: &Value| json!({"path": uri(&elsewhere), "sandbox": sandbox});
    let (code, message) = err(&mut c, "fs/readFile", read(&workspace_only)).await;
    assert_eq!(code, -32600, "{message}");
    let readable = ok(&mut c, "fs/readFile", read(&workspace_write(&ws))).await;
    assert_eq!(readable["dataBase64"], b64("p"));
    server.stop();
}

#[tokio::test]
async fn an_ordinary_users_server_applies_patches_in_a_git_workspace_and_denies_the_rest() {
    // A thread cannot enter a user namespace, so mutating calls whose policy needs mounts run
    // in a forked child: a top-level file is created while `.git` stays read-only.
    let server = Server::start_unprivileged(&[]);
    let w = server.work();
    let mut c = server.client().await;
    let (ws, outside) = (w.join("ws"), w.join("outside"));
    for dir in [&ws, &outside] {
        ok(&mut c, "fs/createDirectory", json!({"path": uri(dir)})).await;
    }
    ok(
        &mut c,
        "fs/createDirectory",
        json!({"path": uri(&ws.join(".git"))}),
    )
    .await;
    let sandbox = workspace_write(&ws);
    let with = |mut params: Value| {
        params["sandbox"] = sandbox.clone();
        params
    };
    let write = |path: &Path| with(json!({"path": uri(path), "dataBase64": b64("x")}));

    ok(&mut c, "fs/writeFile", write(&ws.join("top.txt"))).await;
    let nested = write(&ws.join("sub/added.txt"));
    assert_eq!(
        err(&mut c, "fs/writeFile", nested.clone()).await,
        (-32004, MISSING.into())
    );
    ok(
        &mut c,
        "fs/createDirectory",
        with(json!({"path": uri(&ws.join("sub"))})),
    )
    .await;
    ok(&mut c, "fs/writeFile", nested).await;
    ok(&mut c, "fs/copy", with(json!({"sourcePath": uri(&ws.join("sub")), "destinationPath": uri(&ws.join("sub2")), "recursive": true}))).await;
    assert!(ws.join("sub2/added.txt").is_file());
    ok(
        &mut c,
        "fs/remove",
        with(json!({"path": uri(&ws.join("sub2"))})),
    )
    .await;
    ok(
        &mut c,
        "fs/remove",
        with(json!({"path": uri(&ws.join("top.txt")), "recursive": false, "force": false})),
    )
    .await;
    assert!(!ws.join("sub2").exists() && !ws.join("top.txt").exists());
    for denied in [ws.join(".git/config"), outside.join("escape")] {
        let (code, message) = err(&mut c, "fs/writeFile", write(&denied)).await;
        assert_eq!(code, -32600, "{}: {message}", denied.display());
        assert!(!denied.exists(), "{} was written", denied.display());
    }
    let (code, _) = err(
        &mut c,
        "fs/createDirectory",
        with(json!({"path": uri(&ws.join(".git/hooks"))})),
    )
    .await;
    assert_eq!(code, -32600);
    server.stop();
}
