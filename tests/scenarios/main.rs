//! The scenario tier: everything that needs no apiserver. `supervise` with a recording app,
//! `inject` on golden files and with the real helm and kustomize, the docs, the sidecar image,
//! the reference consumer, and the kit's own oracles.

// Each tier uses its part of the product's side of the kit.
#[allow(dead_code, unused_imports)]
#[path = "../product/mod.rs"]
mod product;

mod consumer_example;
mod docs;
mod fence_coverage;
mod front_door;
mod golden;
mod harness;
mod harness_writers;
mod inject_app_user;
mod inject_budget;
mod inject_errors;
mod inject_golden;
mod inject_kustomize;
mod inject_lease_bridge;
mod inject_native_election;
mod inject_standby;
mod module_graph;
mod release;
mod sidecar_image;
mod supervise_config;
mod supervise_files;
mod supervise_leader_health;
mod supervise_leader_instance;
mod supervise_lease_bridge;
mod supervise_modes;
mod supervise_safety;
mod supervise_signals;
mod supervise_standby;
mod troubleshooting_coverage;
