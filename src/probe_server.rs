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
//! - when full, the newcomer replaces the oldest connection of the source that holds the most,
//!   so the kubelet (one connection per probe, from the node's address) is never the one
//!   dropped while another source holds several, and a newcomer is never turned away: a probe
//!   from the same address as a flood (hostNetwork pods share the node's) still gets a slot,
//!   which a per-source rate limit would refuse it.
//!
//! What it cannot bound is many sources at once, or the kernel's work for a flood's packets:
//! that is the NetworkPolicy's job (docs/reference/elect.md, the probe port).

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

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
/// What answers a request: a function of the request and the caller's state.
pub type Respond = Arc<dyn Fn(&Request<Incoming>) -> Answer + Send + Sync>;

/// An answer to one request: ready at once, or a future the connection's task awaits (within
/// [`MAX_CONNECTION_LIFETIME`], and at most one per connection, so [`MAX_CONNECTIONS`] bounds
/// how many run at once).
pub enum Answer {
    Now(Response<Full<Bytes>>),
    Later(Pin<Box<dyn Future<Output = Response<Full<Bytes>>> + Send>>),
}

impl From<Response<Full<Bytes>>> for Answer {
    fn from(response: Response<Full<Bytes>>) -> Self {
        Answer::Now(response)
    }
}

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

/// The per-source bookkeeping of the accept loop: the open connections of each address.
#[derive(Default)]
struct Peers {
    open: HashMap<IpAddr, VecDeque<AbortHandle>>,
}

impl Peers {
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
                let answer = respond(&req);
                async move {
                    Ok::<_, Infallible>(match answer {
                        Answer::Now(response) => response,
                        Answer::Later(response) => response.await,
                    })
                }
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

    /// The source holding the most connections loses its oldest; the kubelet's one stays.
    #[tokio::test]
    async fn eviction_takes_from_the_heaviest_source() {
        let mut peers = Peers::default();
        let flood: IpAddr = [10, 0, 0, 9].into();
        let kubelet: IpAddr = [10, 0, 0, 1].into();
        let idle = || tokio::spawn(std::future::pending::<()>());
        let probe = idle();
        peers
            .open
            .entry(kubelet)
            .or_default()
            .push_back(probe.abort_handle());
        let floods: Vec<_> = (0..3).map(|_| idle()).collect();
        for f in &floods {
            peers
                .open
                .entry(flood)
                .or_default()
                .push_back(f.abort_handle());
        }
        peers.evict();
        tokio::task::yield_now().await;
        assert!(
            floods[0].is_finished(),
            "the flood's oldest was not evicted"
        );
        assert!(!probe.is_finished(), "the kubelet's connection was evicted");
        assert_eq!(peers.open[&flood].len(), 2);
    }
}
