//! Every name `inject` writes into a manifest: annotations, containers, volumes, ports, paths,
//! and the workload kinds it rewrites. Imports nothing of `inject`.

pub(crate) use crate::wire::subdomain_name;
pub use crate::wire::{
    ELECTOR_CONTAINER, GENERATED_FOR_ANNOTATION, INSTALL_CONTAINER, LEASE_ANNOTATION,
};

/// This crate's version: written into the marker annotation.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Annotation on an injected workload; its value is the version of `inject` that wrote it.
pub const INJECTED_ANNOTATION: &str = "passmower-elector.io/injected";
/// Annotation holding what the operator should know about an object `inject` wrote or changed
/// (a replaced rollout strategy, a budget that cannot keep a replica serving), one per line:
/// it stays on the live object, where `kubectl describe` shows it.
pub const WARNINGS_ANNOTATION: &str = "passmower-elector.io/warnings";
/// The follower's namespace selector: a name no namespace can have (the '_' makes it no
/// DNS-1123 label, nor subdomain), so the apiserver refuses to create it and lists and watches
/// resources under it as an empty collection; literal for micromatch and one URL path segment.
/// The charts' `idleNamespace` values are the same (tests/api/idle_namespace.rs keeps them so).
pub const DEFAULT_IDLE_NAMESPACE: &str = "passmower-elector_idle";
/// The target container's name in Passmower's chart.
pub const DEFAULT_CONTAINER: &str = "passmower";
/// What Passmower's image runs when the container sets no command.
pub const PASSMOWER_APP_COMMAND: &[&str] = &["node", "--no-warnings", "src/app.js"];

/// Where the flag file lives (the `elect` / `supervise` default, shared by both containers).
pub const FLAG_DIR: &str = "/var/run/passmower-elector";
/// Where `copy-self` puts the binary for the app container.
pub const BIN_DIR: &str = "/var/run/passmower-elector-bin";
/// The binary inside the sidecar image (see Dockerfile.sidecar).
pub const IMAGE_BINARY: &str = "/usr/local/bin/passmower-elector";
pub const FLAG_VOLUME: &str = "passmower-elector-grant";
pub const BIN_VOLUME: &str = "passmower-elector-bin";
pub const PROBE_PORT_NAME: &str = "elector-probe";
/// Passmower's metrics port, fixed in its code.
pub const APP_METRICS_PORT: u16 = 9090;
/// The loopback port the leader instance's metrics port moves to (`--leader-port-map`), which
/// the elector serves at `/metrics/leader-app` on its probe port.
pub const LEADER_APP_METRICS_PORT: u16 = 19090;
/// Passmower's health route on its metrics server (`src/routes/metrics-server.js`): 200 when
/// Redis takes a write and the API server a list, the route its own chart's liveness probe uses.
pub const APP_HEALTH_PATH: &str = "/health";
/// The elector's path for the leader instance's metrics.
pub const LEADER_APP_METRICS_PATH: &str = "/metrics/leader-app";
/// The env var that carries a `valueFrom` NAMESPACE_SELECTOR to the supervisor's arguments,
/// where the kubelet expands `$(VAR)`: the real NAMESPACE_SELECTOR is set per mode.
pub const LEADER_SELECTOR_VAR: &str = "PASSMOWER_ELECTOR_LEADER_NAMESPACE_SELECTOR";
/// The app container's `preStop` sleep: a pod marked for deletion leaves its Service's ready
/// endpoints at once, but kube-proxy (and any other load balancer) routes to it until it has
/// caught up; measured on the one-node cluster, a rollout lost requests through the Service
/// to pods whose app had already stopped. Five seconds covers kube-proxy's sync with room.
pub const DRAIN_SECONDS: u64 = 5;
/// The UID/GID of the sidecar image's user (distroless "nonroot").
pub(crate) const SIDECAR_UID: i64 = 65532;

/// Workload kinds `inject` knows how to rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadKind {
    #[value(name = "Deployment", alias = "deployment")]
    Deployment,
    #[value(name = "StatefulSet", alias = "statefulset")]
    StatefulSet,
}

impl WorkloadKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
        }
    }

    pub(crate) fn parse(kind: &str) -> Option<Self> {
        match kind {
            "Deployment" => Some(WorkloadKind::Deployment),
            "StatefulSet" => Some(WorkloadKind::StatefulSet),
            _ => None,
        }
    }
}
