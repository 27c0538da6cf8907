//! The election state machine: Lease observations and write results in, grant decisions out.
//!
//! It is pure — no I/O, no clock reads: every input carries the CLOCK_BOOTTIME instant it
//! happened at, so the safety rules below are unit-tested with a fake clock.
//!
//! The rules (see DESIGN.md, "Safety"):
//! - A Lease held by someone else is free once its record — the spec fields a holder writes:
//!   holder, renewTime, acquireTime, leaseDurationSeconds, leaseTransitions — has stayed
//!   unchanged for the lease duration since *we* first saw it (longer if the holder promised a
//!   longer duration, up to a cap). Another node's `renewTime` is never compared with our
//!   clock. Metadata edits do not count as a renewal.
//! - An empty holder means released: free at once. An absent Lease is not "released" — it may
//!   have been deleted under a running leader — so it is free only after a lease duration.
//! - A renew (or acquire) sent at local time t that succeeds holds the grant until t + R.
//!   Nothing extends a grant that has already lapsed: the leader must demote first.
//! - Fresh answers of the API (reads, our writes' responses) replace the view whatever their
//!   resourceVersion; only watch events are ordered (see [`Source`]). A fresh answer older than
//!   what we saw before means the store went back in time: its record must then stay unchanged
//!   for a lease duration even if it is released or ours.
//! - A re-read that finds the record unchanged keeps the time we first saw it. The exception:
//!   an absent Lease found by a fresh read counts from then, since a Lease can be created and
//!   deleted between two looks without changing what a read sees; but a resync of a stream that
//!   was merely quiet (see [`Source::Resync`]) keeps the count.

use std::time::Duration;

use crate::clock::BootInstant;

use super::record::{numeric_resource_version, Observed, RecordKey};
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
    /// The app's consumer (its supervisor) has exited or stopped answering: nothing would
    /// reconcile here. `state` says what was seen.
    ConsumerGone { state: String },
    /// Passmower's own Lease, held beside ours (`--native-lease`), could not be renewed within
    /// the renew deadline: its election may take it soon.
    NativeLeaseLost,
    /// Passmower's own Lease now names another holder: a pod running its election took it.
    NativeLeaseTaken { holder: String },
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
            StopReason::ConsumerGone { state } => write!(f, "{state}: stepping down"),
            StopReason::NativeLeaseLost => f.write_str(
                "Passmower's own Lease could not be renewed within the renew deadline: stepping down",
            ),
            StopReason::NativeLeaseTaken { holder } => write!(
                f,
                "Passmower's own Lease is now held by {holder}: stepping down"
            ),
        }
    }
}

/// How the term before ours ended, as this candidate saw it: what `handovers_total{cause}`,
/// the `BecameLeader` Event and the Lease's `acquired-cause` annotation say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandoverCause {
    /// The holder released the Lease (a graceful handover): an empty holder.
    Released,
    /// The holder's record stayed unchanged for the lease duration (a crash, a partition, a
    /// pause), or our own earlier record after our grant lapsed.
    Expired,
    /// A restarted elector of the same pod took over its predecessor's record: the term goes on.
    Adopted,
    /// The Lease did not exist (a first install, or it was deleted) and stayed absent for the
    /// lease duration.
    Created,
}

impl HandoverCause {
    /// The label value and annotation value: `released`, `expired`, `adopted`, `created`.
    pub fn as_str(self) -> &'static str {
        match self {
            HandoverCause::Released => "released",
            HandoverCause::Expired => "expired",
            HandoverCause::Adopted => "adopted",
            HandoverCause::Created => "created",
        }
    }

    /// Every cause, in the order the metrics list them.
    pub const ALL: [HandoverCause; 4] = [
        HandoverCause::Released,
        HandoverCause::Expired,
        HandoverCause::Adopted,
        HandoverCause::Created,
    ];
}

impl std::fmt::Display for HandoverCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Lease this candidate may take, as it sees it: how the previous term ended and since when
/// (on our clock) it has seen it so — the start of the leaderless time a takeover ends. For an
/// expired holder that is when we first saw its last record: its grant may have run up to its
/// renew deadline into that time, so the figure is an upper bound, measured locally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vacancy {
    pub cause: HandoverCause,
    pub since: BootInstant,
}

/// A change of this pod's grant that the outputs must publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// A new term: we took the Lease over (`cause`) after it had no working holder for
    /// `leaderless`, as far as we saw: from the vacancy's start to when our write was sent.
    BecameLeader {
        epoch: u64,
        expiry: BootInstant,
        cause: HandoverCause,
        leaderless: Duration,
    },
    /// We took over the record of an earlier elector process of our own pod (see
    /// [`super::adoption`]): the term goes on, with our grant from now on.
    Adopted {
        epoch: u64,
        expiry: BootInstant,
        from: String,
    },
    Renewed {
        epoch: u64,
        expiry: BootInstant,
    },
    StoppedLeading {
        reason: StopReason,
    },
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

/// How an observation reached us, which decides whether its resourceVersion may be ordered
/// against what we already know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A watch event. Events of one stream arrive in order, but one that lags behind a read or
    /// our own write must not rewind the view: it is dropped when its resourceVersion is older
    /// than the view's.
    Event,
    /// The answer to a request of ours sent at `sent_at`: a GET, a re-read after a 409, the
    /// response to our own write. It is what the API says *now*, so it replaces the view
    /// whatever its resourceVersion: after an etcd restore from an older snapshot the versions
    /// go backwards, and a follower that ignored such answers kept a frozen view (and took the
    /// Lease after D) while the leader's renewals kept succeeding. The one exception: a read
    /// sent *before* the view arrived (the watch task's GET racing our own write) may predate
    /// it, and is dropped when its version is older.
    Read { sent_at: BootInstant },
    /// A read with which the watch task replaces a stream that stayed quiet for its idle limit
    /// on a server that has never sent it a bookmark. Such a server sends nothing at all about
    /// an absent Lease, so the quiet stream is no more suspect than it was while the absence
    /// was being counted, and this read, which finds the Lease still absent, does not restart
    /// the count; the takeover still waits R + K and the margin from it (see
    /// [`Candidate::observe`]). In every other way it is a [`Source::Read`].
    Resync { sent_at: BootInstant },
}

/// What became of one observation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Observation {
    /// Older than the view (see [`Source`]); nothing changed.
    Stale,
    /// It is the view now, with the transition it caused, if any.
    Accepted(Option<Transition>),
}

impl Observation {
    pub fn accepted(&self) -> bool {
        matches!(self, Observation::Accepted(_))
    }

    pub fn transition(self) -> Option<Transition> {
        match self {
            Observation::Accepted(t) => t,
            Observation::Stale => None,
        }
    }
}

#[derive(Clone, Debug)]
struct Seen {
    observed: Observed,
    key: RecordKey,
    /// When we first saw this key: the start of its D wait.
    first_seen: BootInstant,
    /// When this observation arrived, to order reads sent before it.
    received_at: BootInstant,
    /// For a record that came with a history break (see [`Candidate::history_breaks`]): a
    /// released record or our own is then not free at once but only after it stayed unchanged
    /// this long — what the holder of the lost future promised — because it may be a restored
    /// past while that holder still runs.
    distrust: Option<Duration>,
}

/// One contender for the Lease.
#[derive(Debug)]
pub struct Candidate {
    holder_id: String,
    timing: Timing,
    seen: Option<Seen>,
    term: Option<Term>,
    /// The highest numeric resourceVersion seen since the last history break.
    highest_rv: Option<u64>,
    /// The highest `leaseTransitions` seen since the last history break or deletion.
    highest_transitions: Option<u64>,
    history_breaks: u64,
}

impl Candidate {
    /// `holder_id` must be unique per process (see `election::identity`).
    pub fn new(holder_id: impl Into<String>, timing: Timing) -> Self {
        Candidate {
            holder_id: holder_id.into(),
            timing,
            seen: None,
            term: None,
            highest_rv: None,
            highest_transitions: None,
            history_breaks: 0,
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

    /// How often a fresh answer of the API went back in time: a resourceVersion lower than one
    /// seen before, or fewer `leaseTransitions` than seen since the Lease was last seen absent —
    /// an etcd restored from a snapshot without `--bump-revision`. (Transitions catch it when
    /// the restored store has already written past the old revision: etcd's revision counts
    /// every object's writes, transitions only takeovers of this Lease.) Each break re-bases
    /// the view on the answer and distrusts it.
    pub fn history_breaks(&self) -> u64 {
        self.history_breaks
    }

    /// Records what the Lease looks like at `now`. Returns a demotion when the Lease no longer
    /// names us while we lead. A deleted Lease does not demote a leader (it recreates it).
    pub fn observe(&mut self, now: BootInstant, observed: Observed, source: Source) -> Observation {
        let new_rv = observed
            .resource_version()
            .and_then(numeric_resource_version);
        let view_rv = self
            .seen
            .as_ref()
            .and_then(|s| s.observed.resource_version())
            .and_then(numeric_resource_version);
        let older_than_view = matches!((new_rv, view_rv), (Some(new), Some(view)) if new < view);
        let history_break = match source {
            Source::Event => {
                if older_than_view {
                    return Observation::Stale;
                }
                false
            }
            Source::Read { sent_at } | Source::Resync { sent_at } => {
                let overlapped = self.seen.as_ref().is_some_and(|s| sent_at < s.received_at);
                if older_than_view && overlapped {
                    return Observation::Stale;
                }
                let rv_back =
                    matches!((new_rv, self.highest_rv), (Some(new), Some(high)) if new < high);
                let transitions_back = matches!(
                    (&observed, self.highest_transitions),
                    (Observed::Present(r), Some(high)) if r.transitions < high
                );
                rv_back || transitions_back
            }
        };
        let new_transitions = match &observed {
            Observed::Present(r) => Some(r.transitions),
            // A recreated Lease starts again at 0.
            Observed::Absent => None,
        };
        if history_break {
            self.history_breaks += 1;
            self.highest_rv = new_rv;
            self.highest_transitions = new_transitions;
        } else {
            if let Some(new) = new_rv {
                self.highest_rv = Some(self.highest_rv.map_or(new, |high| high.max(new)));
            }
            self.highest_transitions = new_transitions
                .map(|new| self.highest_transitions.map_or(new, |high| high.max(new)));
        }
        let key = observed.key();
        let (mut first_seen, distrust) = match &self.seen {
            Some(seen) if seen.key == key && !history_break => (seen.first_seen, seen.distrust),
            _ if history_break => (now, Some(self.promise_of_view())),
            _ => (now, None),
        };
        // A Lease found absent by a new read may have been recreated, renewed and deleted again
        // since the last look without us seeing it (the key of an absent Lease never changes),
        // so its absence counts from now. A resync keeps the count (its stream was as quiet as
        // every stream of that server, and the count already rested on such a stream's
        // silence), but that stream may have been dead: a holder that took the Lease meanwhile
        // and lost it to a hand delete just before this read still has its grant, renewed at the
        // latest before the delete, so until now + R + K. The takeover waits for that, with
        // the margin, whatever the count says.
        if observed == Observed::Absent {
            match source {
                Source::Read { .. } => first_seen = now,
                Source::Resync { .. } => {
                    let holder_gone = self.timing.renew_deadline
                        + self.timing.kill_grace
                        + super::timing::MIN_MARGIN;
                    let earliest = now.saturating_add(holder_gone);
                    first_seen =
                        first_seen.max(earliest.saturating_sub(self.timing.lease_duration));
                }
                Source::Event => {}
            }
        }
        let holder = match &observed {
            Observed::Present(r) => Some(r.holder.clone()),
            Observed::Absent => None,
        };
        self.seen = Some(Seen {
            observed,
            key,
            first_seen,
            received_at: now,
            distrust,
        });
        Observation::Accepted(match holder {
            Some(holder)
                if self.term.is_some() && holder.as_deref() != Some(self.holder_id.as_str()) =>
            {
                self.demote(StopReason::LostLease { holder })
            }
            _ => None,
        })
    }

    /// How long the holder of the current view may still run after its last renewal, as far
    /// as its record tells (at least our lease duration, see [`Timing::takeover_wait`]).
    fn promise_of_view(&self) -> Duration {
        let duration = match self.seen.as_ref().map(|s| &s.observed) {
            Some(Observed::Present(r)) => r.duration,
            _ => None,
        };
        self.timing.takeover_wait(duration)
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
            Observed::Present(r) => {
                // Released, or our own record (our grant lapsed earlier): nobody else can hold
                // it meanwhile, so it is free at once — unless it came with a history break.
                let nobody_else = r.holder.as_deref().is_none_or(|h| h == self.holder_id);
                match (nobody_else, seen.distrust) {
                    (true, None) => seen.first_seen,
                    (true, Some(wait)) => seen.first_seen.saturating_add(wait),
                    // Respect a longer duration promised by the holder, up to a cap; never
                    // wait less than ours.
                    (false, _) => seen
                        .first_seen
                        .saturating_add(self.timing.takeover_wait(r.duration)),
                }
            }
        })
    }

    /// How the term before the one we would begin by taking the current view ended, and since
    /// when we have seen it so; `None` before the first look.
    pub fn vacancy(&self) -> Option<Vacancy> {
        let seen = self.seen.as_ref()?;
        let cause = match &seen.observed {
            Observed::Absent => HandoverCause::Created,
            Observed::Present(r) if r.holder.is_none() => HandoverCause::Released,
            Observed::Present(_) => HandoverCause::Expired,
        };
        Some(Vacancy {
            cause,
            since: seen.first_seen,
        })
    }

    /// Whether a follower may try to take the Lease at `now`.
    pub fn may_acquire(&self, now: BootInstant) -> bool {
        self.term.is_none() && self.free_at().is_some_and(|at| now >= at)
    }

    /// Our acquire (sent at `sent_at`) succeeded and the server answered `observed` at `now`.
    /// The view the write was based on is still ours (the driver handles nothing else while its
    /// write is in flight): it says how the previous term ended.
    pub fn acquired(
        &mut self,
        sent_at: BootInstant,
        now: BootInstant,
        observed: Observed,
    ) -> Option<Transition> {
        let vacancy = self.vacancy().unwrap_or(Vacancy {
            cause: HandoverCause::Expired,
            since: now,
        });
        let (epoch, expiry) = self.begin_term(sent_at, now, observed)?;
        Some(Transition::BecameLeader {
            epoch,
            expiry,
            cause: vacancy.cause,
            leaderless: sent_at.saturating_since(vacancy.since),
        })
    }

    /// Our adoption (sent at `sent_at`: one write, conditional on the record that named our
    /// pod's earlier process `from`) succeeded and the server answered `observed` at `now`. The
    /// grant is the same as after an acquisition: until `sent_at` + R.
    pub fn adopted(
        &mut self,
        sent_at: BootInstant,
        now: BootInstant,
        observed: Observed,
        from: &str,
    ) -> Option<Transition> {
        let (epoch, expiry) = self.begin_term(sent_at, now, observed)?;
        Some(Transition::Adopted {
            epoch,
            expiry,
            from: from.to_owned(),
        })
    }

    /// Starts a term after our write (sent at `sent_at`) made us the holder; `None` when we
    /// already lead or the answer came too late to grant anything.
    fn begin_term(
        &mut self,
        sent_at: BootInstant,
        now: BootInstant,
        observed: Observed,
    ) -> Option<(u64, BootInstant)> {
        let epoch = match &observed {
            Observed::Present(r) => r.transitions,
            Observed::Absent => 0,
        };
        // The answer to our own write is authoritative; it cannot demote (it names us).
        let _ = self.observe(now, observed, Source::Read { sent_at });
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
        Some((epoch, expiry))
    }

    /// Our renew (sent at `sent_at`) succeeded and the server answered `observed` at `now`.
    pub fn renewed(
        &mut self,
        sent_at: BootInstant,
        now: BootInstant,
        observed: Observed,
    ) -> Option<Transition> {
        if let Some(t) = self
            .observe(now, observed, Source::Read { sent_at })
            .transition()
        {
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
mod adoption_simulation;
#[cfg(test)]
mod quiet_watch_simulation;
#[cfg(test)]
mod report_simulation;
#[cfg(test)]
mod simulation;
#[cfg(test)]
mod tests;
