//! The reading `fs/*` operations (`getMetadata`, `readFile`, `readDirectory`, `canonicalize`,
//! `open`), run on the call's confined thread (or the blocking pool when nothing confines it).
//!
//! Invariants: each follows the reference server's observable behaviour (what it follows, what
//! it refuses, with which code) so the Codex client cannot tell the two apart; every path goes
//! through [`resolve`] (no magic link followed), and what a descriptor opened without a
//! Landlock check reveals (`O_PATH`: metadata, a canonical path, a link's type) is shown only
//! where the call's policy lets it read ([`Reach::reveal`]).

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use serde_json::{json, Value};

use super::resolve::{self, Last, Reach};
use super::{not_a_file, os_error};
use crate::protocol::RpcError;

/// `fs/getMetadata`: whether the path is a symlink (not followed), the rest followed (a link
/// refused with -32600 when `follow` is false, as the reference does).
pub fn metadata(path: &Path, follow: bool, reach: &Reach) -> Result<Value, RpcError> {
    let fail = |e| reach.refused(path, e);
    let link = open_revealed(path, Last::NoFollow, reach).map_err(fail)?;
    let is_symlink =
        resolve::kind(&rustix::fs::fstat(&link).map_err(|e| fail(e.into()))?) == FileType::Symlink;
    if is_symlink && !follow {
        return Err(RpcError::invalid_request("path contains a symbolic link"));
    }
    let target = match is_symlink {
        true => open_revealed(path, Last::Follow, reach).map_err(fail)?,
        false => link,
    };
    let meta = File::from(target).metadata().map_err(fail)?;
    let ms = |t: std::io::Result<SystemTime>| {
        t.ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as u64)
    };
    Ok(json!({
        "isDirectory": meta.is_dir(),
        "isFile": meta.is_file(),
        "isSymlink": is_symlink,
        "size": meta.size(),
        "createdAtMs": ms(meta.created()),
        "modifiedAtMs": ms(meta.modified()),
    }))
}

/// An `O_PATH` descriptor of `path`, refused (EACCES) where the call's policy hides it.
fn open_revealed(path: &Path, last: Last, reach: &Reach) -> std::io::Result<OwnedFd> {
    let fd = reach.open(path, OFlags::PATH, Mode::empty(), last)?;
    reach.reveal(fd.as_fd())?;
    Ok(fd)
}

/// `fs/readFile`: a regular file's bytes, at most `limit` of them.
pub fn read_file(path: &Path, limit: u64, reach: &Reach) -> Result<Vec<u8>, RpcError> {
    let file = open(path, reach)?;
    let size = file.metadata().map_err(os_error)?.len();
    if size > limit {
        return Err(RpcError::invalid_request(format!(
            "file `{}` is {size} bytes, more than the limit of {limit}",
            path.display()
        )));
    }
    let mut data = Vec::with_capacity(size as usize);
    file.take(limit + 1)
        .read_to_end(&mut data)
        .map_err(os_error)?;
    if data.len() as u64 > limit {
        return Err(RpcError::invalid_request(format!(
            "file `{}` grew beyond the limit of {limit} bytes while read",
            path.display()
        )));
    }
    Ok(data)
}

/// Opens a regular file for reading (anything else: -32600; a FIFO is opened without waiting
/// for a writer, then refused).
pub fn open(path: &Path, reach: &Reach) -> Result<File, RpcError> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = reach
        .open(path, flags, Mode::empty(), Last::Follow)
        .map_err(|e| reach.refused(path, e))?;
    let file = File::from(fd);
    if !file.metadata().map_err(os_error)?.is_file() {
        return Err(not_a_file(path));
    }
    let flags = rustix::fs::fcntl_getfl(&file).map_err(|e| os_error(e.into()))?;
    rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK).map_err(|e| os_error(e.into()))?;
    Ok(file)
}

/// `fs/readDirectory`: the entries whose type can be read (links followed, never a magic one),
/// by name.
pub fn read_directory(path: &Path, reach: &Reach) -> Result<Value, RpcError> {
    let fail = |e| reach.refused(path, e);
    let dir = reach
        .open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
            Last::Follow,
        )
        .map_err(fail)?;
    let mut entries = Vec::new();
    for (name, kind) in resolve::list(&dir).map_err(fail)? {
        let (is_dir, is_file) = match kind {
            FileType::Directory => (true, false),
            FileType::RegularFile => (false, true),
            FileType::Symlink | FileType::Unknown => {
                let target = resolve::open_at(
                    &dir,
                    &name,
                    OFlags::PATH,
                    Mode::empty(),
                    ResolveFlags::empty(),
                )
                .and_then(|fd| reach.admit(fd))
                .and_then(|fd| {
                    reach.reveal(fd.as_fd())?;
                    Ok(rustix::fs::fstat(&fd)?)
                });
                match target.map(|stat| resolve::kind(&stat)) {
                    Ok(kind) => (kind == FileType::Directory, kind == FileType::RegularFile),
                    Err(_) => continue,
                }
            }
            _ => (false, false),
        };
        let name = String::from_utf8_lossy(name.as_bytes()).into_owned();
        entries.push((name, is_dir, is_file));
    }
    entries.sort();
    let entries: Vec<Value> = entries
        .into_iter()
        .map(|(name, dir, file)| json!({"fileName": name, "isDirectory": dir, "isFile": file}))
        .collect();
    Ok(json!({ "entries": entries }))
}

/// `fs/canonicalize`: the path the kernel resolves `path` to.
pub fn canonicalize(path: &Path, reach: &Reach) -> Result<Value, RpcError> {
    let fail = |e| reach.refused(path, e);
    let fd = open_revealed(path, Last::Follow, reach).map_err(fail)?;
    let canonical = resolve::path_of(fd.as_fd()).map_err(fail)?;
    Ok(json!({"path": crate::uri::file_uri(&canonical)}))
}
