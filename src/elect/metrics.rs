//! The elector's Prometheus metrics, registered in one place.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::status::SharedStatus;
use crate::clock::{self, BootInstant};
use crate::election::HandoverCause;
use crate::grant::Grant;

/// Handles to every metric; cloning shares the underlying values.
#[derive(Clone)]
pub struct Metrics {
    /// Times this pod started or stopped leading.
    pub transitions: Family<Vec<(&'static str, &'static str)>, Counter>,
    /// Latency of successful renews, in seconds.
    pub renew_latency: Histogram,
    /// Failed API calls by kind (conflict, timeout, forbidden, ...).
    pub api_errors: Family<Vec<(&'static str, &'static str)>, Counter>,
    /// 1 while the consumer has shown it runs and obeys, so this pod may take the Lease.
    pub may_contend: Gauge,
    /// 1 once this pod's Pod is terminating (it then never takes the Lease).
    pub pod_terminating: Gauge,
    /// 1 while this pod is a follower that would take a free Lease now.
    pub contending: Gauge,
    /// Terms this pod began, by how the previous one ended (`released`, `expired`, `adopted`,
    /// `created`).
    pub handovers: Family<Vec<(&'static str, &'static str)>, Counter>,
    /// How long nobody led before this pod's latest term, as this pod measured it; 0 after an
    /// adoption.
    pub last_leaderless: Gauge<f64, AtomicU64>,
    /// The supervisor's leader-app starts and unexpected exits, as its signed acks count them
    /// (since the supervisor started). No series until the first such ack: a restarted elector
    /// must not turn the supervisor's running total into a counter reset.
    pub leader_app_starts: Family<Vec<(&'static str, &'static str)>, Counter>,
    pub leader_app_crashes: Family<Vec<(&'static str, &'static str)>, Counter>,
    /// The supervisor's restarts of a leader instance whose health endpoint failed too often in
    /// a row, and its failed probes of that endpoint, likewise from its signed acks.
    pub leader_app_unhealthy: Family<Vec<(&'static str, &'static str)>, Counter>,
    pub leader_app_health_probe_failures: Family<Vec<(&'static str, &'static str)>, Counter>,
    /// 1 for the write fence's state as this pod's checks last found it (see
    /// [`super::fence_check`]), 0 for the others.
    pub write_fence: Family<Vec<(&'static str, &'static str)>, Gauge>,
}

impl Metrics {
    /// The metrics and their registry; the grant's own figures (`is_leader`,
    /// `operators_running`, `grant_expiry_timestamp_seconds`) are read from `status` at each
    /// scrape, see [`GrantView`].
    pub fn new(status: SharedStatus) -> (Self, Registry) {
        let m = Metrics {
            transitions: Family::default(),
            renew_latency: Histogram::new([
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            api_errors: Family::default(),
            may_contend: Gauge::default(),
            pod_terminating: Gauge::default(),
            contending: Gauge::default(),
            handovers: Family::default(),
            last_leaderless: Gauge::default(),
            leader_app_starts: Family::default(),
            leader_app_crashes: Family::default(),
            leader_app_unhealthy: Family::default(),
            leader_app_health_probe_failures: Family::default(),
            write_fence: Family::default(),
        };
        // Every cause from the start, so a rule over the counter sees a series at 0.
        for cause in HandoverCause::ALL {
            let _ = m.handovers.get_or_create(&vec![("cause", cause.as_str())]);
        }
        let mut registry = Registry::with_prefix("passmower_elector");
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
            "may_contend",
            "1 while this pod may take the Lease: the app's supervisor answers (signed) and the pod is not terminating; 0 when the app has not started, stopped answering, exited or cannot read the token, or the pod is being deleted",
            m.may_contend.clone(),
        );
        registry.register(
            "pod_terminating",
            "1 once this pod is being deleted (metadata.deletionTimestamp): it then never takes the Lease; a leader keeps it until it is stopped",
            m.pod_terminating.clone(),
        );
        registry.register(
            "contending",
            "1 while this pod is a follower that would take a free Lease now: its app's supervisor answers (signed), the pod is not terminating, it is not sitting out a step-down and its flag file is writable",
            m.contending.clone(),
        );
        registry.register(
            "handovers",
            "Terms this pod began, by how the previous term ended as this pod saw it: released (a graceful handover), expired (the holder stopped renewing), adopted (a restarted elector of this pod took over its predecessor's term), created (the Lease was absent)",
            m.handovers.clone(),
        );
        registry.register(
            "last_leaderless_seconds",
            "How long no pod led before this pod's latest term, measured by this pod from when it saw the previous term end (the release, or the start of its own wait for an expired holder) to its acquisition; 0 after an adoption",
            m.last_leaderless.clone(),
        );
        registry.register(
            "leader_app_starts",
            "Leader-mode app starts by this pod's supervisor since it started, from its signed acks",
            m.leader_app_starts.clone(),
        );
        registry.register(
            "leader_app_crashes",
            "Leader-mode app runs that ended on their own (or could not start) in this pod's supervisor since it started, from its signed acks",
            m.leader_app_crashes.clone(),
        );
        registry.register(
            "leader_app_unhealthy",
            "Leader instances this pod's supervisor stopped and restarted because their health endpoint (supervise --leader-health-url) failed too often in a row, since it started, from its signed acks",
            m.leader_app_unhealthy.clone(),
        );
        registry.register(
            "leader_app_health_probe_failures",
            "Probes of the leader instance's health endpoint (supervise --leader-health-url) that got no 2xx answer in time, since this pod's supervisor started, from its signed acks",
            m.leader_app_health_probe_failures.clone(),
        );
        registry.register(
            "write_fence",
            "1 for the write fence's state as this pod's dry-run checks last found it: active (a follower's write was refused by the fence of this install's Lease), missing (a follower's write was admitted while another pod held the Lease), foreign (a fence of another Lease refuses this ServiceAccount's writes), unknown (no check could tell yet: this pod has only led, or the dry run was not allowed)",
            m.write_fence.clone(),
        );
        registry.register_collector(Box::new(GrantView(status)));
        (m, registry)
    }

    /// Counts a term this pod began and how long nobody led before it.
    pub fn handover(&self, cause: HandoverCause, leaderless: Duration) {
        self.handovers
            .get_or_create(&vec![("cause", cause.as_str())])
            .inc();
        self.last_leaderless.set(leaderless.as_secs_f64());
    }

    /// Mirrors the supervisor's leader-app totals from its latest signed ack.
    pub fn leader_app_totals(&self, report: &Grant) {
        let set = |family: &Family<Vec<(&'static str, &'static str)>, Counter>, value: u64| {
            family
                .get_or_create(&Vec::new())
                .inner()
                .store(value, std::sync::atomic::Ordering::Relaxed);
        };
        set(&self.leader_app_starts, report.leader_starts);
        set(&self.leader_app_crashes, report.leader_crashes);
        set(&self.leader_app_unhealthy, report.leader_unhealthy);
        set(
            &self.leader_app_health_probe_failures,
            report.leader_probe_failures,
        );
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

/// The grant's figures, computed from the elector's status at the instant of each scrape rather
/// than set by the election loop: a loop that was paused (a frozen pod, a starved CPU) has not
/// yet noticed that its grant lapsed, and a gauge it set earlier would report operators running
/// in a pod whose grant is over — two pods "running operators" on a dashboard that never had two.
/// The status's grant expiry is the same deadline the consumer obeys, so the figure falls to 0
/// exactly when the app must stop.
struct GrantView(SharedStatus);

impl std::fmt::Debug for GrantView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GrantView")
    }
}

impl Collector for GrantView {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = BootInstant::now();
        let status = self.0.get();
        let view = status.leader_view(now);
        let expiry = status
            .grant_expiry
            .filter(|_| view.is_leader)
            .map_or(0.0, |e| {
                clock::wall_clock_of(e)
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64())
            });
        scrape_gauge(
            &mut encoder,
            "is_leader",
            "1 while this pod holds a live grant",
            i64::from(view.is_leader),
        )?;
        scrape_gauge(
            &mut encoder,
            "operators_running",
            "1 while this pod holds a live grant and its app's supervisor says (signed) that the leader app runs; the sum over pods is the number of pods running operators",
            i64::from(view.operators_running),
        )?;
        scrape_gauge(
            &mut encoder,
            "grant_expiry_timestamp_seconds",
            "Unix time at which the current grant lapses unless renewed; 0 when not leading",
            expiry,
        )?;
        Ok(())
    }
}

/// One gauge whose value is computed at the scrape. Named like `register` so that
/// scripts/check-dashboard.py finds every exported name in the source the same way.
fn scrape_gauge<N>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<N>: EncodeMetric,
{
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
}

/// Renders the registry in the Prometheus text format.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_handover_cause_has_a_series_from_the_start() {
        let (m, registry) = Metrics::new(SharedStatus::default());
        let text = render(&registry);
        for cause in ["released", "expired", "adopted", "created"] {
            let line = format!("passmower_elector_handovers_total{{cause=\"{cause}\"}} 0");
            assert!(text.contains(&line), "{line} missing in\n{text}");
        }
        m.handover(HandoverCause::Released, Duration::from_millis(1500));
        let text = render(&registry);
        assert!(text.contains("passmower_elector_handovers_total{cause=\"released\"} 1"));
        assert!(
            text.contains("passmower_elector_last_leaderless_seconds 1.5"),
            "{text}"
        );
    }

    #[test]
    fn the_supervisors_totals_appear_with_its_first_ack_and_follow_it() {
        let (m, registry) = Metrics::new(SharedStatus::default());
        assert!(!render(&registry).contains("passmower_elector_leader_app_starts_total "));
        let totals = |starts, crashes, unhealthy, probe_failures| Grant {
            leader_starts: starts,
            leader_crashes: crashes,
            leader_unhealthy: unhealthy,
            leader_probe_failures: probe_failures,
            ..Grant::follower("", 0, Default::default(), "")
        };
        m.leader_app_totals(&totals(3, 1, 0, 0));
        let text = render(&registry);
        assert!(
            text.contains("passmower_elector_leader_app_starts_total 3"),
            "{text}"
        );
        assert!(
            text.contains("passmower_elector_leader_app_crashes_total 1"),
            "{text}"
        );
        // The health figures have a series from the first ack, at 0 until a probe fails.
        assert!(
            text.contains("passmower_elector_leader_app_unhealthy_total 0"),
            "{text}"
        );
        m.leader_app_totals(&totals(4, 1, 1, 3));
        let text = render(&registry);
        assert!(
            text.contains("passmower_elector_leader_app_unhealthy_total 1"),
            "{text}"
        );
        assert!(
            text.contains("passmower_elector_leader_app_health_probe_failures_total 3"),
            "{text}"
        );
        // A restarted supervisor counts from 0 again: a counter reset, as Prometheus expects.
        m.leader_app_totals(&totals(1, 0, 0, 0));
        assert!(render(&registry).contains("passmower_elector_leader_app_starts_total 1"));
    }

    /// The value of the sample `name` (no labels) in a rendered page.
    fn sample(text: &str, name: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn a_lapsed_grant_reads_as_no_operators_even_before_the_loop_notices() {
        let status = SharedStatus::default();
        let (_m, registry) = Metrics::new(status.clone());
        // What a loop that froze mid-term leaves behind: the consumer said the leader app runs,
        // and nothing has cleared the grant yet.
        status.update(|s| {
            s.operators_running = true;
            s.grant_expiry = Some(BootInstant::now().saturating_add(Duration::from_secs(10)));
        });
        let text = render(&registry);
        let running = "passmower_elector_operators_running";
        let leader = "passmower_elector_is_leader";
        let expiry = "passmower_elector_grant_expiry_timestamp_seconds";
        assert_eq!(sample(&text, running), Some(1.0), "{text}");
        assert_eq!(sample(&text, leader), Some(1.0), "{text}");
        let unix_now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        assert!(
            sample(&text, expiry).is_some_and(|e| e > unix_now + 5.0),
            "{text}"
        );
        let lapsed = BootInstant::now();
        std::thread::sleep(Duration::from_millis(5));
        status.update(|s| s.grant_expiry = Some(lapsed));
        let text = render(&registry);
        assert_eq!(sample(&text, running), Some(0.0), "{text}");
        assert_eq!(sample(&text, leader), Some(0.0), "{text}");
        assert_eq!(sample(&text, expiry), Some(0.0), "{text}");
    }
}
