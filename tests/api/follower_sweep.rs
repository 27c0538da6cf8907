//! A follower's Redis client sweep, with real Passmower 2.4 and a real Redis. The 2.2-era and
//! 2.4 `ClientRedisReconciler` runs in every instance, whatever its `NAMESPACE_SELECTOR`, at
//! start and every `RECONCILE_INTERVAL_MS`: it removes each `oidc:Clients` member whose
//! `oidc:Client:*` record is missing (a `DEL` of the record, a `SREM` of the member). Between
//! a leader's `DEL` and its re-write of a client, a follower's sweep can so delete the record
//! the leader has just written. So a follower writes operator keys in Redis, where the write
//! fence cannot see; the follower environment `inject` renders turns its sweep off.

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, PostParams};
use passmower_elector::inject::{inject_str, InjectOptions, DEFAULT_IDLE_NAMESPACE};
use pme_testkit::fence::install_crds_of;
use pme_testkit::manifests::parse_stream;
use pme_testkit::passmower::{start_passmower_as, start_redis};
use pme_testkit::{free_port, repo};
use serde_json::json;

/// A client-set member with no record: what a leader's client delete leaves for a moment
/// between its `DEL` and its `SREM`, or a record that expired.
const GHOST: &str = "auth.ghost-client";

fn redis(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn ghost_is_member(port: u16) -> bool {
    redis(port, &["SISMEMBER", "oidc:Clients:1", GHOST]) == "1"
}

/// The `--follower-env` values `inject` gives Passmower's container: `KEY=VALUE` pairs.
fn injected_follower_env() -> Vec<(String, String)> {
    let deployment = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: passmower, namespace: auth}
spec:
  replicas: 2
  selector: {matchLabels: {app: passmower}}
  template:
    metadata: {labels: {app: passmower}}
    spec:
      serviceAccountName: passmower
      containers:
        - name: passmower
          image: docker.io/passmower/passmower:2.4.0
"#;
    let opts = InjectOptions {
        namespace: Some("auth".to_owned()),
        ..InjectOptions::new("registry.example.com/passmower-elector:test")
    };
    let out = inject_str(deployment, &opts).expect("inject");
    let docs = parse_stream(&out);
    let workload = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap_or_else(|| panic!("inject emitted no Deployment:\n{out}"));
    workload["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("the app container's args")
        .iter()
        .filter_map(|a| a.as_str()?.strip_prefix("--follower-env="))
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("KEY=VALUE");
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_sweeps_redis_unless_its_environment_turns_the_sweep_off() {
    let Some(app) = pme_testkit::passmower::app_dir(
        "PME_PASSMOWER_APP_24",
        "Point it at an npm-installed copy of ../shared/upstream/passmower-with-election",
    ) else {
        return;
    };
    let user = "passmower".to_owned();
    let cluster = pme_testkit::audit::AuditedCluster::start(std::slice::from_ref(&user)).await;
    let admin = cluster.admin_client().await;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "passmower-all"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind cluster-admin");
    install_crds_of(
        &admin,
        &repo().join("../shared/upstream/passmower-with-election"),
    )
    .await;
    let kubeconfig = cluster.kubeconfig_of(&user);
    let dir = tempfile::tempdir().expect("tempdir");
    let redis_port = free_port();
    let _redis = start_redis(redis_port);

    // A follower as every instance ran before: the idle selector, upstream's election off.
    let idle = [
        ("NAMESPACE_SELECTOR", DEFAULT_IDLE_NAMESPACE),
        ("LEADER_ELECTION_ENABLED", "false"),
    ];
    // Seeds the stale member, then starts a follower with `env`; the follower and its start.
    let seed_and_start = |env: &[(&str, &str)], log: &str| {
        redis(redis_port, &["SADD", "oidc:Clients:1", GHOST]);
        let started = Instant::now();
        let follower = start_passmower_as(
            &app,
            &kubeconfig,
            cluster.api_addr(),
            redis_port,
            env,
            &[],
            &dir.path().join(log),
        );
        (follower, started)
    };
    let (follower, started) = seed_and_start(&idle, "follower.log");
    let swept =
        pme_testkit::wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
            !ghost_is_member(redis_port)
        });
    assert!(
        swept,
        "the follower's sweep did not remove the stale member within 30 s: a follower that \
         does not sweep would need no setting"
    );
    let swept_after = started.elapsed();
    drop(follower);

    // The same follower with the follower environment `inject` renders.
    let rendered = injected_follower_env();
    assert!(
        rendered
            .iter()
            .any(|(k, v)| k == "RECONCILE_INTERVAL_MS" && v == "0"),
        "inject's follower environment does not turn the sweep off: {rendered:?}"
    );
    let mut env: Vec<(&str, &str)> = idle.to_vec();
    env.extend(rendered.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let (follower, started) = seed_and_start(&env, "follower-off.log");
    // Three times as long as the sweeping follower took from its start, and at least 10 s.
    let watch = (swept_after * 3).max(Duration::from_secs(10));
    while started.elapsed() < watch {
        assert!(
            ghost_is_member(redis_port),
            "a follower with inject's environment {env:?} swept Redis {:?} after its start",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(follower);
    eprintln!(
        "follower sweep: removed the stale member {swept_after:?} after start; with \
         RECONCILE_INTERVAL_MS=0 kept it for {watch:?}"
    );
}
