//! The options only Linux has a backend for, applied: the timeout's signal, protection
//! (Landlock), network isolation, machine-scope locks and the private /tmp.

use std::path::Path;

use cleanroom::protect::{NetMode, ProtectMode};
use cleanroom::run::RunBuilder;

use super::{set, NetArg, ProtectArg, RunOptions};

/// A signal, as the library sends it.
pub type Signal = rustix::process::Signal;

/// `--signal SIG`: a name or number, as kill(1) takes it.
pub use cleanroom::run::parse_signal;

/// Nothing to refuse: Linux has a backend for every option.
pub fn refuse(_flags: &RunOptions, _file: Option<(&Path, &RunOptions)>) -> anyhow::Result<()> {
    Ok(())
}

/// Sets on `b` the Linux-only options this layer gives.
pub fn apply(options: &mut RunOptions, mut b: RunBuilder) -> anyhow::Result<RunBuilder> {
    b = set(
        b,
        options.signal.take().map(|s| s.0),
        RunBuilder::timeout_signal,
    );
    b = set(
        b,
        options.protect.take().map(ProtectMode::from),
        RunBuilder::protect,
    );
    b = set(b, options.protect_path.take(), RunBuilder::protect_paths);
    b = set(b, options.allow_write.take(), RunBuilder::allow_write);
    b = set(b, options.net.take().map(NetMode::from), RunBuilder::net);
    b = set(
        b,
        options.require_protection.then_some(true),
        RunBuilder::require_protection,
    );
    b = set(b, options.share_tmp.take(), RunBuilder::share_tmp);
    b = set(
        b,
        options.host_tmp.then_some(false),
        RunBuilder::private_tmp,
    );
    Ok(b)
}

impl From<ProtectArg> for ProtectMode {
    fn from(arg: ProtectArg) -> ProtectMode {
        match arg {
            ProtectArg::Off => ProtectMode::Off,
            ProtectArg::Home => ProtectMode::Home,
            ProtectArg::Strict => ProtectMode::Strict,
        }
    }
}

impl From<NetArg> for NetMode {
    fn from(arg: NetArg) -> NetMode {
        match arg {
            NetArg::Host => NetMode::Host,
            NetArg::None => NetMode::None,
        }
    }
}
