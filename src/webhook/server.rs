//! The HTTPS admission endpoint: `POST /mutate` over TLS, with the limits a server on a pod IP
//! needs (connections, handshake and header time, body size, connection age) and a graceful
//! stop that lets requests in flight finish.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use super::admit::Injector;
use super::metrics::Metrics;
use super::review;

/// The path the webhook configuration names.
pub const MUTATE_PATH: &str = "/mutate";

/// Limits of the HTTPS server.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Open connections at most; more wait in the listen backlog.
    pub max_connections: usize,
    /// Time for a client to complete the TLS handshake.
    pub handshake_timeout: Duration,
    /// Time for a client to send a request's headers. hyper also counts the wait for the next
    /// request on an idle keep-alive connection against it, and closing an idle connection
    /// races a request the client may be sending at that moment (the API server does not
    /// retry a POST). So it is longer than the API server's own idle timeout (90s): the
    /// client closes idle connections, the server only dead ones.
    pub header_timeout: Duration,
    /// Time to read a body and decide (the API server's own timeout is shorter).
    pub request_timeout: Duration,
    /// Largest request body: larger ones get 413.
    pub max_body_bytes: usize,
    /// The first response on a connection this old says `Connection: close`, so clients
    /// spread over replicas again after a scale-up. Said in a response, never by closing an
    /// idle connection, so no request is ever lost to the close.
    pub max_connection_age: Duration,
    /// Time given to requests in flight at shutdown.
    pub drain_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(10),
            // An AdmissionReview of a CREATE carries one object; the API server stores
            // objects of at most ~1.5 MiB, so 4 MiB leaves room for its JSON and nothing more.
            max_body_bytes: 4 << 20,
            max_connection_age: Duration::from_secs(300),
            drain_timeout: Duration::from_secs(5),
        }
    }
}

/// What a request handler may use.
pub struct App {
    pub injector: Injector,
    pub metrics: Metrics,
    pub limits: Limits,
}

/// Serves `listener` until `shutdown` turns true, then lets open connections finish their
/// requests (up to the drain timeout).
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Arc<App>,
    mut shutdown: watch::Receiver<bool>,
) {
    let limits = app.limits.clone();
    let acceptor = TlsAcceptor::from(tls);
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        if *shutdown.borrow() {
            break;
        }
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = shutdown.changed() => break,
        };
        let (tcp, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors, mostly: back off instead of spinning.
                    tracing::warn!(error = %e, "webhook accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let limits = &app.limits;
            let stream =
                match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "TLS handshake failed");
                        app.metrics.tls_failures.inc();
                        return;
                    }
                    Err(_) => {
                        app.metrics.tls_failures.inc();
                        return;
                    }
                };
            let service_app = app.clone();
            let opened = Instant::now();
            let service = hyper::service::service_fn(move |req| {
                let app = service_app.clone();
                async move {
                    let mut resp = handle(&app, req).await;
                    if opened.elapsed() >= app.limits.max_connection_age {
                        resp.headers_mut()
                            .insert(CONNECTION, HeaderValue::from_static("close"));
                    }
                    Ok::<_, Infallible>(resp)
                }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(64 << 10);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = stop.changed() => {}
            }
            // Shutting down (the Service stopped routing here a while ago): finish the
            // request in flight, if any, then close.
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
    }
    // Every connection holds a permit: all of them back means all connections are closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(limits.drain_timeout, connections.acquire_many(all)).await;
}

async fn handle(app: &App, req: Request<Incoming>) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::POST, MUTATE_PATH) => {}
        (_, MUTATE_PATH) => {
            app.metrics.http_error("method_not_allowed");
            return text(StatusCode::METHOD_NOT_ALLOWED, "only POST\n");
        }
        (&Method::GET, "/healthz") => return text(StatusCode::OK, "ok\n"),
        _ => {
            app.metrics.http_error("not_found");
            return text(
                StatusCode::NOT_FOUND,
                &format!("not found: the admission endpoint is POST {MUTATE_PATH}\n"),
            );
        }
    }
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if !content_type.starts_with("application/json") {
        app.metrics.http_error("unsupported_media_type");
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &format!("content-type {content_type:?} is not application/json\n"),
        );
    }
    let limit = app.limits.max_body_bytes;
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        app.metrics.http_error("too_large");
        return too_large(limit);
    }
    let read = Limited::new(req.into_body(), limit).collect();
    let body = match tokio::time::timeout(app.limits.request_timeout, read).await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            app.metrics.http_error("too_large");
            return too_large(limit);
        }
        Ok(Err(e)) => {
            app.metrics.http_error("bad_request");
            return text(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the request body: {e}\n"),
            );
        }
        Err(_) => {
            app.metrics.http_error("timeout");
            return text(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time\n",
            );
        }
    };
    let request = match review::parse(&body) {
        Ok(request) => request,
        Err(e) => {
            app.metrics.http_error("bad_request");
            return text(StatusCode::BAD_REQUEST, &format!("{e}\n"));
        }
    };
    let started = Instant::now();
    let decided =
        tokio::time::timeout(app.limits.request_timeout, app.injector.admit(&request)).await;
    let Ok((response, outcome)) = decided else {
        app.metrics.http_error("timeout");
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "no decision in time (the ServiceAccount check hung?)\n",
        );
    };
    app.metrics
        .admission_duration
        .observe(started.elapsed().as_secs_f64());
    app.metrics.admission(outcome.as_str());
    let mut resp = Response::new(Full::new(Bytes::from(response.to_body())));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn too_large(limit: usize) -> Response<Full<Bytes>> {
    text(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("the request body is larger than {limit} bytes\n"),
    )
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_owned())));
    *resp.status_mut() = status;
    resp
}
