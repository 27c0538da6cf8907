//! The integration-test harness: a real etcd + kube-apiserver per test binary, namespaces with
//! the elector's exact RBAC, a fault-injecting proxy, elector processes driven by PID, and the
//! grant-overlap oracle. Use it from a test file with `mod support;`.
//!
//! Nothing here mocks the API server, and everything listens on loopback only.

// Each test binary compiles this module and uses a different part of it (and of the
// convenience re-exports below).
#![allow(dead_code, unused_imports)]

pub mod audit;
pub mod cluster;
pub mod elector;
pub mod fence;
pub mod grants;
pub mod manifests;
pub mod passmower;
pub mod process;
pub mod proxy;
pub mod rbac;

use std::future::Future;
use std::time::{Duration, Instant};

pub use cluster::{client_from_kubeconfig, Cluster, TestNs};
pub use elector::ElectorProcess;
pub use grants::{GrantInterval, GrantRecorder, GrantTimeline, Seen};
pub use proxy::{FaultMode, FaultProxy};
pub use rbac::{elector_lease_rules, rules_without, DEFAULT_LEASE_NAME};

/// The shortened election timings of the scenario tests (D 4s, R 1.5s, P 300ms, K 1s): they
/// satisfy the same safety rule as the defaults (R + K + 1s < D) and run in seconds.
pub const FAST_TIMINGS: [&str; 8] = [
    "--lease-duration",
    "4s",
    "--renew-deadline",
    "1500ms",
    "--retry-period",
    "300ms",
    "--kill-grace",
    "1s",
];

/// Polls `cond` every `poll` until it holds (`true`) or `timeout` has passed (`false`). The
/// condition is checked once more at the deadline, so a slow last poll is not lost.
pub fn wait_until(timeout: Duration, poll: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(poll.min(deadline - now));
    }
}

/// [`wait_until`] for conditions that need the API (inside a tokio test).
pub async fn wait_until_async<F, Fut>(timeout: Duration, poll: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond().await {
            return true;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return false;
        }
        tokio::time::sleep(poll.min(deadline - now)).await;
    }
}
