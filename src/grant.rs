//! The grant protocol: the object the elector writes to the flag file and pushes to the toggle,
//! the ack file the consumer writes back, and the ordering rule both sides obey.
//!
//! One JSON object travels on every channel (flag file, `POST` to the toggle, ack file), so a
//! consumer needs one parser. Ordering is by `(incarnation, seq)`: `incarnation` is the elector
//! process's start time on CLOCK_BOOTTIME (comparable across a pod's containers, which share a
//! kernel) and `seq` grows with every object that process emits. A consumer obeys an object only
//! if it is newer than the last one it obeyed, so a late or retried push cannot undo a newer
//! demotion and a dead elector's last words never outrank its successor's.
//!
//! Every object is also tied to the elector that emitted it: [`auth`] keeps the per-incarnation
//! key the elector writes to `<flag-file>.token` and the MACs over the canonical strings that
//! grants and acks carry in `mac`.

pub mod auth;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::atomic_file;
use crate::clock::{self, BootInstant};

/// What the pod may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Operator mode: reconcile, until the grant's expiry.
    Leader,
    /// Serve HTTP only; no operator work.
    Follower,
    /// Only in ack files: the consumer has exited and runs nothing.
    Stopped,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Leader => "leader",
            Mode::Follower => "follower",
            Mode::Stopped => "stopped",
        })
    }
}

/// Position of an object in an elector's output stream; compared as a tuple.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Order {
    pub incarnation: u64,
    pub seq: u64,
}

/// The flag-file / toggle object. Field names are a stable interface (see docs/protocol.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub mode: Mode,
    /// The Lease holder identity as the elector knows it (may be empty when nobody leads).
    #[serde(default)]
    pub holder: String,
    /// `leaseTransitions` after this pod acquired the Lease: a fencing token, not an order.
    #[serde(default)]
    pub epoch: u64,
    pub incarnation: u64,
    pub seq: u64,
    /// `"namespace/name"` of the Lease.
    #[serde(default)]
    pub lease: String,
    /// CLOCK_BOOTTIME nanoseconds at which a leader grant lapses; 0 for a follower.
    #[serde(default)]
    pub expires_boottime_ns: u64,
    /// R of the elector that wrote it, in ns: a consumer refuses a leader grant that expires
    /// further ahead than this from the moment it reads it.
    #[serde(default)]
    pub renew_deadline_ns: u64,
    /// K of the elector that wrote it, in ns: the longest a consumer may take to stop operator
    /// work after a demotion or the expiry (the supervisor never uses a longer grace).
    #[serde(default)]
    pub kill_grace_ns: u64,
    /// Only in acks: leader children in a row that exited on their own before the supervisor's
    /// `--restart-backoff-reset` (a crash-looping leader), reset by a stable run or a demotion.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub leader_start_failures: u64,
    /// Only in acks: leader-mode app starts since the supervisor started (for metrics).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub leader_starts: u64,
    /// Only in acks: leader-mode app runs that ended on their own, or could not start, since
    /// the supervisor started (for metrics).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub leader_crashes: u64,
    /// Only in acks: leader instances the supervisor restarted because their health endpoint
    /// (`--leader-health-url`) failed too often in a row, since it started (for metrics).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub leader_unhealthy: u64,
    /// Only in acks: failed probes of the leader instance's health endpoint since the
    /// supervisor started (for metrics).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub leader_probe_failures: u64,
    /// The same expiry as RFC 3339 wall-clock time, for humans only; never used for decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Lower-case hex HMAC-SHA256 of the canonical string (see [`auth`]) under the key of the
    /// elector incarnation named by `incarnation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why a leader grant is not one an elector can mean (see [`Grant::check_leader_bound`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderBoundError {
    /// A leader grant that announces no renew deadline: nothing bounds its expiry.
    NoRenewDeadline,
    /// It expires `ahead` from now, further than the `renew_deadline` it announces.
    BeyondRenewDeadline {
        ahead: Duration,
        renew_deadline: Duration,
    },
}

impl fmt::Display for LeaderBoundError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaderBoundError::NoRenewDeadline => {
                f.write_str("a leader grant without renew_deadline_ns")
            }
            LeaderBoundError::BeyondRenewDeadline {
                ahead,
                renew_deadline,
            } => write!(
                f,
                "the leader grant expires {}ns ahead, further than its renew deadline ({}ns)",
                ahead.as_nanos(),
                renew_deadline.as_nanos()
            ),
        }
    }
}

impl Grant {
    /// The rule every consumer of a grant applies, the one the whole safety argument rests on
    /// (docs/design/safety.md): a leader grant may not expire further ahead of `now` than the
    /// renew deadline R it announces. The elector grants until its send time + R and sent the
    /// grant before anyone reads it, so a later expiry is no grant it made (a corrupted or
    /// forged file, a clock that is not CLOCK_BOOTTIME). Follower and stopped objects pass.
    /// The supervisor, the elector adopting its predecessor's grant and the example consumer
    /// all call this.
    pub fn check_leader_bound(&self, now: BootInstant) -> Result<(), LeaderBoundError> {
        if self.mode != Mode::Leader {
            return Ok(());
        }
        if self.renew_deadline_ns == 0 {
            return Err(LeaderBoundError::NoRenewDeadline);
        }
        if self.expiry() > now.saturating_add(self.renew_deadline()) {
            return Err(LeaderBoundError::BeyondRenewDeadline {
                ahead: Duration::from_nanos(
                    self.expires_boottime_ns.saturating_sub(now.as_nanos()),
                ),
                renew_deadline: self.renew_deadline(),
            });
        }
        Ok(())
    }

    /// A leader grant that lapses at `expires`.
    pub fn leader(
        holder: &str,
        epoch: u64,
        order: Order,
        lease: &str,
        expires: BootInstant,
    ) -> Self {
        Grant {
            expires_boottime_ns: expires.as_nanos(),
            expires_at: Some(clock::rfc3339_of(expires)),
            ..Grant::unsigned(Mode::Leader, holder, epoch, order, lease)
        }
    }

    /// A follower object; `holder` is whoever leads now, as far as the elector knows.
    pub fn follower(holder: &str, epoch: u64, order: Order, lease: &str) -> Self {
        Grant::unsigned(Mode::Follower, holder, epoch, order, lease)
    }

    /// An object of `mode` with no expiry, no announced timings, no counters and no MAC yet.
    fn unsigned(mode: Mode, holder: &str, epoch: u64, order: Order, lease: &str) -> Self {
        Grant {
            mode,
            holder: holder.to_owned(),
            epoch,
            incarnation: order.incarnation,
            seq: order.seq,
            lease: lease.to_owned(),
            expires_boottime_ns: 0,
            renew_deadline_ns: 0,
            kill_grace_ns: 0,
            leader_start_failures: 0,
            leader_starts: 0,
            leader_crashes: 0,
            leader_unhealthy: 0,
            leader_probe_failures: 0,
            expires_at: None,
            mac: None,
        }
    }

    /// The same object announcing the elector's renew deadline R and kill grace K.
    pub fn with_limits(mut self, renew_deadline: Duration, kill_grace: Duration) -> Self {
        self.renew_deadline_ns = duration_ns(renew_deadline);
        self.kill_grace_ns = duration_ns(kill_grace);
        self
    }

    /// The elector's kill grace K as announced in the object (zero when absent).
    pub fn kill_grace(&self) -> Duration {
        Duration::from_nanos(self.kill_grace_ns)
    }

    /// The elector's renew deadline R as announced in the object (zero when absent).
    pub fn renew_deadline(&self) -> Duration {
        Duration::from_nanos(self.renew_deadline_ns)
    }

    pub fn order(&self) -> Order {
        Order {
            incarnation: self.incarnation,
            seq: self.seq,
        }
    }

    /// The mode in force at `now`: a leader grant past its expiry counts as follower.
    pub fn effective_mode(&self, now: BootInstant) -> Mode {
        match self.mode {
            Mode::Leader if now < self.expiry() => Mode::Leader,
            Mode::Leader => Mode::Follower,
            other => other,
        }
    }

    pub fn expiry(&self) -> BootInstant {
        BootInstant::from_nanos(self.expires_boottime_ns)
    }

    /// Time left on a leader grant at `now` (zero for followers and expired grants).
    pub fn remaining(&self, now: BootInstant) -> Duration {
        match self.effective_mode(now) {
            Mode::Leader => self.expiry().remaining(now),
            _ => Duration::ZERO,
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        // Serializing a struct of strings and integers cannot fail.
        let mut out = serde_json::to_vec(self).unwrap_or_default();
        out.push(b'\n');
        out
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, GrantError> {
        serde_json::from_slice(bytes).map_err(GrantError::Parse)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error("malformed grant object: {0}")]
    Parse(#[source] serde_json::Error),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Path of the ack file kept beside a flag file: `<flag-file>.ack`.
pub fn ack_path(flag_file: &Path) -> PathBuf {
    let mut name = flag_file.as_os_str().to_owned();
    name.push(".ack");
    PathBuf::from(name)
}

/// Writes `grant` to `path` atomically (temp file, fsync, rename, fsync of the directory).
pub fn write_file(path: &Path, grant: &Grant) -> Result<(), GrantError> {
    atomic_file::write(path, &grant.to_json()).map_err(|source| GrantError::Write {
        path: path.to_owned(),
        source,
    })
}

/// Reads a grant object from `path`; `Ok(None)` when the file does not exist yet. A symlink, a
/// FIFO or anything but a small regular file is an error, never a wait (see [`atomic_file`]).
pub fn read_file(path: &Path) -> Result<Option<Grant>, GrantError> {
    match atomic_file::read_capped(path, atomic_file::MAX_READ) {
        Ok(Some(bytes)) => Grant::from_json(&bytes).map(Some),
        Ok(None) => Ok(None),
        Err(source) => Err(GrantError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Nanoseconds of `d`, saturating (a duration beyond 584 years is not a real setting).
pub fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The process-wide ordering stamp source of one elector incarnation.
#[derive(Debug)]
pub struct Sequencer {
    incarnation: u64,
    seq: u64,
}

impl Sequencer {
    /// Starts a new incarnation at the current CLOCK_BOOTTIME reading.
    pub fn start() -> Self {
        Self::with_incarnation(BootInstant::now().as_nanos())
    }

    pub fn with_incarnation(incarnation: u64) -> Self {
        Sequencer {
            incarnation,
            seq: 0,
        }
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The stamp for the next object: strictly greater than every one before it.
    pub fn next_order(&mut self) -> Order {
        self.seq += 1;
        Order {
            incarnation: self.incarnation,
            seq: self.seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(incarnation: u64, seq: u64) -> Order {
        Order { incarnation, seq }
    }

    #[test]
    fn a_leader_grant_may_expire_at_most_its_renew_deadline_ahead() {
        let now = BootInstant::from_nanos(1_000_000_000_000);
        let r = Duration::from_secs(10);
        let k = Duration::from_secs(3);
        let at = |ahead: Duration| {
            Grant::leader("a", 1, order(1, 1), "l", now.saturating_add(ahead)).with_limits(r, k)
        };
        assert_eq!(at(r).check_leader_bound(now), Ok(()), "exactly R ahead");
        assert_eq!(
            at(r + Duration::from_nanos(1)).check_leader_bound(now),
            Err(LeaderBoundError::BeyondRenewDeadline {
                ahead: r + Duration::from_nanos(1),
                renew_deadline: r
            })
        );
        let unbounded = Grant::leader("a", 1, order(1, 1), "l", now);
        assert_eq!(
            unbounded.check_leader_bound(now),
            Err(LeaderBoundError::NoRenewDeadline)
        );
        let follower = Grant::follower("a", 1, order(1, 1), "l");
        assert_eq!(follower.check_leader_bound(now), Ok(()));
    }

    #[test]
    fn newer_incarnation_outranks_any_seq_of_an_older_one() {
        assert!(order(2, 1) > order(1, 999));
        assert!(order(1, 2) > order(1, 1));
        assert!(order(1, 1) == order(1, 1));
    }

    #[test]
    fn sequencer_is_strictly_increasing() {
        let mut s = Sequencer::with_incarnation(7);
        let a = s.next_order();
        let b = s.next_order();
        assert!(b > a);
        assert_eq!(a.incarnation, 7);
    }

    #[test]
    fn expired_leader_grant_is_follower() {
        let g = Grant::leader("p", 3, order(1, 1), "ns/l", BootInstant::from_nanos(1_000));
        assert_eq!(g.effective_mode(BootInstant::from_nanos(999)), Mode::Leader);
        assert_eq!(
            g.effective_mode(BootInstant::from_nanos(1_000)),
            Mode::Follower
        );
        assert_eq!(
            g.remaining(BootInstant::from_nanos(400)),
            Duration::from_nanos(600)
        );
    }

    #[test]
    fn json_round_trip_uses_the_documented_field_names() {
        let g = Grant::leader(
            "pod-a_1",
            4,
            order(10, 2),
            "ns/l",
            BootInstant::from_nanos(5),
        );
        let text = String::from_utf8(g.to_json()).unwrap();
        for field in [
            "\"mode\":\"leader\"",
            "\"holder\"",
            "\"epoch\":4",
            "\"incarnation\":10",
            "\"seq\":2",
            "\"lease\":\"ns/l\"",
            "\"expires_boottime_ns\":5",
            "\"expires_at\"",
        ] {
            assert!(text.contains(field), "{field} missing in {text}");
        }
        assert_eq!(Grant::from_json(text.as_bytes()).unwrap(), g);
    }

    #[test]
    fn follower_without_expiry_parses() {
        let g = Grant::from_json(br#"{"mode":"follower","incarnation":1,"seq":3}"#).unwrap();
        assert_eq!(g.mode, Mode::Follower);
        assert_eq!(g.expires_boottime_ns, 0);
    }

    #[test]
    fn garbage_is_an_error_not_a_grant() {
        assert!(Grant::from_json(b"{\"mode\":\"king\"}").is_err());
        assert!(Grant::from_json(b"").is_err());
    }

    #[test]
    fn limits_and_mac_travel_in_the_object_and_acks_only_carry_failures_when_nonzero() {
        let g = Grant::follower("x", 0, order(1, 1), "ns/l")
            .with_limits(Duration::from_secs(10), Duration::from_secs(3));
        let text = String::from_utf8(g.to_json()).unwrap();
        assert!(text.contains("\"renew_deadline_ns\":10000000000"), "{text}");
        assert!(text.contains("\"kill_grace_ns\":3000000000"), "{text}");
        assert!(!text.contains("leader_start_failures"), "{text}");
        assert!(!text.contains("\"mac\""), "{text}");
        assert_eq!(g.kill_grace(), Duration::from_secs(3));
        assert_eq!(g.renew_deadline(), Duration::from_secs(10));
    }

    #[test]
    fn a_fifo_where_the_file_should_be_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grant.json.ack");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(read_file(&path).is_err());
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(true));
    }

    #[test]
    fn file_round_trip_and_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grant.json");
        assert!(read_file(&path).unwrap().is_none());
        let g = Grant::follower("x", 0, order(1, 1), "ns/l");
        write_file(&path, &g).unwrap();
        assert_eq!(read_file(&path).unwrap(), Some(g));
        assert_eq!(ack_path(&path), dir.path().join("grant.json.ack"));
    }
}
