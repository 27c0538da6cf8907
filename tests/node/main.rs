//! The node tier: the real Passmower on a real one-node Kubernetes (kubelet + containerd),
//! retrofitted by `inject` or the webhook. One node at a time, one per scenario file (see
//! `pme_testkit::node`). Needs root; built with `--features real-pods`.

mod node_smoke;
mod real_pods;
mod status_node;
mod webhook_node;
mod write_inventory;
