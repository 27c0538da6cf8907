//! The background pusher of the toggle channel: always the newest object, retried with backoff,
//! and a 2xx counted as an ack only when its body is the consumer's ack signed with our key.

use std::path::PathBuf;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::watch;

use super::read_verified_ack;
use crate::clock::BootInstant;
use crate::grant::auth::Key;
use crate::grant::{Grant, Mode, Order};

/// Largest toggle answer read; an ack object is a few hundred bytes.
const MAX_ACK_BODY: usize = 64 * 1024;

/// The background pusher: always pushes the newest object; an older one is never retried once
/// a newer exists (the consumer would refuse it anyway).
pub(super) struct Toggle {
    pub(super) latest: watch::Sender<Option<Grant>>,
    /// The verified ack from the newest 2xx answer.
    pub(super) acked: watch::Receiver<Option<Grant>>,
    /// A demotion the ack file has confirmed: it and everything older need no further push.
    pub(super) settled: watch::Sender<Order>,
    /// When the newest 2xx with a verified ack arrived: the consumer's proof of life.
    pub(super) answered: watch::Receiver<Option<BootInstant>>,
    /// Why the latest push failed, in words; None once one succeeds again.
    pub(super) failure: watch::Receiver<Option<String>>,
}

impl Toggle {
    /// Starts the pusher. `heartbeat`: how long an answered object may go without a newer one
    /// before it is pushed again, so a quiet follower's consumer still shows it is alive.
    pub(super) fn spawn(
        url: Uri,
        timeout: Duration,
        heartbeat: Duration,
        key: Key,
        ack_file: PathBuf,
    ) -> Self {
        let (latest, rx) = watch::channel(None);
        let (ack_tx, acked) = watch::channel(None);
        let (settled, settled_rx) = watch::channel(Order::default());
        let (answered_tx, answered) = watch::channel(None);
        let (failure_tx, failure) = watch::channel(None);
        let pusher = Pusher {
            failure: failure_tx,
            url,
            timeout,
            heartbeat,
            key,
            ack_file,
            acked: ack_tx,
            answered: answered_tx,
            settled: settled_rx,
        };
        tokio::spawn(pusher.run(rx));
        Toggle {
            latest,
            acked,
            settled,
            answered,
            failure,
        }
    }
}

struct Pusher {
    url: Uri,
    timeout: Duration,
    heartbeat: Duration,
    key: Key,
    /// The consumer's ack file: a verified `stopped` there explains why nobody answers.
    ack_file: PathBuf,
    acked: watch::Sender<Option<Grant>>,
    answered: watch::Sender<Option<BootInstant>>,
    settled: watch::Receiver<Order>,
    failure: watch::Sender<Option<String>>,
}

impl Pusher {
    /// Whether `grant` needs no (further) push: a demotion the consumer's ack file already
    /// confirms, or a leader grant that has lapsed (the consumer has demoted itself already).
    fn moot(&self, grant: &Grant) -> bool {
        match grant.mode {
            Mode::Leader => BootInstant::now() >= grant.expiry(),
            _ => grant.order() <= *self.settled.borrow(),
        }
    }

    /// Whether the consumer says, in a signed ack of this incarnation, that it has exited.
    fn consumer_stopped(&self, grant: &Grant) -> bool {
        read_verified_ack(&self.ack_file, &self.key)
            .is_some_and(|a| a.mode == Mode::Stopped && a.incarnation == grant.incarnation)
    }

    async fn run(self, mut latest: watch::Receiver<Option<Grant>>) {
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let mut backoff = Duration::from_millis(25);
        let mut failures = 0u32;
        loop {
            let Some(grant) = latest.borrow_and_update().clone() else {
                if latest.changed().await.is_err() {
                    return;
                }
                continue;
            };
            if self.moot(&grant) {
                if latest.changed().await.is_err() {
                    return;
                }
                continue;
            }
            let result = tokio::select! {
                r = post(&client, &self.url, &grant, self.timeout, &self.key) => r,
                changed = latest.changed() => {
                    if changed.is_err() { return; }
                    continue;
                }
            };
            match result {
                Ok(ack) => {
                    if failures > 0 {
                        tracing::info!(after_failures = failures, "toggle push delivered again");
                    }
                    failures = 0;
                    backoff = Duration::from_millis(25);
                    self.failure.send_replace(None);
                    self.acked.send_replace(Some(ack));
                    self.answered.send_replace(Some(BootInstant::now()));
                    // The same object again after a heartbeat without news: the consumer
                    // answers a repeat once it is still in effect (see `supervise`'s Repeat).
                    tokio::select! {
                        changed = latest.changed() => if changed.is_err() { return; },
                        _ = tokio::time::sleep(self.heartbeat) => {}
                    }
                }
                Err(why) => {
                    failures += 1;
                    self.failure.send_replace(Some(why.clone()));
                    // Log the first failure and then every 50th, so a dead consumer cannot flood
                    // logs. A demotion its ack file confirmed meanwhile is done, not failing; and
                    // a consumer that says it has exited (at pod shutdown in native sidecar order
                    // the app container stops first) is expected not to answer: a demotion is
                    // then moot, and other pushes are retried quietly for a consumer restart.
                    let stopped = self.consumer_stopped(&grant);
                    if self.moot(&grant) || (stopped && grant.mode != Mode::Leader) {
                        tracing::debug!(seq = grant.seq, error = %why, "push no longer needed");
                        failures = 0;
                        if latest.changed().await.is_err() {
                            return;
                        }
                        continue;
                    }
                    if stopped {
                        tracing::debug!(url = %self.url, mode = %grant.mode, seq = grant.seq,
                            error = %why, "toggle push failed; the consumer has stopped");
                    } else if failures == 1 || failures.is_multiple_of(50) {
                        tracing::warn!(url = %self.url, mode = %grant.mode, seq = grant.seq, failures, error = %why, "toggle push failed; retrying");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        changed = latest.changed() => if changed.is_err() { return; },
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
}

/// POSTs `grant`; Ok with the consumer's ack when it answered 2xx with an ack object that
/// carries a MAC under `key` and covers `grant`. A 2xx without one is not an ack: whatever
/// answered cannot show it is the consumer we gave the key to.
async fn post(
    client: &Client<HttpConnector, Full<Bytes>>,
    url: &Uri,
    grant: &Grant,
    timeout: Duration,
    key: &Key,
) -> Result<Grant, String> {
    let request = hyper::Request::post(url.clone())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(grant.to_json())))
        .map_err(|e| e.to_string())?;
    let response = tokio::time::timeout(timeout, client.request(request))
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
        .map_err(|e| {
            let cause = std::error::Error::source(&e)
                .map(|s| format!(": {s}"))
                .unwrap_or_default();
            if e.is_connect() {
                format!("no connection to the toggle{cause} (is the app container running?)")
            } else {
                format!("{e}{cause}")
            }
        })?;
    let status = response.status();
    let body = tokio::time::timeout(
        timeout,
        Limited::new(response.into_body(), MAX_ACK_BODY).collect(),
    )
    .await
    .map_err(|_| format!("answered {status} but sent no body within {timeout:?}"))?
    .map_err(|e| format!("answered {status} with an unreadable body: {e}"))?
    .to_bytes();
    if !status.is_success() {
        // The consumer says why it refused (the supervisor: no readable token, another
        // incarnation, a bad MAC): the first line, for the log and the NotContending Event.
        let said: String = String::from_utf8_lossy(&body)
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect();
        return Err(if said.is_empty() {
            format!("answered {status}")
        } else {
            format!("answered {status}: {said}")
        });
    }
    let ack = Grant::from_json(&body)
        .ok()
        .filter(|a| key.verify_ack(a))
        .ok_or_else(|| {
            format!(
                "answered {status} without an ack signed with this elector's key \
                 (is something else listening on the toggle port?)"
            )
        })?;
    let covers = ack.order() >= grant.order()
        && match grant.mode {
            Mode::Leader => ack.mode == Mode::Leader,
            _ => ack.mode != Mode::Leader,
        };
    if covers {
        Ok(ack)
    } else {
        Err(format!(
            "answered {status} with an ack for {} seq {} instead of {} seq {}",
            ack.mode, ack.seq, grant.mode, grant.seq
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Anything that answers 2xx on the toggle port used to count as the consumer's ack.
    #[tokio::test]
    async fn a_2xx_without_a_signed_ack_is_not_an_ack() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let key = Key::generate().unwrap();
        let grant = {
            let mut g = Grant::follower(
                "",
                0,
                Order {
                    incarnation: 1,
                    seq: 2,
                },
                "ns/l",
            );
            key.sign_grant(&mut g);
            g
        };
        let mut good = Grant::follower("", 0, grant.order(), "ns/l");
        key.sign_ack(&mut good);
        let bodies = vec![
            b"ok\n".to_vec(),
            {
                let mut forged = good.clone();
                forged.mac = None;
                forged.to_json()
            },
            good.to_json(),
        ];
        tokio::spawn(async move {
            for body in bodies {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(&body).await;
            }
        });
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let url: Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
        let t = Duration::from_secs(5);
        let e = post(&client, &url, &grant, t, &key).await.unwrap_err();
        assert!(e.contains("without an ack signed"), "{e}");
        assert!(post(&client, &url, &grant, t, &key).await.is_err());
        assert_eq!(post(&client, &url, &grant, t, &key).await.unwrap(), good);
    }
}
