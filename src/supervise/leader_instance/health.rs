//! `--leader-health-url`: the leader instance's own health endpoint, probed from the supervisor,
//! and what its failures lead to.
//!
//! With `--on-change=leader-instance` the kubelet's probes reach only the serving instance: the
//! leader instance listens on loopback ports the preload chose. Judged by its process existing,
//! a leader instance whose event loop is wedged, whose Redis client hangs after a failover or
//! whose API watch is half-open keeps the Lease for ever while every figure says operators
//! run. So the supervisor asks the app itself, as the kubelet's liveness probe would: a GET
//! every period, a failure being no 2xx answer within the timeout; that many failures in a row
//! and the loop restarts the instance as if it had crashed (see
//! `supervise/supervisor/leader_instance.rs`).
//!
//! A probe task runs per leader-instance run (by PID), one probe at a time, so a hanging
//! endpoint never piles up connections; its answers go to the loop, which counts them here.

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{header, Request};
use hyper_util::rt::TokioIo;
use nix::unistd::Pid;
use tokio::sync::mpsc;

use crate::clock::BootInstant;

/// Where and how often the leader instance is asked whether it is healthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSpec {
    /// The loopback address the leader instance's health endpoint listens on (under the port
    /// map, the port its health server was moved to).
    pub addr: SocketAddr,
    /// The request path, with its query if any (`/health`).
    pub path: String,
    /// Between the end of one probe and the start of the next; also the wait before the first.
    pub period: Duration,
    /// The longest a probe may take, connecting included.
    pub timeout: Duration,
    /// Failed probes in a row that make the instance count as unhealthy.
    pub failures: u32,
}

/// The shortest `--leader-health-period`: each probe costs the app a request (Passmower's
/// writes Redis and lists from the API server); more than once a second buys nothing.
pub const MIN_PERIOD: Duration = Duration::from_secs(1);
/// The longest `--leader-health-period`: a wedged leader is noticed after about the failure
/// count times this, with the Lease held all that while.
pub const MAX_PERIOD: Duration = Duration::from_secs(300);
/// The shortest `--leader-health-timeout`: a loaded Node process answers slower than that.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(100);
/// The longest `--leader-health-timeout`: as long as the longest period.
pub const MAX_TIMEOUT: Duration = MAX_PERIOD;
/// The largest `--leader-health-failures`.
pub const MAX_FAILURES: u32 = 20;

/// Parses `--leader-health-url`: `http://IP:PORT/PATH` with a loopback IP (the leader instance
/// listens on loopback only) and an explicit port.
pub fn parse_url(text: &str) -> Result<(SocketAddr, String), String> {
    const SHAPE: &str = "expected http://127.0.0.1:PORT/PATH (Passmower with inject's port map: \
                         http://127.0.0.1:19090/health)";
    let rest = text
        .strip_prefix("http://")
        .ok_or_else(|| format!("only http:// is probed; {SHAPE}"))?;
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let addr: SocketAddr = authority
        .parse()
        .map_err(|_| format!("{authority:?} is not IP:PORT; {SHAPE}"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "{} is not a loopback address: the leader instance listens on 127.0.0.1 only; {SHAPE}",
            addr.ip()
        ));
    }
    if addr.port() == 0 {
        return Err(format!("port 0 is not a port to ask; {SHAPE}"));
    }
    if path.contains(char::is_whitespace) {
        return Err(format!("the path may not contain white space; {SHAPE}"));
    }
    Ok((addr, path))
}

/// One probe's answer for the leader instance with PID `pid`: `Ok` for a 2xx, else why not.
#[derive(Debug)]
pub struct Answer {
    pub pid: Pid,
    pub result: Result<(), String>,
}

/// What an answer means for the loop.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not about the leader instance running now (a late answer about a stopped one).
    Stale,
    Healthy,
    /// A failure, `in_a_row` of them so far, fewer than the limit.
    Failed {
        in_a_row: u32,
        reason: String,
    },
    /// The limit reached: restart it. `healthy_for` is how long after its start it last
    /// answered healthy (zero if it never did): its stable run, for the crash budget.
    Unhealthy {
        in_a_row: u32,
        reason: String,
        healthy_for: Duration,
    },
}

/// The probes of the leader instance: the task for the current run and the counts.
#[derive(Debug)]
pub struct LeaderHealth {
    spec: HealthSpec,
    /// The run probed now: its PID, start and task.
    probed: Option<(Pid, BootInstant, tokio::task::JoinHandle<()>)>,
    in_a_row: u32,
    last_healthy: Option<BootInstant>,
    /// Failed probes since the supervisor started.
    pub probe_failures: u64,
    /// Restarts because the limit was reached, since the supervisor started.
    pub unhealthy_restarts: u64,
}

impl LeaderHealth {
    pub fn new(spec: HealthSpec) -> Self {
        LeaderHealth {
            spec,
            probed: None,
            in_a_row: 0,
            last_healthy: None,
            probe_failures: 0,
            unhealthy_restarts: 0,
        }
    }

    /// Probes `running` (the leader instance's PID and start), and nothing else: a new run gets
    /// a new task and a fresh count, and the task of a run that ended is stopped.
    pub fn tend(
        &mut self,
        running: Option<(Pid, BootInstant)>,
        answers: &mpsc::UnboundedSender<Answer>,
    ) {
        let current = self.probed.as_ref().map(|(pid, _, _)| *pid);
        if current == running.map(|(pid, _)| pid) {
            return;
        }
        self.stop();
        if let Some((pid, started)) = running {
            let task = tokio::spawn(probe_loop(self.spec.clone(), pid, answers.clone()));
            self.probed = Some((pid, started, task));
        }
    }

    /// Stops probing (the run ended, or is being stopped).
    pub fn stop(&mut self) {
        if let Some((_, _, task)) = self.probed.take() {
            task.abort();
        }
        self.in_a_row = 0;
        self.last_healthy = None;
    }

    /// Counts an answer. On [`Verdict::Unhealthy`] probing stops: the caller stops the run.
    pub fn judge(&mut self, answer: Answer, now: BootInstant) -> Verdict {
        let Some((pid, started, _)) = &self.probed else {
            return Verdict::Stale;
        };
        if *pid != answer.pid {
            return Verdict::Stale;
        }
        let started = *started;
        let reason = match answer.result {
            Ok(()) => {
                self.in_a_row = 0;
                self.last_healthy = Some(now);
                return Verdict::Healthy;
            }
            Err(reason) => reason,
        };
        self.probe_failures = self.probe_failures.saturating_add(1);
        self.in_a_row = self.in_a_row.saturating_add(1);
        let in_a_row = self.in_a_row;
        if in_a_row < self.spec.failures {
            return Verdict::Failed { in_a_row, reason };
        }
        let healthy_for = self
            .last_healthy
            .map(|t| t.saturating_since(started))
            .unwrap_or_default();
        self.unhealthy_restarts = self.unhealthy_restarts.saturating_add(1);
        self.stop();
        Verdict::Unhealthy {
            in_a_row,
            reason,
            healthy_for,
        }
    }

    /// Failed probes in a row of the run probed now.
    pub fn failing_in_a_row(&self) -> u32 {
        self.in_a_row
    }

    pub fn spec(&self) -> &HealthSpec {
        &self.spec
    }
}

impl Drop for LeaderHealth {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Probes `pid`'s endpoint every period until aborted or the loop is gone.
async fn probe_loop(spec: HealthSpec, pid: Pid, answers: mpsc::UnboundedSender<Answer>) {
    loop {
        tokio::time::sleep(spec.period).await;
        let result = match tokio::time::timeout(spec.timeout, get(spec.addr, &spec.path)).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "no answer within {}",
                crate::config::human(spec.timeout)
            )),
        };
        if answers.send(Answer { pid, result }).is_err() {
            return;
        }
    }
}

/// `GET path` on `addr` over a connection of its own: `Ok` for a 2xx status.
async fn get(addr: SocketAddr, path: &str) -> Result<(), String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    // Ends with the connection, which ends when the sender is dropped.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = Request::get(path)
        .header(header::HOST, addr.to_string())
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    // The body is read (and dropped) so the answer is whole; a health page is small, and the
    // timeout bounds a body that never ends.
    let _ = response.into_body().collect().await;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("it answered {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(failures: u32) -> HealthSpec {
        HealthSpec {
            addr: "127.0.0.1:1".parse().unwrap(),
            path: "/health".into(),
            period: Duration::from_secs(3600),
            timeout: Duration::from_secs(1),
            failures,
        }
    }

    fn at(ms: u64) -> BootInstant {
        BootInstant::from_nanos(ms * 1_000_000)
    }

    fn failed(pid: i32) -> Answer {
        Answer {
            pid: Pid::from_raw(pid),
            result: Err("refused".into()),
        }
    }

    #[test]
    fn the_url_must_be_http_on_loopback_with_a_port() {
        let ok = parse_url("http://127.0.0.1:19090/health").unwrap();
        assert_eq!(ok, ("127.0.0.1:19090".parse().unwrap(), "/health".into()));
        assert_eq!(parse_url("http://[::1]:9/").unwrap().1, "/");
        assert_eq!(parse_url("http://127.0.0.1:9").unwrap().1, "/");
        assert_eq!(parse_url("http://127.0.0.1:9?x=1").unwrap().1, "/?x=1");
        for bad in [
            "https://127.0.0.1:9/health",
            "127.0.0.1:9/health",
            "http://10.0.0.1:9/health",
            "http://localhost:9/health",
            "http://127.0.0.1/health",
            "http://127.0.0.1:0/health",
            "http://127.0.0.1:9/a b",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn the_limit_in_a_row_makes_it_unhealthy_and_a_success_starts_the_count_again() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut h = LeaderHealth::new(spec(3));
        h.tend(Some((Pid::from_raw(10), at(0))), &tx);
        assert!(matches!(
            h.judge(failed(10), at(1000)),
            Verdict::Failed { in_a_row: 1, .. }
        ));
        assert!(matches!(
            h.judge(failed(10), at(2000)),
            Verdict::Failed { in_a_row: 2, .. }
        ));
        let ok = Answer {
            pid: Pid::from_raw(10),
            result: Ok(()),
        };
        assert_eq!(h.judge(ok, at(3000)), Verdict::Healthy);
        assert!(matches!(
            h.judge(failed(10), at(4000)),
            Verdict::Failed { in_a_row: 1, .. }
        ));
        // An answer about another run does not count.
        assert_eq!(h.judge(failed(11), at(4500)), Verdict::Stale);
        assert!(matches!(
            h.judge(failed(10), at(5000)),
            Verdict::Failed { in_a_row: 2, .. }
        ));
        match h.judge(failed(10), at(6000)) {
            Verdict::Unhealthy {
                in_a_row,
                healthy_for,
                ..
            } => {
                assert_eq!(in_a_row, 3);
                assert_eq!(healthy_for, Duration::from_secs(3));
            }
            v => panic!("{v:?}"),
        }
        assert_eq!((h.probe_failures, h.unhealthy_restarts), (5, 1));
        // Probing stopped with it; late answers are stale.
        assert_eq!(h.judge(failed(10), at(7000)), Verdict::Stale);
    }

    #[tokio::test]
    async fn a_new_run_starts_a_fresh_count_and_one_never_healthy_has_no_stable_run() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut h = LeaderHealth::new(spec(2));
        h.tend(Some((Pid::from_raw(10), at(0))), &tx);
        assert!(matches!(
            h.judge(failed(10), at(1000)),
            Verdict::Failed { .. }
        ));
        h.tend(Some((Pid::from_raw(12), at(2000))), &tx);
        assert_eq!(h.failing_in_a_row(), 0);
        assert!(matches!(
            h.judge(failed(12), at(3000)),
            Verdict::Failed { in_a_row: 1, .. }
        ));
        assert!(matches!(
            h.judge(failed(12), at(4000)),
            Verdict::Unhealthy { healthy_for, .. } if healthy_for.is_zero()
        ));
        h.tend(None, &tx);
        assert_eq!(h.judge(failed(12), at(5000)), Verdict::Stale);
    }

    #[tokio::test]
    async fn a_probe_is_ok_only_for_a_2xx_in_time() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for status in ["200 OK", "500 Internal Server Error"] {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                assert!(String::from_utf8_lossy(&buf[..n]).starts_with("GET /health HTTP/1.1"));
                let _ = conn
                    .write_all(
                        format!(
                            "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        )
                        .as_bytes(),
                    )
                    .await;
            }
            // The third is accepted and never answered.
            let _held = listener.accept().await;
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
        assert_eq!(get(addr, "/health").await, Ok(()));
        assert!(get(addr, "/health").await.unwrap_err().contains("500"));
        let hung = tokio::time::timeout(Duration::from_millis(300), get(addr, "/health")).await;
        assert!(hung.is_err(), "an endpoint that never answers is a timeout");
    }
}
