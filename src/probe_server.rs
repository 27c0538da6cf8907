//! The plain-HTTP server behind the elector's and the webhook's probe ports (`/healthz`,
//! `/readyz`, `/metrics`, ...): read-only, on the pod IP for the kubelet and Prometheus, and
//! built so that whatever else reaches that IP cannot make the probes fail.
//!
//! It runs on a thread and runtime of its own (the election loop or the admission server keeps
//! its deadlines whatever arrives here) and bounds what any client can take:
//! - at most [`MAX_CONNECTIONS`] connections, so it can never use up the process's file
//!   descriptors (the flag file and the API connections need them);
//! - a request head must be complete within [`HEADER_READ_TIMEOUT`] (also the idle limit of a
//!   kept-alive connection), and no connection lives longer than [`MAX_CONNECTION_LIFETIME`];
//! - each source address may open [`PEER_BURST`] connections at once and [`PEER_RATE`] a second
//!   after that; beyond it a connection is closed as soon as it is accepted, before any HTTP
//!   work, so a flood from one pod costs an accept and a close, not a request;
//! - when full, the newcomer replaces the oldest connection of the source that holds the most,
//!   so the kubelet (one connection per probe, from the node's address) is never the one
//!   dropped while another source holds several.
//!
//! What it cannot bound is many sources at once, or the kernel's work for a flood's packets:
//! that is the NetworkPolicy's job (README, "Probe port").

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
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
/// Connections one source address may open at once before [`PEER_RATE`] applies: the
/// kubelet's liveness, readiness and startup probes arriving together, and a scrape.
pub const PEER_BURST: u32 = 16;
/// Connections a second one source address may open after its burst: far above a kubelet
/// (one per probe period) and Prometheus (one per scrape interval).
pub const PEER_RATE: u32 = 8;
/// Source addresses remembered for [`PEER_RATE`]; past it, the ones with a full allowance (not
/// seen for a while) are forgotten.
const MAX_PEERS: usize = 1024;

/// What answers a request: a pure function of the request and the caller's state.
pub type Respond = Arc<dyn Fn(&Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync>;

/// Binds the probe address, so a port in use is a start-up error.
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves `respond` on `listener` from a thread named `name`, with its own single-threaded
/// runtime, for the life of the process.
pub fn spawn(listener: std::net::TcpListener, name: &str, respond: Respond) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => serve(listener, respond).await,
                    Err(e) => tracing::error!(error = %e, "probe server cannot start"),
                }
            })
        })?;
    Ok(())
}

/// One source's allowance of new connections (a token bucket).
struct Allowance {
    tokens: f64,
    at: Instant,
}

impl Allowance {
    fn full(now: Instant) -> Self {
        Allowance {
            tokens: f64::from(PEER_BURST),
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let earned = now.duration_since(self.at).as_secs_f64() * f64::from(PEER_RATE);
        self.tokens = (self.tokens + earned).min(f64::from(PEER_BURST));
        self.at = now;
    }

    /// Takes one connection's worth, if there is one.
    fn take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The per-source bookkeeping of the accept loop: allowances and open connections.
#[derive(Default)]
struct Peers {
    allowances: HashMap<IpAddr, Allowance>,
    open: HashMap<IpAddr, VecDeque<AbortHandle>>,
}

impl Peers {
    /// Whether `peer` may open a connection now.
    fn admit(&mut self, peer: IpAddr, now: Instant) -> bool {
        if self.allowances.len() >= MAX_PEERS && !self.allowances.contains_key(&peer) {
            self.allowances.retain(|_, a| {
                a.refill(now);
                a.tokens < f64::from(PEER_BURST)
            });
            if self.allowances.len() >= MAX_PEERS {
                // Every one of them busy: a flood from many sources, which only a
                // NetworkPolicy stops. Forget them all rather than grow.
                self.allowances.clear();
            }
        }
        self.allowances
            .entry(peer)
            .or_insert_with(|| Allowance::full(now))
            .take(now)
    }

    fn prune(&mut self) {
        self.open.retain(|_, tasks| {
            tasks.retain(|t| !t.is_finished());
            !tasks.is_empty()
        });
    }

    /// Aborts the oldest connection of the source holding the most (ties: any of them).
    fn evict(&mut self) {
        self.prune();
        let heaviest = self
            .open
            .iter()
            .max_by_key(|(_, tasks)| tasks.len())
            .map(|(peer, _)| *peer);
        if let Some(oldest) = heaviest
            .and_then(|peer| self.open.get_mut(&peer))
            .and_then(VecDeque::pop_front)
        {
            oldest.abort();
        }
    }
}

async fn serve(listener: TcpListener, respond: Respond) {
    // A slot per connection, held by its task: an evicted connection frees its descriptor when
    // its task is dropped, which `abort` alone does not wait for.
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut peers = Peers::default();
    let mut accept_failures = 0u64;
    let mut refused = 0u64;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(conn) => conn,
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
        let peer = peer.ip().to_canonical();
        if !peers.admit(peer, Instant::now()) {
            refused += 1;
            if refused == 1 || refused.is_multiple_of(1000) {
                tracing::warn!(%peer, refused, "probe port: too many connections from one address; closing them at once");
            }
            drop(stream);
            continue;
        }
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                peers.evict();
                match slots.clone().acquire_owned().await {
                    Ok(slot) => slot,
                    Err(_) => return, // never closed
                }
            }
        };
        let respond = respond.clone();
        let task = tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req| {
                let respond = respond.clone();
                async move { Ok::<_, Infallible>(respond(&req)) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(16 * 1024)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(MAX_CONNECTION_LIFETIME, connection).await;
        });
        peers.prune();
        peers
            .open
            .entry(peer)
            .or_default()
            .push_back(task.abort_handle());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_gets_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut peers = Peers::default();
        let flood: IpAddr = [10, 0, 0, 9].into();
        let kubelet: IpAddr = [10, 0, 0, 1].into();
        let granted = (0..100).filter(|_| peers.admit(flood, t0)).count();
        assert_eq!(granted, PEER_BURST as usize);
        // Another source is not held back by the first.
        assert!(peers.admit(kubelet, t0));
        // One second later: the rate's worth again.
        let t1 = t0 + Duration::from_secs(1);
        let granted = (0..100).filter(|_| peers.admit(flood, t1)).count();
        assert_eq!(granted, PEER_RATE as usize);
    }

    #[test]
    fn forgetting_sources_is_bounded() {
        let t0 = Instant::now();
        let mut peers = Peers::default();
        for i in 0..(MAX_PEERS as u32 * 3) {
            let peer = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert!(peers.admit(peer, t0), "a new source gets its burst");
            assert!(peers.allowances.len() <= MAX_PEERS);
        }
    }
}
