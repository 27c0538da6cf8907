//! Time on CLOCK_BOOTTIME: the one clock every grant deadline is measured on.
//!
//! CLOCK_BOOTTIME keeps counting while the machine is suspended or the VM is frozen, unlike
//! CLOCK_MONOTONIC (which tokio's timers use). A grant that expired during a suspend must be
//! seen as expired the moment the process runs again, so deadlines are kept as [`BootInstant`]s
//! and slept on with a CLOCK_BOOTTIME timerfd. The same clock is shared by every container of a
//! pod (one kernel), which is what lets the supervisor obey an expiry written by the elector.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use nix::time::{clock_gettime, ClockId as TimeClockId};
use tokio::io::unix::AsyncFd;

/// A point on CLOCK_BOOTTIME, in nanoseconds since boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BootInstant(u64);

impl BootInstant {
    /// Reads CLOCK_BOOTTIME now.
    pub fn now() -> Self {
        // clock_gettime(CLOCK_BOOTTIME) cannot fail on Linux >= 2.6.39 with a valid pointer;
        // a zero reading would only make deadlines look expired, which fails closed.
        let ts = clock_gettime(TimeClockId::CLOCK_BOOTTIME).unwrap_or_else(|_| TimeSpec::new(0, 0));
        Self::from_nanos((ts.tv_sec() as u64).saturating_mul(1_000_000_000) + ts.tv_nsec() as u64)
    }

    pub const fn from_nanos(ns: u64) -> Self {
        Self(ns)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time from `earlier` to `self`, zero when `earlier` is later.
    pub fn saturating_since(self, earlier: BootInstant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    pub fn saturating_add(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    pub fn saturating_sub(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// Time left until `self`, measured from `now`; zero once passed.
    pub fn remaining(self, now: BootInstant) -> Duration {
        self.saturating_since(now)
    }
}

/// Converts a CLOCK_BOOTTIME deadline to a wall-clock time, for humans only (logs, `expires_at`).
pub fn wall_clock_of(deadline: BootInstant) -> std::time::SystemTime {
    let now_boot = BootInstant::now();
    let now_wall = std::time::SystemTime::now();
    if deadline >= now_boot {
        now_wall + deadline.saturating_since(now_boot)
    } else {
        now_wall - now_boot.saturating_since(deadline)
    }
}

/// Formats a CLOCK_BOOTTIME deadline as RFC 3339 wall-clock time (UTC, millisecond precision).
pub fn rfc3339_of(deadline: BootInstant) -> String {
    humantime::format_rfc3339_millis(wall_clock_of(deadline)).to_string()
}

/// Sleeps until CLOCK_BOOTTIME reaches `deadline`, including any time spent suspended.
///
/// Falls back to a tokio sleep (CLOCK_MONOTONIC) only if a timerfd cannot be created, which
/// would be a kernel without timerfd support; the fallback re-checks the boot clock on wake.
pub async fn sleep_until(deadline: BootInstant) {
    loop {
        let now = BootInstant::now();
        if now >= deadline {
            return;
        }
        match boottime_timer(deadline) {
            Ok(timer) => {
                // Readiness means the absolute deadline has passed; the loop re-checks anyway.
                if let Ok(mut guard) = timer.readable().await {
                    guard.clear_ready();
                }
            }
            Err(_) => tokio::time::sleep(deadline.remaining(now)).await,
        }
    }
}

/// Sleeps for `d` measured on CLOCK_BOOTTIME.
pub async fn sleep(d: Duration) {
    sleep_until(BootInstant::now().saturating_add(d)).await
}

/// A timerfd owned by this module; the newtype exists so tokio can poll it.
struct BootTimer(TimerFd);

impl AsRawFd for BootTimer {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

fn boottime_timer(deadline: BootInstant) -> io::Result<AsyncFd<BootTimer>> {
    let timer = TimerFd::new(
        ClockId::CLOCK_BOOTTIME,
        TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let ns = deadline.as_nanos();
    let at = TimeSpec::new((ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as i64);
    timer
        .set(
            Expiration::OneShot(at),
            TimerSetTimeFlags::TFD_TIMER_ABSTIME,
        )
        .map_err(io::Error::from)?;
    // SAFETY: the AsyncFd owns the BootTimer, which owns the fd, so the fd stays open and is
    // not reused for as long as it is registered with the reactor.
    unsafe { AsyncFd::register(BootTimer(timer)) }.map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_clock_moves_forward() {
        let a = BootInstant::now();
        std::thread::sleep(Duration::from_millis(5));
        let b = BootInstant::now();
        assert!(b.saturating_since(a) >= Duration::from_millis(5));
        assert_eq!(a.saturating_since(b), Duration::ZERO);
    }

    #[tokio::test]
    async fn sleep_until_waits_for_the_boot_clock() {
        let start = BootInstant::now();
        sleep_until(start.saturating_add(Duration::from_millis(30))).await;
        assert!(BootInstant::now().saturating_since(start) >= Duration::from_millis(30));
    }

    #[tokio::test]
    async fn past_deadline_returns_at_once() {
        let start = BootInstant::now();
        sleep_until(start.saturating_sub(Duration::from_secs(1))).await;
        assert!(BootInstant::now().saturating_since(start) < Duration::from_millis(50));
    }
}
