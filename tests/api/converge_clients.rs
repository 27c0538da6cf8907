//! A client operator's write sequence cut in half at a takeover, against the real kube-apiserver
//! with the write fence, real Passmower 1.3.0 (`PME_PASSMOWER_APP`) and a real Redis.
//!
//! Passmower's OIDCClient operator, when a claimed client has no Secret, generates a secret,
//! deletes and creates the Secret and upserts the client into Redis (1.3.0
//! `src/operators/kube-oidc-client-operator.js` `#updateOIDCClient`); `createSecret` logs a
//! refusal and returns, so the upsert runs anyway. On start it skips every claimed client
//! already in Redis (`#createOIDCClient`). So an old leader whose create the fence refuses
//! (the Lease moved on between its read and its write) leaves Redis holding a secret no Secret
//! holds, and the next leader never creates the Secret. The supervisor's
//! `--converge-oidc-clients` check, run before the leader instance starts, hands such a client
//! back to the operator, which then claims it and creates the Secret.

use std::time::Duration;

use crate::product::Sandbox;
use crate::product::{install_fence, ElectorNamespaces};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use passmower_elector::inject::fence::DENIAL_PREFIX;
use pme_testkit::fence::{
    create_client, grant_passmower_rights, install_crds, oidc_clients, remove_fence, set_holder,
    FakePod,
};
use pme_testkit::free_port;
use pme_testkit::passmower::{passmower_app, start_passmower_as, start_redis};
use pme_testkit::Cluster;
use serde_json::{json, Value};

const SA: &str = pme_testkit::cluster::ELECTOR_SERVICE_ACCOUNT;
const CLIENT: &str = "app";

fn secret_name() -> String {
    format!("oidc-client-{CLIENT}-owner-secrets")
}

/// The client secret of the client's Redis record (`oidc:Client:<ns>.<name>`), if any.
fn redis_client_secret(port: u16, ns: &str) -> Option<String> {
    let out = std::process::Command::new("redis-cli")
        .args([
            "-p",
            &port.to_string(),
            "GET",
            &format!("oidc:Client:{ns}.{CLIENT}"),
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let record: Value = serde_json::from_str(text.trim()).ok()?;
    record["client_secret"].as_str().map(str::to_owned)
}

/// The client secret the client's Secret holds, if it exists.
async fn secret_client_secret(admin: &kube::Client, ns: &str) -> Option<String> {
    let secret = Api::<Secret>::namespaced(admin.clone(), ns)
        .get_opt(&secret_name())
        .await
        .expect("read the client Secret")?;
    let bytes = secret.data?.get("OIDC_CLIENT_SECRET")?.0.clone();
    String::from_utf8(bytes).ok()
}

async fn client_instance(admin: &kube::Client, ns: &str) -> Option<String> {
    let obj = Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &oidc_clients())
        .get(CLIENT)
        .await
        .expect("read the OIDCClient");
    obj.data
        .pointer("/status/instance")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// SIGTERM to the supervisor (exec'd by the wrapper shell, so the same PID), which stops both
/// its instances' groups before it exits; a SIGKILL would leave them running.
fn stop_supervisor(mut supervisor: pme_testkit::passmower::Killed) {
    let pid = nix::unistd::Pid::from_raw(supervisor.0.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let gone = pme_testkit::wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
        matches!(supervisor.0.try_wait(), Ok(Some(_)))
    });
    assert!(gone, "the supervisor did not exit within 30s of SIGTERM");
}

fn log_of(path: &std::path::Path) -> String {
    let mut text = std::fs::read_to_string(path).unwrap_or_default();
    text.push_str(&std::fs::read_to_string(path.with_extension("err")).unwrap_or_default());
    text
}

/// Pod A leads and reconciles the client; its Secret goes missing; the Lease moves to pod B
/// while A still runs, and A's next reconcile (a change to the client) has its Secret create
/// refused by the fence but upserts Redis. B's operator started plainly (what a leader instance
/// was) leaves the Secret missing; B's supervisor with `--converge-oidc-clients` gets it
/// created, with the secret Redis holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_create_refused_at_a_takeover_is_reconciled_by_the_next_leader() {
    let Some(app) = passmower_app() else {
        return;
    };
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    install_crds(cluster).await;
    let ns = cluster.new_namespace().await;
    grant_passmower_rights(&admin, &ns.name, SA).await;
    let fence_name = install_fence(&admin, &ns).await;
    let a = FakePod::create(cluster, &ns.name, "passmower-a", SA).await;
    let b = FakePod::create(cluster, &ns.name, "passmower-b", SA).await;
    set_holder(&admin, &ns, Some(&a.holder("elector"))).await;
    let redis_port = free_port();
    let _redis = start_redis(redis_port);
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("PME_POD_NAMESPACE", ns.name.as_str()),
        ("DEPLOYMENT_NAME", "passmower"),
    ];
    let mut leader_env = env.to_vec();
    leader_env.push(("NAMESPACE_SELECTOR", ns.name.as_str()));

    // 1. A leads: the client is claimed, its Secret created, its record in Redis.
    create_client(&admin, &ns.name, CLIENT).await;
    let a_log = dir.path().join("a.log");
    let old_leader = start_passmower_as(
        &app,
        &a.kubeconfig,
        cluster.api_addr(),
        redis_port,
        &leader_env,
        &[],
        &a_log,
    );
    let mut first = None;
    for _ in 0..150 {
        let stored = secret_client_secret(&admin, &ns.name).await;
        if stored.is_some() && stored == redis_client_secret(redis_port, &ns.name) {
            first = stored;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let first = first.unwrap_or_else(|| {
        panic!(
            "A never reconciled the client (Secret and Redis agreeing):\n{}",
            log_of(&a_log)
        )
    });
    assert_eq!(
        client_instance(&admin, &ns.name).await.as_deref(),
        Some(format!("{}-passmower", ns.name).as_str())
    );

    // 2. The Secret goes missing, the Lease moves to B (the fence now refuses A), and A
    //    reconciles once more before its supervisor would have stopped it.
    Api::<Secret>::namespaced(admin.clone(), &ns.name)
        .delete(&secret_name(), &DeleteParams::default())
        .await
        .expect("delete the client Secret");
    set_holder(&admin, &ns, Some(&b.holder("elector"))).await;
    let probe: Secret =
        serde_json::from_value(json!({"metadata": {"name": "probe"}})).expect("secret");
    let mut refused = false;
    for _ in 0..150 {
        match Api::<Secret>::namespaced(a.client.clone(), &ns.name)
            .create(&PostParams::default(), &probe)
            .await
        {
            Err(kube::Error::Api(e)) if e.message.contains(DENIAL_PREFIX) => {
                refused = true;
                break;
            }
            Ok(_) => {
                let _ = Api::<Secret>::namespaced(admin.clone(), &ns.name)
                    .delete("probe", &DeleteParams::default())
                    .await;
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        refused,
        "the fence never refused A after the Lease moved to B"
    );
    Api::<DynamicObject>::namespaced_with(admin.clone(), &ns.name, &oidc_clients())
        .patch(
            CLIENT,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "1"}}})),
        )
        .await
        .expect("touch the OIDCClient");
    let mut phantom = None;
    for _ in 0..150 {
        match redis_client_secret(redis_port, &ns.name) {
            Some(s) if s != first => {
                phantom = Some(s);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let phantom =
        phantom.unwrap_or_else(|| panic!("A never re-reconciled the client:\n{}", log_of(&a_log)));
    drop(old_leader);
    assert!(
        log_of(&a_log).contains(DENIAL_PREFIX),
        "A's Secret create was not refused by the fence:\n{}",
        log_of(&a_log)
    );
    assert_eq!(
        secret_client_secret(&admin, &ns.name).await,
        None,
        "the refused create left a Secret"
    );
    eprintln!("cut in half: Secret missing, Redis holds a new secret no Secret holds");

    // 3a. B's operator started as it is (the leader instance without the check): it skips the
    //     client, which is in Redis, and the Secret stays missing.
    let b_plain_log = dir.path().join("b-plain.log");
    let plain = start_passmower_as(
        &app,
        &b.kubeconfig,
        cluster.api_addr(),
        redis_port,
        &leader_env,
        &[],
        &b_plain_log,
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    drop(plain);
    assert_eq!(
        secret_client_secret(&admin, &ns.name).await,
        None,
        "Passmower 1.3.0 recreated the Secret on start after all: the finding is wrong"
    );
    eprintln!("reproduced: a new leader's operator leaves the Secret missing");

    // 3b. B's supervisor with the check, as leader: the Secret is created, and it agrees with
    //     Redis.
    let sb = Sandbox::new();
    sb.write_grant(&crate::product::leader(1, 1, Duration::from_secs(100)));
    let flag = sb.flag_file().to_string_lossy().into_owned();
    let idle = passmower_elector::inject::DEFAULT_IDLE_NAMESPACE;
    let leader_selector = format!("NAMESPACE_SELECTOR={}", ns.name);
    let follower_selector = format!("NAMESPACE_SELECTOR={idle}");
    // As inject sets it: the leader instance's metrics server (9090, with /health) on a fixed
    // loopback port, probed there.
    let health_port = free_port();
    let health_map = format!("--leader-port-map=9090={health_port}");
    let health_url = format!("--leader-health-url=http://127.0.0.1:{health_port}/health");
    let wrapper = [
        crate::product::BIN,
        "supervise",
        "--flag-file",
        &flag,
        "--listen",
        "127.0.0.1:0",
        "--on-change=leader-instance",
        &health_map,
        "--leader-port-map=*=0",
        &health_url,
        "--leader-health-period=2s",
        "--leader-env",
        &leader_selector,
        "--follower-env",
        &follower_selector,
        "--converge-oidc-clients",
        "--",
    ];
    let b_log = dir.path().join("b-supervised.log");
    let supervised = start_passmower_as(
        &app,
        &b.kubeconfig,
        cluster.api_addr(),
        redis_port,
        &env,
        &wrapper,
        &b_log,
    );
    let mut recreated = None;
    for _ in 0..300 {
        let stored = secret_client_secret(&admin, &ns.name).await;
        if stored.is_some() && stored == redis_client_secret(redis_port, &ns.name) {
            recreated = stored;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Real Passmower's /health (a Redis write and read-back, a list of OIDCUsers) answers 200
    // on the moved port, and the supervisor's probes there (every 2s) never restarted it. The
    // first ones may fail: Passmower listens only once Redis is connected, and its boot took
    // about 2.5s here; 3 failures in a row, 6s, cover that.
    let health = if recreated.is_some() {
        tokio::time::sleep(Duration::from_secs(4)).await;
        crate::product::http(health_port, "GET", "/health", b"").ok()
    } else {
        None
    };
    stop_supervisor(supervised);
    let log = log_of(&b_log);
    remove_fence(&admin, &fence_name).await;
    let recreated = recreated.unwrap_or_else(|| {
        panic!("the new leader did not create the client Secret agreeing with Redis:\n{log}")
    });
    eprintln!(
        "converged: Secret recreated ({} chars), Redis agrees; phantom was {} chars",
        recreated.len(),
        phantom.len()
    );
    assert_eq!(
        client_instance(&admin, &ns.name).await.as_deref(),
        Some(format!("{}-passmower", ns.name).as_str()),
        "the client is claimed again"
    );
    assert!(
        log.contains("has no client Secret"),
        "the supervisor did not report the client:\n{log}"
    );
    assert_eq!(
        health.as_ref().map(|(code, _)| *code),
        Some(200),
        "Passmower's /health on the leader instance's moved metrics port: {health:?}\n{log}"
    );
    assert!(
        !log.contains("failed its health probe too often"),
        "the leader instance was restarted for its /health:\n{log}"
    );
}

/// The check on many clients (its Secret reads overlap): of 40 OIDCClients, 36 claimed by this
/// Deployment, 5 of those without a Secret, and 4 claimed by nobody (2 without a Secret).
/// Exactly the 5 are reported and handed back, in the order listed; the other claims stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_hands_back_exactly_the_claimed_clients_without_a_secret() {
    use passmower_elector::supervise::converge::{check, instance_name, Scope};
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    install_crds(cluster).await;
    let ns = cluster.new_namespace().await;
    let instance = instance_name(&ns.name, Some("passmower"));
    let clients = Api::<DynamicObject>::namespaced_with(admin.clone(), &ns.name, &oidc_clients());
    let secrets = Api::<Secret>::namespaced(admin.clone(), &ns.name);
    let name = |i: usize| format!("client-{i:02}");
    let unclaimed = |i: usize| i >= 36;
    // The claimed clients without a Secret, then two unclaimed ones.
    const MISSING: [usize; 5] = [3, 11, 19, 27, 35];
    let without_secret = |i: usize| MISSING.contains(&i) || [37, 39].contains(&i);
    for i in 0..40 {
        create_client(&admin, &ns.name, &name(i)).await;
        if !unclaimed(i) {
            clients
                .patch_status(
                    &name(i),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"instance": instance}})),
                )
                .await
                .expect("claim the client");
        }
        if !without_secret(i) {
            let secret: Secret = serde_json::from_value(json!({"metadata": {
                "name": passmower_elector::supervise::converge::secret_name(&name(i))}}))
            .expect("secret");
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .expect("create the client Secret");
        }
    }

    let out = check(&admin, &Scope::Namespace(ns.name.clone()), &instance)
        .await
        .expect("the check ran");

    let expected: Vec<String> = MISSING
        .iter()
        .map(|&i| format!("{}/{}", ns.name, name(i)))
        .collect();
    assert_eq!(out.checked, 36, "{out:?}");
    assert_eq!(out.missing, expected, "{out:?}");
    assert_eq!(out.released, expected, "{out:?}");
    assert!(out.failed.is_empty() && out.skipped.is_empty(), "{out:?}");
    for i in 0..40 {
        let obj = clients.get(&name(i)).await.expect("read the OIDCClient");
        let claim = obj.data.pointer("/status/instance").and_then(Value::as_str);
        let released = MISSING.contains(&i);
        let want = (!unclaimed(i) && !released).then_some(instance.as_str());
        assert_eq!(claim, want, "{}", name(i));
    }
}
