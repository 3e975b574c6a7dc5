//! Round trip and streaming figures of both exec-servers, measured by one protocol client
//! (`wire.rs`) in one run, interleaved round by round so that the machine's drift favours
//! neither; with no `sandbox` argument and with the one Codex sends for `workspace-write`.
//! Besides processes, the round trip of `fs/getMetadata` (what the client sends most: a turn
//! begins with one per ancestor of the workspace), which shows a server's per-call confinement.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::exec_server::{ExecServer, Target};
use super::report::shorten;
use super::scenario::CLEANROOM;
use super::wire::Wire;

/// Rounds; per round and server: this many round trips, one stream.
const ROUNDS: usize = 5;
const ROUND_TRIPS: usize = 20;
const STREAM_BYTES: usize = 64 << 20;

/// What one server showed under one sandbox setting.
#[derive(Default)]
struct Figures {
    round_trips: Vec<Duration>,
    fs_trips: Vec<Duration>,
    /// MiB/s of each stream.
    streams: Vec<f64>,
    refused: Option<String>,
}

/// Measures and prints the table.
pub async fn measure(work: &Path) {
    let codex = super::client::codex_binary();
    let workspace = work.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let cwd = file_uri(&workspace);
    let home = file_uri(&work.join("home"));
    let servers = [Target::Reference, Target::Cleanroom]
        .map(|target| ExecServer::start(target, work, Path::new(CLEANROOM), &codex));
    let mut wires = Vec::new();
    for server in &servers {
        wires.push(Wire::connect(&server.url).await);
    }
    let sandboxes = [
        ("no sandbox field", Value::Null),
        (
            "Codex's workspace-write",
            workspace_write_policy(&cwd, &home),
        ),
    ];
    let mut figures: Vec<Vec<Figures>> = sandboxes
        .iter()
        .map(|_| servers.iter().map(|_| Figures::default()).collect())
        .collect();
    for round in 0..ROUNDS {
        for (case, (_, sandbox)) in sandboxes.iter().enumerate() {
            for turn in 0..wires.len() {
                // Alternate who goes first, so drift of the machine favours neither.
                let index = (turn + round) % wires.len();
                let wire = &mut wires[index];
                let tag = format!("r{round}c{case}");
                measure_one(wire, &tag, &cwd, sandbox, &mut figures[case][index]).await;
            }
        }
    }
    println!(
        "exec-server figures: {ROUNDS} rounds × {ROUND_TRIPS} round trips of /bin/true and 1 \
              stream of {} MiB (head -c … /dev/zero) per server, interleaved; medians",
        STREAM_BYTES >> 20
    );
    for (case, (name, _)) in sandboxes.iter().enumerate() {
        for (index, server) in servers.iter().enumerate() {
            println!(
                "  {name:>24} | {:<17} | {}",
                server.target.name(),
                summary(&figures[case][index])
            );
        }
        if let [reference, cleanroom] = &figures[case][..] {
            println!(
                "  {name:>24} | cleanroom/codex   | {}",
                ratios(cleanroom, reference)
            );
        }
    }
    drop(wires);
    for server in servers {
        server.stop();
    }
}

async fn measure_one(
    wire: &mut Wire,
    tag: &str,
    cwd: &str,
    sandbox: &Value,
    figures: &mut Figures,
) {
    if figures.refused.is_some() {
        return;
    }
    for n in 0..ROUND_TRIPS {
        match wire
            .run(&format!("{tag}-true-{n}"), &["/bin/true"], cwd, sandbox)
            .await
        {
            Ok(run) => figures.round_trips.push(run.elapsed),
            Err(error) => {
                figures.refused = Some(format!("{} {}", error["code"], error["message"]));
                return;
            }
        }
    }
    let metadata = json!({"path": cwd, "sandbox": sandbox});
    for _ in 0..ROUND_TRIPS {
        let started = std::time::Instant::now();
        wire.call("fs/getMetadata", metadata.clone())
            .await
            .expect("fs/getMetadata of the workspace");
        figures.fs_trips.push(started.elapsed());
    }
    let bytes = STREAM_BYTES.to_string();
    let argv = ["/usr/bin/head", "-c", bytes.as_str(), "/dev/zero"];
    let run = wire
        .run(&format!("{tag}-stream"), &argv, cwd, sandbox)
        .await
        .unwrap();
    assert_eq!(
        (run.bytes, run.exit_code),
        (STREAM_BYTES, Some(0)),
        "the whole stream arrived"
    );
    figures
        .streams
        .push(STREAM_BYTES as f64 / (1 << 20) as f64 / run.elapsed.as_secs_f64());
}

fn sorted(figures: &Figures) -> (Vec<Duration>, Vec<Duration>, Vec<f64>) {
    let mut trips = figures.round_trips.clone();
    trips.sort();
    let mut fs_trips = figures.fs_trips.clone();
    fs_trips.sort();
    let mut streams = figures.streams.clone();
    streams.sort_by(f64::total_cmp);
    (trips, fs_trips, streams)
}

/// Median round trip and median throughput of `ours` over `theirs`.
fn ratios(ours: &Figures, theirs: &Figures) -> String {
    if ours.refused.is_some() || theirs.refused.is_some() {
        return "no ratio: one server refused".into();
    }
    let ((our_trips, our_fs, our_streams), (their_trips, their_fs, their_streams)) =
        (sorted(ours), sorted(theirs));
    let median_trip = |t: &[Duration]| t[t.len() / 2].as_secs_f64();
    format!(
        "round trip {:.2}× | fs/getMetadata {:.2}× | stream {:.2}×",
        median_trip(&our_trips) / median_trip(&their_trips),
        median_trip(&our_fs) / median_trip(&their_fs),
        our_streams[our_streams.len() / 2] / their_streams[their_streams.len() / 2]
    )
}

fn summary(figures: &Figures) -> String {
    if let Some(refused) = &figures.refused {
        return format!("refused: {}", shorten(refused, 120));
    }
    let (trips, fs_trips, streams) = sorted(figures);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "round trip median {:.2} ms, p90 {:.2} ms | fs/getMetadata median {:.2} ms | \
         stream median {:.0} MiB/s (min {:.0}, max {:.0})",
        ms(trips[trips.len() / 2]),
        ms(trips[trips.len() * 9 / 10]),
        ms(fs_trips[fs_trips.len() / 2]),
        streams[streams.len() / 2],
        streams[0],
        streams[streams.len() - 1],
    )
}

/// A `file://` URI of a plain absolute path (the work dir's names need no escaping).
fn file_uri(path: &Path) -> String {
    let text = path.to_str().unwrap();
    assert!(
        text.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/-_.".contains(&b)),
        "{text} would need percent-encoding"
    );
    format!("file://{text}")
}

/// The `sandbox` argument Codex 0.171 sends with every process/start of a workspace-write
/// thread, as the recording proxy saw it (workspace root writable, `.git`, `.agents`, `.codex`
/// and `.aws` in it read-only, /tmp and TMPDIR writable, the rest readable, no network).
fn workspace_write_policy(cwd: &str, home: &str) -> Value {
    let special = |kind: &str, subpath: Option<&str>| match subpath {
        None => json!({"type": "special", "value": {"kind": kind}}),
        Some(sub) => json!({"type": "special", "value": {"kind": kind, "subpath": sub}}),
    };
    let mut entries = vec![
        json!({"access": "read", "path": special("root", None)}),
        json!({"access": "write", "path": special("project_roots", None)}),
        json!({"access": "write", "path": special("slash_tmp", None)}),
        json!({"access": "write", "path": special("tmpdir", None)}),
    ];
    for protected in [".git", ".agents", ".codex", ".aws"] {
        entries.push(json!({"access": "read", "missing_path_behavior": "skip",
                            "path": special("project_roots", Some(protected))}));
    }
    json!({
        "cwd": cwd,
        "permissions": {"type": "managed", "network": "restricted",
                        "file_system": {"type": "restricted", "entries": entries}},
        "policyContext": {"cwd": cwd, "workspaceRoots": [cwd]},
        "useLegacyLandlock": false,
        "userHomeDir": home,
        "windowsSandboxLevel": "disabled",
        "workspaceRoots": [cwd],
    })
}
