//! Bounded polling: wait for a condition, at most so long, checking it every so often.

use std::future::Future;
use std::time::{Duration, Instant};

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

/// The poll interval of the process-level scenarios: short against what they wait for.
pub const POLL: Duration = Duration::from_millis(10);

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
