//! The pods' part of the report: each pod's phase, readiness and containers, and whether it is
//! the one the Lease names (by name and, when the holder identity carries it, by UID).

use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};

use super::{event_view, ContainerView, LeaseView, PodView};
use crate::election::identity::HolderIdentity;
use crate::status::gather::pod_of_identity;
use crate::wire::{ELECTOR_CONTAINER, INSTALL_CONTAINER};

/// Container waiting reasons that are part of every start, not a problem.
const STARTING_REASONS: [&str; 2] = ["ContainerCreating", "PodInitializing"];

/// The identity's pod incarnation: its name, and its UID when the identity carries one.
fn identity_pod(identity: &str) -> (String, Option<String>) {
    match HolderIdentity::parse(identity) {
        Some(p) => (p.pod_name.to_owned(), Some(p.pod_uid.to_owned())),
        None => (pod_of_identity(identity), None),
    }
}

/// Whether the elector identity `identity` is of pod `name` (`uid`): a pod of the same name
/// but another UID (a recreated one) is another pod.
fn of_pod(identity: &str, name: &str, uid: Option<&str>) -> bool {
    let (pod, pod_uid) = identity_pod(identity);
    pod == name && (pod_uid.is_none() || uid.is_none() || pod_uid.as_deref() == uid)
}

pub(super) fn pod_view(p: &Pod, lease: &LeaseView, events: &[Event]) -> PodView {
    let name = p.metadata.name.clone().unwrap_or_default();
    let uid = p.metadata.uid.clone();
    let deleting = p.metadata.deletion_timestamp.is_some();
    let status = p.status.clone().unwrap_or_default();
    let containers: Vec<ContainerView> = status
        .init_container_statuses
        .iter()
        .flatten()
        .map(|c| container_view(c, true))
        .chain(
            status
                .container_statuses
                .iter()
                .flatten()
                .map(|c| container_view(c, false)),
        )
        .collect();
    let mine: Vec<&Event> = events
        .iter()
        .filter(|e| {
            e.reporting_instance
                .as_deref()
                .is_some_and(|i| of_pod(i, &name, uid.as_deref()))
        })
        .collect();
    let last_event = mine.last().map(|e| event_view(e));
    // The elector's last word on whether it contends.
    let contention = mine
        .iter()
        .rev()
        .find(|e| matches!(e.reason.as_deref(), Some("NotContending" | "FollowerReady")));
    let problems: Vec<String> = containers
        .iter()
        .filter(|c| c.role != "init" || c.state == "waiting")
        .filter_map(|c| match (c.state.as_str(), &c.reason) {
            ("waiting", Some(r)) if !STARTING_REASONS.contains(&r.as_str()) => Some(format!(
                "container {} is waiting: {r}{}",
                c.name,
                c.message
                    .as_deref()
                    .map(|m| format!(" ({})", shorten(m)))
                    .unwrap_or_default()
            )),
            ("terminated", reason) if c.role != "init" => Some(format!(
                "container {} has terminated{}",
                c.name,
                reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            )),
            _ => None,
        })
        .collect();
    let is_holder = lease
        .holder
        .as_deref()
        .is_some_and(|h| of_pod(h, &name, uid.as_deref()));
    let started = containers
        .iter()
        .filter(|c| c.role != "init")
        .all(|c| c.state == "running")
        && !containers.is_empty();
    let mut detail = Vec::new();
    let state = if is_holder {
        detail.push(match (lease.renew_fresh, lease.operators_running) {
            (true, Some(true)) => "holds the Lease and runs operators".to_owned(),
            (false, _) => {
                "holds the Lease but has not renewed it for the lease duration".to_owned()
            }
            (true, _) => format!(
                "holds the Lease, operators not running: {}",
                lease.consumer_reason.as_deref().unwrap_or("no report")
            ),
        });
        "leader"
    } else if deleting {
        detail.push("the pod is being deleted: it does not take the Lease".to_owned());
        "terminating"
    } else if let Some(e) = contention.filter(|e| e.reason.as_deref() == Some("NotContending")) {
        detail.push(e.message.clone().unwrap_or_default());
        "not-contending"
    } else if !problems.is_empty() {
        "failing"
    } else if contention.is_some() {
        detail.push(
            contention
                .and_then(|e| e.message.clone())
                .unwrap_or_default(),
        );
        "follower-ready"
    } else if !started {
        detail.push("containers are starting".to_owned());
        "starting"
    } else {
        detail.push(
            "no word from its elector in the Events kept (they expire after an hour)".to_owned(),
        );
        "follower"
    };
    detail.extend(problems);
    PodView {
        name,
        uid,
        phase: status.phase,
        state: state.to_owned(),
        detail,
        deleting,
        containers,
        last_event,
    }
}

fn container_view(c: &ContainerStatus, init: bool) -> ContainerView {
    let role = if c.name == ELECTOR_CONTAINER {
        "elector"
    } else if init || c.name == INSTALL_CONTAINER {
        "init"
    } else {
        "app"
    };
    let state = c.state.clone().unwrap_or_default();
    let (name, reason, message) = if state.running.is_some() {
        ("running", None, None)
    } else if let Some(w) = state.waiting {
        ("waiting", w.reason, w.message)
    } else if let Some(t) = state.terminated {
        (
            "terminated",
            t.reason.or(Some(format!("exit code {}", t.exit_code))),
            t.message,
        )
    } else {
        ("unknown", None, None)
    };
    ContainerView {
        name: c.name.clone(),
        role: role.to_owned(),
        ready: c.ready,
        state: name.to_owned(),
        reason,
        message,
        restarts: c.restart_count,
    }
}

fn shorten(text: &str) -> String {
    const MAX: usize = 160;
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > MAX {
        let cut: String = line.chars().take(MAX).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}
