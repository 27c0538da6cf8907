//! The local HTTP toggle on loopback: `POST` of a grant object (answered only once it has taken
//! effect) and `GET /mode` (what the supervisor is doing now).

use std::convert::Infallible;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

use crate::grant::{Grant, Mode, Order};
use crate::supervise::grant::trust::Refusal;
use crate::supervise::status::Status;

/// A grant object pushed by the elector, with the way back for its answer.
#[derive(Debug)]
pub struct Push {
    pub grant: Grant,
    pub reply: oneshot::Sender<Reply>,
}

/// The answer to a push.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200: the object (or an identical earlier push of it) has fully taken effect; carries the
    /// ack object as written to the ack file.
    Acked(Grant),
    /// 409: older than the last object obeyed, so it was ignored.
    Stale { last: Order },
    /// 409: obeyed, but a newer object or the grant's expiry changed the mode before it took
    /// effect; `mode` is what is in effect now.
    Superseded { mode: Mode, last: Order },
    /// 503: the supervisor is exiting and cannot promote.
    ShuttingDown,
    /// 401 / 403 / 400: an object that cannot be tied to the elector, or that no elector can
    /// mean (the reason says which); never obeyed.
    Refused(Refusal),
}

/// Largest grant object accepted; real ones are a few hundred bytes.
const MAX_BODY: usize = 64 * 1024;

/// Serves the toggle until the process exits.
pub async fn serve(
    listener: TcpListener,
    pushes: mpsc::Sender<Push>,
    status: watch::Receiver<Status>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!(error = %e, "toggle accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let pushes = pushes.clone();
        let status = status.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let pushes = pushes.clone();
                let status = status.clone();
                async move { Ok::<_, Infallible>(handle(req, pushes, status).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %e, "toggle connection ended with an error");
            }
        });
    }
}

async fn handle(
    req: Request<Incoming>,
    pushes: mpsc::Sender<Push>,
    status: watch::Receiver<Status>,
) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/mode") => {
            let body = serde_json::to_vec(&*status.borrow()).unwrap_or_default();
            json(StatusCode::OK, body)
        }
        (&Method::POST, "/mode") => text(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET /mode; POST a grant to /\n",
        ),
        (&Method::POST, _) => push(req, pushes).await,
        _ => text(
            StatusCode::NOT_FOUND,
            "POST a grant object to / ; GET /mode for the current state\n",
        ),
    }
}

async fn push(req: Request<Incoming>, pushes: mpsc::Sender<Push>) -> Response<Full<Bytes>> {
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return text(StatusCode::BAD_REQUEST, &format!("cannot read body: {e}\n")),
    };
    let grant = match Grant::from_json(&body) {
        Ok(g) => g,
        Err(e) => return text(StatusCode::BAD_REQUEST, &format!("{e}\n")),
    };
    let (reply, answer) = oneshot::channel();
    if pushes.send(Push { grant, reply }).await.is_err() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "supervisor is exiting\n");
    }
    match answer.await {
        Ok(Reply::Acked(ack)) => json(StatusCode::OK, ack.to_json()),
        Ok(Reply::Stale { last }) => json(
            StatusCode::CONFLICT,
            serde_json::json!({
                "error": "stale",
                "reason": "not newer than the last object obeyed",
                "last_obeyed": last,
            })
            .to_string()
            .into_bytes(),
        ),
        Ok(Reply::Superseded { mode, last }) => json(
            StatusCode::CONFLICT,
            serde_json::json!({
                "error": "superseded",
                "reason": "a newer object or the grant's expiry changed the mode before this one took effect",
                "mode": mode,
                "last_obeyed": last,
            })
            .to_string()
            .into_bytes(),
        ),
        Ok(Reply::Refused(refusal)) => {
            let status = match refusal {
                Refusal::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
                Refusal::Forbidden(_) => StatusCode::FORBIDDEN,
                Refusal::Invalid(_) => StatusCode::BAD_REQUEST,
            };
            text(status, &format!("{}\n", refusal.reason()))
        }
        Ok(Reply::ShuttingDown) | Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "supervisor is exiting\n"),
    }
}

fn json(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    response(status, "application/json", body)
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    response(
        status,
        "text/plain; charset=utf-8",
        body.as_bytes().to_vec(),
    )
}

fn response(
    status: StatusCode,
    content_type: &'static str,
    body: Vec<u8>,
) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    resp
}
