//! The pinned Codex client: where `scripts/install-codex.sh` put it, and proof that what runs is
//! the pinned version's linux-x64 native binary (not the Node wrapper, not another platform's
//! build, not whatever `codex` is on PATH).
//!
//! A missing or different install fails the test with its name and the command that fixes it;
//! the test never skips.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The npm manifest that pins the client (its lockfile pins the tarballs' hashes).
const PACKAGE_JSON: &str = include_str!("npm/package.json");

/// Where the linux-x64 package keeps its native binary, relative to the install dir.
const NATIVE: &str =
    "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex";

/// The Rust target the native binary must be built for.
const TARGET: &str = "x86_64-unknown-linux-musl";

/// The pinned `@openai/codex` version, read from the npm manifest.
pub fn pinned_version() -> String {
    let manifest: serde_json::Value =
        serde_json::from_str(PACKAGE_JSON).expect("tests/codex/npm/package.json is JSON");
    manifest["dependencies"]["@openai/codex"]
        .as_str()
        .expect("package.json pins @openai/codex")
        .to_string()
}

/// The install dir of the pinned version.
pub fn pinned_install_dir() -> PathBuf {
    install_dir(&pinned_version())
}

/// The install dir: `$CLEANROOM_CODEX_DIR`, else the install script's default.
fn install_dir(version: &str) -> PathBuf {
    match std::env::var_os("CLEANROOM_CODEX_DIR") {
        Some(dir) => PathBuf::from(dir),
        // The checkout's top, without `..`: inside the interop test's private /tmp only the
        // install dir itself is bound back, not the crate's directory (see `isolation`).
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .expect("the checkout holds crates/cleanroom-cli")
            .join(format!("target/interop/codex-{version}")),
    }
}

/// The verified native binary of the pinned client; panics with the fix when it is not there.
pub fn codex_binary() -> PathBuf {
    let version = pinned_version();
    let dir = install_dir(&version);
    let binary = dir.join(NATIVE);
    let fix = "run scripts/install-codex.sh (scripts/test.sh does)";
    assert!(
        binary.is_file(),
        "prerequisite missing: the pinned Codex client @openai/codex {version} (linux-x64) is not \
         installed at {}: {fix}",
        binary.display()
    );
    assert_x86_64_elf(&binary);
    let package = dir
        .join("node_modules/@openai/codex-linux-x64/vendor")
        .join(TARGET);
    let layout = std::fs::read_to_string(package.join("codex-package.json"))
        .unwrap_or_else(|e| panic!("{}/codex-package.json: {e}; {fix}", package.display()));
    let layout: serde_json::Value = serde_json::from_str(&layout).unwrap();
    assert_eq!(
        (layout["version"].as_str(), layout["target"].as_str()),
        (Some(version.as_str()), Some(TARGET)),
        "the installed native package is not {version} for {TARGET}: {fix}"
    );
    let output = Command::new(&binary)
        .arg("--version")
        .env_clear()
        .output()
        .unwrap_or_else(|e| panic!("{} --version: {e}; {fix}", binary.display()));
    let reported = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        reported.trim(),
        format!("codex-cli {version}"),
        "{} reports another version: {fix}",
        binary.display()
    );
    binary.canonicalize().unwrap()
}

/// The file is a 64-bit little-endian ELF executable for x86-64 (`e_machine` 62).
fn assert_x86_64_elf(binary: &Path) {
    let mut header = [0u8; 20];
    let read = std::fs::File::open(binary).and_then(|mut f| f.read_exact(&mut header));
    let is_x86_64 = read.is_ok()
        && header.starts_with(b"\x7fELF")
        && header[4] == 2
        && header[5] == 1
        && u16::from_le_bytes([header[18], header[19]]) == 62;
    assert!(
        is_x86_64,
        "{} is not an x86-64 ELF executable",
        binary.display()
    );
}

/// Asserts that the running process `pid` executes `binary` (its /proc/PID/exe).
pub fn assert_runs(pid: u32, binary: &Path) {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/exe: {e}"));
    assert_eq!(exe, binary, "process {pid} runs another binary");
}
