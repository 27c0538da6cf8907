//! The probe and metrics server: `/healthz`, `/readyz`, `/leader`, `/metrics`. Read-only; it
//! controls nothing, so it may listen on the pod IP for the kubelet and Prometheus.
//!
//! Anyone who reaches the pod IP reaches this port, so it must not be able to hurt the election:
//! it runs on a thread and runtime of its own (the election loop keeps its deadlines whatever
//! arrives here), holds at most [`MAX_CONNECTIONS`] connections (so it can never use up the
//! process's file descriptors, which the flag file and the API connections need), closes a
//! connection that has not sent a complete request head within [`HEADER_READ_TIMEOUT`] (also
//! the idle limit of a kept-alive one) or that lives longer than [`MAX_CONNECTION_LIFETIME`],
//! and when full it drops its oldest connection for the new one, so a probe that sends its
//! request at once is served even while someone holds many connections half-open.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;

/// Connections served at once. Enough for the kubelet's probes, Prometheus and a few humans;
/// small beside any usable descriptor limit.
pub const MAX_CONNECTIONS: usize = 32;
/// A request head must be complete this soon after the connection opened (or, kept alive,
/// after the previous response): the kubelet sends its probe in one packet.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// No connection lives longer than this, whatever it does.
pub const MAX_CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

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

/// Binds the probe address, so a port in use is a start-up error.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves probes on `listener` from a thread of its own, with its own single-threaded runtime,
/// for the life of the process.
pub fn spawn(listener: std::net::TcpListener, state: Arc<ProbeState>) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("probes".into())
        .spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => serve(listener, state).await,
                    Err(e) => tracing::error!(error = %e, "probe server cannot start"),
                }
            })
        })?;
    Ok(())
}

async fn serve(listener: TcpListener, state: Arc<ProbeState>) {
    // A slot per connection, held by its task: an evicted connection frees its descriptor when
    // its task is dropped, which `abort` alone does not wait for.
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut open: VecDeque<AbortHandle> = VecDeque::with_capacity(MAX_CONNECTIONS);
    let mut accept_failures = 0u64;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors (or similar): log the first failure and every 100th, and
                // wait before trying again instead of spinning.
                accept_failures += 1;
                if accept_failures == 1 || accept_failures.is_multiple_of(100) {
                    tracing::warn!(error = %e, failures = accept_failures, "probe server accept failed");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                // Full: the newcomer replaces the oldest connection.
                open.retain(|task| !task.is_finished());
                if let Some(oldest) = open.pop_front() {
                    oldest.abort();
                }
                match slots.clone().acquire_owned().await {
                    Ok(slot) => slot,
                    Err(_) => return, // never closed
                }
            }
        };
        let state = state.clone();
        let task = tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(respond(&state, &req)) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(16 * 1024)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(MAX_CONNECTION_LIFETIME, connection).await;
        });
        open.retain(|task| !task.is_finished());
        open.push_back(task.abort_handle());
    }
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
