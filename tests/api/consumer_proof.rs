//! A pod contends for the Lease only while its app's supervisor answers, signed, and a leader
//! whose app container is gone steps down: real electors and supervisors against the real
//! kube-apiserver. Without this, an elector whose app never started (an image that cannot be
//! pulled) or was OOM-killed as a whole took and kept the Lease while nothing reconciled.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use crate::product::ElectorNamespaces;
use pme_testkit::pods::{wait_for_leading_pod, Pod, PodSpec};
use pme_testkit::probe::{probe_body, sample};
use pme_testkit::wait::POLL;
use pme_testkit::{free_port, wait_until, Cluster, ElectorProcess, TestNs, FAST_TIMINGS};

/// FAST_TIMINGS' lease duration: a free Lease is taken at once by a pod that contends, so two
/// of these without a taker show that nobody contends.
const LEASE_DURATION: Duration = Duration::from_secs(4);

async fn holder(ns: &TestNs) -> String {
    let client = Cluster::shared().admin_client().await;
    Api::<Lease>::namespaced(client, &ns.name)
        .get(&ns.lease_name)
        .await
        .expect("read the Lease")
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default()
}

/// An elector whose toggle nobody answers (the app container never started) says so on its
/// probe port — not contending, operators not running — and never takes a free Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elector_whose_app_never_answers_does_not_take_a_free_lease_and_says_why() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let flag = dir.path().join("grant.json").to_string_lossy().into_owned();
    let probe = free_port();
    let probe_addr = format!("127.0.0.1:{probe}");
    // Nothing listens there: the port was free a moment ago and is not ours any more.
    let toggle = format!("http://127.0.0.1:{}/grant", free_port());
    let mut args = vec![
        "--lease-name",
        &ns.lease_name,
        "--flag-file",
        &flag,
        "--probe-addr",
        &probe_addr,
        "--toggle-url",
        &toggle,
    ];
    args.extend_from_slice(&FAST_TIMINGS);
    let mut elector = ElectorProcess::elect("pod-a", &ns, &args);

    let mut view = serde_json::Value::Null;
    let judged = wait_until(Duration::from_secs(10), POLL, || {
        view = probe_body(probe, "/leader")
            .and_then(|b| serde_json::from_str(&b).ok())
            .unwrap_or_default();
        view["consumer"] == "unproven"
    });
    assert!(judged, "/leader: {view}\n{}", elector.logs());
    std::thread::sleep(LEASE_DURATION * 2);
    assert_eq!(
        holder(&ns).await,
        "",
        "a pod without a working app took the Lease"
    );
    let view: serde_json::Value =
        serde_json::from_str(&probe_body(probe, "/leader").expect("/leader")).expect("JSON");
    assert_eq!(view["is_leader"], false);
    assert_eq!(view["contending"], false);
    assert_eq!(view["operators_running"], false);
    assert!(
        view["consumer_reason"]
            .as_str()
            .is_some_and(|r| r.contains("no signed ack")),
        "{view}"
    );
    let metrics = probe_body(probe, "/metrics").expect("/metrics");
    assert_eq!(
        metrics_value(&metrics, "passmower_elector_may_contend"),
        0.0
    );
    assert_eq!(
        metrics_value(&metrics, "passmower_elector_operators_running"),
        0.0
    );
    let logs = elector.logs();
    assert!(logs.contains("not contending for the Lease"), "{logs}");
    assert!(!logs.contains("became leader"), "{logs}");
    elector.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(elector.wait_exit(Duration::from_secs(10)).is_some());
}

fn metrics_value(body: &str, name: &str) -> f64 {
    sample(body, name).unwrap_or_else(|| panic!("no {name} in\n{body}"))
}

/// One replica's app container never runs (as when its image cannot be pulled): that pod never
/// takes the Lease, however long it is free; a pod whose app runs takes it and runs operators.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_app_container_is_down_never_leads_and_a_working_pod_does() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let down = PodSpec {
        app_container_down: true,
        ..PodSpec::default()
    };
    let mut pods = vec![Pod::start_spec("pod-a", &ns, down)];
    std::thread::sleep(LEASE_DURATION * 2);
    assert_eq!(
        holder(&ns).await,
        "",
        "the pod with no running app took the free Lease\n{}",
        pods[0].elector_logs()
    );

    pods.push(Pod::start("pod-b", &ns));
    let leader = wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    assert_eq!(leader, 1);
    assert!(holder(&ns).await.starts_with("pod-b_"));
    let logs = pods[0].elector_logs();
    assert!(!logs.contains("became leader"), "{logs}");
    assert!(logs.contains("not contending for the Lease"), "{logs}");
    // The healthy pod waited for its supervisor's first answer too, but no longer than the
    // consumer timeout: no warning, no NotContending Event.
    let healthy = pods[1].elector_logs();
    assert!(
        !healthy.contains("not contending for the Lease:"),
        "{healthy}"
    );
}

/// The leader's whole app container dies (an OOM kill: no `stopped` in the ack file, nobody
/// answers the toggle). Its elector steps down within the consumer timeout and a pod whose app
/// runs leads; the dead app and the new leader app never overlap, and the pod whose app is
/// gone does not take the Lease back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_app_container_dies_steps_down_and_a_working_pod_takes_over() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let mut pods = vec![Pod::start("pod-a", &ns), Pod::start("pod-b", &ns)];
    let first = wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    let other = 1 - first;
    std::thread::sleep(Duration::from_millis(500));
    let killed_at = pods[first].kill_app_container();

    let next = wait_for_leading_pod(&pods, Duration::from_secs(40), Some(first));
    assert_eq!(next, other);
    let new_app = pods[next].leading_app().expect("new leader app");
    assert!(
        new_app.start > killed_at,
        "the new leader app started at {} before the old one was killed at {killed_at}",
        new_app.start
    );
    eprintln!(
        "app container killed at {killed_at:.3}; the other pod's leader app started {:.2}s later",
        new_app.start - killed_at
    );
    let logs = pods[first].elector_logs();
    assert!(
        logs.contains("stepping down so a pod whose app runs can lead"),
        "{logs}"
    );
    let name = &pods[next].name;
    assert!(holder(&ns).await.starts_with(&format!("{name}_")));
    // The pod whose app is gone stays out: its elector neither retakes the Lease nor leads.
    std::thread::sleep(LEASE_DURATION * 2);
    assert!(holder(&ns).await.starts_with(&format!("{name}_")));
    assert_eq!(
        pods[first].elector_logs().matches("became leader").count(),
        1,
        "the pod whose app is gone led again"
    );
    // Every leader run that is not the killed one has its stop recorded and is disjoint.
    let runs: Vec<_> = pods[next]
        .runs()
        .into_iter()
        .filter(|r| r.role == "leader")
        .collect();
    assert!(runs.iter().all(|r| r.start > killed_at), "{runs:?}");
}
