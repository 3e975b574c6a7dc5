//! The options this platform (Windows, macOS) has no backend for yet, refused with a line that
//! names each one (exit 125 before anything starts), never silently ignored: the timeout's
//! signal, containment other than `auto`, protection beyond `off`, network isolation, the
//! private /tmp, and on Windows machine-scope locks. What each platform does instead is in
//! docs/windows.md and docs/macos.md.

use std::path::Path;

use anyhow::{bail, Context};
use cleanroom::run::RunBuilder;

use super::{ContainArg, NetArg, ProtectArg, RunOptions};

/// `--signal`'s word as given: it is refused here (see [`refuse`]).
pub type Signal = String;

/// Keeps the word; [`refuse`] refuses it with the option's name.
pub fn parse_signal(text: &str) -> Result<Signal, String> {
    Ok(text.to_string())
}

/// How this platform words what it does instead of what Linux does.
struct Here {
    /// The platform's name.
    name: &'static str,
    /// What contains every run.
    container: &'static str,
    /// Why `--signal` is refused: what a timeout does.
    timeout: &'static str,
    /// Why the private /tmp is not missed.
    tmp: &'static str,
}

#[cfg(windows)]
const HERE: Here = Here {
    name: "Windows",
    container: "a Job Object",
    timeout: "a timeout terminates the run's Job Object (there are no signals to send first)",
    tmp: "TEMP and TMP already point inside the root",
};

#[cfg(target_os = "macos")]
const HERE: Here = Here {
    name: "macOS",
    container: "a process group",
    timeout: "a timeout sends TERM to the run's process group, then KILL after --grace",
    tmp: "TMPDIR already points inside the root",
};

/// Nothing to apply: what this platform has no backend for was refused beforehand, on the
/// values the run would use ([`refuse`]).
pub fn apply(_options: &mut RunOptions, b: RunBuilder) -> anyhow::Result<RunBuilder> {
    Ok(b)
}

/// Refuses the first option this platform cannot honour, judged on the values the run would
/// use: a flag or `CLEANROOM_*` variable replaces the config file's value (`--protect off`
/// overrides the file's `protect = "home"`), so a project file written for Linux does not stop
/// every run here. A refused value that comes from the file is named with the file's path.
pub fn refuse(flags: &RunOptions, file: Option<(&Path, &RunOptions)>) -> anyhow::Result<()> {
    refuse_values(flags)?;
    if let Some((path, file)) = file {
        refuse_values(&flags_over(flags, file)).with_context(|| path.display().to_string())?;
    }
    Ok(())
}

/// The refusable options the run would use: each from `flags` where they give it, else from
/// `file` (lists replace, switches add up, as the layers apply them).
fn flags_over(flags: &RunOptions, file: &RunOptions) -> RunOptions {
    fn pick<T: Clone>(flag: &Option<T>, file: &Option<T>) -> Option<T> {
        flag.clone().or_else(|| file.clone())
    }
    RunOptions {
        signal: pick(&flags.signal, &file.signal),
        contain: pick(&flags.contain, &file.contain),
        protect: pick(&flags.protect, &file.protect),
        protect_path: pick(&flags.protect_path, &file.protect_path),
        allow_write: pick(&flags.allow_write, &file.allow_write),
        require_protection: flags.require_protection || file.require_protection,
        net: pick(&flags.net, &file.net),
        lock_scope: pick(&flags.lock_scope, &file.lock_scope),
        keep_root: pick(&flags.keep_root, &file.keep_root),
        share_tmp: pick(&flags.share_tmp, &file.share_tmp),
        host_tmp: flags.host_tmp || file.host_tmp,
        ..RunOptions::default()
    }
}

/// Refuses the first of `options` this platform cannot honour.
fn refuse_values(options: &RunOptions) -> anyhow::Result<()> {
    let Here {
        name,
        container,
        timeout,
        ..
    } = HERE;
    if let Some(signal) = &options.signal {
        bail!("--signal {}: not available on {name}: {timeout}", signal.0);
    }
    let whole_run = format!(
        "not available on {name}: every run is contained by {container} (use --contain auto)"
    );
    match options.contain {
        Some(ContainArg::Cgroup) => bail!("--contain cgroup: {whole_run}"),
        Some(ContainArg::Session) => bail!("--contain session: {whole_run}"),
        Some(ContainArg::Auto) | None => {}
    }
    refuse_protection(options)?;
    if let Some(NetArg::None) = options.net {
        bail!("--net none: {name} has no network isolation backend yet; use --net host");
    }
    refuse_platform_only(options)
}

/// Refuses protection, and the private /tmp that comes with it on Linux. Under `--protect off`
/// (from any layer) the protected and writable paths, `--require-protection` and the /tmp
/// options have no effect on Linux either, so they are not refused: a Linux project's
/// `protect-path` does not stop a run that turned protection off.
fn refuse_protection(options: &RunOptions) -> anyhow::Result<()> {
    let Here { name, tmp, .. } = HERE;
    let no_protection =
        format!("{name} has no write protection backend yet (Landlock is Linux-only); use --protect off, or run on Linux");
    match options.protect {
        Some(ProtectArg::Home) => bail!("--protect home: {no_protection}"),
        Some(ProtectArg::Strict) => bail!("--protect strict: {no_protection}"),
        Some(ProtectArg::Off) => return Ok(()),
        None => {}
    }
    let given = |list: &Option<Vec<_>>| list.as_ref().is_some_and(|l: &Vec<_>| !l.is_empty());
    if given(&options.protect_path) {
        bail!("--protect-path: {no_protection}");
    }
    if given(&options.allow_write) {
        bail!("--allow-write: {no_protection}");
    }
    if options.require_protection {
        bail!("--require-protection: {no_protection}");
    }
    let no_private_tmp = format!("{name} has no private /tmp ({tmp})");
    if given(&options.share_tmp) {
        bail!("--share-tmp: {no_private_tmp}");
    }
    if options.host_tmp {
        bail!("--host-tmp: {no_private_tmp}");
    }
    Ok(())
}

/// Refuses what Windows alone lacks: `--lock-scope machine` (no lock directory shared by every
/// user) and `--keep-root=on-failure` (its marker records no reason to keep a root yet).
#[cfg(windows)]
fn refuse_platform_only(options: &RunOptions) -> anyhow::Result<()> {
    if let Some(super::LockScopeArg::Machine) = options.lock_scope {
        bail!(
            "--lock-scope machine: Windows has no lock directory shared by every user (exclusive \
             locks are the user's own); use --lock-scope user"
        );
    }
    if let Some(Some(super::KeepRootArg::OnFailure)) = options.keep_root {
        bail!(
            "--keep-root=on-failure: the Windows marker records no reason to keep a root yet; \
             use --keep-root=always or --keep-root=never"
        );
    }
    Ok(())
}

/// Nothing more to refuse: macOS takes exclusive locks as Linux does (`flock`), both scopes,
/// and records why a root is kept in its marker.
#[cfg(not(windows))]
fn refuse_platform_only(_options: &RunOptions) -> anyhow::Result<()> {
    Ok(())
}
