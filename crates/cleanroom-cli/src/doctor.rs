//! `cleanroom doctor` (being written).

use crate::Global;

/// Options of `cleanroom doctor`.
#[derive(clap::Args, Debug)]
pub struct DoctorArgs {}

/// Prints what this machine allows.
pub fn main(_args: DoctorArgs, _global: &Global) -> u8 {
    crate::fail("doctor is not implemented yet")
}
