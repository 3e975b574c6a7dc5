//! `doctor` and `serve` where their backends do not exist (Windows today): the same names and
//! options as on Linux, so scripts and `--help` see one CLI, and one line on stderr that says
//! what is missing, with exit 125 (docs/windows.md).

use std::ffi::OsString;

use crate::Global;

/// `cleanroom doctor` without Landlock, cgroups or network namespaces to probe.
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
            "doctor is not available on Windows yet: runs are contained by a Job Object \
             (KILL_ON_JOB_CLOSE), exclusive locks (--exclusive) are LockFileEx locks in the \
             user's namespace, and write protection (--protect), network isolation (--net), \
             machine-scope locks (--lock-scope machine) and private temp directories \
             (--share-tmp, --host-tmp) have no Windows backend to probe (docs/windows.md)",
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
        crate::fail(
            "serve is not available on Windows: the exec-server runs on Linux only \
             (docs/windows.md); use `cleanroom run`",
        )
    }
}
