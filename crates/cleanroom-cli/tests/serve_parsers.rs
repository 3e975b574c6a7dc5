//! What fuzzing the exec-server's parsers found (`fuzz/README.md`), and what review found in
//! the same parsers, each over the real `cleanroom serve`: the crash or hang, now answered as it
//! should be.

mod serve_support;

use serde_json::json;
use serve_support::{managed, special, uri, Server};

/// The `glob` target: `*a*a…b` against a long name of `a` took the matcher every way of
/// splitting the name between the stars (about 10^47 here), on the server's runtime thread:
/// the server stopped answering anyone.
#[tokio::test]
async fn a_glob_with_many_stars_is_matched_without_trying_every_split() {
    let server = Server::start(&[]);
    let work = server.work();
    let long = "a".repeat(250);
    std::fs::write(work.join(&long), "").unwrap();
    let pattern = format!("{}b", "*a".repeat(40));
    let entries = vec![
        special("root", None, "read"),
        json!({"access": "none", "path": {"type": "glob_pattern", "pattern": pattern}}),
    ];
    let sandbox = managed(&work, entries, "enabled");
    let mut c = server.client().await;
    let call = json!({"path": uri(&work.join(&long)), "sandbox": sandbox});
    let metadata = c.call("fs/getMetadata", call).await.unwrap();
    assert_eq!(metadata["isFile"], true, "{metadata}");
    server.stop();
}

/// A glob whose matching would take seconds of the server's runtime thread (review: 50,000 long
/// names against a pattern that retries every position) is refused once it has spent its
/// bound of steps, and says so.
#[tokio::test]
async fn a_glob_that_would_match_for_seconds_is_refused_at_its_bound() {
    let server = Server::start(&[]);
    let work = server.work();
    let names = work.join("names");
    std::fs::create_dir(&names).unwrap();
    // `*`, 120 `a`, `b` against 240 `a` and 3 digits: over 20,000 steps a name.
    for i in 0..500 {
        std::fs::write(names.join(format!("{}{i:03}", "a".repeat(240))), "").unwrap();
    }
    let pattern = format!("names/*{}b", "a".repeat(120));
    let entries = vec![
        special("root", None, "read"),
        json!({"access": "none", "path": {"type": "glob_pattern", "pattern": pattern}}),
    ];
    let sandbox = managed(&work, entries, "enabled");
    let mut c = server.client().await;
    let call = json!({"path": uri(&work), "sandbox": sandbox});
    let (code, message) = c.call("fs/getMetadata", call).await.unwrap_err();
    assert_eq!(code, -32602, "{message}");
    assert!(message.contains("steps of matching"), "{message}");
    server.stop();
}

/// The glob entries of one sandbox share one budget (review: five entries that each stayed
/// under it stalled the server five times as long): an entry that alone is within it is
/// accepted, three of them together are refused.
#[tokio::test]
async fn the_glob_entries_of_one_sandbox_share_one_bound() {
    let server = Server::start(&[]);
    let work = server.work();
    let names = work.join("names");
    std::fs::create_dir(&names).unwrap();
    // 200 names of 20,000 to 30,000 steps each: 4 to 6 million steps an entry, under the
    // bound of 10 million; three entries are over it.
    for i in 0..200 {
        std::fs::write(names.join(format!("{}{i:03}", "a".repeat(240))), "").unwrap();
    }
    let pattern = format!("names/*{}b", "a".repeat(120));
    let sandbox = |globs: usize| {
        let mut entries = vec![special("root", None, "read")];
        entries.extend((0..globs).map(
            |_| json!({"access": "none", "path": {"type": "glob_pattern", "pattern": pattern}}),
        ));
        managed(&work, entries, "enabled")
    };
    let mut c = server.client().await;
    let call = json!({"path": uri(&work), "sandbox": sandbox(1)});
    let metadata = c.call("fs/getMetadata", call).await.unwrap();
    assert_eq!(metadata["isDirectory"], true, "{metadata}");
    let call = json!({"path": uri(&work), "sandbox": sandbox(3)});
    let (code, message) = c.call("fs/getMetadata", call).await.unwrap_err();
    assert_eq!(code, -32602, "{message}");
    assert!(message.contains("entries[3]"), "{message}");
    assert!(message.contains("steps of matching"), "{message}");
    server.stop();
}
