//! What the elector sends to the API, counted from a real kube-apiserver's audit log: it
//! identifies itself, and a failing create cannot turn into a tight loop.

use std::ffi::OsStr;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use passmower_elector::clock::BootInstant;
use passmower_elector::grant::{self, Mode};

use pme_testkit::audit::AuditedCluster;
use pme_testkit::{wait_until, ElectorProcess};

const LEASE: &str = "passmower-operators";
/// The retry period of `pme_testkit::FAST_TIMINGS`.
const RETRY_PERIOD: Duration = Duration::from_millis(300);

/// One audited control plane for this test binary, with one user per test.
fn audited() -> &'static AuditedCluster {
    static CLUSTER: OnceLock<AuditedCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        // Started on a thread and runtime of its own: the tests' runtimes come and go.
        std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(AuditedCluster::start(&[
                "elector-ua".to_owned(),
                "elector-create".to_owned(),
            ]))
        })
        .join()
        .expect("audited control plane")
    })
}

/// A namespace `name` with a released Lease, as an administrator would prepare it.
async fn namespace_with_released_lease(name: &str) {
    let admin = audited().admin_client().await;
    let meta = |n: &str| ObjectMeta {
        name: Some(n.to_owned()),
        ..Default::default()
    };
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta(name),
                ..Default::default()
            },
        )
        .await
        .expect("create namespace");
    Api::<Lease>::namespaced(admin, name)
        .create(
            &PostParams::default(),
            &Lease {
                metadata: meta(LEASE),
                spec: Some(LeaseSpec {
                    holder_identity: Some(String::new()),
                    ..Default::default()
                }),
            },
        )
        .await
        .expect("create the released Lease");
}

/// Runs `elect` as `user` in `namespace`, with the fast timings.
fn elector(user: &str, namespace: &str, flag: &std::path::Path) -> ElectorProcess {
    let kubeconfig = audited().kubeconfig_of(user);
    let flag = flag.to_string_lossy().into_owned();
    let mut args = vec![
        "elect",
        "--lease-name",
        LEASE,
        "--flag-file",
        &flag,
        "--probe-addr",
        "127.0.0.1:0",
        // No consumer here: the test counts the elector's own API requests.
        "--consumer-check",
        "none",
    ];
    args.extend_from_slice(&pme_testkit::FAST_TIMINGS);
    ElectorProcess::spawn(
        "pod-a",
        &args,
        &[
            ("KUBECONFIG", kubeconfig.as_os_str()),
            ("POD_NAME", OsStr::new("pod-a")),
            ("POD_NAMESPACE", OsStr::new(namespace)),
        ],
    )
}

fn leads(flag: &std::path::Path) -> bool {
    grant::read_file(flag)
        .ok()
        .flatten()
        .is_some_and(|g| g.effective_mode(BootInstant::now()) == Mode::Leader)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_names_the_elector_in_its_user_agent() {
    let cluster = audited();
    namespace_with_released_lease("ua").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let flag = dir.path().join("grant.json");
    let offset = cluster.audit_offset();
    let elector = elector("elector-ua", "ua", &flag);
    assert!(
        wait_until(
            Duration::from_secs(20),
            Duration::from_millis(10),
            || leads(&flag)
        ),
        "no leader\n{}",
        elector.logs()
    );
    // A few renewals, and the BecameLeader Event.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let requests: Vec<_> = cluster
        .requests_since(offset)
        .into_iter()
        .filter(|r| r.user == "elector-ua")
        .collect();
    let expected = format!("passmower-elector/{} (elect)", env!("CARGO_PKG_VERSION"));
    for verb in ["get", "watch", "update", "create"] {
        assert!(
            requests.iter().any(|r| r.verb == verb),
            "no {verb} request in {requests:?}"
        );
    }
    for r in &requests {
        assert_eq!(r.user_agent, expected, "{} {}", r.verb, r.uri);
    }
    eprintln!(
        "{} requests, all with User-Agent {expected:?}",
        requests.len()
    );
}

/// The leader's Lease is deleted in a namespace that is being deleted: it cannot be created
/// again there (the NamespaceLifecycle admission refuses new objects; no controller manager
/// runs here to finish the deletion). Before the fix, a leader without a copy of the Lease
/// renewed by re-creating it with nothing moving the next attempt forward, so it sent creates
/// back to back until its grant lapsed — hundreds in the renew deadline. Now every failure
/// backs off (a quarter of the retry period, doubling up to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_keeps_failing_is_retried_with_backoff() {
    let cluster = audited();
    namespace_with_released_lease("create-loop").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let flag = dir.path().join("grant.json");
    let elector = elector("elector-create", "create-loop", &flag);
    assert!(
        wait_until(
            Duration::from_secs(20),
            Duration::from_millis(10),
            || leads(&flag)
        ),
        "no leader\n{}",
        elector.logs()
    );
    let admin = cluster.admin_client().await;
    Api::<Namespace>::all(admin.clone())
        .delete("create-loop", &DeleteParams::default())
        .await
        .expect("delete namespace");
    let offset = cluster.audit_offset();
    Api::<Lease>::namespaced(admin, "create-loop")
        .delete(LEASE, &DeleteParams::default())
        .await
        .expect("delete the Lease");
    let window = Duration::from_secs(6);
    tokio::time::sleep(window).await;
    let creates = cluster
        .requests_since(offset)
        .into_iter()
        .filter(|r| r.user == "elector-create" && r.verb == "create" && r.uri.contains("/leases"))
        .count();
    assert!(
        elector.logs().contains("stopped leading"),
        "the leader kept a grant without a Lease\n{}",
        elector.logs()
    );
    eprintln!(
        "{creates} Lease creates in {window:?} after the Lease was deleted in a terminating \
         namespace (retry period {RETRY_PERIOD:?})"
    );
    // Never more than one attempt per quarter retry period, even in the worst burst.
    let bound = (window.as_millis() / (RETRY_PERIOD / 4).as_millis()) as usize;
    assert!(
        creates >= 2,
        "the elector never tried to create the Lease again ({creates})"
    );
    assert!(
        creates <= bound,
        "{creates} creates in {window:?} (at most {bound}): a tight create loop\n{}",
        elector.logs()
    );
}
