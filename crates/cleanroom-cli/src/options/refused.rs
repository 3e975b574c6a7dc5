//! The options this platform (Windows, macOS) has no backend for yet, refused with a line that
//! names each one (exit 125 before anything starts), never silently ignored: the timeout's
//! signal, containment other than `auto`, protection beyond `off`, network isolation, the
//! private /tmp, and on Windows machine-scope locks. What each platform does instead is in
//! docs/windows.md and docs/macos.md.

use anyhow::bail;
use cleanroom::run::RunBuilder;

use super::{ContainArg, NetArg, ProtectArg, RunOptions};

/// `--signal`'s word as given: it is refused here (see [`apply`]).
pub type Signal = String;

/// Keeps the word; [`apply`] refuses it with the option's name.
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

/// Refuses the first option this layer gives that this platform cannot honour; applies nothing
/// (the options it has are set by the caller).
pub fn apply(options: &mut RunOptions, b: RunBuilder) -> anyhow::Result<RunBuilder> {
    let Here {
        name,
        container,
        timeout,
        tmp,
    } = HERE;
    let no_protection =
        format!("{name} has no write protection backend yet (Landlock is Linux-only); use --protect off, or run on Linux");
    let no_private_tmp = format!("{name} has no private /tmp ({tmp})");
    let given = |list: &Option<Vec<_>>| list.as_ref().is_some_and(|l: &Vec<_>| !l.is_empty());
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
    match options.protect {
        Some(ProtectArg::Home) => bail!("--protect home: {no_protection}"),
        Some(ProtectArg::Strict) => bail!("--protect strict: {no_protection}"),
        Some(ProtectArg::Off) | None => {}
    }
    if given(&options.protect_path) {
        bail!("--protect-path: {no_protection}");
    }
    if given(&options.allow_write) {
        bail!("--allow-write: {no_protection}");
    }
    if options.require_protection {
        bail!("--require-protection: {no_protection}");
    }
    if let Some(NetArg::None) = options.net {
        bail!("--net none: {name} has no network isolation backend yet; use --net host");
    }
    refuse_locks(options)?;
    if given(&options.share_tmp) {
        bail!("--share-tmp: {no_private_tmp}");
    }
    if options.host_tmp {
        bail!("--host-tmp: {no_private_tmp}");
    }
    Ok(b)
}

/// Refuses `--lock-scope machine` on Windows, which has no lock directory shared by every user.
#[cfg(windows)]
fn refuse_locks(options: &RunOptions) -> anyhow::Result<()> {
    if let Some(super::LockScopeArg::Machine) = options.lock_scope {
        bail!(
            "--lock-scope machine: Windows has no lock directory shared by every user (exclusive \
             locks are the user's own); use --lock-scope user"
        );
    }
    Ok(())
}

/// Nothing to refuse: macOS takes exclusive locks as Linux does (`flock`), both scopes.
#[cfg(not(windows))]
fn refuse_locks(_options: &RunOptions) -> anyhow::Result<()> {
    Ok(())
}
