//! Descriptors registered with tokio's reactor ([`register`]): `AsyncFd::register_with_interest`
//! is unsafe because the reactor trusts the descriptor to stay open and the same for the
//! registration's life; the holders accepted here keep that by their types.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A descriptor holder whose descriptor is open and the same for as long as it is held.
pub trait Stable: AsRawFd + private::Sealed {}

/// Closed only when dropped, after the `AsyncFd` that holds it has deregistered it.
impl Stable for OwnedFd {}
/// Closed only when the last reference goes, at the earliest with the `AsyncFd`.
impl Stable for Arc<OwnedFd> {}
/// Open for `'a`, which the `AsyncFd<BorrowedFd<'a>>` cannot outlive.
impl Stable for BorrowedFd<'_> {}

mod private {
    pub trait Sealed {}
    impl Sealed for std::os::fd::OwnedFd {}
    impl Sealed for std::sync::Arc<std::os::fd::OwnedFd> {}
    impl Sealed for std::os::fd::BorrowedFd<'_> {}
}

/// Registers `fd` with the current runtime's reactor for `interest`; the error drops `fd`.
pub fn register<T: Stable>(fd: T, interest: Interest) -> std::io::Result<AsyncFd<T>> {
    // SAFETY: a `Stable` holder's descriptor is open and the same for as long as it is held
    // (see the impls above), so for the whole life of the `AsyncFd` that holds it.
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(|e| e.into_parts().1)
}
