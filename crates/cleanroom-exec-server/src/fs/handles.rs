//! Open file handles of one session (`fs/open`, `fs/readBlock`, `fs/close`).
//!
//! Invariants: at most [`MAX_HANDLES`] per session, ids of at most 32 bytes, unique; a file is
//! opened on the call's confined thread, then read by descriptor (as the reference does); the
//! handles close when the session is dropped.

use std::collections::HashMap;
use std::fs::File;
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

/// The open files of a session.
#[derive(Debug, Default)]
pub struct Handles {
    files: Mutex<HashMap<String, Arc<File>>>,
}

impl Handles {
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
