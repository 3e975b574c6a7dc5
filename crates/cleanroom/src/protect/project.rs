//! The working directory's project root, which `--protect home` keeps writable: running tests
//! from a member of a workspace or a subdirectory of a repository must still let the build write
//! the shared `target/`, `node_modules/` or lock files.
//!
//! Invariant: a project root is never a protected path nor an ancestor of one (a dotfiles
//! repository at `~/.git` does not make the home writable); the search looks at names only and
//! never writes.

use std::path::{Path, PathBuf};

/// Version-control markers whose directory is the top of a checkout (`.git` may be a file in
/// worktrees and submodules).
const VCS_MARKERS: &[&str] = &[".git", ".hg", ".jj"];

/// Variables naming build output directories that the run writes wherever they are.
pub const WRITABLE_VARS: &[&str] = &[
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "PYTHONPYCACHEPREFIX",
    "GOTMPDIR",
];

/// A project root and why it is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ProjectRoot {
    pub path: PathBuf,
    pub why: String,
}

/// The project root of `cwd` (canonical): the top of the nearest enclosing VCS checkout, else
/// the outermost of the cargo, npm and go workspace (or package) roots that contain `cwd`.
/// Candidates that are, or contain, one of `protected` are skipped.
pub(super) fn project_root(cwd: &Path, protected: &[PathBuf]) -> Option<ProjectRoot> {
    let usable = |dir: &Path| !protected.iter().any(|p| p.starts_with(dir));
    let vcs = cwd.ancestors().find_map(|dir| {
        VCS_MARKERS
            .iter()
            .find(|m| dir.join(m).symlink_metadata().is_ok())
            .map(|m| (dir, *m))
    });
    if let Some((dir, marker)) = vcs.filter(|(dir, _)| usable(dir)) {
        return Some(ProjectRoot {
            path: dir.to_path_buf(),
            why: format!("project root: the {marker} checkout containing the working directory"),
        });
    }
    [cargo_root(cwd), npm_root(cwd), go_root(cwd)]
        .into_iter()
        .flatten()
        .filter(|root| usable(&root.path))
        .min_by_key(|root| root.path.components().count())
}

/// The nearest ancestor whose `Cargo.toml` has a `[workspace]` table, else the nearest package.
fn cargo_root(cwd: &Path) -> Option<ProjectRoot> {
    manifest_root(
        cwd,
        "Cargo.toml",
        |bytes| {
            String::from_utf8_lossy(bytes)
                .lines()
                .any(|l| l.trim() == "[workspace]")
        },
        [
            "cargo workspace (Cargo.toml with [workspace])",
            "cargo package (Cargo.toml)",
        ],
    )
}

/// The nearest ancestor whose `package.json` declares `workspaces`, else the nearest package.
fn npm_root(cwd: &Path) -> Option<ProjectRoot> {
    manifest_root(
        cwd,
        "package.json",
        |bytes| {
            serde_json::from_slice::<serde_json::Value>(bytes)
                .is_ok_and(|json| json.get("workspaces").is_some())
        },
        [
            "npm workspace (package.json with workspaces)",
            "npm package (package.json)",
        ],
    )
}

/// The nearest ancestor of `cwd` whose `manifest` declares a workspace, else the nearest one
/// with a `manifest`; `names` says what each is.
fn manifest_root(
    cwd: &Path,
    manifest: &str,
    declares_workspace: impl Fn(&[u8]) -> bool,
    [workspace, package]: [&str; 2],
) -> Option<ProjectRoot> {
    let dirs: Vec<&Path> = cwd
        .ancestors()
        .filter(|d| d.join(manifest).is_file())
        .collect();
    let root_of = |dir: &Path, what: &str| root(dir, &format!("project root: the {what}"));
    match dirs
        .iter()
        .find(|d| std::fs::read(d.join(manifest)).is_ok_and(|b| declares_workspace(&b)))
    {
        Some(dir) => Some(root_of(dir, workspace)),
        None => dirs.first().map(|dir| root_of(dir, package)),
    }
}

/// The nearest `go.work`, else the nearest `go.mod`.
fn go_root(cwd: &Path) -> Option<ProjectRoot> {
    let nearest = |file: &str| cwd.ancestors().find(|d| d.join(file).is_file());
    match (nearest("go.work"), nearest("go.mod")) {
        (Some(dir), _) => Some(root(dir, "project root: the go workspace (go.work)")),
        (None, Some(dir)) => Some(root(dir, "project root: the go module (go.mod)")),
        (None, None) => None,
    }
}

fn root(dir: &Path, why: &str) -> ProjectRoot {
    ProjectRoot {
        path: dir.to_path_buf(),
        why: why.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[&str]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        for file in files {
            let path = base.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            if !file.ends_with('/') {
                let text = match path.file_name().unwrap().to_str().unwrap() {
                    "Cargo.toml" if file.starts_with("home/ws/Cargo") => {
                        "[workspace]\nmembers = [\"crates/*\"]\n"
                    }
                    "package.json" if *file == "home/mono/package.json" => {
                        "{\"workspaces\": [\"pkgs/*\"]}"
                    }
                    _ => "{}\n",
                };
                std::fs::write(path, text).unwrap();
            }
        }
        (dir, base)
    }

    #[test]
    fn a_cargo_member_finds_its_workspace_and_a_checkout_wins_over_it() {
        let (_dir, base) = tree(&[
            "home/ws/Cargo.toml",
            "home/ws/crates/m/Cargo.toml",
            "home/ws/crates/m/src/",
        ]);
        let home = [base.join("home")];
        let found = project_root(&base.join("home/ws/crates/m/src"), &home).unwrap();
        assert_eq!(found.path, base.join("home/ws"));
        assert!(found.why.contains("cargo workspace"), "{}", found.why);

        std::fs::create_dir(base.join("home/ws/.git")).unwrap();
        let found = project_root(&base.join("home/ws/crates/m"), &home).unwrap();
        assert_eq!(found.path, base.join("home/ws"));
        assert!(found.why.contains(".git"), "{}", found.why);
    }

    #[test]
    fn a_checkout_of_the_home_itself_is_skipped_for_the_workspace_inside_it() {
        let (_dir, base) = tree(&[
            "home/.git/",
            "home/mono/package.json",
            "home/mono/pkgs/a/package.json",
        ]);
        let home = [base.join("home")];
        let found = project_root(&base.join("home/mono/pkgs/a"), &home).unwrap();
        assert_eq!(found.path, base.join("home/mono"));
        assert!(found.why.contains("npm workspace"), "{}", found.why);
        assert_eq!(project_root(&base.join("home"), &home), None);
    }

    #[test]
    fn go_modules_and_single_packages_are_roots_too() {
        let (_dir, base) = tree(&["p/go.mod", "p/internal/x/", "q/Cargo.toml", "q/src/"]);
        assert_eq!(
            project_root(&base.join("p/internal/x"), &[]).unwrap().path,
            base.join("p")
        );
        assert_eq!(
            project_root(&base.join("q/src"), &[]).unwrap().path,
            base.join("q")
        );
    }
}
