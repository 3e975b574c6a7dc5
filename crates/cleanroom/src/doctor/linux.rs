//! `cleanroom doctor` on Linux (the `os` module of `doctor`): the kernel, Landlock, user and
//! network namespaces, cgroup v2, pidfd and the subreaper, each tried in a child or on a probe
//! cgroup removed at once; the private `/dev/shm` and `/tmp` tried in a child (the latter in a
//! root of the namespace made for the probe); and the `--protect home` policy of a run from the
//! working directory.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{yes_no, Check, Decision, Findings};
use crate::protect::{self, linux, Enforcement, ProtectMode};

/// A rule of the `--protect home` policy.
pub use crate::protect::Rule as PolicyRule;

/// How the decisions about /dev/shm and /tmp are named in the text.
pub const DEV_SHM_LABEL: &str = "/dev/shm, IPC";
/// See [`DEV_SHM_LABEL`].
pub const TMP_LABEL: &str = "/tmp, /var/tmp";

/// Landlock support.
#[derive(Clone, Debug, Serialize)]
pub struct LandlockCheck {
    /// The kernel's Landlock ABI, if Landlock is available.
    pub abi: Option<u32>,
    /// Why Landlock is unavailable, or the ABI's summary.
    pub detail: String,
    /// What the ABI provides, one entry per level up to the kernel's.
    pub features: Vec<String>,
}

/// cgroup v2 support.
#[derive(Clone, Debug, Serialize)]
pub struct CgroupCheck {
    /// Where cgroup2 is mounted (from /proc/self/mountinfo), if it is.
    pub mount: Option<PathBuf>,
    /// Our own cgroup (the `0::` line of /proc/self/cgroup).
    pub own: Option<String>,
    /// Whether a child cgroup could be created (and removed) under our own.
    pub can_create: bool,
    /// What was tried and what the kernel said.
    pub detail: String,
}

/// What this Linux machine allows.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// The kernel release (`uname -r`).
    pub kernel: String,
    /// The effective user id the probes ran as.
    pub euid: u32,
    /// Landlock (write protection).
    pub landlock: LandlockCheck,
    /// Creating a user namespace as this user.
    pub user_namespaces: Check,
    /// The network isolation of `--net none` (a network namespace with loopback up).
    pub network_namespace: Check,
    /// cgroup v2.
    pub cgroup: CgroupCheck,
    /// `pidfd_open`.
    pub pidfd: Check,
    /// `PR_SET_CHILD_SUBREAPER`.
    pub subreaper: Check,
}

/// Probes this machine, for runs whose roots go in the namespace at `namespace` (the private
/// `/tmp` is tried in a root made there for the probe).
pub(super) fn probe(namespace: &Path) -> Findings {
    let landlock = probe_landlock();
    let user_namespaces = Check::from_probe(
        "unshare(CLONE_NEWUSER) in a child",
        linux::probe_in_child(linux::Probe::UserNs),
    );
    let network_namespace = Check::from_probe(
        "new network namespace with lo up, in a child",
        linux::probe_in_child(linux::Probe::NetNs),
    );
    let cgroup = probe_cgroup();
    let pidfd = Check::from_probe("pidfd_open(self)", linux::probe_pidfd());
    let subreaper = Check::from_probe(
        "prctl(PR_SET_CHILD_SUBREAPER) in a child",
        linux::probe_in_child(linux::Probe::Subreaper),
    );

    let containment = if cgroup.can_create {
        Decision {
            choice: "cgroup".into(),
            reason: "a child cgroup can be created: membership is exact and cgroup.kill ends \
                     every process of the run"
                .into(),
        }
    } else {
        Decision {
            choice: "session".into(),
            reason: format!(
                "no child cgroup ({}); the runner is a child subreaper{} and the command a new \
                 session, so escaped processes are still re-parented to it and killed",
                cgroup.detail,
                if subreaper.available {
                    ""
                } else {
                    " (UNAVAILABLE here)"
                }
            ),
        }
    };
    let protection = match landlock.abi {
        Some(abi) => {
            let (enforcement, reason) = protect::enforcement_for_abi(abi);
            Decision {
                choice: enforcement.to_string(),
                reason: reason.unwrap_or_else(|| {
                    format!(
                        "Landlock ABI {abi} makes the real home and --protect-path read-only, \
                         truncation included"
                    )
                }),
            }
        }
        None => Decision {
            choice: Enforcement::None.to_string(),
            reason: format!(
                "{}; `run` warns and continues, --require-protection refuses",
                landlock.detail
            ),
        },
    };
    let net_none = if network_namespace.available {
        Decision {
            choice: "available".into(),
            reason: if rustix::process::geteuid().is_root() {
                "a new network namespace with only loopback, up".into()
            } else {
                "a user namespace (own uid mapped to itself) with a network namespace, only \
                 loopback, up"
                    .into()
            },
        }
    } else {
        Decision {
            choice: "unavailable".into(),
            reason: format!("--net none is refused: {}", network_namespace.detail),
        }
    };

    let dev_shm = match linux::probe_in_child(linux::Probe::Namespaces {
        mount: true,
        net: false,
        user: None,
    }) {
        Ok(()) => Decision {
            choice: "private".into(),
            reason: "a fresh tmpfs in a private mount namespace per run, and a private IPC \
                     namespace: nothing written to /dev/shm, no System V object or POSIX message \
                     queue survives the run"
                .into(),
        },
        Err(e) => Decision {
            choice: "host".into(),
            reason: format!(
                "no private mount namespace ({e}); runs share the host's /dev/shm and files left \
                 there are not removed"
            ),
        },
    };
    let tmp = probe_tmp(namespace);

    Findings {
        machine: Machine {
            kernel: rustix::system::uname()
                .release()
                .to_string_lossy()
                .into_owned(),
            euid: rustix::process::geteuid().as_raw(),
            landlock,
            user_namespaces,
            network_namespace,
            cgroup,
            pidfd,
            subreaper,
        },
        containment,
        protection,
        net_none,
        dev_shm,
        tmp,
    }
}

/// The rules `--protect home` gives a run started in `cwd`, and what such a run warns about.
pub(super) fn home_policy(cwd: &Path) -> (Vec<PolicyRule>, Vec<String>) {
    protect::preview(
        ProtectMode::Home,
        &crate::env::host_env(),
        cwd,
        Path::new("<root>"),
    )
    .unwrap_or_else(|e| (Vec::new(), vec![e.to_string()]))
}

/// One rule of the policy, as the text shows it.
pub(super) fn rule_line(rule: &PolicyRule) -> String {
    let access = match rule.access {
        protect::Access::Write => "writable ",
        protect::Access::Read => "read-only",
        protect::Access::None => "hidden   ",
    };
    format!("{access} {}  ({})", rule.path.display(), rule.reason)
}

/// Whether a run's `/tmp` and `/var/tmp` are private here: the real set-up tried in a child, in
/// a root of `namespace` made for the probe (removed afterwards, or reclaimed by gc when doctor
/// dies first), where runs' roots go.
fn probe_tmp(namespace: &Path) -> Decision {
    match probe_tmp_in(namespace) {
        Ok(()) => Decision {
            choice: "private".into(),
            reason: format!(
                "an overlay of the host's directory per run (what exists stays readable, every \
                 other write lands in the run's root under {}); the run's root, the project, the \
                 lock directories and listening sockets stay the host's (see \
                 docs/protection.md)",
                namespace.display()
            ),
        },
        Err(reason) => Decision {
            choice: "host".into(),
            reason: format!(
                "{reason}; runs share the host's /tmp and /var/tmp, --require-protection refuses"
            ),
        },
    }
}

/// [`probe_tmp`] in a fresh root of the namespace at `namespace`.
fn probe_tmp_in(namespace: &Path) -> std::result::Result<(), String> {
    let ns = crate::namespace::Namespace::open_or_create(namespace).map_err(|e| e.to_string())?;
    let run_id = crate::root::new_run_id().map_err(|e| e.to_string())?;
    let options = crate::root::RootOptions {
        command: vec!["cleanroom".into(), "doctor".into()],
        keep: false,
        cgroup: None,
        homes: Vec::new(),
    };
    let root = crate::root::Root::create(&ns, &run_id, &options).map_err(|e| e.to_string())?;
    let tried = protect::probe_private_tmp(root.path());
    let removal = root.close();
    if !removal.is_removed() {
        tracing::warn!(
            "the probe's root {} was not fully removed (gc retries)",
            removal.path.display()
        );
    }
    tried
}

/// What each Landlock ABI level adds, as used by cleanroom.
const LANDLOCK_FEATURES: &[&str] = &[
    "1: restrict file creation, removal and writes",
    "2: refer (rename and link across directories)",
    "3: truncate",
    "4: TCP bind and connect (not used: --net none uses a namespace)",
    "5: ioctl on device files (granted on ttys and /dev/null etc.)",
    "6: scopes: abstract unix sockets and signals (not used)",
    "7: audit logging flags (not used)",
    "8: restricting all threads at once (not used: applied before exec)",
    "9: connecting to pathname unix sockets (not used)",
    "10: quiet rules (not used)",
];

fn probe_landlock() -> LandlockCheck {
    match protect::landlock_support() {
        Ok(abi) => LandlockCheck {
            abi: Some(abi),
            detail: format!(
                "Landlock ABI {abi} (cleanroom uses up to ABI {}){}",
                linux::NEWEST_VETTED_ABI,
                match linux::landlock_abi() {
                    Ok(kernel) if kernel != abi => format!(
                        "; the kernel has ABI {kernel}, capped by the test-only switch {}",
                        protect::TEST_LANDLOCK_MAX_ABI_ENV
                    ),
                    _ => String::new(),
                }
            ),
            features: LANDLOCK_FEATURES
                .iter()
                .take(abi as usize)
                .map(|s| s.to_string())
                .collect(),
        },
        Err(reason) => LandlockCheck {
            abi: None,
            detail: reason,
            features: Vec::new(),
        },
    }
}

fn probe_cgroup() -> CgroupCheck {
    let mount = crate::contain::cgroup2_mount().ok();
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("0::").map(str::to_string))
        });
    let Some(mount_point) = mount.clone() else {
        return CgroupCheck {
            mount,
            own,
            can_create: false,
            detail: "no cgroup2 filesystem in /proc/self/mountinfo".into(),
        };
    };
    let Some(own_path) = own.clone() else {
        return CgroupCheck {
            mount,
            own,
            can_create: false,
            detail: "no cgroup v2 entry (0::) in /proc/self/cgroup".into(),
        };
    };
    let relative = own_path.trim_start_matches('/');
    let parent = if relative.is_empty() {
        mount_point
    } else {
        mount_point.join(relative)
    };
    let mut nonce = [0u8; 6];
    let suffix = match getrandom::fill(&mut nonce) {
        Ok(()) => nonce.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        Err(_) => "0".into(),
    };
    let probe_dir = parent.join(format!("cleanroom-doctor-{}-{suffix}", std::process::id()));
    let (can_create, detail) = match std::fs::create_dir(&probe_dir) {
        Ok(()) => match std::fs::remove_dir(&probe_dir) {
            Ok(()) => (
                true,
                format!("created and removed a child cgroup in {}", parent.display()),
            ),
            Err(e) => (
                false,
                format!("created {} but cannot remove it: {e}", probe_dir.display()),
            ),
        },
        Err(e) => (
            false,
            format!("cannot create a child cgroup in {}: {e}", parent.display()),
        ),
    };
    CgroupCheck {
        mount,
        own,
        can_create,
        detail,
    }
}

fn path_or_none(path: Option<&Path>) -> String {
    path.map_or_else(|| "none".to_string(), |p| p.display().to_string())
}

impl fmt::Display for Machine {
    /// The report's header line, then "this machine" and one line per probe.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "cleanroom doctor: kernel {}, euid {}",
            self.kernel, self.euid
        )?;
        writeln!(f)?;
        writeln!(f, "this machine")?;
        match self.landlock.abi {
            Some(_) => writeln!(f, "  landlock            {}", self.landlock.detail)?,
            None => writeln!(f, "  landlock            no: {}", self.landlock.detail)?,
        }
        for feature in &self.landlock.features {
            writeln!(f, "                        {feature}")?;
        }
        let checks = [
            ("user namespaces", &self.user_namespaces),
            ("network namespace", &self.network_namespace),
            ("pidfd", &self.pidfd),
            ("subreaper", &self.subreaper),
        ];
        for (name, check) in checks {
            writeln!(f, "  {name:<19} {} ({})", yes_no(check), check.detail)?;
        }
        writeln!(
            f,
            "  cgroup v2           mount {}, own cgroup {}",
            path_or_none(self.cgroup.mount.as_deref()),
            self.cgroup.own.as_deref().unwrap_or("none"),
        )?;
        writeln!(
            f,
            "  child cgroup        {} ({})",
            if self.cgroup.can_create { "yes" } else { "no" },
            self.cgroup.detail
        )
    }
}
