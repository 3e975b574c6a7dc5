//! The server's lifecycle: configuration, start (environment, listener, URL), the orphan
//! reaper's thread, the allocator's set-up, and shutdown on SIGTERM/SIGINT/SIGHUP (or stdin EOF
//! in stdio mode).
//!
//! Invariants: the URL is reported only once the listener is bound and the root exists;
//! shutdown closes every session and terminates everything the server started as one set,
//! until the server has no child left, then removes the root, before `run` returns, on a thread
//! of its own (never the blocking pool, which client calls can fill); the blocking pool has at
//! most [`BLOCKING_THREADS`] threads.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cleanroom::protect::ProtectMode;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use crate::environment::{Environment, EnvironmentOptions};
use crate::process::{Reaper, TERMINATE_GRACE};
use crate::rpc::{Registry, Rpc, Shared};
use crate::transport::{self, Limits};
use crate::Error;

/// Default `--session-ttl`: 30 s, as Codex's own exec-server.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(30);
/// Default `--process-retention`: 60 s.
pub const DEFAULT_PROCESS_RETENTION: Duration = Duration::from_secs(60);
/// Threads of the blocking pool (managed validations, unconfined `fs/*` calls), at most:
/// tokio's default of 512 let a burst of blocking calls take hundreds of threads (and the memory
/// glibc keeps per thread). Terminations have threads of their own
/// (`process::terminations`), and so do the orphan reaper and the shutdown's sweep.
const BLOCKING_THREADS: usize = 16;
/// How long an idle thread of the blocking pool lives: after a burst the pool shrinks back
/// within seconds.
const BLOCKING_KEEP_ALIVE: Duration = Duration::from_secs(5);
/// Default `--max-message-bytes`: 100 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 100 * 1024 * 1024;

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// `ws://IP:PORT`.
    WebSocket(SocketAddr),
    /// Newline-delimited JSON on stdin/stdout.
    Stdio,
}

impl Listen {
    /// Parses `ws://127.0.0.1:0`, `ws://localhost:PORT`, `ws://[::1]:PORT`, `stdio` or
    /// `stdio://`.
    pub fn parse(text: &str) -> Result<Listen, Error> {
        if text == "stdio" || text == "stdio://" {
            return Ok(Listen::Stdio);
        }
        let bad = |why: &str| Error::Config(format!("invalid --listen {text:?}: {why}"));
        let rest = text
            .strip_prefix("ws://")
            .ok_or_else(|| bad("expected ws://HOST:PORT or stdio"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let rest = match rest.strip_prefix("localhost:") {
            Some(port) => format!("127.0.0.1:{port}"),
            None => rest.to_string(),
        };
        rest.parse::<SocketAddr>()
            .map(Listen::WebSocket)
            .map_err(|_| bad("expected an IP address and a port"))
    }
}

/// Everything `cleanroom serve` is configured with.
#[derive(Clone, Debug)]
pub struct Config {
    /// `--listen`.
    pub listen: Listen,
    /// `--allow-remote`: permit a non-loopback listen address.
    pub allow_remote: bool,
    /// The namespace (state dir) holding the environment's root.
    pub namespace: PathBuf,
    /// `--cwd`: the working directory reported by `environment/info`.
    pub cwd: PathBuf,
    /// `--session-ttl`: how long a lost connection's session stays resumable (0: reap at once).
    pub session_ttl: Duration,
    /// `--process-retention`: how long a closed process stays readable (default 60 s).
    pub process_retention: Duration,
    /// `--protect`: write protection applied to every process.
    pub protect: ProtectMode,
    /// `--max-message-bytes`.
    pub max_message_bytes: usize,
    /// `--max-sessions`.
    pub max_sessions: usize,
    /// `--max-processes`: unclosed processes per session.
    pub max_processes: usize,
    /// `--max-connections`.
    pub max_connections: usize,
    /// `--allow-secret-env`.
    pub allow_secret_env: bool,
    /// Not `--host-tmp`: the processes share one private `/tmp` and `/var/tmp`.
    pub private_tmp: bool,
    /// `--share-tmp`: paths beneath `/tmp` or `/var/tmp` that stay the host's.
    pub share_tmp: Vec<PathBuf>,
}

/// Keeps the streaming path's large buffers (256 KiB chunks, their notifications of about
/// 350 KB, the writer's batches) on the heap, and the heap from shrinking under them: glibc
/// would otherwise map some of them afresh or trim the freed top of the heap, and the next
/// buffer would fault every page in again (zeroed by the kernel). Up to 8 MiB of free heap top
/// is kept (twice a connection's queue budget); beyond that, memory freed after a burst goes
/// back to the system.
fn tune_allocator() {
    crate::sys::tune_allocator(4 << 20, 8 << 20);
}

/// Gives the memory freed after a burst back to the system (glibc keeps free pages in every
/// arena, and up to the trim threshold at the top of the main heap).
fn trim_allocator() {
    crate::sys::trim_allocator();
}

/// Makes the server not dumpable: its `/proc/<pid>` entries (environment, memory, descriptors)
/// then need `CAP_SYS_PTRACE` (or `CAP_PERFMON`) to read, which no process it starts under a
/// policy keeps
/// ([`crate::sys::hook::keep_out_of_the_server`]), and no core dump holds its secrets. After the
/// environment is set up: its namespace holder, forked before, is opened through `/proc`.
fn not_dumpable() {
    use rustix::process::{set_dumpable_behavior, DumpableBehavior};
    if let Err(e) = set_dumpable_behavior(DumpableBehavior::NotDumpable) {
        tracing::warn!("cannot make the server non-dumpable: {e}");
    }
}

/// Runs the server until SIGTERM/SIGINT/SIGHUP (or stdin EOF with `Listen::Stdio`). `ready` receives
/// the URL once clients can connect (not called in stdio mode). With glibc it tunes the process's
/// allocator for the streaming buffers (see `tune_allocator`): the calling process is the server.
pub fn run(config: Config, ready: impl FnOnce(&str)) -> Result<(), Error> {
    if let Listen::WebSocket(addr) = &config.listen {
        if !is_loopback(addr.ip()) && !config.allow_remote {
            return Err(Error::Config(format!(
                "refusing to listen on non-loopback address {addr} without --allow-remote"
            )));
        }
    }
    unblock_signals()?;
    raise_descriptor_limit();
    crate::sys::hook::lower_inheritable().map_err(|e| {
        Error::Config(format!(
            "cannot take the capabilities processes must not get out of the server's \
             inheritable set: {e}"
        ))
    })?;
    let env = Environment::create(&EnvironmentOptions {
        namespace: config.namespace.clone(),
        cwd: config.cwd.clone(),
        allow_secret_env: config.allow_secret_env,
        protect: config.protect,
        private_tmp: config.private_tmp,
        share_tmp: config.share_tmp.clone(),
    })?;
    not_dumpable();
    let reaper = reaper_for(&env);
    let shared = Arc::new(Shared {
        env,
        reaper,
        sessions: Registry::default(),
        session_ttl: config.session_ttl,
        process_retention: config.process_retention,
        max_sessions: config.max_sessions,
        max_processes: config.max_processes,
        allow_secret_env: config.allow_secret_env,
    });
    let limits = Limits {
        max_connections: config.max_connections,
        max_message_bytes: config.max_message_bytes,
    };
    tune_allocator();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_keep_alive(BLOCKING_KEEP_ALIVE)
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            shared.env.shutdown(&shared.reaper, TERMINATE_GRACE);
            return Err(Error::Io("start the async runtime", e));
        }
    };
    let result = runtime.block_on(serve(config.listen, shared.clone(), limits, ready));
    runtime.block_on(shutdown(&shared));
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn serve(
    listen: Listen,
    shared: Arc<Shared>,
    limits: Limits,
    ready: impl FnOnce(&str),
) -> Result<(), Error> {
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| Error::Io("handle SIGTERM", e))?;
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| Error::Io("handle SIGINT", e))?;
    let mut hangup = signal(SignalKind::hangup()).map_err(|e| Error::Io("handle SIGHUP", e))?;
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(reap_orphans_forever(shared.reaper.clone()));
    let mut clients = match listen {
        Listen::WebSocket(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| Error::Io("bind the listen address", e))?;
            let bound = listener
                .local_addr()
                .map_err(|e| Error::Io("read the bound address", e))?;
            let capability = capability()?;
            ready(&format!("ws://{bound}{capability}"));
            tokio::spawn(transport::serve_websocket(
                listener,
                Arc::new(Rpc(shared.clone())),
                limits,
                capability.into(),
                stopped,
            ))
        }
        Listen::Stdio => tokio::spawn(transport::serve_stdio(
            Arc::new(Rpc(shared.clone())),
            limits,
            stopped,
        )),
    };
    let clients_done = tokio::select! {
        _ = terminate.recv() => { tracing::info!("SIGTERM: shutting down"); false }
        _ = interrupt.recv() => { tracing::info!("SIGINT: shutting down"); false }
        _ = hangup.recv() => { tracing::info!("SIGHUP: shutting down"); false }
        _ = &mut clients => { tracing::info!("input closed: shutting down"); true }
    };
    let _ = stop.send(true);
    if !clients_done {
        let _ = clients.await;
    }
    Ok(())
}

/// Ends every session and removes the root. Everything a session started is a descendant of
/// the server (and in its cgroup, as root), so the processes of all sessions are terminated as
/// one set, which ends when the server has no child left: not session by session, where each
/// end would wait for a proof about its own processes while every other's die around it. The
/// terminations under way stop (the sweep covers their sets); the sweep runs on a thread of its
/// own, since the blocking pool may be held by calls blocked in the kernel.
async fn shutdown(shared: &Arc<Shared>) {
    let sessions = shared.sessions.drain();
    let records: Vec<_> = sessions.iter().map(|s| s.close()).collect();
    shared.reaper.stop_terminations();
    let (swept, sweeping) = tokio::sync::oneshot::channel();
    let sweeper = shared.clone();
    let sweep = move || {
        sweeper.env.shutdown(&sweeper.reaper, TERMINATE_GRACE);
        let _ = swept.send(());
    };
    match std::thread::Builder::new()
        .name("cleanroom-shutdown".into())
        .spawn(sweep)
    {
        Ok(_) => {
            let _ = sweeping.await;
        }
        Err(e) => {
            tracing::warn!("no thread for the shutdown's sweep ({e}); sweeping on this one");
            shared.env.shutdown(&shared.reaper, TERMINATE_GRACE);
        }
    }
    drop(records);
}

/// The reaper, told where the sessions' cgroup leaves are when the server has a cgroup (an
/// orphan is then known by the leaf it died in).
fn reaper_for(env: &Environment) -> Reaper {
    let leaf = env.with_container(|c| c.and_then(|c| c.cgroup_path().map(PathBuf::from)));
    let relative = leaf.and_then(|leaf| {
        let mount = cleanroom::contain::cgroup2_mount().ok()?;
        Some(format!("/{}", leaf.strip_prefix(mount).ok()?.to_str()?))
    });
    match relative {
        Some(relative) => Reaper::with_session_leaves(&relative),
        None => Reaper::default(),
    }
}

/// Raises the soft limit on open descriptors to the hard one: each process a session keeps holds
/// a few (its outputs, its terminal, its pidfd), and 64 sessions of 256 processes are within the
/// server's limits. Every process the server starts gets the soft limit the server was given
/// (`process::restore_descriptor_limit`), as programs that use `select` expect.
fn raise_descriptor_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    let Some(soft) = limit.current else {
        return; // Unlimited already.
    };
    if limit.maximum.is_some_and(|hard| hard <= soft) {
        return;
    }
    crate::process::keep_descriptor_limit_for_children(soft);
    let raised = rustix::process::Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    if let Err(e) = setrlimit(Resource::Nofile, raised) {
        tracing::warn!("cannot raise the limit on open descriptors: {e}");
    }
}

/// Reaps exited orphans (setsid and double-forked descendants re-parented to the server) shortly
/// after a SIGCHLD ([`ORPHAN_SCAN_DELAY`]) and once a second, on a thread of its own: a scan a
/// second through the blocking pool kept its idle threads from ever timing out. The thread ends
/// with the runtime (when this task is dropped).
async fn reap_orphans_forever(reaper: Reaper) {
    let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
    let scans = std::thread::Builder::new()
        .name("cleanroom-reaper".into())
        .spawn(move || scan_orphans(&reaper, &woken));
    if let Err(e) = scans {
        tracing::error!("cannot start the orphan reaper thread: {e}");
        return;
    }
    match signal(SignalKind::child()) {
        Ok(mut children) => {
            while children.recv().await.is_some() {
                let _ = wake.try_send(());
            }
        }
        Err(e) => tracing::warn!("no SIGCHLD handler, orphans are reaped once a second: {e}"),
    }
    std::future::pending::<()>().await;
}

/// The orphan reaper thread's loop: a scan [`ORPHAN_SCAN_DELAY`] after each wake-up, or a
/// second after the last scan; ends when the waker is dropped.
fn scan_orphans(reaper: &Reaper, woken: &std::sync::mpsc::Receiver<()>) {
    use std::sync::mpsc::RecvTimeoutError;
    let mut busy = false;
    loop {
        match woken.recv_timeout(Duration::from_secs(1)) {
            Ok(()) => {
                busy = true;
                std::thread::sleep(ORPHAN_SCAN_DELAY);
            }
            Err(RecvTimeoutError::Timeout) if busy => {
                busy = false;
                trim_allocator();
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        while woken.try_recv().is_ok() {}
        reaper.reap_orphans();
    }
}

/// How long the orphan scan waits after a SIGCHLD: the exits of a burst are reaped by one scan,
/// and the scan (a procfs walk on a blocking thread) stays off the path from a started
/// process's exit to its `exited` and `closed` notifications, which most SIGCHLDs announce.
const ORPHAN_SCAN_DELAY: Duration = Duration::from_millis(10);

/// Empties the signal mask inherited from whoever started the server, before any thread exists,
/// so SIGTERM/SIGINT/SIGHUP and SIGCHLD reach the runtime's handlers.
fn unblock_signals() -> Result<(), Error> {
    crate::sys::unblock_all_signals().map_err(|e| Error::Io("unblock signals", e))
}

/// `/cleanroom-<128 random bits, hex>`.
fn capability() -> Result<String, Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::Io("read random bytes", std::io::Error::other(e.to_string())))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("/cleanroom-{hex}"))
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(Listen::parse("stdio").unwrap(), Listen::Stdio);
        assert_eq!(
            Listen::parse("ws://127.0.0.1:0").unwrap(),
            Listen::WebSocket("127.0.0.1:0".parse().unwrap())
        );
        assert_eq!(
            Listen::parse("ws://localhost:8080/").unwrap(),
            Listen::WebSocket("127.0.0.1:8080".parse().unwrap())
        );
        assert!(Listen::parse("ws://[::1]:9").is_ok());
        for bad in [
            "http://127.0.0.1:1",
            "ws://example.com:1",
            "ws://127.0.0.1",
            "",
        ] {
            assert!(Listen::parse(bad).is_err(), "{bad}");
        }
        assert!(!is_loopback("0.0.0.0".parse().unwrap()));
    }
}
