//! What the holder says about its term on the Lease: annotations it writes in the same
//! conditional update as each acquisition, renewal, adoption and release — never in a write of
//! their own, so publishing them needs no permission and no request the election does not make
//! anyway. `passmower-elector status` reads them; nothing in the election does.
//!
//! They are metadata, and the record key followers judge a holder by leaves metadata out (see
//! [`super::record::RecordKey`]): a changed annotation can neither restart nor shorten anyone's
//! wait. What they say is only as fresh as the holder's last write: a reader must check the
//! Lease's `renewTime` before it believes `operators-running`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;

use super::candidate::HandoverCause;

/// `"true"` while the holder's consumer says, signed, that the leader app runs; `"false"`
/// otherwise (the leader app is still starting, the consumer is silent, the Lease is released).
pub const OPERATORS_RUNNING: &str = "passmower-elector.io/operators-running";
/// The holder's consumer as its elector judges it: `STATE: reason`, STATE one of `live`,
/// `unproven`, `silent`, `stopped`, `unchecked`.
pub const CONSUMER: &str = "passmower-elector.io/consumer";
/// How the current term began: `released`, `expired`, `adopted` or `created`
/// ([`HandoverCause`]).
pub const ACQUIRED_CAUSE: &str = "passmower-elector.io/acquired-cause";
/// How long nobody led before the current term, in milliseconds, as the acquirer measured it
/// (0 for an adoption: the term went on).
pub const LEADERLESS_MS: &str = "passmower-elector.io/leaderless-ms";

/// The longest consumer reason written: an annotation is for a screen, not a log.
const MAX_REASON: usize = 300;

/// How the current term began; written with every write of the term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermStart {
    pub cause: HandoverCause,
    pub leaderless: Duration,
}

/// What the holder writes with one of its Lease writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderReport {
    /// The holder's consumer says (signed) that the leader app runs.
    pub operators_running: bool,
    /// The consumer's state name (`live`, `unproven`, ...).
    pub consumer: &'static str,
    /// The consumer's state in words.
    pub consumer_reason: String,
    /// How the term began; `None` leaves what the Lease has (a release keeps the last term's).
    pub term: Option<TermStart>,
}

/// Writes `report` into `lease`'s annotations, keeping every other annotation.
pub fn annotate(lease: &mut Lease, report: &HolderReport) {
    let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(
        OPERATORS_RUNNING.to_owned(),
        report.operators_running.to_string(),
    );
    let mut reason: String = report.consumer_reason.chars().take(MAX_REASON).collect();
    if reason.len() < report.consumer_reason.len() {
        reason.push('…');
    }
    annotations.insert(
        CONSUMER.to_owned(),
        format!("{}: {reason}", report.consumer),
    );
    if let Some(term) = report.term {
        annotations.insert(ACQUIRED_CAUSE.to_owned(), term.cause.as_str().to_owned());
        annotations.insert(
            LEADERLESS_MS.to_owned(),
            u64::try_from(term.leaderless.as_millis())
                .unwrap_or(u64::MAX)
                .to_string(),
        );
    }
}

/// The holder's report as read back from a Lease; every field is `None` when missing or not
/// readable (a Lease written by an older elector, or edited by hand).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadReport {
    pub operators_running: Option<bool>,
    pub consumer: Option<String>,
    pub consumer_reason: Option<String>,
    pub acquired_cause: Option<String>,
    pub leaderless: Option<Duration>,
}

/// Reads the holder's report from `lease`.
pub fn read(lease: &Lease) -> ReadReport {
    let Some(annotations) = &lease.metadata.annotations else {
        return ReadReport::default();
    };
    let get = |key: &str| annotations.get(key).map(String::as_str);
    let (consumer, consumer_reason) = match get(CONSUMER) {
        Some(text) => match text.split_once(": ") {
            Some((state, reason)) => (Some(state.to_owned()), Some(reason.to_owned())),
            None => (Some(text.to_owned()), None),
        },
        None => (None, None),
    };
    ReadReport {
        operators_running: match get(OPERATORS_RUNNING) {
            Some("true") => Some(true),
            Some("false") => Some(false),
            _ => None,
        },
        consumer,
        consumer_reason,
        acquired_cause: get(ACQUIRED_CAUSE)
            .filter(|c| HandoverCause::ALL.iter().any(|k| k.as_str() == *c))
            .map(str::to_owned),
        leaderless: get(LEADERLESS_MS)
            .and_then(|ms| ms.parse::<u64>().ok())
            .map(Duration::from_millis),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::record::Observed;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn lease() -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some("7".into()),
                annotations: Some([("gitops/owner".to_owned(), "team".to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("pod-a_1".into()),
                lease_duration_seconds: Some(15),
                lease_transitions: Some(3),
                ..LeaseSpec::default()
            }),
        }
    }

    fn report(running: bool, term: Option<TermStart>) -> HolderReport {
        HolderReport {
            operators_running: running,
            consumer: "live",
            consumer_reason: "the consumer answers (leader in effect)".into(),
            term,
        }
    }

    #[test]
    fn the_report_round_trips_and_keeps_other_annotations() {
        let mut l = lease();
        let term = TermStart {
            cause: HandoverCause::Released,
            leaderless: Duration::from_millis(1234),
        };
        annotate(&mut l, &report(true, Some(term)));
        let back = read(&l);
        assert_eq!(back.operators_running, Some(true));
        assert_eq!(back.consumer.as_deref(), Some("live"));
        assert_eq!(
            back.consumer_reason.as_deref(),
            Some("the consumer answers (leader in effect)")
        );
        assert_eq!(back.acquired_cause.as_deref(), Some("released"));
        assert_eq!(back.leaderless, Some(Duration::from_millis(1234)));
        let annotations = l.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations["gitops/owner"], "team");
        // A renewal without a term keeps the term's annotations.
        annotate(&mut l, &report(false, None));
        let back = read(&l);
        assert_eq!(back.operators_running, Some(false));
        assert_eq!(back.acquired_cause.as_deref(), Some("released"));
    }

    /// The annotations are metadata: whatever the holder reports, followers see the same
    /// record, so a report can neither restart nor end anyone's wait.
    #[test]
    fn a_report_never_changes_the_record_key() {
        let before = lease();
        for running in [true, false] {
            let mut after = before.clone();
            annotate(
                &mut after,
                &report(
                    running,
                    Some(TermStart {
                        cause: HandoverCause::Expired,
                        leaderless: Duration::from_secs(20),
                    }),
                ),
            );
            assert_eq!(
                Observed::from_lease(&before).key(),
                Observed::from_lease(&after).key()
            );
        }
    }

    #[test]
    fn hand_edited_or_missing_annotations_read_as_unknown() {
        assert_eq!(read(&Lease::default()), ReadReport::default());
        let mut l = lease();
        let a = l.metadata.annotations.as_mut().unwrap();
        a.insert(OPERATORS_RUNNING.into(), "yes".into());
        a.insert(ACQUIRED_CAUSE.into(), "stolen".into());
        a.insert(LEADERLESS_MS.into(), "-5".into());
        a.insert(CONSUMER.into(), "live".into());
        let back = read(&l);
        assert_eq!(back.operators_running, None);
        assert_eq!(back.acquired_cause, None);
        assert_eq!(back.leaderless, None);
        assert_eq!(back.consumer.as_deref(), Some("live"));
        assert_eq!(back.consumer_reason, None);
    }

    #[test]
    fn a_long_reason_is_cut() {
        let mut l = lease();
        let mut r = report(false, None);
        r.consumer_reason = "x".repeat(1000);
        annotate(&mut l, &r);
        let reason = read(&l).consumer_reason.unwrap();
        assert_eq!(reason.chars().count(), MAX_REASON + 1);
    }
}
