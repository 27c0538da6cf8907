//! `/metrics/leader-app`: the leader instance's own Prometheus metrics, fetched from the
//! loopback port `supervise --leader-port-map` moves its metrics port to, so a PodMonitor can
//! scrape them on the elector's port (the leader instance listens on 127.0.0.1 only).
//!
//! Each request to the probe port makes at most one request to that fixed port (the probe
//! server's connection limit bounds how many run at once), answers arriving within
//! [`FRESH_FOR`] of each other share one fetch, and a fetch is bounded in time and size. In a
//! pod that does not lead, nothing listens there: the answer is an empty metrics page that
//! says so, not an error, so a follower's target stays up.

use std::time::Duration;

use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::body::Bytes;
use hyper::{header, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// The path on the probe port.
pub const PATH: &str = "/metrics/leader-app";
/// The longest a fetch may take, connection included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest metrics page passed on.
pub const MAX_BODY: usize = 8 * 1024 * 1024;
/// Answers this close together share one fetch.
pub const FRESH_FOR: Duration = Duration::from_secs(1);

/// One fetched page: status, content type and body.
#[derive(Clone, Debug)]
struct Page {
    status: StatusCode,
    content_type: Option<header::HeaderValue>,
    body: Bytes,
}

/// The leader instance's metrics endpoint on loopback.
pub struct LeaderAppMetrics {
    port: u16,
    last: Mutex<Option<(Instant, Page)>>,
}

impl LeaderAppMetrics {
    pub fn new(port: u16) -> Self {
        LeaderAppMetrics {
            port,
            last: Mutex::new(None),
        }
    }

    /// The leader instance's metrics page, or why there is none.
    pub async fn page(&self) -> Response<Full<Bytes>> {
        // Held across the fetch: requests that arrive meanwhile wait, then share its answer.
        let mut last = self.last.lock().await;
        let page = match &*last {
            Some((at, page)) if at.elapsed() < FRESH_FOR => page.clone(),
            _ => {
                let page = self.fetch().await;
                *last = Some((Instant::now(), page.clone()));
                page
            }
        };
        let mut response = Response::new(Full::new(page.body));
        *response.status_mut() = page.status;
        let content_type = page
            .content_type
            .unwrap_or(header::HeaderValue::from_static(
                "text/plain; version=0.0.4; charset=utf-8",
            ));
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type);
        response
    }

    async fn fetch(&self) -> Page {
        let port = self.port;
        match tokio::time::timeout(FETCH_TIMEOUT, get_metrics(port)).await {
            Ok(Ok(page)) => page,
            Ok(Err(Failure::Refused)) => Page {
                status: StatusCode::OK,
                content_type: None,
                body: Bytes::from(format!(
                    "# passmower-elector: nothing listens on 127.0.0.1:{port}: no leader instance \
                     runs in this pod (it runs only while the pod leads)\n"
                )),
            },
            Ok(Err(Failure::Other(why))) => bad_gateway(format!(
                "the leader instance's metrics on 127.0.0.1:{port} could not be read: {why}\n"
            )),
            Err(_) => bad_gateway(format!(
                "the leader instance's metrics on 127.0.0.1:{port} did not answer within {}\n",
                crate::config::human(FETCH_TIMEOUT)
            )),
        }
    }
}

fn bad_gateway(text: String) -> Page {
    Page {
        status: StatusCode::BAD_GATEWAY,
        content_type: Some(header::HeaderValue::from_static(
            "text/plain; charset=utf-8",
        )),
        body: Bytes::from(text),
    }
}

/// Why a fetch failed.
enum Failure {
    /// Nothing listens: no leader instance runs.
    Refused,
    Other(String),
}

/// `GET /metrics` on 127.0.0.1:`port`, over one connection of its own.
async fn get_metrics(port: u16) -> Result<Page, Failure> {
    let stream = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(Failure::Refused)
        }
        Err(e) => return Err(Failure::Other(e.to_string())),
    };
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
            .await
            .map_err(|e| Failure::Other(e.to_string()))?;
    // Ends with the connection, which ends when the sender is dropped.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = Request::get("/metrics")
        .header(header::HOST, format!("127.0.0.1:{port}"))
        .body(Empty::new())
        .map_err(|e| Failure::Other(e.to_string()))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| Failure::Other(e.to_string()))?;
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
    let body = Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| Failure::Other(format!("{e} (at most {MAX_BODY} bytes are passed on)")))?
        .to_bytes();
    if !status.is_success() {
        return Err(Failure::Other(format!("it answered {status}")));
    }
    Ok(Page {
        status: StatusCode::OK,
        content_type,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port()
    }

    #[tokio::test]
    async fn a_pod_without_a_leader_instance_serves_an_empty_page_that_says_so() {
        let port = free_port();
        let page = LeaderAppMetrics::new(port).page().await;
        assert_eq!(page.status(), StatusCode::OK);
        let body = page.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&body);
        assert!(
            text.starts_with("# passmower-elector: nothing listens"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_leader_instances_page_is_passed_on_and_shared_for_a_second() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let mut served = 0;
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                assert!(String::from_utf8_lossy(&buf[..n]).starts_with("GET /metrics HTTP/1.1"));
                served += 1;
                let body = format!("up_total {served}\n");
                let _ = conn
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n\
                             content-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
        let metrics = LeaderAppMetrics::new(port);
        for _ in 0..3 {
            let page = metrics.page().await;
            assert_eq!(page.status(), StatusCode::OK);
            let body = page.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"up_total 1\n", "one fetch within a second");
        }
        server.abort();
    }
}
