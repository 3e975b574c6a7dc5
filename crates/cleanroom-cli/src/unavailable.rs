//! `serve` (on every platform but Linux) and `doctor` (on macOS) where their backends do not
//! exist: the same names and options as on Linux, so scripts and `--help` see one CLI, and one
//! line on stderr that says what is missing, with exit 125 (docs/windows.md, docs/macos.md).

use std::ffi::OsString;

use crate::Global;

/// Why `serve` is refused here.
#[cfg(windows)]
const SERVE: &str = "serve is not available on Windows: the exec-server runs on Linux only \
                     (docs/windows.md); use `cleanroom run`";
#[cfg(target_os = "macos")]
const SERVE: &str = "serve is not available on macOS: the exec-server runs on Linux only \
                     (docs/macos.md); use `cleanroom run`";

/// `cleanroom doctor` where the library has no probes (macOS: nothing of it has run there yet).
#[cfg(not(windows))]
pub mod doctor {
    use super::*;

    /// Options of `cleanroom doctor`.
    #[derive(clap::Args, Debug)]
    pub struct DoctorArgs {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    }

    /// Says what `run` uses here and what it cannot probe, and exits 125.
    pub fn main(_args: DoctorArgs, _global: &Global) -> u8 {
        crate::fail(
            "doctor is not available on macOS yet: runs are contained by a process group (no \
             cgroup, no watchdog), exclusive locks (--exclusive) are flock locks as on Linux, \
             and write protection (--protect), network isolation (--net) and private temp \
             directories (--share-tmp, --host-tmp) have no macOS backend to probe \
             (docs/macos.md)",
        )
    }
}

/// `cleanroom serve` without the exec-server (Linux-only: its processes are contained and
/// protected with Linux's primitives).
pub mod serve {
    use super::*;

    /// Options of `cleanroom serve`: whatever is given, the answer is the same line.
    #[derive(clap::Args, Debug)]
    pub struct ServeArgs {
        /// The exec-server's options (see `cleanroom serve --help` on Linux).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        rest: Vec<OsString>,
    }

    /// Exits 125 with one line.
    pub fn main(_args: ServeArgs, _global: &Global) -> u8 {
        crate::fail(SERVE)
    }
}
