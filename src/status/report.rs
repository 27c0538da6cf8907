//! The judgement of `status`: what was read, and the time, in; the report out — which pod holds
//! the Lease and whether its operators run, every other pod's state, the last handovers, the
//! fence — and from it the exit code. Pure, so its rules are tested on objects built in memory.
//!
//! Whether operators run is the holder's own word (its signed consumer view, written into the
//! Lease with each renewal, see [`crate::election::report`]), and that word is only as good as
//! its freshness: a report on a Lease nobody renewed for the lease duration does not count.
//! `renewTime` is compared with this machine's clock, which the election itself never does; a
//! clock more than a few seconds off shows as a stale (or fresh) renewal here and nowhere else.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::gather::{elector_lease_name, event_time, pod_of_identity, Gathered};
use crate::election::report as holder_report;
use crate::wire::GENERATED_FOR_ANNOTATION;
use crate::wire::{CAUSE_ANNOTATION, EPOCH_ANNOTATION, LEADERLESS_ANNOTATION};
use crate::wire::{NATIVE_LEASE_DEFAULT_DURATION, NATIVE_LEASE_MAX_DURATION};
use pods::pod_view;

/// Handovers shown (newest first).
pub const HANDOVERS_SHOWN: usize = 5;
/// Events shown (newest first).
pub const EVENTS_SHOWN: usize = 10;

/// What `status` reports; the field names are stable (`-o json`).
#[derive(Debug, Serialize)]
pub struct Report {
    pub namespace: String,
    /// A working leader: a holder whose fresh report says its operators run.
    pub healthy: bool,
    /// The verdict in one sentence.
    pub verdict: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentView>,
    pub lease: LeaseView,
    pub pods: Vec<PodView>,
    /// The last terms begun (`BecameLeader`, `Adopted` Events), newest first.
    pub handovers: Vec<HandoverView>,
    /// The electors' last Events, newest first.
    pub events: Vec<EventView>,
    pub fence: FenceView,
    /// Passmower's own Lease, when the electors hold it beside theirs (`elect --native-lease`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native_lease: Option<NativeLeaseView>,
    /// Parts that could not be read, in words.
    pub unreadable: Vec<String>,
    /// The Lease could not be read: nothing can be told (exit 3).
    #[serde(skip)]
    unknown: bool,
}

#[derive(Debug, Serialize)]
pub struct DeploymentView {
    pub name: String,
    pub found: bool,
    pub replicas: Option<i32>,
    pub ready_replicas: Option<i32>,
}

#[derive(Debug, Default, Serialize)]
pub struct LeaseView {
    pub name: String,
    /// Where the name came from (`--lease`, the elector's arguments, the Deployment's name).
    pub name_from: String,
    pub exists: bool,
    /// The holder identity; `None` when released (or absent).
    pub holder: Option<String>,
    /// The pod the holder identity names.
    pub holder_pod: Option<String>,
    /// `leaseTransitions`: the term's epoch, the fencing token.
    pub epoch: Option<u64>,
    pub acquire_time: Option<String>,
    pub renew_time: Option<String>,
    /// How long ago `renewTime` was, on this machine's clock.
    pub renewed_seconds_ago: Option<f64>,
    pub lease_duration_seconds: Option<i64>,
    /// Renewed within the lease duration: the holder's report is current.
    pub renew_fresh: bool,
    /// The holder's report (annotations), as written with its last renewal.
    pub operators_running: Option<bool>,
    pub consumer: Option<String>,
    pub consumer_reason: Option<String>,
    pub acquired_cause: Option<String>,
    pub leaderless_seconds: Option<f64>,
}

/// Passmower's own Lease (2.4 and later), which the electors hold beside theirs while two
/// elections may meet in one install: a fresh holder that is not the electors' leader is
/// Passmower's own election, and no elector contends until that Lease is released or goes
/// unrenewed for its duration.
#[derive(Debug, Default, Serialize)]
pub struct NativeLeaseView {
    pub name: String,
    pub exists: bool,
    pub holder: Option<String>,
    pub renewed_seconds_ago: Option<f64>,
    pub lease_duration_seconds: Option<i64>,
    /// Held and renewed within its duration.
    pub fresh: bool,
    /// Held under the pod name of the electors' leader: ours, as it should be.
    pub held_by_leader: bool,
    /// Held by a pod that runs our elector (the leader, or a pod about to lead): not
    /// Passmower's own election.
    pub held_by_elector: bool,
}

#[derive(Debug, Serialize)]
pub struct PodView {
    pub name: String,
    pub uid: Option<String>,
    pub phase: Option<String>,
    /// `leader`, `follower-ready`, `follower`, `not-contending`, `failing`, `starting`,
    /// `terminating`, or `missing` (named by the Lease or its Events, but not found).
    pub state: String,
    /// Why, in words: the elector's last word on contending, container problems.
    pub detail: Vec<String>,
    pub deleting: bool,
    pub containers: Vec<ContainerView>,
    /// The pod's elector's last Event on the Lease.
    pub last_event: Option<EventView>,
}

#[derive(Debug, Serialize)]
pub struct ContainerView {
    pub name: String,
    /// `elector`, `app`, or `init`.
    pub role: String,
    pub ready: bool,
    /// `running`, `waiting`, `terminated` or `unknown`.
    pub state: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub restarts: i32,
}

#[derive(Debug, Clone, Serialize)]
pub struct HandoverView {
    pub time: Option<String>,
    pub pod: Option<String>,
    pub identity: Option<String>,
    pub epoch: Option<u64>,
    /// `released`, `expired`, `adopted` or `created`.
    pub cause: Option<String>,
    pub leaderless_seconds: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EventView {
    pub time: Option<String>,
    pub reason: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub pod: Option<String>,
    pub message: String,
}

#[derive(Debug, Serialize)]
pub struct FenceView {
    /// The policy's (and binding's) name: `passmower-elector-fence.NAMESPACE.SERVICEACCOUNT`.
    pub name: String,
    pub service_account: String,
    /// `installed`, `missing`, or `not visible: why`.
    pub policy: String,
    pub binding: String,
    /// `present` (the binding's parameter is this Lease, which exists), `missing`, `other
    /// Lease NAME`, or `unknown`.
    pub param: String,
    /// Refusals the answering apiserver counted since it started; `None` when not visible.
    pub refusals: Option<u64>,
    pub refusals_note: String,
}

impl Report {
    /// 0: a working leader; 1: none; 3: the Lease could not be read.
    pub fn exit_code(&self) -> u8 {
        if self.unknown {
            super::UNKNOWN_EXIT_CODE
        } else if self.healthy {
            0
        } else {
            1
        }
    }
}

fn seconds_between(earlier: Timestamp, later: Timestamp) -> f64 {
    (later.as_millisecond() - earlier.as_millisecond()) as f64 / 1000.0
}

/// Builds the report from what was read, at `now`.
pub fn build(g: &Gathered, now: Timestamp) -> Report {
    let mut unreadable = Vec::new();
    let deployment = g.deployment.as_ref().map(|(name, read)| {
        let found = read.as_ref().ok().and_then(Option::as_ref);
        if let Err(e) = read {
            unreadable.push(format!("Deployment {name}: {e}"));
        }
        deployment_view(name, found)
    });
    let (lease, unknown) = match &g.lease {
        Ok(Some(l)) => (lease_view(g, l, now), false),
        Ok(None) => (
            LeaseView {
                name: g.lease_name.clone(),
                name_from: g.lease_name_from.to_owned(),
                ..LeaseView::default()
            },
            false,
        ),
        Err(e) => {
            unreadable.push(format!("Lease {}: {e}", g.lease_name));
            (
                LeaseView {
                    name: g.lease_name.clone(),
                    name_from: g.lease_name_from.to_owned(),
                    ..LeaseView::default()
                },
                true,
            )
        }
    };
    let events: &[Event] = match &g.events {
        Ok(events) => events,
        Err(e) => {
            unreadable.push(format!("Events on the Lease: {e}"));
            &[]
        }
    };
    let pods = match &g.pods {
        Ok(pods) => pods.iter().map(|p| pod_view(p, &lease, events)).collect(),
        Err(e) => {
            unreadable.push(format!("pods: {e}"));
            Vec::new()
        }
    };
    let (mut healthy, mut verdict) = verdict(&lease, unknown, deployment.as_ref());
    let handovers = events
        .iter()
        .rev()
        .filter(|e| matches!(e.reason.as_deref(), Some("BecameLeader" | "Adopted")))
        .take(HANDOVERS_SHOWN)
        .map(handover_view)
        .collect();
    let recent = events
        .iter()
        .rev()
        .take(EVENTS_SHOWN)
        .map(event_view)
        .collect();
    let fence = fence_view(g, &lease);
    if let Some(why) = fence_on_another_lease(g, &fence, &lease).filter(|_| healthy) {
        healthy = false;
        verdict = why;
    }
    let native_lease = g.native.as_ref().and_then(|(name, read)| match read {
        Ok(found) => Some(native_lease_view(
            name,
            found.as_ref(),
            &lease,
            g.pods.as_deref().unwrap_or_default(),
            now,
        )),
        Err(e) => {
            unreadable.push(format!("Lease {name} (Passmower's own election): {e}"));
            None
        }
    });
    if let Some(why) = native_lease
        .as_ref()
        .filter(|_| !unknown)
        .and_then(|n| native_lease_verdict(n, &lease))
    {
        healthy = false;
        verdict = why;
    }
    Report {
        namespace: g.namespace.clone(),
        healthy,
        verdict,
        deployment,
        lease,
        pods,
        handovers,
        events: recent,
        fence,
        native_lease,
        unreadable,
        unknown,
    }
}

fn native_lease_view(
    name: &str,
    l: Option<&k8s_openapi::api::coordination::v1::Lease>,
    ours: &LeaseView,
    pods: &[Pod],
    now: Timestamp,
) -> NativeLeaseView {
    let Some(spec) = l.map(|l| l.spec.clone().unwrap_or_default()) else {
        return NativeLeaseView {
            name: name.to_owned(),
            ..NativeLeaseView::default()
        };
    };
    let holder = spec.holder_identity.filter(|h| !h.is_empty());
    let renewed_ago = spec.renew_time.map(|t| seconds_between(t.0, now));
    // Judged as the electors judge it: upstream's default when it declares none, capped.
    let duration = spec
        .lease_duration_seconds
        .map_or(NATIVE_LEASE_DEFAULT_DURATION.as_secs() as i64, i64::from)
        .clamp(0, NATIVE_LEASE_MAX_DURATION.as_secs() as i64);
    let fresh = holder.is_some() && renewed_ago.is_some_and(|ago| ago <= duration as f64);
    // Our electors write upstream's Lease under their pod name, the identity upstream's
    // election uses: the leader while it leads, a pod about to lead for a moment.
    let held_by_leader =
        ours.renew_fresh && holder.is_some() && holder.as_deref() == ours.holder_pod.as_deref();
    let held_by_elector = holder.as_deref().is_some_and(|h| {
        pods.iter().any(|p| {
            p.metadata.name.as_deref() == Some(h)
                && p.spec
                    .as_ref()
                    .is_some_and(|s| elector_lease_name(s).is_some())
        })
    });
    NativeLeaseView {
        name: name.to_owned(),
        exists: true,
        holder,
        renewed_seconds_ago: renewed_ago,
        lease_duration_seconds: Some(duration),
        fresh,
        held_by_leader,
        held_by_elector: held_by_leader || held_by_elector,
    }
}

/// What Passmower's own Lease changes in the verdict: a fresh holder there that is not our
/// leader is Passmower's own election running operators, which the electors wait for (no
/// leader of ours) or which meets our leader (who steps down at its next renewal).
fn native_lease_verdict(n: &NativeLeaseView, ours: &LeaseView) -> Option<String> {
    if !n.fresh || n.held_by_elector {
        return None;
    }
    let holder = n.holder.as_deref().unwrap_or("?");
    let renewed = n
        .renewed_seconds_ago
        .map_or_else(|| "?".to_owned(), |s| format!("{s:.1}s ago"));
    let duration = n.lease_duration_seconds.unwrap_or(0);
    if ours.renew_fresh && ours.holder.is_some() {
        let pod = ours.holder_pod.as_deref().unwrap_or("?");
        return Some(format!(
            "two elections: {pod} holds the Lease {}, but Passmower's own election holds its \
             Lease {} ({holder}, renewed {renewed}); {pod} steps down when it next renews",
            ours.name, n.name
        ));
    }
    Some(format!(
        "no leader of ours: Passmower's own election holds its Lease {} ({holder}, renewed \
         {renewed}, lease duration {duration}s), so no elector contends; one takes over once \
         that Lease is released or goes unrenewed for {duration}s",
        n.name
    ))
}

fn deployment_view(name: &str, d: Option<&Deployment>) -> DeploymentView {
    DeploymentView {
        name: name.to_owned(),
        found: d.is_some(),
        replicas: d.and_then(|d| d.spec.as_ref()?.replicas),
        ready_replicas: d.and_then(|d| d.status.as_ref()?.ready_replicas),
    }
}

fn lease_view(
    g: &Gathered,
    l: &k8s_openapi::api::coordination::v1::Lease,
    now: Timestamp,
) -> LeaseView {
    let spec = l.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.filter(|h| !h.is_empty());
    let renew = spec.renew_time.as_ref().map(|t| t.0);
    let renewed_ago = renew.map(|t| seconds_between(t, now));
    let duration = spec.lease_duration_seconds.map(i64::from);
    let renew_fresh = match (renewed_ago, duration) {
        (Some(ago), Some(d)) => ago <= d as f64,
        _ => false,
    };
    let report = holder_report::read(l);
    LeaseView {
        name: g.lease_name.clone(),
        name_from: g.lease_name_from.to_owned(),
        exists: true,
        holder_pod: holder.as_deref().map(pod_of_identity),
        holder,
        epoch: spec.lease_transitions.map(|t| t.max(0) as u64),
        acquire_time: spec.acquire_time.map(|t| t.0.to_string()),
        renew_time: renew.map(|t| t.to_string()),
        renewed_seconds_ago: renewed_ago,
        lease_duration_seconds: duration,
        renew_fresh,
        operators_running: report.operators_running,
        consumer: report.consumer,
        consumer_reason: report.consumer_reason,
        acquired_cause: report.acquired_cause,
        leaderless_seconds: report.leaderless.map(|d| d.as_secs_f64()),
    }
}

/// Healthy, and the verdict in words.
fn verdict(
    lease: &LeaseView,
    unknown: bool,
    deployment: Option<&DeploymentView>,
) -> (bool, String) {
    if unknown {
        return (
            false,
            format!("cannot tell: the Lease {} could not be read", lease.name),
        );
    }
    if let Some(d) = deployment.filter(|d| !d.found) {
        if !lease.exists {
            return (
                false,
                format!("no Deployment {} and no Lease {}", d.name, lease.name),
            );
        }
    }
    if !lease.exists {
        return (
            false,
            format!(
                "no leader: the Lease {} does not exist (a first leader takes it one lease \
                 duration after the electors start)",
                lease.name
            ),
        );
    }
    let Some(holder) = &lease.holder else {
        return (false, "no leader: the Lease is released".to_owned());
    };
    let pod = lease.holder_pod.as_deref().unwrap_or(holder);
    let epoch = lease.epoch.unwrap_or(0);
    if !lease.renew_fresh {
        let ago = lease
            .renewed_seconds_ago
            .map_or_else(|| "never".to_owned(), |s| format!("{s:.1}s ago"));
        return (
            false,
            format!(
                "no working leader: {pod} holds the Lease (epoch {epoch}) but last renewed it \
                 {ago}, longer than its lease duration of {}s: another pod takes over once it \
                 has waited that long",
                lease.lease_duration_seconds.unwrap_or(0)
            ),
        );
    }
    match lease.operators_running {
        Some(true) => (
            true,
            format!("a working leader: {pod} runs operators (epoch {epoch})"),
        ),
        Some(false) => {
            (
                false,
                format!(
                "no working leader: {pod} holds the Lease (epoch {epoch}) but its operators are \
                 not running ({}: {})",
                lease.consumer.as_deref().unwrap_or("unknown"),
                lease.consumer_reason.as_deref().unwrap_or("no reason given")
            ),
            )
        }
        None => (
            false,
            format!(
                "cannot tell whether operators run: {pod} holds the Lease (epoch {epoch}) but \
                 its elector writes no report (an elector older than this status command?)"
            ),
        ),
    }
}

fn annotation<'a>(e: &'a Event, key: &str) -> Option<&'a str> {
    e.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn handover_view(e: &Event) -> HandoverView {
    HandoverView {
        time: event_time(e).map(|t| t.to_string()),
        pod: e.reporting_instance.as_deref().map(pod_of_identity),
        identity: e.reporting_instance.clone(),
        epoch: annotation(e, EPOCH_ANNOTATION).and_then(|v| v.parse().ok()),
        cause: annotation(e, CAUSE_ANNOTATION).map(str::to_owned),
        leaderless_seconds: annotation(e, LEADERLESS_ANNOTATION)
            .and_then(|v| v.parse::<u64>().ok())
            .map(|ms| ms as f64 / 1000.0),
    }
}

fn event_view(e: &Event) -> EventView {
    EventView {
        time: event_time(e).map(|t| t.to_string()),
        reason: e.reason.clone().unwrap_or_default(),
        kind: e.type_.clone().unwrap_or_else(|| "Normal".to_owned()),
        pod: e.reporting_instance.as_deref().map(pod_of_identity),
        message: e.message.clone().unwrap_or_default(),
    }
}

/// Why the leader cannot work when the fence of its ServiceAccount binds another Lease: the
/// apiserver refuses every operator write of this Lease's holder. It happens when a second
/// install running as the same ServiceAccount re-pointed the one fence (it is named by the
/// ServiceAccount), so the verdict names whom the binding was generated for.
fn fence_on_another_lease(g: &Gathered, fence: &FenceView, lease: &LeaseView) -> Option<String> {
    let other = fence.param.strip_prefix("other Lease ")?;
    let made_for = match &g.fence.binding {
        Ok(Some(b)) => b
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(GENERATED_FOR_ANNOTATION))
            .map(|w| format!(" (generated for {w})")),
        _ => None,
    }
    .unwrap_or_default();
    Some(format!(
        "no working leader: the write fence {name}{made_for} binds Lease {other}, not {ours}, so \
         the apiserver refuses every operator write of {ours}'s holder; another install runs as \
         ServiceAccount {sa}: give each install its own ServiceAccount and apply this one again",
        name = fence.name,
        ours = lease.name,
        sa = fence.service_account,
    ))
}

fn fence_view(g: &Gathered, lease: &LeaseView) -> FenceView {
    let f = &g.fence;
    let state = |read: Result<bool, &String>| match read {
        Ok(true) => "installed".to_owned(),
        Ok(false) => "missing".to_owned(),
        Err(e) => format!("not visible: {e}"),
    };
    let policy = state(f.policy.as_ref().map(Option::is_some));
    let binding = state(f.binding.as_ref().map(Option::is_some));
    let param = match &f.binding {
        Ok(Some(b)) => {
            let named = b
                .spec
                .as_ref()
                .and_then(|s| s.param_ref.as_ref())
                .and_then(|p| p.name.clone());
            match named {
                Some(n) if n == lease.name && lease.exists => "present".to_owned(),
                Some(n) if n == lease.name => "missing".to_owned(),
                Some(n) => format!("other Lease {n}"),
                None => "unknown".to_owned(),
            }
        }
        _ => "unknown".to_owned(),
    };
    let (refusals, refusals_note) = match &f.refusals {
        Ok(n) => (
            Some(*n),
            "denials counted by the apiserver that answered, since it started".to_owned(),
        ),
        Err(e) => (None, format!("not visible (the apiserver's /metrics: {e})")),
    };
    FenceView {
        name: f.name.clone(),
        service_account: f.service_account.clone(),
        policy,
        binding,
        param,
        refusals,
        refusals_note,
    }
}

mod pods;
#[cfg(test)]
mod tests;
