//! The elector's Prometheus metrics, registered in one place.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Handles to every metric; cloning shares the underlying values.
#[derive(Clone)]
pub struct Metrics {
    /// 1 while this pod holds a live grant.
    pub is_leader: Gauge,
    /// Times this pod started or stopped leading.
    pub transitions: Family<Vec<(&'static str, &'static str)>, Counter>,
    /// Latency of successful renews, in seconds.
    pub renew_latency: Histogram,
    /// Failed API calls by kind (conflict, timeout, forbidden, ...).
    pub api_errors: Family<Vec<(&'static str, &'static str)>, Counter>,
    /// Wall-clock Unix time at which the current grant lapses; 0 when not leading.
    pub grant_expiry: Gauge<f64, AtomicU64>,
    /// 1 while this pod holds a live grant and its consumer's newest signed answer says the
    /// leader app runs: the figure to alert on ("operators are running here").
    pub operators_running: Gauge,
    /// 1 while the consumer has shown it runs and obeys, so this pod may take the Lease.
    pub may_contend: Gauge,
    /// 1 once this pod's Pod is terminating (it then never takes the Lease).
    pub pod_terminating: Gauge,
}

impl Metrics {
    pub fn new() -> (Self, Registry) {
        let m = Metrics {
            is_leader: Gauge::default(),
            transitions: Family::default(),
            renew_latency: Histogram::new([
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            api_errors: Family::default(),
            grant_expiry: Gauge::default(),
            operators_running: Gauge::default(),
            may_contend: Gauge::default(),
            pod_terminating: Gauge::default(),
        };
        let mut registry = Registry::with_prefix("passmower_elector");
        registry.register(
            "is_leader",
            "1 while this pod holds a live grant",
            m.is_leader.clone(),
        );
        registry.register(
            "leader_transitions",
            "Times this pod became leader (direction=\"became\"), adopted the Lease from its own previous elector process (direction=\"adopted\") or stopped leading (direction=\"stopped\")",
            m.transitions.clone(),
        );
        registry.register(
            "renew_duration_seconds",
            "Latency of successful Lease renews",
            m.renew_latency.clone(),
        );
        registry.register(
            "api_errors",
            "Failed Lease API calls by kind",
            m.api_errors.clone(),
        );
        registry.register(
            "grant_expiry_timestamp_seconds",
            "Unix time at which the current grant lapses unless renewed; 0 when not leading",
            m.grant_expiry.clone(),
        );
        registry.register(
            "operators_running",
            "1 while this pod holds a live grant and its app's supervisor says (signed) that the leader app runs; the sum over pods is the number of pods running operators",
            m.operators_running.clone(),
        );
        registry.register(
            "may_contend",
            "1 while this pod may take the Lease: the app's supervisor answers (signed) and the pod is not terminating; 0 when the app has not started, stopped answering, exited or cannot read the token, or the pod is being deleted",
            m.may_contend.clone(),
        );
        registry.register(
            "pod_terminating",
            "1 once this pod is being deleted (metadata.deletionTimestamp): it then never takes the Lease; a leader keeps it until it is stopped",
            m.pod_terminating.clone(),
        );
        (m, registry)
    }

    pub fn api_error(&self, kind: &'static str) {
        self.api_errors.get_or_create(&vec![("kind", kind)]).inc();
    }

    pub fn transition(&self, direction: &'static str) {
        self.transitions
            .get_or_create(&vec![("direction", direction)])
            .inc();
    }
}

/// Renders the registry in the Prometheus text format.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}
