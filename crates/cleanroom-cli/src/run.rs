//! `cleanroom run` (being written).

use crate::Global;

/// Options of `cleanroom run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {}

/// Runs a command in a fresh root.
pub fn main(_args: RunArgs, _global: &Global) -> u8 {
    crate::fail("run is not implemented yet")
}
