//! A bounded HTTP client loop inside the node's network namespace: GETs a path on a set of
//! addresses (pod IPs, a Service IP) at a fixed interval and counts what failed, so a test can
//! say how many requests a fault cost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::audit::now_us;
use super::pods::http_status;
use super::Node;

/// What the loop saw.
#[derive(Clone, Debug, Default)]
pub struct HttpStats {
    pub sent: u64,
    pub failed: u64,
    /// (microseconds since the epoch, address, what went wrong) of each failure.
    pub failures: Vec<(i64, String, String)>,
}

impl HttpStats {
    /// How many failures of each kind (the error without addresses or numbers after it).
    pub fn kinds(&self) -> std::collections::BTreeMap<String, usize> {
        let mut kinds = std::collections::BTreeMap::new();
        for (_, _, e) in &self.failures {
            let kind: String = e.split(" (os error").next().unwrap_or(e).to_owned();
            *kinds.entry(kind).or_insert(0) += 1;
        }
        kinds
    }

    /// Failures between two instants (microseconds since the epoch).
    pub fn failed_between(&self, from_us: i64, to_us: i64) -> usize {
        self.failures
            .iter()
            .filter(|(t, _, _)| (from_us..=to_us).contains(t))
            .count()
    }
}

/// A running loop; [`HttpLoop::finish`] stops it and returns the counts.
pub struct HttpLoop {
    /// The addresses (`ip:port`) each round requests; replace them at will.
    pub targets: Arc<Mutex<Vec<String>>>,
    stats: Arc<Mutex<HttpStats>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl HttpLoop {
    /// Starts requesting `path` on every target each `interval`, each request bounded by
    /// `timeout`, for at most `max_duration` (then it stops by itself).
    pub fn start(
        node: &Node,
        path: &str,
        interval: Duration,
        timeout: Duration,
        max_duration: Duration,
    ) -> HttpLoop {
        let targets: Arc<Mutex<Vec<String>>> = Arc::default();
        let stats: Arc<Mutex<HttpStats>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (t, s, st) = (targets.clone(), stats.clone(), stop.clone());
        let path = path.to_owned();
        let handle = node.ns.spawn_inside("pme-http-loop", move || {
            let end = Instant::now() + max_duration;
            while !st.load(Ordering::SeqCst) && Instant::now() < end {
                let round = Instant::now();
                let addrs = t.lock().map(|a| a.clone()).unwrap_or_default();
                for addr in addrs {
                    let result = get(&addr, &path, timeout);
                    let mut stats = s.lock().unwrap_or_else(|e| e.into_inner());
                    stats.sent += 1;
                    if let Err(e) = result {
                        stats.failed += 1;
                        stats.failures.push((now_us(), addr, e));
                    }
                }
                if let Some(rest) = interval.checked_sub(round.elapsed()) {
                    std::thread::sleep(rest);
                }
            }
        });
        HttpLoop {
            targets,
            stats,
            stop,
            handle: Some(handle),
        }
    }

    pub fn set_targets(&self, addrs: Vec<String>) {
        if let Ok(mut t) = self.targets.lock() {
            *t = addrs;
        }
    }

    /// The counts so far.
    pub fn snapshot(&self) -> HttpStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn finish(mut self) -> HttpStats {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.snapshot()
    }
}

impl Drop for HttpLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn get(addr: &str, path: &str, timeout: Duration) -> Result<(), String> {
    let sock = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let mut stream = std::net::TcpStream::connect_timeout(&sock, timeout)
        .map_err(|e| format!("connect: {e}"))?;
    match http_status(&mut stream, path, timeout)? {
        200 => Ok(()),
        code => Err(format!("HTTP {code}")),
    }
}
