//! `cleanroom.toml`: the `run` options a project (or a user) sets once, see `docs/config.md`.
//!
//! Discovery walks up from the working directory; in each directory it looks for
//! `cleanroom.toml` and `.config/cleanroom.toml` (both at once is an error). The nearest file is
//! used, alone: files are not merged. `--config FILE` names one, `--no-config` turns it off.
//!
//! Invariant: a discovered file is used only when nobody but the user and root can have written
//! it or anything on the way to it ([`trust`]). One that fails the rule is never read: it is
//! skipped with a warning naming it and why, and discovery goes on upward (refusing every run
//! instead would let any local user stop everyone's runs below a shared directory with one
//! file). A file named with `--config` is the user's own choice and is not checked.

// The trust rule picked once: Linux and macOS judge owners and modes along the whole path;
// Windows, for now, uses no discovered file (see its module).
#[cfg(unix)]
#[path = "config/unix.rs"]
mod trust;
#[cfg(windows)]
#[path = "config/windows.rs"]
mod trust;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

use trust::Identity;

use crate::options::RunOptions;

/// The variable through which a run tells the runs nested in it which discovered config it
/// judged (on Unix `DEV:INO:PATH`, see [`trust`]). Only the user's own runs read it (the
/// command runs as the user, who could as well name the file with `--config`), and only for
/// owners a user namespace hides.
pub const TRUSTED_CONFIG_VAR: &str = "CLEANROOM_TRUSTED_CONFIG";

/// A discovered config file found trusted, open for reading.
pub struct Trusted {
    /// The file.
    pub file: File,
    /// Its identity, for the runs nested in this one.
    pub identity: Identity,
}

/// Why a discovered config file is not used.
pub enum Distrust {
    /// Someone other than the user and root could have written it, or something on the way to
    /// it: it is skipped (with a warning) and discovery goes on.
    Untrusted(String),
    /// It cannot be judged or read: the run is refused.
    Refused(anyhow::Error),
}

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
    /// The line of each entry of its path lists, to say where a value came from.
    path_lines: PathLines,
    /// The file's identity when it was discovered and judged trusted (not named).
    judged: Option<Identity>,
}

impl Config {
    /// Where entry `index` of the `[run]` list `key` (`protect-path`, `allow-write`, `share-tmp`) was
    /// written: `FILE:LINE: run.KEY[INDEX]`, as the file's other errors name a value.
    pub fn origin(&self, key: &str, index: usize) -> String {
        let lines = match key {
            "protect-path" => &self.path_lines.run.protect_path,
            "allow-write" => &self.path_lines.run.allow_write,
            "share-tmp" => &self.path_lines.run.share_tmp,
            _ => &Vec::new(),
        };
        match lines.get(index) {
            Some(line) => format!("{}:{line}: run.{key}[{index}]", self.path.display()),
            None => format!("{}: run.{key}[{index}]", self.path.display()),
        }
    }
}

/// The lines of the entries of the `[run]` path lists (other keys are ignored here).
#[derive(Debug, Default)]
struct PathLines {
    run: RunPathLines,
}

#[derive(Debug, Default)]
struct RunPathLines {
    protect_path: Vec<usize>,
    allow_write: Vec<usize>,
    share_tmp: Vec<usize>,
}

impl PathLines {
    /// Reads them from `text`, which already parsed as a [`ConfigFile`]; nothing when it cannot.
    fn of(text: &str) -> PathLines {
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct Spans {
            run: RunSpans,
        }
        #[derive(Deserialize, Default)]
        #[serde(default, rename_all = "kebab-case")]
        struct RunSpans {
            protect_path: Vec<toml::Spanned<String>>,
            allow_write: Vec<toml::Spanned<String>>,
            share_tmp: Vec<toml::Spanned<String>>,
        }
        let spans: Spans = toml::from_str(text).unwrap_or_default();
        let lines = |list: Vec<toml::Spanned<String>>| {
            list.iter()
                .map(|entry| text[..entry.span().start].matches('\n').count() + 1)
                .collect()
        };
        PathLines {
            run: RunPathLines {
                protect_path: lines(spans.run.protect_path),
                allow_write: lines(spans.run.allow_write),
                share_tmp: lines(spans.run.share_tmp),
            },
        }
    }
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

/// Loads the config the source names; `None` when there is none. A discovered file that fails
/// the trust rule is skipped, and `warn` hears which and why.
pub fn load(source: Source<'_>, warn: &mut dyn FnMut(&str)) -> Result<Option<Config>> {
    let (path, file, judged) = match source {
        Source::Disabled => return Ok(None),
        Source::Explicit(path) => {
            let file = File::open(path)
                .with_context(|| format!("cannot read config {}", path.display()))?;
            (path.to_path_buf(), file, None)
        }
        Source::Discover(cwd) => match discover(cwd, warn)? {
            Some((path, trusted)) => (path, trusted.file, Some(trusted.identity)),
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
    let path_lines = PathLines::of(&text);
    Ok(Some(Config {
        path,
        run,
        path_lines,
        judged,
    }))
}

/// Tells the runs nested in this one (through the environment their commands inherit) which
/// discovered config this run judged and uses, so that they may use the same file where a user
/// namespace hides its owners (see [`trust`]); with none, says nothing.
///
/// Call it before anything else runs in this process: it changes the process's environment.
pub fn pass_on(config: Option<&Config>) {
    match config.and_then(|c| Some((c.judged?, &c.path))) {
        Some((identity, path)) => std::env::set_var(TRUSTED_CONFIG_VAR, identity.var_value(path)),
        None => std::env::remove_var(TRUSTED_CONFIG_VAR),
    }
}

/// The nearest trusted config file at or above `cwd`, opened. A file that fails the trust rule
/// is skipped (`warn` hears it); two trusted files in one directory are an error.
fn discover(cwd: &Path, warn: &mut dyn FnMut(&str)) -> Result<Option<(PathBuf, Trusted)>> {
    for dir in cwd.ancestors() {
        let mut trusted = Vec::new();
        for path in FILE_NAMES.iter().map(|name| dir.join(name)) {
            if path.symlink_metadata().is_err() {
                continue;
            }
            match trust::open(&path) {
                Ok(file) => trusted.push((path, file)),
                Err(Distrust::Untrusted(why)) => {
                    warn(&format!("ignoring config {}: {why}", path.display()));
                }
                Err(Distrust::Refused(e)) => return Err(e),
            }
        }
        match trusted.len() {
            0 => continue,
            1 => return Ok(trusted.pop()),
            _ => bail!(
                "two config files in {}: {} and {}; keep one (or use --config FILE)",
                dir.display(),
                trusted[0].0.display(),
                trusted[1].0.display()
            ),
        }
    }
    Ok(None)
}

/// Parses the text of a config file; the error is one line and starts with `LINE: KEY: ` (the
/// caller puts the file name in front). The `config` fuzz target (fuzz/) calls it: keep its
/// signature.
pub fn parse(text: &str) -> std::result::Result<RunOptions, String> {
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
