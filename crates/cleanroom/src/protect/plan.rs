//! The paths of a `home` or `strict` policy: which paths are read-only, which are writable
//! exceptions, and the cover of write grants that Landlock (an allowlist) needs to express
//! "everything except the protected paths".
//!
//! Invariant: every path is canonical before it is compared, so a protected path is found
//! whatever spelling named it; when in doubt (a directory that cannot be listed, an entry that
//! vanished) nothing is granted, which is stricter, never weaker.

use std::path::{Path, PathBuf};

use super::{ProtectMode, ProtectionRequest};
use crate::{Error, Result};

/// The paths of a filesystem policy, canonicalized, before any descriptor is opened.
#[derive(Debug)]
pub(super) struct Plan {
    /// Read-only paths.
    pub protected: Vec<PathBuf>,
    /// Writable exceptions (root, cwd, allow_write, existing caches in `home` mode).
    pub exceptions: Vec<PathBuf>,
    /// Paths that get a write rule.
    pub grants: Vec<PathBuf>,
    /// Ancestors of protected paths that were descended instead of granted.
    pub ancestors: Vec<PathBuf>,
}

impl Plan {
    pub fn build(request: &ProtectionRequest) -> Result<Plan> {
        let mut protected = Vec::new();
        if let Some(home) = &request.real_home {
            match std::fs::canonicalize(home) {
                Ok(home) => protected.push(home),
                Err(e) => tracing::debug!(home = %home.display(), "real home not protected: {e}"),
            }
        }
        for path in &request.protect_paths {
            protected.push(canonical_user_path(path, "--protect-path")?);
        }
        let mut exceptions = vec![
            std::fs::canonicalize(&request.root)
                .map_err(|e| Error::io("resolve the run root", &request.root, e))?,
            std::fs::canonicalize(&request.cwd)
                .map_err(|e| Error::io("resolve the working directory", &request.cwd, e))?,
        ];
        for path in &request.allow_write {
            exceptions.push(canonical_user_path(path, "--allow-write")?);
        }
        if request.mode == ProtectMode::Home {
            exceptions.extend(
                request
                    .writable_caches
                    .iter()
                    .filter_map(|cache| std::fs::canonicalize(cache).ok()),
            );
        }
        sort_dedup(&mut protected);
        sort_dedup(&mut exceptions);
        // A protected path that equals an exception stays protected.
        exceptions.retain(|e| !protected.contains(e));

        let mut starts: Vec<PathBuf> = exceptions.clone();
        if request.mode == ProtectMode::Home {
            starts.push(PathBuf::from("/"));
        }
        let mut grants = Vec::new();
        let mut ancestors = Vec::new();
        for start in &starts {
            cover(start, &protected, &mut grants, &mut ancestors);
        }
        sort_dedup(&mut grants);
        sort_dedup(&mut ancestors);
        Ok(Plan {
            protected,
            exceptions,
            grants,
            ancestors,
        })
    }
}

/// Grants `path` unless it is protected or contains a protected path; in that last case,
/// descends and grants its other entries (symlinks are skipped: their targets are reached by
/// their own canonical path).
fn cover(
    path: &Path,
    protected: &[PathBuf],
    grants: &mut Vec<PathBuf>,
    ancestors: &mut Vec<PathBuf>,
) {
    if protected.iter().any(|p| p == path) {
        return;
    }
    if !protected.iter().any(|p| p.starts_with(path)) {
        grants.push(path.to_path_buf());
        return;
    }
    ancestors.push(path.to_path_buf());
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) => {
            // Nothing below it is granted: stricter, never weaker.
            tracing::debug!(path = %path.display(), "cannot list an ancestor of a protected path: {e}");
            return;
        }
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| !t.is_symlink()) {
            cover(&entry.path(), protected, grants, ancestors);
        }
    }
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

fn sort_dedup(paths: &mut Vec<PathBuf>) {
    paths.sort();
    paths.dedup();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protect::NetMode;

    fn request(base: &Path, mode: ProtectMode) -> ProtectionRequest {
        ProtectionRequest {
            mode,
            protect_paths: Vec::new(),
            allow_write: Vec::new(),
            net: NetMode::Host,
            require: false,
            real_home: Some(base.join("home")),
            root: base.join("root"),
            cwd: base.join("home/project"),
            writable_caches: vec![base.join("home/.cargo"), base.join("home/.npm")],
        }
    }

    #[test]
    fn the_home_cover_grants_everything_but_the_home_and_keeps_its_exceptions() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        for d in ["home/project", "home/.cargo", "home/docs", "root", "other"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        let plan = Plan::build(&request(&base, ProtectMode::Home)).unwrap();
        assert_eq!(plan.protected, [base.join("home")]);
        // The missing ~/.npm is skipped; the project inside the home stays writable.
        assert_eq!(
            plan.exceptions,
            [
                base.join("home/.cargo"),
                base.join("home/project"),
                base.join("root")
            ]
        );
        for granted in ["home/project", "home/.cargo", "root", "other"] {
            assert!(plan.grants.contains(&base.join(granted)), "{granted}");
        }
        assert!(!plan
            .grants
            .iter()
            .any(|g| g == &base.join("home") || g.starts_with(base.join("home/docs"))));
        assert!(
            plan.grants.iter().all(|g| !base.starts_with(g)),
            "an ancestor was granted"
        );
        assert!(plan.ancestors.contains(&base) && plan.ancestors.contains(&PathBuf::from("/")));
    }

    #[test]
    fn strict_grants_only_the_exceptions_and_a_protected_cwd_stays_protected() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        for d in ["home/project", "home/.cargo", "root"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        let mut req = request(&base, ProtectMode::Strict);
        req.cwd = base.join("home");
        let plan = Plan::build(&req).unwrap();
        // Caches are not part of strict; the cwd equal to the home stays read-only.
        assert_eq!(plan.exceptions, [base.join("root")]);
        assert_eq!(plan.grants, [base.join("root")]);
    }
}
