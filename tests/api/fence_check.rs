//! The elector checks, from inside its pod, that the write fence guards its install: with no
//! fence a follower's dry-run write is admitted and it says `missing`; with the install's fence
//! it says `active`; with a fence that follows another install's Lease on the same
//! ServiceAccount (two installs sharing one) every pod is refused by that Lease and says
//! `foreign` — the leader too, whose operator writes would all be refused. Each in the metric
//! `passmower_elector_write_fence{state}` and as an Event.
//!
//! Pods are Pod objects that never run, with tokens bound to them (see `tests/api/fence.rs`), so
//! the apiserver ties each elector's requests to its pod as it does in a cluster.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};

use crate::product::{install_fence, ElectorNamespaces};
use passmower_elector::inject::fence::{fence_policy_name, write_fence, FenceTarget};
use pme_testkit::fence::{grant_passmower_rights, install_fence_objects, remove_fence, FakePod};
use pme_testkit::probe::{probe_body, sample};
use pme_testkit::wait::POLL;
use pme_testkit::{free_port, wait_until, Cluster, ElectorProcess, TestNs};

const SA: &str = pme_testkit::cluster::ELECTOR_SERVICE_ACCOUNT;

struct PodElector {
    pod: FakePod,
    probe: u16,
    _elector: ElectorProcess,
    _dir: tempfile::TempDir,
}

fn start(ns: &TestNs, pod: FakePod) -> PodElector {
    let dir = tempfile::tempdir().expect("tempdir");
    let probe = free_port();
    let flag = dir.path().join("grant.json");
    let probe_addr = format!("127.0.0.1:{probe}");
    let args = vec![
        "--lease-name",
        &ns.lease_name,
        "--probe-addr",
        &probe_addr,
        "--flag-file",
        flag.to_str().expect("utf-8"),
        "--write-fence-check",
        "1s",
    ];
    // The default timings (renew every 2s, deadline 10s): a loaded machine must not move the
    // Lease in the middle of a step.
    let elector = ElectorProcess::elect_in_pod(
        &pod.name,
        Some(&pod.uid),
        ns,
        &pod.kubeconfig,
        &args,
        |_| {},
    );
    PodElector {
        pod,
        probe,
        _elector: elector,
        _dir: dir,
    }
}

fn fence_state(p: &PodElector) -> Option<&'static str> {
    let body = probe_body(p.probe, "/metrics")?;
    ["unknown", "active", "missing", "foreign"]
        .into_iter()
        .find(|s| {
            sample(
                &body,
                &format!("passmower_elector_write_fence{{state=\"{s}\"}}"),
            ) == Some(1.0)
        })
}

fn wait_state(p: &PodElector, want: &str, within: Duration, what: &str) {
    let seen = wait_until(within, POLL, || fence_state(p) == Some(want));
    assert!(
        seen,
        "{what}: {} reports write fence {:?}, not {want} within {within:?}",
        p.pod.name,
        fence_state(p)
    );
}

async fn holder(admin: &kube::Client, ns: &TestNs) -> String {
    Api::<Lease>::namespaced(admin.clone(), &ns.name)
        .get_opt(&ns.lease_name)
        .await
        .expect("read the Lease")
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .unwrap_or_default()
}

async fn event_reasons(admin: &kube::Client, ns: &str) -> Vec<String> {
    Api::<Event>::namespaced(admin.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("list Events")
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

/// Waits (bounded) for an Event of `reason` in `ns`: the elector records Events in the
/// background, after its metric has changed. Returns every reason seen.
async fn wait_event(admin: &kube::Client, ns: &str, reason: &str) -> (bool, Vec<String>) {
    for _ in 0..75 {
        let reasons = event_reasons(admin, ns).await;
        if reasons.iter().any(|r| r == reason) {
            return (true, reasons);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (false, event_reasons(admin, ns).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_elector_reports_a_missing_an_active_and_a_foreign_write_fence() {
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    let ns = cluster.new_namespace().await;
    // Passmower's own Role: the dry run needs `create` on secrets, as Passmower has.
    grant_passmower_rights(&admin, &ns.name, SA).await;
    cluster.create_released_lease(&ns).await;
    let a = FakePod::create(cluster, &ns.name, "passmower-a", SA).await;
    let b = FakePod::create(cluster, &ns.name, "passmower-b", SA).await;
    let pods = [start(&ns, a), start(&ns, b)];

    let mut leader_name = String::new();
    for _ in 0..100 {
        let h = holder(&admin, &ns).await;
        if let Some(p) = pods
            .iter()
            .find(|p| h.starts_with(&format!("{}_", p.pod.name)))
        {
            leader_name = p.pod.name.clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!leader_name.is_empty(), "no pod took the Lease within 20s");
    let leader = pods
        .iter()
        .find(|p| p.pod.name == leader_name)
        .expect("leader");
    let follower = pods
        .iter()
        .find(|p| p.pod.name != leader_name)
        .expect("follower");

    // 1. No fence: the follower's dry-run write is admitted.
    wait_state(
        follower,
        "missing",
        Duration::from_secs(30),
        "no fence installed",
    );
    // A leader's admitted write says nothing about the fence (while it has led throughout).
    if holder(&admin, &ns)
        .await
        .starts_with(&format!("{leader_name}_"))
    {
        assert_eq!(fence_state(leader), Some("unknown"));
    }
    let (seen, reasons) = wait_event(&admin, &ns.name, "WriteFenceMissing").await;
    assert!(seen, "no WriteFenceMissing Event: {reasons:?}");

    // 2. The install's fence: the follower is refused by its Lease.
    let policy = install_fence(&admin, &ns).await;
    wait_state(
        follower,
        "active",
        Duration::from_secs(30),
        "the install's fence",
    );
    let (seen, reasons) = wait_event(&admin, &ns.name, "WriteFenceActive").await;
    assert!(
        seen,
        "no WriteFenceActive Event after the recovery: {reasons:?}"
    );

    // 3. A second install on the same ServiceAccount re-points the one fence to its Lease,
    //    held by its own pod: this install's leader is refused from now on, and says so.
    remove_fence(&admin, &policy).await;
    let other = FakePod::create(cluster, &ns.name, "other-install-a", SA).await;
    let other_lease = "other-install";
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": other_lease},
        "spec": {"holderIdentity": other.holder("1a2b3c4d"), "leaseDurationSeconds": 15},
    }))
    .expect("lease");
    Api::<Lease>::namespaced(admin.clone(), &ns.name)
        .create(&Default::default(), &lease)
        .await
        .expect("create the other install's Lease");
    let name = fence_policy_name(&ns.name, SA);
    let target = FenceTarget {
        namespace: &ns.name,
        service_account: SA,
        lease: other_lease,
    };
    let objects: Vec<serde_json::Value> = write_fence(&name, &target, "Deployment/other-install")
        .iter()
        .map(|v| serde_json::to_value(v).expect("json"))
        .collect();
    let policy = install_fence_objects(&admin, name, &objects).await;
    wait_state(
        leader,
        "foreign",
        Duration::from_secs(30),
        "a fence of another install's Lease, at the leader",
    );
    wait_state(
        follower,
        "foreign",
        Duration::from_secs(30),
        "a fence of another install's Lease, at the follower",
    );
    let (seen, reasons) = wait_event(&admin, &ns.name, "WriteFenceForeign").await;
    assert!(seen, "no WriteFenceForeign Event: {reasons:?}");
    remove_fence(&admin, &policy).await;
}
