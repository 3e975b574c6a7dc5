//! The exit statuses of cleanroom itself, the same on every platform. Scripts and CI rely on
//! them (`docs/exit-status.md`), so a code never changes its meaning:
//!
//! | status | constant | meaning |
//! |---|---|---|
//! | the command's | | `run`: the command's own status is passed on |
//! | 1 | [`EXIT_GC_LEFTOVERS`] | `gc`: a removal failed; the leftovers are named and the next gc retries them |
//! | 2 | [`EXIT_NO_SUBCOMMAND`] | plain `cleanroom`: nothing was asked, the help is shown |
//! | 123 | [`EXIT_LEAKED`] | `run --on-leak fail`: the command succeeded but processes outlived it |
//! | 124 | [`EXIT_TIMEOUT`] | `run --timeout` fired and the command ended on the first signal (as timeout(1)) |
//! | 125 | [`EXIT_OWN_FAILURE`] | cleanroom's own failure (usage, state dir, set-up, survivors), never the command's |
//! | 126 | [`EXIT_NOT_EXECUTABLE`] | the command exists but cannot be executed |
//! | 127 | [`EXIT_NOT_FOUND`] | the command was not found |
//! | 137 | [`EXIT_TIMEOUT_KILLED`] | `run --timeout` fired and the command itself needed SIGKILL (as `timeout -k`) |
//!
//! They are `u8`, what a Unix process can exit with; on Windows, where an exit code is 32 bits,
//! they widen with `i32::from`.

/// `gc`: some removal failed; the leftovers are named and the next gc or run retries them.
pub const EXIT_GC_LEFTOVERS: u8 = 1;
/// Plain `cleanroom` (no subcommand): nothing was asked, the help is shown on stderr.
pub const EXIT_NO_SUBCOMMAND: u8 = 2;
/// `--on-leak fail` and the command succeeded but leaked processes.
pub const EXIT_LEAKED: u8 = 123;
/// `--timeout` fired and the main process ended on the first signal (as timeout(1)).
pub const EXIT_TIMEOUT: u8 = 124;
/// `--timeout` fired and the main process was SIGKILLed after the grace period (as `timeout -k`).
pub const EXIT_TIMEOUT_KILLED: u8 = 128 + 9;
/// cleanroom's own failure (bad input, unsafe state dir, setup errors): one line on stderr says
/// what; never a status of the command.
pub const EXIT_OWN_FAILURE: u8 = 125;
/// The command exists but cannot be executed.
pub const EXIT_NOT_EXECUTABLE: u8 = 126;
/// The command was not found.
pub const EXIT_NOT_FOUND: u8 = 127;
