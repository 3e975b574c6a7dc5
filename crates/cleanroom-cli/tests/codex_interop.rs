//! The real Codex client against an exec-server, as a Codex user would run it.
//!
//! `codex app-server` (the pinned npm package's linux-x64 binary, private CODEX_HOME) registers
//! an exec-server with `environment/add {environmentId, execServerUrl}` (the messages
//! docs/exec-server.md gives an agent host, read from it), starts a thread in a
//! workspace of that environment and runs turns whose "model" is a loopback stand-in scripting
//! the tool calls a model makes: `exec_command`, `write_stdin`, `apply_patch` (add, update,
//! delete) and `view_image`, under Codex's default sandbox (`workspace-write`) and `read-only`.
//! Each step is checked where it lands: on disk, or in what the client shows the model next.
//! Between the client and the server sits a recording proxy, so a run also says which protocol
//! methods the client used and what the server answered.
//!
//! The same scenario runs against `cleanroom serve` (the CI test) and against Codex's own
//! `codex exec-server` (the reference: the harness is proven on it). Everything runs inside a
//! network namespace with only loopback; see `codex/isolation.rs`.
//!
//! `CLEANROOM_INTEROP_DUMP=DIR` writes every recorded exchange (method, params, answer) to
//! `DIR/<server>.jsonl` (a dir outside /tmp: the isolated run has a private /tmp).
//!
//! Benchmark (not a test; release build, both servers driven by one client in one run):
//! `cargo test --release -p cleanroom-cli --test codex_interop -- --ignored --nocapture figures`

mod codex;

use std::path::Path;

use codex::exec_server::Target;
use codex::report::Report;

/// Steps that fail against `cleanroom serve` today, each with the reason the reference run and
/// the recorded exchanges show. The CI test holds cleanroom to exactly this list: a step that
/// starts failing fails the test, and so does a listed step that starts passing (remove it).
const CLEANROOM_KNOWN_GAPS: &[(&str, &str)] = &[];

#[test]
fn codex_client_drives_cleanroom_serve() {
    let name = "codex_client_drives_cleanroom_serve";
    codex::isolation::run_isolated(name, |work| {
        let report = scenario(Target::Cleanroom, work);
        let failing: Vec<&str> = report.failing().collect();
        let known: Vec<&str> = CLEANROOM_KNOWN_GAPS.iter().map(|(step, _)| *step).collect();
        let regressed: Vec<&&str> = failing.iter().filter(|s| !known.contains(s)).collect();
        let fixed: Vec<&&str> = known.iter().filter(|s| !failing.contains(s)).collect();
        assert!(
            regressed.is_empty() && fixed.is_empty(),
            "against cleanroom serve, failing but not a known gap: {regressed:?}; known gaps \
             that now pass (remove them from CLEANROOM_KNOWN_GAPS): {fixed:?}"
        );
    });
}

#[test]
fn codex_client_drives_its_own_exec_server() {
    let name = "codex_client_drives_its_own_exec_server";
    codex::isolation::run_isolated(name, |work| {
        let report = scenario(Target::Reference, work);
        let failing: Vec<&str> = report.failing().collect();
        assert!(failing.is_empty(), "the reference run failed: {failing:?}");
    });
}

/// The Codex CLI pointed at `cleanroom serve` with `CODEX_EXEC_SERVER_URL`, by the bash recipe
/// of docs/exec-server.md ("Use it with Codex") run as written (`codex/docs.rs`).
#[test]
fn codex_cli_reaches_cleanroom_serve_as_the_docs_say() {
    let name = "codex_cli_reaches_cleanroom_serve_as_the_docs_say";
    codex::isolation::run_isolated(name, |work| {
        runtime().block_on(codex::docs::follow_the_cli_recipe(work))
    });
}

/// Runs the scenario against `target` (inside the isolated namespaces) and prints its report.
fn scenario(target: Target, work: &Path) -> Report {
    let report = runtime().block_on(codex::scenario::run_scenario(target, work));
    println!("{report}");
    report
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Round trip of a trivial command and streaming throughput through both servers, measured by
/// one client (`codex/wire.rs`) in one run, interleaved round by round; release build:
/// `cargo test --release -p cleanroom-cli --test codex_interop -- --ignored --nocapture figures`
#[test]
#[ignore = "a benchmark, not a test: run it with --ignored --release --nocapture"]
fn figures() {
    codex::isolation::run_isolated("figures", |work| {
        runtime().block_on(codex::figures::measure(work))
    });
}
