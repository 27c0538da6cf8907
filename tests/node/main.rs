//! The node tier: the real Passmower on a real one-node Kubernetes (kubelet + containerd),
//! retrofitted by `inject` or the webhook. One node at a time, one per scenario file (see
//! `pme_testkit::node`). Needs root; built with `--features real-pods`.

// Each tier uses its part of the product's side of the kit.
#[allow(dead_code, unused_imports)]
#[path = "../product/mod.rs"]
mod product;

mod election_move;
mod k3s_node;
mod node_smoke;
mod real_pods;
mod status_node;
mod webhook_node;
mod write_inventory;
