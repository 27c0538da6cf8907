//! `BootTime`: instants on CLOCK_BOOTTIME, the clock the product's grants, the recording app's
//! records and every oracle share (one kernel, so every process of a test reads the same one).

use std::time::Duration;

use nix::time::{clock_gettime, ClockId};

/// A point on CLOCK_BOOTTIME, in nanoseconds since boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BootTime(u64);

impl BootTime {
    /// Reads CLOCK_BOOTTIME now.
    pub fn now() -> Self {
        let ts = clock_gettime(ClockId::CLOCK_BOOTTIME).expect("clock_gettime(CLOCK_BOOTTIME)");
        Self::from_nanos((ts.tv_sec() as u64).saturating_mul(1_000_000_000) + ts.tv_nsec() as u64)
    }

    pub const fn from_nanos(ns: u64) -> Self {
        Self(ns)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Seconds since boot, as `/proc/uptime` counts them (at nanosecond resolution).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// Time from `earlier` to `self`, zero when `earlier` is later.
    pub fn saturating_since(self, earlier: BootTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    pub fn saturating_add(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// The CLOCK_BOOTTIME reading of a wall-clock reading (ns since the epoch), with the offset
    /// between the two clocks as of now: for records stamped by `date +%s%N` a moment ago (so
    /// clock slewing cannot add up).
    pub fn from_wall_nanos(wall_ns: u64) -> Self {
        BootTime::from_nanos(wall_ns.saturating_sub(Self::wall_offset()))
    }

    /// How far the wall clock (ns since the epoch) is ahead of CLOCK_BOOTTIME now.
    pub fn wall_offset() -> u64 {
        let boot = BootTime::now();
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        wall.saturating_sub(boot.as_nanos())
    }
}

/// CLOCK_BOOTTIME now, in seconds: comparable with what scripts read from `/proc/uptime`.
pub fn boot_secs() -> f64 {
    BootTime::now().as_secs_f64()
}
