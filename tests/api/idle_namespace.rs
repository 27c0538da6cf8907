//! The followers' idle `NAMESPACE_SELECTOR` against the real kube-apiserver: a name no namespace
//! can have (the default, and the other forms `--idle-namespace` accepts without the deny
//! policy) cannot be created, and Passmower's namespaced LIST and WATCH under it (the paths its
//! `NamespaceFilter` builds for one name without `*` or `,`) of OIDCClients, Secrets and Pods
//! are empty and quiet, even while namespaces of every near-miss spelling exist and change. A
//! watch of a near-miss namespace in the same window sees the changes, so the quiet is real.
//! And the charts' defaults are the binary's.
//!
//! Passmower's CRDs come from the upstream chart (`PME_UPSTREAM`, default
//! `../shared/upstream/passmower`), read at test time.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, ServiceAccount};
use kube::api::{Api, DynamicObject, PostParams};
use passmower_elector::inject::{is_dns1123_label, DEFAULT_IDLE_NAMESPACE};
use pme_testkit::fence::{install_crds_of, oidc_clients, upstream_dir};
use pme_testkit::free_port;
use pme_testkit::passmower::{passmower_app, redis_keys, start_passmower, start_redis};
use pme_testkit::Cluster;
use serde_json::{json, Value};

/// How long each watch stays open (the server ends it): a few seconds, during which objects
/// in the near-miss namespaces are created and changed.
const WATCH_SECONDS: u64 = 4;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Names no namespace can have, one of each form: the default ('_'), a '.', upper case, and
/// more than 63 characters.
fn uncreatable_names() -> Vec<String> {
    vec![
        DEFAULT_IDLE_NAMESPACE.to_owned(),
        "passmower-elector.idle".to_owned(),
        "Passmower-Elector-Idle".to_owned(),
        format!("passmower-elector-idle-{}", "x".repeat(41)),
    ]
}

/// The namespace names a slip could turn `name` into: lower-cased, each character a namespace
/// cannot have replaced by '-' or dropped, truncated to 63, and the earlier default.
fn near_misses(name: &str) -> Vec<String> {
    let lower = name.to_ascii_lowercase();
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let dashed: String = lower.chars().map(|c| if ok(c) { c } else { '-' }).collect();
    let dropped: String = lower.chars().filter(|&c| ok(c)).collect();
    let truncate = |s: &str| s.chars().take(63).collect::<String>();
    let mut out = BTreeSet::new();
    for candidate in [
        lower.clone(),
        dashed.clone(),
        dropped.clone(),
        truncate(&lower),
        truncate(&dashed),
        truncate(&dropped),
        "passmower-elector-idle-never-create".to_owned(),
    ] {
        let candidate = candidate.trim_matches('-').to_owned();
        if is_dns1123_label(&candidate) {
            out.insert(candidate);
        }
    }
    out.into_iter().collect()
}

/// The collections Passmower's operators list and watch, under `namespace`, as paths.
fn collections(namespace: &str) -> [String; 3] {
    [
        format!("/apis/codemowers.cloud/v1beta1/namespaces/{namespace}/oidcclients"),
        format!("/api/v1/namespaces/{namespace}/secrets"),
        format!("/api/v1/namespaces/{namespace}/pods"),
    ]
}

/// A namespace `name` holding an OIDCClient, a Secret and a Pod (which never runs: no kubelet)
/// named `first`.
async fn populate(client: &kube::Client, name: &str) {
    let pp = PostParams::default();
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
    match Api::<Namespace>::all(client.clone())
        .create(&pp, &namespace)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create namespace {name}: {e}"),
    }
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "app"}})).expect("sa");
    Api::<ServiceAccount>::namespaced(client.clone(), name)
        .create(&pp, &sa)
        .await
        .unwrap_or_else(|e| panic!("create serviceaccount in {name}: {e}"));
    create_objects(client, name, "first").await;
}

async fn create_objects(client: &kube::Client, namespace: &str, object: &str) {
    let pp = PostParams::default();
    let oidc: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "codemowers.cloud/v1beta1",
        "kind": "OIDCClient",
        "metadata": {"name": object, "namespace": namespace},
        "spec": {
            "displayName": object,
            "uri": "https://app.example.com",
            "redirectUris": ["https://app.example.com/cb"],
            "grantTypes": ["authorization_code"],
            "responseTypes": ["code"],
        },
    }))
    .expect("oidcclient");
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &oidc_clients())
        .create(&pp, &oidc)
        .await
        .unwrap_or_else(|e| panic!("create oidcclient {namespace}/{object}: {e}"));
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": object, "namespace": namespace},
        "stringData": {"clientSecret": "x"},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&pp, &secret)
        .await
        .unwrap_or_else(|e| panic!("create secret {namespace}/{object}: {e}"));
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": object, "namespace": namespace},
        "spec": {
            "serviceAccountName": "app",
            "containers": [{"name": "passmower", "image": "example.invalid/passmower:1"}],
        },
    }))
    .expect("pod");
    Api::<Pod>::namespaced(client.clone(), namespace)
        .create(&pp, &pod)
        .await
        .unwrap_or_else(|e| panic!("create pod {namespace}/{object}: {e}"));
}

/// GET `path` (with `query`): the status and the whole body. A watch ends when the server's
/// `timeoutSeconds` does; the client gives up 20s later at the latest.
async fn get(client: &kube::Client, path: &str, query: &str) -> (u16, String) {
    let uri = if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    };
    let request = hyper::Request::get(&uri)
        .body(kube::client::Body::empty())
        .expect("request");
    let exchange = async {
        let response = client
            .send(request)
            .await
            .unwrap_or_else(|e| panic!("GET {uri}: {e}"));
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .unwrap_or_else(|e| panic!("GET {uri}: body: {e}"))
            .to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(WATCH_SECONDS + 20), exchange)
        .await
        .unwrap_or_else(|_| panic!("GET {uri} did not end"))
}

/// A watch as Passmower's client opens it (no resourceVersion: existing objects first, as
/// ADDED), ended by the server after [`WATCH_SECONDS`]: the status and the events.
async fn watch(client: &kube::Client, path: &str) -> (u16, Vec<Value>) {
    let (status, body) = get(
        client,
        path,
        &format!("watch=true&timeoutSeconds={WATCH_SECONDS}"),
    )
    .await;
    let events = body
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{path}: event {l:?}: {e}")))
        .collect();
    (status, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_no_namespace_can_have_cannot_be_created() {
    let cluster = Cluster::shared();
    let client = cluster.admin_client().await;
    for name in uncreatable_names() {
        assert!(!is_dns1123_label(&name), "{name}");
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
        match Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
        {
            Err(kube::Error::Api(e)) => {
                assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{name}: {e}")
            }
            other => panic!("namespace {name} was not refused as invalid: {other:?}"),
        }
    }
    // And as a user would try it.
    let kubectl = PathBuf::from(
        std::env::var_os("PME_CONTROL_PLANE").expect("PME_CONTROL_PLANE names the control plane"),
    )
    .join("kubectl");
    let out = std::process::Command::new(&kubectl)
        .arg(format!(
            "--kubeconfig={}",
            cluster.admin_kubeconfig().display()
        ))
        .args(["create", "namespace", DEFAULT_IDLE_NAMESPACE])
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", kubectl.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "kubectl created {DEFAULT_IDLE_NAMESPACE}"
    );
    assert!(stderr.contains("is invalid"), "{stderr}");
    let listed = Api::<Namespace>::all(client.clone())
        .list(&Default::default())
        .await
        .expect("list namespaces");
    assert!(listed
        .items
        .iter()
        .all(|n| n.metadata.name.as_deref() != Some(DEFAULT_IDLE_NAMESPACE)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_watches_under_the_idle_namespace_are_empty_and_quiet_beside_near_misses() {
    let cluster = Cluster::shared();
    let client = cluster.admin_client().await;
    install_crds_of(&client, &upstream_dir()).await;
    let names = uncreatable_names();
    let mut misses = BTreeSet::new();
    for name in &names {
        misses.extend(near_misses(name));
    }
    assert!(misses.contains("passmower-elector-idle"), "{misses:?}");
    assert!(
        misses.contains("passmower-elector-idle-never-create"),
        "{misses:?}"
    );
    for miss in &misses {
        populate(&client, miss).await;
    }
    eprintln!("near-miss namespaces, each with an OIDCClient, a Secret and a Pod: {misses:?}");

    for name in &names {
        for path in collections(name) {
            let (status, body) = get(&client, &path, "").await;
            assert_eq!(status, 200, "LIST {path}: {body}");
            let list: Value = serde_json::from_str(&body).expect("a list");
            assert_eq!(list["items"], json!([]), "LIST {path}: {body}");
        }
    }

    // Every idle watch and one near-miss watch per collection open together; while they are
    // open, every near-miss namespace gets new objects.
    let control = misses.iter().next().expect("a near miss").clone();
    let mut watches = Vec::new();
    for name in names.iter().chain([&control]) {
        for path in collections(name) {
            let client = client.clone();
            watches.push((
                name.clone(),
                path.clone(),
                tokio::spawn(async move { watch(&client, &path).await }),
            ));
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for miss in &misses {
        create_objects(&client, miss, "second").await;
    }
    for (name, path, handle) in watches {
        let (status, events) = handle.await.expect("watch task");
        assert_eq!(status, 200, "WATCH {path}");
        if name == control {
            let names: BTreeSet<&str> = events
                .iter()
                .filter_map(|e| e["object"]["metadata"]["name"].as_str())
                .collect();
            assert_eq!(
                names,
                BTreeSet::from(["first", "second"]),
                "WATCH {path} (the near-miss control) saw: {events:?}"
            );
        } else {
            assert!(events.is_empty(), "WATCH {path}: {events:?}");
        }
    }
}

/// The first value under `key` in a chart's values.yaml (a path of mapping keys).
fn chart_value(chart: &str, keys: &[&str]) -> Value {
    let path = repo().join("charts").join(chart).join("values.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut value: Value = serde_norway::from_str(&text).expect("values.yaml");
    for key in keys {
        value = value[*key].take();
    }
    value
}

#[test]
fn the_charts_default_idle_namespace_is_the_binarys_and_needs_no_deny_policy() {
    assert_eq!(
        chart_value("passmower-elector", &["idleNamespace"]),
        DEFAULT_IDLE_NAMESPACE
    );
    assert_eq!(
        chart_value("passmower-elector-webhook", &["injection", "idleNamespace"]),
        DEFAULT_IDLE_NAMESPACE
    );
    assert_eq!(
        chart_value("passmower-elector", &["denyIdleNamespace"]),
        false
    );
    assert_eq!(
        chart_value(
            "passmower-elector-webhook",
            &["injection", "denyIdleNamespace"]
        ),
        false
    );
    // The post-renderer arguments the chart prints leave out what equals inject's default.
    let helpers = repo().join("charts/passmower-elector/templates/_helpers.tpl");
    let helpers = std::fs::read_to_string(&helpers).expect("_helpers.tpl");
    assert!(
        helpers.contains(&format!(
            "ne .Values.idleNamespace \"{DEFAULT_IDLE_NAMESPACE}\""
        )),
        "_helpers.tpl compares idleNamespace with another default than {DEFAULT_IDLE_NAMESPACE}"
    );
}

const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// Real Passmower 1.3.0 as a follower with the default idle selector, beside namespaces of
/// every near-miss spelling that hold OIDCClients (created before it starts and while it
/// runs): it watches under the idle name and makes no Kubernetes write and no Redis client
/// upsert. The same Passmower with the earlier default, whose namespace someone created,
/// reconciles what is in it (the control: the detector sees writes when there are some).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_passmower_with_the_idle_selector_writes_nothing_beside_near_misses() {
    let Some(app) = passmower_app() else {
        return;
    };
    let user = "passmower".to_owned();
    let cluster = pme_testkit::audit::AuditedCluster::start(std::slice::from_ref(&user)).await;
    let admin = cluster.admin_client().await;
    let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "passmower-all"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .expect("binding");
    Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind cluster-admin: any write Passmower tries would succeed");
    install_crds_of(&admin, &upstream_dir()).await;
    let misses = near_misses(DEFAULT_IDLE_NAMESPACE);
    for ns in misses.iter().map(String::as_str).chain(["auth"]) {
        populate(&admin, ns).await;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let redis_port = free_port();
    let _redis = start_redis(redis_port);
    let kubeconfig = cluster.kubeconfig_of(&user);
    let before = redis_keys(redis_port).unwrap_or_default();

    let offset = cluster.audit_offset();
    let follower = start_passmower(
        &app,
        &kubeconfig,
        cluster.api_addr(),
        redis_port,
        DEFAULT_IDLE_NAMESPACE,
        &dir.path().join("follower.log"),
    );
    for ns in &misses {
        create_objects(&admin, ns, "second").await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    drop(follower);
    let requests = cluster.requests_since(offset);
    let mine: Vec<_> = requests.iter().filter(|r| r.user == user).collect();
    // Any served version: 1.3.0 watches v1beta1, the later trees v1.
    let idle_watch = format!("/namespaces/{DEFAULT_IDLE_NAMESPACE}/");
    assert!(
        mine.iter().any(|r| r.verb == "watch"
            && r.uri.starts_with("/apis/codemowers.cloud/")
            && r.uri.contains(&idle_watch)),
        "the follower never watched under the idle namespace: {mine:?}"
    );
    let writes: Vec<_> = mine
        .iter()
        .filter(|r| WRITE_VERBS.contains(&r.verb.as_str()))
        .collect();
    assert!(writes.is_empty(), "the follower wrote: {writes:?}");
    let after_follower = redis_keys(redis_port).unwrap_or_default();
    let upserted: Vec<_> = after_follower.difference(&before).collect();
    let own = "oidc:Client:passmower";
    assert!(
        upserted.iter().all(|k| k.as_str() == own),
        "the follower upserted clients into Redis: {upserted:?}"
    );
    eprintln!(
        "follower ({DEFAULT_IDLE_NAMESPACE}) beside {misses:?}: 0 writes, Redis keys added: \
         {upserted:?}, requests: {:?}",
        mine.iter()
            .map(|r| format!("{} {}", r.verb, r.uri))
            .collect::<Vec<_>>()
    );

    // The control: the earlier default, whose namespace exists (it is one of the near misses).
    let old = "passmower-elector-idle-never-create";
    assert!(misses.iter().any(|m| m == old));
    let offset = cluster.audit_offset();
    let _reconciler = start_passmower(
        &app,
        &kubeconfig,
        cluster.api_addr(),
        redis_port,
        old,
        &dir.path().join("control.log"),
    );
    let wrote =
        pme_testkit::wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
            cluster.requests_since(offset).iter().any(|r| {
                r.user == user
                    && WRITE_VERBS.contains(&r.verb.as_str())
                    && r.uri.contains(&format!("/namespaces/{old}/"))
            })
        });
    assert!(
        wrote,
        "Passmower with NAMESPACE_SELECTOR={old} made no write in that existing namespace: \
         the detector would see nothing"
    );
    let control_keys = redis_keys(redis_port).unwrap_or_default();
    eprintln!("control ({old}): writes in {old}; Redis keys now {control_keys:?}");
}
