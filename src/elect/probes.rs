//! The probe and metrics server: `/healthz`, `/readyz`, `/leader`, `/metrics`. Read-only; it
//! controls nothing, so it may listen on the pod IP for the kubelet and Prometheus.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use super::metrics;
use super::status::SharedStatus;
use crate::clock::BootInstant;
use crate::election::Timing;

/// Everything a probe request may read.
pub struct ProbeState {
    pub status: SharedStatus,
    pub registry: Registry,
    pub timing: Timing,
}

/// Serves probes on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, state: Arc<ProbeState>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "probe server accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(respond(&state, &req)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Binds the probe address, so a port in use is a start-up error.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
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
