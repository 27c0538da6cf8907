//! What "one writer" means on the node, read from outside the pods: which Passmower process
//! runs with the real `NAMESPACE_SELECTOR` (from /proc), and whether any operator write in the
//! apiserver's audit log came from a pod that did not lead at that instant.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use super::audit::{self, now_us};
use super::passmower::{self, secret_name, ElectionMode, Install, APP_CONTAINER};
use super::{pods, report, Node};
use crate::supervise::environ_var;

/// The running Passmower processes (`node ... src/app.js`, not their `supervise` parent) in
/// `pod`, each with its `NAMESPACE_SELECTOR`. With `--on-change=leader-instance` (inject's
/// default for Passmower) the leader's pod runs two: the serving instance with the idle
/// selector and the leader instance with the real one; every other pod runs one.
///
/// With `--leader-standby` (inject's default) a pod that does not lead also has a standby, which
/// runs no Passmower code until its go: it is left out. A standby that got its go is the leader
/// instance, but its `/proc/PID/environ` still shows the follower environment it started with
/// (the go changes its environment in the process, which that file does not show), so its
/// selector is the leader's from the pod's own `supervise --leader-env`. A standby whose pipe is
/// closed but that holds no socket yet is left out too: it was either withdrawn (its supervisor
/// shuts down; it exits without running the app) or given the go and has not reached the API
/// server or Redis, so it can write nothing yet. Counting it made a rollout, which withdraws
/// the standbys of two old pods at once, read as two pods running operators.
pub fn app_processes(node: &Node, pod: &Pod) -> Vec<(i32, Option<String>)> {
    let Some(id) = pods::container_id(pod, APP_CONTAINER) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for pid in node.container_pids(&id) {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let argv: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if argv
            .first()
            .map(|a| a.rsplit(|b| *b == b'/').next() == Some(b"node"))
            != Some(true)
            || !argv.iter().any(|a| *a == b"src/app.js")
        {
            continue;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let var = |name: &str| environ_var(&environ, name).map(str::to_owned);
        let selector = match var(STANDBY_FD_VAR) {
            None => var("NAMESPACE_SELECTOR"),
            Some(fd) if standby_waits(pid, &fd) => continue,
            Some(_) if !holds_a_socket(pid) => continue,
            Some(_) => leader_selector(pod),
        };
        found.push((pid, selector));
    }
    found
}

/// The variable through which `supervise --leader-standby` tells a standby its pipe.
pub(crate) const STANDBY_FD_VAR: &str = "PASSMOWER_ELECTOR_STANDBY_FD";

/// Whether the standby `pid` still waits for its go: its descriptor `fd` is the pipe whose other
/// end its parent (the supervisor) still holds. The supervisor closes its end with the go, and
/// the standby its own once it has read it.
fn standby_waits(pid: i32, fd: &str) -> bool {
    let Ok(pipe) = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")) else {
        return false;
    };
    if !pipe.to_string_lossy().starts_with("pipe:") {
        return false;
    }
    let parent = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("PPid:"))
                .map(|p| p.trim().to_owned())
        });
    let Some(parent) = parent else {
        return false;
    };
    open_files(&parent).any(|l| l == pipe)
}

/// Whether process `pid` has a socket open: the app's first connection (to the API server or
/// Redis) is its first; a standby that waits or was withdrawn has none.
fn holds_a_socket(pid: i32) -> bool {
    open_files(&pid.to_string()).any(|l| l.to_string_lossy().starts_with("socket:"))
}

/// What each open descriptor of process `pid` points at (`/proc/PID/fd/*`); nothing for a
/// process that is gone.
fn open_files(pid: &str) -> impl Iterator<Item = std::path::PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
}

/// The leader's `NAMESPACE_SELECTOR` as the pod's `supervise` gives it (`--leader-env=…`).
fn leader_selector(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == APP_CONTAINER)?
        .args
        .as_ref()?
        .iter()
        .find_map(|a| a.strip_prefix("--leader-env=NAMESPACE_SELECTOR="))
        .map(str::to_owned)
}

/// Whether the install runs Passmower with a separate leader instance (inject's default; the
/// webhook shares inject's rewrite, so a webhook install's pods say so in their spec).
pub fn leader_instance_mode(install: &Install) -> bool {
    install.manifest.contains("--on-change=leader-instance")
}

/// Asserts the whole audit log so far: no two pods' leadership overlaps, and every operator
/// write by Passmower's ServiceAccount came from the pod that led at that instant.
pub fn assert_single_writer(node: &Node, install: &Install) -> Vec<audit::Tenure> {
    let writes = audit::read(&node.audit_log());
    let tenures = audit::tenures(
        &writes,
        &install.namespace,
        passmower::NAME,
        install.bound_us(),
        now_us(),
    );
    let bad = audit::single_writer_violations(&writes, &tenures, &install.user());
    assert!(
        bad.is_empty(),
        "single-writer violations:\n{}\ntenures: {tenures:#?}",
        bad.join("\n")
    );
    tenures
}

/// Asserts that one replica operates and the others only serve: exactly one Passmower process
/// runs with the real `NAMESPACE_SELECTOR`, in the Lease holder's pod; an OIDCClient
/// `client_name` created now is reconciled, every operator write for it coming from that pod;
/// and the whole audit log so far has a single writer. Reports what it saw.
pub async fn assert_one_operator(node: &Node, install: &Install, client_name: &str) {
    let client = node.admin_client().await;
    let leader = install.leader_pod(&client).await.expect("a leader pod");
    let leader_name = leader.metadata.name.clone().unwrap_or_default();
    let real = Some(install.namespace.clone());
    // With the lease bridge the one process per pod gets the real selector inside itself, never
    // in its /proc environment: every pod must show one process with the idle selector; who
    // operates is then what the audit log shows below (the leader's pod alone writes).
    let bridge = install.election == ElectionMode::OursBridge;
    let mut selectors: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    let mut specs = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let ok = loop {
        selectors.clear();
        specs.clear();
        for p in install.pods(&client).await {
            specs.push_str(&serde_json::to_string(&p.spec).unwrap_or_default());
            selectors.insert(
                p.metadata.name.clone().unwrap_or_default(),
                app_processes(node, &p)
                    .into_iter()
                    .map(|(_, s)| s)
                    .collect(),
            );
        }
        let leaders = selectors.values().flatten().filter(|s| **s == real).count();
        if bridge
            && leaders == 0
            && selectors
                .values()
                .all(|v| v.len() == 1 && v.iter().all(Option::is_some))
        {
            break true;
        }
        if !bridge
            && leaders == 1
            && selectors
                .values()
                .all(|v| !v.is_empty() && v.iter().all(Option::is_some))
        {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        ok,
        "want {} NAMESPACE_SELECTOR={} in a process's environment: {selectors:?}",
        if bridge {
            "one Passmower process per pod, none with"
        } else {
            "exactly one Passmower process with"
        },
        install.namespace
    );
    assert!(
        bridge
            || selectors
                .get(&leader_name)
                .is_some_and(|v| v.contains(&real)),
        "the real selector is not in the Lease holder's pod {leader_name}: {selectors:?}"
    );
    // The pods' own spec tells the mode: a post-renderer install's manifest says it too, a
    // webhook install's manifest never does (the webhook rewrites the pods, not the chart).
    if leader_instance_mode(install) || specs.contains("--on-change=leader-instance") {
        // Every pod serves with the idle selector, the leader's pod included: its operators run
        // in a second instance beside the serving one.
        for (pod, found) in &selectors {
            assert_eq!(
                found.iter().filter(|s| **s != real).count(),
                1,
                "pod {pod} does not run exactly one serving instance: {found:?}"
            );
        }
    }
    report(&format!("selectors: {selectors:?} (leader {leader_name})"));

    // An OIDCClient created through the API is reconciled, by the leader pod only.
    let t0 = Instant::now();
    install.create_client(&client, client_name).await;
    let reconciled =
        crate::wait_until_async(Duration::from_secs(60), Duration::from_millis(100), || {
            install.client_reconciled(&client, client_name)
        })
        .await;
    assert!(reconciled, "OIDCClient {client_name} not reconciled in 60s");
    report(&format!(
        "OIDCClient {client_name} reconciled {:.0} ms after its creation",
        t0.elapsed().as_secs_f64() * 1000.0
    ));
    // Let late writes (e.g. a second status patch) reach the log before reading it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes = audit::read(&node.audit_log());
    let leader_ip = pods::pod_ip(&leader).expect("leader IP");
    let secret = secret_name(client_name);
    let touching: Vec<&audit::Write> = writes
        .iter()
        .filter(|w| w.user == install.user() && w.is_operator_write() && w.succeeded())
        .filter(|w| {
            (w.resource == "oidcclients" && w.name == client_name)
                || (w.resource == "secrets" && w.name == secret)
        })
        .collect();
    assert!(
        !touching.is_empty(),
        "no operator write for OIDCClient {client_name} in the audit log"
    );
    for w in &touching {
        assert_eq!(
            w.source_ip, leader_ip,
            "OIDCClient {client_name} was written by {} (not the leader {leader_name} at {leader_ip}): {w:?}",
            w.source_ip
        );
    }
    let secret_creates = touching
        .iter()
        .filter(|w| w.resource == "secrets" && w.verb == "create")
        .count();
    assert_eq!(
        secret_creates, 1,
        "the client's Secret was created {secret_creates} times"
    );
    report(&format!(
        "OIDCClient {client_name}: {} operator writes, all from the leader {leader_name} ({leader_ip}): {:?}",
        touching.len(),
        touching
            .iter()
            .map(|w| format!("{} {}{}", w.verb, w.resource, if w.subresource.is_empty() { String::new() } else { format!("/{}", w.subresource) }))
            .collect::<Vec<_>>()
    ));
    assert_single_writer(node, install);
}
