//! Proves the harness itself against the real kube-apiserver: the elector identity's RBAC is
//! exactly the Lease it is scoped to, the fault proxy stalls, cuts and slows requests, and a
//! private control plane restarts in place.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};

use crate::product::{elector_lease_rules, ElectorNamespaces};
use pme_testkit::{client_from_kubeconfig, rules_without, Cluster, FaultProxy};

fn lease(name: &str, holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
    }
}

fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

#[tokio::test]
async fn elector_identity_may_use_only_its_own_lease() {
    let cluster = Cluster::shared();
    eprintln!("control plane started in {:?}", cluster.started_in);
    let ns = cluster.new_namespace().await;
    let leases: Api<Lease> = Api::namespaced(ns.elector_client().await, &ns.name);
    let pp = PostParams::default();

    leases
        .create(&pp, &lease(&ns.lease_name, "pod-a"))
        .await
        .expect("create own lease");
    let mut got = leases.get(&ns.lease_name).await.expect("get own lease");
    got.spec.as_mut().unwrap().holder_identity = Some("pod-b".into());
    let updated = leases
        .replace(&ns.lease_name, &pp, &got)
        .await
        .expect("update own lease");
    assert_eq!(
        updated.spec.unwrap().holder_identity.as_deref(),
        Some("pod-b")
    );
    // The one way a name-restricted identity may watch: by field selector on its own name.
    let watch = leases
        .watch(
            &kube::api::WatchParams::default()
                .fields(&format!("metadata.name={}", ns.lease_name))
                .timeout(1),
            "0",
        )
        .await;
    assert!(
        watch.is_ok(),
        "watch own lease by field selector: {:?}",
        watch.err()
    );

    let err = leases
        .get("someone-elses-lease")
        .await
        .expect_err("another lease must be forbidden");
    assert!(is_forbidden(&err), "expected 403, got {err}");
    let err = leases
        .list(&ListParams::default())
        .await
        .expect_err("unrestricted list must be forbidden");
    assert!(is_forbidden(&err), "expected 403, got {err}");
}

#[tokio::test]
async fn one_permission_less_is_refused() {
    let cluster = Cluster::shared();
    let lease_name = pme_testkit::DEFAULT_LEASE_NAME;
    let rules = rules_without(
        &elector_lease_rules(lease_name),
        "coordination.k8s.io",
        "leases",
        "update",
    );
    let ns = cluster.new_namespace_with(lease_name, &rules).await;
    let leases: Api<Lease> = Api::namespaced(ns.elector_client().await, &ns.name);
    let pp = PostParams::default();
    leases
        .create(&pp, &lease(lease_name, "pod-a"))
        .await
        .expect("create is still granted");
    let got = leases.get(lease_name).await.expect("get is still granted");
    let err = leases
        .replace(lease_name, &pp, &got)
        .await
        .expect_err("update was taken away");
    assert!(is_forbidden(&err), "expected 403, got {err}");
}

#[tokio::test]
async fn fault_proxy_stalls_cuts_and_slows_requests() {
    let cluster = Cluster::shared();
    let ns = cluster.new_namespace().await;
    let proxy = FaultProxy::start(cluster.api_addr());
    let via = proxy.kubeconfig_via(&ns.elector_kubeconfig);
    let leases: Api<Lease> = Api::namespaced(client_from_kubeconfig(&via).await, &ns.name);
    leases
        .create(&PostParams::default(), &lease(&ns.lease_name, "pod-a"))
        .await
        .expect("pass: create through the proxy (TLS verified against the test CA)");

    proxy.blackhole();
    let stalled = tokio::time::timeout(Duration::from_secs(2), leases.get(&ns.lease_name)).await;
    assert!(
        stalled.is_err(),
        "blackhole: request must hang, got {stalled:?}"
    );

    proxy.pass();
    let healed = tokio::time::timeout(Duration::from_secs(10), leases.get(&ns.lease_name)).await;
    assert!(
        matches!(healed, Ok(Ok(_))),
        "pass after blackhole: {healed:?}"
    );

    proxy.reset();
    let cut = tokio::time::timeout(Duration::from_secs(5), leases.get(&ns.lease_name)).await;
    assert!(
        matches!(cut, Ok(Err(_))),
        "reset: request must fail fast, got {cut:?}"
    );

    proxy.delay(Duration::from_millis(300));
    let started = Instant::now();
    let slow = tokio::time::timeout(Duration::from_secs(10), leases.get(&ns.lease_name)).await;
    assert!(matches!(slow, Ok(Ok(_))), "delay: {slow:?}");
    // At least one delayed chunk each way (a fresh connection after the reset pays more).
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "delay: answered in {:?}",
        started.elapsed()
    );
    cluster.assert_alive();
}

/// A private control plane restarts each process in place — same ports, same data — so a test
/// can take etcd or the apiserver away under running electors and bring it back.
#[test]
fn private_cluster_restarts_in_place_and_keeps_its_data() {
    use nix::sys::signal::Signal;
    use pme_testkit::cluster::ControlPlaneProcess;

    let cluster = Cluster::start_private();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let leases = |rt: &tokio::runtime::Runtime| -> Api<Lease> {
        Api::namespaced(rt.block_on(cluster.admin_client()), "default")
    };
    rt.block_on(leases(&rt).create(&PostParams::default(), &lease("kept", "pod-a")))
        .expect("create");
    for (which, signal) in [
        (ControlPlaneProcess::Etcd, Signal::SIGKILL),
        (ControlPlaneProcess::KubeApiserver, Signal::SIGTERM),
    ] {
        cluster.stop(which, signal, Duration::from_secs(5));
        let api = leases(&rt);
        let down = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), api.get("kept")).await
        });
        assert!(
            !matches!(down, Ok(Ok(_))),
            "the Lease was served with {} stopped",
            which.name()
        );
        cluster
            .restart(which)
            .unwrap_or_else(|e| panic!("restart {}: {e}", which.name()));
        cluster.assert_alive();
        let kept = rt
            .block_on(leases(&rt).get("kept"))
            .expect("read after restart");
        assert_eq!(
            kept.spec.and_then(|s| s.holder_identity).as_deref(),
            Some("pod-a"),
            "data survives a restart of {}",
            which.name()
        );
    }
}
