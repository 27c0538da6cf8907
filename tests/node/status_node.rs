//! `passmower-elector status` on real pods: the real Passmower retrofitted by `inject` on the
//! one-node Kubernetes, three replicas. Status before, during and after the leader's pod is
//! deleted (a graceful handover: cause released, a short leaderless time, from the Events), and
//! through a rollout to an app image that cannot be pulled (the new pod's app never starts: it
//! does not contend and says why, the container's waiting reason beside it). Each screen is
//! printed, as a transcript.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use pme_testkit::node::passmower::{self, Install, APP_CONTAINER};
use pme_testkit::node::{report, Node};

/// `status ARGS` with the node's admin kubeconfig: exit code and stdout.
fn status(node: &Node, install: &Install, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_passmower-elector"))
        .arg("status")
        .args(["-n", &install.namespace, "--deployment", passmower::NAME])
        .args(args)
        .env_clear()
        .env("KUBECONFIG", node.admin_kubeconfig())
        .output()
        .expect("run status");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn status_json(node: &Node, install: &Install) -> (i32, Value) {
    let (code, out) = status(node, install, &["-o", "json"]);
    let report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    (code, report)
}

/// Polls `status -o json` until `cond` holds (bounded); the last report.
fn status_until(
    node: &Node,
    install: &Install,
    limit: Duration,
    what: &str,
    mut cond: impl FnMut(i32, &Value) -> bool,
) -> (i32, Value) {
    let deadline = Instant::now() + limit;
    loop {
        let (code, report) = status_json(node, install);
        if cond(code, &report) {
            return (code, report);
        }
        assert!(
            Instant::now() < deadline,
            "status never showed {what} within {limit:?}; last:\n{report:#}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Prints the human screen for the transcript; returns its exit code.
fn transcript(node: &Node, install: &Install, when: &str) -> i32 {
    let (code, out) = status(node, install, &[]);
    report(&format!(
        "--- $ kubectl passmower-elector -n {} --deployment {}    # {when} (exit {code})\n{out}",
        install.namespace,
        passmower::NAME
    ));
    code
}

fn pods_in<'a>(report: &'a Value, state: &str) -> Vec<&'a Value> {
    report["pods"]
        .as_array()
        .map(|pods| pods.iter().filter(|p| p["state"] == state).collect())
        .unwrap_or_default()
}

fn kubectl(node: &Node, install: &Install, args: &[&str]) {
    let out = node
        .kubectl()
        .args(args)
        .args(["-n", &install.namespace])
        .output()
        .expect("run kubectl");
    assert!(out.status.success(), "kubectl {args:?}: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_through_a_deleted_leader_and_an_app_image_that_cannot_be_pulled() {
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    let install = Install::install(node, "passmower", 3, 1).await;
    if !install.election.ours_decides() {
        report("status on real pods: not run (Passmower's own election, no elector)");
        return;
    }
    install.wait_steady(node, Duration::from_secs(300)).await;
    let client = node.admin_client().await;
    let lease_duration = install.timings.lease_duration.as_secs_f64();

    // Steady: a working leader, two followers ready, every container running.
    let (_, before) = status_until(
        node,
        &install,
        Duration::from_secs(120),
        "a steady install",
        |code, r| code == 0 && pods_in(r, "follower-ready").len() == 2,
    );
    transcript(node, &install, "steady");
    let leader = install.leader_pod(&client).await.expect("a leader");
    let leader_name = leader.metadata.name.clone().expect("name");
    assert_eq!(before["lease"]["holder_pod"], leader_name.as_str());
    assert_eq!(before["lease"]["operators_running"], true);
    for pod in before["pods"].as_array().expect("pods") {
        assert_eq!(pod["phase"], "Running", "{pod:#}");
        for c in pod["containers"].as_array().expect("containers") {
            if c["role"] != "init" {
                assert_eq!(c["state"], "running", "{pod:#}");
            }
        }
    }
    assert_eq!(
        before["fence"]["policy"], "installed",
        "{:#}",
        before["fence"]
    );
    assert_eq!(before["fence"]["param"], "present");

    // The leader's pod deleted: screens while it goes, until another pod runs operators.
    kubectl(
        node,
        &install,
        &["delete", "pod", &leader_name, "--wait=false"],
    );
    let t0 = Instant::now();
    let mut screens = 0;
    let mut codes = Vec::new();
    let after = loop {
        let (code, r) = status_json(node, &install);
        codes.push(code);
        let moved = code == 0 && r["lease"]["holder_pod"] != leader_name.as_str();
        if screens < 2 && !moved {
            screens += 1;
            transcript(
                node,
                &install,
                &format!(
                    "{:.1}s after deleting the leader's pod",
                    t0.elapsed().as_secs_f64()
                ),
            );
        }
        if moved {
            break r;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no new leader: {r:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    transcript(node, &install, "after the handover");
    let new_leader = after["lease"]["holder_pod"]
        .as_str()
        .expect("holder")
        .to_owned();
    let handover = after["handovers"]
        .as_array()
        .and_then(|h| h.iter().find(|h| h["pod"] == new_leader.as_str()))
        .unwrap_or_else(|| panic!("no handover to {new_leader}: {after:#}"));
    assert_eq!(
        handover["cause"], "released",
        "a deleted pod's elector releases: {after:#}"
    );
    let leaderless = handover["leaderless_seconds"].as_f64().expect("leaderless");
    assert!(leaderless < lease_duration, "{leaderless}");
    assert!(
        after["events"]
            .as_array()
            .expect("events")
            .iter()
            .any(|e| { e["reason"] == "StoppedLeading" && e["pod"] == leader_name.as_str() }),
        "{after:#}"
    );
    report(&format!(
        "status on real pods: the deleted leader's pod handed over to {new_leader} (cause released, {leaderless:.3} s leaderless); exit codes while it went: {codes:?}"
    ));
    install.wait_steady(node, Duration::from_secs(300)).await;

    // A rollout to an app image that cannot be pulled: the new pod's app never starts.
    let deployment = format!("deployment/{}", passmower::NAME);
    kubectl(
        node,
        &install,
        &[
            "set",
            "image",
            &deployment,
            &format!("{APP_CONTAINER}=127.0.0.1:9/passmower-elector-test/unpullable:none"),
        ],
    );
    let (code, broken) = status_until(
        node,
        &install,
        Duration::from_secs(180),
        "the new pod not contending",
        |_, r| !pods_in(r, "not-contending").is_empty(),
    );
    transcript(
        node,
        &install,
        "a rollout to an app image that cannot be pulled",
    );
    assert_eq!(code, 0, "the old pods still lead: {broken:#}");
    let stuck = pods_in(&broken, "not-contending")[0];
    let detail = stuck["detail"].to_string();
    assert!(detail.contains("no connection to the toggle"), "{detail}");
    let waiting = stuck["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == APP_CONTAINER)
        .expect("the app container");
    assert_eq!(waiting["state"], "waiting", "{stuck:#}");
    report(&format!(
        "status on real pods: the pod whose app image cannot be pulled ({}) is not contending: {detail}",
        waiting["reason"]
    ));
    kubectl(node, &install, &["rollout", "undo", &deployment]);
    install.wait_steady(node, Duration::from_secs(300)).await;
}
