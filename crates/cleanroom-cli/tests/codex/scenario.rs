//! The interop scenario: the real Codex client, with a stand-in model scripting its tool calls,
//! against one exec-server, each step checked where it lands (on disk, or in what the client
//! shows the model next).
//!
//! Turn 1 runs under the thread's `workspace-write` (Codex's default): AGENTS.md, exec_command,
//! writes outside the workspace and into `.git` (both must be denied), a terminal session fed
//! with write_stdin, apply_patch add / update / delete, view_image. Turn 2 sets the turn's
//! sandbox policy to `read-only`: reading works, writing is denied. Every step depends on no
//! earlier one (the files it needs are prepared), so a failure list names each cause once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};

use super::app_server::AppServer;
use super::exec_server::{ExecServer, Target};
use super::model::{ModelApi, ModelRequest};
use super::proxy::Proxy;
use super::report::{dump, shorten, Report, Step};

/// The binary under test.
pub const CLEANROOM: &str = env!("CARGO_BIN_EXE_cleanroom");

/// A 1×1 PNG: what `view_image` must hand the model byte for byte.
const PIXEL_PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

/// The scenario's world: the workspace, a dir outside it, and the running pieces.
struct Scenario {
    app: AppServer,
    model: ModelApi,
    workspace: PathBuf,
    outside: PathBuf,
    marker: String,
    steps: Vec<Step>,
    /// The status of the turn once `turn/completed` arrived.
    turn_end: Option<String>,
    responses: usize,
}

/// Files the workspace starts with, so that every step depends on no earlier one.
const NOTES: (&str, &str) = ("notes.txt", "original line\n");
const DOOMED: (&str, &str) = ("doomed.txt", "delete me\n");
const README: (&str, &str) = ("readme.txt", "read me under read-only\n");

/// The workspace: an AGENTS.md carrying a marker only the model can report having seen, the
/// image for `view_image`, and the files the patches and the read-only turn work on.
fn prepare(work: &Path) -> (PathBuf, PathBuf, String) {
    let workspace = work.join("workspace");
    let outside = work.join("outside");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let marker = format!("agents-md-marker-{:x}", nanos());
    let agents = format!("# Project rules\nInterop marker: {marker}. Be brief.\n");
    std::fs::write(workspace.join("AGENTS.md"), agents).unwrap();
    std::fs::write(
        workspace.join("pixel.png"),
        BASE64.decode(PIXEL_PNG).unwrap(),
    )
    .unwrap();
    for (name, text) in [NOTES, DOOMED, README] {
        std::fs::write(workspace.join(name), text).unwrap();
    }
    git_init(&workspace);
    (workspace, outside, marker)
}

/// Makes `dir` a git project of its own: the client finds the git root there, not in whatever
/// repository holds the work dir, and its sandbox keeps `.git` read-only.
pub fn git_init(dir: &Path) {
    let git = std::process::Command::new("git")
        .args(["init", "--quiet"])
        .arg(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .status()
        .unwrap_or_else(|e| panic!("prerequisite missing: git: {e}"));
    assert!(git.success(), "git init {}: {git}", dir.display());
}

fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

/// Runs the whole scenario against `target` with its private dirs under `work`.
pub async fn run_scenario(target: Target, work: &Path) -> Report {
    let codex = super::client::codex_binary();
    let (workspace, outside, marker) = prepare(work);
    let server = ExecServer::start(target, work, Path::new(CLEANROOM), &codex);
    let proxy = Proxy::start(server.url.clone()).await;
    let model = ModelApi::start().await;
    let mut app = AppServer::start(&codex, work, &workspace, &model.base_url()).await;
    let thread = open_thread(&mut app, &proxy.url(), &workspace).await;
    let mut scenario = Scenario {
        app,
        model,
        workspace,
        outside,
        marker,
        steps: Vec::new(),
        turn_end: None,
        responses: 0,
    };
    scenario.workspace_write_turn(&thread).await;
    scenario.read_only_turn(&thread).await;
    let Scenario {
        app, model, steps, ..
    } = scenario;
    let mut notes = Vec::new();
    if !app.client_requests.is_empty() {
        notes.push(format!(
            "the client asked us (declined): {:?}",
            app.client_requests
        ));
    }
    let unexpected = model.unexpected.lock().unwrap().clone();
    if !unexpected.is_empty() {
        notes.push(format!(
            "other requests to the model API (404): {unexpected:?}"
        ));
    }
    app.stop().await;
    let status = server.stop();
    notes.push(format!("{} exited: {status}", target.name()));
    if target == Target::Cleanroom {
        assert!(
            status.success(),
            "cleanroom serve exited {status} on SIGTERM"
        );
    }
    let exchanges = proxy.exchanges();
    if let Some(dir) = std::env::var_os("CLEANROOM_INTEROP_DUMP") {
        dump(Path::new(&dir), target, &exchanges, &proxy.passed());
    }
    Report {
        target,
        steps,
        exchanges,
        notifications: proxy.notifications(),
        closes: proxy.closes(),
        notes,
    }
}

/// What docs/exec-server.md tells an agent host to send (see `docs`): initialize (with the
/// experimental API, which `environment/add` needs), initialized, `environment/add` with the
/// proxy's URL, `thread/start` in the workspace of that environment.
async fn open_thread(app: &mut AppServer, exec_server_url: &str, workspace: &Path) -> String {
    let mut thread = None;
    for message in super::docs::host_messages(exec_server_url, workspace) {
        let method = message["method"].as_str().expect("a method").to_string();
        if message.get("id").is_none() {
            app.notify(&method);
            continue;
        }
        let result = app.must(&method, message["params"].clone()).await;
        if method == "thread/start" {
            thread = result["thread"]["id"].as_str().map(str::to_string);
        }
    }
    thread.expect("the docs' messages start a thread")
}

/// A `function_call` output item.
fn call(call_id: &str, name: &str, arguments: Value) -> Value {
    json!({"type": "function_call", "call_id": call_id, "name": name,
           "arguments": arguments.to_string()})
}

fn exec(call_id: &str, cmd: &str) -> Value {
    call(call_id, "exec_command", json!({"cmd": cmd}))
}

/// A freeform `apply_patch` call, as the client's bundled models make it.
fn patch(call_id: &str, body: &str) -> Value {
    let input = format!("*** Begin Patch\n{body}*** End Patch\n");
    json!({"type": "custom_tool_call", "call_id": call_id, "name": "apply_patch", "input": input})
}

/// Where the scenario stands: the client's pending model request, or why there is none.
type Turn = Result<ModelRequest, String>;

impl Scenario {
    /// Turn 1, under the thread's `workspace-write`: AGENTS.md, exec, writes outside the
    /// workspace and into `.git`, a terminal session fed through write_stdin, apply_patch
    /// add/update/delete, view_image.
    async fn workspace_write_turn(&mut self, thread: &str) {
        let mut turn = self.start_turn(thread, json!({})).await;
        if let Ok(request) = &turn {
            assert_tools_offered(request);
        }
        let marker = self.marker.clone();
        self.check("AGENTS.md reaches the model", &turn, |r| {
            let texts = r.message_texts();
            if texts.iter().any(|t| t.contains(&marker)) {
                return Ok(());
            }
            let starts: Vec<String> = texts.iter().map(|t| shorten(t, 60)).collect();
            Err(format!(
                "no message carries the AGENTS.md marker: {starts:?}"
            ))
        });
        let made = self.workspace.join("made.txt");
        let cmd = "printf 'made by exec\\n' > made.txt && cat made.txt";
        turn = self.tool(turn, exec("c1", cmd)).await;
        self.check("exec_command runs under workspace-write", &turn, |r| {
            output_has(r, "c1", "made by exec")?;
            file_is(&made, "made by exec\n")
        });
        let outside = self.outside.join("escape.txt");
        let name = "a write outside the workspace is denied";
        turn = self.denied_write(name, turn, "c2", &outside).await;
        let hook = self.workspace.join(".git/hooks/escaped");
        let name = "a write into .git under workspace-write is denied";
        turn = self.denied_write(name, turn, "c2g", &hook).await;
        turn = self.terminal_session(turn).await;
        turn = self.patches(turn).await;
        turn = self.view_image(turn).await;
        self.finish_turn("turn under workspace-write completes", turn)
            .await;
    }

    /// A command that says it ran, then writes `path`: the step passes when it ran and `path`
    /// is as it was before (checked on disk).
    async fn denied_write(
        &mut self,
        name: &'static str,
        turn: Turn,
        call_id: &str,
        path: &Path,
    ) -> Turn {
        let before = std::fs::read(path).ok();
        let ran = format!("attempting-write-{call_id}");
        let cmd = format!("echo {ran}; echo escaped > '{}'", path.display());
        let turn = self.tool(turn, exec(call_id, &cmd)).await;
        self.check(name, &turn, |r| {
            output_has(r, call_id, &ran)?;
            match std::fs::read(path).ok() == before {
                true => Ok(()),
                false => Err(format!("{} was written", path.display())),
            }
        });
        turn
    }

    /// exec_command with a terminal that waits for a line, then write_stdin feeding it.
    async fn terminal_session(&mut self, turn: Turn) -> Turn {
        let read = json!({"cmd": "read line; echo got:$line", "tty": true, "yield_time_ms": 1000});
        let turn = self.tool(turn, call("c3", "exec_command", read)).await;
        let mut session = None;
        self.check("exec_command keeps a terminal session open", &turn, |r| {
            let output = r.tool_output_text("c3");
            session = session_id(&output);
            match session {
                Some(_) => Ok(()),
                None => Err(format!("no running session: {}", shorten(&output, 300))),
            }
        });
        let chars = json!({"session_id": session.unwrap_or(0), "chars": "ping\n",
                           "yield_time_ms": 2000});
        let turn = self.tool(turn, call("c4", "write_stdin", chars)).await;
        self.check("write_stdin reaches the session", &turn, |r| {
            output_has(r, "c4", "got:ping")
        });
        turn
    }

    /// apply_patch adds a file in a new directory, updates a file, deletes another.
    async fn patches(&mut self, turn: Turn) -> Turn {
        let added = self.workspace.join("sub/added.txt");
        let add = "*** Add File: sub/added.txt\n+added by apply_patch\n";
        let turn = self.tool(turn, patch("c5", add)).await;
        self.check("apply_patch adds a file", &turn, |r| {
            file_is(&added, "added by apply_patch\n").map_err(|e| with_output(e, r, "c5"))
        });
        let notes = self.workspace.join(NOTES.0);
        let update = format!(
            "*** Update File: {}\n@@\n-original line\n+patched line\n",
            NOTES.0
        );
        let turn = self.tool(turn, patch("c6", &update)).await;
        self.check("apply_patch updates a file", &turn, |r| {
            file_is(&notes, "patched line\n").map_err(|e| with_output(e, r, "c6"))
        });
        let doomed = self.workspace.join(DOOMED.0);
        let delete = format!("*** Delete File: {}\n", DOOMED.0);
        let turn = self.tool(turn, patch("c7", &delete)).await;
        self.check("apply_patch deletes a file", &turn, |r| {
            match doomed.exists() {
                true => Err(with_output(
                    format!("{} still exists", doomed.display()),
                    r,
                    "c7",
                )),
                false => Ok(()),
            }
        });
        turn
    }

    /// view_image of the workspace's PNG: the next request must carry its exact bytes.
    async fn view_image(&mut self, turn: Turn) -> Turn {
        let path = self.workspace.join("pixel.png");
        let turn = self
            .tool(turn, call("c8", "view_image", json!({"path": path})))
            .await;
        self.check("view_image's image reaches the model", &turn, |r| {
            let expected = format!("data:image/png;base64,{PIXEL_PNG}");
            let images: Vec<&str> = r
                .tool_output("c8")
                .and_then(Value::as_array)
                .map(|parts| {
                    parts
                        .iter()
                        .filter_map(|p| p["image_url"].as_str())
                        .collect()
                })
                .unwrap_or_default();
            match images.contains(&expected.as_str()) {
                true => Ok(()),
                false => Err(format!(
                    "no input_image with the PNG's bytes: {}",
                    shorten(&r.tool_output_text("c8"), 300)
                )),
            }
        });
        turn
    }

    /// Turn 2, with the turn's sandbox policy set to `read-only`: reading works, writing not.
    async fn read_only_turn(&mut self, thread: &str) {
        let read_only = json!({"sandboxPolicy": {"type": "readOnly"}});
        let mut turn = self.start_turn(thread, read_only).await;
        let read = format!("cat {}; echo read-only-ran", README.0);
        turn = self.tool(turn, exec("c9", &read)).await;
        self.check("exec_command runs under read-only", &turn, |r| {
            output_has(r, "c9", "read-only-ran")?;
            output_has(r, "c9", README.1.trim_end())
        });
        let readme = self.workspace.join(README.0);
        let name = "a write under read-only is denied";
        turn = self.denied_write(name, turn, "c10", &readme).await;
        self.finish_turn("turn under read-only completes", turn)
            .await;
    }

    /// `turn/start` with `extra` params; the client's first model request of the turn.
    async fn start_turn(&mut self, thread: &str, extra: Value) -> Turn {
        let mut params = json!({"threadId": thread,
            "input": [{"type": "text", "text": "Run the interop script."}]});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        self.turn_end = None;
        self.app.must("turn/start", params).await;
        self.next_request().await
    }

    /// Answers the pending request with `item` and waits for the next one.
    async fn tool(&mut self, turn: Turn, item: Value) -> Turn {
        let request = turn?;
        self.responses += 1;
        request.respond(&format!("resp-{}", self.responses), vec![item]);
        self.next_request().await
    }

    /// The client's next model request, or why the turn went on without one.
    async fn next_request(&mut self) -> Turn {
        if let Some(status) = &self.turn_end {
            return Err(format!("the turn already ended ({status})"));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            tokio::select! {
                request = self.model.next() => return Ok(request),
                message = self.app.notification() => {
                    if let Some(status) = turn_completed(&message?) {
                        self.turn_end = Some(status.clone());
                        return Err(format!("the turn ended ({status}) before the next request"));
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    return Err("no model request within 120 s".into());
                }
            }
        }
    }

    /// Ends the turn with an assistant message and records how it completed.
    async fn finish_turn(&mut self, name: &'static str, turn: Turn) {
        if let Ok(request) = turn {
            self.responses += 1;
            let message = json!({"type": "message", "role": "assistant", "id": "msg-done",
                "content": [{"type": "output_text", "text": "Done."}]});
            request.respond(&format!("resp-{}", self.responses), vec![message]);
            if let Ok(unexpected) = self.next_request().await {
                unexpected.respond("resp-extra", Vec::new());
            }
        }
        let status = self
            .turn_end
            .clone()
            .unwrap_or_else(|| "never ended".into());
        let outcome = match status.starts_with("\"completed\"") {
            true => Ok(()),
            false => Err(status),
        };
        self.steps.push(Step { name, outcome });
    }

    /// Records step `name`: `check` on the pending request, or the reason there is none.
    fn check(
        &mut self,
        name: &'static str,
        turn: &Turn,
        check: impl FnOnce(&ModelRequest) -> Result<(), String>,
    ) {
        let outcome = match turn {
            Ok(request) => check(request),
            Err(why) => Err(why.clone()),
        };
        self.steps.push(Step { name, outcome });
    }
}

/// The status and error of a `turn/completed` notification.
fn turn_completed(message: &Value) -> Option<String> {
    let turn = &message["params"]["turn"];
    (message["method"] == "turn/completed").then(|| format!("{} {}", turn["status"], turn["error"]))
}

/// The pinned client offers every tool the scenario scripts (else the config is wrong, and the
/// scenario would test nothing).
fn assert_tools_offered(request: &ModelRequest) {
    let offered = request.tool_names();
    let needed = ["exec_command", "write_stdin", "apply_patch", "view_image"];
    let missing: Vec<_> = needed.iter().filter(|t| !offered.contains(t)).collect();
    assert!(
        missing.is_empty(),
        "the client offers no {missing:?} (offered: {offered:?})"
    );
}

/// The tool output of `call_id` contains `needle`.
fn output_has(request: &ModelRequest, call_id: &str, needle: &str) -> Result<(), String> {
    let output = request.tool_output_text(call_id);
    match output.contains(needle) {
        true => Ok(()),
        false => Err(format!(
            "output lacks {needle:?}: {}",
            shorten(&output, 400)
        )),
    }
}

fn with_output(error: String, request: &ModelRequest, call_id: &str) -> String {
    format!(
        "{error}; tool output: {}",
        shorten(&request.tool_output_text(call_id), 400)
    )
}

/// `path` holds exactly `expected`.
fn file_is(path: &Path, expected: &str) -> Result<(), String> {
    match std::fs::read_to_string(path) {
        Ok(text) if text == expected => Ok(()),
        Ok(text) => Err(format!(
            "{} holds {text:?}, not {expected:?}",
            path.display()
        )),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The unified-exec session id in an exec_command output ("... session ID 123 ...").
fn session_id(output: &str) -> Option<u64> {
    let rest = &output[output.find("session ID ")? + "session ID ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}
