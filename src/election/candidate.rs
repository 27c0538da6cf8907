//! The election state machine: Lease observations and write results in, grant decisions out.
//!
//! It is pure — no I/O, no clock reads: every input carries the CLOCK_BOOTTIME instant it
//! happened at, so the safety rules below are unit-tested with a fake clock.
//!
//! The rules (see DESIGN.md, "Safety"):
//! - A Lease held by someone else is free once its record (holder, renewTime, resourceVersion)
//!   has stayed unchanged for the lease duration since *we* first saw it. Another node's
//!   `renewTime` is never compared with our clock.
//! - An empty holder means released: free at once. An absent Lease is not "released" — it may
//!   have been deleted under a running leader — so it is free only after a lease duration.
//! - A renew (or acquire) sent at local time t that succeeds holds the grant until t + R.
//!   Nothing extends a grant that has already lapsed: the leader must demote first.

use std::time::Duration;

use crate::clock::BootInstant;

use super::record::{is_older_resource_version, Observed, RecordKey};
use super::timing::Timing;

/// Why this pod stopped leading. Shown in logs, Events and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// No renew succeeded within the renew deadline (API unreachable, hung, or we were paused).
    GrantExpired,
    /// The Lease now names another holder (or none): it was taken, edited or released by hand.
    LostLease { holder: Option<String> },
    /// We are shutting down and hand the Lease over.
    Shutdown,
    /// The flag file could not be written, so this pod must not be granted (fail closed).
    OutputFailed,
    /// The app failed to start as leader this many times in a row: let another pod try.
    AppFailing { failures: u64 },
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::GrantExpired => {
                f.write_str("grant expired: no renew succeeded within the renew deadline")
            }
            StopReason::LostLease { holder: Some(h) } => write!(f, "the Lease is now held by {h}"),
            StopReason::LostLease { holder: None } => {
                f.write_str("the Lease was released or emptied by someone else")
            }
            StopReason::Shutdown => f.write_str("shutting down: handing the Lease over"),
            StopReason::OutputFailed => {
                f.write_str("the flag file cannot be written: failing closed")
            }
            StopReason::AppFailing { failures } => write!(
                f,
                "the app exited on its own {failures} times in a row as leader: stepping down"
            ),
        }
    }
}

/// A change of this pod's grant that the outputs must publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    BecameLeader { epoch: u64, expiry: BootInstant },
    Renewed { epoch: u64, expiry: BootInstant },
    StoppedLeading { reason: StopReason },
}

/// The current term of leadership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Term {
    /// `leaseTransitions` after acquisition: the fencing token.
    pub epoch: u64,
    /// When this term began (local clock).
    pub since: BootInstant,
    /// When the grant lapses unless renewed.
    pub expiry: BootInstant,
}

#[derive(Clone, Debug)]
struct Seen {
    observed: Observed,
    key: RecordKey,
    first_seen: BootInstant,
}

/// One contender for the Lease.
#[derive(Debug)]
pub struct Candidate {
    holder_id: String,
    timing: Timing,
    seen: Option<Seen>,
    term: Option<Term>,
}

impl Candidate {
    /// `holder_id` must be unique per process (see `elect::identity`).
    pub fn new(holder_id: impl Into<String>, timing: Timing) -> Self {
        Candidate {
            holder_id: holder_id.into(),
            timing,
            seen: None,
            term: None,
        }
    }

    pub fn holder_id(&self) -> &str {
        &self.holder_id
    }

    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// The current term, if this pod leads (its grant may still need an expiry check: see `tick`).
    pub fn term(&self) -> Option<Term> {
        self.term
    }

    pub fn is_leader(&self) -> bool {
        self.term.is_some()
    }

    /// The last observation, if any.
    pub fn observed(&self) -> Option<&Observed> {
        self.seen.as_ref().map(|s| &s.observed)
    }

    /// Records what the Lease looks like at `now`. Returns a demotion when the Lease no longer
    /// names us while we lead. A record older than the one we hold (a late watch event) is ignored.
    pub fn observe(&mut self, now: BootInstant, observed: Observed) -> Option<Transition> {
        if let (Some(seen), Some(new_rv)) = (&self.seen, observed.resource_version()) {
            if let Some(old_rv) = seen.observed.resource_version() {
                if is_older_resource_version(new_rv, old_rv) {
                    return None;
                }
            }
        }
        let key = observed.key();
        let first_seen = match &self.seen {
            Some(seen) if seen.key == key => seen.first_seen,
            _ => now,
        };
        self.seen = Some(Seen {
            observed,
            key,
            first_seen,
        });
        let holder = self.seen.as_ref().and_then(|s| match &s.observed {
            Observed::Present(r) => Some(r.holder.clone()),
            // A deleted Lease under a live leader: the leader recreates it on its next renew.
            Observed::Absent => None,
        });
        match holder {
            Some(holder)
                if self.term.is_some() && holder.as_deref() != Some(self.holder_id.as_str()) =>
            {
                self.demote(StopReason::LostLease { holder })
            }
            _ => None,
        }
    }

    /// Records the result of a fresh read (a GET, not a watch event). A Lease found absent by a
    /// new read may have been recreated, renewed and deleted again since the last look without
    /// us seeing it (the record key of an absent Lease never changes), so its absence is
    /// counted from now.
    pub fn observe_read(&mut self, now: BootInstant, observed: Observed) -> Option<Transition> {
        if observed == Observed::Absent {
            if let Some(seen) = self.seen.as_mut().filter(|s| s.key == RecordKey::Absent) {
                seen.first_seen = now;
            }
        }
        self.observe(now, observed)
    }

    /// Checks the grant against the clock: a lapsed grant demotes before anything else happens.
    pub fn tick(&mut self, now: BootInstant) -> Option<Transition> {
        match self.term {
            Some(term) if now >= term.expiry => self.demote(StopReason::GrantExpired),
            _ => None,
        }
    }

    /// Stops leading for `reason`, if leading.
    pub fn demote(&mut self, reason: StopReason) -> Option<Transition> {
        self.term
            .take()
            .map(|_| Transition::StoppedLeading { reason })
    }

    /// When a follower may try to take the Lease, on our clock; `None` before the first look.
    pub fn free_at(&self) -> Option<BootInstant> {
        let seen = self.seen.as_ref()?;
        Some(match &seen.observed {
            Observed::Absent => seen.first_seen.saturating_add(self.timing.lease_duration),
            Observed::Present(r) => match r.holder.as_deref() {
                None => seen.first_seen,
                // Our own record (our grant lapsed earlier): nobody else can hold it meanwhile.
                Some(h) if h == self.holder_id => seen.first_seen,
                Some(_) => {
                    // Respect a longer duration promised by the holder; never wait less than ours.
                    let wait = r
                        .duration
                        .unwrap_or(Duration::ZERO)
                        .max(self.timing.lease_duration);
                    seen.first_seen.saturating_add(wait)
                }
            },
        })
    }

    /// Whether a follower may try to take the Lease at `now`.
    pub fn may_acquire(&self, now: BootInstant) -> bool {
        self.term.is_none() && self.free_at().is_some_and(|at| now >= at)
    }

    /// Our acquire (sent at `sent_at`) succeeded and the server answered `observed` at `now`.
    pub fn acquired(
        &mut self,
        sent_at: BootInstant,
        now: BootInstant,
        observed: Observed,
    ) -> Option<Transition> {
        let epoch = match &observed {
            Observed::Present(r) => r.transitions,
            Observed::Absent => 0,
        };
        self.observe(now, observed);
        let expiry = sent_at.saturating_add(self.timing.renew_deadline);
        if self.term.is_some() || now >= expiry {
            // Already leading (cannot happen in the driver), or the answer came too late to
            // grant anything: the record is ours, so the next attempt renews it.
            return None;
        }
        self.term = Some(Term {
            epoch,
            since: now,
            expiry,
        });
        Some(Transition::BecameLeader { epoch, expiry })
    }

    /// Our renew (sent at `sent_at`) succeeded and the server answered `observed` at `now`.
    pub fn renewed(
        &mut self,
        sent_at: BootInstant,
        now: BootInstant,
        observed: Observed,
    ) -> Option<Transition> {
        if let Some(t) = self.observe(now, observed) {
            return Some(t);
        }
        let term = self.term.as_mut()?;
        if now >= term.expiry {
            // Paused or slow past the deadline: the grant lapsed; never resurrect it here.
            return self.demote(StopReason::GrantExpired);
        }
        let expiry = sent_at.saturating_add(self.timing.renew_deadline);
        if expiry <= term.expiry {
            return None;
        }
        term.expiry = expiry;
        Some(Transition::Renewed {
            epoch: term.epoch,
            expiry,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::LeaseRecord;
    use super::*;

    const S: u64 = 1_000_000_000;

    fn at(secs: f64) -> BootInstant {
        BootInstant::from_nanos((secs * S as f64) as u64)
    }

    fn held(holder: Option<&str>, rv: u64, duration: Option<u64>, transitions: u64) -> Observed {
        Observed::Present(LeaseRecord {
            holder: holder.map(str::to_owned),
            duration: duration.map(Duration::from_secs),
            transitions,
            renew_time: Some(format!("t{rv}")),
            resource_version: rv.to_string(),
        })
    }

    fn candidate() -> Candidate {
        Candidate::new("me_1", Timing::default())
    }

    #[test]
    fn nothing_is_free_before_the_first_look() {
        let c = candidate();
        assert_eq!(c.free_at(), None);
        assert!(!c.may_acquire(at(100.0)));
    }

    #[test]
    fn released_lease_is_free_at_once() {
        let mut c = candidate();
        c.observe(at(5.0), held(None, 10, Some(1), 3));
        assert!(c.may_acquire(at(5.0)));
    }

    #[test]
    fn held_lease_is_free_only_after_it_stayed_unchanged_for_the_lease_duration() {
        let mut c = candidate();
        c.observe(at(0.0), held(Some("other"), 10, Some(15), 1));
        assert!(!c.may_acquire(at(14.9)));
        // The same record again (a re-read) does not restart the wait.
        c.observe(at(10.0), held(Some("other"), 10, Some(15), 1));
        assert!(c.may_acquire(at(15.0)));
    }

    #[test]
    fn a_renewal_restarts_the_wait() {
        let mut c = candidate();
        c.observe(at(0.0), held(Some("other"), 10, Some(15), 1));
        c.observe(at(12.0), held(Some("other"), 11, Some(15), 1));
        assert!(!c.may_acquire(at(26.9)));
        assert!(c.may_acquire(at(27.0)));
    }

    #[test]
    fn late_duplicate_events_do_not_rewind_the_record() {
        let mut c = candidate();
        c.observe(at(0.0), held(Some("other"), 11, Some(15), 1));
        c.observe(at(1.0), held(Some("other"), 10, Some(15), 1));
        assert_eq!(c.free_at(), Some(at(15.0)));
    }

    #[test]
    fn absent_lease_waits_a_full_lease_duration() {
        let mut c = candidate();
        c.observe(at(3.0), Observed::Absent);
        assert!(!c.may_acquire(at(17.9)));
        assert!(c.may_acquire(at(18.0)));
    }

    #[test]
    fn a_lease_found_absent_again_by_a_new_read_restarts_the_wait() {
        // Deleted at 100; our watch breaks; meanwhile it is recreated, renewed, deleted again.
        let mut c = candidate();
        c.observe(at(100.0), Observed::Absent);
        c.observe_read(at(119.0), Observed::Absent);
        assert!(
            !c.may_acquire(at(119.0)),
            "an unseen recreation may have happened"
        );
        assert!(c.may_acquire(at(134.0)));
        // Watch events of an absence (no new read) keep counting from the first look.
        let mut c = candidate();
        c.observe(at(100.0), Observed::Absent);
        c.observe(at(110.0), Observed::Absent);
        assert!(c.may_acquire(at(115.0)));
    }

    #[test]
    fn garbage_or_short_durations_never_shorten_our_wait_but_longer_ones_lengthen_it() {
        let mut c = candidate();
        c.observe(at(0.0), held(Some("other"), 10, None, 0));
        assert_eq!(c.free_at(), Some(at(15.0)));
        c.observe(at(0.0), held(Some("other"), 11, Some(2), 0));
        assert_eq!(c.free_at(), Some(at(15.0)));
        c.observe(at(0.0), held(Some("other"), 12, Some(60), 0));
        assert_eq!(c.free_at(), Some(at(60.0)));
    }

    #[test]
    fn acquire_grants_until_send_time_plus_renew_deadline() {
        let mut c = candidate();
        c.observe(at(0.0), held(None, 10, None, 4));
        let t = c.acquired(at(1.0), at(1.2), held(Some("me_1"), 11, Some(15), 5));
        assert_eq!(
            t,
            Some(Transition::BecameLeader {
                epoch: 5,
                expiry: at(11.0)
            })
        );
        assert!(c.tick(at(10.9)).is_none());
        assert_eq!(
            c.tick(at(11.0)),
            Some(Transition::StoppedLeading {
                reason: StopReason::GrantExpired
            })
        );
        assert!(!c.is_leader());
    }

    #[test]
    fn renew_extends_from_its_send_time_not_its_answer_time() {
        let mut c = candidate();
        c.observe(at(0.0), held(None, 10, None, 0));
        c.acquired(at(0.0), at(0.1), held(Some("me_1"), 11, Some(15), 1));
        let t = c.renewed(at(2.0), at(3.5), held(Some("me_1"), 12, Some(15), 1));
        assert_eq!(
            t,
            Some(Transition::Renewed {
                epoch: 1,
                expiry: at(12.0)
            })
        );
    }

    #[test]
    fn a_renew_answered_after_the_grant_lapsed_does_not_resurrect_it() {
        // A leader paused (SIGSTOP) with a renew in flight: its answer arrives after expiry.
        let mut c = candidate();
        c.observe(at(0.0), held(None, 10, None, 0));
        c.acquired(at(0.0), at(0.1), held(Some("me_1"), 11, Some(15), 1));
        let t = c.renewed(at(9.0), at(30.0), held(Some("me_1"), 12, Some(15), 1));
        assert_eq!(
            t,
            Some(Transition::StoppedLeading {
                reason: StopReason::GrantExpired
            })
        );
        assert!(!c.is_leader());
    }

    #[test]
    fn an_acquire_answered_too_late_grants_nothing() {
        let mut c = candidate();
        c.observe(at(0.0), held(None, 10, None, 0));
        assert_eq!(
            c.acquired(at(0.0), at(10.0), held(Some("me_1"), 11, Some(15), 1)),
            None
        );
        assert!(!c.is_leader());
        // The record is ours, so it is free for us at once.
        assert!(c.may_acquire(at(10.0)));
    }

    #[test]
    fn seeing_another_holder_demotes_at_once() {
        let mut c = candidate();
        c.observe(at(0.0), held(None, 10, None, 0));
        c.acquired(at(0.0), at(0.1), held(Some("me_1"), 11, Some(15), 1));
        let t = c.observe(at(1.0), held(Some("thief"), 12, Some(15), 2));
        assert_eq!(
            t,
            Some(Transition::StoppedLeading {
                reason: StopReason::LostLease {
                    holder: Some("thief".into())
                }
            })
        );
        // And the thief's record must then age a full lease duration before we may take it.
        assert!(!c.may_acquire(at(15.9)));
        assert!(c.may_acquire(at(16.0)));
    }

    #[test]
    fn a_deleted_lease_does_not_demote_the_leader_by_itself() {
        let mut c = candidate();
        c.observe(at(0.0), held(None, 10, None, 0));
        c.acquired(at(0.0), at(0.1), held(Some("me_1"), 11, Some(15), 1));
        assert_eq!(c.observe(at(1.0), Observed::Absent), None);
        assert!(c.is_leader());
    }

    /// Two candidates sharing one simulated Lease, driven by a fake clock through every
    /// interleaving of a bounded schedule: at no instant do both hold a live grant, even when
    /// the leader stops renewing (crash or partition) at an arbitrary point.
    #[test]
    fn simulated_takeover_never_overlaps_grants() {
        let timing = Timing::default();
        for crash_at_ms in (100..20_000u64).step_by(700) {
            for watch_delay_ms in [0u64, 300, 1_900] {
                let mut a = Candidate::new("a_1", timing);
                let mut b = Candidate::new("b_1", timing);
                let mut rv = 1u64;
                // Every write to the simulated Lease, with the time it happened.
                let mut history = vec![(0u64, held(None, rv, None, 0))];
                a.observe(at(0.0), history[0].1.clone());
                let mut a_grant_until = BootInstant::default();
                let mut b_grant_from: Option<BootInstant> = None;
                let mut ms = 0u64;
                while ms < 60_000 && b_grant_from.is_none() {
                    let now = BootInstant::from_nanos(ms * 1_000_000);
                    a.tick(now);
                    // a renews (or acquires) every retry period while alive.
                    if ms < crash_at_ms
                        && ms.is_multiple_of(2_000)
                        && (a.is_leader() || a.may_acquire(now))
                    {
                        rv += 1;
                        let record = held(Some("a_1"), rv, Some(15), 1);
                        history.push((ms, record.clone()));
                        let t = if a.is_leader() {
                            a.renewed(now, now, record)
                        } else {
                            a.acquired(now, now, record)
                        };
                        if let Some(
                            Transition::BecameLeader { expiry, .. }
                            | Transition::Renewed { expiry, .. },
                        ) = t
                        {
                            a_grant_until = expiry;
                        }
                    }
                    // b learns of each write only after the watch delay.
                    if let Some((_, record)) =
                        history.iter().rev().find(|(w, _)| w + watch_delay_ms <= ms)
                    {
                        b.observe(now, record.clone());
                    }
                    // b's conditional write succeeds only against the newest record.
                    let latest_rv = history
                        .last()
                        .map(|(_, r)| r.resource_version().map(str::to_owned));
                    let b_rv = b
                        .observed()
                        .and_then(|o| o.resource_version().map(str::to_owned));
                    if b.may_acquire(now) && latest_rv == Some(b_rv) {
                        rv += 1;
                        let record = held(Some("b_1"), rv, Some(15), 2);
                        history.push((ms, record.clone()));
                        if b.acquired(now, now, record).is_some() {
                            b_grant_from = Some(now);
                        }
                    }
                    ms += 100;
                }
                assert!(
                    a_grant_until > BootInstant::default(),
                    "a must have led before crashing"
                );
                let from = b_grant_from.expect("b must take over after a crashes");
                // The consumer of a may run until its grant's expiry plus kill grace.
                assert!(
                    from > a_grant_until.saturating_add(timing.kill_grace),
                    "overlap: crash at {crash_at_ms} ms, b led from {from:?}, a's consumer until {:?}",
                    a_grant_until.saturating_add(timing.kill_grace)
                );
            }
        }
    }
}
