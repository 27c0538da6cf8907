//! The webhook's own probes and metrics on plain HTTP: `/healthz`, `/readyz`, `/metrics`.
//! Read-only, so it may listen on the pod IP for the kubelet and Prometheus.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::registry::Registry;

use super::metrics;
use super::rotation::CertState;
use super::tls::CertSlot;

/// What the probes read.
pub struct ProbeState {
    pub slot: Arc<CertSlot>,
    pub cert: Arc<CertState>,
    /// Set at SIGTERM: the Service stops sending admissions here before the server stops.
    pub stopping: std::sync::atomic::AtomicBool,
    pub registry: Registry,
}

impl ProbeState {
    /// Why admissions should not be sent here, if they should not.
    pub fn not_ready(&self) -> Option<&'static str> {
        if self.stopping.load(Ordering::SeqCst) {
            Some("shutting down")
        } else if !self.slot.is_set() {
            Some("no serving certificate yet")
        } else if !self.cert.trusted.load(Ordering::SeqCst) {
            Some("our CA is not (yet) in the webhook configuration's caBundle")
        } else {
            None
        }
    }
}

/// Serves the probes from a thread of its own ([`crate::probe_server`]: bounded connections, a
/// per-source allowance), so a flood on the health port neither starves the admissions, which
/// share this process's runtime otherwise, nor uses up its descriptors.
pub fn spawn(listener: std::net::TcpListener, state: Arc<ProbeState>) -> std::io::Result<()> {
    crate::probe_server::spawn(
        listener,
        "webhook-probes",
        Arc::new(move |req| respond(&state, req).into()),
    )
}

fn respond(state: &ProbeState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
    }
    match req.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => match state.not_ready() {
            None => text(StatusCode::OK, "ok\n".into()),
            Some(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        "/metrics" => {
            let mut resp = text(StatusCode::OK, metrics::render(&state.registry));
            resp.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            resp
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /healthz, /readyz, /metrics\n".into(),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp
}
