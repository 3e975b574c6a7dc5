//! `cleanroom.toml`: the `run` options a project (or a user) sets once, see `docs/config.md`.
//!
//! Discovery walks up from the working directory; in each directory it looks for
//! `cleanroom.toml` and `.config/cleanroom.toml` (both at once is an error). The nearest file is
//! used, alone: files are not merged. `--config FILE` names one, `--no-config` turns it off.
//!
//! Invariant: a discovered file is used only when nobody but the user and root can have written
//! it: the file, and each directory between it and the directory where discovery found it, is
//! owned by the effective user or root and not writable by group or others (a directory with
//! the sticky bit may be, as /tmp is). Otherwise the run is refused with the file named:
//! discovery walks into places other users can write, and a config decides protection, network
//! and leaks, so a foreign file must neither take effect nor be skipped without a word. A file
//! named with `--config` is the user's own choice and is not checked.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

use crate::options::RunOptions;

/// Names looked for in each directory, in this order.
const FILE_NAMES: [&str; 2] = ["cleanroom.toml", ".config/cleanroom.toml"];

/// Config files larger than this are refused (a config is a few lines).
const MAX_SIZE: u64 = 1 << 20;

/// The shape of the file: `[run]` holds the options of `cleanroom run`.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct ConfigFile {
    run: RunOptions,
}

/// A config file in use.
#[derive(Debug)]
pub struct Config {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its `[run]` options, relative paths resolved against the file's directory.
    pub run: RunOptions,
}

/// Where the config comes from.
pub enum Source<'a> {
    /// `--config FILE`.
    Explicit(&'a Path),
    /// Discovered upward from this directory.
    Discover(&'a Path),
    /// `--no-config`.
    Disabled,
}

/// Loads the config the source names; `None` when there is none.
pub fn load(source: Source<'_>) -> Result<Option<Config>> {
    let (path, file) = match source {
        Source::Disabled => return Ok(None),
        Source::Explicit(path) => {
            let file = File::open(path)
                .with_context(|| format!("cannot read config {}", path.display()))?;
            (path.to_path_buf(), file)
        }
        Source::Discover(cwd) => match discover(cwd)? {
            Some(found) => found,
            None => return Ok(None),
        },
    };
    let mut text = String::new();
    file.take(MAX_SIZE + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    if text.len() as u64 > MAX_SIZE {
        bail!("config {} is larger than {MAX_SIZE} bytes", path.display());
    }
    let mut run = parse(&text).map_err(|e| anyhow!("{}:{e}", path.display()))?;
    if let Some(dir) = path.parent() {
        run.resolve_paths(dir);
    }
    Ok(Some(Config { path, run }))
}

/// The nearest config file at or above `cwd`, opened once it is known to be trusted.
fn discover(cwd: &Path) -> Result<Option<(PathBuf, File)>> {
    for dir in cwd.ancestors() {
        let found: Vec<PathBuf> = FILE_NAMES
            .iter()
            .map(|name| dir.join(name))
            .filter(|path| path.symlink_metadata().is_ok())
            .collect();
        match found.as_slice() {
            [] => continue,
            [path] => return Ok(Some((path.clone(), open_trusted(path, dir)?))),
            _ => bail!(
                "two config files in {}: {} and {}; keep one (or use --config FILE)",
                dir.display(),
                found[0].display(),
                found[1].display()
            ),
        }
    }
    Ok(None)
}

/// Opens `path` (found in `top`) if nobody but the user and root could have written it: the
/// entry (a symlink included) and the opened file are theirs, the file is not group/other
/// writable, and so are the directories from the entry's up to `top` and, for a symlink, the
/// directory of its target (a sticky directory may be writable by others). The checks of the
/// file are made on the opened descriptor, so what is read is what was checked.
fn open_trusted(path: &Path, top: &Path) -> Result<File> {
    let euid = rustix::process::geteuid().as_raw();
    let refuse = |what: &Path, why: String| {
        let what = if what == path {
            "it".to_string()
        } else {
            what.display().to_string()
        };
        anyhow!(
            "refusing config {}: {what} {why}; only files the user or root owns and others \
             cannot write are used (name it with --config FILE to use it anyway, or --no-config)",
            path.display(),
        )
    };
    // A symlink's own mode means nothing; a sticky directory protects what others do not own.
    let inspect = |p: &Path, meta: std::io::Result<std::fs::Metadata>, dir: bool| {
        let m = meta.with_context(|| format!("cannot inspect config {}", p.display()))?;
        let mode_ignored = m.file_type().is_symlink() || (dir && m.mode() & 0o1000 != 0);
        let writable_by_others = m.mode() & 0o022 != 0 && !mode_ignored;
        if m.uid() != euid && m.uid() != 0 {
            Err(refuse(p, format!("is owned by uid {}", m.uid())))
        } else if writable_by_others {
            let mode = m.mode() & 0o7777;
            Err(refuse(p, format!("is writable by others (mode {mode:o})")))
        } else {
            Ok(m)
        }
    };
    let entry = inspect(path, path.symlink_metadata(), false)?;
    let file =
        File::open(path).with_context(|| format!("cannot read config {}", path.display()))?;
    if !inspect(path, file.metadata(), false)?.is_file() {
        return Err(refuse(path, "is not a regular file".into()));
    }
    let mut dirs: Vec<PathBuf> = path
        .ancestors()
        .skip(1)
        .take_while(|d| d.starts_with(top))
        .map(Path::to_path_buf)
        .collect();
    if entry.file_type().is_symlink() {
        let target = std::fs::canonicalize(path)
            .with_context(|| format!("cannot resolve config {}", path.display()))?;
        dirs.extend(target.parent().map(Path::to_path_buf));
    }
    for dir in &dirs {
        inspect(dir, dir.metadata(), true)?;
    }
    Ok(file)
}

/// Parses the text of a config file; the error starts with `LINE: KEY: ` (the caller puts the
/// file name in front).
fn parse(text: &str) -> std::result::Result<RunOptions, String> {
    let deserializer = toml::Deserializer::parse(text).map_err(|e| describe(text, &e, None))?;
    match serde_path_to_error::deserialize::<_, ConfigFile>(deserializer) {
        Ok(file) => Ok(file.run),
        Err(e) => {
            let key = e.path().to_string();
            Err(describe(text, e.inner(), Some(&key)))
        }
    }
}

/// One line: the line number, the key when known, and toml's message without its snippet.
fn describe(text: &str, error: &toml::de::Error, key: Option<&str>) -> String {
    let line = error
        .span()
        .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
    let message = error.message().trim().replace('\n', " ");
    let top_level = key.is_some_and(|k| !k.starts_with("run"));
    let hint = if message.contains("unknown field") && top_level {
        " (the file has one table, [run], holding the options of `cleanroom run`)"
    } else {
        ""
    };
    match (line, key) {
        (Some(line), Some(key)) if key != "." => format!("{line}: {key}: {message}{hint}"),
        (Some(line), _) => format!("{line}: {message}{hint}"),
        (None, Some(key)) => format!(" {key}: {message}{hint}"),
        (None, None) => format!(" {message}"),
    }
}
