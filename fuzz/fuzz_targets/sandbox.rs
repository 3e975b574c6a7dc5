//! A `sandbox` argument (JSON) of an `fs/*` call, resolved against a small tree of its own: made
//! once, in TMPDIR, and removed when the process exits (scripts/fuzz.sh also gives each run a
//! TMPDIR it removes, which covers a crash).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

/// The tree: `project/` (the working directory) with `src/`, `.git/`, `.env` files, a long name
/// and `tmp/`.
struct Tree {
    /// The temp dir holding it, removed at exit.
    root: PathBuf,
    project: PathBuf,
    tmpdir: PathBuf,
}

static TREE: OnceLock<Tree> = OnceLock::new();

fn tree() -> &'static Tree {
    TREE.get_or_init(|| {
        let root = tempfile::Builder::new()
            .prefix("cleanroom-fuzz-sandbox-")
            .tempdir()
            .expect("a temp dir")
            .keep();
        // SAFETY: `remove_tree` is a plain `extern "C" fn()` that does not unwind; libFuzzer
        // ends a run with exit(), which calls it.
        let registered = unsafe { libc::atexit(remove_tree) };
        assert_eq!(registered, 0, "atexit refused the tree's removal");
        let project = root.canonicalize().expect("canonical").join("project");
        for sub in ["src/deep", ".git", ".codex", "tmp"] {
            std::fs::create_dir_all(project.join(sub)).expect("a dir");
        }
        for file in [
            "prod.env",
            "src/deep/dev.env",
            "src/main.rs",
            &"a".repeat(200),
        ] {
            std::fs::write(project.join(file), "x").expect("a file");
        }
        Tree {
            root,
            tmpdir: project.join("tmp"),
            project,
        }
    })
}

extern "C" fn remove_tree() {
    if let Some(tree) = TREE.get() {
        let _ = std::fs::remove_dir_all(&tree.root);
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let tree = tree();
    cleanroom_exec_server::fuzzing::sandbox(data, &tree.project, &tree.tmpdir);
});
