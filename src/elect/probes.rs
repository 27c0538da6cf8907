//! The probe and metrics server: `/healthz`, `/readyz`, `/leader`, `/metrics`, and with
//! `--leader-app-metrics-port` the leader instance's metrics at `/metrics/leader-app`. Read-only; it
//! controls nothing, so it may listen on the pod IP for the kubelet and Prometheus. Anyone who
//! reaches the pod IP reaches this port, so it must not be able to hurt the election: it is
//! served by [`crate::probe_server`], on a thread of its own, with bounded connections and a
//! per-source allowance.

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::registry::Registry;

use super::leader_app::{self, LeaderAppMetrics};
use super::metrics;
use super::status::SharedStatus;
use crate::clock::BootInstant;
use crate::election::Timing;
use crate::probe_server::{self, Answer};

/// Everything a probe request may read.
pub struct ProbeState {
    pub status: SharedStatus,
    pub registry: Registry,
    pub timing: Timing,
    /// The leader instance's metrics on loopback, when configured.
    pub leader_app: Option<LeaderAppMetrics>,
}

/// Binds the probe address, so a port in use is a start-up error.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    probe_server::bind(addr)
}

/// Serves probes on `listener` from a thread of its own, with its own single-threaded runtime,
/// for the life of the process.
pub fn spawn(listener: std::net::TcpListener, state: Arc<ProbeState>) -> std::io::Result<()> {
    probe_server::spawn(
        listener,
        "probes",
        Arc::new(move |req| {
            if req.uri().path() == leader_app::PATH
                && (req.method() == Method::GET || req.method() == Method::HEAD)
                && state.leader_app.is_some()
            {
                let state = state.clone();
                return Answer::Later(Box::pin(async move {
                    match &state.leader_app {
                        Some(app) => app.page().await,
                        None => text(StatusCode::NOT_FOUND, "not configured\n".into()),
                    }
                }));
            }
            respond(&state, req).into()
        }),
    )
}

fn respond(state: &ProbeState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
    }
    let now = BootInstant::now();
    let status = state.status.get();
    match req.uri().path() {
        "/healthz" => {
            match status.healthy(now, state.timing.lease_duration, state.timing.retry_period) {
                Ok(()) => text(StatusCode::OK, "ok\n".into()),
                Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
            }
        }
        "/readyz" => match status.ready() {
            Ok(()) => text(StatusCode::OK, "ok\n".into()),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        "/leader" => {
            let body = serde_json::to_string(&status.leader_view(now)).unwrap_or_default();
            let mut resp = text(StatusCode::OK, body + "\n");
            resp.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            resp
        }
        "/metrics" => {
            let mut resp = text(StatusCode::OK, metrics::render(&state.registry));
            resp.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            resp
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /healthz, /readyz, /leader, /metrics\n".into(),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp
}
