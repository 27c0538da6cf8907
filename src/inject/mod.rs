//! `inject`: rewrites Kubernetes manifests to add the elector sidecar, the supervisor and RBAC.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct InjectArgs {}

pub fn main(_args: InjectArgs) -> ExitCode {
    eprintln!("passmower-elector inject: not implemented yet");
    ExitCode::FAILURE
}
