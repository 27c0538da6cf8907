//! Passmower's own Lease (`passmower-operators`, which 2.4 and later elect on) beside ours
//! (`elect --native-lease NAME`), for the time two elections meet in one install: a running 2.4
//! install moving to ours, whose old pods still run upstream's election (one of them its
//! operators) while the new pods run ours, and the way back, whose new pods run upstream's
//! election again while ours still leads in an old pod. Either way one pod of each kind would
//! run operators, and Redis writes pass no write fence.
//!
//! The rule: a pod of ours leads only while it holds upstream's Lease too, under the identity
//! upstream's election uses for it (the pod name, `POD_NAME`). A follower takes upstream's
//! Lease before it tries ours, and only when that Lease is free by the rule below; the leader
//! renews it before each renewal of ours and steps down once it has gone a renew deadline
//! without a successful write of it (the same bound as its own grant); a hand-over clears it
//! after the demotion's ack, as upstream's `stop()` does. Upstream's election reads a Lease
//! whose holder is set and whose `renewTime` is within `leaseDurationSeconds` as held, so
//! while one of ours leads no upstream process takes it, and the other way round.
//!
//! Free, for us: absent, no holder (empty or null: upstream's own release), held by this pod,
//! or unchanged (the same `resourceVersion`) for its `leaseDurationSeconds` of our own clock,
//! capped at [`MAX_DURATION`]. That is the rule our candidate applies to its own Lease: it needs
//! no agreement between the nodes' clocks, and a holder that still renews changes the
//! `resourceVersion` with every renewal. Upstream's leader stands down once it has gone its
//! renew deadline (10 s) without a renewal, within the 15 s its Lease declares.
//!
//! This module is the pure part (what was seen, what it means, the bodies to write); the calls
//! are `run/native.rs`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};

use crate::clock::BootInstant;
use crate::election::record;

/// Upstream's `leaseDurationSeconds` when a Lease declares none (its DEFAULT_LEASE_DURATION).
pub const DEFAULT_DURATION: Duration = crate::wire::NATIVE_LEASE_DEFAULT_DURATION;
/// The longest duration honoured: a hand edit of hours must not keep our election out for as
/// long (upstream's own holder stands down after its renew deadline whatever the Lease says).
pub const MAX_DURATION: Duration = crate::wire::NATIVE_LEASE_MAX_DURATION;

/// What upstream's Lease is, for a pod of ours about to lead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Absent: created when taken.
    Absent,
    /// Present and free (no holder, or unchanged for its duration): taken by a replace.
    Free,
    /// Held by this pod already (a renewal of ours, or a previous elector process of the pod).
    Ours,
    /// Held by `holder`; free at `free_at` unless it changes meanwhile.
    Held {
        holder: String,
        free_at: BootInstant,
    },
}

/// Upstream's Lease as last read, and since when it has been the same.
#[derive(Clone, Debug, Default)]
pub struct NativeLease {
    /// This pod's identity in upstream's election: the pod name.
    identity: String,
    /// The last answer: `None` before the first read, `Some(None)` when absent.
    seen: Option<Option<Lease>>,
    /// When the current resourceVersion was first seen.
    unchanged_since: Option<BootInstant>,
    /// When the last successful write naming us was sent: the leader's bound runs from there.
    written_at: Option<BootInstant>,
}

impl NativeLease {
    pub fn new(identity: &str) -> NativeLease {
        NativeLease {
            identity: identity.to_owned(),
            ..NativeLease::default()
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Takes in an answer read (or written) at `now`.
    pub fn observe(&mut self, lease: Option<Lease>, now: BootInstant) {
        let rv = |l: &Option<Lease>| l.as_ref().and_then(|l| l.metadata.resource_version.clone());
        let same = self
            .seen
            .as_ref()
            .is_some_and(|old| rv(old).is_some() && rv(old) == rv(&lease));
        if !same {
            self.unchanged_since = Some(now);
        }
        self.seen = Some(lease);
    }

    /// The Lease as last seen (the base and precondition of the next write).
    pub fn current(&self) -> Option<&Lease> {
        self.seen.as_ref().and_then(Option::as_ref)
    }

    /// What the last answer means at `now`; `None` before any answer.
    pub fn verdict(&self, now: BootInstant) -> Option<Verdict> {
        let lease = match self.seen.as_ref()? {
            None => return Some(Verdict::Absent),
            Some(lease) => lease,
        };
        let spec = lease.spec.as_ref();
        let holder = spec
            .and_then(|s| s.holder_identity.as_deref())
            .unwrap_or_default();
        if holder.is_empty() {
            return Some(Verdict::Free);
        }
        if holder == self.identity {
            return Some(Verdict::Ours);
        }
        let duration = spec
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .filter(|s| *s > 0)
            .map_or(DEFAULT_DURATION, Duration::from_secs)
            .min(MAX_DURATION);
        let free_at = self.unchanged_since.unwrap_or(now).saturating_add(duration);
        if now >= free_at {
            return Some(Verdict::Free);
        }
        Some(Verdict::Held {
            holder: holder.to_owned(),
            free_at,
        })
    }

    /// A write naming us, sent at `sent_at`, succeeded with `lease`.
    pub fn wrote(&mut self, lease: Lease, sent_at: BootInstant, now: BootInstant) {
        self.observe(Some(lease), now);
        self.written_at = Some(sent_at);
    }

    /// When the last successful write naming us was sent.
    pub fn written_at(&self) -> Option<BootInstant> {
        self.written_at
    }

    /// We no longer hold it (released, or taken by another).
    pub fn forget_write(&mut self) {
        self.written_at = None;
    }

    /// Whether a leader whose last write of it was sent at [`Self::written_at`] is past the
    /// renew deadline at `now` (or never wrote it).
    pub fn overdue(&self, now: BootInstant, renew_deadline: Duration) -> bool {
        self.written_at
            .is_none_or(|at| now.saturating_since(at) >= renew_deadline)
    }

    /// The body that takes or renews it for us: upstream's shape (holder, the duration, a
    /// `renewTime`, an `acquireTime` and one more transition when the holder changes), on the
    /// last answer so the replace is conditional. A create when it was absent.
    pub fn held_by_us(&self, namespace: &str, name: &str, duration_seconds: i32) -> Lease {
        let Some(current) = self.current() else {
            let mut lease = record::new_lease(name, namespace, &self.identity, duration_seconds);
            if let Some(spec) = lease.spec.as_mut() {
                spec.lease_transitions = Some(1);
            }
            return lease;
        };
        let mut lease = record::renewed(current, &self.identity, duration_seconds);
        let taking = current
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            != Some(self.identity.as_str());
        if taking {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.acquire_time = spec.renew_time.clone();
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        lease
    }

    /// The body that clears it (as upstream's `stop()` does: no holder), on the last answer.
    pub fn released(&self) -> Option<Lease> {
        let current = self.current()?;
        let holder = current
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref());
        (holder == Some(self.identity.as_str())).then(|| record::released(current))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn named(namespace: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        }
    }

    fn lease(holder: Option<&str>, duration: Option<i32>, rv: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some(rv.into()),
                ..named("ns", "passmower-operators")
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: duration,
                lease_transitions: Some(3),
                ..LeaseSpec::default()
            }),
        }
    }

    fn at(secs: u64) -> BootInstant {
        BootInstant::from_nanos(1_000_000_000 * (1000 + secs))
    }

    #[test]
    fn nothing_is_known_before_the_first_answer() {
        assert_eq!(NativeLease::new("pod-a").verdict(at(0)), None);
    }

    #[test]
    fn absent_released_and_own_leases_are_free_to_take_at_once() {
        let mut n = NativeLease::new("pod-a");
        n.observe(None, at(0));
        assert_eq!(n.verdict(at(0)), Some(Verdict::Absent));
        n.observe(Some(lease(Some(""), Some(1), "1")), at(0));
        assert_eq!(n.verdict(at(0)), Some(Verdict::Free));
        n.observe(Some(lease(None, None, "2")), at(0));
        assert_eq!(n.verdict(at(0)), Some(Verdict::Free));
        n.observe(Some(lease(Some("pod-a"), Some(15), "3")), at(0));
        assert_eq!(n.verdict(at(0)), Some(Verdict::Ours));
    }

    #[test]
    fn another_holder_is_free_only_once_unchanged_for_its_duration() {
        let mut n = NativeLease::new("pod-a");
        n.observe(Some(lease(Some("old-pod"), Some(15), "10")), at(0));
        let held = |free_at| {
            Some(Verdict::Held {
                holder: "old-pod".into(),
                free_at,
            })
        };
        assert_eq!(n.verdict(at(14)), held(at(15)));
        // Read again, unchanged: the wait runs from the first sight.
        n.observe(Some(lease(Some("old-pod"), Some(15), "10")), at(10));
        assert_eq!(n.verdict(at(14)), held(at(15)));
        assert_eq!(n.verdict(at(15)), Some(Verdict::Free));
        // A renewal (a new resourceVersion) starts the wait again.
        n.observe(Some(lease(Some("old-pod"), Some(15), "11")), at(14));
        assert_eq!(n.verdict(at(15)), held(at(29)));
    }

    #[test]
    fn a_missing_zero_or_huge_duration_is_read_as_upstreams_default_or_capped() {
        let mut n = NativeLease::new("pod-a");
        n.observe(Some(lease(Some("x"), None, "1")), at(0));
        assert!(matches!(n.verdict(at(14)), Some(Verdict::Held { .. })));
        assert_eq!(n.verdict(at(15)), Some(Verdict::Free));
        n.observe(Some(lease(Some("x"), Some(0), "2")), at(0));
        assert_eq!(n.verdict(at(15)), Some(Verdict::Free));
        n.observe(Some(lease(Some("x"), Some(i32::MAX), "3")), at(0));
        assert!(matches!(n.verdict(at(299)), Some(Verdict::Held { .. })));
        assert_eq!(n.verdict(at(300)), Some(Verdict::Free));
    }

    #[test]
    fn taking_counts_a_transition_and_renewing_does_not() {
        let mut n = NativeLease::new("pod-a");
        n.observe(Some(lease(Some("old-pod"), Some(15), "7")), at(0));
        let taken = n.held_by_us("ns", "passmower-operators", 15);
        let spec = taken.spec.as_ref().expect("spec");
        assert_eq!(spec.holder_identity.as_deref(), Some("pod-a"));
        assert_eq!(spec.lease_transitions, Some(4));
        assert_eq!(spec.acquire_time, spec.renew_time);
        assert_eq!(taken.metadata.resource_version.as_deref(), Some("7"));
        n.observe(Some(lease(Some("pod-a"), Some(15), "8")), at(1));
        let renewed = n.held_by_us("ns", "passmower-operators", 15);
        assert_eq!(
            renewed.spec.as_ref().and_then(|s| s.lease_transitions),
            Some(3)
        );
        let mut absent = NativeLease::new("pod-a");
        absent.observe(None, at(0));
        let created = absent.held_by_us("ns", "passmower-operators", 15);
        assert_eq!(
            created.metadata.name.as_deref(),
            Some("passmower-operators")
        );
        assert_eq!(created.metadata.resource_version, None);
    }

    #[test]
    fn only_a_lease_naming_us_is_released() {
        let mut n = NativeLease::new("pod-a");
        assert!(n.released().is_none());
        n.observe(Some(lease(Some("other"), Some(15), "1")), at(0));
        assert!(n.released().is_none());
        n.observe(Some(lease(Some("pod-a"), Some(15), "2")), at(0));
        let released = n.released().expect("ours");
        assert_eq!(
            released.spec.and_then(|s| s.holder_identity).as_deref(),
            Some("")
        );
    }

    #[test]
    fn a_leader_is_overdue_a_renew_deadline_after_its_last_write_was_sent() {
        let mut n = NativeLease::new("pod-a");
        let deadline = Duration::from_secs(10);
        assert!(n.overdue(at(0), deadline), "never written");
        n.wrote(lease(Some("pod-a"), Some(15), "1"), at(2), at(3));
        assert!(!n.overdue(at(11), deadline));
        assert!(n.overdue(at(12), deadline));
        n.forget_write();
        assert!(n.overdue(at(3), deadline));
    }
}
