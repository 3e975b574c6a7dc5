//! `cleanroom run`'s messages about protection, which only Linux has: the config file's paths
//! named for protection's messages, and the hint after a write protection may have refused.

use std::path::Path;

use cleanroom::report::{Ending, RunReport};
use cleanroom::run::RunBuilder;

/// Names `path` by where it was given (`FILE:LINE: run.KEY[INDEX] =`) for protection's
/// messages about it.
pub fn path_origin(builder: RunBuilder, path: &Path, origin: String) -> RunBuilder {
    builder.path_origin(path, origin)
}

/// When the command failed (exited non-zero) under a protection the kernel enforced, a write it
/// needed may have been refused, and the command's own message ("Permission denied", "check
/// the permissions") does not say by whom: the line names the protection and the option that
/// allows a path. cleanroom cannot see the refusal itself (Landlock reports denials only
/// through the audit log, which needs the audit subsystem enabled and CAP_AUDIT_READ), so it
/// says "may".
pub fn denied_write_hint(report: &RunReport) -> Option<String> {
    use cleanroom::protect::{Enforcement, ProtectMode};
    let protection = report.protection.as_ref()?;
    let code = report.exit.code.filter(|&code| code != 0)?;
    if report.exit.ending != Ending::Exited || protection.enforcement == Enforcement::None {
        return None;
    }
    let refused = match protection.mode {
        ProtectMode::Off => return None,
        ProtectMode::Home => {
            let homes: Vec<String> = protection
                .homes
                .iter()
                .map(|home| home.path.display().to_string())
                .collect();
            match homes.is_empty() {
                true => "writes to read-only paths are refused".to_string(),
                false => format!(
                    "writes into {} (outside the project and the caches) and other read-only \
                     paths are refused",
                    homes.join(", ")
                ),
            }
        }
        ProtectMode::Strict => "only the run's root, the working directory and --allow-write \
                                paths are writable"
            .to_string(),
    };
    Some(format!(
        "the command exited {code} under --protect {}: {refused}; if it failed on a write it \
         needed, allow that path with --allow-write PATH (or use --protect off); -v lists every \
         rule",
        protection.mode
    ))
}
