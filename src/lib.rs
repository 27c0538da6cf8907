//! passmower-elector: Lease-based leader election for Passmower replicas.
//!
//! Data flows one way: the Lease (API) → the election state machine → the grant → outputs
//! (flag file, toggle push, probes, metrics, events). The consumer side (`supervise`) obeys the
//! grant; `inject` wires both into existing manifests.

pub mod atomic_file;
pub mod cli;
pub mod clock;
pub mod config;
pub mod copy_self;
pub mod elect;
pub mod election;
pub mod grant;
pub mod inject;
pub mod logging;
pub mod probe_server;
pub mod runtime;
pub mod status;
pub mod supervise;
pub mod webhook;
pub mod wire;
