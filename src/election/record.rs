//! The Lease as the election sees it: what was observed, and the records this elector writes.
//!
//! Garbage is tolerated on read (a missing holder means released, a zero or negative duration
//! means "use our own"), because a hand-edited Lease must never crash or wedge the elector.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;

/// One observed state of the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// The Lease does not exist (never created, or deleted).
    Absent,
    Present(LeaseRecord),
}

/// The parts of a Lease that decide the election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `holderIdentity`; `None` when missing or empty, which means released.
    pub holder: Option<String>,
    /// `leaseDurationSeconds` when positive.
    pub duration: Option<Duration>,
    /// `leaseTransitions`, negative values read as 0.
    pub transitions: u64,
    /// `renewTime` as written, kept only to detect change.
    pub renew_time: Option<String>,
    /// `acquireTime` as written, kept only to detect change.
    pub acquire_time: Option<String>,
    /// `metadata.resourceVersion`: the precondition of every write.
    pub resource_version: String,
}

/// The identity of an observed record: if it is unchanged for D, its holder has had time to stop.
///
/// Only the spec fields a holder writes when it acquires or renews count. Metadata edits
/// (labels, annotations by GitOps tools, managed fields) change the resourceVersion but say
/// nothing about the holder being alive, so they must not restart a follower's wait: a tool
/// that annotates the Lease every few seconds would otherwise postpone a takeover for ever.
/// `preferredHolder` and `strategy` are left out for the same reason (a coordinator writes
/// them, not the holder). Every renewal changes `renewTime` (ours strictly, see [`renewed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordKey {
    Absent,
    Present {
        holder: Option<String>,
        renew_time: Option<String>,
        acquire_time: Option<String>,
        duration: Option<Duration>,
        transitions: u64,
    },
}

impl Observed {
    pub fn from_lease(lease: &Lease) -> Self {
        Observed::Present(LeaseRecord::from_lease(lease))
    }

    pub fn key(&self) -> RecordKey {
        match self {
            Observed::Absent => RecordKey::Absent,
            Observed::Present(r) => RecordKey::Present {
                holder: r.holder.clone(),
                renew_time: r.renew_time.clone(),
                acquire_time: r.acquire_time.clone(),
                duration: r.duration,
                transitions: r.transitions,
            },
        }
    }

    pub fn holder(&self) -> Option<&str> {
        match self {
            Observed::Present(r) => r.holder.as_deref(),
            Observed::Absent => None,
        }
    }

    pub fn resource_version(&self) -> Option<&str> {
        match self {
            Observed::Present(r) => Some(&r.resource_version),
            Observed::Absent => None,
        }
    }
}

impl LeaseRecord {
    pub fn from_lease(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        LeaseRecord {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            duration: spec
                .lease_duration_seconds
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(s as u64)),
            transitions: spec.lease_transitions.map(|t| t.max(0) as u64).unwrap_or(0),
            renew_time: spec.renew_time.map(|t| t.0.to_string()),
            acquire_time: spec.acquire_time.map(|t| t.0.to_string()),
            resource_version: lease.metadata.resource_version.clone().unwrap_or_default(),
        }
    }
}

/// A resource version as a number. Resource versions are opaque strings in the API contract,
/// but every apiserver backed by etcd uses its revision numbers; `None` for anything else, which
/// then orders nothing.
pub fn numeric_resource_version(rv: &str) -> Option<u64> {
    rv.parse().ok()
}

/// Whether resource version `candidate` is older than `current` (both numeric).
pub fn is_older_resource_version(candidate: &str, current: &str) -> bool {
    match (
        numeric_resource_version(candidate),
        numeric_resource_version(current),
    ) {
        (Some(a), Some(b)) => a < b,
        _ => false,
    }
}

fn now_micro() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// Now, at the microsecond precision `renewTime` is stored with, but strictly after `previous`:
/// a renewal must change the record's key even if the wall clock stands still or steps back,
/// or followers would count it as no renewal at all.
fn renew_time_after(previous: Option<&MicroTime>) -> MicroTime {
    let now = Timestamp::now().as_microsecond();
    let micros = match previous.map(|p| p.0.as_microsecond()) {
        Some(prev) if now <= prev => prev.saturating_add(1),
        _ => now,
    };
    MicroTime(Timestamp::from_microsecond(micros).unwrap_or_else(|_| Timestamp::now()))
}

/// A brand-new Lease held by `holder` (used when the Lease is absent).
pub fn new_lease(name: &str, namespace: &str, holder: &str, duration_seconds: i32) -> Lease {
    let now = now_micro();
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "passmower-elector".to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(duration_seconds),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }),
    }
}

/// `current` taken over by `holder`: a new term, so `leaseTransitions` grows by one.
/// `current` keeps its resourceVersion, which makes the replace conditional.
pub fn acquired(current: &Lease, holder: &str, duration_seconds: i32) -> Lease {
    let mut lease = current.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let now = now_micro();
    let transitions = spec.lease_transitions.unwrap_or(0).max(0);
    spec.holder_identity = Some(holder.to_owned());
    spec.lease_duration_seconds = Some(duration_seconds);
    spec.acquire_time = Some(now.clone());
    spec.renew_time = Some(now);
    spec.lease_transitions = Some(transitions.saturating_add(1));
    lease
}

/// `current` renewed by its holder. The new `renewTime` is always later than the old one.
pub fn renewed(current: &Lease, holder: &str, duration_seconds: i32) -> Lease {
    let mut lease = current.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(holder.to_owned());
    spec.lease_duration_seconds = Some(duration_seconds);
    spec.renew_time = Some(renew_time_after(spec.renew_time.as_ref()));
    lease
}

/// `current`, held by an earlier elector process of our own pod, taken over by `holder`: the
/// term goes on (see [`super::adoption`]), so `leaseTransitions` and `acquireTime` stay; the
/// holder, the duration and a later `renewTime` are ours — to every other candidate it is a
/// renewal. `current` keeps its resourceVersion, which makes the replace conditional.
pub fn adopted(current: &Lease, holder: &str, duration_seconds: i32) -> Lease {
    renewed(current, holder, duration_seconds)
}

/// `current` released: empty holder and a one-second duration, so followers (ours and
/// client-go's) take it at once.
pub fn released(current: &Lease) -> Lease {
    let mut lease = current.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(String::new());
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now_micro());
    lease
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(
        holder: Option<&str>,
        duration: Option<i32>,
        transitions: Option<i32>,
        rv: &str,
    ) -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: duration,
                lease_transitions: transitions,
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn garbage_fields_read_as_released_or_unknown() {
        let r = LeaseRecord::from_lease(&lease(Some(""), Some(0), Some(-4), "7"));
        assert_eq!(r.holder, None);
        assert_eq!(r.duration, None);
        assert_eq!(r.transitions, 0);
        let r = LeaseRecord::from_lease(&lease(None, Some(-15), None, "8"));
        assert_eq!((r.holder, r.duration), (None, None));
        let r = LeaseRecord::from_lease(&Lease::default());
        assert_eq!(r.resource_version, "");
    }

    #[test]
    fn acquisition_is_a_new_term_and_keeps_the_precondition() {
        let current = lease(Some("old"), Some(15), Some(4), "42");
        let next = acquired(&current, "me_1", 15);
        let r = LeaseRecord::from_lease(&next);
        assert_eq!(r.holder.as_deref(), Some("me_1"));
        assert_eq!(r.transitions, 5);
        assert_eq!(r.resource_version, "42");
    }

    #[test]
    fn adoption_keeps_the_term_and_the_precondition_and_counts_as_a_renewal() {
        let mut current = lease(Some("pod-a_u_1"), Some(15), Some(4), "42");
        current.spec.as_mut().unwrap().acquire_time = Some(MicroTime(Timestamp::UNIX_EPOCH));
        let next = adopted(&current, "pod-a_u_2", 15);
        let r = LeaseRecord::from_lease(&next);
        assert_eq!(r.holder.as_deref(), Some("pod-a_u_2"));
        assert_eq!(r.transitions, 4, "the epoch does not change on adoption");
        assert_eq!(r.resource_version, "42");
        assert_eq!(
            next.spec.as_ref().unwrap().acquire_time,
            Some(MicroTime(Timestamp::UNIX_EPOCH))
        );
        // Every other candidate sees a changed record: its wait starts again.
        assert_ne!(
            Observed::from_lease(&current).key(),
            Observed::from_lease(&next).key()
        );
    }

    #[test]
    fn release_empties_the_holder() {
        let next = released(&lease(Some("me"), Some(15), Some(2), "9"));
        let spec = next.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some(""));
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(spec.lease_transitions, Some(2));
    }

    #[test]
    fn a_renewal_always_moves_renew_time_forward() {
        // A renewTime far in the future (a clock that stepped back since it was written).
        let mut current = lease(Some("me"), Some(15), Some(1), "9");
        let future = Timestamp::now().as_microsecond() + 3_600_000_000;
        current.spec.as_mut().unwrap().renew_time =
            Some(MicroTime(Timestamp::from_microsecond(future).unwrap()));
        let next = renewed(&current, "me", 15);
        let written = next.spec.unwrap().renew_time.unwrap().0.as_microsecond();
        assert_eq!(written, future + 1);
        assert_ne!(
            Observed::from_lease(&current).key(),
            Observed::from_lease(&renewed(&current, "me", 15)).key()
        );
    }

    #[test]
    fn metadata_edits_do_not_change_the_record_key() {
        let a = lease(Some("holder"), Some(15), Some(1), "9");
        let mut b = a.clone();
        b.metadata.resource_version = Some("10".into());
        b.metadata.annotations = Some([("argocd/sync".to_owned(), "1".to_owned())].into());
        b.metadata.labels = Some([("team".to_owned(), "x".to_owned())].into());
        b.spec.as_mut().unwrap().preferred_holder = Some("someone".into());
        assert_eq!(
            Observed::from_lease(&a).key(),
            Observed::from_lease(&b).key()
        );
        // Every field a holder writes does.
        let edits: [fn(&mut LeaseSpec); 5] = [
            |s| s.holder_identity = Some("other".into()),
            |s| s.renew_time = Some(MicroTime(Timestamp::UNIX_EPOCH)),
            |s| s.acquire_time = Some(MicroTime(Timestamp::UNIX_EPOCH)),
            |s| s.lease_duration_seconds = Some(16),
            |s| s.lease_transitions = Some(2),
        ];
        for edit in edits {
            let mut c = a.clone();
            edit(c.spec.as_mut().unwrap());
            assert_ne!(
                Observed::from_lease(&a).key(),
                Observed::from_lease(&c).key()
            );
        }
    }

    #[test]
    fn older_resource_versions_are_recognised_only_when_numeric() {
        assert!(is_older_resource_version("9", "10"));
        assert!(!is_older_resource_version("10", "10"));
        assert!(!is_older_resource_version("abc", "10"));
    }
}
