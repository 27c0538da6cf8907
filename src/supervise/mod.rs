//! `supervise`: PID 1 of the app container; runs the app in leader or follower mode per the grant.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct SuperviseArgs {
    /// The app command and its arguments, after `--`.
    #[arg(last = true)]
    pub command: Vec<String>,
}

pub fn main(_args: SuperviseArgs) -> ExitCode {
    eprintln!("passmower-elector supervise: not implemented yet");
    ExitCode::FAILURE
}
