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
    /// `metadata.resourceVersion`: the precondition of every write.
    pub resource_version: String,
}

/// The identity of an observed record: if it is unchanged for D, its holder has had time to stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordKey {
    Absent,
    Present {
        holder: Option<String>,
        renew_time: Option<String>,
        resource_version: String,
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
                resource_version: r.resource_version.clone(),
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
            resource_version: lease.metadata.resource_version.clone().unwrap_or_default(),
        }
    }
}

/// Whether resource version `candidate` is older than `current`. Resource versions are opaque
/// strings in the API contract, but every apiserver backed by etcd uses revision numbers; where
/// both parse, an older one identifies a late duplicate that must not rewind what we know.
pub fn is_older_resource_version(candidate: &str, current: &str) -> bool {
    match (candidate.parse::<u64>(), current.parse::<u64>()) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
    }
}

fn now_micro() -> MicroTime {
    MicroTime(Timestamp::now())
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

/// `current` renewed by its holder.
pub fn renewed(current: &Lease, holder: &str, duration_seconds: i32) -> Lease {
    let mut lease = current.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(holder.to_owned());
    spec.lease_duration_seconds = Some(duration_seconds);
    spec.renew_time = Some(now_micro());
    lease
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
    fn release_empties_the_holder() {
        let next = released(&lease(Some("me"), Some(15), Some(2), "9"));
        let spec = next.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some(""));
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(spec.lease_transitions, Some(2));
    }

    #[test]
    fn older_resource_versions_are_recognised_only_when_numeric() {
        assert!(is_older_resource_version("9", "10"));
        assert!(!is_older_resource_version("10", "10"));
        assert!(!is_older_resource_version("abc", "10"));
    }
}
