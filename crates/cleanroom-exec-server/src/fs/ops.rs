//! The blocking filesystem operations behind `fs/*`, run on the call's confined thread.
//!
//! Invariant: each follows the reference server's observable behaviour (what it follows,
//! what it refuses, with which code) so the Codex client cannot tell the two apart.

use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

use serde_json::{json, Value};

use super::{not_a_file, os_error};
use crate::protocol::RpcError;

/// `fs/getMetadata`: whether the path is a symlink from `lstat`, the rest followed (a link
/// refused with -32600 when `follow` is false, as the reference does).
pub fn metadata(path: &Path, follow: bool) -> Result<Value, RpcError> {
    let link = fs::symlink_metadata(path).map_err(os_error)?;
    let is_symlink = link.file_type().is_symlink();
    if is_symlink && !follow {
        return Err(RpcError::invalid_request("path contains a symbolic link"));
    }
    let meta = fs::metadata(path).map_err(os_error)?;
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

/// `fs/readFile`: a regular file's bytes, at most `limit` of them.
pub fn read_file(path: &Path, limit: u64) -> Result<Vec<u8>, RpcError> {
    let file = open(path)?;
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

/// Opens a regular file for reading (a directory: -32600).
pub fn open(path: &Path) -> Result<File, RpcError> {
    let file = File::open(path).map_err(os_error)?;
    match file.metadata().map_err(os_error)?.is_file() {
        true => Ok(file),
        false => Err(not_a_file(path)),
    }
}

/// `fs/readDirectory`: the entries whose type can be read (links followed), by name.
pub fn read_directory(path: &Path) -> Result<Value, RpcError> {
    let mut entries: Vec<(String, bool, bool)> = fs::read_dir(path)
        .map_err(os_error)?
        .flatten()
        .filter_map(|entry| {
            let meta = fs::metadata(entry.path()).ok()?;
            let name = entry.file_name().to_string_lossy().into_owned();
            Some((name, meta.is_dir(), meta.is_file()))
        })
        .collect();
    entries.sort();
    let entries: Vec<Value> = entries
        .into_iter()
        .map(|(name, dir, file)| json!({"fileName": name, "isDirectory": dir, "isFile": file}))
        .collect();
    Ok(json!({ "entries": entries }))
}

/// What `fs/remove` removes.
pub enum Removal {
    /// Nothing (missing, with `force`).
    Nothing,
    /// A directory and everything in it.
    Tree,
    /// An (empty) directory.
    Dir,
    /// Anything else (a link itself, not its target).
    Entry,
}

/// What `fs/remove` would do: a missing path is fine with `force`; a directory needs
/// `recursive` unless empty.
pub fn removal(path: &Path, recursive: bool, force: bool) -> Result<Removal, RpcError> {
    let meta = match fs::symlink_metadata(path) {
        Err(e) if force && e.kind() == std::io::ErrorKind::NotFound => return Ok(Removal::Nothing),
        other => other.map_err(os_error)?,
    };
    Ok(match (meta.is_dir(), recursive) {
        (true, true) => Removal::Tree,
        (true, false) => Removal::Dir,
        (false, _) => Removal::Entry,
    })
}

/// `fs/remove`.
pub fn remove(path: &Path, recursive: bool, force: bool) -> Result<(), RpcError> {
    match removal(path, recursive, force)? {
        Removal::Nothing => Ok(()),
        Removal::Tree => fs::remove_dir_all(path),
        Removal::Dir => fs::remove_dir(path),
        Removal::Entry => fs::remove_file(path),
    }
    .map_err(os_error)
}

/// `fs/copy`: a file, a symbolic link (as a link), or with `recursive` a directory tree, never
/// into itself.
pub fn copy(from: &Path, to: &Path, recursive: bool) -> Result<(), RpcError> {
    let meta = check_copy(from, to, recursive)?;
    match meta.is_dir() {
        true => copy_tree(from, to),
        false => copy_entry(from, to, &meta),
    }
}

/// The source's metadata if `fs/copy` may copy it: missing -32004; a directory needs
/// `recursive` and must not be copied into itself.
pub fn check_copy(from: &Path, to: &Path, recursive: bool) -> Result<fs::Metadata, RpcError> {
    let meta = fs::symlink_metadata(from).map_err(os_error)?;
    if !meta.is_dir() {
        return Ok(meta);
    }
    if !recursive {
        return Err(RpcError::invalid_request(
            "fs/copy requires recursive: true when sourcePath is a directory",
        ));
    }
    let source = fs::canonicalize(from).map_err(os_error)?;
    let target_parent = to
        .parent()
        .map(fs::canonicalize)
        .transpose()
        .map_err(os_error)?;
    let target = match (target_parent, to.file_name()) {
        (Some(parent), Some(name)) => parent.join(name),
        _ => to.to_path_buf(),
    };
    if target.starts_with(&source) {
        return Err(RpcError::invalid_request(
            "fs/copy cannot copy a directory to itself or one of its descendants",
        ));
    }
    Ok(meta)
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), RpcError> {
    fs::create_dir(to).map_err(os_error)?;
    for entry in fs::read_dir(from).map_err(os_error)? {
        let entry = entry.map_err(os_error)?;
        let meta = entry.metadata().map_err(os_error)?;
        let dest = to.join(entry.file_name());
        match meta.is_dir() {
            true => copy_tree(&entry.path(), &dest)?,
            false => copy_entry(&entry.path(), &dest, &meta)?,
        }
    }
    Ok(())
}

fn copy_entry(from: &Path, to: &Path, meta: &fs::Metadata) -> Result<(), RpcError> {
    if meta.file_type().is_symlink() {
        let target = fs::read_link(from).map_err(os_error)?;
        return std::os::unix::fs::symlink(target, to).map_err(os_error);
    }
    fs::copy(from, to).map(drop).map_err(os_error)
}
