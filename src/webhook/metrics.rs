//! The webhook's Prometheus metrics, registered in one place.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, &'static str)>;

/// Handles to every metric; cloning shares the underlying values.
#[derive(Clone)]
pub struct Metrics {
    /// Answered AdmissionReviews by outcome (injected, skipped, refused).
    pub admissions: Family<Labels, Counter>,
    /// Requests answered with an HTTP error, by status code class (bad_request, too_large,
    /// not_found, timeout...).
    pub http_errors: Family<Labels, Counter>,
    /// Time from a complete request body to the response, in seconds.
    pub admission_duration: Histogram,
    /// TLS handshakes that failed or timed out.
    pub tls_failures: Counter,
    /// Serving certificates put in place (the first one included).
    pub certificates_served: Counter,
    /// Unix time at which the served certificate expires.
    pub certificate_expiry: Gauge<f64, AtomicU64>,
    /// Failed attempts to update the caBundle.
    pub ca_bundle_errors: Counter,
}

impl Metrics {
    pub fn new() -> (Self, Registry) {
        let m = Metrics {
            admissions: Family::default(),
            http_errors: Family::default(),
            admission_duration: Histogram::new([
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ]),
            tls_failures: Counter::default(),
            certificates_served: Counter::default(),
            certificate_expiry: Gauge::default(),
            ca_bundle_errors: Counter::default(),
        };
        let mut registry = Registry::with_prefix("passmower_elector_webhook");
        registry.register(
            "admissions",
            "AdmissionReviews answered, by outcome",
            m.admissions.clone(),
        );
        registry.register(
            "http_errors",
            "Requests answered with an HTTP error, by kind",
            m.http_errors.clone(),
        );
        registry.register(
            "admission_duration_seconds",
            "Time to decide one AdmissionReview once its body is read",
            m.admission_duration.clone(),
        );
        registry.register(
            "tls_failures",
            "TLS handshakes that failed or timed out",
            m.tls_failures.clone(),
        );
        registry.register(
            "certificates_served",
            "Serving certificates put in place, the first one included",
            m.certificates_served.clone(),
        );
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "Unix time at which the served certificate expires",
            m.certificate_expiry.clone(),
        );
        registry.register(
            "ca_bundle_errors",
            "Failed attempts to update the caBundle of the webhook configuration",
            m.ca_bundle_errors.clone(),
        );
        (m, registry)
    }

    pub fn admission(&self, outcome: &'static str) {
        self.admissions
            .get_or_create(&vec![("outcome", outcome)])
            .inc();
    }

    pub fn http_error(&self, kind: &'static str) {
        self.http_errors.get_or_create(&vec![("kind", kind)]).inc();
    }

    pub fn served(&self, not_after: Option<std::time::SystemTime>) {
        self.certificates_served.inc();
        if let Some(t) = not_after.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()) {
            self.certificate_expiry.set(t.as_secs_f64());
        }
    }
}

/// The registry as Prometheus text.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, registry).is_err() {
        out.clear();
    }
    out
}
