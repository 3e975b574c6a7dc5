//! The server's one environment: a cleanroom root, the containment every process joins, and the
//! base environment processes start from (spec §4; issue: "one cleanroom root, created at start
//! and removed at shutdown").
//!
//! Invariants: the root exists from [`Environment::create`] until [`Environment::shutdown`]; the
//! container (subreaper, and a cgroup when the server may create one) is set up before the first
//! spawn; the write protection (`--protect`) is prepared once, its namespaces (a private
//! `/dev/shm`, `/tmp` and `/var/tmp` backed by the root, and IPC namespace among them) set up
//! once and joined by every process; the
//! base environment is built from the host's with secrets dropped (unless the server
//! allows them) and HOME/TMPDIR/XDG pinned inside the root, and carries `CLEANROOM_RUN_ID`, so
//! `gc` can reclaim the root and kill what is left if the server is killed. The protection's
//! rules, as named, are resolved again for every process and every call, never kept from the
//! start: a process started without a sandbox of its own is confined by them compiled afresh
//! ([`Protection::renewed`]) inside the established namespaces, and every per-call sandbox is
//! intersected with them resolved now (the [`policy::Base`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cleanroom::contain::{ContainMode, Contained, Container, Mechanism};
use cleanroom::env::EnvOptions;
use cleanroom::protect::{
    Access, Enforcement, Narrowing, Network, Policy, ProtectMode, Protection, ProtectionRequest,
    Sandbox, UserNamespace,
};
use cleanroom::root::Layout;
use cleanroom::{Namespace, Root, RootOptions};
use serde_json::{json, Value};

use crate::envpolicy::BaseEnv;
use crate::policy;
use crate::process::Reaper;
use crate::protocol::RpcError;
use crate::uri::file_uri;
use crate::Error;

/// What the environment is created from.
#[derive(Clone, Debug)]
pub struct EnvironmentOptions {
    /// The namespace (state dir) holding the root.
    pub namespace: PathBuf,
    /// The default working directory reported to clients.
    pub cwd: PathBuf,
    /// Pass secret-looking host variables through.
    pub allow_secret_env: bool,
    /// Write protection applied to every process (`off`, `home`, `strict`).
    pub protect: ProtectMode,
    /// Whether the processes get one private `/tmp` and `/var/tmp` (not `--host-tmp`).
    pub private_tmp: bool,
    /// Paths beneath `/tmp` or `/var/tmp` that stay the host's (`--share-tmp`).
    pub share_tmp: Vec<PathBuf>,
}

/// The live environment.
pub struct Environment {
    /// Taken at shutdown.
    root: Mutex<Option<Root>>,
    run_id: String,
    layout: Layout,
    /// Taken at shutdown; spawns after that are refused.
    container: Mutex<Option<Container>>,
    mechanism: Mechanism,
    base: BaseEnv,
    protection: Protection,
    /// The user namespace its processes and `fs/*` children make their namespaces in, for an
    /// ordinary user ([`UserNamespace`]): made at the start, whatever `--protect` is, while the
    /// server is still dumpable (a child of the non-dumpable server cannot map one of its own).
    user_ns: Option<UserNamespace>,
    cwd: PathBuf,
    shell: PathBuf,
}

impl Environment {
    /// Creates the root and the containment, and builds the base environment. Call it while
    /// the server is still dumpable and before anything reaps children with `waitpid(-1)`: it
    /// forks holders and probes and reaps them.
    pub fn create(options: &EnvironmentOptions) -> Result<Environment, Error> {
        let user_ns = children_user_namespace();
        let namespace = Namespace::open_or_create(&options.namespace)?;
        let run_id = cleanroom::root::new_run_id()?;
        let container = Container::new(&run_id, ContainMode::Auto)?;
        if let Some(reason) = container.fallback_reason() {
            tracing::info!("containment: {} ({reason})", container.mechanism());
        }
        let host = cleanroom::env::host_env();
        let env_options = EnvOptions {
            drop_secrets: !options.allow_secret_env,
            ..EnvOptions::default()
        };
        let homes = cleanroom::env::homes_needed(&host, &env_options.pins);
        let root = Root::create(
            &namespace,
            &run_id,
            &RootOptions {
                command: vec!["cleanroom".into(), "serve".into()],
                keep: false,
                cgroup: container
                    .cgroup_path()
                    .map(|p| p.to_string_lossy().into_owned()),
                homes,
            },
        )?;
        let child = cleanroom::env::build(&host, root.layout(), root.path(), &run_id, &env_options);
        let mut request =
            ProtectionRequest::new(options.protect, &child, root.path(), &options.cwd);
        request.private_tmp = options.private_tmp;
        request.share_tmp = options.share_tmp.clone();
        let protection =
            Protection::prepare(&request).and_then(|p| established(p, user_ns.as_ref()));
        let protection = match protection {
            Ok(protection) => protection,
            Err(e) => {
                root.close();
                return Err(e.into());
            }
        };
        let status = protection.status();
        for warning in &status.warnings {
            tracing::warn!("{warning}");
        }
        tracing::info!("protection: {status}");
        let mut vars = child.vars;
        vars.extend(
            protection
                .child_env()
                .into_iter()
                .map(|(k, v)| (k.into(), v.into())),
        );
        let all: BTreeMap<String, String> = vars
            .into_iter()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let base = pinned_base(all, root.layout());
        let shell = host
            .get(std::ffi::OsStr::new("SHELL"))
            .map(PathBuf::from)
            .filter(|p| p.is_absolute() && p.exists())
            .unwrap_or_else(|| PathBuf::from("/bin/sh"));
        probe_namespaces(root.path());
        Ok(Environment {
            run_id,
            layout: root.layout().clone(),
            root: Mutex::new(Some(root)),
            mechanism: container.mechanism(),
            container: Mutex::new(Some(container)),
            base,
            protection,
            user_ns,
            cwd: options.cwd.clone(),
            shell,
        })
    }

    /// The base environment of every process.
    pub fn base(&self) -> &BaseEnv {
        &self.base
    }

    /// What every per-call policy starts from: the protection's rules, resolved now (see
    /// [`policy_base`]), and the temp dir.
    pub fn policy_base(&self) -> Result<policy::Base, RpcError> {
        policy_base(self, true)
    }

    /// [`Environment::policy_base`] for a process started without a sandbox of its own, whose
    /// policy nothing is intersected with (the protection renewed confines it): without the
    /// rules, which it would resolve for nothing ([`crate::policy::Confinement::for_process`]
    /// refuses a managed policy on such a base).
    pub fn policy_base_unmanaged(&self) -> Result<policy::Base, RpcError> {
        policy_base(self, false)
    }

    /// The run id of the environment's root.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The write protection every process gets.
    pub fn protection(&self) -> &Protection {
        &self.protection
    }

    /// Runs `f` with the containment every process joins, or `None` once shut down.
    pub fn with_container<T>(&self, f: impl FnOnce(Option<&Container>) -> T) -> T {
        f(lock(&self.container).as_ref())
    }

    /// `environment/info`.
    pub fn info(&self) -> Value {
        let layout = &self.layout;
        let shell_name = self
            .shell
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "sh".into());
        json!({
            "shell": {"name": shell_name, "path": self.shell.to_string_lossy()},
            "cwd": file_uri(&self.cwd),
            "userHomeDir": file_uri(&layout.home),
            "tempDir": file_uri(&layout.tmp),
            "temporaryDirectories": [file_uri(&layout.tmp)],
            "platformOs": std::env::consts::OS,
            "executorVersion": env!("CARGO_PKG_VERSION"),
            "capabilities": capabilities(),
            "cleanroom": {
                "runId": self.run_id,
                "containment": self.mechanism,
                "protection": self.protection.status(),
            },
        })
    }

    /// Refuses spawns from now on, terminates everything contained as one set (every
    /// descendant of the server, and its cgroup's members: TERM to all, `grace`, KILL until the
    /// server has no child left), then removes the root and the cgroup (blocking; idempotent).
    pub fn shutdown(&self, reaper: &Reaper, grace: Duration) {
        let container = lock(&self.container).take();
        if let Some(container) = container {
            let mut contained = Contained {
                container: &container,
                reap: &mut || reaper.reap_all(),
            };
            let ended = cleanroom::contain::terminate_set(&mut contained, grace);
            tracing::debug!("shutdown killed {} processes", ended.killed.len());
        }
        let root = lock(&self.root).take();
        if let Some(root) = root {
            let removal = root.close();
            if !removal.is_removed() {
                tracing::warn!(
                    "root {} not fully removed: {:?} (the next gc retries)",
                    removal.path.display(),
                    removal.status
                );
            }
        }
    }
}

/// The capabilities Codex's exec-server 0.171 advertises, each `true` only when this server
/// implements what it gates: `sandboxedFileStreaming` is `fs/open` / `fs/readBlock` /
/// `fs/close` under the call's `sandbox`. Not implemented: `capabilityRoots/discover*`,
/// credential masking, `environmentConfig/read`, `fs/writeBlock` (`fileWriteStreaming`),
/// `fs/watchMissing`, `headers[].valueEnvVar`, network proxies, shell snapshots, and the
/// root-write sandbox variants and Windows' MXC.
const CAPABILITIES: &[(&str, bool)] = &[
    ("capabilityDiscoverySandbox", false),
    ("capabilityDiscoveryV2", false),
    ("credentialMasking", false),
    ("credentialMaskingCustomProviders", false),
    ("environmentConfigRead", false),
    ("fileWriteStreaming", false),
    ("fsWatchMissing", false),
    ("httpHeaderEnvVars", false),
    ("linuxApprovedRootWritePreservesRestrictions", false),
    ("linuxRootWritePreservesDevices", false),
    ("networkProxyLaunch", false),
    ("networkProxyReviewDomains", false),
    ("networkProxyTransparentTcp", false),
    ("sandboxedFileStreaming", true),
    ("shellSnapshotV2", false),
    ("windowsMxc", false),
];

/// `environmentInfo.capabilities`.
fn capabilities() -> Value {
    let map = CAPABILITIES
        .iter()
        .map(|(name, on)| ((*name).to_string(), Value::Bool(*on)))
        .collect();
    Value::Object(map)
}

/// The user namespace the server's processes make their namespaces in (see
/// [`Environment::user_ns`]); `None` for root, and, with a warning, where it cannot be made
/// (a sandbox that needs namespaces is then refused or fails to start, as the kernel says).
fn children_user_namespace() -> Option<UserNamespace> {
    UserNamespace::for_children().unwrap_or_else(|e| {
        tracing::warn!("sandboxes that need namespaces may fail: {e}");
        None
    })
}

/// Has the engine ask the kernel now which namespaces per-call policies can use. It probes in a
/// forked child once per process (in the user namespace the server's processes make theirs in,
/// as they will: [`UserNamespace::for_children`]) and caches the answer; later, the server's
/// orphan reaper could take that child's exit status first and the probe would fail for the
/// server's lifetime. Called before the reaper runs.
fn probe_namespaces(root: &std::path::Path) {
    let mut policy = Policy::new();
    policy.rule("/", Access::Write, "namespace probe").rule(
        root,
        Access::Read,
        "namespace probe (a narrowing)",
    );
    policy.network = Network::Loopback;
    policy.narrowing = Narrowing::MountElseCover;
    if let Err(e) = Sandbox::compile(&policy) {
        tracing::info!("managed sandbox policies will be limited: {e}");
    }
}

/// `all` with its pinned part picked out: the variables [`cleanroom::env::pinned`] names and
/// every `CLEANROOM_*` one.
fn pinned_base(all: BTreeMap<String, String>, layout: &Layout) -> BaseEnv {
    let names: Vec<&str> = cleanroom::env::pinned(layout)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let pinned = all
        .iter()
        .filter(|(k, _)| k.starts_with("CLEANROOM_") || names.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    BaseEnv { all, pinned }
}

/// `protection` established: every process joins the same namespaces (one private `/dev/shm`,
/// `/tmp`, `/var/tmp` and IPC namespace for the whole environment) instead of making its own.
/// A policy that cannot be established (a private `/tmp` whose host paths the kernel cannot
/// bind from shared namespaces, before Linux 6.15; one narrowing host paths by mounts) is
/// layered instead ([`Protection::layered`]): each process gets namespaces of its own, and the
/// ruleset built now from the start's rules is a layer beneath every `fs/*` call and managed
/// sandbox, so a name repointed later can narrow them, never widen them. A layer that cannot be
/// built fails the start.
fn established(
    protection: Protection,
    user_ns: Option<&UserNamespace>,
) -> cleanroom::Result<Protection> {
    match protection.established() {
        Ok(shared) => Ok(shared),
        Err(cleanroom::Error::Unsupported { what, reason }) => {
            let layered = protection.layered(user_ns)?;
            tracing::warn!(
                "each process gets namespaces, and a /dev/shm, of its own: {what}: {reason}; \
                 where the host's /tmp or /var/tmp has entries, a process without a managed \
                 sandbox cannot mount the private /tmp again and is refused (start with \
                 --host-tmp, or from a working directory outside /tmp); the --protect rules \
                 stay as they were resolved at the start: a protected path made, repointed or \
                 bound later is not ruled; a writable name repointed later grants fs/* calls \
                 and managed sandboxes nothing the start's rules refused (they are a layer \
                 beneath them), but beneath the host's /tmp, /var/tmp and /dev/shm, which that \
                 layer grants whole"
            );
            Ok(layered)
        }
        Err(e) => Err(e),
    }
}

/// The rules `environment`'s protection enforces now (canonical paths; none when it is off or
/// not enforced), without the places its compiler added where a mount shows a rule's object
/// again, and the user namespace its processes make their namespaces in: each per-call policy
/// is intersected with these by path, then compiled, which adds its own. They
/// are resolved for every call ([`Protection::rules_now`]), never kept from the start: a
/// protected path the host creates or repoints later is ruled where it is now. Without
/// `rules`, the base has none (see [`Environment::policy_base_unmanaged`]).
fn policy_base(environment: &Environment, rules: bool) -> Result<policy::Base, RpcError> {
    let protection = &environment.protection;
    let status = protection.status();
    let enforced = status.enforcement != Enforcement::None;
    let rules = match enforced && rules {
        true => protection.rules_now().map_err(|e| {
            RpcError::internal(format!("cannot resolve the environment's protection: {e}"))
        })?,
        false => Vec::new(),
    };
    Ok(policy::Base {
        rules,
        enforced,
        tmpdir: environment.layout.tmp.clone(),
        shared_dev_shm: protection.shares_dev_shm(),
        view: protection.view(),
        user_ns: environment.user_ns.clone(),
    })
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
