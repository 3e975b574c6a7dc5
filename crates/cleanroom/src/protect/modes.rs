//! `--protect home` and `--protect strict` (and `off` with `--net none`) as policies of the
//! engine in [`super::policy`]: which paths are read-only, which are writable, and why.
//!
//! Invariant: protection never silently shrinks: a home that cannot be found, a working
//! directory that is not made writable, are warnings (errors under `--require-protection` where
//! they weaken what was asked), and every rule carries the reason a report shows.

use std::path::{Path, PathBuf};

use super::policy::{Access, Narrowing, Network, Policy};
use super::project::project_root;
use super::{NetMode, ProtectMode, ProtectionRequest};
use crate::env::HomeSource;
use crate::{Error, Result};

/// The policy for `request`, or `None` when nothing is to be applied (`off` with the host
/// network). Warnings are appended to `warnings`.
pub(super) fn policy(
    request: &ProtectionRequest,
    warnings: &mut Vec<String>,
) -> Result<Option<Policy>> {
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
        ProtectMode::Home => home(request, &mut policy, warnings)?,
        ProtectMode::Strict => strict(request, &mut policy, warnings)?,
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
    policy.private_dev_shm = true;
    policy.rule(
        "/",
        Access::Write,
        "everything outside the protected paths (--protect home)",
    );
    let protected = protected_paths(request, policy)?;
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
    policy.rule(&request.cwd, Access::Write, "the working directory");
    if let Some(root) = std::fs::canonicalize(&request.cwd)
        .ok()
        .and_then(|cwd| project_root(&cwd, &protected))
    {
        policy.rule(root.path, Access::Write, root.why);
    }
    for (var, dir) in &request.output_dirs {
        policy.rule(dir, Access::Write, format!("build output named by {var}"));
    }
    allowed_paths(request, policy)
}

/// Everything read-only but the root, the working directory (unless it is `/`), `--allow-write`
/// and a private `/dev/shm`.
fn strict(
    request: &ProtectionRequest,
    policy: &mut Policy,
    warnings: &mut Vec<String>,
) -> Result<()> {
    policy.private_dev_shm = true;
    policy.rule(
        "/",
        Access::Read,
        "everything not named below (--protect strict)",
    );
    protected_paths(request, policy)?;
    policy.rule(&request.root, Access::Write, "the run's root");
    if std::fs::canonicalize(&request.cwd).is_ok_and(|cwd| cwd == Path::new("/")) {
        warnings.push(
            "--protect strict: the working directory / is not made writable (that would make \
             the whole filesystem writable); name what the command may write with --allow-write"
                .into(),
        );
    } else {
        policy.rule(&request.cwd, Access::Write, "the working directory");
    }
    allowed_paths(request, policy)
}

/// Adds the homes and `--protect-path` as read-only; returns them canonical.
fn protected_paths(request: &ProtectionRequest, policy: &mut Policy) -> Result<Vec<PathBuf>> {
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
        let path = canonical_user_path(path, "--protect-path")?;
        policy.rule(&path, Access::Read, "--protect-path");
        protected.push(path);
    }
    Ok(protected)
}

fn allowed_paths(request: &ProtectionRequest, policy: &mut Policy) -> Result<()> {
    for path in &request.allow_write {
        policy.rule(
            canonical_user_path(path, "--allow-write")?,
            Access::Write,
            "--allow-write",
        );
    }
    Ok(())
}

/// Canonicalizes a path the user named, with an error that names the option.
fn canonical_user_path(path: &Path, option: &str) -> Result<PathBuf> {
    std::fs::canonicalize(path).map_err(|e| {
        Error::Invalid(format!(
            "{option} {}: cannot resolve the path: {e}",
            path.display()
        ))
    })
}
