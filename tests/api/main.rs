//! The api tier: the elector, the supervisor, inject, the fence and the webhook against a real
//! kube-apiserver + etcd, the kit's control plane (one for this binary; private ones where a
//! test stops it or needs cluster-wide objects of its own).

// Each tier uses its part of the product's side of the kit.
#[allow(dead_code, unused_imports)]
#[path = "../product/mod.rs"]
mod product;

mod adoption;
mod consumer_proof;
mod control_plane;
mod converge_clients;
mod election_scenarios;
mod elector_api_requests;
mod elector_probes;
mod emulated_binary;
mod fence;
mod fence_check;
mod follower_sweep;
mod guard_skip_rules;
mod idle_namespace;
mod inject_chart;
mod inject_readme;
mod injected_rbac;
mod install_argocd;
mod install_flux;
mod install_guard;
mod install_k3s;
mod install_lifecycle;
mod install_webhook;
mod leader_app_metrics;
mod leader_scope;
mod lease_bridge;
mod manifests_dry_run;
mod native_election;
mod native_lease;
mod pods_end_to_end;
mod pods_standby;
mod renew_timeouts;
mod status;
mod webhook;
mod webhook_chart;
mod webhook_harness;
