//! The options of `cleanroom run` that also come from the environment and from `cleanroom.toml`:
//! one definition per option, so a flag, its `CLEANROOM_*` variable and its config key cannot
//! drift apart. The field name is both the long flag (`leak_grace` is `--leak-grace`) and the
//! config key (`leak-grace`); adding an option is one field here and one line in
//! [`RunOptions::apply`].
//!
//! Precedence is the order of application: the library's defaults (`RunConfig::builder`),
//! then the config file, then the environment, then flags (clap prefers a flag to its
//! variable). A list given by a higher layer replaces the lower layer's list; a switch such as
//! `--drop-secrets` can only be turned on by any layer. `--keep-root` is a value (`never` from a
//! higher layer turns a lower layer's `always` off).
//!
//! Every platform reads the same options; the options only Linux has a backend for (signals,
//! protection, network isolation, private /tmp; machine-scope locks Linux and macOS) are
//! applied, or refused with a line that names them, by the platform's one private `os` child
//! (`options/linux.rs`, or `options/refused.rs` on Windows and macOS): never silently ignored.

#[cfg(target_os = "linux")]
#[path = "options/linux.rs"]
mod os;
#[cfg(not(target_os = "linux"))]
#[path = "options/refused.rs"]
mod os;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use clap::ValueEnum;
use cleanroom::contain::ContainMode;
use cleanroom::lock::LockScope;
use cleanroom::run::{KeepRoot, LeakPolicy, RunBuilder};
use serde::Deserialize;

/// A duration option (`--grace 10s`, `grace = "10s"` or `grace = 10`); a bare number is seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationArg(pub Duration);

impl FromStr for DurationArg {
    type Err = String;

    fn from_str(text: &str) -> Result<DurationArg, String> {
        refuse_negative(text)?;
        cleanroom::parse_duration(text)
            .map(DurationArg)
            .map_err(|e| e.to_string())
    }
}

/// A value starting with `-`: a negative duration (`-1`, `-.5s`) is refused as such, anything
/// else (`-v`, `--`, `--keep-root`) as the option it is, taken for the value because the value
/// was left out. The duration flags take any word starting with `-` as their value, so that
/// `--timeout -1` is refused as negative rather than as an unknown option `-1`.
fn refuse_negative(text: &str) -> Result<(), String> {
    let Some(rest) = text.trim_start().strip_prefix('-') else {
        return Ok(());
    };
    if rest.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        Err(format!(
            "invalid duration {text:?}: durations cannot be negative (0 is the smallest)"
        ))
    } else if text == "--" {
        Err("a value is required, but none was supplied (\"--\" came next)".into())
    } else {
        Err(format!(
            "a value is required, but none was supplied ({text:?} is an option, not a duration)"
        ))
    }
}

/// A limit (`--timeout`): a duration where `0` means no limit, as in timeout(1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitArg(pub Option<Duration>);

impl FromStr for LimitArg {
    type Err = String;

    fn from_str(text: &str) -> Result<LimitArg, String> {
        refuse_negative(text)?;
        cleanroom::duration::parse_limit(text)
            .map(LimitArg)
            .map_err(|e| e.to_string())
    }
}

/// `--signal SIG`: a signal name or number, as kill(1) takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalArg(pub os::Signal);

impl FromStr for SignalArg {
    type Err = String;

    fn from_str(text: &str) -> Result<SignalArg, String> {
        os::parse_signal(text).map(SignalArg)
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

/// `--keep-root-count N`: at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountArg(pub u32);

impl FromStr for CountArg {
    type Err = String;

    fn from_str(text: &str) -> Result<CountArg, String> {
        match text.trim().parse::<u32>() {
            Ok(0) => Err("0 would keep no root: use --keep-root=never to keep none".into()),
            Ok(n) => Ok(CountArg(n)),
            Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => {
                Err(format!("{text:?} is too large (at most {})", u32::MAX))
            }
            Err(_) => Err(format!(
                "{text:?} is not a whole number of roots (1 or more)"
            )),
        }
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

impl ConfigValue for CountArg {
    const EXPECTED: &'static str = "a number of roots such as 3";
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
deserialize_via_from_str!(CountArg, DurationArg, LimitArg, PinArg, SignalArg);

/// `--keep-root[=WHEN]`; `keep-root = "WHEN"` (or `true` for always, `false` for never).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KeepRootArg {
    /// Keep it (a plain `--keep-root`); `cleanroom gc --kept` reclaims it.
    Always,
    /// Keep it when the run fails (exit status not 0); the newest --keep-root-count stay.
    OnFailure,
    /// Remove it.
    Never,
}

impl<'de> Deserialize<'de> for KeepRootArg {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<KeepRootArg, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Switch(bool),
            When(String),
        }
        let expected = "true, false, \"always\", \"on-failure\" or \"never\"";
        match Raw::deserialize(d)
            .map_err(|_| serde::de::Error::custom(format!("expected {expected}")))?
        {
            Raw::Switch(true) => Ok(KeepRootArg::Always),
            Raw::Switch(false) => Ok(KeepRootArg::Never),
            Raw::When(when) => KeepRootArg::named(&when).ok_or_else(|| {
                serde::de::Error::custom(format!("unknown value {when:?}, expected {expected}"))
            }),
        }
    }
}

impl KeepRootArg {
    /// The value `word` names (`always`, `on-failure`, `never`), if it names one.
    pub fn named(word: &str) -> Option<KeepRootArg> {
        match word {
            "always" => Some(KeepRootArg::Always),
            "on-failure" => Some(KeepRootArg::OnFailure),
            "never" => Some(KeepRootArg::Never),
            _ => None,
        }
    }
}

/// `args` with the first `--keep-root` and a value word right after it (`on-failure`) joined
/// into one (`--keep-root=on-failure`), so that both spellings mean the same while a plain
/// `--keep-root` still leaves the next word to the command (`--keep-root cargo test`). The
/// first `--keep-root` is the option (the command's own words come after the options); a
/// command named like a value is reached with `--keep-root=always never` or `--keep-root --
/// never`.
pub fn join_keep_root_value(mut args: Vec<OsString>) -> Vec<OsString> {
    let at = args.iter().position(|a| a == "--keep-root");
    let value = at.and_then(|i| args.get(i + 1)).and_then(|v| v.to_str());
    if let (Some(i), Some(value)) = (at, value) {
        if KeepRootArg::named(value).is_some() {
            let joined = OsString::from(format!("--keep-root={value}"));
            args.splice(i..i + 2, [joined]);
        }
    }
    args
}

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
    #[arg(
        long,
        value_name = "D",
        env = "CLEANROOM_TIMEOUT",
        allow_hyphen_values = true
    )]
    pub timeout: Option<LimitArg>,
    /// The first signal sent to the run when --timeout fires (a name or number) [default: TERM]
    #[arg(long, value_name = "SIG", env = "CLEANROOM_SIGNAL")]
    pub signal: Option<SignalArg>,
    /// Time between TERM and KILL on timeout or interrupt (0: KILL at once) [default: 10s]
    #[arg(
        long,
        value_name = "D",
        env = "CLEANROOM_GRACE",
        allow_hyphen_values = true
    )]
    pub grace: Option<DurationArg>,
    /// Time between TERM and KILL for processes that outlive the command [default: 500ms]
    #[arg(
        long,
        value_name = "D",
        env = "CLEANROOM_LEAK_GRACE",
        allow_hyphen_values = true
    )]
    pub leak_grace: Option<DurationArg>,
    /// What leaked processes do to the exit status [default: warn]
    #[arg(long, value_enum, env = "CLEANROOM_ON_LEAK")]
    pub on_leak: Option<OnLeakArg>,
    /// Keep the root afterwards and print where it is: always (a plain --keep-root), on-failure
    /// (when the exit status is not 0), never [default: never]
    #[arg(long, value_enum, value_name = "WHEN", require_equals = true)]
    pub keep_root: Option<Option<KeepRootArg>>,
    /// How many roots kept on failure stay: the newest N; gc reclaims older ones [default: 3]
    #[arg(long, value_name = "N")]
    pub keep_root_count: Option<CountArg>,
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
    #[arg(
        long,
        value_name = "D",
        env = "CLEANROOM_LOCK_TIMEOUT",
        allow_hyphen_values = true
    )]
    pub lock_timeout: Option<DurationArg>,
    /// Where --exclusive locks live [default: user]
    #[arg(long, value_enum, env = "CLEANROOM_LOCK_SCOPE")]
    pub lock_scope: Option<LockScopeArg>,
    /// Keep P (beneath /tmp or /var/tmp) the host's inside the run's private /tmp (repeatable)
    #[arg(long, value_name = "P")]
    pub share_tmp: Option<Vec<PathBuf>>,
    /// Give the command the host's /tmp and /var/tmp instead of private ones (/dev/shm and IPC
    /// stay private, so a root command still lacks CAP_SYS_ADMIN: use --protect off for that)
    #[arg(long)]
    pub host_tmp: bool,
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

/// Refuses, before anything starts, an option this platform has no backend for, on the values
/// the run would use (the flags' and variables' over the config file's), naming it.
pub fn refuse_unavailable(
    flags: &RunOptions,
    file: Option<(&Path, &RunOptions)>,
) -> anyhow::Result<()> {
    os::refuse(flags, file)
}

impl RunOptions {
    /// Sets on `builder` every option this layer gives; the rest keeps the lower layers' values
    /// (what this platform cannot honour was refused by [`refuse_unavailable`]).
    pub fn apply(mut self, b: RunBuilder) -> anyhow::Result<RunBuilder> {
        let mut b = os::apply(&mut self, b)?;
        b = set(b, self.timeout.map(|l| l.0), RunBuilder::timeout);
        b = set(b, self.grace.map(|d| d.0), RunBuilder::grace);
        b = set(b, self.leak_grace.map(|d| d.0), RunBuilder::leak_grace);
        b = set(b, self.on_leak.map(LeakPolicy::from), RunBuilder::on_leak);
        let keep_root = self
            .keep_root
            .map(|when| when.unwrap_or(KeepRootArg::Always));
        b = set(b, keep_root.map(KeepRoot::from), RunBuilder::keep_root);
        b = set(
            b,
            self.keep_root_count.map(|c| c.0),
            RunBuilder::keep_root_count,
        );
        let pins = self.pin.map(|pins| pins.into_iter().map(|p| p.0));
        b = set(b, pins, RunBuilder::pins);
        b = set(b, self.contain.map(ContainMode::from), RunBuilder::contain);
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
        Ok(b)
    }

    /// Makes relative paths relative to `base` (a config file's directory) instead of the
    /// working directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        for paths in [
            &mut self.protect_path,
            &mut self.allow_write,
            &mut self.share_tmp,
        ]
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

impl From<KeepRootArg> for KeepRoot {
    fn from(arg: KeepRootArg) -> KeepRoot {
        match arg {
            KeepRootArg::Always => KeepRoot::Always,
            KeepRootArg::OnFailure => KeepRoot::OnFailure,
            KeepRootArg::Never => KeepRoot::Never,
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

impl From<ContainArg> for ContainMode {
    fn from(arg: ContainArg) -> ContainMode {
        match arg {
            ContainArg::Auto => ContainMode::Auto,
            ContainArg::Cgroup => ContainMode::Cgroup,
            ContainArg::Session => ContainMode::Session,
        }
    }
}
