//! Removes one directory tree with cleanroom's removal walk: `remove_tree DIR`.
//!
//! For `scripts/bench` (its `remove-*` pairs), which times it against `rm -rf` of an identical
//! tree. The walk is the one every root goes through (`cleanroom::remove::remove_contents`),
//! then the emptied directory itself is removed.

use std::path::Path;

use rustix::fs::{Mode, OFlags};

fn main() {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: remove_tree DIR");
        std::process::exit(2);
    };
    let path = Path::new(&path);
    let dir = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap_or_else(|e| {
        eprintln!("remove_tree: {}: {e}", path.display());
        std::process::exit(1);
    });
    let stats = cleanroom::remove::remove_contents(&dir, path, None);
    drop(dir);
    if !stats.errors.is_empty() || !stats.mounts.is_empty() {
        eprintln!("remove_tree: {:?} {:?}", stats.errors, stats.mounts);
        std::process::exit(1);
    }
    if let Err(e) = std::fs::remove_dir(path) {
        eprintln!("remove_tree: {}: {e}", path.display());
        std::process::exit(1);
    }
}
