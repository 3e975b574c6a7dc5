//! `cleanroom gc` and `cleanroom list` (being written).

use crate::Global;

/// Options of `cleanroom gc`.
#[derive(clap::Args, Debug)]
pub struct GcArgs {}

/// Options of `cleanroom list`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {}

/// Reclaims stale roots.
pub fn gc_main(_args: GcArgs, _global: &Global) -> u8 {
    crate::fail("gc is not implemented yet")
}

/// Lists the namespace.
pub fn list_main(_args: ListArgs, _global: &Global) -> u8 {
    crate::fail("list is not implemented yet")
}
