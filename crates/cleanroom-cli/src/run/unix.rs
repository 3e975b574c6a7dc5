//! `cleanroom run` on Linux and macOS: `--report`'s access check by the effective ids
//! (`faccessat`), and exit statuses of one byte.

use std::path::Path;

use rustix::fs::{Access, AtFlags, CWD};

/// Whether this process may write the existing file `path`.
pub fn may_write(path: &Path) -> std::io::Result<()> {
    access(path, Access::WRITE_OK)
}

/// Whether this process may create a file in the directory `dir`.
pub fn may_create_in(dir: &Path) -> std::io::Result<()> {
    access(dir, Access::WRITE_OK | Access::EXEC_OK)
}

fn access(path: &Path, access: Access) -> std::io::Result<()> {
    rustix::fs::accessat(CWD, path, access, AtFlags::EACCESS).map_err(std::io::Error::from)
}

/// The exit status of the runner: 0–255 on Unix (the command's status, 128+N, or one of
/// cleanroom's own).
pub fn exit_status(status: i32) -> u8 {
    u8::try_from(status).unwrap_or(cleanroom::exit::EXIT_OWN_FAILURE)
}
