//! The host paths a child binds for itself when it joins namespaces set up once for many
//! (the exec-server's environment, [`super::policy::Sandbox::established`]): paths beneath the
//! private `/tmp` and `/var/tmp` that must be the host's for that child — the environment's own
//! user paths (its working directory and project, `--share-tmp`), the child's working directory
//! and project, the writable roots of its own policy — bound from the holder's copies of the
//! host's trees as they are when the child starts.
//!
//! Invariant: a path is bound at the access its policy gives it (read-only unless it may write
//! there; narrower rules beneath it are mounts on top), never a private directory itself, and
//! never beneath a path the shared namespaces keep the host's already (cleanroom's namespace and
//! lock directory); a path that does not exist is not bound.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::compile::{self, CanonicalRule, MountKind};
use super::linux::child::{ChildPlan, MountStep};
use super::rule::Access;
use crate::error::{Error, Result};
use crate::sys::linux::fd::FdSlot;

/// What the children of established namespaces bind: the rules on host paths beneath the
/// private directories, and what those namespaces keep already.
#[derive(Clone, Debug, Default)]
pub(super) struct HostPaths {
    /// Host paths (canonical) with the access their policy gives them.
    pub rules: Vec<(PathBuf, Access)>,
    /// The private directories over host directories, in the order of the holder's copies of
    /// their trees.
    pub dirs: Vec<PathBuf>,
    /// Host paths the shared namespaces keep already (nothing beneath them is bound).
    pub kept: Vec<PathBuf>,
}

impl HostPaths {
    /// These paths with `more` added (a path already named keeps the weaker access).
    pub fn with(&self, more: impl IntoIterator<Item = (PathBuf, Access)>) -> HostPaths {
        let mut out = self.clone();
        for (path, access) in more {
            match out.rules.iter_mut().find(|(p, _)| *p == path) {
                Some((_, existing)) => *existing = (*existing).min(access),
                None => out.rules.push((path, access)),
            }
        }
        out
    }

    /// These paths, each at no more than `cap` gives it.
    pub fn capped(&self, cap: impl Fn(&Path) -> Access) -> HostPaths {
        let mut out = self.clone();
        for (path, access) in &mut out.rules {
            *access = (*access).min(cap(path));
        }
        out
    }

    /// Whether `path` would be bound: strictly beneath a private directory, not beneath a kept
    /// path.
    pub fn wants(&self, path: &Path) -> bool {
        self.dirs.iter().any(|d| path.starts_with(d) && path != d)
            && !self.kept.iter().any(|k| path.starts_with(k))
    }

    /// The child's plan: a mount namespace of its own with the host paths bound (`None` when
    /// nothing is to be bound).
    pub fn child_plan(&self) -> Result<Option<ChildPlan>> {
        let rules = self.canonical_rules();
        let mut steps = Vec::new();
        let mut slots = 0;
        for (tree, dir) in self.dirs.iter().enumerate() {
            let beneath: Vec<CanonicalRule> = rules
                .iter()
                .filter(|r| r.path.starts_with(dir) && r.path != *dir)
                .cloned()
                .collect();
            let mut bind = |path: &Path, read_only: bool| -> Result<MountStep> {
                let relative = path.strip_prefix(dir).unwrap_or(path);
                slots += 1;
                Ok(MountStep::BindHost {
                    tree,
                    relative: c_path(relative)?,
                    target: c_path(path)?,
                    slot: slots - 1,
                    read_only,
                })
            };
            let tops = compile::maximal_existing(&beneath);
            let compiled = compile::compile_private(&beneath, dir)?;
            let mut planned: Vec<(PathBuf, MountStep)> = Vec::new();
            for top in &tops {
                let access = compile::access_in(&beneath, top);
                planned.push((top.clone(), bind(top, access < Access::Write)?));
            }
            for mount in &compiled.mounts {
                let step = match mount.kind {
                    // The bind of a top path is read-only already.
                    MountKind::ReadOnly if tops.contains(&mount.path) => continue,
                    MountKind::ReadOnly => MountStep::ReadOnly {
                        path: c_path(&mount.path)?,
                    },
                    MountKind::HideDir | MountKind::HideFile => MountStep::Hide {
                        path: c_path(&mount.path)?,
                    },
                    MountKind::Expose => bind(&mount.path, false)?,
                };
                planned.push((mount.path.clone(), step));
            }
            // Parents before children; a bind before the mounts on the same path.
            planned.sort_by(|a, b| a.0.cmp(&b.0));
            steps.extend(planned.into_iter().map(|(_, step)| step));
        }
        if steps.is_empty() {
            return Ok(None);
        }
        Ok(Some(ChildPlan {
            ipc_ns: false,
            steps,
            slots: (0..slots).map(|_| FdSlot::new()).collect(),
            ..ChildPlan::namespaces_only(true, false)
        }))
    }

    /// The rules of the paths to bind, canonical and existing, sorted.
    fn canonical_rules(&self) -> Vec<CanonicalRule> {
        let mut rules: Vec<CanonicalRule> = Vec::new();
        for (path, access) in &self.rules {
            if !self.wants(path) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(path) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                continue;
            }
            compile::add_absent(&mut rules, path, *access, "a host path of the process");
        }
        rules
    }
}

fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("path {} contains a NUL byte", path.display())))
}
