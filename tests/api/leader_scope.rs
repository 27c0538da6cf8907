//! The leader's scope for an app container that sets no `NAMESPACE_SELECTOR`, against a private
//! kube-apiserver, with real Passmower 1.3.0 (`PME_PASSMOWER_APP`) and a real Redis.
//!
//! Passmower reads an unset (or empty) `NAMESPACE_SELECTOR` as its pod's own namespace and then
//! watches only there. A retrofitted pod must keep that scope: the supervisor, run with exactly
//! the flags `inject` writes for such a container, and with credentials that could write
//! anywhere (cluster-admin), reconciles an OIDCClient of its own namespace and leaves those of
//! another namespace alone — neither claimed nor given a Secret, and its promotion check
//! (`--converge-oidc-clients`) does not hand back a client there that carries this Deployment's
//! claim.

use std::time::Duration;

use crate::product::{leader, ElectorNamespaces, Sandbox, BIN};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use passmower_elector::inject::{inject_str, InjectOptions};
use passmower_elector::supervise::converge::{instance_name, secret_name};
use pme_testkit::fence::{create_client, install_crds, oidc_clients, FakePod};
use pme_testkit::manifests::parse_stream;
use pme_testkit::passmower::{passmower_app, redis_keys, start_passmower_as, start_redis};
use pme_testkit::{free_port, Cluster};
use serde_json::{json, Value};

const SA: &str = pme_testkit::cluster::ELECTOR_SERVICE_ACCOUNT;

/// A Passmower Deployment whose container sets no `NAMESPACE_SELECTOR` (no env at all).
fn deployment(namespace: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: passmower, namespace: {namespace}}}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: passmower}}
  template:
    metadata:
      labels: {{app: passmower}}
    spec:
      serviceAccountName: {SA}
      containers:
        - name: passmower
          image: docker.io/codemowers/passmower:1.3.0
"#
    )
}

/// The `supervise` flags (between `supervise` and `--`) `inject` gives the app container of
/// [`deployment`].
fn injected_supervise_flags(namespace: &str) -> Vec<String> {
    let opts = InjectOptions {
        namespace: Some(namespace.to_owned()),
        ..InjectOptions::new("registry.example.com/passmower-elector:test")
    };
    let out = inject_str(&deployment(namespace), &opts).expect("inject");
    let docs = parse_stream(&out);
    let workload = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap_or_else(|| panic!("inject emitted no Deployment:\n{out}"));
    let args: Vec<String> = workload["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("the app container's args")
        .iter()
        .map(|a| a.as_str().expect("a string argument").to_owned())
        .collect();
    assert_eq!(
        args.first().map(String::as_str),
        Some("supervise"),
        "{args:?}"
    );
    let end = args
        .iter()
        .position(|a| a == "--")
        .expect("`--` in the args");
    args[1..end].to_vec()
}

/// The OIDCClient `name` of `ns`, as stored.
async fn client(admin: &kube::Client, ns: &str, name: &str) -> DynamicObject {
    Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &oidc_clients())
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("read OIDCClient {ns}/{name}: {e}"))
}

fn claim(obj: &DynamicObject) -> Option<String> {
    obj.data
        .pointer("/status/instance")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

async fn has_secret(admin: &kube::Client, ns: &str, client: &str) -> bool {
    Api::<Secret>::namespaced(admin.clone(), ns)
        .get_opt(&secret_name(client))
        .await
        .unwrap_or_else(|e| panic!("read the Secret of {ns}/{client}: {e}"))
        .is_some()
}

fn log_of(path: &std::path::Path) -> String {
    let mut text = std::fs::read_to_string(path).unwrap_or_default();
    text.push_str(&std::fs::read_to_string(path.with_extension("err")).unwrap_or_default());
    text
}

/// SIGTERM to the supervisor (exec'd by the wrapper shell), which stops its instances' groups
/// before it exits.
fn stop_supervisor(mut supervisor: pme_testkit::passmower::Killed) {
    let pid = nix::unistd::Pid::from_raw(supervisor.0.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let gone = pme_testkit::wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
        matches!(supervisor.0.try_wait(), Ok(Some(_)))
    });
    assert!(gone, "the supervisor did not exit within 30s of SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_for_a_container_without_a_selector_reconciles_only_its_own_namespace() {
    let Some(app) = passmower_app() else {
        return;
    };
    // A control plane of its own: a leader that watched every namespace would otherwise
    // reconcile other tests' clients.
    let cluster = Cluster::start_private();
    let admin = cluster.admin_client().await;
    install_crds(&cluster).await;
    let own = cluster.new_namespace().await;
    let other = cluster.new_namespace().await;
    // Rights everywhere, so only the selector keeps the operator in its namespace.
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("passmower-all-{}", own.name)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": own.name}],
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind cluster-admin to the app's ServiceAccount");
    let pod = FakePod::create(&cluster, &own.name, "passmower-a", SA).await;

    create_client(&admin, &own.name, "mine").await;
    create_client(&admin, &other.name, "theirs").await;
    // A client of the other namespace that carries this Deployment's claim and has no Secret
    // (as a leader that once watched every namespace would have left it): the promotion check
    // hands such a client back only within the leader's scope.
    let ours = instance_name(&own.name, Some("passmower"));
    create_client(&admin, &other.name, "claimed").await;
    Api::<DynamicObject>::namespaced_with(admin.clone(), &other.name, &oidc_clients())
        .patch_status(
            "claimed",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"instance": ours}})),
        )
        .await
        .expect("claim the other namespace's client for this Deployment");

    let flags = injected_supervise_flags(&own.name);
    assert!(
        flags
            .iter()
            .any(|f| f.starts_with("--follower-env=NAMESPACE_SELECTOR=")),
        "{flags:?}"
    );
    let sb = Sandbox::new();
    sb.write_grant(&leader(1, 1, Duration::from_secs(100)));
    let flag_file = format!("--flag-file={}", sb.flag_file().display());
    // The pod's paths and fixed ports become the sandbox's: the flag file, a free toggle port,
    // and no fixed port for the leader instance's metrics (the rest of the map moves it).
    let mut wrapper: Vec<&str> = vec![BIN, "supervise"];
    for f in &flags {
        if f.starts_with("--flag-file=") {
            wrapper.push(&flag_file);
        } else if f.starts_with("--listen=") {
            wrapper.push("--listen=127.0.0.1:0");
        } else if f.starts_with("--leader-port-map=") && f != "--leader-port-map=*=0" {
            continue;
        } else {
            wrapper.push(f);
        }
    }
    wrapper.push("--");
    eprintln!("supervise as inject wrote it: {wrapper:?}");

    let redis_port = free_port();
    let _redis = start_redis(redis_port);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("supervised.log");
    let env = [
        ("PME_POD_NAMESPACE", own.name.as_str()),
        ("DEPLOYMENT_NAME", "passmower"),
    ];
    let supervised = start_passmower_as(
        &app,
        &pod.kubeconfig,
        cluster.api_addr(),
        redis_port,
        &env,
        &wrapper,
        &log,
    );

    let mut reconciled = false;
    for _ in 0..300 {
        let mine = client(&admin, &own.name, "mine").await;
        if claim(&mine).as_deref() == Some(ours.as_str())
            && has_secret(&admin, &own.name, "mine").await
        {
            reconciled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Long enough for a leader watching every namespace to reach the others' clients: they
    // arrive in the same initial list as its own.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let theirs = client(&admin, &other.name, "theirs").await;
    let claimed = client(&admin, &other.name, "claimed").await;
    let theirs_secret = has_secret(&admin, &other.name, "theirs").await;
    let claimed_secret = has_secret(&admin, &other.name, "claimed").await;
    let keys = redis_keys(redis_port).unwrap_or_default();
    stop_supervisor(supervised);
    let log = log_of(&log);
    assert!(
        reconciled,
        "the leader never reconciled its own namespace's client:\n{log}"
    );
    assert_eq!(
        theirs.data.get("status"),
        None,
        "the leader touched another namespace's client:\n{log}"
    );
    assert!(
        !theirs_secret,
        "the leader wrote a Secret in another namespace:\n{log}"
    );
    assert_eq!(
        claim(&claimed).as_deref(),
        Some(ours.as_str()),
        "another namespace's claimed client was handed back or reclaimed:\n{log}"
    );
    assert!(
        !claimed_secret,
        "the leader wrote a Secret in another namespace:\n{log}"
    );
    let foreign: Vec<&String> = keys
        .iter()
        .filter(|k| k.starts_with(&format!("oidc:Client:{}.", other.name)))
        .collect();
    assert!(
        foreign.is_empty(),
        "another namespace's clients in Redis: {foreign:?}"
    );
    eprintln!(
        "own namespace {} reconciled; {} untouched; Redis clients: {keys:?}",
        own.name, other.name
    );
}
