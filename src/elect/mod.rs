//! `elect`: the sidecar role. Holds or contends for the Lease and grants operator mode to its
//! own pod while it holds it: `args` → validated `ElectConfig` → the election loop (`run`),
//! which feeds the outputs (flag file + toggle), probes, metrics and Events.

pub mod consumer;
pub mod events;
pub mod fence_check;
pub mod leader_app;
pub mod lease_api;
pub mod metrics;
pub mod native_lease;
pub mod object_watch;
mod options;
pub mod outputs;
pub mod own_pod;
pub mod probes;
pub mod run;
pub mod status;

use std::process::ExitCode;

pub use options::{ElectArgs, ElectConfig};

/// Entry point of `passmower-elector elect`.
pub fn main(args: ElectArgs) -> ExitCode {
    crate::runtime::run("elect", args.into_config(), run::start)
}
