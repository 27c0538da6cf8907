//! Adoption: whether an elector restarted in its own pod may take the Lease over from the pod's
//! previous elector process, so that the app keeps running in leader mode without a restart.
//!
//! Pure: the caller passes the fresh Lease record, what the previous elector left on the pod's
//! volume (verified under its key), and the boot clock; see `elect::run::adopt` for the I/O.
//!
//! Why adoption cannot make a second pod leader:
//! - Another pod runs operators only after taking the Lease, which it may do only once the
//!   record stayed unchanged for the lease duration D on its own clock. The adoption is one
//!   write, conditional on the resourceVersion of the record that named our pod: if another
//!   pod wrote first, the adoption fails (409) and nothing is granted; if the adoption lands
//!   first, the record changed, the other pod's write fails, and its D wait starts again. To
//!   everyone else an adoption is a renewal by the holder.
//! - Our pod's grant after the adoption runs, as after any acquisition, until the write's send
//!   time + R; until the write has succeeded this process grants nothing: the app runs on the
//!   previous elector's grant, which expires on its own (R after that elector's last successful
//!   write), and the consumer stops within K of that. So the usual rule R + K + margin < D covers
//!   both processes of our pod: the record's last change is at most R before either grant ends.
//! - Only the same pod incarnation adopts: the record must name our pod's name *and* its full
//!   UID. A pod with the same name and another UID (a StatefulSet replica, a force-deleted pod
//!   recreated) is another pod: it waits D like everyone else. An identity without a UID names
//!   no pod incarnation and is never adopted.
//! - Two elector processes in one pod (a second container sharing the volume, a `kubectl exec`)
//!   are still one pod: the conditional write lets at most one of them hold the record, the
//!   other sees the Lease name someone else and demotes, and nothing either does can let
//!   another pod write earlier than D after the record's last change.
//!
//! When to adopt (everything else declines, and the restarted elector starts as a follower that
//! waits D on the old record like any other candidate):
//! - the record names an earlier process of our pod, and the previous elector's last object on
//!   the volume is a leader grant for that very holder, still unexpired, tying the record to a
//!   term the app is running under;
//! - the consumer's ack (signed under that elector's key) says the app runs in leader mode under
//!   that elector. An expired grant, an ack saying follower (the supervisor already demoted: a
//!   restart is due anyway) or stopped (the app container is exiting), or no verified ack at all
//!   mean there is nothing to continue;
//! - and the app is not failing as leader: an ack reporting `leader_start_failures` at or above
//!   the step-down limit means the previous elector was about to hand over; the restarted one
//!   finishes that instead — demote, wait for the ack, release the record, sit out D.
//!
//! The epoch (`leaseTransitions`) does not change on adoption: it fences terms, and the term
//! goes on — the same app process keeps writing, with no other writer in between, so a
//! downstream fence must keep accepting its writes (an increment would refuse the app's own
//! in-flight writes stamped with the old epoch). A takeover by another pod still increments it,
//! so the property a fence relies on — no writer of a later term carries an earlier epoch —
//! holds. `acquireTime` stays for the same reason.

use crate::clock::BootInstant;

use super::identity::HolderIdentity;
use super::record::Observed;

/// What the consumer last acknowledged to the previous elector (verified under its key): the
/// ack a restarted elector inherits. (The live judgement of the consumer is
/// `elect::consumer::ConsumerState`.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InheritedAck {
    /// The app runs in leader mode under that elector's incarnation; `failures` leader runs in a
    /// row ended on their own.
    Leader { failures: u64 },
    /// The app runs as follower (the supervisor demoted it, or never promoted it).
    Follower,
    /// The consumer has exited.
    Stopped,
    /// No ack verifies under the previous elector's key, or it names another incarnation.
    Unknown,
}

/// What the pod's previous elector process left on the shared volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inheritance {
    /// The holder identity in its last flag-file object (its own identity, in a leader grant).
    pub holder: String,
    /// When its last object is a leader grant: that grant's expiry on CLOCK_BOOTTIME.
    pub leader_until: Option<BootInstant>,
    /// The epoch of that object.
    pub epoch: u64,
    pub consumer: InheritedAck,
}

impl Inheritance {
    /// Until when an adoption may still happen: the inherited leader grant's expiry, if it has
    /// not passed. Until then the restarted elector publishes no demotion; after it, nothing on
    /// the volume is worth continuing.
    pub fn window(&self, now: BootInstant) -> Option<BootInstant> {
        self.leader_until.filter(|&until| now < until)
    }
}

/// The start-up decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Take the record over with one conditional write under our identity, then grant.
    Adopt { from: String },
    /// The app cannot run as leader: demote it, wait for the ack, release the record `from`
    /// (our pod's earlier process), and sit out a lease duration.
    Release { from: String, failures: u64 },
    /// Nothing to adopt: publish follower.
    Decline(Declined),
}

/// Why an elector does not adopt. Shown in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Declined {
    /// Our own identity carries no pod UID (`--pod-uid` / `POD_UID` unset).
    NoPodUid,
    Absent,
    Released,
    /// The record names another pod (or an identity that names no pod incarnation).
    OtherPod {
        holder: String,
    },
    /// The record names this very process (cannot happen at start-up; never adopted).
    Itself,
    /// Nothing verifiable from a previous elector on the volume.
    NothingInherited,
    /// The previous elector's last object is for another holder than the record names.
    GrantOfAnotherHolder {
        grant: String,
        record: String,
    },
    /// The previous elector's last object is a follower object.
    NotGranted,
    GrantExpired,
    ConsumerFollower,
    ConsumerStopped,
    ConsumerUnknown,
}

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Declined::NoPodUid => f.write_str("this elector knows no pod UID (--pod-uid, POD_UID)"),
            Declined::Absent => f.write_str("the Lease does not exist"),
            Declined::Released => f.write_str("the Lease is released"),
            Declined::OtherPod { holder } => {
                write!(f, "the Lease is held by another pod ({holder})")
            }
            Declined::Itself => f.write_str("the Lease already names this process"),
            Declined::NothingInherited => {
                f.write_str("no grant of a previous elector of this pod verifies on the volume")
            }
            Declined::GrantOfAnotherHolder { grant, record } => write!(
                f,
                "the grant on the volume is for {grant}, the Lease names {record}"
            ),
            Declined::NotGranted => f.write_str("the previous elector's last object is a demotion"),
            Declined::GrantExpired => f.write_str("the previous elector's grant has expired"),
            Declined::ConsumerFollower => {
                f.write_str("the supervisor reports the app as follower (already demoted)")
            }
            Declined::ConsumerStopped => f.write_str("the supervisor reports that it has stopped"),
            Declined::ConsumerUnknown => {
                f.write_str("no ack of the supervisor verifies for the previous elector")
            }
        }
    }
}

/// Decides at `now` whether `me` adopts the Lease as `observed` (a fresh read), given what the
/// previous elector of the pod left (`inherited`) and the step-down limit (`max_failures`, 0:
/// never step down). See the module documentation for the rules and why they are safe.
pub fn decide(
    me: &str,
    observed: &Observed,
    inherited: Option<&Inheritance>,
    now: BootInstant,
    max_failures: u64,
) -> Decision {
    let decline = Decision::Decline;
    let Some(mine) = HolderIdentity::parse(me) else {
        return decline(Declined::NoPodUid);
    };
    let holder = match observed {
        Observed::Absent => return decline(Declined::Absent),
        Observed::Present(r) => match r.holder.as_deref() {
            None => return decline(Declined::Released),
            Some(h) => h,
        },
    };
    if holder == me {
        return decline(Declined::Itself);
    }
    if !HolderIdentity::parse(holder).is_some_and(|h| h.same_pod(&mine)) {
        return decline(Declined::OtherPod {
            holder: holder.to_owned(),
        });
    }
    let Some(inherited) = inherited else {
        return decline(Declined::NothingInherited);
    };
    if inherited.holder != holder {
        return decline(Declined::GrantOfAnotherHolder {
            grant: inherited.holder.clone(),
            record: holder.to_owned(),
        });
    }
    match inherited.leader_until {
        None => return decline(Declined::NotGranted),
        Some(until) if now >= until => return decline(Declined::GrantExpired),
        Some(_) => {}
    }
    match inherited.consumer {
        InheritedAck::Leader { failures } if max_failures > 0 && failures >= max_failures => {
            Decision::Release {
                from: holder.to_owned(),
                failures,
            }
        }
        InheritedAck::Leader { .. } => Decision::Adopt {
            from: holder.to_owned(),
        },
        InheritedAck::Follower => decline(Declined::ConsumerFollower),
        InheritedAck::Stopped => decline(Declined::ConsumerStopped),
        InheritedAck::Unknown => decline(Declined::ConsumerUnknown),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::election::record::LeaseRecord;

    const UID: &str = "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f40";
    const OTHER_UID: &str = "7e1d2c3b-0000-4d0a-9a57-3c2e1d7b8f40";

    fn id(pod: &str, uid: &str, suffix: u32) -> String {
        crate::election::identity::build(pod, Some(uid), suffix)
    }

    fn at(secs: u64) -> BootInstant {
        BootInstant::from_nanos(secs * 1_000_000_000)
    }

    fn held(holder: Option<&str>) -> Observed {
        Observed::Present(LeaseRecord {
            holder: holder.map(str::to_owned),
            duration: Some(Duration::from_secs(15)),
            transitions: 4,
            renew_time: Some("t".into()),
            acquire_time: Some("t0".into()),
            resource_version: "42".into(),
        })
    }

    fn inherited(holder: &str, until: Option<u64>, consumer: InheritedAck) -> Inheritance {
        Inheritance {
            holder: holder.to_owned(),
            leader_until: until.map(at),
            epoch: 4,
            consumer,
        }
    }

    fn leading() -> InheritedAck {
        InheritedAck::Leader { failures: 0 }
    }

    #[test]
    fn an_earlier_process_of_this_pod_with_a_live_acked_grant_is_adopted() {
        let me = id("pod-a", UID, 2);
        let old = id("pod-a", UID, 1);
        let inh = inherited(&old, Some(110), leading());
        assert_eq!(
            decide(&me, &held(Some(&old)), Some(&inh), at(100), 3),
            Decision::Adopt { from: old.clone() }
        );
        // Failures below the limit, or a limit of 0, do not stop it.
        let inh = inherited(&old, Some(110), InheritedAck::Leader { failures: 2 });
        assert!(matches!(
            decide(&me, &held(Some(&old)), Some(&inh), at(100), 3),
            Decision::Adopt { .. }
        ));
        let inh = inherited(&old, Some(110), InheritedAck::Leader { failures: 99 });
        assert!(matches!(
            decide(&me, &held(Some(&old)), Some(&inh), at(100), 0),
            Decision::Adopt { .. }
        ));
    }

    #[test]
    fn the_same_name_with_another_uid_is_another_pod_and_never_adopts() {
        // A StatefulSet replica or a force-deleted pod recreated under the same name, even
        // with a live, acked grant on the volume (the worst case: a shared volume).
        let me = id("pod-a", OTHER_UID, 2);
        let old = id("pod-a", UID, 1);
        let inh = inherited(&old, Some(110), leading());
        assert_eq!(
            decide(&me, &held(Some(&old)), Some(&inh), at(100), 3),
            Decision::Decline(Declined::OtherPod { holder: old })
        );
    }

    #[test]
    fn without_a_pod_uid_on_either_side_nothing_is_adopted() {
        let old = id("pod-a", UID, 1);
        let inh = inherited(&old, Some(110), leading());
        assert_eq!(
            decide("pod-a_00000002", &held(Some(&old)), Some(&inh), at(100), 3),
            Decision::Decline(Declined::NoPodUid)
        );
        let me = id("pod-a", UID, 2);
        let legacy = "pod-a_00000001";
        let inh = inherited(legacy, Some(110), leading());
        assert!(matches!(
            decide(&me, &held(Some(legacy)), Some(&inh), at(100), 3),
            Decision::Decline(Declined::OtherPod { .. })
        ));
    }

    #[test]
    fn a_lease_of_another_pod_released_absent_or_our_own_is_not_adopted() {
        let me = id("pod-a", UID, 2);
        let old = id("pod-a", UID, 1);
        let inh = inherited(&old, Some(110), leading());
        let b = id("pod-b", OTHER_UID, 9);
        assert_eq!(
            decide(&me, &held(Some(&b)), Some(&inh), at(100), 3),
            Decision::Decline(Declined::OtherPod { holder: b })
        );
        assert_eq!(
            decide(&me, &held(None), Some(&inh), at(100), 3),
            Decision::Decline(Declined::Released)
        );
        assert_eq!(
            decide(&me, &Observed::Absent, Some(&inh), at(100), 3),
            Decision::Decline(Declined::Absent)
        );
        assert_eq!(
            decide(&me, &held(Some(&me)), Some(&inh), at(100), 3),
            Decision::Decline(Declined::Itself)
        );
    }

    #[test]
    fn only_a_live_leader_grant_for_the_record_s_holder_that_the_app_runs_under_is_continued() {
        let me = id("pod-a", UID, 3);
        let old = id("pod-a", UID, 2);
        let older = id("pod-a", UID, 1);
        let record = held(Some(&old));
        let cases = [
            (None, Declined::NothingInherited),
            (
                Some(inherited(&older, Some(110), leading())),
                Declined::GrantOfAnotherHolder {
                    grant: older.clone(),
                    record: old.clone(),
                },
            ),
            (Some(inherited(&old, None, leading())), Declined::NotGranted),
            (
                Some(inherited(&old, Some(100), leading())),
                Declined::GrantExpired,
            ),
            (
                Some(inherited(&old, Some(110), InheritedAck::Follower)),
                Declined::ConsumerFollower,
            ),
            (
                Some(inherited(&old, Some(110), InheritedAck::Stopped)),
                Declined::ConsumerStopped,
            ),
            (
                Some(inherited(&old, Some(110), InheritedAck::Unknown)),
                Declined::ConsumerUnknown,
            ),
        ];
        for (inh, why) in cases {
            assert_eq!(
                decide(&me, &record, inh.as_ref(), at(100), 3),
                Decision::Decline(why.clone()),
                "{why}"
            );
        }
    }

    #[test]
    fn an_app_failing_as_leader_makes_the_restarted_elector_finish_the_step_down() {
        let me = id("pod-a", UID, 2);
        let old = id("pod-a", UID, 1);
        let inh = inherited(&old, Some(110), InheritedAck::Leader { failures: 3 });
        assert_eq!(
            decide(&me, &held(Some(&old)), Some(&inh), at(100), 3),
            Decision::Release {
                from: old,
                failures: 3
            }
        );
    }

    #[test]
    fn the_window_closes_at_the_inherited_grant_s_expiry() {
        let old = id("pod-a", UID, 1);
        let inh = inherited(&old, Some(110), leading());
        assert_eq!(inh.window(at(100)), Some(at(110)));
        assert_eq!(inh.window(at(110)), None);
        assert_eq!(inherited(&old, None, leading()).window(at(100)), None);
    }
}
