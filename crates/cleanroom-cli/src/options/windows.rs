//! The options Windows has no backend for yet, refused with a line that names each one (exit
//! 125 before anything starts), never silently ignored: the timeout's signal, protection beyond
//! `off`, network isolation, machine-scope locks and the private /tmp. What Windows does instead
//! is in docs/windows.md.

use anyhow::bail;
use cleanroom::run::RunBuilder;

use super::{ContainArg, LockScopeArg, NetArg, ProtectArg, RunOptions};

/// `--signal`'s word as given: Windows has no signals to send (see [`apply`]).
pub type Signal = String;

/// Keeps the word; [`apply`] refuses it with the option's name.
pub fn parse_signal(text: &str) -> Result<Signal, String> {
    Ok(text.to_string())
}

/// Refuses the first option this layer gives that Windows cannot honour; applies nothing (the
/// options Windows has are set by the caller).
pub fn apply(options: &mut RunOptions, b: RunBuilder) -> anyhow::Result<RunBuilder> {
    const NO_PROTECTION: &str = "Windows has no write protection backend yet (Landlock is \
                                 Linux-only); use --protect off, or run on Linux";
    const NO_PRIVATE_TMP: &str = "Windows has no private /tmp (TEMP and TMP already point \
                                  inside the root)";
    let given = |list: &Option<Vec<_>>| list.as_ref().is_some_and(|l: &Vec<_>| !l.is_empty());
    if let Some(signal) = &options.signal {
        bail!(
            "--signal {}: not available on Windows: a timeout terminates the run's Job Object \
             (there are no signals to send first)",
            signal.0
        );
    }
    match options.contain {
        Some(ContainArg::Cgroup) => bail!("--contain cgroup: {}", JOB_OBJECT),
        Some(ContainArg::Session) => bail!("--contain session: {}", JOB_OBJECT),
        Some(ContainArg::Auto) | None => {}
    }
    match options.protect {
        Some(ProtectArg::Home) => bail!("--protect home: {NO_PROTECTION}"),
        Some(ProtectArg::Strict) => bail!("--protect strict: {NO_PROTECTION}"),
        Some(ProtectArg::Off) | None => {}
    }
    if given(&options.protect_path) {
        bail!("--protect-path: {NO_PROTECTION}");
    }
    if given(&options.allow_write) {
        bail!("--allow-write: {NO_PROTECTION}");
    }
    if options.require_protection {
        bail!("--require-protection: {NO_PROTECTION}");
    }
    if let Some(NetArg::None) = options.net {
        bail!("--net none: Windows has no network isolation backend yet; use --net host");
    }
    if let Some(LockScopeArg::Machine) = options.lock_scope {
        bail!(
            "--lock-scope machine: Windows has no lock directory shared by every user (exclusive \
             locks are the user's own); use --lock-scope user"
        );
    }
    if given(&options.share_tmp) {
        bail!("--share-tmp: {NO_PRIVATE_TMP}");
    }
    if options.host_tmp {
        bail!("--host-tmp: {NO_PRIVATE_TMP}");
    }
    Ok(b)
}

/// Why `--contain` takes only `auto` here.
const JOB_OBJECT: &str = "not available on Windows: every run is contained by a Job Object \
                          (use --contain auto)";
