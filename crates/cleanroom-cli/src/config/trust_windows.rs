//! The trust rule for a discovered config file on Windows, as far as it goes today: the file
//! must be a plain file, not a link or other reparse point (which could name a file anywhere).
//! Who could have written it (the owners and ACLs of the file and the directories above it,
//! which Linux judges by uid and mode, `trust.rs`) is not judged yet: docs/windows.md says so,
//! and `--no-config` or `--config FILE` choose the file explicitly.

use std::ffi::OsString;
use std::fs::File;
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
    let file = File::open(path).map_err(cannot)?;
    Ok(Trusted {
        file,
        identity: Identity,
    })
}
