//! `cleanroom doctor`: what this machine allows, and which containment and protection `run`
//! will use here, and why. The first thing a user runs when something is refused.
//!
//! One report on every platform ([`DoctorReport`]): the choices `run` makes (containment,
//! protection, `--net none`, the IPC and temp dirs a run gets) and the `--protect home` policy
//! are the same fields everywhere; what the machine allows is the platform's own evidence
//! ([`Machine`], whose fields the JSON shows at the top level): on Linux the kernel, Landlock,
//! namespaces, cgroups, pidfd and the subreaper (`linux.rs`); on Windows Job Objects (nested
//! too), the state namespace, the temp dir of a run and file locks (`windows.rs`). The platform
//! code is the one private `os` child picked below.
//!
//! Invariant: every answer is measured by trying the real operation (a system call, a `mkdir`
//! of a uniquely named probe cgroup that is removed at once, an `unshare` in a forked child that
//! then exits, a Job Object that gets a process and kills it), never inferred from version
//! numbers or configuration files, and probing leaves nothing behind and changes nothing in the
//! calling process.

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod os;
#[cfg(windows)]
#[path = "windows.rs"]
mod os;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

#[cfg(windows)]
pub use os::OuterJob;
#[cfg(target_os = "linux")]
pub use os::{CgroupCheck, LandlockCheck};
pub use os::{Machine, PolicyRule};

/// The answer to "can this machine do X", with the evidence.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// Whether it works.
    pub available: bool,
    /// What was tried and what the system said.
    pub detail: String,
}

impl Check {
    fn from_probe(what: &str, result: std::io::Result<()>) -> Check {
        match result {
            Ok(()) => Check {
                available: true,
                detail: format!("{what}: ok"),
            },
            Err(e) => Check {
                available: false,
                detail: format!("{what}: {e}"),
            },
        }
    }
}

/// A choice `run` makes on this machine, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    /// The choice.
    pub choice: String,
    /// Why.
    pub reason: String,
}

/// Everything `cleanroom doctor` reports.
#[derive(Clone, Debug, Serialize)]
pub struct DoctorReport {
    /// `cleanroom-doctor`.
    pub format: &'static str,
    /// Version of this report's shape.
    pub version: u32,
    /// What this machine allows, as the platform measures it (its fields are the report's own
    /// in the JSON: `kernel`, `euid`, `landlock`, … on Linux; `windows`, `user_sid`,
    /// `job_object`, … on Windows).
    #[serde(flatten)]
    pub machine: Machine,
    /// The containment `run` uses: `cgroup` or `session` (Linux), `job-object` (Windows), or
    /// `none` when runs cannot be contained (they fail).
    pub containment: Decision,
    /// The enforcement `--protect home` gets: `full`, `partial` or `none`.
    pub protection: Decision,
    /// Whether `--net none` works: `available` or `unavailable`.
    pub net_none: Decision,
    /// Whether runs get a private `/dev/shm` (a tmpfs in a private mount namespace) and IPC
    /// namespace: `private` or `host` (Windows has neither: `host`).
    pub dev_shm: Decision,
    /// Whether runs get a private `/tmp` and `/var/tmp` (an overlay of the host's, writes in the
    /// run's root): `private` or `host`; on Windows `root` (TEMP and TMP point into the run's
    /// root), or `none` when no root can be made.
    pub tmp: Decision,
    /// The rules `--protect home` gives a run started here: which paths are read-only and
    /// which writable, and why (the run's root shown as `<root>`); none where there is no
    /// protection (Windows).
    pub home_policy: Vec<PolicyRule>,
    /// The working directory those rules were computed for.
    pub cwd: Option<PathBuf>,
    /// What such a run would warn about (no home found, ...), or why no policy could be built.
    pub home_policy_warnings: Vec<String>,
}

/// What the platform's probes found and what `run` makes of it: the report but for its
/// platform-neutral frame.
struct Findings {
    machine: Machine,
    containment: Decision,
    protection: Decision,
    net_none: Decision,
    dev_shm: Decision,
    tmp: Decision,
}

/// Probes this machine, for runs whose roots go in the namespace at `namespace` (the temp dir
/// of a run is tried in a root made there for the probe, and removed).
pub fn probe(namespace: &Path) -> DoctorReport {
    let Findings {
        machine,
        containment,
        protection,
        net_none,
        dev_shm,
        tmp,
    } = os::probe(namespace);
    let cwd = std::env::current_dir().ok();
    let (home_policy, home_policy_warnings) = match &cwd {
        Some(cwd) => os::home_policy(cwd),
        None => (
            Vec::new(),
            vec!["the working directory cannot be read".into()],
        ),
    };
    DoctorReport {
        format: "cleanroom-doctor",
        version: 1,
        machine,
        containment,
        protection,
        net_none,
        dev_shm,
        tmp,
        home_policy,
        cwd,
        home_policy_warnings,
    }
}

fn yes_no(check: &Check) -> &'static str {
    if check.available {
        "yes"
    } else {
        "no"
    }
}

impl fmt::Display for DoctorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The header line, then "this machine" and one line per probe.
        write!(f, "{}", self.machine)?;
        writeln!(f)?;
        writeln!(f, "cleanroom run will use")?;
        let decisions = [
            ("containment", &self.containment),
            ("protect home", &self.protection),
            ("--net none", &self.net_none),
            (os::DEV_SHM_LABEL, &self.dev_shm),
            (os::TMP_LABEL, &self.tmp),
        ];
        for (name, decision) in decisions {
            writeln!(f, "  {name:<19} {}: {}", decision.choice, decision.reason)?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "a run from {} with --protect home (most specific path wins)",
            self.cwd
                .as_deref()
                .map_or_else(|| "?".into(), |p| p.display().to_string())
        )?;
        for rule in &self.home_policy {
            writeln!(f, "  {}", os::rule_line(rule))?;
        }
        for warning in &self.home_policy_warnings {
            writeln!(f, "  warning: {warning}")?;
        }
        Ok(())
    }
}
