//! The `fs/*` methods (spec §6), with the shapes and error codes the Codex client reads.
//!
//! Owns: parsing each call's params, running its operation on a thread confined by the call's
//! policy ([`crate::policy::for_fs_call`], the engine processes use too; Landlock, exact on
//! inodes), and mapping OS errors to the codes the client depends on (missing: -32004 with the
//! OS message; denied: -32600; a path that is not a `file:` URI: -32602).
//!
//! Routes: a call that only reads, under a policy that reads everything, runs on the blocking
//! pool; any other call runs on a fresh thread that applies the policy to itself first; a
//! mutating call is planned there ([`mutate`]) and carried out on that thread, or, when its plan
//! creates or removes entries where the thread's Landlock cover cannot (`child.rs`), by a child
//! forked with the process form of the policy, inside the environment's namespaces.
//!
//! Invariants: every path is resolved by the kernel in the mount namespace a process of the
//! call's policy works in (the environment's private `/tmp`, `/var/tmp` and `/dev/shm`, with the
//! host paths such a process binds there bound from the host's tree: [`confine`]) and without
//! magic links ([`resolve`]) on every route, and the policy is compiled in that namespace, so
//! no spelling reaches what the call's policy forbids; open handles and forked children
//! ([`Handles`]) belong to one session and die with it.

mod child;
mod handles;
pub(crate) mod mutate;
mod ops;
mod resolve;
mod steps;

use std::io;
use std::path::PathBuf;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};

use cleanroom::protect::view::View;
use cleanroom::protect::Sandbox;

use crate::policy::{self, Base, Target};
use crate::process::Reaper;
use crate::protocol::{Params, RpcError, INTERNAL_ERROR, INVALID_REQUEST};
use crate::uri::parse_file_uri;

pub use handles::Handles;
use mutate::Plan;
use resolve::Reach;

/// The code of a filesystem object that does not exist.
pub const NOT_FOUND: i64 = -32004;

/// Largest file `fs/readFile` returns.
const MAX_READ: u64 = 512 * 1024 * 1024;

/// What an `fs/*` call works with.
pub struct Context<'a> {
    /// What every call's policy is intersected with, and the environment's view.
    pub base: &'a Base,
    /// The environment's established sandbox, whose namespaces a forked child joins.
    pub environment: Option<&'a Sandbox>,
    /// The session's open files and forked children.
    pub handles: &'a Handles,
    /// For the child a mutating call may need.
    pub reaper: &'a Reaper,
}

/// Answers `method` on an open handle of `handles`: `fs/readBlock`, `fs/close` (the policy the
/// handle was opened under governs it: no other is compiled).
pub async fn on_handle(method: &str, params: &Value, handles: &Handles) -> Result<Value, RpcError> {
    let p = Params::new(params)?;
    match method {
        "fs/readBlock" => handles.read_block(&p).await,
        "fs/close" => Ok(handles.close(p.string("handleId")?)),
        other => Err(RpcError::internal(format!("{other} names no open handle"))),
    }
}

/// Answers the `fs/*` call `method` on a path.
pub async fn call(method: &str, params: &Value, cx: &Context<'_>) -> Result<Value, RpcError> {
    let handles = cx.handles;
    let p = Params::new(params)?;
    let op = Op::parse(method, &p)?;
    let (sandbox, view) = confine(&p, cx, &op).await?;
    let _last = Teardown(view.clone());
    let reach = Reach::of(sandbox.as_ref(), view);
    if let Op::Open { handle, path } = op {
        handles.check_new(&handle)?;
        let file =
            policy::on_thread(sandbox, cx.environment, move || ops::open(&path, &reach)).await?;
        return handles
            .insert(handle.clone(), file)
            .map(|()| json!({"handleId": handle}));
    }
    if !op.mutates() {
        return policy::on_thread(sandbox, cx.environment, move || op.run(&reach)).await;
    }
    let covered = sandbox
        .as_ref()
        .map(|s| s.status().no_new_entries_in.clone())
        .unwrap_or_default();
    let for_child = policy::on_thread(sandbox, cx.environment, move || {
        let plan = op.plan(&reach)?;
        if plan.changes_any(&covered) {
            return Ok(Some(plan));
        }
        let view = reach.view();
        plan.execute(view)
            .map_err(|f| plan.answer(f))
            .map(|()| None)
    })
    .await?;
    match for_child {
        Some(plan) => in_child(plan, &p, cx).await.map(|()| json!({})),
        None => Ok(json!({})),
    }
}

/// The call's policy on its thread, and the mount namespace it works in: what a process of
/// that policy sees, the environment's view with the host paths such a process binds beneath
/// the private `/tmp` and `/var/tmp` ([`Sandbox::binder`]: the environment's users' paths,
/// `--share-tmp`, and the policy's writable roots there; for a call that leaves the file system
/// unrestricted, the directories it names there: [`named_host_dirs`]) bound from the host's
/// tree as it is now; the policy is compiled in that namespace, so its rules are on what the
/// call reaches.
async fn confine(
    p: &Params<'_>,
    cx: &Context<'_>,
    op: &Op,
) -> Result<(Option<Sandbox>, View), RpcError> {
    let reads = !op.mutates();
    let sandbox = policy::for_fs_call(p, cx.base, Target::Thread, reads)?;
    let Some(environment) = cx.environment else {
        return Ok((sandbox, cx.base.view.clone()));
    };
    let named = match policy::leaves_files_unrestricted(p, cx.base)? {
        true => named_host_dirs(op, cx.base),
        false => Vec::new(),
    };
    let bound = environment.binding(named).map_err(|e| {
        RpcError::internal(format!("cannot bind the host paths the call names: {e}"))
    })?;
    let environment = bound.as_ref().unwrap_or(environment);
    // A read its policy need not confine still sees the host paths the policy's writable roots
    // bind (the private `/tmp` would show a stale copy of them: a name looked up there before
    // a process made it on the host stays missing); the policy is compiled for that only when
    // the read names a path beneath a private directory (compiling costs milliseconds).
    let private = &environment.status().tmp.dirs;
    let in_private = op
        .paths()
        .any(|path| private.iter().any(|dir| path.starts_with(&dir.path)));
    let asked = in_private && p.get("sandbox").is_some_and(|s| !s.is_null());
    let whole = match (&sandbox, asked) {
        (None, true) => policy::for_fs_call(p, cx.base, Target::Thread, false)?,
        _ => None,
    };
    let Some(binder) = environment.binder(whole.as_ref().or(sandbox.as_ref())) else {
        return Ok((sandbox, cx.base.view.clone()));
    };
    let view = child::view(binder, cx.reaper.clone(), cx.handles).await?;
    let seen = Base {
        view: view.clone(),
        ..cx.base.clone()
    };
    Ok((policy::for_fs_call(p, &seen, Target::Thread, reads)?, view))
}

/// The host directories a call that leaves the file system unrestricted binds (what it names
/// beneath the private `/tmp` and `/var/tmp` is the host's, as it is everywhere else, so a
/// write there is not lost when the environment ends): the nearest existing directory above
/// each path it names (never the path itself, which a removal or a rename could not replace
/// were it a mount point), canonical, at the access the environment's rules give it.
/// [`Sandbox::binding`] keeps those strictly beneath a private directory.
fn named_host_dirs(op: &Op, base: &Base) -> Vec<(PathBuf, cleanroom::protect::Access)> {
    op.paths()
        .filter_map(|path| {
            let dir = path.parent()?.ancestors().find(|a| a.is_dir())?;
            let dir = dir.canonicalize().ok()?;
            let access = base.access(&dir);
            Some((dir, access))
        })
        .collect()
}

/// Holds a call's view until the call is answered, then lets it go on the blocking pool: the
/// teardown of a namespace of its own (its last descriptor closed) waits for an RCU grace
/// period, which neither the answer nor a runtime thread should wait for.
struct Teardown(View);

impl Drop for Teardown {
    fn drop(&mut self) {
        let view = std::mem::take(&mut self.0);
        if !view.is_own() {
            tokio::task::spawn_blocking(move || drop(view));
        }
    }
}

/// Carries out `plan` in a child that joins the environment's namespaces and gets the mounts of
/// the call's policy inside them (the thread's Landlock cover would refuse entries the policy
/// allows where the plan changes them).
async fn in_child(plan: Plan, p: &Params<'_>, cx: &Context<'_>) -> Result<(), RpcError> {
    let forked = policy::for_fs_call(p, cx.base, Target::Child, false)?
        .ok_or_else(|| RpcError::internal("the child policy restricts nothing"))?;
    let forked = match cx.environment {
        Some(environment) => forked.within(environment),
        None => forked,
    };
    child::run(forked, plan, cx.reaper.clone(), cx.handles).await
}

fn handle_id(p: &Params<'_>) -> Result<String, RpcError> {
    p.string("handleId").map(str::to_owned)
}

/// One path-taking operation, parsed.
enum Op {
    Metadata {
        path: PathBuf,
        follow: bool,
    },
    ReadFile {
        path: PathBuf,
    },
    WriteFile {
        path: PathBuf,
        data: Vec<u8>,
    },
    CreateDirectory {
        path: PathBuf,
        recursive: bool,
    },
    ReadDirectory {
        path: PathBuf,
    },
    Remove {
        path: PathBuf,
        recursive: bool,
        force: bool,
    },
    Copy {
        from: PathBuf,
        to: PathBuf,
        recursive: bool,
    },
    Canonicalize {
        path: PathBuf,
    },
    Open {
        handle: String,
        path: PathBuf,
    },
}

impl Op {
    fn parse(method: &str, p: &Params<'_>) -> Result<Op, RpcError> {
        let path = |name: &str| -> Result<PathBuf, RpcError> {
            parse_file_uri(p.string(name)?, name).map_err(RpcError::invalid_params)
        };
        Ok(match method {
            "fs/getMetadata" => Op::Metadata {
                path: path("path")?,
                follow: p.bool_or("followSymlinks", true)?,
            },
            "fs/readFile" => Op::ReadFile {
                path: path("path")?,
            },
            "fs/writeFile" => Op::WriteFile {
                path: path("path")?,
                data: BASE64.decode(p.string("dataBase64")?).map_err(|e| {
                    RpcError::invalid_request(format!(
                        "fs/writeFile requires valid base64 dataBase64: {e}"
                    ))
                })?,
            },
            "fs/createDirectory" => Op::CreateDirectory {
                path: path("path")?,
                recursive: p.bool_or("recursive", true)?,
            },
            "fs/readDirectory" => Op::ReadDirectory {
                path: path("path")?,
            },
            "fs/remove" => Op::Remove {
                path: path("path")?,
                recursive: p.bool_or("recursive", true)?,
                force: p.bool_or("force", true)?,
            },
            "fs/copy" => Op::Copy {
                from: path("sourcePath")?,
                to: path("destinationPath")?,
                recursive: p.bool_or("recursive", false)?,
            },
            "fs/canonicalize" => Op::Canonicalize {
                path: path("path")?,
            },
            "fs/open" => Op::Open {
                handle: handle_id(p)?,
                path: path("path")?,
            },
            other => {
                return Err(RpcError::internal(format!(
                    "{other} is not a filesystem method"
                )))
            }
        })
    }

    /// The paths the operation names.
    fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        let (first, second) = match self {
            Op::Copy { from, to, .. } => (from, Some(to)),
            Op::Metadata { path, .. }
            | Op::ReadFile { path }
            | Op::WriteFile { path, .. }
            | Op::CreateDirectory { path, .. }
            | Op::ReadDirectory { path }
            | Op::Remove { path, .. }
            | Op::Canonicalize { path }
            | Op::Open { path, .. } => (path, None),
        };
        std::iter::once(first).chain(second)
    }

    /// Whether the operation creates or removes directory entries.
    fn mutates(&self) -> bool {
        matches!(
            self,
            Op::WriteFile { .. } | Op::CreateDirectory { .. } | Op::Remove { .. } | Op::Copy { .. }
        )
    }

    /// The plan of a mutating operation (on the confined thread: the checks and the reads are
    /// made under the call's policy).
    fn plan(self, reach: &Reach) -> Result<Plan, RpcError> {
        match self {
            Op::WriteFile { path, data } => mutate::write_file(&path, data, reach),
            Op::CreateDirectory { path, recursive } => {
                mutate::create_directory(&path, recursive, reach)
            }
            Op::Remove {
                path,
                recursive,
                force,
            } => mutate::remove(&path, recursive, force, reach),
            Op::Copy {
                from,
                to,
                recursive,
            } => mutate::copy(&from, &to, recursive, reach),
            _ => Err(RpcError::internal("not a mutating filesystem call")),
        }
    }

    /// Runs a reading operation (on the confined thread, or the blocking pool).
    fn run(self, reach: &Reach) -> Result<Value, RpcError> {
        match self {
            Op::Metadata { path, follow } => ops::metadata(&path, follow, reach),
            Op::ReadFile { path } => ops::read_file(&path, MAX_READ, reach)
                .map(|data| json!({"dataBase64": BASE64.encode(data)})),
            Op::ReadDirectory { path } => ops::read_directory(&path, reach),
            Op::Canonicalize { path } => ops::canonicalize(&path, reach),
            _ => Err(RpcError::internal("not a reading filesystem call")),
        }
    }
}

/// An OS error as the client expects it: missing → -32004, denied (by permissions, Landlock or
/// a read-only mount) → -32600, anything else → -32603; the message is the OS's.
pub fn os_error(e: io::Error) -> RpcError {
    let code = match e.kind() {
        io::ErrorKind::NotFound => NOT_FOUND,
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => INVALID_REQUEST,
        _ => INTERNAL_ERROR,
    };
    RpcError::new(code, e.to_string())
}

/// -32600 ``path `…` is not a file`` (the reference's words).
fn not_a_file(path: &std::path::Path) -> RpcError {
    RpcError::invalid_request(format!("path `{}` is not a file", path.display()))
}
