//! `passmower-elector webhook` against a real kube-apiserver, which calls it on loopback
//! through a MutatingWebhookConfiguration (`clientConfig.url`): what the API server stores for
//! pods that opt in and for those that do not, the Lease permission check, a webhook that is
//! down under both failure policies, certificate rotation under load, and bad HTTP input.
//! No kubelet runs here: the assertions are on the pods the API server stores.

use std::time::{Duration, Instant};

use crate::product::elector_lease_rules;
use crate::webhook_harness::*;
use k8s_openapi::api::core::v1::Pod;
use passmower_elector::inject::{inject, InjectOptions};
use pme_testkit::{Cluster, DEFAULT_LEASE_NAME};
use serde_json::{json, Value};

const LEASE_ANNOTATION: &str = "passmower-elector.io/lease";
const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The Deployment the test pods belong to, and so their Lease's name.
const DEPLOYMENT: &str = "passmower";

/// A fresh namespace whose `passmower` ServiceAccount may hold Lease [`DEPLOYMENT`] (what the
/// chart's Role grants), as the webhook checks before injecting.
async fn namespace(cluster: &Cluster) -> pme_testkit::TestNs {
    cluster
        .new_namespace_with(DEPLOYMENT, &elector_lease_rules(DEPLOYMENT))
        .await
}

/// A pod spec as JSON with what differs between two pods of one spec taken out: the
/// ServiceAccount token volume (its name is random) and its mounts.
fn comparable_spec(pod: &Pod) -> Value {
    let mut spec = serde_json::to_value(pod.spec.as_ref().expect("spec")).expect("json");
    let token = |v: &Value| {
        v["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("kube-api-access-"))
    };
    if let Some(volumes) = spec["volumes"].as_array_mut() {
        volumes.retain(|v| !token(v));
    }
    for list in ["initContainers", "containers"] {
        for c in spec[list].as_array_mut().into_iter().flatten() {
            if let Some(mounts) = c["volumeMounts"].as_array_mut() {
                mounts.retain(|m| !token(m));
            }
        }
    }
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opted_in_pod_is_stored_with_the_elector_and_others_are_untouched() {
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    let labeled = namespace(cluster).await;
    let unlabeled = namespace(cluster).await;
    opt_in(&admin, &labeled.name).await;
    let mut webhook = Webhook::start("pme-webhook-basic", &cluster.admin_kubeconfig(), &[]);
    create_configuration(
        &admin,
        "pme-webhook-basic",
        &webhook.url(),
        &labeled.name,
        "Fail",
    )
    .await;
    webhook.wait_ready(Duration::from_secs(30));
    wait_effective(&admin, &labeled.name, Duration::from_secs(30)).await;

    // A pod of Deployment "passmower" in the opted-in namespace.
    let pod = create_pod(
        &admin,
        &labeled.name,
        &replicaset_pod(DEPLOYMENT, json!({})),
    )
    .await
    .expect("the opted-in pod is admitted");
    let (init, containers) = container_names(&pod);
    assert_eq!(init, ["passmower-elector-install", "passmower-elector"]);
    assert_eq!(containers, ["passmower"]);
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations[LEASE_ANNOTATION], "passmower",
        "named after the Deployment"
    );
    assert!(annotations.contains_key("passmower-elector.io/injected"));
    let spec = pod.spec.as_ref().unwrap();
    let elector = &spec.init_containers.as_ref().unwrap()[1];
    assert!(elector
        .args
        .as_ref()
        .unwrap()
        .contains(&"--lease-name=passmower".to_owned()));
    // The API server re-ran its own ServiceAccount admission after our patch: the elector
    // has the token it needs to reach the API from a real pod.
    assert!(
        elector
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == TOKEN_PATH),
        "the elector has no ServiceAccount token mount: {:?}",
        elector.volume_mounts
    );
    assert_eq!(
        spec.containers[0].command.as_deref(),
        Some(&["/var/run/passmower-elector-bin/passmower-elector".to_owned()][..])
    );

    // One implementation, two front doors: `inject`'s template for the same pod, created
    // where no webhook acts, is stored with the same spec.
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: passmower\nspec:\n  selector:\n    matchLabels: {{app: passmower}}\n  template:\n    metadata:\n      labels: {{app: passmower}}\n    spec:\n{}",
        serde_norway::to_string(&replicaset_pod(DEPLOYMENT, json!({}))["spec"])
            .unwrap()
            .lines()
            .map(|l| format!("      {l}\n"))
            .collect::<String>()
    );
    let opts = InjectOptions {
        namespace: Some(unlabeled.name.clone()),
        ..InjectOptions::new(IMAGE)
    };
    let injected = inject(&deployment, &opts).expect("inject");
    let template: Value =
        serde_json::to_value(&injected.rewrites[0].after["spec"]["template"]["spec"]).unwrap();
    let mut from_inject = replicaset_pod(DEPLOYMENT, json!({}));
    from_inject["spec"] = template;
    let stored = create_pod(&admin, &unlabeled.name, &from_inject)
        .await
        .expect("inject's pod is admitted");
    assert_eq!(comparable_spec(&stored), comparable_spec(&pod));

    // The same injected pod created in the opted-in namespace is left as it is.
    let again = create_pod(&admin, &labeled.name, &from_inject)
        .await
        .expect("admitted");
    assert_eq!(container_names(&again).0.len(), 2, "injected twice");
    assert_eq!(comparable_spec(&again), comparable_spec(&stored));

    // Untouched: no opt-in label on the namespace, a pod that opts out, a pod without the
    // target container.
    let plain = create_pod(
        &admin,
        &unlabeled.name,
        &replicaset_pod(DEPLOYMENT, json!({})),
    )
    .await
    .expect("admitted");
    assert!(!is_injected(&plain));
    let opted_out = replicaset_pod("passmower", json!({"labels": {INJECT_LABEL: "disabled"}}));
    let opted_out = create_pod(&admin, &labeled.name, &opted_out)
        .await
        .expect("admitted");
    assert!(!is_injected(&opted_out));
    let mut redis = replicaset_pod("redis", json!({}));
    redis["spec"]["containers"][0]["name"] = json!("redis");
    let redis = create_pod(&admin, &labeled.name, &redis)
        .await
        .expect("admitted");
    assert!(!is_injected(&redis));
    assert!(redis.metadata.annotations.unwrap_or_default().is_empty());
    assert_eq!(
        webhook.metric("passmower_elector_webhook_admissions_total{outcome=\"refused\"}"),
        0.0
    );
}

/// `--image-pull-secret`: the stored pod pulls the sidecar image with the webhook's Secret,
/// listed after the pod's own; a memory limit sized for one app instance is warned about in
/// the pod's annotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_gets_the_sidecars_pull_secret_after_its_own_and_a_memory_warning() {
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    let ns = namespace(cluster).await;
    opt_in(&admin, &ns.name).await;
    let mut webhook = Webhook::start(
        "pme-webhook-pull-secrets",
        &cluster.admin_kubeconfig(),
        &["--image-pull-secret=sidecar-registry,app-registry"],
    );
    create_configuration(
        &admin,
        "pme-webhook-pull-secrets",
        &webhook.url(),
        &ns.name,
        "Fail",
    )
    .await;
    webhook.wait_ready(Duration::from_secs(30));
    wait_effective(&admin, &ns.name, Duration::from_secs(30)).await;

    let mut pod = replicaset_pod(DEPLOYMENT, json!({}));
    pod["spec"]["imagePullSecrets"] = json!([{"name": "app-registry"}]);
    pod["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "256Mi"}});
    let stored = create_pod(&admin, &ns.name, &pod)
        .await
        .expect("the opted-in pod is admitted");
    assert!(is_injected(&stored));
    let secrets: Vec<String> = stored
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(secrets, ["app-registry", "sidecar-registry"]);
    let annotations = stored.metadata.annotations.unwrap_or_default();
    let warnings = annotations
        .get("passmower-elector.io/warnings")
        .expect("the warnings annotation");
    assert!(
        warnings
            .contains("spec.containers[passmower].resources.limits.memory is 256Mi, below 400Mi"),
        "{warnings}"
    );

    // A pod without a list of its own gets one.
    let plain = create_pod(&admin, &ns.name, &replicaset_pod(DEPLOYMENT, json!({})))
        .await
        .expect("admitted");
    let secrets: Vec<String> = plain
        .spec
        .and_then(|s| s.image_pull_secrets)
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(secrets, ["sidecar-registry", "app-registry"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_service_account_may_not_update_its_lease_is_refused_without_saying_why() {
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    // The namespace's Role allows Lease DEFAULT_LEASE_NAME only.
    let ns = cluster
        .new_namespace_with(DEFAULT_LEASE_NAME, &elector_lease_rules(DEFAULT_LEASE_NAME))
        .await;
    opt_in(&admin, &ns.name).await;
    let mut webhook = Webhook::start("pme-webhook-rbac", &cluster.admin_kubeconfig(), &[]);
    create_configuration(&admin, "pme-webhook-rbac", &webhook.url(), &ns.name, "Fail").await;
    webhook.wait_ready(Duration::from_secs(30));

    let allowed = replicaset_pod(
        "passmower",
        json!({"annotations": {LEASE_ANNOTATION: DEFAULT_LEASE_NAME}}),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let pod = loop {
        match create_pod(&admin, &ns.name, &allowed).await {
            Ok(pod) if is_injected(&pod) => break pod,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            other => panic!("the permitted pod was not injected: {other:?}"),
        }
    };
    assert_eq!(
        pod.metadata.annotations.unwrap_or_default()[LEASE_ANNOTATION],
        DEFAULT_LEASE_NAME
    );

    // Its Lease would be "passmower" (the Deployment's name), which the Role does not allow.
    // Whoever sends the review learns only that the pod was refused: the answer names neither
    // the ServiceAccount nor the Lease, so it cannot be used to probe RBAC; it is the words
    // every withheld refusal gets. The detail is in the webhook's log, under the request's uid.
    let err = create_pod(&admin, &ns.name, &replicaset_pod(DEPLOYMENT, json!({})))
        .await
        .expect_err("refused");
    let kube::Error::Api(status) = &err else {
        panic!("{err:?}");
    };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    let message = &status.message;
    let withheld = format!(
        "{}/Pod/{DEPLOYMENT}-7f9c6-* opts in to passmower-elector but was refused; the reason \
         is in the passmower-elector webhook's log (request ",
        ns.name
    );
    assert!(message.contains(&withheld), "{message}");
    let lease = format!("{}/passmower", ns.name);
    for leak in ["ServiceAccount", "Lease", "RBAC", LEASE_ANNOTATION, &lease] {
        assert!(!message.contains(leak), "{leak:?} leaks in: {message}");
    }
    let uid = message
        .rsplit_once("(request ")
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no request uid in: {message}"))
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let logs = webhook.process.logs();
        let detail = logs
            .lines()
            .find(|l| l.contains(&uid) && l.contains("withheld"))
            .map(str::to_owned);
        if let Some(line) = detail {
            for part in ["may not update Lease", &lease, "ServiceAccount"] {
                assert!(
                    line.contains(part),
                    "missing {part:?} in the log line: {line}"
                );
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no log line for request {uid}:\n{logs}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_is_down_admits_untouched_with_ignore_and_refuses_clearly_with_fail() {
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    // Nothing listens on this port.
    let url = format!("https://127.0.0.1:{}/mutate", free_port());
    for (policy, name) in [
        ("Ignore", "pme-webhook-down-ignore"),
        ("Fail", "pme-webhook-down-fail"),
    ] {
        let ns = namespace(cluster).await;
        opt_in(&admin, &ns.name).await;
        create_configuration(&admin, name, &url, &ns.name, policy).await;
        // The API server acts on a new configuration a moment after it is written: retry
        // until the outcome is the policy's (bounded).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let result = create_pod(&admin, &ns.name, &replicaset_pod(DEPLOYMENT, json!({}))).await;
            match (policy, result) {
                ("Ignore", Ok(pod)) => {
                    assert!(!is_injected(&pod));
                    // Admitted even once the configuration is in force: its call is made
                    // and fails, which only the Fail case can show; here it must never refuse.
                    break;
                }
                ("Fail", Err(e)) => {
                    let message = e.to_string();
                    assert!(
                        message.contains("failed calling webhook")
                            && message.contains("pods.passmower-elector.io"),
                        "{message}"
                    );
                    break;
                }
                ("Ignore", Err(e)) => panic!("Ignore refused a pod: {e}"),
                (_, Ok(pod)) => {
                    assert!(!is_injected(&pod));
                    assert!(Instant::now() < deadline, "Fail never refused");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                _ => unreachable!(),
            }
        }
        if policy == "Ignore" {
            // Several more, now that the configuration has had time to be in force.
            tokio::time::sleep(Duration::from_secs(2)).await;
            for _ in 0..3 {
                let pod = create_pod(&admin, &ns.name, &replicaset_pod(DEPLOYMENT, json!({})))
                    .await
                    .expect("Ignore admits");
                assert!(!is_injected(&pod));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotation_while_pods_are_created_loses_no_admission() {
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    let ns = namespace(cluster).await;
    opt_in(&admin, &ns.name).await;
    // 8s certificates renewed at two thirds: a rotation about every 5.5s (with the 1s delay).
    // Connections are closed after their first response past 100ms, so the API server makes
    // TLS handshakes all along (a kept-alive connection would hide a swap made too early).
    let mut webhook = Webhook::start(
        "pme-webhook-rotation",
        &cluster.admin_kubeconfig(),
        &["--cert-validity=8s", "--max-connection-age=100ms"],
    );
    create_configuration(
        &admin,
        "pme-webhook-rotation",
        &webhook.url(),
        &ns.name,
        "Fail",
    )
    .await;
    webhook.wait_ready(Duration::from_secs(30));
    wait_effective(&admin, &ns.name, Duration::from_secs(30)).await;

    let served_before = webhook.metric("passmower_elector_webhook_certificates_served_total");
    let started = Instant::now();
    let (mut created, mut failures) = (0u32, Vec::new());
    // Bounded in time and count.
    while started.elapsed() < Duration::from_secs(20) && created + (failures.len() as u32) < 600 {
        match create_pod(&admin, &ns.name, &replicaset_pod(DEPLOYMENT, json!({}))).await {
            Ok(pod) if is_injected(&pod) => created += 1,
            Ok(pod) => failures.push(format!(
                "{:?} stored without the elector",
                pod.metadata.name
            )),
            Err(e) => failures.push(e.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rotations =
        webhook.metric("passmower_elector_webhook_certificates_served_total") - served_before;
    eprintln!(
        "rotation under load: {created} pods injected in {:?}, {rotations} certificate swaps, {} failures",
        started.elapsed(),
        failures.len()
    );
    assert!(
        rotations >= 2.0,
        "only {rotations} rotations happened: the test proved nothing"
    );
    assert!(
        failures.is_empty(),
        "admissions lost during rotation: {failures:#?}"
    );
    // Replaced CAs leave the bundle: the one replica's current CA, and at most the next one
    // while a rotation is under way.
    let bundle = ca_bundle(&admin, "pme-webhook-rotation").await;
    let cas = bundle.matches("BEGIN CERTIFICATE").count();
    assert!((1..=2).contains(&cas), "{cas} CAs in the bundle");
}

/// A replica that keeps crashing (SIGKILL right after it is ready, restarted in the same pod,
/// so with the same POD_NAME) while another serves. Each start names the pod in its new CA and
/// retires the CAs of its own earlier runs, so the bundle holds one CA per replica however
/// often it restarts, and the healthy replica's CA stays (pods keep being injected through
/// it). Before, each start added a CA (the killed runs never withdrew theirs) until a count
/// cap evicted the earliest-issued: the healthy replica's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_replica_replaces_its_own_ca_and_never_the_healthy_ones() {
    use std::ffi::OsStr;
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    let ns = namespace(cluster).await;
    opt_in(&admin, &ns.name).await;
    let name = "pme-webhook-crashloop";
    let kubeconfig = cluster.admin_kubeconfig();
    let mut healthy = Webhook::start_with_env(
        name,
        &kubeconfig,
        &[],
        &[("POD_NAME", OsStr::new("webhook-5d8f-healthy"))],
    );
    create_configuration(&admin, name, &healthy.url(), &ns.name, "Fail").await;
    healthy.wait_ready(Duration::from_secs(30));
    let healthy_ca = ca_bundle(&admin, name).await;
    assert_eq!(healthy_ca.matches("BEGIN CERTIFICATE").count(), 1);
    wait_effective(&admin, &ns.name, Duration::from_secs(30)).await;

    const RESTARTS: usize = 6;
    for _ in 0..RESTARTS {
        let mut looping = Webhook::start_with_env(
            name,
            &kubeconfig,
            &[],
            &[("POD_NAME", OsStr::new("webhook-5d8f-looping"))],
        );
        looping.wait_ready(Duration::from_secs(30));
        // Killed: no withdrawal, as for a crash or an OOM kill.
        looping.process.signal(nix::sys::signal::Signal::SIGKILL);
        looping.process.wait_exit(Duration::from_secs(10));
    }
    let bundle = ca_bundle(&admin, name).await;
    let cas = bundle.matches("BEGIN CERTIFICATE").count();
    eprintln!("after {RESTARTS} crashes of one replica: {cas} CAs in the bundle");
    assert!(
        bundle.contains(healthy_ca.trim()),
        "the healthy replica's CA left the bundle"
    );
    assert_eq!(
        cas, 2,
        "one CA per replica, the healthy one's and the last run's"
    );
    // Admissions still go through the healthy replica.
    let pod = create_pod(&admin, &ns.name, &replicaset_pod(DEPLOYMENT, json!({})))
        .await
        .expect("admitted through the healthy replica");
    assert!(is_injected(&pod));
    assert!(healthy.process.try_exit_status().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_reason_and_never_stops_the_server() {
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    let ns = namespace(cluster).await;
    let mut webhook = Webhook::start("pme-webhook-input", &cluster.admin_kubeconfig(), &[]);
    create_configuration(
        &admin,
        "pme-webhook-input",
        &webhook.url(),
        &ns.name,
        "Fail",
    )
    .await;
    webhook.wait_ready(Duration::from_secs(30));
    let ca = ca_bundle(&admin, "pme-webhook-input").await;

    let review = |kind: &str, object: Value| {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": kind},
                "resource": {"group": "", "version": "v1", "resource": "x"},
                "namespace": ns.name, "operation": "CREATE", "userInfo": {}, "object": object}
        }))
        .unwrap()
    };
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "/mutate",
            b"{not json".to_vec(),
            400,
            "not an AdmissionReview",
        ),
        (
            "/mutate",
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#.to_vec(),
            400,
            "only admission.k8s.io/v1",
        ),
        (
            "/mutate",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            400,
            "no request",
        ),
        ("/mutate", vec![b' '; 5 << 20], 413, "larger than"),
        ("/elsewhere", b"{}".to_vec(), 404, "POST /mutate"),
        // Unknown kinds are allowed unchanged, with the reason for the audit log.
        (
            "/mutate",
            review("ConfigMap", json!({"metadata": {"name": "c"}})),
            200,
            "only pods are injected",
        ),
        // A pod that opts in but cannot be wrapped is refused, naming the way out.
        (
            "/mutate",
            review(
                "Pod",
                json!({"metadata": {"name": "p", "annotations": {"passmower-elector.io/container": "app", LEASE_ANNOTATION: "p"}},
            "spec": {"serviceAccountName": "p", "containers": [{"name": "app", "image": "x"}]}}),
            ),
            200,
            "passmower-elector.io/app-command",
        ),
        // One on the namespace's default ServiceAccount is refused, naming the field.
        (
            "/mutate",
            review(
                "Pod",
                json!({"metadata": {"name": "p", "annotations": {"passmower-elector.io/container": "app", LEASE_ANNOTATION: "p"}},
            "spec": {"containers": [{"name": "app", "image": "x", "command": ["app"]}]}}),
            ),
            200,
            "default ServiceAccount",
        ),
    ];
    for (path, body, status, expected) in cases {
        let (got, text) = curl_post(&webhook, &ca, path, &body);
        assert_eq!(got, status, "{path} {expected}: {text}");
        assert!(
            text.contains(expected),
            "{path}: expected {expected:?} in {text}"
        );
    }
    // Still serving, and the errors were counted by kind.
    assert!(
        webhook.process.try_exit_status().is_none(),
        "{}",
        webhook.process.logs()
    );
    assert_eq!(
        webhook.metric("passmower_elector_webhook_http_errors_total{kind=\"too_large\"}"),
        1.0
    );
    assert_eq!(
        webhook.metric("passmower_elector_webhook_http_errors_total{kind=\"bad_request\"}"),
        3.0
    );
    let (status, _) = curl_post(&webhook, &ca, "/mutate", &review("ConfigMap", json!({})));
    assert_eq!(status, 200);
}

/// Figures, not assertions on time: admission latency added per pod (client side, the same
/// pod created where the webhook acts and where it does not) and the webhook's RSS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_latency_and_rss_figures() {
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    let with = namespace(cluster).await;
    let without = namespace(cluster).await;
    opt_in(&admin, &with.name).await;
    let mut webhook = Webhook::start("pme-webhook-figures", &cluster.admin_kubeconfig(), &[]);
    create_configuration(
        &admin,
        "pme-webhook-figures",
        &webhook.url(),
        &with.name,
        "Fail",
    )
    .await;
    webhook.wait_ready(Duration::from_secs(30));
    wait_effective(&admin, &with.name, Duration::from_secs(30)).await;

    let n: usize = std::env::var("PME_WEBHOOK_FIGURE_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
        .min(2000);
    let mut samples = [Vec::with_capacity(n), Vec::with_capacity(n)];
    // Interleaved, so load on the machine weighs on both sides alike.
    for _ in 0..n {
        for (i, ns) in [&with, &without].into_iter().enumerate() {
            let t = Instant::now();
            let pod = create_pod(&admin, &ns.name, &replicaset_pod(DEPLOYMENT, json!({})))
                .await
                .expect("admitted");
            samples[i].push(t.elapsed());
            assert_eq!(is_injected(&pod), i == 0);
        }
    }
    let pct = |v: &mut Vec<Duration>, p: f64| {
        v.sort();
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    };
    let [mut a, mut b] = samples;
    let (a50, a99, b50, b99) = (
        pct(&mut a, 0.5),
        pct(&mut a, 0.99),
        pct(&mut b, 0.5),
        pct(&mut b, 0.99),
    );
    let inside = webhook.metric("passmower_elector_webhook_admission_duration_seconds_sum")
        / webhook.metric("passmower_elector_webhook_admission_duration_seconds_count");
    eprintln!(
        "FIGURES webhook ({n} pods each, client side, pod CREATE): with webhook p50 {a50:?} p99 {a99:?}; \
         without p50 {b50:?} p99 {b99:?}; added p50 {:?} p99 {:?}; decision inside the webhook \
         (mean, incl. SubjectAccessReview cache) {:.3} ms; webhook RSS {} KiB",
        a50.saturating_sub(b50),
        a99.saturating_sub(b99),
        inside * 1000.0,
        webhook.rss_kib()
    );
}

/// cert-manager users bring their own certificate: it is served from the files, a changed
/// pair is served from the next handshake on, and an unusable change keeps the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_files_is_served_and_reloaded_when_they_change() {
    use passmower_elector::webhook::issue;
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    let ns = namespace(cluster).await;
    opt_in(&admin, &ns.name).await;
    let names = vec!["127.0.0.1".to_owned()];
    let hour = Duration::from_secs(3600);
    let first = issue(&names, hour, std::time::SystemTime::now(), None).expect("issue");
    let second = issue(&names, hour, std::time::SystemTime::now(), None).expect("issue");
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    write_atomic(&key, &first.key_pem());
    write_atomic(&cert, &first.chain_pem());

    let port = free_port();
    let health_port = free_port();
    let (listen, health) = (
        format!("--listen=127.0.0.1:{port}"),
        format!("--health-addr=127.0.0.1:{health_port}"),
    );
    let (cert_flag, key_flag) = (
        format!("--tls-cert-file={}", cert.display()),
        format!("--tls-key-file={}", key.display()),
    );
    let mut webhook = Webhook {
        process: pme_testkit::ElectorProcess::spawn(
            "webhook-files",
            &[
                "webhook",
                "--image",
                IMAGE,
                &listen,
                &health,
                &cert_flag,
                &key_flag,
                "--tls-reload-interval=300ms",
                "--shutdown-delay=0s",
            ],
            &[("KUBECONFIG", cluster.admin_kubeconfig().as_os_str())],
        ),
        port,
        health_port,
    };
    create_configuration(
        &admin,
        "pme-webhook-files",
        &webhook.url(),
        &ns.name,
        "Fail",
    )
    .await;
    // Both CAs trusted up front, as cert-manager's CA injector keeps its issuer's CA.
    set_ca_bundle(
        &admin,
        "pme-webhook-files",
        &format!("{}{}", first.ca_pem, second.ca_pem),
    )
    .await;
    webhook.wait_ready(Duration::from_secs(30));
    wait_effective(&admin, &ns.name, Duration::from_secs(30)).await;
    let served = |w: &Webhook| w.metric("passmower_elector_webhook_certificates_served_total");
    assert_eq!(served(&webhook), 1.0);

    // A half-written or foreign pair is not served: the first certificate stays.
    write_atomic(
        &cert,
        "-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n",
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(served(&webhook), 1.0);
    let pod = create_pod(&admin, &ns.name, &replicaset_pod(DEPLOYMENT, json!({})))
        .await
        .expect("still admitted with the first certificate");
    assert!(is_injected(&pod));

    // The renewed pair is served.
    write_atomic(&key, &second.key_pem());
    write_atomic(&cert, &second.chain_pem());
    assert!(
        pme_testkit::wait_until_async(
            Duration::from_secs(10),
            Duration::from_millis(100),
            || async { served(&webhook) == 2.0 }
        )
        .await,
        "the renewed certificate was not loaded\n{}",
        webhook.process.logs()
    );
    let expiry = webhook.metric("passmower_elector_webhook_certificate_expiry_timestamp_seconds");
    let expected = second
        .not_after
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as f64;
    assert_eq!(expiry, expected);
    // Only the second CA now: new connections must verify against it.
    set_ca_bundle(&admin, "pme-webhook-files", &second.ca_pem).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for _ in 0..3 {
        let pod = create_pod(&admin, &ns.name, &replicaset_pod(DEPLOYMENT, json!({})))
            .await
            .expect("admitted with the renewed certificate");
        assert!(is_injected(&pod));
    }
}
