//! `--protect home` and `--protect strict` (and `off` with `--net none`) as policies of the
//! engine in [`super::policy`]: which paths are read-only, which are writable, and why.
//!
//! Invariant: protection never silently shrinks: a home that cannot be found, a working
//! directory that is not made writable, are warnings (errors under `--require-protection` where
//! they weaken what was asked), and every rule carries the reason a report shows.

use std::path::{Path, PathBuf};

use super::policy::{Access, Narrowing, Network, Policy};
use super::project::project_root;
use super::scratch::{PrivateTmp, PRIVATE_TMP_DIRS};
use super::{NetMode, ProtectMode, ProtectionRequest};
use crate::env::HomeSource;
use crate::error::{Error, Result};

/// The policy for `request`, or `None` when nothing is to be applied (`off` with the host
/// network). Warnings are appended to `warnings`.
pub(super) fn policy(
    request: &ProtectionRequest,
    warnings: &mut Vec<String>,
) -> Result<Option<Policy>> {
    let share_tmp = share_tmp_paths(request, warnings)?;
    let mut policy = Policy::new();
    policy.network = match request.net {
        NetMode::Host => Network::Host,
        NetMode::None => Network::Loopback,
    };
    policy.best_effort = !request.require;
    policy.narrowing = Narrowing::Cover;
    match request.mode {
        ProtectMode::Off if request.net == NetMode::Host => return Ok(None),
        ProtectMode::Off => {
            policy.rule("/", Access::Write, "protection is off (--protect off)");
            policy.best_effort = true;
        }
        ProtectMode::Home | ProtectMode::Strict => {
            let namespace = OwnNamespace::of(request)?;
            private_scratch(request, &mut policy, share_tmp, namespace.as_ref())?;
            if let Some(namespace) = &namespace {
                namespace.add_rules(&mut policy);
            }
            match request.mode {
                ProtectMode::Home => home(request, &mut policy, warnings)?,
                _ => strict(request, &mut policy, warnings)?,
            }
            if let Some(namespace) = &namespace {
                namespace.warn_if_inside_writable(&policy, warnings);
            }
            warn_of_missing_outputs(request, &policy, warnings);
        }
    }
    Ok(Some(policy))
}

/// Everything writable but the real homes, `--protect-path`, toolchain homes (their caches
/// excepted) and passed-through configuration; the root, the working directory, its project
/// root, output directories and `--allow-write` stay writable inside them.
fn home(
    request: &ProtectionRequest,
    policy: &mut Policy,
    warnings: &mut Vec<String>,
) -> Result<()> {
    if request.homes.is_empty() {
        let reason = format!("no home to protect: {}", request.home_notes.join("; "));
        if request.require {
            return Err(Error::Unsupported {
                what: "home protection (--require-protection)",
                reason,
            });
        }
        warnings.push(format!(
            "{reason}; only --protect-path paths, toolchain homes and passed-through \
             configuration are read-only"
        ));
    }
    policy.rule(
        "/",
        Access::Write,
        "everything outside the protected paths (--protect home)",
    );
    let protected = protected_paths(request, policy, warnings)?;
    for tool in &request.toolchain {
        if tool.writable.contains(&tool.path) {
            policy.rule(&tool.path, Access::Write, format!("cache {}", tool.var));
            continue;
        }
        policy.rule(
            &tool.path,
            Access::Read,
            format!(
                "toolchain home {} (binaries, scripts, configuration)",
                tool.var
            ),
        );
        for part in &tool.writable {
            policy.rule(part, Access::Write, format!("cache of {}", tool.var));
        }
    }
    for cache in &request.home_caches {
        policy.rule(cache, Access::Write, "a cache under the real home");
    }
    for config in &request.config {
        policy.rule(
            &config.path,
            Access::Read,
            format!("configuration passed through {}", config.var),
        );
    }
    policy.rule(&request.root, Access::Write, "the run's root");
    working_directory(request, policy, warnings);
    if let Ok(cwd) = std::fs::canonicalize(&request.cwd) {
        let found = project_root(&cwd, &protected);
        warnings.extend(found.warning);
        if let Some(root) = found.root {
            policy.rule(root.path, Access::Write, root.why);
        }
    }
    for (var, dir) in &request.output_dirs {
        policy.rule(dir, Access::Write, format!("build output named by {var}"));
    }
    allowed_paths(request, policy, warnings)
}

/// Everything read-only but the root, the working directory (unless it is `/`), `--allow-write`
/// and a private `/dev/shm`.
fn strict(
    request: &ProtectionRequest,
    policy: &mut Policy,
    warnings: &mut Vec<String>,
) -> Result<()> {
    policy.rule(
        "/",
        Access::Read,
        "everything not named below (--protect strict)",
    );
    protected_paths(request, policy, warnings)?;
    policy.rule(&request.root, Access::Write, "the run's root");
    if std::fs::canonicalize(&request.cwd).is_ok_and(|cwd| cwd == Path::new("/")) {
        warnings.push(
            "--protect strict: the working directory / is not made writable (that would make \
             the whole filesystem writable); name what the command may write with --allow-write"
                .into(),
        );
    } else {
        working_directory(request, policy, warnings);
    }
    allowed_paths(request, policy, warnings)
}

/// The `--share-tmp` paths, canonical; each must exist beneath `/tmp` or `/var/tmp` (checked
/// whatever the mode, so a mistake is found before it matters; the error names where the path
/// was given, [`ProtectionRequest::path_origins`], else the option). Where they change nothing
/// (`--protect off`, `--host-tmp`) a warning says so.
fn share_tmp_paths(
    request: &ProtectionRequest,
    warnings: &mut Vec<String>,
) -> Result<Vec<PathBuf>> {
    let private_dirs = private_tmp_dirs();
    let mut shared = Vec::new();
    for named in &request.share_tmp {
        let origin = request
            .path_origins
            .get(named)
            .map_or("--share-tmp", String::as_str);
        let path = std::fs::canonicalize(named).map_err(|e| {
            Error::Invalid(format!(
                "{origin} {}: cannot resolve the path: {e}",
                named.display()
            ))
        })?;
        if !beneath(&path, &private_dirs) {
            return Err(Error::Invalid(format!(
                "{origin} {}: not beneath {}",
                named.display(),
                PRIVATE_TMP_DIRS.join(" or ")
            )));
        }
        shared.push(path);
    }
    let ignored = match (request.mode, request.private_tmp) {
        (ProtectMode::Off, _) => Some("--protect off"),
        (_, false) => Some("--host-tmp"),
        _ => None,
    };
    if let (Some(why), false) = (ignored, shared.is_empty()) {
        warnings.push(format!(
            "--share-tmp has no effect with {why}: the run sees the host's /tmp and /var/tmp"
        ));
    }
    Ok(shared)
}

/// `/tmp` and `/var/tmp`, canonical (those that exist).
fn private_tmp_dirs() -> Vec<PathBuf> {
    PRIVATE_TMP_DIRS
        .iter()
        .filter_map(|dir| std::fs::canonicalize(dir).ok())
        .collect()
}

/// Whether `path` is beneath (or is) one of `dirs`.
fn beneath(path: &Path, dirs: &[PathBuf]) -> bool {
    dirs.iter().any(|dir| path.starts_with(dir))
}

/// Cleanroom's namespace holding the run's root (canonical) and its user lock directory, made
/// here, where nested runs take user-scope locks. Inside the run the namespace is read-only
/// (other runs' roots and markers; the run's root is writable by its own rule) and the lock
/// directory writable.
struct OwnNamespace {
    path: PathBuf,
    locks: PathBuf,
    /// It gets a read-only rule of its own: it lies outside `/tmp` and `/var/tmp`, where the
    /// private `/tmp` keeps it (decided once).
    read_only_rule: bool,
}

impl OwnNamespace {
    /// `None` for a root outside a namespace (a library caller's): there is none to keep.
    fn of(request: &ProtectionRequest) -> Result<Option<OwnNamespace>> {
        let Some(Ok(namespace)) = request.root.parent().map(crate::namespace::Namespace::open)
        else {
            return Ok(None);
        };
        let locks = namespace.private_subdir(crate::namespace::LOCKS_DIR)?;
        Ok(namespace
            .path()
            .canonicalize()
            .ok()
            .zip(locks.path().canonicalize().ok())
            .map(|(path, locks)| OwnNamespace {
                read_only_rule: !beneath(&path, &private_tmp_dirs()),
                path,
                locks,
            }))
    }

    /// Adds the rules: the lock directory writable, always (a private `/tmp` keeps it the host's
    /// at that access; where `/tmp` is the host's, `strict` would leave it read-only); the
    /// namespace read-only unless it lies beneath `/tmp` or `/var/tmp`. There the private `/tmp`
    /// keeps it read-only ([`private_scratch`]); where the run shares the host's `/tmp`
    /// (`--host-tmp`, or no private `/tmp` can be made) it is part of that directory, and the
    /// rule would leave nothing new to be made directly in `/tmp` (the cover).
    fn add_rules(&self, policy: &mut Policy) {
        if self.read_only_rule {
            policy.rule(
                &self.path,
                Access::Read,
                "cleanroom's namespace: other runs' roots and markers",
            );
        }
        policy.rule(
            &self.locks,
            Access::Write,
            "cleanroom's user lock directory (--exclusive of nested runs)",
        );
    }

    /// Warns when the namespace lies inside a directory the command may write (the working
    /// directory, its project, `--allow-write`): where its read-only rule is kept by Landlock
    /// alone, nothing new can be created directly in that directory or in those on the way down
    /// to the namespace.
    fn warn_if_inside_writable(&self, policy: &Policy, warnings: &mut Vec<String>) {
        if !self.read_only_rule {
            return;
        }
        let inside = policy.rules.iter().find(|rule| {
            rule.access == Access::Write
                && rule.path != Path::new("/")
                && self.path.starts_with(&rule.path)
                && self.path != rule.path
        });
        if let Some(rule) = inside {
            warnings.push(format!(
                "the state dir {} lies inside {} ({}), which the command may write: cleanroom's \
                 namespace is read-only to the command, so it may be unable to create new \
                 entries directly in {} and the directories down to the state dir; put the \
                 state dir elsewhere (--state-dir)",
                self.path.display(),
                rule.path.display(),
                rule.reason,
                rule.path.display()
            ));
        }
    }
}

/// The run's own `/dev/shm`, IPC namespace, and (unless `--host-tmp`) `/tmp` and `/var/tmp`,
/// backed by the root, keeping the host's: `shared` (`--share-tmp`), cleanroom's `namespace`
/// when it lies beneath them (nested runs keep their roots inside the run's root) and the
/// machine lock directory (at the access the policy gives it).
fn private_scratch(
    request: &ProtectionRequest,
    policy: &mut Policy,
    shared: Vec<PathBuf>,
    namespace: Option<&OwnNamespace>,
) -> Result<()> {
    policy.private_dev_shm = true;
    policy.private_ipc = true;
    if !request.private_tmp {
        return Ok(());
    }
    let private_dirs = private_tmp_dirs();
    // Its lock directory, inside it, has a rule of its own (see `OwnNamespace::add_rules`).
    let mut own: Vec<(PathBuf, Option<Access>)> = namespace
        .map(|ns| (ns.path.clone(), Some(Access::Read)))
        .into_iter()
        .collect();
    // Kept when it exists; a run nested in this one refuses to make it (see `lock`).
    let machine = crate::lock::LockEnv::from_process().machine_dir;
    if let Some(machine) = std::fs::canonicalize(&machine).ok().filter(|p| p.is_dir()) {
        own.push((machine, None));
    }
    own.retain(|(path, _)| beneath(path, &private_dirs));
    policy.private_tmp = Some(PrivateTmp {
        backing: request.root.clone(),
        own,
        shared,
        sockets: request.sockets.clone(),
    });
    Ok(())
}

/// Makes the working directory writable, unless it is itself a path the policy protects (a run
/// from the home: making it writable would unprotect the whole home). Then it stays read-only,
/// and the warning says so, so that what `doctor` shows is what the run does.
fn working_directory(request: &ProtectionRequest, policy: &mut Policy, warnings: &mut Vec<String>) {
    let cwd = std::fs::canonicalize(&request.cwd).unwrap_or_else(|_| request.cwd.clone());
    let protecting = policy.rules.iter().find(|rule| {
        rule.access == Access::Read
            && rule.path != Path::new("/")
            && std::fs::canonicalize(&rule.path).is_ok_and(|path| path == cwd)
    });
    match protecting {
        Some(rule) => warnings.push(format!(
            "the working directory {} is protected ({}), so it stays read-only and the command \
             cannot write in it; run from a project directory, or name what it may write with \
             --allow-write",
            cwd.display(),
            rule.reason
        )),
        None => {
            policy.rule(&request.cwd, Access::Write, "the working directory");
        }
    }
}

/// Warns of the output directories (`CARGO_TARGET_DIR`, ...) writable under `policy` that do
/// not exist and lie beneath a private `/tmp` or `/var/tmp`: what the command writes there lands
/// in the run's view and is removed with it.
fn warn_of_missing_outputs(
    request: &ProtectionRequest,
    policy: &Policy,
    warnings: &mut Vec<String>,
) {
    if policy.private_tmp.is_none() {
        return;
    }
    let private_dirs = private_tmp_dirs();
    for (var, dir) in &request.output_dirs {
        let writable = policy
            .rules
            .iter()
            .any(|r| r.path == *dir && r.access == Access::Write);
        let Some(private) = private_dirs
            .iter()
            .find(|private| dir.starts_with(private) && dir != *private)
        else {
            continue;
        };
        if writable && !dir.exists() {
            warnings.push(format!(
                "{var} {} does not exist: what the command writes there stays in its private {} \
                 and is removed with the run; create it first to keep it",
                dir.display(),
                private.display()
            ));
        }
    }
}

/// Adds the homes and `--protect-path` as read-only; returns them canonical.
fn protected_paths(
    request: &ProtectionRequest,
    policy: &mut Policy,
    warnings: &mut Vec<String>,
) -> Result<Vec<PathBuf>> {
    let mut protected = Vec::new();
    for home in &request.homes {
        let why = match home.source {
            HomeSource::Passwd => "the real home (password database)",
            HomeSource::HomeVar => "the real home ($HOME)",
        };
        policy.rule(&home.path, Access::Read, why);
        protected.push(home.path.clone());
    }
    for path in &request.protect_paths {
        let path = user_path(request, path, UserRule::Protect, warnings)?;
        policy.rule(&path, Access::Read, "--protect-path");
        protected.push(path);
    }
    Ok(protected)
}

fn allowed_paths(
    request: &ProtectionRequest,
    policy: &mut Policy,
    warnings: &mut Vec<String>,
) -> Result<()> {
    for path in &request.allow_write {
        policy.rule(
            user_path(request, path, UserRule::AllowWrite, warnings)?,
            Access::Write,
            "--allow-write",
        );
    }
    Ok(())
}

/// The kind of rule a path the user named is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum UserRule {
    /// `--protect-path`.
    Protect,
    /// `--allow-write`.
    AllowWrite,
}

/// Canonicalizes a path the user named for `rule`. One that does not resolve (it does not
/// exist, or this user cannot reach it) is kept as named, made absolute against the working
/// directory: its rule is reported `absent` and its parent's rule decides, as for every rule,
/// and a warning says so. Unless it is a protect path under `--require-protection` (nothing
/// could keep the run from creating it and writing there), which is an error. Both name where
/// the path was given ([`ProtectionRequest::path_origins`], else the option).
fn user_path(
    request: &ProtectionRequest,
    path: &Path,
    rule: UserRule,
    warnings: &mut Vec<String>,
) -> Result<PathBuf> {
    let e = match std::fs::canonicalize(path) {
        Ok(canonical) => return Ok(canonical),
        Err(e) => e,
    };
    let (option, nothing) = match rule {
        UserRule::Protect => ("--protect-path", "nothing to make read-only there"),
        UserRule::AllowWrite => ("--allow-write", "nothing made writable there"),
    };
    let origin = request
        .path_origins
        .get(path)
        .map_or(option, String::as_str);
    let why = match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".to_string(),
        _ => format!("cannot resolve the path ({e})"),
    };
    let problem = format!("{origin} {}: {why}", path.display());
    if rule == UserRule::Protect && request.require {
        return Err(Error::Invalid(format!(
            "{problem}, so nothing keeps the run from creating it and writing there \
             (--require-protection)"
        )));
    }
    warnings.push(format!(
        "{problem}: {nothing} (its rule is reported absent)"
    ));
    Ok(request.cwd.join(path))
}
