//! `elect`: the sidecar role.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct ElectArgs {}

pub fn main(_args: ElectArgs) -> ExitCode {
    eprintln!("passmower-elector elect: not implemented yet");
    ExitCode::FAILURE
}
