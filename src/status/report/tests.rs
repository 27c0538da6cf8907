//! The judgement of `status` on objects built in memory: when it says healthy, what it says of
//! each pod, and what it takes from the Events.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ParamRef, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicyBindingSpec,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, Event, Pod,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::election::report::{annotate, HolderReport, TermStart};
use crate::election::HandoverCause;
use crate::status::gather::{FenceRead, Gathered};

const UID_A: &str = "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f40";
const UID_B: &str = "1f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f41";
const UID_C: &str = "2f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f42";

fn now() -> Timestamp {
    Timestamp::from_second(2_000_000_000).unwrap()
}

fn ago(secs: i64) -> Timestamp {
    Timestamp::from_second(2_000_000_000 - secs).unwrap()
}

fn identity(pod: &str, uid: &str) -> String {
    format!("{pod}_{uid}_0a1b2c3d")
}

/// The Lease held by pm-a, renewed `renewed_ago` seconds ago, with its holder's report.
fn lease(renewed_ago: i64, running: Option<bool>) -> Lease {
    let mut l = Lease {
        metadata: ObjectMeta {
            name: Some("pm".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(identity("pm-a", UID_A)),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(4),
            acquire_time: Some(MicroTime(ago(100))),
            renew_time: Some(MicroTime(ago(renewed_ago))),
            ..LeaseSpec::default()
        }),
    };
    if let Some(running) = running {
        annotate(
            &mut l,
            &HolderReport {
                operators_running: running,
                consumer: if running { "live" } else { "unproven" },
                consumer_reason: if running {
                    "the consumer answers (leader in effect)".into()
                } else {
                    "no signed ack from the app's supervisor yet".into()
                },
                term: Some(TermStart {
                    cause: HandoverCause::Released,
                    leaderless: Duration::from_millis(1250),
                }),
            },
        );
    }
    l
}

fn running(name: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        ready: true,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

fn waiting(name: &str, reason: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message: Some(format!("{reason} for image x")),
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

fn pod(name: &str, uid: &str, app: ContainerStatus) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..ObjectMeta::default()
        },
        status: Some(PodStatus {
            phase: Some("Running".into()),
            init_container_statuses: Some(vec![running("passmower-elector")]),
            container_statuses: Some(vec![app]),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

fn event(reporter: &str, reason: &str, message: &str, at: i64, details: &[(&str, &str)]) -> Event {
    Event {
        metadata: ObjectMeta {
            annotations: Some(
                details
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..ObjectMeta::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        reporting_instance: Some(reporter.into()),
        reporting_component: Some("passmower-elector".into()),
        last_timestamp: Some(Time(ago(at))),
        type_: Some("Normal".into()),
        ..Event::default()
    }
}

fn gathered(lease: Read<Lease>, pods: Vec<Pod>, events: Vec<Event>) -> Gathered {
    Gathered {
        namespace: "pm".into(),
        deployment: None,
        lease_name: "pm".into(),
        lease_name_from: "--lease",
        lease,
        pods: Ok(pods),
        events: Ok(events),
        fence: FenceRead {
            name: "passmower-elector-fence.pm.pm".into(),
            service_account: "pm".into(),
            policy: Err("forbidden".into()),
            binding: Err("forbidden".into()),
            refusals: Err("forbidden".into()),
        },
        native: None,
    }
}

use crate::status::gather::Read;

#[test]
fn a_fresh_holder_whose_operators_run_is_healthy() {
    let g = gathered(
        Ok(Some(lease(1, Some(true)))),
        vec![pod("pm-a", UID_A, running("passmower"))],
        vec![],
    );
    let r = build(&g, now());
    assert!(r.healthy, "{}", r.verdict);
    assert_eq!(r.exit_code(), 0);
    assert_eq!(r.lease.holder_pod.as_deref(), Some("pm-a"));
    assert_eq!(r.lease.epoch, Some(4));
    assert_eq!(r.lease.acquired_cause.as_deref(), Some("released"));
    assert_eq!(r.lease.leaderless_seconds, Some(1.25));
    assert_eq!(r.pods[0].state, "leader");
}

/// A report on a Lease nobody renews is old news: a dead holder's "true" must not read healthy.
#[test]
fn a_holder_that_stopped_renewing_is_no_working_leader_whatever_it_last_said() {
    let g = gathered(Ok(Some(lease(16, Some(true)))), vec![], vec![]);
    let r = build(&g, now());
    assert!(!r.healthy);
    assert_eq!(r.exit_code(), 1);
    assert!(
        r.verdict.contains("last renewed it 16.0s ago"),
        "{}",
        r.verdict
    );
}

#[test]
fn a_holder_whose_operators_do_not_run_is_no_working_leader_and_says_why() {
    let r = build(
        &gathered(Ok(Some(lease(1, Some(false)))), vec![], vec![]),
        now(),
    );
    assert_eq!(r.exit_code(), 1);
    assert!(r.verdict.contains("no signed ack"), "{}", r.verdict);
    // An elector that writes no report: not healthy either, and the verdict says so.
    let r = build(&gathered(Ok(Some(lease(1, None))), vec![], vec![]), now());
    assert_eq!(r.exit_code(), 1);
    assert!(r.verdict.contains("writes no report"), "{}", r.verdict);
}

#[test]
fn no_lease_or_a_released_one_is_no_leader_and_an_unreadable_one_is_unknown() {
    let r = build(&gathered(Ok(None), vec![], vec![]), now());
    assert_eq!(r.exit_code(), 1);
    assert!(r.verdict.contains("does not exist"), "{}", r.verdict);
    let mut released = lease(1, Some(true));
    released.spec.as_mut().unwrap().holder_identity = Some(String::new());
    let r = build(&gathered(Ok(Some(released)), vec![], vec![]), now());
    assert_eq!(r.exit_code(), 1);
    assert!(r.verdict.contains("released"), "{}", r.verdict);
    let r = build(
        &gathered(Err("forbidden: no".into()), vec![], vec![]),
        now(),
    );
    assert_eq!(r.exit_code(), 3);
    assert!(r.unreadable[0].contains("forbidden"), "{:?}", r.unreadable);
}

#[test]
fn every_other_pod_says_whether_it_could_take_over_and_why_not() {
    let (b, c, d, e) = (
        identity("pm-b", UID_B),
        identity("pm-c", UID_C),
        identity("pm-d", UID_C),
        identity("pm-e", UID_A),
    );
    let events = vec![
        event(
            &b,
            "NotContending",
            "not contending for the Lease: old",
            50,
            &[],
        ),
        event(
            &b,
            "FollowerReady",
            "ready to take the Lease: the consumer answers",
            40,
            &[],
        ),
        event(&c, "FollowerReady", "ready to take the Lease", 40, &[]),
        event(
            &c,
            "NotContending",
            "not contending for the Lease: no signed ack",
            30,
            &[],
        ),
        // An earlier pod of pm-e's name (another UID) said something: not this pod's word.
        event(
            &e,
            "NotContending",
            "not contending for the Lease: stale",
            30,
            &[],
        ),
        event(&d, "FollowerReady", "ready", 30, &[]),
    ];
    let mut deleting = pod("pm-f", UID_B, running("passmower"));
    deleting.metadata.deletion_timestamp = Some(Time(ago(1)));
    let pods = vec![
        pod("pm-b", UID_B, running("passmower")),
        pod("pm-c", UID_C, waiting("passmower", "ImagePullBackOff")),
        pod(
            "pm-d",
            UID_C,
            waiting("passmower", "CreateContainerConfigError"),
        ),
        pod("pm-e", UID_B, running("passmower")),
        deleting,
        pod("pm-g", UID_C, waiting("passmower", "ContainerCreating")),
    ];
    let r = build(
        &gathered(Ok(Some(lease(1, Some(true)))), pods, events),
        now(),
    );
    let state = |name: &str| {
        let p = r.pods.iter().find(|p| p.name == name).unwrap();
        (p.state.as_str(), p.detail.join(" | "))
    };
    assert_eq!(state("pm-b").0, "follower-ready");
    let (s, why) = state("pm-c");
    assert_eq!(s, "not-contending");
    assert!(
        why.contains("no signed ack") && why.contains("ImagePullBackOff"),
        "{why}"
    );
    // The container problem is there before the elector's word is.
    let (s, why) = state("pm-d");
    assert_eq!(s, "failing", "{why}");
    assert!(why.contains("CreateContainerConfigError"), "{why}");
    assert_eq!(state("pm-e").0, "follower");
    assert_eq!(state("pm-f").0, "terminating");
    assert_eq!(state("pm-g").0, "starting");
}

#[test]
fn handovers_come_from_the_events_with_their_cause_and_leaderless_time() {
    let a = identity("pm-a", UID_A);
    let b = identity("pm-b", UID_B);
    let events = vec![
        event(
            &b,
            "BecameLeader",
            "b became leader",
            300,
            &[
                ("passmower-elector.io/epoch", "3"),
                ("passmower-elector.io/cause", "expired"),
                ("passmower-elector.io/leaderless-ms", "15200"),
            ],
        ),
        event(&b, "StoppedLeading", "b stopped leading", 120, &[]),
        event(
            &a,
            "BecameLeader",
            "a became leader",
            119,
            &[
                ("passmower-elector.io/epoch", "4"),
                ("passmower-elector.io/cause", "released"),
                ("passmower-elector.io/leaderless-ms", "1250"),
            ],
        ),
    ];
    let r = build(
        &gathered(Ok(Some(lease(1, Some(true)))), vec![], events),
        now(),
    );
    assert_eq!(r.handovers.len(), 2);
    let newest = &r.handovers[0];
    assert_eq!(newest.pod.as_deref(), Some("pm-a"));
    assert_eq!(
        (
            newest.epoch,
            newest.cause.as_deref(),
            newest.leaderless_seconds
        ),
        (Some(4), Some("released"), Some(1.25))
    );
    assert_eq!(r.handovers[1].cause.as_deref(), Some("expired"));
    assert_eq!(r.events[0].reason, "BecameLeader");
    assert_eq!(r.events.len(), 3);
}

#[test]
fn the_fence_says_whether_its_parameter_is_this_lease() {
    let binding = |lease: &str| ValidatingAdmissionPolicyBinding {
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            param_ref: Some(ParamRef {
                name: Some(lease.into()),
                ..ParamRef::default()
            }),
            ..ValidatingAdmissionPolicyBindingSpec::default()
        }),
        ..ValidatingAdmissionPolicyBinding::default()
    };
    let mut g = gathered(Ok(Some(lease(1, Some(true)))), vec![], vec![]);
    g.fence.policy = Ok(Some(ValidatingAdmissionPolicy::default()));
    g.fence.binding = Ok(Some(binding("pm")));
    g.fence.refusals = Ok(2);
    let r = build(&g, now());
    assert_eq!(
        (
            r.fence.policy.as_str(),
            r.fence.binding.as_str(),
            r.fence.param.as_str()
        ),
        ("installed", "installed", "present")
    );
    assert_eq!(r.fence.refusals, Some(2));
    assert!(r.healthy, "{}", r.verdict);
    g.fence.policy = Ok(None);
    let r = build(&g, now());
    assert_eq!(r.fence.policy, "missing");
    let text = super::super::render::text(&r);
    assert!(
        text.starts_with("HEALTHY: a working leader: pm-a runs operators"),
        "{text}"
    );
    // Another install on the same ServiceAccount re-pointed the fence: this leader's operator
    // writes are all refused, whatever its report says.
    let mut other = binding("other");
    other.metadata.annotations = Some(
        [(
            "passmower-elector.io/generated-for".to_owned(),
            "Deployment/passmower-two".to_owned(),
        )]
        .into(),
    );
    g.fence.binding = Ok(Some(other));
    g.fence.refusals = Err("forbidden".into());
    let r = build(&g, now());
    assert_eq!(r.fence.param, "other Lease other");
    assert_eq!(r.fence.refusals, None);
    assert!(r.fence.refusals_note.contains("not visible"));
    assert!(!r.healthy);
    assert_eq!(r.exit_code(), 1);
    for needle in [
        "binds Lease other",
        "Deployment/passmower-two",
        "own ServiceAccount",
    ] {
        assert!(r.verdict.contains(needle), "{needle}: {}", r.verdict);
    }
}

/// Passmower's own Lease as its election or our leader writes it: the holder is a pod name.
fn native(holder: &str, renewed_ago: i64) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("passmower-operators".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(ago(renewed_ago))),
            ..LeaseSpec::default()
        }),
    }
}

/// While a running 2.4 install moves over, Passmower's own election holds its Lease and no
/// elector contends: status says so instead of a bare "released", and names the holder.
#[test]
fn a_lease_held_by_passmowers_own_election_says_why_no_elector_leads() {
    let mut g = gathered(
        Ok(None),
        vec![pod("pm-a", UID_A, running("passmower"))],
        vec![],
    );
    g.native = Some((
        "passmower-operators".into(),
        Ok(Some(native("passmower-old-7d9", 2))),
    ));
    let r = build(&g, now());
    assert!(!r.healthy);
    assert_eq!(r.exit_code(), 1);
    for needle in [
        "Passmower's own election holds its Lease passmower-operators",
        "passmower-old-7d9",
        "no elector contends",
        "15s",
    ] {
        assert!(r.verdict.contains(needle), "{needle}: {}", r.verdict);
    }
    let n = r
        .native_lease
        .as_ref()
        .expect("the native Lease is reported");
    assert!(n.fresh && !n.held_by_leader);
    let text = super::super::render::text(&r);
    assert!(
        text.contains("Passmower's own Lease pm/passmower-operators"),
        "{text}"
    );
    assert!(
        text.contains("no elector contends while it renews"),
        "{text}"
    );

    // Gone stale (its pods are gone): free to take, and the verdict is ours again.
    g.native = Some((
        "passmower-operators".into(),
        Ok(Some(native("passmower-old-7d9", 16))),
    ));
    let r = build(&g, now());
    assert!(
        !r.verdict.contains("Passmower's own election"),
        "{}",
        r.verdict
    );
    assert!(super::super::render::text(&r).contains("STALE: free to take"));
}

/// Our leader holds both Leases under its pod name: healthy. Another fresh holder of
/// Passmower's Lease beside our leader is two elections, which is never healthy.
#[test]
fn the_leader_holds_passmowers_lease_too_and_another_holder_is_two_elections() {
    let mut g = gathered(
        Ok(Some(lease(1, Some(true)))),
        vec![pod("pm-a", UID_A, running("passmower"))],
        vec![],
    );
    g.native = Some(("passmower-operators".into(), Ok(Some(native("pm-a", 1)))));
    let r = build(&g, now());
    assert!(r.healthy, "{}", r.verdict);
    assert!(r.native_lease.as_ref().is_some_and(|n| n.held_by_leader));
    assert!(super::super::render::text(&r).contains("the leader, as it should"));

    g.native = Some((
        "passmower-operators".into(),
        Ok(Some(native("passmower-old-7d9", 1))),
    ));
    let r = build(&g, now());
    assert!(!r.healthy);
    for needle in ["two elections", "pm-a", "passmower-old-7d9", "steps down"] {
        assert!(r.verdict.contains(needle), "{needle}: {}", r.verdict);
    }

    // A pod of ours that took it a moment before taking ours (or hands over): not Passmower's
    // own election. pm-b runs our elector.
    let mut b = pod("pm-b", UID_B, running("passmower"));
    b.spec = Some(k8s_openapi::api::core::v1::PodSpec {
        init_containers: Some(vec![k8s_openapi::api::core::v1::Container {
            name: "passmower-elector".into(),
            args: Some(vec!["elect".into(), "--lease-name=pm".into()]),
            ..Default::default()
        }]),
        ..Default::default()
    });
    g.pods = Ok(vec![pod("pm-a", UID_A, running("passmower")), b]);
    g.lease = Ok(None);
    g.native = Some(("passmower-operators".into(), Ok(Some(native("pm-b", 1)))));
    let r = build(&g, now());
    assert!(
        !r.verdict.contains("Passmower's own election"),
        "{}",
        r.verdict
    );
    assert!(r.native_lease.as_ref().is_some_and(|n| n.held_by_elector));
    g.lease = Ok(Some(lease(1, Some(true))));

    // Unreadable (a Role without get on it): said, and the verdict is left alone.
    g.native = Some(("passmower-operators".into(), Err("forbidden".into())));
    let r = build(&g, now());
    assert!(r.healthy, "{}", r.verdict);
    assert!(r.native_lease.is_none());
    assert!(r
        .unreadable
        .iter()
        .any(|u| u.contains("passmower-operators") && u.contains("forbidden")));
}
