//! `cleanroom doctor`: what this machine allows, and which containment and protection `run`
//! will use and why. The probing is `cleanroom::doctor`.

use crate::Global;

/// Options of `cleanroom doctor`.
#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Prints what this machine allows, for runs in the namespace `global` names.
pub fn main(args: DoctorArgs, global: &Global) -> u8 {
    let report = cleanroom::doctor::probe(&global.namespace_path());
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serializes")
        );
    } else {
        print!("{report}");
    }
    0
}
