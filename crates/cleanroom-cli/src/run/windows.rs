//! `cleanroom run` on Windows: `--report`'s access check by the file's attributes (the ACL
//! decides when the report is written), and the command's full 32-bit exit code.

use std::path::Path;

/// Whether the existing file `path` may be written: refused when it is read-only (the ACL is
/// only known when the report is written, which names the path if it fails).
pub fn may_write(path: &Path) -> std::io::Result<()> {
    match std::fs::metadata(path)?.permissions().readonly() {
        true => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the file is read-only",
        )),
        false => Ok(()),
    }
}

/// Whether a file may be created in the directory `dir`: an existing directory is taken as
/// writable (its ACL decides when the report is written).
pub fn may_create_in(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

/// The command's exit code, in full: Windows codes are 32 bits (a status that does not fit a
/// byte ends the process here, with nothing left to do: the root is gone and the report
/// written).
pub fn exit_status(status: i32) -> u8 {
    u8::try_from(status).unwrap_or_else(|_| std::process::exit(status))
}
