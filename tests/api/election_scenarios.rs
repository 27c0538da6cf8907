//! The `elect` role against a real kube-apiserver: several candidate processes per scenario,
//! with a recorder that reads every pod's flag file and asserts that no two grants (extended by
//! the kill grace the consumer may still use) ever overlap.
//!
//! Timings are shortened (lease 4s, renew deadline 1.5s, retry 300ms, kill grace 1s) so the
//! scenarios run in seconds; the safety rule R + K + 1s < D holds for them as for the defaults.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use nix::sys::signal::Signal;
use passmower_elector::clock::BootInstant;
use passmower_elector::grant::{self, Grant, Mode};

use crate::product::{read_grant, ElectorNamespaces};
use pme_testkit::cluster::write_lease;
use pme_testkit::{
    free_port, wait_until, BootTime, Cluster, ElectorProcess, FaultProxy, GrantRecorder, TestNs,
};

const LEASE_DURATION: Duration = Duration::from_secs(4);
const RENEW_DEADLINE: Duration = Duration::from_millis(1500);
const KILL_GRACE: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(10);

/// Several candidates ("pods") in one namespace, each with its own flag file.
struct Pods {
    ns: TestNs,
    dir: tempfile::TempDir,
    recorder: GrantRecorder,
    pods: Vec<ElectorProcess>,
}

impl Pods {
    async fn new() -> Pods {
        let ns = Cluster::shared().new_namespace().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let recorder = GrantRecorder::start(KILL_GRACE, [], read_grant);
        Pods {
            ns,
            dir,
            recorder,
            pods: Vec::new(),
        }
    }

    /// A released Lease and one candidate per name, all contending; returns once one leads.
    async fn contending_for_a_released_lease(names: &[&str]) -> (Pods, usize) {
        let mut pods = Pods::new().await;
        put_lease(&pods, Some(""), Some(1), None).await;
        for pod in names {
            pods.start(pod);
        }
        let leader = pods.wait_for_leader(Duration::from_secs(20), None);
        (pods, leader)
    }

    fn flag_file(&self, pod: &str) -> PathBuf {
        self.dir.path().join(pod).join("grant.json")
    }

    /// Starts candidate `pod` (its POD_NAME), recorded from its first write.
    fn start(&mut self, pod: &str) -> usize {
        self.start_with(pod, &self.ns.elector_kubeconfig.clone(), &[])
    }

    fn start_with(&mut self, pod: &str, kubeconfig: &std::path::Path, extra: &[&str]) -> usize {
        self.start_custom(pod, kubeconfig, &pme_testkit::FAST_TIMINGS, extra, |_| {})
    }

    /// Starts candidate `pod` with `timings` (the four duration flags), `extra` flags, and
    /// `customize` applied to its command (e.g. a `pre_exec`).
    fn start_custom(
        &mut self,
        pod: &str,
        kubeconfig: &std::path::Path,
        timings: &[&str],
        extra: &[&str],
        customize: impl FnOnce(&mut std::process::Command),
    ) -> usize {
        let flag = self.flag_file(pod);
        std::fs::create_dir_all(flag.parent().expect("parent")).expect("pod dir");
        let index = self.pods.len();
        self.recorder.watch(&format!("{pod}#{index}"), flag.clone());
        let flag = flag.to_string_lossy().into_owned();
        let mut args = vec!["--lease-name", &self.ns.lease_name, "--flag-file", &flag];
        args.extend_from_slice(timings);
        if !extra.contains(&"--probe-addr") {
            args.extend_from_slice(&["--probe-addr", "127.0.0.1:0"]);
        }
        args.extend_from_slice(extra);
        let process = ElectorProcess::elect_customized(pod, &self.ns, kubeconfig, &args, customize);
        self.pods.push(process);
        index
    }

    fn grant(&self, index: usize) -> Option<Grant> {
        let pod = self.pods[index].name().to_owned();
        grant::read_file(&self.flag_file(&pod)).ok().flatten()
    }

    fn is_leader(&self, index: usize) -> bool {
        self.grant(index)
            .is_some_and(|g| g.effective_mode(BootInstant::now()) == Mode::Leader)
    }

    /// Index of the pod whose flag file holds a live leader grant, if exactly one does.
    fn leader(&self) -> Option<usize> {
        let leaders: Vec<usize> = (0..self.pods.len())
            .filter(|&i| self.is_leader(i))
            .collect();
        match leaders.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    fn wait_for_leader(&self, timeout: Duration, other_than: Option<usize>) -> usize {
        let mut found = None;
        let ok = wait_until(timeout, POLL, || {
            found = self.leader().filter(|&i| Some(i) != other_than);
            found.is_some()
        });
        assert!(ok, "no leader within {timeout:?}\n{}", self.all_logs());
        found.expect("checked")
    }

    /// When pod `index`'s first grant that began after `after` started, per the recorder
    /// (which samples every few milliseconds, so it may need a moment to catch up).
    fn grant_start(&self, index: usize, after: BootTime) -> BootTime {
        let suffix = format!("#{index}");
        let mut found = None;
        wait_until(Duration::from_secs(2), POLL, || {
            found = self
                .recorder
                .intervals()
                .into_iter()
                .filter(|i| i.pod.ends_with(&suffix) && i.start >= after)
                .map(|i| i.start)
                .min();
            found.is_some()
        });
        found.unwrap_or_else(|| {
            panic!(
                "the recorder saw no grant of pod {index}\n{:?}",
                self.recorder.intervals()
            )
        })
    }

    fn all_logs(&self) -> String {
        self.pods
            .iter()
            .map(ElectorProcess::logs)
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn leases(&self) -> Api<Lease> {
        Api::namespaced(Cluster::shared().admin_client().await, &self.ns.name)
    }

    async fn lease(&self) -> Option<Lease> {
        self.leases()
            .await
            .get_opt(&self.ns.lease_name)
            .await
            .expect("read lease")
    }

    fn finish(mut self) {
        self.recorder.stop();
        self.recorder.assert_no_overlap();
    }
}

fn holder_of(lease: &Lease) -> String {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

async fn put_lease(
    pods: &Pods,
    holder: Option<&str>,
    duration: Option<i32>,
    transitions: Option<i32>,
) {
    // The whole object as given (nothing of the one it replaces but its resourceVersion),
    // retried on a conflict with a renewing leader.
    write_lease(&pods.leases().await, &pods.ns.lease_name, |lease| {
        *lease = Lease {
            metadata: ObjectMeta {
                name: Some(pods.ns.lease_name.clone()),
                resource_version: lease.metadata.resource_version.take(),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: duration,
                lease_transitions: transitions,
                ..Default::default()
            }),
        };
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_lease_is_acquired_at_once_with_the_next_epoch() {
    let mut pods = Pods::new().await;
    put_lease(&pods, Some(""), Some(1), Some(6)).await;
    let a = pods.start("pod-a");
    let leader = pods.wait_for_leader(Duration::from_secs(20), None);
    assert_eq!(leader, a);
    let g = pods.grant(a).expect("grant");
    assert_eq!(g.epoch, 7, "epoch is leaseTransitions after acquisition");
    assert!(
        g.holder.starts_with("pod-a_"),
        "holder {} carries a per-process suffix",
        g.holder
    );
    assert_eq!(g.lease, pods.ns.lease_ref());
    let lease = pods.lease().await.expect("lease exists");
    assert_eq!(holder_of(&lease), g.holder);
    assert_eq!(lease.spec.and_then(|s| s.lease_duration_seconds), Some(4));
    pods.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_lease_is_created_only_after_one_lease_duration() {
    let mut pods = Pods::new().await;
    let started = BootTime::now();
    pods.start("pod-a");
    pods.start("pod-b");
    let leader = pods.wait_for_leader(Duration::from_secs(20), None);
    let first = pods.grant_start(leader, started);
    // The first grant cannot predate the lease duration: the Lease might have been deleted under
    // a leader that is still running.
    assert!(
        first.saturating_since(started) + Duration::from_millis(50) >= LEASE_DURATION,
        "leader after {:?}",
        first.saturating_since(started)
    );
    let lease = pods.lease().await.expect("created");
    assert_eq!(holder_of(&lease), pods.grant(leader).expect("grant").holder);
    pods.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_takes_over_at_once_after_a_graceful_release() {
    let (mut pods, first) =
        Pods::contending_for_a_released_lease(&["pod-a", "pod-b", "pod-c"]).await;
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    pods.pods[first].signal(Signal::SIGTERM);
    // No consumer acknowledges here, so the release comes kill grace after the demotion; a
    // watcher takes it at once rather than after a lease duration.
    let next = pods.wait_for_leader(KILL_GRACE + LEASE_DURATION, Some(first));
    let handover = t0.elapsed();
    let status = pods.pods[first]
        .wait_exit(Duration::from_secs(10))
        .expect("old leader exits");
    assert!(status.success(), "graceful exit code: {status:?}");
    assert_ne!(next, first);
    assert!(
        handover < KILL_GRACE + LEASE_DURATION,
        "took {handover:?}: followers must act on the release, not on expiry"
    );
    eprintln!("handover after SIGTERM (kill grace {KILL_GRACE:?}, no consumer): {handover:?}");
    assert!(pods.pods[first].logs().contains("released the Lease"));
    pods.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_leader_is_replaced_only_after_the_lease_duration() {
    let (mut pods, first) =
        Pods::contending_for_a_released_lease(&["pod-a", "pod-b", "pod-c"]).await;
    std::thread::sleep(Duration::from_millis(700));
    let killed_at = BootTime::now();
    pods.pods[first].signal(Signal::SIGKILL);
    let next = pods.wait_for_leader(Duration::from_secs(20), Some(first));
    let next_grant = pods.grant_start(next, killed_at);
    // The last renew before the kill happened before `killed_at`, so nobody may lead sooner
    // than one lease duration after it (minus the recorder's sampling slack).
    assert!(
        next_grant
            .saturating_add(Duration::from_millis(400))
            .saturating_since(killed_at)
            >= LEASE_DURATION,
        "takeover {:?} after SIGKILL",
        next_grant.saturating_since(killed_at)
    );
    pods.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_cut_off_from_the_api_lets_its_grant_lapse_before_anyone_else_leads() {
    let mut pods = Pods::new().await;
    put_lease(&pods, Some(""), Some(1), None).await;
    let proxy = FaultProxy::start(Cluster::shared().api_addr());
    let via_proxy = proxy.kubeconfig_via(&pods.ns.elector_kubeconfig);
    let a = pods.start_with("pod-a", &via_proxy, &[]);
    assert_eq!(pods.wait_for_leader(Duration::from_secs(20), None), a);
    pods.start("pod-b");
    pods.start("pod-c");
    std::thread::sleep(Duration::from_millis(500));
    let cut_at = BootTime::now();
    proxy.blackhole();
    // The partitioned leader's own flag file must say follower once its grant has lapsed.
    let demoted = wait_until(RENEW_DEADLINE + Duration::from_secs(5), POLL, || {
        pods.grant(a).is_some_and(|g| g.mode == Mode::Follower)
    });
    assert!(
        demoted,
        "partitioned leader did not demote\n{}",
        pods.pods[a].logs()
    );
    let demoted_after = BootTime::now().saturating_since(cut_at);
    let next = pods.wait_for_leader(Duration::from_secs(20), Some(a));
    assert_ne!(next, a);
    eprintln!("partitioned leader demoted {demoted_after:?} after the cut");
    proxy.pass();
    pods.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_leader_demotes_on_resume_without_any_overlap() {
    let (mut pods, first) = Pods::contending_for_a_released_lease(&["pod-a", "pod-b"]).await;
    std::thread::sleep(Duration::from_millis(500));
    pods.pods[first].signal(Signal::SIGSTOP);
    let next = pods.wait_for_leader(Duration::from_secs(20), Some(first));
    std::thread::sleep(Duration::from_millis(1500));
    pods.pods[first].signal(Signal::SIGCONT);
    // After resuming, the old leader sees its lapsed grant and says follower; it never claims
    // leadership again while the other pod leads.
    let follower = wait_until(Duration::from_secs(5), POLL, || {
        pods.grant(first).is_some_and(|g| g.mode == Mode::Follower)
    });
    assert!(
        follower,
        "resumed leader did not write follower\n{}",
        pods.pods[first].logs()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(pods.is_leader(next), "the new leader keeps the Lease");
    assert!(!pods.is_leader(first));
    pods.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stolen_lease_demotes_the_leader_and_the_thief_record_ages_a_full_duration() {
    let mut pods = Pods::new().await;
    put_lease(&pods, Some(""), Some(1), Some(0)).await;
    for pod in ["pod-a", "pod-b"] {
        pods.start(pod);
    }
    let first = pods.wait_for_leader(Duration::from_secs(20), None);
    let stolen_at = BootTime::now();
    put_lease(&pods, Some("intruder"), Some(4), Some(9)).await;
    let demoted = wait_until(Duration::from_secs(5), POLL, || {
        pods.grant(first).is_some_and(|g| g.mode == Mode::Follower)
    });
    assert!(
        demoted,
        "leader kept its grant after the steal\n{}",
        pods.all_logs()
    );
    let next = pods.wait_for_leader(Duration::from_secs(20), None);
    let start = pods.grant_start(next, stolen_at);
    assert!(
        start
            .saturating_add(Duration::from_millis(100))
            .saturating_since(stolen_at)
            >= LEASE_DURATION,
        "the intruder's record was taken after {:?}",
        start.saturating_since(stolen_at)
    );
    assert_eq!(pods.grant(next).expect("grant").epoch, 10);
    pods.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_lease_is_recreated_by_its_leader_and_followers_do_not_jump_in() {
    let (pods, first) = Pods::contending_for_a_released_lease(&["pod-a", "pod-b", "pod-c"]).await;
    let holder = pods.grant(first).expect("grant").holder;
    pods.leases()
        .await
        .delete(&pods.ns.lease_name, &DeleteParams::default())
        .await
        .expect("delete");
    let recreated = wait_until(Duration::from_secs(5), Duration::from_millis(50), || {
        futures_lite_block(async { pods.lease().await.map(|l| holder_of(&l)) })
            == Some(holder.clone())
    });
    assert!(
        recreated,
        "the leader did not recreate the Lease\n{}",
        pods.all_logs()
    );
    std::thread::sleep(LEASE_DURATION);
    assert_eq!(
        pods.leader(),
        Some(first),
        "leadership stayed with the recreating leader"
    );
    pods.finish();
}

/// The apiserver refuses zero or negative durations and negative transitions (those are covered
/// by the record parser's unit tests); what it does store is a Lease with fields missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_with_missing_fields_is_tolerated() {
    // No holder, no duration, no transitions: released.
    let mut pods = Pods::new().await;
    put_lease(&pods, None, None, None).await;
    let a = pods.start("pod-a");
    assert_eq!(pods.wait_for_leader(Duration::from_secs(10), None), a);
    assert_eq!(
        pods.grant(a).expect("grant").epoch,
        1,
        "missing transitions read as 0"
    );
    pods.finish();

    // A holder but no duration: wait our own lease duration.
    let mut pods = Pods::new().await;
    let put_at = BootTime::now();
    put_lease(&pods, Some("ghost"), None, None).await;
    let a = pods.start("pod-a");
    pods.wait_for_leader(Duration::from_secs(20), None);
    let start = pods.grant_start(a, put_at);
    assert!(
        start
            .saturating_add(Duration::from_millis(100))
            .saturating_since(put_at)
            >= LEASE_DURATION
    );
    pods.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_with_the_same_pod_name_never_both_lead() {
    let mut pods = Pods::new().await;
    put_lease(&pods, Some(""), Some(1), None).await;
    let a = pods.start("twin");
    // Same POD_NAME, separate flag file (as after a container restart beside a stale process).
    let flag = pods.dir.path().join("twin-2").join("grant.json");
    std::fs::create_dir_all(flag.parent().expect("parent")).expect("dir");
    let flag_arg = flag.to_string_lossy().into_owned();
    let kubeconfig = pods.ns.elector_kubeconfig.clone();
    pods.recorder.watch("twin#second", flag.clone());
    let mut args = vec![
        "--lease-name",
        &pods.ns.lease_name,
        "--probe-addr",
        "127.0.0.1:0",
        "--flag-file",
        &flag_arg,
    ];
    args.extend_from_slice(&pme_testkit::FAST_TIMINGS);
    let second = ElectorProcess::elect_with_kubeconfig("twin", &pods.ns, &kubeconfig, &args);
    // Both race for the released Lease; exactly one of them may win it.
    let leads = |path: &std::path::Path| {
        grant::read_file(path)
            .ok()
            .flatten()
            .is_some_and(|g| g.effective_mode(BootInstant::now()) == Mode::Leader)
    };
    let first_flag = pods.flag_file("twin");
    let one_leads = wait_until(Duration::from_secs(20), POLL, || {
        leads(&first_flag) != leads(&flag)
    });
    assert!(
        one_leads,
        "neither twin leads\n{}\n{}",
        pods.all_logs(),
        second.logs()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(leads(&first_flag) != leads(&flag), "exactly one twin leads");
    let (winner_flag, winner_logs, loser_flag, loser_logs) = if leads(&first_flag) {
        (
            first_flag.clone(),
            pods.pods[a].logs(),
            flag.clone(),
            second.logs(),
        )
    } else {
        (
            flag.clone(),
            second.logs(),
            first_flag.clone(),
            pods.pods[a].logs(),
        )
    };
    let winner = grant::read_file(&winner_flag)
        .ok()
        .flatten()
        .expect("winner's flag file");
    let loser = grant::read_file(&loser_flag)
        .ok()
        .flatten()
        .expect("loser's flag file");
    assert_eq!(loser.mode, Mode::Follower);
    // Both run as POD_NAME "twin", yet their holder identities differ.
    let identity = |logs: &str| {
        logs.split_whitespace()
            .find_map(|w| w.strip_prefix("identity=").map(str::to_owned))
            .expect("identity logged")
    };
    assert_eq!(identity(&winner_logs), winner.holder);
    assert_ne!(identity(&loser_logs), winner.holder);
    drop(second);
    pods.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_update_permission_nobody_ever_leads() {
    let cluster = Cluster::shared();
    let rules = pme_testkit::rules_without(
        &crate::product::elector_lease_rules(pme_testkit::DEFAULT_LEASE_NAME),
        "coordination.k8s.io",
        "leases",
        "update",
    );
    let ns = cluster
        .new_namespace_with(pme_testkit::DEFAULT_LEASE_NAME, &rules)
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let flag = dir.path().join("grant.json");
    cluster.create_released_lease(&ns).await;
    let flag_arg = flag.to_string_lossy().into_owned();
    let elector = ElectorProcess::elect(
        "pod-a",
        &ns,
        &[
            "--lease-name",
            &ns.lease_name,
            "--probe-addr",
            "127.0.0.1:0",
            "--flag-file",
            &flag_arg,
            "--retry-period",
            "300ms",
        ],
    );
    std::thread::sleep(Duration::from_secs(3));
    let g = grant::read_file(&flag)
        .ok()
        .flatten()
        .expect("follower flag file");
    assert_eq!(g.mode, Mode::Follower, "{}", elector.logs());
}

/// A plain HTTP/1.0 GET on loopback: status code and body (code 0 when nothing listens).
fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new()); // not listening yet
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_metrics_and_events_report_the_election() {
    let mut pods = Pods::new().await;
    put_lease(&pods, Some(""), Some(1), None).await;
    let (port_a, port_b) = (free_port(), free_port());
    let (addr_a, addr_b) = (format!("127.0.0.1:{port_a}"), format!("127.0.0.1:{port_b}"));
    let kubeconfig = pods.ns.elector_kubeconfig.clone();
    let a = pods.start_with(
        "pod-a",
        &kubeconfig,
        &["--probe-addr", &addr_a, "--log-format", "json"],
    );
    assert_eq!(pods.wait_for_leader(Duration::from_secs(20), None), a);
    pods.start_with("pod-b", &kubeconfig, &["--probe-addr", &addr_b]);
    let ready = wait_until(Duration::from_secs(10), POLL, || {
        http_get(port_b, "/readyz").0 == 200
    });
    assert!(
        ready,
        "follower never ready: {:?}",
        http_get(port_b, "/readyz")
    );

    let (code, body) = http_get(port_a, "/leader");
    assert_eq!(code, 200);
    let view: serde_json::Value = serde_json::from_str(&body).expect("/leader is JSON");
    let holder = pods.grant(a).expect("grant").holder;
    assert_eq!(view["is_leader"], true, "{view}");
    assert_eq!(view["holder"], holder.as_str());
    assert!(view["grant_expires_at"].is_string(), "{view}");
    let (_, body) = http_get(port_b, "/leader");
    let follower: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(follower["is_leader"], false);
    assert_eq!(
        follower["holder"],
        holder.as_str(),
        "followers name the leader"
    );

    assert_eq!(http_get(port_a, "/healthz").0, 200);
    assert_eq!(http_get(port_a, "/readyz").0, 200);
    let (code, metrics) = http_get(port_a, "/metrics");
    assert_eq!(code, 200);
    for line in [
        "passmower_elector_is_leader 1",
        "passmower_elector_leader_transitions_total{direction=\"became\"} 1",
        "passmower_elector_renew_duration_seconds_count",
        "passmower_elector_grant_expiry_timestamp_seconds",
    ] {
        assert!(
            metrics.contains(line),
            "/metrics lacks {line:?}:\n{metrics}"
        );
    }
    let (_, follower_metrics) = http_get(port_b, "/metrics");
    assert!(
        follower_metrics.contains("passmower_elector_is_leader 0"),
        "{follower_metrics}"
    );
    assert_eq!(http_get(port_a, "/nope").0, 404);

    // One JSON object per log line, with the transition and its reason.
    let (_, stderr) = pods.pods[a].log_paths();
    let logs = std::fs::read_to_string(stderr).expect("logs");
    let became: Vec<serde_json::Value> = logs
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("every log line is JSON"))
        .filter(|v| v["message"] == "became leader")
        .collect();
    assert_eq!(became.len(), 1, "{logs}");

    // The BecameLeader Event on the Lease.
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(Cluster::shared().admin_client().await, &pods.ns.name);
    let mut found = false;
    for _ in 0..50 {
        let list = events.list(&Default::default()).await.expect("list events");
        found = list.items.iter().any(|e| {
            e.reason.as_deref() == Some("BecameLeader")
                && e.involved_object.name.as_deref() == Some(pods.ns.lease_name.as_str())
                && e.message.as_deref().is_some_and(|m| m.contains(&holder))
        });
        if found {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(found, "no BecameLeader event for {holder}");
    pods.finish();
}

#[test]
fn unsafe_or_malformed_flags_exit_2_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["--lease-duration", "10s"], "--lease-duration"),
        (&["--retry-period", "10s"], "--retry-period"),
        // Shorter than the renew deadline, but the leader would update the Lease non-stop.
        (
            &["--retry-period", "1ns"],
            "--retry-period \"1ns\": must be at least 100ms",
        ),
        (
            &["--renew-deadline", "500ms", "--retry-period", "100ms"],
            "--renew-deadline \"500ms\": must be at least 1s",
        ),
        (&["--kill-grace", "0s"], "--kill-grace"),
        (&["--renew-deadline", "soon"], "--renew-deadline"),
        (
            &["--toggle-url", "http://192.0.2.1:8082/grant"],
            "--toggle-url",
        ),
        (&["--lease-name", "Not_A_Name"], "--lease-name"),
        (&["--consumer-check", "toggle"], "--consumer-check"),
        (&["--consumer-timeout", "1s"], "--consumer-timeout"),
        (&["--consumer-timeout", "11m"], "--consumer-timeout"),
        (
            &["--flag-file", "/nonexistent-dir/grant.json"],
            "--flag-file",
        ),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let flag_file = dir.path().join("grant.json").to_string_lossy().into_owned();
    for (extra, flag) in cases {
        let mut args = vec!["elect", "--namespace", "ns", "--identity", "pod"];
        if !extra.contains(&"--flag-file") {
            args.extend_from_slice(&["--flag-file", &flag_file]);
        }
        args.extend_from_slice(extra);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_passmower-elector"))
            .args(&args)
            .env_remove("KUBECONFIG")
            .output()
            .expect("run binary");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(
            stderr.contains(flag),
            "{extra:?}: message must name {flag}: {stderr}"
        );
    }
}

/// A kubeconfig that cannot be read is no bad flag value but a role that cannot start: exit 1,
/// with the file named, after the flags have passed their checks.
#[test]
fn a_missing_kubeconfig_file_exits_1_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let flag_file = dir.path().join("grant.json").to_string_lossy().into_owned();
    let kubeconfig = dir.path().join("no-such-kubeconfig");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_passmower-elector"))
        .args([
            "elect",
            "--namespace",
            "ns",
            "--identity",
            "pod",
            "--flag-file",
            &flag_file,
            "--probe-addr",
            "127.0.0.1:0",
        ])
        .env("KUBECONFIG", &kubeconfig)
        // Not in a pod either: nothing else to fall back on.
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .expect("run binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&kubeconfig.display().to_string()),
        "the message must name {}: {stderr}",
        kubeconfig.display()
    );
    assert!(!stderr.contains("configuration error"), "{stderr}");
}

/// Runs a future to completion from synchronous polling code (the harness's `wait_until`).
fn futures_lite_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

/// A consumer learns of a demotion only after the elector wrote it — the push has to arrive and
/// a busy or CPU-throttled container has to run — and its kill grace starts then. Here the
/// supervisor stalls for half a second and its app ignores SIGTERM, so the app dies kill grace
/// after the stall. Without an ack the elector must not release the Lease before that, or the
/// next leader starts while the old app still runs (the fault campaign's `handover-stall`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_handover_without_ack_leaves_a_late_consumer_its_kill_grace() {
    use std::os::unix::fs::PermissionsExt;

    let mut pods = Pods::new().await;
    put_lease(&pods, Some(""), Some(1), None).await;
    let flag = pods.flag_file("pod-a");
    std::fs::create_dir_all(flag.parent().expect("parent")).expect("pod dir");
    let app_dir = tempfile::tempdir().expect("app dir");
    let starts = app_dir.path().join("starts");
    let app = app_dir.path().join("app.sh");
    std::fs::write(
        &app,
        format!(
            "#!/bin/sh\necho \"$$ $ROLE\" >> {}\ntrap '' TERM\nwhile :; do sleep 1; done\n",
            starts.display()
        ),
    )
    .expect("write app");
    std::fs::set_permissions(&app, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let port = free_port();
    let flag_arg = flag.to_string_lossy().into_owned();
    let listen = format!("127.0.0.1:{port}");
    let app_arg = app.to_string_lossy().into_owned();
    let mut supervisor = ElectorProcess::spawn(
        "pod-a-supervise",
        &[
            "supervise",
            "--flag-file",
            &flag_arg,
            "--listen",
            &listen,
            "--leader-env",
            "ROLE=leader",
            "--follower-env",
            "ROLE=follower",
            "--kill-grace",
            "1s",
            "--",
            &app_arg,
        ],
        &[],
    );
    let kubeconfig = pods.ns.elector_kubeconfig.clone();
    let toggle = format!("http://{listen}/grant");
    let a = pods.start_with("pod-a", &kubeconfig, &["--toggle-url", &toggle]);
    assert_eq!(pods.wait_for_leader(Duration::from_secs(20), None), a);
    let mut leader_app = None;
    let started = wait_until(Duration::from_secs(10), POLL, || {
        leader_app = std::fs::read_to_string(&starts)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_suffix(" leader"))
            .filter_map(|pid| pid.parse::<i32>().ok())
            .next_back();
        leader_app.is_some()
    });
    assert!(started, "no leader app\n{}", supervisor.logs());
    let leader_app = leader_app.expect("checked");
    // The apps run in their own process groups, which outlive a SIGKILLed supervisor.
    let _reap = KillGroupsOnDrop(starts.clone());
    let b = pods.start("pod-b");
    std::thread::sleep(Duration::from_millis(800));

    pods.pods[a].signal(Signal::SIGTERM);
    supervisor.signal(Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(500));
    supervisor.signal(Signal::SIGCONT);

    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
    };
    let took_over = wait_until(Duration::from_secs(10), Duration::from_millis(2), || {
        pods.is_leader(b)
    });
    assert!(took_over, "pod-b never took over\n{}", pods.all_logs());
    assert!(
        !alive(leader_app),
        "pod-b leads while pod-a's app (pid {leader_app}) still runs\n{}\n{}",
        pods.all_logs(),
        supervisor.logs()
    );
    supervisor.signal(Signal::SIGTERM);
    supervisor.wait_exit(Duration::from_secs(10));
    pods.finish();
}

/// Kills the process group of every app PID listed in a starts file (`PID ROLE` lines) that is
/// still a live group leader, so a failed test leaves no app behind.
struct KillGroupsOnDrop(PathBuf);

impl Drop for KillGroupsOnDrop {
    fn drop(&mut self) {
        let text = std::fs::read_to_string(&self.0).unwrap_or_default();
        for pid in text
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.parse::<i32>().ok())
        {
            let leads_a_group = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = stat.rsplit_once(')')?.1.to_owned();
                    rest.split_whitespace().nth(2)?.parse::<i32>().ok()
                })
                == Some(pid);
            if leads_a_group {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

/// A pod's app: records `PID ROLE` on start and exits at once on SIGTERM.
fn quick_app(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let starts = dir.join("starts");
    let app = dir.join("app.sh");
    std::fs::write(
        &app,
        format!(
            "#!/bin/sh\necho \"$$ $ROLE\" >> {}\ntrap 'exit 0' TERM\nwhile :; do sleep 1 & wait $!; done\n",
            starts.display()
        ),
    )
    .expect("write app");
    std::fs::set_permissions(&app, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (app, starts)
}

/// Makes the child unable to write into directories it may only read, as the elector in a pod
/// whose volume went read-only: for a root test process, by dropping CAP_DAC_OVERRIDE (and
/// CAP_DAC_READ_SEARCH) from the child's bounding set, so that after exec root is held to the
/// permission bits like anyone else. Needs CAP_SETPCAP, which root has in the usual
/// containers; without root the permission bits already apply.
fn without_dac_override(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    const CAP_DAC_OVERRIDE: libc::c_ulong = 1;
    const CAP_DAC_READ_SEARCH: libc::c_ulong = 2;
    // SAFETY: prctl is async-signal-safe; nothing is allocated between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            for cap in [CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH] {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// The elector's own writes fail (its volume turned read-only) while the
/// supervisor still reads the flag file and acks pushes: the leader fails closed, pushes the
/// demotion, and the supervisor acks it at once — but the file still holds the last leader
/// grant, which a supervisor restarted before its expiry would obey. So the release must wait
/// for that grant's expiry + kill grace + margin whatever the acks say; the recorder, which
/// counts an on-disk grant as in force until it expires (+ kill grace), fails the test if the
/// next leader starts sooner. (Before the fix the ack ended the wait: the follower led about
/// half a second after the break, a second and a half before the on-disk grant expired.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_waits_out_a_leader_grant_stuck_on_a_broken_volume() {
    use std::os::unix::fs::PermissionsExt;

    let mut pods = Pods::new().await;
    put_lease(&pods, Some(""), Some(1), None).await;
    let flag = pods.flag_file("pod-a");
    let volume = flag.parent().expect("parent").to_owned();
    std::fs::create_dir_all(&volume).expect("pod dir");
    std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let app_dir = tempfile::tempdir().expect("app dir");
    let (app, starts) = quick_app(app_dir.path());
    let _reap = KillGroupsOnDrop(starts.clone());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let flag_arg = flag.to_string_lossy().into_owned();
    let app_arg = app.to_string_lossy().into_owned();
    let mut supervisor = ElectorProcess::spawn(
        "pod-a-supervise",
        &[
            "supervise",
            "--flag-file",
            &flag_arg,
            "--listen",
            &listen,
            "--leader-env",
            "ROLE=leader",
            "--follower-env",
            "ROLE=follower",
            "--kill-grace",
            "1s",
            "--",
            &app_arg,
        ],
        &[],
    );
    let kubeconfig = pods.ns.elector_kubeconfig.clone();
    let toggle = format!("http://{listen}/grant");
    let a = pods.start_custom(
        "pod-a",
        &kubeconfig,
        &pme_testkit::FAST_TIMINGS,
        &["--toggle-url", &toggle],
        without_dac_override,
    );
    assert_eq!(pods.wait_for_leader(Duration::from_secs(20), None), a);
    let leader_app = wait_until(Duration::from_secs(10), POLL, || {
        std::fs::read_to_string(&starts).is_ok_and(|s| s.contains(" leader"))
    });
    assert!(leader_app, "no leader app\n{}", supervisor.logs());
    let b = pods.start("pod-b");
    std::thread::sleep(Duration::from_millis(800));

    let broken_at = BootTime::now();
    std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o555)).expect("chmod");
    let on_disk = pods.grant(a).expect("the last grant stays on disk");
    let next = pods.wait_for_leader(Duration::from_secs(20), Some(a));
    assert_eq!(next, b);
    let b_from = pods.grant_start(b, broken_at);
    eprintln!(
        "volume broken; on-disk grant expired {:?} after the break; pod-b led {:?} after it",
        BootTime::from_nanos(on_disk.expires_boottime_ns).saturating_since(broken_at),
        b_from.saturating_since(broken_at)
    );
    std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    supervisor.signal(Signal::SIGTERM);
    supervisor.wait_exit(Duration::from_secs(10));
    let logs = pods.pods[a].logs();
    // The safety property first: pod-b's grant began only after pod-a's on-disk grant expired
    // plus the kill grace.
    pods.finish();
    assert!(
        logs.contains("failing closed") && logs.contains("acks or not"),
        "pod-a did not take the on-disk path\n{logs}"
    );
}

/// The follower's watch goes silent without closing (a middlebox forgot the
/// flow: no byte moves, nothing is reset) while the leader keeps renewing. The follower must
/// notice — it hears no renewal for two retry periods, re-reads, sees a change its watch never
/// delivered and restarts the watch — and take the Lease at once when the leader hands it
/// over. With a lease duration of 20s, a follower that trusted its dead watch would only act
/// at its next attempt, about 20s after the silence began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_dead_watch_is_noticed_and_a_release_still_taken_at_once() {
    const TIMINGS: [&str; 8] = [
        "--lease-duration",
        "20s",
        "--renew-deadline",
        "1500ms",
        "--retry-period",
        "300ms",
        "--kill-grace",
        "1s",
    ];
    let mut pods = Pods::new().await;
    put_lease(&pods, Some(""), Some(1), None).await;
    let direct = pods.ns.elector_kubeconfig.clone();
    let a = pods.start_custom("pod-a", &direct, &TIMINGS, &[], |_| {});
    assert_eq!(pods.wait_for_leader(Duration::from_secs(20), None), a);
    let proxy = FaultProxy::start(Cluster::shared().api_addr());
    let via_proxy = proxy.kubeconfig_via(&pods.ns.elector_kubeconfig);
    let b = pods.start_custom("pod-b", &via_proxy, &TIMINGS, &[], |_| {});
    let holder = pods.grant(a).expect("grant").holder;
    let follows = wait_until(Duration::from_secs(10), POLL, || {
        pods.grant(b).is_some_and(|g| g.holder == holder)
    });
    assert!(follows, "pod-b never saw the leader\n{}", pods.all_logs());
    std::thread::sleep(Duration::from_secs(1));

    proxy.silence_open_connections();
    std::thread::sleep(Duration::from_millis(1500));
    let term_at = Instant::now();
    pods.pods[a].signal(Signal::SIGTERM);
    let took_over = wait_until(Duration::from_secs(30), POLL, || pods.is_leader(b));
    let after = term_at.elapsed();
    assert!(took_over, "pod-b never took over\n{}", pods.all_logs());
    eprintln!("watch silent 1.5s before the SIGTERM; pod-b led {after:?} after it");
    // The handover itself takes kill grace + margin (no consumer acks); noticing the dead
    // watch a few retry periods. Trusting the dead watch would take about 18.5s here.
    assert!(
        after < Duration::from_secs(8),
        "pod-b took {after:?}: it did not notice its dead watch\n{}",
        pods.all_logs()
    );
    assert!(
        pods.pods[b]
            .logs()
            .contains("the Lease changed without a watch event; restarting the watch"),
        "{}",
        pods.pods[b].logs()
    );
    pods.finish();
}

/// A GitOps tool annotates the Lease every half second while its holder is
/// dead. Metadata edits are no renewal: the takeover comes one lease duration after the last
/// real write, not never (each edit used to restart the wait), and not sooner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotating_the_lease_does_not_postpone_the_takeover() {
    let mut pods = Pods::new().await;
    let put_at = BootTime::now();
    put_lease(&pods, Some("dead-holder"), Some(4), Some(3)).await;
    let a = pods.start("pod-a");
    let leases = pods.leases().await;
    let name = pods.ns.lease_name.clone();
    let mut edits = 0u32;
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline && !pods.is_leader(a) {
        if let Ok(Some(mut lease)) = leases.get_opt(&name).await {
            if holder_of(&lease) != "dead-holder" {
                break;
            }
            edits += 1;
            lease
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert("gitops.example/synced".into(), edits.to_string());
            // A conflict with nobody (the holder is dead) is only our own race; skip it.
            let _ = leases.replace(&name, &PostParams::default(), &lease).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let led = wait_until(Duration::from_secs(2), POLL, || pods.is_leader(a));
    assert!(
        led,
        "no takeover within 15s while the Lease was annotated {edits} times\n{}",
        pods.all_logs()
    );
    let start = pods.grant_start(a, put_at);
    let after = start.saturating_since(put_at);
    eprintln!("takeover {after:?} after the dead holder's record, {edits} annotations meanwhile");
    assert!(
        after + Duration::from_millis(100) >= LEASE_DURATION,
        "taken after {after:?}"
    );
    assert!(edits >= 6, "the Lease was annotated only {edits} times");
    assert_eq!(pods.grant(a).expect("grant").epoch, 4);
    pods.finish();
}

/// Creates Pod `name` in the namespace as admin (no kubelet runs it: it only has to exist for
/// its elector to watch), with a finalizer when `keep`, so that deleting it leaves it
/// terminating (deletionTimestamp set) until the finalizer is removed.
async fn create_pod_object(pods: &Pods, name: &str, keep: bool) {
    let finalizers: Vec<&str> = if keep { vec![KEEP_FINALIZER] } else { vec![] };
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "finalizers": finalizers},
        "spec": {
            "serviceAccountName": "passmower",
            "automountServiceAccountToken": false,
            "containers": [{"name": "passmower", "image": "example.invalid/passmower:1"}],
        },
    }))
    .expect("pod");
    pod_objects(pods)
        .await
        .create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("create pod {name}: {e}"));
}

const KEEP_FINALIZER: &str = "passmower-elector.test/keep";

async fn pod_objects(pods: &Pods) -> Api<k8s_openapi::api::core::v1::Pod> {
    Api::namespaced(Cluster::shared().admin_client().await, &pods.ns.name)
}

/// Removes the test's finalizer, so a terminating Pod object goes away.
async fn release_pod_object(pods: &Pods, name: &str) {
    let patch = serde_json::json!({"metadata": {"finalizers": null}});
    let _ = pod_objects(pods)
        .await
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await;
}

/// A pod that is being deleted (a scale-down, a rollout) still has a live consumer while its
/// app drains; it must not take the Lease that the leader releases, or the Lease moves twice.
/// Here the only follower is terminating when the leader hands over: the Lease stays released
/// for two lease durations (the old code took it at once), and a pod that stays takes it as
/// soon as it starts. The recorder checks that no two grants overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminating_follower_never_takes_a_free_lease_a_staying_one_does() {
    let mut pods = Pods::new().await;
    for (name, keep) in [("pod-a", false), ("pod-b", true), ("pod-c", false)] {
        create_pod_object(&pods, name, keep).await;
    }
    put_lease(&pods, Some(""), Some(1), None).await;
    let a = pods.start("pod-a");
    assert_eq!(pods.wait_for_leader(Duration::from_secs(20), None), a);
    let b = pods.start("pod-b");
    // pod-b follows, and knows its pod stays.
    let following = wait_until(Duration::from_secs(10), POLL, || {
        pods.pods[b].logs().contains("the pod is not being deleted")
    });
    assert!(
        following,
        "pod-b never read its pod\n{}",
        pods.pods[b].logs()
    );

    // pod-b's Pod is deleted; the finalizer keeps it terminating.
    pod_objects(&pods)
        .await
        .delete("pod-b", &DeleteParams::default())
        .await
        .expect("delete pod-b");
    let seen = wait_until(Duration::from_secs(10), POLL, || {
        pods.pods[b]
            .logs()
            .contains("not taking the Lease from now on")
    });
    assert!(
        seen,
        "pod-b never saw its pod terminating\n{}",
        pods.pods[b].logs()
    );

    // The leader hands over; the terminating follower does not take the free Lease.
    pods.pods[a].signal(Signal::SIGTERM);
    assert!(
        pods.pods[a].wait_exit(Duration::from_secs(10)).is_some(),
        "pod-a did not exit\n{}",
        pods.pods[a].logs()
    );
    let lease = pods.lease().await.expect("lease");
    assert!(
        !holder_of(&lease).starts_with("pod-a_"),
        "pod-a released the Lease"
    );
    let end = Instant::now() + LEASE_DURATION * 2;
    while Instant::now() < end {
        assert!(
            !pods.is_leader(b),
            "the terminating pod-b took the Lease\n{}",
            pods.all_logs()
        );
        std::thread::sleep(POLL);
    }
    let lease = pods.lease().await.expect("lease");
    assert_eq!(
        holder_of(&lease),
        "",
        "the Lease was taken while only a terminating pod contended\n{}",
        pods.all_logs()
    );

    // A pod that stays takes it.
    let c = pods.start("pod-c");
    assert_eq!(pods.wait_for_leader(Duration::from_secs(20), None), c);
    assert!(!pods.is_leader(b));
    release_pod_object(&pods, "pod-b").await;
    pods.finish();
}

/// An elector started without the downward API's `POD_NAME` (its identity given by flag)
/// cannot watch its own Pod: it says so and contends as if the pod stayed, so it leads a free
/// Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pod_name_the_elector_says_so_and_still_leads() {
    let mut pods = Pods::new().await;
    put_lease(&pods, Some(""), Some(1), None).await;
    let kubeconfig = pods.ns.elector_kubeconfig.clone();
    let extra = ["--identity", "pod-a"];
    let a = pods.start_custom(
        "pod-a",
        &kubeconfig,
        &pme_testkit::FAST_TIMINGS,
        &extra,
        |cmd| {
            cmd.env_remove("POD_NAME");
        },
    );
    assert_eq!(pods.wait_for_leader(Duration::from_secs(20), None), a);
    let logs = pods.pods[a].logs();
    assert!(logs.contains("POD_NAME is not set"), "{logs}");
    pods.finish();
}
