//! Whole pods with `--leader-standby` against the real kube-apiserver: the real elector, the real
//! supervisor, the recording app as a Node.js module. The Lease goes back and forth between two pods, each
//! promotion giving a waiting standby the go; what the apps recorded must show one app in leader
//! mode at a time, and no standby that ran app code before its go.

use std::collections::BTreeSet;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::product::ElectorNamespaces;
use pme_testkit::pods::{assert_leader_runs_disjoint, wait_for_leading_pod, Pod, PodSpec};
use pme_testkit::recording_app::Program;
use pme_testkit::wait::POLL;
use pme_testkit::{wait_until, Cluster, TestNs};

const HANDOVERS: usize = 4;

fn standby_pod(name: &str, ns: &TestNs) -> Pod {
    Pod::start_spec(
        name,
        ns,
        PodSpec {
            program: Program::Node,
            supervisor_flags: [
                "--on-change=leader-instance",
                "--leader-port-map=*=0",
                "--leader-standby",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            ..PodSpec::default()
        },
    )
}

/// Waits (bounded) until `pod`'s supervisor has a standby waiting.
fn wait_standby(pod: &Pod) -> i32 {
    let mut pid = None;
    let ok = wait_until(Duration::from_secs(30), POLL, || {
        let m = pod.mode();
        pid = (m["standby"]["ready"] == true)
            .then(|| m["standby"]["pid"].as_i64())
            .flatten();
        pid.is_some()
    });
    assert!(ok, "{}: no standby waits: {}", pod.name, pod.mode());
    pid.unwrap_or_default() as i32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handovers_between_pods_with_standbys_never_run_two_leader_apps() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let mut pods = vec![standby_pod("pod-a", &ns), standby_pod("pod-b", &ns)];
    let mut leader = wait_for_leading_pod(&pods, Duration::from_secs(30), None);
    for round in 1..=HANDOVERS {
        let other = 1 - leader;
        let standby = wait_standby(&pods[other]);
        // A graceful handover, as at a rollout: the leader's elector demotes, waits for the
        // ack, releases; the other pod's elector takes the Lease and its supervisor gives the
        // standby the go.
        pods[leader].elector().signal(Signal::SIGTERM);
        let next = wait_for_leading_pod(&pods, Duration::from_secs(30), Some(leader));
        assert_eq!(next, other);
        let app = pods[next].leading_app().expect("the new leader's app");
        assert_eq!(
            app.pid, standby,
            "round {round}: the promotion did not go to the waiting standby"
        );
        let status = pods[leader]
            .elector()
            .wait_exit(Duration::from_secs(20))
            .expect("the old leader's elector exits");
        assert!(status.success(), "{status:?}");
        // The old pod's elector comes back (as the kubelet restarts a container) and follows.
        pods[leader].kill_elector();
        pods[leader].restart_elector(&[]);
        assert_leader_runs_disjoint(&pods);
        eprintln!(
            "round {round}: {} → {} via standby {standby}",
            pods[leader].name, pods[next].name
        );
        leader = next;
    }
    assert_leader_runs_disjoint(&pods);
    for pod in &pods {
        let runs = pod.runs();
        // A standby runs no app code before its go: a process that recorded a leader start
        // never recorded a follower one (it would, with the follower environment, had its app
        // code run early).
        let followers: BTreeSet<i32> = runs
            .iter()
            .filter(|r| r.role == "follower")
            .map(|r| r.pid)
            .collect();
        for run in runs.iter().filter(|r| r.role == "leader") {
            assert!(
                !followers.contains(&run.pid),
                "{}: {} ran app code as a follower before leading",
                pod.name,
                run.pid
            );
        }
        // Only the serving instance ran as follower: one, never restarted.
        assert_eq!(followers.len(), 1, "{}: {runs:?}", pod.name);
        let m = pod.mode();
        assert_eq!(m["standby"]["missed"], 0, "{}: {m}", pod.name);
    }
    let used: u64 = pods
        .iter()
        .map(|p| p.mode()["standby"]["used"].as_u64().unwrap_or(0))
        .sum();
    assert!(used >= HANDOVERS as u64, "standbys used {used} times");
}
