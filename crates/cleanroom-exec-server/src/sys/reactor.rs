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

/// A descriptor registered with the reactor. It derefs to its `AsyncFd` for reading and waiting,
/// never mutably: `AsyncFd::get_mut` and `into_inner` would let safe code replace or close the
/// registered descriptor, which [`register`]'s contract with the reactor forbids.
#[derive(Debug)]
pub struct Registered<T: Stable>(AsyncFd<T>);

impl<T: Stable> std::ops::Deref for Registered<T> {
    type Target = AsyncFd<T>;

    fn deref(&self) -> &AsyncFd<T> {
        &self.0
    }
}

/// Registers `fd` with the current runtime's reactor for `interest`; the error drops `fd`.
pub fn register<T: Stable>(fd: T, interest: Interest) -> std::io::Result<Registered<T>> {
    // SAFETY: a `Stable` holder's descriptor is open and the same for as long as it is held
    // (see the impls above), and `Registered` hands out no way to replace it, so it stays so
    // for the whole life of the `AsyncFd` that holds it.
    unsafe { AsyncFd::register_with_interest(fd, interest) }
        .map(Registered)
        .map_err(|e| e.into_parts().1)
}
