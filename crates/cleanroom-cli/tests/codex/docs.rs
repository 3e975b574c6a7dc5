//! The "Use it with Codex" section of docs/exec-server.md, followed as written: the bash recipe
//! for the Codex CLI (run as it stands, with `cleanroom` and the pinned `codex` on PATH) and the
//! messages an agent host sends `codex app-server` (sent by the scenario, see
//! [`host_messages`]). A change to the section changes what the interop tests do.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::exec_server::base_env;
use super::model::{ModelApi, ModelRequest};

/// The user docs the section is read from.
const DOC: &str = include_str!("../../../../docs/exec-server.md");

/// The section's heading.
const HEADING: &str = "## Use it with Codex\n";

/// What the JSON messages say where the host puts the server's URL and its project.
const URL_PLACEHOLDER: &str = "URL";
const PROJECT_PLACEHOLDER: &str = "/home/me/project";

/// The section, up to the next heading.
fn section() -> &'static str {
    let start = DOC
        .find(HEADING)
        .expect("docs/exec-server.md has a \"Use it with Codex\" section");
    let rest = &DOC[start + HEADING.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The section's first fenced block in `language`.
fn block(language: &str) -> &'static str {
    let fence = format!("```{language}\n");
    let start = section()
        .find(&fence)
        .unwrap_or_else(|| panic!("no ```{language} block in \"Use it with Codex\""))
        + fence.len();
    let rest = &section()[start..];
    &rest[..rest.find("```").expect("a closed block")]
}

/// The messages the docs tell an agent host to send `codex app-server`, in order, with the
/// server's `url` and the project `cwd` put in.
pub fn host_messages(url: &str, cwd: &Path) -> Vec<Value> {
    block("json")
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let mut message: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("the docs' message is not JSON ({e}): {line}"));
            put_in(&mut message, url, &cwd.display().to_string());
            message
        })
        .collect()
}

/// Replaces the placeholders in every string of `value`.
fn put_in(value: &mut Value, url: &str, cwd: &str) {
    match value {
        Value::String(text) if text == URL_PLACEHOLDER => *text = url.to_string(),
        Value::String(text) if text == PROJECT_PLACEHOLDER => *text = cwd.to_string(),
        Value::Array(items) => items.iter_mut().for_each(|v| put_in(v, url, cwd)),
        Value::Object(fields) => fields.values_mut().for_each(|v| put_in(v, url, cwd)),
        _ => {}
    }
}

/// Runs the docs' bash recipe for the Codex CLI in a git project under `work`, with `cleanroom`
/// (the binary under test) and the pinned `codex` first on PATH and the stand-in as the model:
/// the model has the agent run one command, which must have run inside a cleanroom root; the
/// recipe must end with status 0 (the server stopped cleanly) and leave no root behind.
pub async fn follow_the_cli_recipe(work: &Path) {
    let codex = super::client::codex_binary();
    let bin = work.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(super::scenario::CLEANROOM, bin.join("cleanroom")).unwrap();
    std::os::unix::fs::symlink(&codex, bin.join("codex")).unwrap();
    let project = work.join("project");
    std::fs::create_dir_all(&project).unwrap();
    super::scenario::git_init(&project);
    let mut model = ModelApi::start().await;
    let codex_home = work.join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let config = super::app_server::config_toml(&model.base_url());
    std::fs::write(codex_home.join("config.toml"), config).unwrap();

    let mut env = base_env(work);
    env.retain(|(name, _)| *name != "PATH");
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    // The recipe's `cleanroom serve` as written, in a namespace of the test's own: the default
    // one (`/tmp/cleanroom-<euid>`) may hold a developer's roots.
    let namespace = std::fs::canonicalize(work).unwrap().join("ns");
    let log = std::fs::File::create(work.join("recipe.log")).unwrap();
    let mut recipe = tokio::process::Command::new("bash")
        .args(["-c", block("sh")])
        .env_clear()
        .envs(env)
        .env("PATH", path)
        .env("CODEX_HOME", &codex_home)
        .env("CLEANROOM_STATE_DIR", &namespace)
        .current_dir(&project)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("bash runs the recipe");

    let show = "echo \"run=$CLEANROOM_RUN_ID home=$HOME\"";
    let first = next(&mut model, work).await;
    first.respond(
        "resp-1",
        vec![
            json!({"type": "function_call", "call_id": "c1", "name": "exec_command",
                    "arguments": json!({"cmd": show}).to_string()}),
        ],
    );
    let second = next(&mut model, work).await;
    let output = second.tool_output_text("c1");
    let done = json!({"type": "message", "role": "assistant", "id": "msg-done",
                      "content": [{"type": "output_text", "text": "Done."}]});
    second.respond("resp-2", vec![done]);
    let status = loop {
        tokio::select! {
            status = recipe.wait() => break status.unwrap(),
            extra = model.next() => extra.respond("resp-extra", Vec::new()),
            _ = tokio::time::sleep(Duration::from_secs(120)) => panic!(
                "the recipe did not end within 120 s; its output:\n{}", recipe_log(work)
            ),
        }
    };
    assert!(
        ran_in_a_cleanroom_root(&output, &namespace),
        "the agent's command did not run inside cleanroom: {output}\nrecipe:\n{}",
        recipe_log(work)
    );
    assert!(
        status.success(),
        "the recipe ended with {status}:\n{}",
        recipe_log(work)
    );
    let roots = super::exec_server::roots_in(&namespace);
    assert!(
        roots.is_empty(),
        "the server left roots in {}: {roots:?}",
        namespace.display()
    );
}

/// The stand-in's next request (hang guard: 120 s).
async fn next(model: &mut ModelApi, work: &Path) -> ModelRequest {
    tokio::time::timeout(Duration::from_secs(120), model.next())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no model request within 120 s; the recipe's output:\n{}",
                recipe_log(work)
            )
        })
}

/// Whether `output` shows a run id and a HOME inside a root of `namespace`.
fn ran_in_a_cleanroom_root(output: &str, namespace: &Path) -> bool {
    let value = |key: &str| {
        output
            .split_whitespace()
            .find_map(|word| word.strip_prefix(key))
            .unwrap_or("")
            .to_string()
    };
    let (run, home) = (value("run="), value("home="));
    let root = namespace.join(format!("run-{run}"));
    !run.is_empty() && Path::new(&home).starts_with(root)
}

fn recipe_log(work: &Path) -> String {
    std::fs::read_to_string(work.join("recipe.log")).unwrap_or_default()
}
