//! `cleanroom serve`: the exec-server (JSON-RPC over WebSocket or stdio) on one cleanroom root.
//!
//! The first and only line this command writes to stdout is the server's URL (WebSocket mode);
//! in stdio mode stdout carries the protocol. Exit 0 after SIGTERM/SIGINT once every process is
//! reaped and the root removed; 125 when the server cannot start.

use std::path::PathBuf;
use std::time::Duration;

use cleanroom::protect::ProtectMode;
use cleanroom_exec_server::{Config, Listen, DEFAULT_MAX_MESSAGE_BYTES};

use crate::Global;

/// Write protection applied to every process the server starts.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Protect {
    /// No kernel policy.
    Off,
    /// The real home is read-only.
    Home,
    /// Writes only inside the root, the working directory and device files.
    Strict,
}

/// Options of `cleanroom serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// `ws://IP:PORT` (loopback unless --allow-remote) or `stdio`.
    #[arg(long, default_value = "ws://127.0.0.1:0", value_name = "URL")]
    listen: String,
    /// Permit a non-loopback listen address (the URL's capability path is then the only guard).
    #[arg(long)]
    allow_remote: bool,
    /// Working directory reported to clients [default: the current directory].
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// How long a lost connection's session stays resumable, its processes running and their
    /// output kept (0: everything of the session is reaped at once).
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    session_ttl: String,
    /// How long a closed process stays readable before the session forgets it (what the
    /// session reaps does not depend on it).
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    process_retention: String,
    /// Write protection (Landlock) for every process: `home` keeps the real home read-only,
    /// `strict` allows writes only inside the root, --cwd and device files.
    #[arg(long, value_enum, default_value = "home")]
    protect: Protect,
    /// Largest accepted frame or message; larger ones close the socket with 1009.
    #[arg(long, default_value_t = DEFAULT_MAX_MESSAGE_BYTES, value_name = "N")]
    max_message_bytes: usize,
    /// Most sessions at once: attached, or detached and resumable within --session-ttl (a
    /// session being ended does not count); at the limit the session detached longest is ended
    /// to admit a new client.
    #[arg(long, default_value_t = 64, value_name = "N")]
    max_sessions: usize,
    /// Most unclosed processes per session.
    #[arg(long, default_value_t = 256, value_name = "N")]
    max_processes: usize,
    /// Most authenticated connections open at once; one more is closed with 1013 (connections
    /// that have not shown the capability yet have their own budget).
    #[arg(long, default_value_t = 4096, value_name = "N")]
    max_connections: usize,
    /// Let secret-looking variables (host and client) reach processes.
    #[arg(long)]
    allow_secret_env: bool,
    /// Keep P (beneath /tmp or /var/tmp) the host's inside the processes' private /tmp
    /// (repeatable)
    #[arg(long, value_name = "P")]
    share_tmp: Vec<PathBuf>,
    /// Give the processes the host's /tmp and /var/tmp instead of one private pair
    #[arg(long)]
    host_tmp: bool,
}

/// Runs the exec-server.
pub fn main(args: ServeArgs, global: &Global) -> u8 {
    let listen = match Listen::parse(&args.listen) {
        Ok(listen) => listen,
        Err(e) => return crate::fail(e),
    };
    let (session_ttl, process_retention) = match (
        duration("--session-ttl", &args.session_ttl),
        duration("--process-retention", &args.process_retention),
    ) {
        (Ok(ttl), Ok(retention)) => (ttl, retention),
        (Err(e), _) | (_, Err(e)) => return crate::fail(e),
    };
    let cwd = match args
        .cwd
        .map_or_else(std::env::current_dir, |dir| dir.canonicalize())
    {
        Ok(cwd) if cwd.is_dir() => cwd,
        Ok(cwd) => return crate::fail(format!("--cwd {} is not a directory", cwd.display())),
        Err(e) => return crate::fail(format!("cannot resolve the working directory: {e}")),
    };
    let protect = match args.protect {
        Protect::Off => ProtectMode::Off,
        Protect::Home => ProtectMode::Home,
        Protect::Strict => ProtectMode::Strict,
    };
    let config = Config {
        listen,
        allow_remote: args.allow_remote,
        namespace: global.namespace_path(),
        cwd,
        session_ttl,
        process_retention,
        protect,
        max_message_bytes: args.max_message_bytes,
        max_sessions: args.max_sessions.max(1),
        max_processes: args.max_processes.max(1),
        max_connections: args.max_connections.max(1),
        allow_secret_env: args.allow_secret_env,
        private_tmp: !args.host_tmp,
        share_tmp: args.share_tmp,
    };
    let ready = |url: &str| {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{url}");
        let _ = stdout.flush();
    };
    match cleanroom_exec_server::run(config, ready) {
        Ok(()) => 0,
        Err(e) => crate::fail(e),
    }
}

/// A duration option; a bare `0` is zero.
fn duration(option: &str, text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    cleanroom::parse_duration(text).map_err(|e| format!("{option}: {e}"))
}
