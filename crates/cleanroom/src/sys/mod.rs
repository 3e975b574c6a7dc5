//! The platforms' system interfaces below the library's parts: FFI helpers that more than one
//! part of one platform shares (UTF-16 paths, owned handles and Win32 errors on Windows;
//! `sysctl` strings and the per-user temp dir on macOS; on Linux every raw system call, fork and
//! signal call of its files, see [`linux`]; the password database on both Unix platforms).
//!
//! Invariant: `sys` imports nothing of the crate above it. Every `unsafe` block here wraps one
//! system call with a `// SAFETY:` note on the contract it keeps, and hands its caller a safe
//! function: owned handles, checked lengths, `io::Error`s.

#[cfg(target_os = "linux")]
pub(crate) mod linux;
#[cfg(target_os = "macos")]
pub(crate) mod macos;
#[cfg(unix)]
pub(crate) mod unix;
#[cfg(windows)]
pub(crate) mod windows;
