//! What `fs/*` calls of one session hold: open file handles (`fs/open`, `fs/readBlock`,
//! `fs/close`) and the children forked for mutating calls.
//!
//! Invariants: at most [`MAX_HANDLES`] per session, ids of at most 32 bytes, unique; a file is
//! opened on the call's confined thread, then read by descriptor (as the reference does); the
//! handles close when the session is dropped; a forked child is killed when its session ends
//! (a child registered after that is killed at once), through a pidfd taken while it is still
//! unreaped, so the signal can never reach a process that reused its pid.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, PoisonError};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};

use super::{os_error, NOT_FOUND};
use crate::protocol::{Params, RpcError};

/// Open handles per session.
pub const MAX_HANDLES: usize = 128;
/// Longest handle id, in bytes.
const MAX_ID: usize = 32;
/// Largest block `fs/readBlock` returns.
const MAX_BLOCK: u64 = 1024 * 1024;

/// The open files and forked children of a session.
#[derive(Debug, Default)]
pub struct Handles {
    files: Mutex<HashMap<String, Arc<File>>>,
    children: Children,
}

/// The children forked for a session's mutating calls.
#[derive(Clone, Debug, Default)]
pub struct Children {
    live: Arc<Mutex<Live>>,
}

/// The registered children, by pid, each with a pidfd; and whether the session has ended.
#[derive(Debug, Default)]
struct Live {
    children: Vec<(i32, OwnedFd)>,
    ended: bool,
}

impl Children {
    /// Registers the child `pid` (not yet reaped) until the returned guard is dropped (once it is
    /// reaped); killed at once when the session has ended.
    pub fn add(&self, pid: i32) -> Registered {
        let pidfd = rustix::process::Pid::from_raw(pid).and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
        let mut live = self.lock();
        if let Some(pidfd) = pidfd {
            if live.ended {
                kill(&pidfd);
            }
            live.children.push((pid, pidfd));
        }
        Registered {
            children: self.clone(),
            pid,
        }
    }

    /// Kills every registered child, and every one registered from now on.
    fn end(&self) {
        let mut live = self.lock();
        live.ended = true;
        for (_, pidfd) in &live.children {
            kill(pidfd);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A registered child; dropped once it is reaped.
pub struct Registered {
    children: Children,
    pid: i32,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.children
            .lock()
            .children
            .retain(|(pid, _)| *pid != self.pid);
    }
}

/// SIGKILL through `pidfd` (a child already gone is no error).
fn kill(pidfd: &OwnedFd) {
    let _ = rustix::process::pidfd_send_signal(pidfd, rustix::process::Signal::KILL);
}

impl Handles {
    /// The session's forked children.
    pub fn children(&self) -> Children {
        self.children.clone()
    }

    /// The session ended: kills its forked children (their calls answer that the child died).
    pub fn end(&self) {
        self.children.end();
    }

    /// Refuses an id that is too long, taken, or over the limit (before anything is opened).
    pub fn check_new(&self, id: &str) -> Result<(), RpcError> {
        if id.len() > MAX_ID {
            return Err(RpcError::invalid_request(format!(
                "file handle ID must not exceed {MAX_ID} bytes"
            )));
        }
        let files = self.lock();
        if files.contains_key(id) {
            return Err(RpcError::invalid_request(format!(
                "file handle `{id}` already exists"
            )));
        }
        if files.len() >= MAX_HANDLES {
            return Err(RpcError::invalid_request(format!(
                "the session has {MAX_HANDLES} open file handles, the limit; close some first"
            )));
        }
        Ok(())
    }

    /// Adds an opened file (checked again: another call may have taken the id meanwhile).
    pub fn insert(&self, id: String, file: File) -> Result<(), RpcError> {
        self.check_new(&id)?;
        self.lock().insert(id, Arc::new(file));
        Ok(())
    }

    /// `fs/readBlock {handleId, offset, len}` → `{chunk, eof}`.
    pub async fn read_block(&self, p: &Params<'_>) -> Result<Value, RpcError> {
        let id = p.string("handleId")?;
        let offset = p.opt_u64("offset")?.unwrap_or(0);
        let len = p.opt_u64("len")?.unwrap_or(0);
        if !(1..=MAX_BLOCK).contains(&len) {
            return Err(RpcError::invalid_request(format!(
                "file read block length must be between 1 and {MAX_BLOCK}"
            )));
        }
        let file = self
            .lock()
            .get(id)
            .cloned()
            .ok_or_else(|| RpcError::new(NOT_FOUND, format!("unknown file handle `{id}`")))?;
        tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; len as usize];
            let mut filled = 0;
            while filled < buf.len() {
                match file.read_at(&mut buf[filled..], offset + filled as u64) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(os_error(e)),
                }
            }
            let size = file.metadata().map_err(os_error)?.len();
            let eof = filled < buf.len() || offset + filled as u64 >= size;
            buf.truncate(filled);
            Ok(json!({"chunk": BASE64.encode(&buf), "eof": eof}))
        })
        .await
        .map_err(|e| RpcError::internal(format!("the read task failed: {e}")))?
    }

    /// `fs/close` (idempotent).
    pub fn close(&self, id: &str) -> Value {
        self.lock().remove(id);
        json!({})
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<File>>> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Child, Command};

    fn sleeper() -> Child {
        Command::new("sleep").arg("600").spawn().unwrap()
    }

    /// A forked child does not outlive its session: the registered one is killed when the
    /// session ends, one registered afterwards at once, and one reaped (unregistered) before is
    /// not signalled.
    #[test]
    fn the_session_end_kills_its_registered_children_and_later_ones() {
        let handles = Handles::default();
        let mut kept = sleeper();
        let mut done = sleeper();
        let registered = handles.children().add(kept.id() as i32);
        drop(handles.children().add(done.id() as i32));
        handles.end();
        assert_eq!(kept.wait().unwrap().signal(), Some(libc::SIGKILL));
        drop(registered);
        let mut late = sleeper();
        let _late = handles.children().add(late.id() as i32);
        assert_eq!(late.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(
            done.try_wait().unwrap().is_none(),
            "an unregistered child was signalled"
        );
        done.kill().unwrap();
        done.wait().unwrap();
    }
}
