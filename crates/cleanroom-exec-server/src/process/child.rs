//! One started process: spawn, emitter, exit, retention, read, write, signal, terminate
//! (spec §5).
//!
//! Shape: each output descriptor has a pump task and the main process has a waiter task; they
//! send events to one emitter task per process, which publishes `exited` and `closed`. The pumps
//! publish output themselves. Every publication goes through the process's [`Publisher`], whose
//! turn is held from the seq assignment until the notification is in the connection's queue, so
//! seqs reach the client in order; it also stores chunks in the retention buffer and wakes
//! long-polls. Nothing blocks a thread: the terminal is read through the reactor, a pipe
//! registers with it only while its pump waits on it empty (`pump::Pipe`), waits are `watch`
//! channels.
//!
//! Invariants: seqs start at 1 and are shared by output, `exited` and `closed`; there is exactly
//! one `exited` and one `closed`, and `closed` is last: it is emitted only after the exit and EOF
//! on every output descriptor; output a descriptor held when the main process exited precedes
//! `exited` (the exit barrier, see [`Drain`]); the retention buffer holds at most
//! [`RETAIN_BYTES`] bytes and [`RETAIN_CHUNKS`] chunks, dropping the oldest.

use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use base64_simd::STANDARD as BASE64;
use bytes::Bytes;
use cleanroom::contain::{Container, SubCgroup};
use cleanroom::process::ProcessId;
use cleanroom::protect::{Protection, Sandbox};
use rustix::process::Signal;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::process::Child;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::members::{Group, Members, Scope, SESSION_ID_VAR};
use super::outlet::Outlet;
use super::pty::{self, Master};
use super::pump::{Drain, Event, Pipe, Pump, StreamKind, Terminal};
use super::reaper::Reaper;
use super::spawn;
use crate::envpolicy::EXEC_ID_VAR;
use crate::protocol::{notification, RpcError};
use crate::transport::Utf8Bytes;

/// Newest bytes of output kept per process (decoded bytes; they are kept as base64, so the
/// memory they take is about 4/3 of this).
pub const RETAIN_BYTES: usize = 1 << 20;
/// Most chunks kept per process.
pub const RETAIN_CHUNKS: usize = 50_000;
/// Grace between TERM and KILL when a process is terminated.
pub const TERMINATE_GRACE: Duration = Duration::from_secs(1);
/// Longest long-poll.
pub const MAX_WAIT: Duration = Duration::from_millis(30_000);
/// How long the exit barrier waits for terminal output still in the line discipline.
const TERMINAL_DRAIN: Duration = Duration::from_millis(10);
/// Capacity asked for the output pipes.
const PIPE_SIZE: usize = 1 << 20;
/// A retained chunk shares its notification's bytes only when the rest of the notification
/// (its JSON, the escaped process id among it) is at most this fraction of the base64: a
/// retained chunk never keeps more than 1/16 more than its base64 alive (see [`Chunk`]).
const SHARE_OVERHEAD_DIVISOR: usize = 16;
/// Remembered `writeId`s per process.
const WRITE_IDS: usize = 4096;

/// A validated `process/start`.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The client's id for it.
    pub process_id: String,
    /// The command.
    pub argv: Vec<String>,
    /// Override of `argv[0]`.
    pub arg0: Option<String>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Complete environment.
    pub env: Vec<(String, String)>,
    /// The exec id, also present in `env`.
    pub exec_id: String,
    /// Run on a terminal.
    pub tty: bool,
    /// Keep a writable stdin without a terminal.
    pub pipe_stdin: bool,
    /// The kernel policy applied before exec.
    pub confinement: Arc<crate::policy::Confinement>,
}

/// One retained chunk of output, with its base64 as `process/read` returns it.
struct Chunk {
    seq: u64,
    stream: StreamKind,
    /// The decoded length.
    len: usize,
    /// A slice of the notification the connection's queue sends (shared, not copied), or a copy
    /// of its own where the rest of the notification is large beside it
    /// ([`SHARE_OVERHEAD_DIVISOR`]): tens of thousands of small chunks do not each keep their
    /// JSON, nor does a chunk keep a huge process id alive.
    base64: Bytes,
}

impl Chunk {
    /// Chunk `seq` of `len` bytes, published as `notification` (an [`output_notification`]:
    /// its base64 ends just before [`OUTPUT_END`]).
    fn published(seq: u64, stream: StreamKind, len: usize, notification: &Utf8Bytes) -> Chunk {
        debug_assert!(notification.ends_with(OUTPUT_END));
        let end = notification.len() - OUTPUT_END.len();
        let range = end - BASE64.encoded_length(len)..end;
        let rest = notification.len() - range.len();
        let base64 = if rest <= range.len() / SHARE_OVERHEAD_DIVISOR {
            Bytes::from(notification.clone()).slice(range)
        } else {
            Bytes::copy_from_slice(&notification.as_bytes()[range])
        };
        Chunk {
            seq,
            stream,
            len,
            base64,
        }
    }

    fn base64(&self) -> &str {
        std::str::from_utf8(&self.base64).expect("base64 is ASCII")
    }
}

/// What the emitter has published.
struct State {
    chunks: VecDeque<Chunk>,
    bytes: usize,
    next_seq: u64,
    exit_code: Option<i32>,
    closed: bool,
}

impl State {
    /// Nothing published yet; the first seq is 1.
    fn new() -> State {
        State {
            chunks: VecDeque::new(),
            bytes: 0,
            next_seq: 1,
            exit_code: None,
            closed: false,
        }
    }

    /// Keeps `chunk`, dropping the oldest chunks beyond [`RETAIN_BYTES`] or [`RETAIN_CHUNKS`].
    fn retain(&mut self, chunk: Chunk) {
        self.bytes += chunk.len;
        self.chunks.push_back(chunk);
        while self.bytes > RETAIN_BYTES || self.chunks.len() > RETAIN_CHUNKS {
            match self.chunks.pop_front() {
                Some(old) => self.bytes -= old.len,
                None => break,
            }
        }
    }
}

enum Stdin {
    Pipe(pipe::Sender),
    Pty(Arc<Master>),
}

/// The descriptors and main process handed to [`Process::begin`].
pub struct Started {
    main: Main,
    outputs: Outputs,
}

enum Outputs {
    /// The read ends of stdout and stderr, not registered with the reactor (the pumps' `Pipe`).
    Pipes(OwnedFd, OwnedFd),
    Pty(Arc<Master>),
}

/// How the main process's exit is awaited: a terminal's process is tokio's child, a
/// pipe-connected one is started by [`spawn`] and waited for through its pidfd.
enum Main {
    Tokio(Child),
    Direct(spawn::Exit),
}

impl Main {
    async fn wait(self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            Main::Tokio(mut child) => child.wait().await,
            Main::Direct(exit) => exit.wait().await,
        }
    }
}

/// Where a started process is contained: its session's cgroup leaf (as root), else the server's
/// container (its leaf, when it has a cgroup).
#[derive(Clone, Copy)]
pub enum Placement<'a> {
    /// The session's own leaf below the server's.
    Session(&'a SubCgroup),
    /// The server's container.
    Container(&'a Container),
}

impl Placement<'_> {
    /// The leaf's directory and `cgroup.procs`, if there is a leaf.
    fn leaf(&self) -> Option<(std::os::fd::BorrowedFd<'_>, std::os::fd::BorrowedFd<'_>)> {
        match self {
            Placement::Session(leaf) => Some(leaf.fds()),
            Placement::Container(container) => container.cgroup_leaf(),
        }
    }

    /// Makes a forked `command` join the leaf before exec.
    fn configure(&self, command: &mut std::process::Command) {
        match self {
            Placement::Session(leaf) => leaf.configure(command),
            Placement::Container(container) => container.configure(command),
        }
    }
}

/// A started main process and its descriptors, before the [`Process`] is made.
struct Launched {
    pid: i32,
    /// Its start time.
    start: u64,
    /// A pidfd of the main process, the leader of its process group (see [`Members`]).
    leader: Option<Arc<OwnedFd>>,
    main: Main,
    terminal: Option<Arc<Master>>,
    outputs: Outputs,
    stdin: Option<Stdin>,
    output_links: Vec<Vec<u8>>,
}

/// A started process of a session.
pub struct Process {
    id: String,
    pid: i32,
    /// Who belongs to it, but for its process group.
    membership: Members,
    /// Its process group, until it is closed: then the session keeps the group if it may still
    /// have members ([`Process::take_group`]), and the record no longer holds its pidfd.
    group: Mutex<Option<Group>>,
    terminal: Option<Arc<Master>>,
    state: Mutex<State>,
    /// Bumped on every published event.
    events: watch::Sender<()>,
    /// True once tokio has reaped the main process.
    reaped: watch::Sender<bool>,
    /// While above zero, `exited` waits (a `process/terminate` reply goes out first).
    exit_holds: watch::Sender<usize>,
    stdin_enabled: bool,
    stdin: tokio::sync::Mutex<Option<Stdin>>,
    write_ids: Mutex<(HashSet<String>, VecDeque<String>)>,
    termination: tokio::sync::Mutex<()>,
    outlet: Arc<Outlet>,
}

impl Process {
    /// Spawns `spec` contained in `placement`; the pumps start with [`Process::begin`], after
    /// the caller has answered the request, so the start result precedes every notification.
    pub fn spawn(
        spec: &Spec,
        placement: Placement<'_>,
        protection: &Protection,
        reaper: &Reaper,
        session: (&Scope, Arc<Outlet>),
    ) -> Result<(Arc<Process>, Started), RpcError> {
        let (scope, outlet) = session;
        // Its working directory and project, where they lie beneath the environment's private
        // /tmp, are the host's (bound for this process), as a run's are.
        let cwd = std::fs::canonicalize(&spec.cwd).unwrap_or_else(|_| spec.cwd.clone());
        let protection = protection.for_process(&cwd).map_err(|e| {
            RpcError::internal(format!(
                "cannot bind {} into the sandbox: {e}",
                cwd.display()
            ))
        })?;
        let hook = spec.confinement.child_hook(&protection);
        let launched = if spec.tty {
            launch_on_terminal(spec, placement, scope, hook, reaper)?
        } else {
            launch_on_pipes(spec, placement, scope, hook.as_ref(), reaper)?
        };
        let Launched {
            pid,
            start,
            leader,
            main,
            terminal,
            outputs,
            stdin,
            output_links,
        } = launched;
        // A pid_t from the spawn is positive; 0 (no pid) names no process, as `start` does.
        let main_id = ProcessId {
            pid: u32::try_from(pid).unwrap_or(0),
            start_time: start,
        };
        let process = Arc::new(Process {
            id: spec.process_id.clone(),
            pid,
            membership: Members::of_process(
                scope,
                main_id,
                format!("{EXEC_ID_VAR}={}", spec.exec_id).into_bytes(),
                output_links,
            ),
            group: Mutex::new(leader.map(|pidfd| Group::new(pid, pidfd))),
            terminal,
            state: Mutex::new(State::new()),
            events: watch::channel(()).0,
            reaped: watch::channel(false).0,
            exit_holds: watch::channel(0).0,
            stdin_enabled: spec.tty || spec.pipe_stdin,
            stdin: tokio::sync::Mutex::new(stdin),
            write_ids: Mutex::new((HashSet::new(), VecDeque::new())),
            termination: tokio::sync::Mutex::new(()),
            outlet,
        });
        Ok((process, Started { main, outputs }))
    }

    /// Starts the pumps, the waiter and the emitter.
    pub fn begin(self: &Arc<Self>, started: Started, reaper: Reaper) {
        let (tx, rx) = mpsc::channel(16);
        let publisher = Publisher {
            process: self.clone(),
            turn: Arc::default(),
        };
        let drains: Vec<Drain> = match started.outputs {
            Outputs::Pipes(stdout, stderr) => {
                let (out, err) = (Drain::default(), Drain::default());
                let pump = |kind, index, drain| Pump {
                    kind,
                    index,
                    drain,
                    drain_grace: None,
                    tx: tx.clone(),
                    publisher: publisher.clone(),
                };
                let pipes = [
                    (StreamKind::Stdout, out.clone(), stdout),
                    (StreamKind::Stderr, err.clone(), stderr),
                ];
                for (index, (kind, drain, fd)) in pipes.into_iter().enumerate() {
                    match Pipe::new(fd) {
                        Ok(pipe) => drop(tokio::spawn(pump(kind, index, drain).run(pipe))),
                        Err(e) => {
                            // Never seen (FIONBIO on a pipe we just made); the output is
                            // lost, the process's notifications still complete.
                            tracing::warn!(
                                "cannot read {} of process {}: {e}",
                                kind.name(),
                                self.id
                            );
                            let _ = tx.try_send(Event::Eof(index));
                        }
                    }
                }
                vec![out, err]
            }
            Outputs::Pty(master) => {
                let drain = Drain::default();
                let pump = Pump {
                    kind: StreamKind::Pty,
                    index: 0,
                    drain: drain.clone(),
                    drain_grace: Some(TERMINAL_DRAIN),
                    tx: tx.clone(),
                    publisher: publisher.clone(),
                };
                tokio::spawn(pump.run(Terminal(master)));
                vec![drain]
            }
        };
        let process = self.clone();
        let main = started.main;
        tokio::spawn(async move {
            let code = match main.wait().await {
                Ok(status) => exit_code(status),
                Err(e) => {
                    tracing::warn!("waiting for process {}: {e}", process.pid);
                    -1
                }
            };
            reaper.release(process.pid);
            process.reaped.send_replace(true);
            let _ = tx.send(Event::Exited(code)).await;
        });
        tokio::spawn(publisher.emit(rx, drains));
    }

    /// The client's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Who belongs to this process (what `process/terminate` kills).
    pub fn membership(&self) -> Members {
        let group = self.group.lock().unwrap_or_else(PoisonError::into_inner);
        self.membership.clone().with_group(group.clone())
    }

    /// Gives up the process group's pidfd (the record is closed: its main process is reaped
    /// and its outputs are at end of file); returns the group if it may still have members,
    /// for the session to kill at its end.
    pub fn take_group(&self) -> Option<Group> {
        let group = self
            .group
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        group.filter(Group::may_have_members)
    }

    /// Whether `closed` has been emitted.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Whether the main process is still running (not yet reaped).
    pub fn is_running(&self) -> bool {
        !*self.reaped.borrow()
    }

    /// `process/read`: chunks after `after_seq`, waiting up to `wait` when there is nothing new.
    pub async fn read(&self, after_seq: u64, max_bytes: Option<u64>, wait: Duration) -> Value {
        let mut events = self.events.subscribe();
        let deadline = Instant::now() + wait.min(MAX_WAIT);
        loop {
            {
                let state = self.lock();
                let nothing_new = state.next_seq - 1 <= after_seq;
                if !nothing_new || state.closed || Instant::now() >= deadline {
                    return read_result(&state, after_seq, max_bytes);
                }
            }
            if tokio::time::timeout_at(deadline, events.changed())
                .await
                .is_err()
            {
                let state = self.lock();
                return read_result(&state, after_seq, max_bytes);
            }
        }
    }

    /// Resolves to true once `closed` has been emitted, or to false if the record is dropped
    /// first; it keeps no reference to the record meanwhile.
    pub fn closed(self: &Arc<Self>) -> impl std::future::Future<Output = bool> + Send + 'static {
        let process = Arc::downgrade(self);
        let mut events = self.events.subscribe();
        async move {
            loop {
                match process.upgrade().map(|p| p.is_closed()) {
                    None => return false,
                    Some(true) => return true,
                    Some(false) => {}
                }
                if events.changed().await.is_err() {
                    return false;
                }
            }
        }
    }

    /// `process/write`: the status string.
    pub async fn write(&self, data: &[u8], write_id: Option<&str>) -> &'static str {
        if !self.stdin_enabled {
            return "stdinClosed";
        }
        if let Some(id) = write_id {
            let mut ids = self
                .write_ids
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !ids.0.insert(id.to_string()) {
                return "accepted";
            }
            ids.1.push_back(id.to_string());
            if ids.1.len() > WRITE_IDS {
                if let Some(old) = ids.1.pop_front() {
                    ids.0.remove(&old);
                }
            }
        }
        let mut stdin = self.stdin.lock().await;
        let result = match stdin.as_mut() {
            None => return "stdinClosed",
            Some(Stdin::Pipe(pipe)) => write_pipe(pipe, data).await,
            Some(Stdin::Pty(master)) => master.write_all(data).await,
        };
        match result {
            Ok(()) => "accepted",
            Err(e) => {
                tracing::debug!("stdin of process {} closed: {e}", self.id);
                *stdin = None;
                "stdinClosed"
            }
        }
    }

    /// `process/signal interrupt`: SIGINT to the process group (the terminal's foreground group
    /// for tty); nothing once the main process has exited.
    pub fn interrupt(&self) -> Result<(), RpcError> {
        if !self.is_running() {
            return Ok(());
        }
        let result = match &self.terminal {
            Some(master) => master.signal_foreground(Signal::INT),
            None => match rustix::process::Pid::from_raw(self.pid) {
                Some(pid) => {
                    rustix::process::kill_process_group(pid, Signal::INT).map_err(Into::into)
                }
                None => Ok(()),
            },
        };
        match result {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            Err(e) => Err(RpcError::internal(format!(
                "failed to signal process {}: {e}",
                self.id
            ))),
        }
    }

    /// Holds `exited` (and so `closed`) back until the hold is dropped: a `process/terminate`
    /// takes one before it looks at the process, so its reply precedes those notifications.
    pub fn hold_exit(self: &Arc<Self>) -> ExitHold {
        self.exit_holds.send_modify(|n| *n += 1);
        ExitHold(self.clone())
    }

    async fn exit_released(&self) {
        let mut holds = self.exit_holds.subscribe();
        while *holds.borrow_and_update() > 0 {
            if holds.changed().await.is_err() {
                return;
            }
        }
    }

    /// Kills the whole tree (TERM, grace, KILL until empty) and returns once the main process
    /// is reaped. Returns whether it was running: a process whose main process has exited is
    /// left alone (the spec's no-op; its session's end reaps what it left).
    pub async fn terminate(&self, reaper: &Reaper) -> Result<bool, RpcError> {
        if !self.is_running() {
            return Ok(false);
        }
        let _turn = self.termination.lock().await;
        let survivors = reaper
            .terminate(self.membership(), TERMINATE_GRACE)
            .await
            .map_err(|_| RpcError::internal("the server is shutting down"))?
            .survivors;
        if !survivors.is_empty() {
            return Err(RpcError::internal(format!(
                "process {} survived SIGKILL: {:?}",
                self.id,
                survivors.iter().map(|p| p.id.pid).collect::<Vec<_>>()
            )));
        }
        let mut reaped = self.reaped.subscribe();
        while !*reaped.borrow_and_update() {
            if reaped.changed().await.is_err() {
                break;
            }
        }
        Ok(true)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Starts `spec` on a new terminal through tokio's `Command` (its `pre_exec` hooks make std
/// fork the server).
fn launch_on_terminal(
    spec: &Spec,
    placement: Placement<'_>,
    scope: &Scope,
    hook: Option<crate::sys::hook::ChildHook>,
    reaper: &Reaper,
) -> Result<Launched, RpcError> {
    let mut command = tokio::process::Command::new(OsStr::from_bytes(spec.argv[0].as_bytes()));
    command
        .args(&spec.argv[1..])
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        // The session's tag, whatever the client sent: the session reaps by it.
        .env(SESSION_ID_VAR, OsStr::from_bytes(scope.value()))
        .kill_on_drop(false);
    if let Some(arg0) = &spec.arg0 {
        command.arg0(arg0);
    }
    placement.configure(command.as_std_mut());
    // Default dispositions and no blocked signal, whatever the server's parent ignored or
    // blocked (a command started with TERM blocked or INT ignored could never be stopped).
    cleanroom::contain::reset_signals_on_exec(command.as_std_mut());
    spawn::restore_descriptor_limit_on_exec(command.as_std_mut());
    let master = pty::attach(&mut command)
        .map_err(|e| RpcError::internal(format!("cannot open a terminal: {e}")))?;
    let master = Arc::new(master);
    let sandbox = hook
        .as_ref()
        .and_then(crate::sys::hook::ChildHook::sandbox)
        .cloned();
    if let Some(hook) = hook {
        // Registered last, so it is the last step before exec.
        crate::sys::exec::run_hook_on_exec(command.as_std_mut(), hook);
    }
    let (child, pid, start) = {
        let mut guard = reaper.spawning();
        let child = command
            .spawn()
            .map_err(|e| spawn_error(spec, sandbox.as_ref(), &e))?;
        // Not yet waited for: tokio has no pid to give only once it has reaped the child.
        let pid = child.id().map_or(0, |p| p as i32);
        let start = started_at(pid);
        guard.own_leader(pid, start, scope);
        (child, pid, start)
    };
    // The terminal's slave ends live in `command`; they must close for EOF to ever come.
    drop(command);
    // Taken before anything can reap the child (its waiter starts with `Process::begin`).
    let leader = rustix::process::Pid::from_raw(pid)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
        .map(Arc::new);
    Ok(Launched {
        pid,
        start,
        leader,
        main: Main::Tokio(child),
        terminal: Some(master.clone()),
        outputs: Outputs::Pty(master.clone()),
        stdin: Some(Stdin::Pty(master.clone())),
        output_links: vec![master.slave().as_os_str().as_bytes().to_vec()],
    })
}

/// Starts `spec` on pipes (stdin `/dev/null` unless `pipe_stdin`) through [`spawn`]: the same
/// steps as [`launch_on_terminal`]'s hooks (cgroup join, default signals, a session of its own,
/// the confinement hook last), without forking the server.
fn launch_on_pipes(
    spec: &Spec,
    placement: Placement<'_>,
    scope: &Scope,
    hook: Option<&crate::sys::hook::ChildHook>,
    reaper: &Reaper,
) -> Result<Launched, RpcError> {
    let io_error =
        |e: std::io::Error| RpcError::internal(format!("failed to spawn {:?}: {e}", spec.argv[0]));
    let (stdin_child, stdin_ours) = if spec.pipe_stdin {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| io_error(e.into()))?;
        (read, Some(write))
    } else {
        let null = rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| io_error(e.into()))?;
        (null, None)
    };
    let out = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| io_error(e.into()))?;
    let err = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| io_error(e.into()))?;
    let mut env: Vec<(&OsStr, &OsStr)> = spec
        .env
        .iter()
        .map(|(k, v)| (OsStr::new(k), OsStr::new(v)))
        .collect();
    // The session's tag, whatever the client sent: the session reaps by it.
    env.push((OsStr::new(SESSION_ID_VAR), OsStr::from_bytes(scope.value())));
    let plan = spawn::Plan::new(spawn::Command {
        program: &spec.argv[0],
        argv: &spec.argv,
        arg0: spec.arg0.as_deref(),
        cwd: &spec.cwd,
        env,
        stdio: [stdin_child.as_fd(), out.1.as_fd(), err.1.as_fd()],
        cgroup: placement.leaf(),
        hook,
    })
    .map_err(|e| spawn_error(spec, None, &e))?;
    let sandbox = hook.and_then(crate::sys::hook::ChildHook::sandbox);
    let (pid, start, exit) = {
        let mut guard = reaper.spawning();
        let (pid, exit) = plan.spawn().map_err(|e| spawn_error(spec, sandbox, &e))?;
        // Not reaped before its exit is waited for (`Process::begin`): the pid is the child's.
        let start = started_at(pid);
        guard.own_leader(pid, start, scope);
        (pid, start, exit)
    };
    let (stdout, stderr) = (out.0, err.0);
    let stdin = match stdin_ours {
        Some(fd) => Some(Stdin::Pipe(
            pipe::Sender::from_owned_fd(fd).map_err(io_error)?,
        )),
        None => None,
    };
    // Larger pipes let a fast writer run ahead while the client catches up.
    let _ = rustix::pipe::fcntl_setpipe_size(&stdout, PIPE_SIZE);
    let _ = rustix::pipe::fcntl_setpipe_size(&stderr, PIPE_SIZE);
    let output_links = [pipe_link(&stdout), pipe_link(&stderr)]
        .into_iter()
        .flatten()
        .collect();
    Ok(Launched {
        pid,
        start,
        leader: exit.pidfd(),
        main: Main::Direct(exit),
        terminal: None,
        outputs: Outputs::Pipes(stdout, stderr),
        stdin,
        output_links,
    })
}

/// Publishes a process's notifications, one at a time: the turn is held from the seq
/// assignment until the message is in the connection's queue, so the client receives seqs in
/// increasing order whichever task publishes (a pump its output, the emitter `exited` and
/// `closed`).
#[derive(Clone)]
pub(super) struct Publisher {
    process: Arc<Process>,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl super::pump::Publish for Publisher {
    fn output<'a>(
        &'a self,
        stream: StreamKind,
        data: &'a [u8],
    ) -> impl std::future::Future<Output = ()> + Send + 'a {
        Publisher::output(self, stream, data)
    }
}

impl Publisher {
    async fn emit(self, mut rx: mpsc::Receiver<Event>, drains: Vec<Drain>) {
        let mut open = vec![true; drains.len()];
        let mut drained = vec![false; drains.len()];
        let mut pending_exit: Option<i32> = None;
        let mut exited = false;
        loop {
            match rx.recv().await {
                Some(Event::Eof(i)) => open[i] = false,
                Some(Event::Drained(i)) => drained[i] = true,
                Some(Event::Exited(code)) => {
                    pending_exit = Some(code);
                    for (drain, _) in drains.iter().zip(&open).filter(|(_, open)| **open) {
                        drain.notify_one();
                    }
                }
                None => open.iter_mut().for_each(|o| *o = false),
            }
            if let Some(code) = pending_exit {
                if open
                    .iter()
                    .zip(&drained)
                    .all(|(open, drained)| !open || *drained)
                {
                    pending_exit = None;
                    self.process.exit_released().await;
                    self.publish_exit(code).await;
                    exited = true;
                }
            }
            if exited && open.iter().all(|o| !o) {
                self.publish_closed().await;
                return;
            }
        }
    }

    /// Publishes one chunk of output.
    pub(super) async fn output(&self, stream: StreamKind, data: &[u8]) {
        let id = &self.process.id;
        let text = |seq| output_notification(id, seq, stream, data).into();
        let retain = |state: &mut State, seq, notification: &Utf8Bytes| {
            state.retain(Chunk::published(seq, stream, data.len(), notification));
        };
        self.publish(text, retain).await;
    }

    async fn publish_exit(&self, code: i32) {
        let id = &self.process.id;
        let params = json!({"processId": id, "exitCode": code, "sandboxDenied": false});
        let text = |seq| status_notification("process/exited", params, seq).into();
        self.publish(text, |state, _, _| state.exit_code = Some(code))
            .await;
    }

    async fn publish_closed(&self) {
        let params = json!({"processId": self.process.id});
        let text = |seq| status_notification("process/closed", params, seq).into();
        self.publish(text, |state, _, _| state.closed = true).await;
    }

    /// Publishes one notification: under the turn, with the next seq, `text(seq)` is the
    /// message and `change(state, seq, text)` what the process records of it (with the seq's
    /// increment, under one lock); long-polls are woken, then the message is queued.
    async fn publish(
        &self,
        text: impl FnOnce(u64) -> Utf8Bytes,
        change: impl FnOnce(&mut State, u64, &Utf8Bytes),
    ) {
        let _turn = self.turn.lock().await;
        let process = &*self.process;
        // Only the turn's holder changes `next_seq`, so it can be read before the change.
        let seq = process.lock().next_seq;
        let text = text(seq);
        {
            let mut state = process.lock();
            state.next_seq += 1;
            change(&mut state, seq, &text);
        }
        process.events.send_replace(());
        process.outlet.send(text).await;
    }
}

/// `method` (`process/exited`, `process/closed`) with `params` and its `seq`.
fn status_notification(method: &str, mut params: Value, seq: u64) -> String {
    params["seq"] = seq.into();
    notification(method, params)
}

/// Writes `data` to a stdin pipe: a non-blocking write first, so a write the pipe has room for
/// finishes without waiting for the reactor (and its request is answered in order).
async fn write_pipe(pipe: &mut pipe::Sender, data: &[u8]) -> std::io::Result<()> {
    let written = match rustix::io::write(&*pipe, data) {
        Ok(n) => n,
        Err(rustix::io::Errno::AGAIN) => 0,
        Err(e) => return Err(e.into()),
    };
    if written < data.len() {
        pipe.write_all(&data[written..]).await?;
    }
    Ok(())
}

/// The `process/output` notification of one chunk, written by hand: the chunk is the bulk of
/// the bytes, and base64 needs no escaping, so it is encoded (SIMD) straight into the message,
/// allocated at its final size (no `Value`, no escaping scan, no intermediate string, no growth).
/// The chunk is last: it ends just before [`OUTPUT_END`] (see [`Chunk::published`]).
fn output_notification(id: &str, seq: u64, stream: StreamKind, data: &[u8]) -> String {
    const FRAME: &str = r#"{"jsonrpc":"2.0","method":"process/output","params":{"processId":,"seq":,"stream":"","chunk":""}}"#;
    let id = Value::from(id).to_string();
    let size =
        FRAME.len() + id.len() + 20 + stream.name().len() + BASE64.encoded_length(data.len());
    let mut text = String::with_capacity(size);
    text.push_str(r#"{"jsonrpc":"2.0","method":"process/output","params":{"processId":"#);
    text.push_str(&id);
    let _ = write!(
        text,
        r#","seq":{seq},"stream":"{}","chunk":""#,
        stream.name()
    );
    BASE64.encode_append(data, &mut text);
    text.push_str(OUTPUT_END);
    debug_assert!(text.len() <= size);
    text
}

/// What follows the chunk in a `process/output` notification.
const OUTPUT_END: &str = r#""}}"#;

/// See [`Process::hold_exit`].
pub struct ExitHold(Arc<Process>);

impl Drop for ExitHold {
    fn drop(&mut self) {
        self.0.exit_holds.send_modify(|n| *n -= 1);
    }
}

fn read_result(state: &State, after_seq: u64, max_bytes: Option<u64>) -> Value {
    let budget = max_bytes
        .filter(|&b| b > 0)
        .map_or(usize::MAX, |b| b as usize);
    let mut used = 0usize;
    let mut chunks = Vec::new();
    let mut last = None;
    for chunk in state.chunks.iter().filter(|c| c.seq > after_seq) {
        if !chunks.is_empty() && used.saturating_add(chunk.len) > budget {
            break;
        }
        used += chunk.len;
        last = Some(chunk.seq);
        chunks.push(json!({
            "seq": chunk.seq,
            "stream": chunk.stream.name(),
            "chunk": chunk.base64(),
        }));
        if used >= budget {
            break;
        }
    }
    let next_seq = last.map_or(state.next_seq, |s| s + 1);
    json!({
        "chunks": chunks,
        "nextSeq": next_seq,
        "exited": state.exit_code.is_some(),
        "exitCode": state.exit_code,
        "closed": state.closed,
        "failure": null,
        "sandboxDenied": false,
    })
}

/// -32603 for a failed spawn; a missing program or cwd (ENOENT) carries `kind: spawnNotFound`,
/// as the reference server's does. A failure of the child to set up `sandbox` (the one its hook
/// applied) names the step, with its path, and the system's answer ([`Sandbox::explain`]).
fn spawn_error(spec: &Spec, sandbox: Option<&Sandbox>, e: &std::io::Error) -> RpcError {
    if let Some(what) = sandbox.and_then(|sandbox| sandbox.explain(e)) {
        return RpcError::internal(format!(
            "failed to spawn {:?}: cannot set up its sandbox: cannot {what}",
            spec.argv[0]
        ));
    }
    if e.kind() != std::io::ErrorKind::NotFound {
        return RpcError::internal(format!("failed to spawn {:?}: {e}", spec.argv[0]));
    }
    let message = if spec.cwd.is_dir() {
        format!(
            "failed to spawn {:?}: program not found ({e})",
            spec.argv[0]
        )
    } else {
        format!(
            "failed to spawn {:?}: process cwd {} does not exist",
            spec.argv[0],
            spec.cwd.display()
        )
    };
    RpcError::internal(message).with_kind("spawnNotFound")
}

/// The start time of `pid`, a child just spawned and not yet waited for (0, which names no
/// process, if its `/proc` entry cannot be read: the rules that go by its identity then find
/// nothing, its tag and group still reach its processes).
fn started_at(pid: i32) -> u64 {
    let started = u32::try_from(pid)
        .map_err(std::io::Error::other)
        .and_then(cleanroom::process::start_time);
    started.unwrap_or_else(|e| {
        tracing::warn!("cannot read /proc/{pid}/stat of a process just started: {e}");
        0
    })
}

/// How a holder's `/proc/<pid>/fd` link names this pipe: `pipe:[<inode>]`.
fn pipe_link(pipe: &impl std::os::fd::AsFd) -> Option<Vec<u8>> {
    let stat = rustix::fs::fstat(pipe).ok()?;
    Some(format!("pipe:[{}]", stat.st_ino).into_bytes())
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written notification is byte for byte the layout the interop tests pin, for
    /// every padding of the base64 and an id that needs escaping.
    #[test]
    fn an_output_notification_is_the_pinned_json() {
        use base64::Engine as _;
        let id = "p\"1\\";
        for len in [0, 1, 2, 3, 4, 5, 300, 4096, 256 * 1024] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 % 256) as u8).collect();
            let chunk = base64::engine::general_purpose::STANDARD.encode(&data);
            let expected = format!(
                r#"{{"jsonrpc":"2.0","method":"process/output","params":{{"processId":"p\"1\\","seq":18446744073709551615,"stream":"stderr","chunk":"{chunk}"}}}}"#
            );
            let text = output_notification(id, u64::MAX, StreamKind::Stderr, &data);
            assert_eq!(text, expected);
            // Allocated once, at its final size (a 20-digit seq is the widest).
            assert_eq!(text.capacity(), text.len());
            // Retention finds the chunk in it, shared or copied.
            let retained = Chunk::published(u64::MAX, StreamKind::Stderr, len, &text.into());
            assert_eq!(retained.base64(), chunk);
        }
    }

    /// A retained chunk shares its notification only when the rest is small beside the base64:
    /// a small chunk, or one under a long process id (6 bytes per escaped control character),
    /// keeps a copy of its own.
    #[test]
    fn retention_shares_a_notification_only_when_its_json_is_small_beside_the_chunk() {
        let shares = |id: &str, len: usize| {
            let data = vec![0u8; len];
            let notification = output_notification(id, 1, StreamKind::Stdout, &data).into();
            let retained = Chunk::published(1, StreamKind::Stdout, len, &notification);
            assert_eq!(retained.base64(), BASE64.encode_to_string(&data));
            let within = notification.as_bytes().as_ptr_range();
            within.contains(&retained.base64.as_ptr())
        };
        assert!(shares("p", 64 * 1024));
        assert!(!shares("p", 100));
        assert!(!shares(&"\u{1}".repeat(16 * 1024), 64 * 1024));
    }

    fn seqs(state: &State) -> (u64, u64, usize) {
        let first = state.chunks.front().unwrap().seq;
        (first, state.chunks.back().unwrap().seq, state.chunks.len())
    }

    /// The chunk cap, which a test over the binary would need over 90 s of streaming to reach (a
    /// streaming child's output is coalesced for 1 ms per chunk: about 530 chunks/s).
    #[test]
    fn retention_keeps_the_newest_50000_chunks() {
        let mut state = State::new();
        for seq in 1..=50_010 {
            let notification = output_notification("p", seq, StreamKind::Stdout, b"x").into();
            state.retain(Chunk::published(seq, StreamKind::Stdout, 1, &notification));
        }
        assert_eq!(seqs(&state), (11, 50_010, 50_000));
        assert_eq!(state.bytes, 50_000);
    }
}
