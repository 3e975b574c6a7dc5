//! The options of `cleanroom run` that also come from the environment and from `cleanroom.toml`:
//! one definition per option, so a flag, its `CLEANROOM_*` variable and its config key cannot
//! drift apart. The field name is both the long flag (`leak_grace` is `--leak-grace`) and the
//! config key (`leak-grace`); adding an option is one field here and one line in
//! [`RunOptions::apply`].
//!
//! Precedence is the order of application: the library's defaults (`RunConfig::builder`),
//! then the config file, then the environment, then flags (clap prefers a flag to its
//! variable). A list given by a higher layer replaces the lower layer's list; a switch such as
//! `--drop-secrets` can only be turned on by any layer.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use clap::ValueEnum;
use cleanroom::contain::ContainMode;
use cleanroom::lock::LockScope;
use cleanroom::protect::{NetMode, ProtectMode};
use cleanroom::run::{LeakPolicy, RunBuilder};
use serde::Deserialize;

/// A duration option (`--grace 10s`, `grace = "10s"` or `grace = 10`); a bare number is seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationArg(pub Duration);

impl FromStr for DurationArg {
    type Err = String;

    fn from_str(text: &str) -> Result<DurationArg, String> {
        cleanroom::parse_duration(text)
            .map(DurationArg)
            .map_err(|e| e.to_string())
    }
}

/// A limit (`--timeout`): a duration where `0` means no limit, as in timeout(1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitArg(pub Option<Duration>);

impl FromStr for LimitArg {
    type Err = String;

    fn from_str(text: &str) -> Result<LimitArg, String> {
        cleanroom::duration::parse_limit(text)
            .map(LimitArg)
            .map_err(|e| e.to_string())
    }
}

/// `--signal SIG`: a signal name or number, as kill(1) takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalArg(pub rustix::process::Signal);

impl FromStr for SignalArg {
    type Err = String;

    fn from_str(text: &str) -> Result<SignalArg, String> {
        cleanroom::run::parse_signal(text).map(SignalArg)
    }
}

/// `--pin VAR`: a variable name, checked when the flag or the config key is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinArg(pub String);

impl FromStr for PinArg {
    type Err = String;

    fn from_str(var: &str) -> Result<PinArg, String> {
        cleanroom::env::validate_pin(var).map_err(|e| e.to_string())?;
        Ok(PinArg(var.to_string()))
    }
}

/// A value a config file may write as a string or a number, read through the type's `FromStr`
/// so that `timeout = 90` and `timeout = "90"` mean what `--timeout 90` means.
trait ConfigValue: FromStr<Err = String> {
    /// What serde's errors say was expected.
    const EXPECTED: &'static str;
}

impl ConfigValue for DurationArg {
    const EXPECTED: &'static str = "a duration such as \"90s\", \"1h30m\" or a number of seconds";
}

impl ConfigValue for LimitArg {
    const EXPECTED: &'static str = DurationArg::EXPECTED;
}

impl ConfigValue for SignalArg {
    const EXPECTED: &'static str = "a signal such as \"TERM\", \"INT\" or a number";
}

impl ConfigValue for PinArg {
    const EXPECTED: &'static str = "a variable name such as \"CODEX_HOME\"";
}

struct TextOrNumber<T>(std::marker::PhantomData<T>);

impl<T: ConfigValue> serde::de::Visitor<'_> for TextOrNumber<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(T::EXPECTED)
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<T, E> {
        text.parse().map_err(E::custom)
    }

    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<T, E> {
        self.visit_str(&n.to_string())
    }

    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<T, E> {
        self.visit_str(&n.to_string())
    }

    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<T, E> {
        self.visit_str(&n.to_string())
    }
}

macro_rules! deserialize_via_from_str {
    ($($ty:ty),*) => {$(
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
                d.deserialize_any(TextOrNumber(std::marker::PhantomData))
            }
        }
    )*};
}
deserialize_via_from_str!(DurationArg, LimitArg, PinArg, SignalArg);

/// `--protect`.
#[derive(Clone, Copy, Debug, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProtectArg {
    /// No kernel policy.
    Off,
    /// The real home and --protect-path paths are read-only.
    Home,
    /// Writes only to the root, the working directory, devices and --allow-write paths.
    Strict,
}

/// `--net`.
#[derive(Clone, Copy, Debug, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetArg {
    /// The host's network.
    Host,
    /// Only loopback, in a new network namespace.
    None,
}

/// `--contain`.
#[derive(Clone, Copy, Debug, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainArg {
    /// The strongest mechanism available (cgroup when possible, else session).
    Auto,
    /// A cgroup v2 leaf, or fail.
    Cgroup,
    /// Subreaper + process group only.
    Session,
}

/// `--on-leak`.
#[derive(Clone, Copy, Debug, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnLeakArg {
    /// Kill and report leaked processes; exit with the command's status.
    Warn,
    /// Kill and report them; exit 123 if the command itself succeeded.
    Fail,
}

/// `--lock-scope`.
#[derive(Clone, Copy, Debug, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockScopeArg {
    /// Locks in the user's namespace.
    User,
    /// Locks shared by every user of the machine.
    Machine,
}

/// Options of `cleanroom run` that a config file or the environment may also set.
/// `[default: …]` in the help is the library's default (checked by a test).
#[derive(clap::Args, Deserialize, Debug, Default, Clone)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RunOptions {
    /// Stop the run after D: --signal, --grace, then KILL; exit 124, or 137 when KILL was needed
    /// (a bare number is seconds; 0: no limit) [default: 0]
    #[arg(long, value_name = "D", env = "CLEANROOM_TIMEOUT")]
    pub timeout: Option<LimitArg>,
    /// The first signal sent to the run when --timeout fires (a name or number) [default: TERM]
    #[arg(long, value_name = "SIG", env = "CLEANROOM_SIGNAL")]
    pub signal: Option<SignalArg>,
    /// Time between TERM and KILL on timeout or interrupt (0: KILL at once) [default: 10s]
    #[arg(long, value_name = "D", env = "CLEANROOM_GRACE")]
    pub grace: Option<DurationArg>,
    /// Time between TERM and KILL for processes that outlive the command [default: 500ms]
    #[arg(long, value_name = "D", env = "CLEANROOM_LEAK_GRACE")]
    pub leak_grace: Option<DurationArg>,
    /// What leaked processes do to the exit status [default: warn]
    #[arg(long, value_enum, env = "CLEANROOM_ON_LEAK")]
    pub on_leak: Option<OnLeakArg>,
    /// Keep the root afterwards and print where it is
    #[arg(long)]
    pub keep_root: bool,
    /// Give VAR its own directory inside the root (repeatable)
    #[arg(long, value_name = "VAR")]
    pub pin: Option<Vec<PinArg>>,
    /// Containment mechanism [default: auto]
    #[arg(long, value_enum, env = "CLEANROOM_CONTAIN")]
    pub contain: Option<ContainArg>,
    /// Kernel write protection [default: home]
    #[arg(long, value_enum, env = "CLEANROOM_PROTECT")]
    pub protect: Option<ProtectArg>,
    /// Also make P read-only for the run (repeatable)
    #[arg(long, value_name = "P")]
    pub protect_path: Option<Vec<PathBuf>>,
    /// In strict mode, also allow writes to P (repeatable)
    #[arg(long, value_name = "P")]
    pub allow_write: Option<Vec<PathBuf>>,
    /// Network isolation [default: host]
    #[arg(long, value_enum, env = "CLEANROOM_NET")]
    pub net: Option<NetArg>,
    /// Refuse to run (exit 125) when the kernel cannot enforce the protection asked for
    #[arg(long)]
    pub require_protection: bool,
    /// Remove credential-looking variables (names with KEY, SECRET, TOKEN, PASSWORD, PAT, JWT,
    /// AUTH...; URLs with a user or password) from the command's environment
    #[arg(long)]
    pub drop_secrets: bool,
    /// Keep NAME even with --drop-secrets (repeatable)
    #[arg(long, value_name = "NAME")]
    pub keep_env: Option<Vec<String>>,
    /// Pass none of the host's tool configuration (git, npm, pip) through: a hermetic home
    #[arg(long)]
    pub pure_home: bool,
    /// Also pass the real ~/.netrc (credentials) through, read-only
    #[arg(long)]
    pub pass_netrc: bool,
    /// Wait for, then hold, the exclusive lock NAME for the whole run (repeatable or
    /// comma-separated)
    #[arg(
        long,
        value_name = "NAME",
        env = "CLEANROOM_EXCLUSIVE",
        value_delimiter = ','
    )]
    pub exclusive: Option<Vec<String>>,
    /// Give up waiting for --exclusive locks after D (exit 125; 0: do not wait) [default: wait
    /// forever]
    #[arg(long, value_name = "D", env = "CLEANROOM_LOCK_TIMEOUT")]
    pub lock_timeout: Option<DurationArg>,
    /// Where --exclusive locks live [default: user]
    #[arg(long, value_enum, env = "CLEANROOM_LOCK_SCOPE")]
    pub lock_scope: Option<LockScopeArg>,
}

/// `builder.method(value)` when the layer gives a value.
fn set<T>(
    builder: RunBuilder,
    value: Option<T>,
    method: fn(RunBuilder, T) -> RunBuilder,
) -> RunBuilder {
    match value {
        Some(value) => method(builder, value),
        None => builder,
    }
}

impl RunOptions {
    /// Sets on `builder` every option this layer gives; the rest keeps the lower layers' values.
    pub fn apply(self, mut b: RunBuilder) -> RunBuilder {
        b = set(b, self.timeout.map(|l| l.0), RunBuilder::timeout);
        b = set(b, self.signal.map(|s| s.0), RunBuilder::timeout_signal);
        b = set(b, self.grace.map(|d| d.0), RunBuilder::grace);
        b = set(b, self.leak_grace.map(|d| d.0), RunBuilder::leak_grace);
        b = set(b, self.on_leak.map(LeakPolicy::from), RunBuilder::on_leak);
        b = set(b, self.keep_root.then_some(true), RunBuilder::keep_root);
        let pins = self.pin.map(|pins| pins.into_iter().map(|p| p.0));
        b = set(b, pins, RunBuilder::pins);
        b = set(b, self.contain.map(ContainMode::from), RunBuilder::contain);
        b = set(b, self.protect.map(ProtectMode::from), RunBuilder::protect);
        b = set(b, self.protect_path, RunBuilder::protect_paths);
        b = set(b, self.allow_write, RunBuilder::allow_write);
        b = set(b, self.net.map(NetMode::from), RunBuilder::net);
        b = set(
            b,
            self.require_protection.then_some(true),
            RunBuilder::require_protection,
        );
        b = set(
            b,
            self.drop_secrets.then_some(true),
            RunBuilder::drop_secrets,
        );
        b = set(b, self.keep_env, RunBuilder::keep_env);
        b = set(b, self.pure_home.then_some(true), RunBuilder::pure_home);
        b = set(b, self.pass_netrc.then_some(true), RunBuilder::pass_netrc);
        b = set(b, self.exclusive, RunBuilder::exclusive);
        b = set(
            b,
            self.lock_timeout.map(|d| Some(d.0)),
            RunBuilder::lock_timeout,
        );
        b = set(
            b,
            self.lock_scope.map(LockScope::from),
            RunBuilder::lock_scope,
        );
        b
    }

    /// Makes relative paths relative to `base` (a config file's directory) instead of the
    /// working directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        for paths in [&mut self.protect_path, &mut self.allow_write]
            .into_iter()
            .flatten()
        {
            for path in paths.iter_mut() {
                if path.is_relative() {
                    *path = base.join(&*path);
                }
            }
        }
    }
}

impl From<OnLeakArg> for LeakPolicy {
    fn from(arg: OnLeakArg) -> LeakPolicy {
        match arg {
            OnLeakArg::Warn => LeakPolicy::Warn,
            OnLeakArg::Fail => LeakPolicy::Fail,
        }
    }
}

impl From<ContainArg> for ContainMode {
    fn from(arg: ContainArg) -> ContainMode {
        match arg {
            ContainArg::Auto => ContainMode::Auto,
            ContainArg::Cgroup => ContainMode::Cgroup,
            ContainArg::Session => ContainMode::Session,
        }
    }
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

impl From<LockScopeArg> for LockScope {
    fn from(arg: LockScopeArg) -> LockScope {
        match arg {
            LockScopeArg::User => LockScope::User,
            LockScopeArg::Machine => LockScope::Machine,
        }
    }
}
