//! Error values for the whole library.
//!
//! Every variant carries what a person needs to act: which path, which operation, and the
//! underlying cause. Display messages are one line and start with the thing that went wrong.

use std::io;
use std::path::{Path, PathBuf};

/// Everything that can go wrong in cleanroom's core.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A filesystem or process operation on a path failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done ("create directory", "read marker", ...).
        op: &'static str,
        /// The path the operation was applied to.
        path: PathBuf,
        /// The operating system's answer.
        #[source]
        source: io::Error,
    },
    /// A system call without a path failed.
    #[error("cannot {op}: {source}")]
    Sys {
        /// What was being done.
        op: &'static str,
        /// The operating system's answer.
        #[source]
        source: io::Error,
    },
    /// A directory we were asked to trust is not safe to use.
    #[error("unsafe state directory {}: {reason}", path.display())]
    UnsafeNamespace {
        /// The offending path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The kernel or the machine cannot give what was asked for.
    #[error("{what} is not available: {reason}")]
    Unsupported {
        /// The feature that was requested.
        what: &'static str,
        /// Why it cannot be provided here.
        reason: String,
    },
    /// A lock could not be taken within the allowed time.
    #[error("timed out waiting for lock {name:?}: {holder}")]
    LockTimeout {
        /// The lock's name.
        name: String,
        /// A description of the current holder.
        holder: String,
    },
    /// Input that does not make sense (bad option values and the like).
    #[error("{0}")]
    Invalid(String),
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an I/O error with the operation and path it concerns.
    pub fn io(op: &'static str, path: impl AsRef<Path>, source: impl Into<io::Error>) -> Error {
        Error::Io {
            op,
            path: path.as_ref().to_path_buf(),
            source: source.into(),
        }
    }

    /// Wraps an I/O error of an operation that has no path.
    pub fn sys(op: &'static str, source: impl Into<io::Error>) -> Error {
        Error::Sys {
            op,
            source: source.into(),
        }
    }
}

/// Adds path context to `std::io::Result`s and `rustix::io::Result`s.
pub(crate) trait IoContext<T> {
    fn at(self, op: &'static str, path: impl AsRef<Path>) -> Result<T>;
}

impl<T, E: Into<io::Error>> IoContext<T> for std::result::Result<T, E> {
    fn at(self, op: &'static str, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| Error::io(op, path, e))
    }
}
