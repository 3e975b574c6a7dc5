//! The working directory's project root, which `--protect home` keeps writable (and, beneath a
//! private `/tmp`, the host's): running tests from a member of a workspace or a subdirectory of a
//! repository must still let the build write the shared `target/`, `node_modules/` or lock files.
//!
//! Invariant: a project root is never a protected path nor an ancestor of one (a dotfiles
//! repository at `~/.git` does not make the home writable), and never a directory another user
//! could have made one: a candidate counts only when it and its marker pass [`distrust`] (the
//! [`crate::trust`] rule; never `/`, `/tmp`, `/var/tmp`, `/dev/shm` nor a sticky directory), so
//! a `pyproject.toml` planted in `/tmp` does not make the run share the host's `/tmp`. The search
//! looks at names and metadata only and never writes.

use std::cell::Cell;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::trust::{self, Owner, Owners};

/// Version-control markers whose directory is the top of a checkout (`.git` may be a file in
/// worktrees and submodules).
const VCS_MARKERS: &[&str] = &[".git", ".hg", ".jj"];

/// Files that mark the top of a project for the tools that look for them (pytest's rootdir,
/// tox, Maven, Gradle, Bundler, ...), as (file, what it makes the directory). Cargo, npm and go
/// manifests are read by their own functions below (workspaces).
const PROJECT_MARKERS: &[(&str, &str)] = &[
    ("pyproject.toml", "Python project (pyproject.toml)"),
    ("setup.cfg", "Python project (setup.cfg)"),
    ("setup.py", "Python project (setup.py)"),
    ("tox.ini", "Python project (tox.ini)"),
    ("pytest.ini", "Python project (pytest.ini)"),
    ("pom.xml", "Maven project (pom.xml)"),
    ("settings.gradle", "Gradle build (settings.gradle)"),
    ("settings.gradle.kts", "Gradle build (settings.gradle.kts)"),
    ("build.gradle", "Gradle project (build.gradle)"),
    ("build.gradle.kts", "Gradle project (build.gradle.kts)"),
    ("build.sbt", "sbt project (build.sbt)"),
    ("Gemfile", "Ruby project (Gemfile)"),
    ("composer.json", "PHP project (composer.json)"),
    ("mix.exs", "Elixir project (mix.exs)"),
    ("rebar.config", "Erlang project (rebar.config)"),
    ("deno.json", "Deno project (deno.json)"),
    ("deno.jsonc", "Deno project (deno.jsonc)"),
    ("Package.swift", "Swift package (Package.swift)"),
    ("pubspec.yaml", "Dart package (pubspec.yaml)"),
    ("stack.yaml", "Haskell project (stack.yaml)"),
    ("cabal.project", "Haskell project (cabal.project)"),
    ("dune-project", "OCaml project (dune-project)"),
    ("Project.toml", "Julia project (Project.toml)"),
    ("build.zig", "Zig project (build.zig)"),
    ("CMakeLists.txt", "CMake project (CMakeLists.txt)"),
    ("meson.build", "Meson project (meson.build)"),
    ("MODULE.bazel", "Bazel workspace (MODULE.bazel)"),
    ("WORKSPACE", "Bazel workspace (WORKSPACE)"),
    ("WORKSPACE.bazel", "Bazel workspace (WORKSPACE.bazel)"),
];

/// Variables naming build output directories that the run writes wherever they are.
pub const WRITABLE_VARS: &[&str] = &[
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "PYTHONPYCACHEPREFIX",
    "GOTMPDIR",
];

/// Directories that are never a project root: everyone's scratch space and the whole
/// filesystem.
const NEVER_ROOTS: &[&str] = &["/", "/tmp", "/var/tmp", "/dev/shm"];

/// A project root and why it is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ProjectRoot {
    pub path: PathBuf,
    pub why: String,
    /// The marker that made it one.
    marker: PathBuf,
}

/// What the search found: the project root, and a warning when a candidate failing the trust
/// rule would have made another one.
#[derive(Debug)]
pub(super) struct Found {
    pub root: Option<ProjectRoot>,
    pub warning: Option<String>,
}

/// The project root of `cwd` (canonical): the top of the nearest enclosing VCS checkout, else
/// the outermost of the cargo, npm and go workspace (or package) roots and the directories
/// holding a [`PROJECT_MARKERS`] file that contain `cwd`. Candidates that are, or contain, one
/// of `protected` are skipped, and so are those [`distrust`] judges (as if their marker were
/// absent); when that changed the result, [`Found::warning`] says which marker and why.
pub(super) fn project_root(cwd: &Path, protected: &[PathBuf]) -> Found {
    let owners = Owners::default();
    let search = Search {
        cwd,
        protected,
        owners: Some(&owners),
        distrusted: Cell::new(false),
    };
    let trusted = search.find();
    // Without a distrusted marker, the search without the rule finds the same: it runs (and
    // probes every marker of every ancestor again) only when the rule set one aside.
    let warning = match search.distrusted.get() {
        true => planted_warning(cwd, protected, &owners, &trusted),
        false => None,
    };
    Found {
        root: trusted,
        warning,
    }
}

/// The warning when the search without the trust rule finds another root than `trusted`: the
/// marker it would have taken, and why the rule set it aside.
fn planted_warning(
    cwd: &Path,
    protected: &[PathBuf],
    owners: &Owners,
    trusted: &Option<ProjectRoot>,
) -> Option<String> {
    let unjudged = Search {
        cwd,
        protected,
        owners: None,
        distrusted: Cell::new(false),
    }
    .find()?;
    let path = |found: Option<&ProjectRoot>| found.map(|r| r.path.clone());
    if path(Some(&unjudged)) == path(trusted.as_ref()) {
        return None;
    }
    distrust(owners, &unjudged.path, &unjudged.marker).map(|why| {
        let owner = unjudged.marker.symlink_metadata().map(|m| m.uid());
        let owner = owner.map_or("unknown".into(), |uid| format!("uid {uid}"));
        let instead = path(trusted.as_ref()).map_or("none".into(), |p| p.display().to_string());
        format!(
            "ignoring the project marker {} (owner {owner}): {why}; a project root is taken \
             only from a directory and marker owned by you or root that nobody else may \
             write; the project root is {instead}",
            unjudged.marker.display()
        )
    })
}

/// Why the marker `marker` (an entry of `dir`) does not make `dir` a project root, if it does
/// not: `dir` is one of [`NEVER_ROOTS`] or sticky, or either of them is not the user's own by
/// the [`crate::trust`] rule. Both are judged with `lstat`, never followed.
fn distrust(owners: &Owners, dir: &Path, marker: &Path) -> Option<String> {
    let never = NEVER_ROOTS
        .iter()
        .any(|n| dir == Path::new(n) || Path::new(n).canonicalize().is_ok_and(|c| c == dir));
    if never {
        return Some(format!("{} is never a project root", dir.display()));
    }
    let in_dir = format!("its directory {}", dir.display());
    for (what, path) in [(in_dir.as_str(), dir), ("it", marker)] {
        let meta = match path.symlink_metadata() {
            Ok(meta) => meta,
            Err(e) => return Some(format!("{what} cannot be examined: {e}")),
        };
        let (uid, mode) = (meta.uid(), meta.mode());
        return Some(match owners.judge(uid) {
            Owner::Trusted if trust::sticky_dir(mode) || world_writable(mode) => {
                format!(
                    "{what} (owned by uid {uid}) is sticky or writable by anyone (mode {:o})",
                    mode & 0o7777
                )
            }
            Owner::Trusted => continue,
            Owner::Unseen => format!(
                "{what} is owned by uid {uid}, which stands for any owner this user namespace \
                 does not map"
            ),
            Owner::Other => format!("{what} is owned by uid {uid}"),
        });
    }
    None
}

/// Whether an entry of mode `st_mode` (from `lstat`) lets anyone write it. A group-writable
/// directory still counts (`umask 002` with a group of one's own is common): a marker a group
/// member plants there is theirs, and the owner check refuses it.
fn world_writable(st_mode: u32) -> bool {
    st_mode & libc::S_IFMT != libc::S_IFLNK && st_mode & 0o002 != 0
}

/// One search for the project root: with `owners`, only candidates [`distrust`] finds nothing
/// against count; without, every marker that exists does (what the search was before the trust
/// rule, to tell when the rule changed the result).
struct Search<'a> {
    cwd: &'a Path,
    protected: &'a [PathBuf],
    owners: Option<&'a Owners>,
    /// Set when the rule set aside a marker that exists.
    distrusted: Cell<bool>,
}

impl Search<'_> {
    fn find(&self) -> Option<ProjectRoot> {
        let usable = |dir: &Path| !self.protected.iter().any(|p| p.starts_with(dir));
        let vcs = self.cwd.ancestors().find_map(|dir| {
            VCS_MARKERS
                .iter()
                .find(|m| self.holds(dir, m))
                .map(|m| (dir, *m))
        });
        if let Some((dir, marker)) = vcs.filter(|(dir, _)| usable(dir)) {
            return Some(root(
                dir,
                marker,
                &format!("project root: the {marker} checkout containing the working directory"),
            ));
        }
        [self.cargo_root(), self.npm_root(), self.go_root()]
            .into_iter()
            .flatten()
            .chain(self.marked_roots())
            .filter(|root| usable(&root.path))
            .min_by_key(|root| root.path.components().count())
    }

    /// Whether `dir` holds an entry `name` (not followed) this search counts.
    fn holds(&self, dir: &Path, name: &str) -> bool {
        let marker = dir.join(name);
        if marker.symlink_metadata().is_err() {
            return false;
        }
        let trusted = self
            .owners
            .is_none_or(|owners| distrust(owners, dir, &marker).is_none());
        if !trusted {
            self.distrusted.set(true);
        }
        trusted
    }

    /// Whether `dir` holds a file `name` this search counts.
    fn holds_file(&self, dir: &Path, name: &str) -> bool {
        self.holds(dir, name) && dir.join(name).is_file()
    }

    /// Every ancestor of `cwd` (itself included) holding a [`PROJECT_MARKERS`] file.
    fn marked_roots(&self) -> impl Iterator<Item = ProjectRoot> + '_ {
        self.cwd.ancestors().filter_map(|dir| {
            PROJECT_MARKERS
                .iter()
                .find(|(file, _)| self.holds_file(dir, file))
                .map(|(file, what)| root(dir, file, &format!("project root: the {what}")))
        })
    }

    /// The nearest ancestor whose `Cargo.toml` has a `[workspace]` table, else the nearest
    /// package.
    fn cargo_root(&self) -> Option<ProjectRoot> {
        self.manifest_root(
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

    /// The nearest ancestor whose `package.json` declares `workspaces`, else the nearest
    /// package.
    fn npm_root(&self) -> Option<ProjectRoot> {
        self.manifest_root(
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

    /// The nearest ancestor of `cwd` whose `manifest` declares a workspace, else the nearest
    /// one with a `manifest`; `names` says what each is.
    fn manifest_root(
        &self,
        manifest: &str,
        declares_workspace: impl Fn(&[u8]) -> bool,
        [workspace, package]: [&str; 2],
    ) -> Option<ProjectRoot> {
        let dirs: Vec<&Path> = self
            .cwd
            .ancestors()
            .filter(|d| self.holds_file(d, manifest))
            .collect();
        let root_of =
            |dir: &Path, what: &str| root(dir, manifest, &format!("project root: the {what}"));
        match dirs
            .iter()
            .find(|d| std::fs::read(d.join(manifest)).is_ok_and(|b| declares_workspace(&b)))
        {
            Some(dir) => Some(root_of(dir, workspace)),
            None => dirs.first().map(|dir| root_of(dir, package)),
        }
    }

    /// The nearest `go.work`, else the nearest `go.mod`.
    fn go_root(&self) -> Option<ProjectRoot> {
        let nearest = |file: &str| self.cwd.ancestors().find(|d| self.holds_file(d, file));
        match (nearest("go.work"), nearest("go.mod")) {
            (Some(dir), _) => Some(root(
                dir,
                "go.work",
                "project root: the go workspace (go.work)",
            )),
            (None, Some(dir)) => Some(root(dir, "go.mod", "project root: the go module (go.mod)")),
            (None, None) => None,
        }
    }
}

fn root(dir: &Path, marker: &str, why: &str) -> ProjectRoot {
    ProjectRoot {
        path: dir.to_path_buf(),
        why: why.to_string(),
        marker: dir.join(marker),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(cwd: &Path, protected: &[PathBuf]) -> Option<ProjectRoot> {
        project_root(cwd, protected).root
    }

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
        let found = find(&base.join("home/ws/crates/m/src"), &home).unwrap();
        assert_eq!(found.path, base.join("home/ws"));
        assert!(found.why.contains("cargo workspace"), "{}", found.why);

        std::fs::create_dir(base.join("home/ws/.git")).unwrap();
        let found = find(&base.join("home/ws/crates/m"), &home).unwrap();
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
        let found = find(&base.join("home/mono/pkgs/a"), &home).unwrap();
        assert_eq!(found.path, base.join("home/mono"));
        assert!(found.why.contains("npm workspace"), "{}", found.why);
        assert_eq!(find(&base.join("home"), &home), None);
    }

    #[test]
    fn the_outermost_marked_project_is_the_root_and_a_marker_in_the_home_is_skipped() {
        let (_dir, base) = tree(&[
            "home/setup.cfg",
            "home/py/pyproject.toml",
            "home/py/tests/",
            "home/jvm/settings.gradle.kts",
            "home/jvm/app/build.gradle.kts",
            "home/jvm/app/src/main/",
        ]);
        let home = [base.join("home")];
        let found = find(&base.join("home/py/tests"), &home).unwrap();
        assert_eq!(found.path, base.join("home/py"));
        assert!(found.why.contains("pyproject.toml"), "{}", found.why);
        let found = find(&base.join("home/jvm/app/src/main"), &home).unwrap();
        assert_eq!(found.path, base.join("home/jvm"));
        assert!(found.why.contains("settings.gradle.kts"), "{}", found.why);
        assert_eq!(find(&base.join("home"), &home), None);
    }

    #[test]
    fn go_modules_and_single_packages_are_roots_too() {
        let (_dir, base) = tree(&["p/go.mod", "p/internal/x/", "q/Cargo.toml", "q/src/"]);
        assert_eq!(
            find(&base.join("p/internal/x"), &[]).unwrap().path,
            base.join("p")
        );
        assert_eq!(find(&base.join("q/src"), &[]).unwrap().path, base.join("q"));
    }

    #[test]
    fn a_marker_others_could_have_planted_is_skipped_with_a_warning() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, base) = tree(&["open/pyproject.toml", "open/p/Cargo.toml", "open/p/src/"]);
        let (open, marker) = (base.join("open"), base.join("open/pyproject.toml"));
        let mode = |path: &Path, mode: u32| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        let cwd = base.join("open/p/src");
        assert_eq!(find(&cwd, &[]).unwrap().path, open);
        for (path, bits) in [(&open, 0o1777), (&open, 0o777), (&marker, 0o646)] {
            mode(path, bits);
            let found = project_root(&cwd, &[]);
            assert_eq!(found.root.unwrap().path, base.join("open/p"));
            let warning = found.warning.unwrap();
            assert!(warning.contains(&marker.display().to_string()), "{warning}");
            assert!(warning.contains(&format!("mode {bits:o}")), "{warning}");
            mode(path, if path == &open { 0o755 } else { 0o644 });
        }
        assert_eq!(find(&cwd, &[]).unwrap().path, open);
        mode(&open, 0o775);
        assert_eq!(project_root(&cwd, &[]).root.unwrap().path, open);
        mode(&open, 0o755);
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::lchown(&marker, Some(65534), None).unwrap();
            let found = project_root(&cwd, &[]);
            assert_eq!(found.root.unwrap().path, base.join("open/p"));
            let warning = found.warning.unwrap();
            assert!(warning.contains("owned by uid 65534"), "{warning}");
        }
    }
}
