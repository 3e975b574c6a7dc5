//! `cleanroom serve` (being written).

use crate::Global;

/// Options of `cleanroom serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {}

/// Runs the exec-server.
pub fn main(_args: ServeArgs, _global: &Global) -> u8 {
    crate::fail("serve is not implemented yet")
}
