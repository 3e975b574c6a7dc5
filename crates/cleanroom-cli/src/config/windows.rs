//! The trust rule for a discovered config file on Windows, as far as it goes today: none is
//! used. Linux judges who could have written the file and every directory above it (uid and
//! mode, `unix.rs`); Windows would judge owners and ACLs, which is not built yet, and a
//! discovered file could be one another user planted (any user may make a folder at a drive's
//! root, such as `C:\.config`). So a discovered `cleanroom.toml` is named in a warning and
//! skipped; `--config FILE` uses it (the user chose it), `--no-config` silences the search.

use std::ffi::OsString;
use std::os::windows::fs::MetadataExt;
use std::path::Path;

use anyhow::anyhow;

use super::{Distrust, Trusted};

/// `FILE_ATTRIBUTE_REPARSE_POINT`: symbolic links, junctions and other reparse points.
const REPARSE_POINT: u32 = 0x400;

/// A discovered file's identity: its path alone (Windows runs nest without hiding owners, so
/// no nested run needs more).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity;

impl Identity {
    /// The value of [`super::TRUSTED_CONFIG_VAR`] saying that the file at `path` was used.
    pub fn var_value(self, path: &Path) -> OsString {
        path.as_os_str().to_owned()
    }
}

/// Opens the discovered config `path` if it is a plain file (see the module documentation).
pub fn open(path: &Path) -> Result<Trusted, Distrust> {
    let cannot = |e: std::io::Error| {
        Distrust::Refused(anyhow!("cannot read config {}: {e}", path.display()))
    };
    let meta = path.symlink_metadata().map_err(cannot)?;
    if meta.file_attributes() & REPARSE_POINT != 0 {
        return Err(Distrust::Untrusted(
            "it is a link (a reparse point), which could name a file anywhere; name the file \
             with --config FILE to use it"
                .into(),
        ));
    }
    if !meta.is_file() {
        return Err(Distrust::Untrusted("it is not a plain file".into()));
    }
    Err(Distrust::Untrusted(
        "who could have written it (its owner and ACLs, and those of the folders above it) is \
         not checked on Windows yet; name it with --config FILE to use it"
            .into(),
    ))
}
