//! The `fs/*` methods (spec §6), with the shapes and error codes the Codex client reads.
//!
//! Owns: parsing each call's params, running its operation on a thread confined by the call's
//! policy ([`crate::policy::for_fs_call`], the engine processes use too), and mapping OS
//! errors to the codes the client depends on (missing: -32004 with the OS message; denied:
//! -32600; a path that is not a `file:` URI: -32602).
//!
//! Invariants: every path-taking operation runs on a thread that has applied the call's
//! kernel policy to itself before touching the path, so the kernel decides what it may reach;
//! open handles ([`Handles`]) belong to one session and die with it.

mod child;
mod handles;
mod ops;

use std::io;
use std::path::PathBuf;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};

use crate::policy::{self, Base, Target};
use crate::process::Reaper;
use crate::protocol::{Params, RpcError, INTERNAL_ERROR, INVALID_REQUEST};
use crate::uri::parse_file_uri;

pub use handles::Handles;

/// The code of a filesystem object that does not exist.
pub const NOT_FOUND: i64 = -32004;

/// Largest file `fs/readFile` returns.
const MAX_READ: u64 = 512 * 1024 * 1024;

/// Answers the `fs/*` call `method` (`reaper`: for the child a mutating call may need).
pub async fn call(
    method: &str,
    params: &Value,
    base: &Base,
    handles: &Handles,
    reaper: &Reaper,
) -> Result<Value, RpcError> {
    let p = Params::new(params)?;
    match method {
        "fs/readBlock" => return handles.read_block(&p).await,
        "fs/close" => return Ok(handles.close(p.string("handleId")?)),
        _ => {}
    }
    let op = Op::parse(method, &p)?;
    let sandbox = policy::for_fs_call(&p, base, Target::Thread, !op.mutates())?;
    let covered = sandbox
        .as_ref()
        .is_some_and(|s| !s.status().no_new_entries_in.is_empty());
    if covered && op.mutates() {
        // The thread's Landlock cover would refuse new entries the policy allows: plan on the
        // thread, run the plan in a child that gets the policy's mounts.
        let forked = policy::for_fs_call(&p, base, Target::Child, false)?
            .ok_or_else(|| RpcError::internal("the child policy restricts nothing"))?;
        let steps = policy::on_thread(sandbox, move || op.plan()).await?;
        let reaper = reaper.clone();
        return tokio::task::spawn_blocking(move || child::run(&forked, &steps, &reaper))
            .await
            .map_err(|e| RpcError::internal(format!("the filesystem task failed: {e}")))?
            .map(|()| json!({}));
    }
    if let Op::Open { handle, path } = op {
        handles.check_new(&handle)?;
        let file = policy::on_thread(sandbox, move || ops::open(&path)).await?;
        return handles
            .insert(handle.clone(), file)
            .map(|()| json!({"handleId": handle}));
    }
    policy::on_thread(sandbox, move || op.run()).await
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

    /// Whether the operation creates or removes directory entries.
    fn mutates(&self) -> bool {
        matches!(
            self,
            Op::WriteFile { .. } | Op::CreateDirectory { .. } | Op::Remove { .. } | Op::Copy { .. }
        )
    }

    /// The system calls of a mutating operation, for [`child::run`] (on the confined thread:
    /// the checks and the reads are made under the call's policy).
    fn plan(self) -> Result<Vec<child::Step>, RpcError> {
        use child::{c, Step};
        Ok(match self {
            Op::WriteFile { path, data } => vec![Step::Write(c(&path), data)],
            Op::CreateDirectory {
                path,
                recursive: true,
            } => child::mkdir_all(&path),
            Op::CreateDirectory {
                path,
                recursive: false,
            } => vec![Step::Mkdir(c(&path), false)],
            Op::Remove {
                path,
                recursive,
                force,
            } => match ops::removal(&path, recursive, force)? {
                ops::Removal::Nothing => Vec::new(),
                ops::Removal::Tree => {
                    let mut steps = Vec::new();
                    child::remove_tree(&path, &mut steps)?;
                    steps
                }
                ops::Removal::Dir => vec![Step::Rmdir(c(&path))],
                ops::Removal::Entry => vec![Step::Unlink(c(&path))],
            },
            Op::Copy {
                from,
                to,
                recursive,
            } => {
                ops::check_copy(&from, &to, recursive)?;
                let mut steps = Vec::new();
                child::copy_tree(&from, &to, &mut steps)?;
                steps
            }
            _ => return Err(RpcError::internal("not a mutating filesystem call")),
        })
    }

    /// Runs the operation (on the confined thread).
    fn run(self) -> Result<Value, RpcError> {
        match self {
            Op::Metadata { path, follow } => ops::metadata(&path, follow),
            Op::ReadFile { path } => ops::read_file(&path, MAX_READ)
                .map(|data| json!({"dataBase64": BASE64.encode(data)})),
            Op::WriteFile { path, data } => std::fs::write(&path, data)
                .map(|()| json!({}))
                .map_err(os_error),
            Op::CreateDirectory { path, recursive } => match recursive {
                true => std::fs::create_dir_all(&path),
                false => std::fs::create_dir(&path),
            }
            .map(|()| json!({}))
            .map_err(os_error),
            Op::ReadDirectory { path } => ops::read_directory(&path),
            Op::Remove {
                path,
                recursive,
                force,
            } => ops::remove(&path, recursive, force).map(|()| json!({})),
            Op::Copy {
                from,
                to,
                recursive,
            } => ops::copy(&from, &to, recursive).map(|()| json!({})),
            Op::Canonicalize { path } => std::fs::canonicalize(&path)
                .map(|c| json!({"path": crate::uri::file_uri(&c)}))
                .map_err(os_error),
            Op::Open { .. } => Err(RpcError::internal("fs/open runs through the handle table")),
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
