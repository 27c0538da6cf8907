//! The chart `charts/passmower-elector-webhook`: rendered by Helm 3 and Helm 4 and accepted by
//! a real kube-apiserver (strict server-side dry run), and installed for real (everything but
//! the Deployment, which no kubelet would run) so the webhook binary, with the chart's
//! ServiceAccount identity and nothing else, keeps its caBundle, checks Lease permissions and
//! is called for exactly the pods the chart's selectors pick.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::product::elector_lease_rules;
use crate::product::ElectorNamespaces;
use crate::webhook_harness::*;
use pme_testkit::manifests::{describe, parse_stream, Applier, Mode};
use pme_testkit::Cluster;
use serde_json::{json, Value};

const RELEASE: &str = "pmw";
const FULLNAME: &str = "pmw-passmower-elector-webhook";

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/passmower-elector-webhook")
}

/// `helm template` of the chart: the documents, or helm's error text.
fn render(helm: &Path, release: &str, namespace: &str, set: &[&str]) -> Result<Vec<Value>, String> {
    let mut cmd = Command::new(helm);
    cmd.args(["template", release]).arg(chart()).args([
        "-n",
        namespace,
        "--set",
        "image.repository=registry.example.com/passmower-elector",
    ]);
    for s in set {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().expect("run helm");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(parse_stream(&String::from_utf8_lossy(&out.stdout)))
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// The pod-level settings of the webhook's own Deployment and the pull secrets of the pods it
/// injects, as a chart user sets them; `pod_settings_land_where_they_belong` checks where.
const POD_SETTINGS: &[&str] = &[
    "imagePullSecrets={regcred}",
    "injection.imagePullSecrets={sidecar-registry,regcred}",
    "podAnnotations.example\\.com/team=auth",
    "priorityClassName=system-cluster-critical",
    "nodeSelector.kubernetes\\.io/os=linux",
    "tolerations[0].key=dedicated,tolerations[0].operator=Exists,tolerations[0].effect=NoSchedule",
    "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=kubernetes.io/arch",
    "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=In",
    "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]=amd64",
];

/// The Deployment rendered with [`POD_SETTINGS`] carries each where Kubernetes reads it; the
/// injected pods' Secrets go to the webhook as flags, after `--image`, each once.
fn pod_settings_land_where_they_belong(docs: &[Value]) {
    let deployment = of_kind(docs, "Deployment")[0];
    let template = &deployment["spec"]["template"];
    let pod = &template["spec"];
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(
        template["metadata"]["annotations"],
        json!({"example.com/team": "auth"})
    );
    assert_eq!(
        template["metadata"]["labels"][INJECT_LABEL], "disabled",
        "the opt-out label stays beside the annotations"
    );
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}])
    );
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"][0],
        json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]})
    );
    let args: Vec<&str> = pod["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let secrets: Vec<&str> = args
        .iter()
        .filter_map(|a| a.strip_prefix("--image-pull-secret="))
        .collect();
    assert_eq!(secrets, ["sidecar-registry", "regcred"], "{args:?}");
}

/// With the defaults none of [`POD_SETTINGS`] is rendered at all.
fn no_pod_settings_by_default(docs: &[Value]) {
    let template = &of_kind(docs, "Deployment")[0]["spec"]["template"];
    assert!(
        template["metadata"].get("annotations").is_none(),
        "{template}"
    );
    for field in [
        "imagePullSecrets",
        "priorityClassName",
        "nodeSelector",
        "affinity",
        "tolerations",
    ] {
        assert!(template["spec"].get(field).is_none(), "{field}: {template}");
    }
    let args = template["spec"]["containers"][0]["args"].to_string();
    assert!(!args.contains("--image-pull-secret"), "{args}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_renders_with_both_helms_and_passes_a_strict_dry_run() {
    let cluster = Cluster::shared();
    let mut applier = Applier::new(cluster.admin_client().await);
    let variants: [&[&str]; 6] = [
        &[],
        &[
            "certificates.mode=secret",
            "certificates.secretName=webhook-tls",
            "certificates.caBundle=PEM",
        ],
        &[
            "optIn.namespaces=false",
            "webhook.failurePolicy=Ignore",
            "webhook.rbacCheck=false",
            "injection.classicSidecar=true",
            "injection.leaderStandby=false",
        ],
        &["certificates.mode=certManager"],
        // An idle namespace a namespace could have, with the policy that forbids creating it.
        &[
            "injection.idleNamespace=pm-idle",
            "injection.denyIdleNamespace=true",
        ],
        POD_SETTINGS,
    ];
    let mut checked = 0;
    for helm in [pme_testkit::tools::helm3(), pme_testkit::tools::helm4()] {
        for set in variants {
            // Another release than the installed one below: configurations are cluster-wide.
            let docs = render(&helm, "dry", "passmower-elector-system", set)
                .unwrap_or_else(|e| panic!("{} {set:?}: {e}", helm.display()));
            let hooks = of_kind(&docs, "MutatingWebhookConfiguration");
            assert_eq!(hooks.len(), 1, "{set:?}");
            for hook in hooks[0]["webhooks"].as_array().unwrap() {
                assert_eq!(hook["sideEffects"], "None");
                assert_eq!(hook["reinvocationPolicy"], "Never");
                assert_eq!(
                    hook["clientConfig"]["service"]["name"],
                    "dry-passmower-elector-webhook"
                );
                let excluded =
                    hook["namespaceSelector"]["matchExpressions"][0]["values"].to_string();
                assert!(excluded.contains("kube-system"), "{excluded}");
            }
            let deployment = of_kind(&docs, "Deployment")[0];
            assert_eq!(deployment["spec"]["replicas"], 2);
            assert_eq!(
                deployment["spec"]["template"]["metadata"]["labels"][INJECT_LABEL], "disabled",
                "the webhook's own pods must opt out"
            );
            assert_eq!(of_kind(&docs, "PodDisruptionBudget").len(), 1);
            if set == POD_SETTINGS {
                pod_settings_land_where_they_belong(&docs);
            } else if set.is_empty() {
                no_pod_settings_by_default(&docs);
            }
            // The webhook is told the cluster's version (Helm's, unless the value sets one),
            // which decides whether pods get the preStop sleep drain (1.30 or later).
            let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
            assert!(args.contains("\"--kube-version=v1."), "{args}");
            let guarded = set.contains(&"injection.denyIdleNamespace=true");
            assert_eq!(
                args.contains("\"--deny-idle-namespace\""),
                guarded,
                "{args}"
            );
            // The warm standby is inject's default; the value turns it off.
            assert_eq!(
                args.contains("\"--no-leader-standby\""),
                set.contains(&"injection.leaderStandby=false"),
                "{args}"
            );
            // Besides the one that keeps the webhook to its caBundle (self-signed mode).
            let idle_policies = of_kind(&docs, "ValidatingAdmissionPolicy")
                .into_iter()
                .filter(|p| {
                    !p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .ends_with("-cabundle-only")
                })
                .count();
            assert_eq!(idle_policies, usize::from(guarded), "{set:?}");
            for doc in &docs {
                // cert-manager's kinds are not served by a bare API server.
                if doc["apiVersion"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("cert-manager.io/"))
                {
                    continue;
                }
                applier
                    .send(doc, "passmower-elector-system", Mode::DryRun)
                    .await
                    .unwrap_or_else(|e| {
                        panic!("{} {set:?}: {} refused: {e}", helm.display(), describe(doc))
                    });
                checked += 1;
            }
        }
        let docs = render(&helm, "dry", "x", &["injection.kubeVersion=1.29"]).expect("render");
        let args = of_kind(&docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
            ["args"]
            .to_string();
        assert!(args.contains("\"--kube-version=1.29\""), "{args}");
        // What the chart must refuse, it refuses naming the value.
        for (set, expected) in [
            (&["image.repository="][..], "image.repository is required"),
            (&["certificates.mode=files"][..], "certificates.mode"),
            (&["webhook.timeoutSeconds=31"][..], "timeoutSeconds"),
            (
                &["optIn.namespaces=false", "optIn.pods=false"][..],
                "nothing could opt in",
            ),
            (&["certificates.mode=secret"][..], "secretName"),
            (
                &["injection.idleNamespace=pm-idle"][..],
                "injection.denyIdleNamespace=true",
            ),
            (
                &["injection.idleNamespace=a*"][..],
                "injection.idleNamespace",
            ),
            (
                &["imagePullSecrets={Regcred}"][..],
                "imagePullSecrets: \"Regcred\" is not a Secret name",
            ),
            (
                &["injection.imagePullSecrets=regcred"][..],
                "injection.imagePullSecrets must be a list",
            ),
        ] {
            let err = render(&helm, "dry", "x", set).expect_err("refused");
            assert!(err.contains(expected), "{set:?}: {err}");
        }
    }
    eprintln!("{checked} chart documents accepted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_rbac_and_selectors_are_all_the_webhook_needs() {
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    // The webhook runs as the chart's ServiceAccount: `passmower` in this namespace, whose
    // token the test API server knows. It may hold Lease "passmower" here, like a Passmower
    // release with the passmower-elector chart.
    let home = cluster
        .new_namespace_with("passmower", &elector_lease_rules("passmower"))
        .await;
    let opted_in = cluster
        .new_namespace_with("passmower", &elector_lease_rules("passmower"))
        .await;
    let plain = cluster
        .new_namespace_with("passmower", &elector_lease_rules("passmower"))
        .await;
    let docs = render(
        &pme_testkit::tools::helm3(),
        RELEASE,
        &home.name,
        &["serviceAccount.name=passmower"],
    )
    .expect("render");
    let webhook_port = free_port();
    let mut applier = Applier::new(admin.clone());
    for doc in &docs {
        let mut doc = doc.clone();
        match doc["kind"].as_str() {
            Some("ClusterRole" | "ClusterRoleBinding") => {}
            Some("MutatingWebhookConfiguration") => {
                // No Service routes on loopback: call the process directly.
                for hook in doc["webhooks"].as_array_mut().unwrap() {
                    hook["clientConfig"] = json!({
                        "url": format!("https://127.0.0.1:{webhook_port}/mutate")
                    });
                }
            }
            _ => continue,
        }
        applier
            .send(&doc, &home.name, Mode::Create)
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", describe(&doc)));
    }
    cluster
        .wait_for_rbac(
            &home,
            &[k8s_openapi::api::rbac::v1::PolicyRule {
                api_groups: Some(vec!["authorization.k8s.io".into()]),
                resources: Some(vec!["subjectaccessreviews".into()]),
                verbs: vec!["create".into()],
                ..Default::default()
            }],
        )
        .await;

    let port_flag = format!("--listen=127.0.0.1:{webhook_port}");
    let health = free_port();
    let health_flag = format!("--health-addr=127.0.0.1:{health}");
    let config_flag = format!("--webhook-configuration={FULLNAME}");
    let mut webhook = Webhook {
        process: pme_testkit::ElectorProcess::spawn(
            "chart-webhook",
            &[
                "webhook",
                "--image",
                IMAGE,
                &port_flag,
                &health_flag,
                &config_flag,
                "--tls-name=127.0.0.1",
                "--ca-propagation-delay=1s",
                "--shutdown-delay=0s",
            ],
            &[("KUBECONFIG", home.elector_kubeconfig.as_os_str())],
        ),
        port: webhook_port,
        health_port: health,
    };
    webhook.wait_ready(Duration::from_secs(30));

    opt_in(&admin, &opted_in.name).await;
    wait_effective(&admin, &opted_in.name, Duration::from_secs(30)).await;
    // A pod of a namespace that opted in; the webhook's own kind of pod there is skipped.
    let pod = create_pod(
        &admin,
        &opted_in.name,
        &replicaset_pod("passmower", json!({})),
    )
    .await
    .expect("admitted");
    assert!(is_injected(&pod));
    let own = replicaset_pod("passmower", json!({"labels": {INJECT_LABEL: "disabled"}}));
    assert!(!is_injected(
        &create_pod(&admin, &opted_in.name, &own)
            .await
            .expect("admitted")
    ));
    // A pod that opts in by itself in a namespace that did not; its neighbours are untouched.
    let single = replicaset_pod("passmower", json!({"labels": {INJECT_LABEL: "enabled"}}));
    assert!(is_injected(
        &create_pod(&admin, &plain.name, &single)
            .await
            .expect("admitted")
    ));
    let neighbour = replicaset_pod("passmower", json!({}));
    assert!(!is_injected(
        &create_pod(&admin, &plain.name, &neighbour)
            .await
            .expect("admitted")
    ));
    // The SubjectAccessReview works with the chart's RBAC: a Lease nobody granted is refused.
    let other = replicaset_pod("other", json!({}));
    let err = create_pod(&admin, &opted_in.name, &other)
        .await
        .expect_err("refused");
    // (The caller is told only that it was refused; webhook.rs checks the log has why.)
    assert!(
        err.to_string()
            .contains("but was refused; the reason is in the"),
        "{err}"
    );
    // Both webhooks of the configuration hold this replica's CA.
    let config: Value = serde_json::to_value(
        kube::Api::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>::all(admin.clone())
            .get(FULLNAME)
            .await
            .expect("get"),
    )
    .unwrap();
    let hooks = config["webhooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 2);
    assert!(hooks
        .iter()
        .all(|h| h["clientConfig"]["caBundle"] == hooks[0]["clientConfig"]["caBundle"]));
    assert!(webhook.process.try_exit_status().is_none());
}

/// The chart's configuration pointed at nothing (the webhook down) and limited to the test's
/// namespaces (it is cluster-wide; other tests share the API server): each hook's namespace
/// selector also requires one of `namespaces`.
async fn install_down_configuration(
    admin: &kube::Client,
    release: &str,
    namespace: &str,
    namespaces: &[&str],
) {
    let docs = render(&pme_testkit::tools::helm3(), release, namespace, &[]).expect("render");
    let mut config = of_kind(&docs, "MutatingWebhookConfiguration")[0].clone();
    for hook in config["webhooks"].as_array_mut().unwrap() {
        hook["clientConfig"] = json!({"url": format!("https://127.0.0.1:{}/mutate", free_port())});
        hook["namespaceSelector"]["matchExpressions"]
            .as_array_mut()
            .unwrap()
            .push(
                json!({"key": "kubernetes.io/metadata.name", "operator": "In",
                         "values": namespaces}),
            );
    }
    Applier::new(admin.clone())
        .send(&config, namespace, Mode::Create)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", describe(&config)));
}

/// With the webhook down and failurePolicy Fail, the chart's matchConditions let through every
/// pod the webhook would not act on (Redis, a secret-refresh job's pod, a debug pod, pods that
/// opt out or are already injected) and only the pods it would inject (or refuse by name) are
/// refused. Each pod's outcome is checked against the webhook's own rule
/// (`passmower_elector::webhook::acts_on`), so the CEL and the code cannot drift apart. Before,
/// every pod of an opted-in namespace was refused while the webhook was down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_webhook_down_only_the_pods_it_would_inject_are_refused() {
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    let opted_in = cluster.new_namespace().await;
    let plain = cluster.new_namespace().await;
    opt_in(&admin, &opted_in.name).await;
    install_down_configuration(
        &admin,
        "pmw-down",
        &opted_in.name,
        &[&opted_in.name, &plain.name],
    )
    .await;

    let container = |name: &str| json!({"name": name, "image": "example.com/x:1"});
    let with = |containers: Value, init: Option<Value>, extra: Value| {
        let mut pod = replicaset_pod("passmower", extra);
        pod["spec"]["containers"] = containers;
        if let Some(init) = init {
            pod["spec"]["initContainers"] = init;
        }
        pod
    };
    let bare = |mut pod: Value| {
        pod["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences");
        pod
    };
    let mut volume = replicaset_pod("passmower", json!({}));
    volume["spec"]["volumes"] = json!([{"name": "passmower-elector-grant", "emptyDir": {}}]);
    let pods: Vec<(&str, &str, Value)> = vec![
        (
            "redis",
            &opted_in.name,
            with(json!([container("redis")]), None, json!({})),
        ),
        (
            "a secret-refresh job's pod",
            &opted_in.name,
            bare(with(json!([container("kubectl")]), None, json!({}))),
        ),
        (
            "a bare debug pod",
            &opted_in.name,
            bare(with(json!([container("debug")]), None, json!({}))),
        ),
        (
            "passmower",
            &opted_in.name,
            replicaset_pod("passmower", json!({})),
        ),
        (
            "a bare passmower",
            &opted_in.name,
            bare(replicaset_pod("passmower", json!({}))),
        ),
        (
            "passmower next to redis",
            &opted_in.name,
            with(
                json!([container("redis"), container("passmower")]),
                None,
                json!({}),
            ),
        ),
        (
            "an annotated container",
            &opted_in.name,
            with(
                json!([container("app")]),
                None,
                json!({"annotations": {"passmower-elector.io/container": "app"}}),
            ),
        ),
        (
            "an annotation naming a missing container",
            &opted_in.name,
            replicaset_pod(
                "passmower",
                json!({"annotations": {"passmower-elector.io/container": "app"}}),
            ),
        ),
        (
            "an empty container annotation",
            &opted_in.name,
            replicaset_pod(
                "passmower",
                json!({"annotations": {"passmower-elector.io/container": ""}}),
            ),
        ),
        (
            "opted out by annotation",
            &opted_in.name,
            replicaset_pod(
                "passmower",
                json!({"annotations": {INJECT_LABEL: "disabled"}}),
            ),
        ),
        (
            "already injected",
            &opted_in.name,
            replicaset_pod(
                "passmower",
                json!({"annotations": {"passmower-elector.io/injected": "0.1.0"}}),
            ),
        ),
        (
            "the elector as a native sidecar",
            &opted_in.name,
            with(
                json!([container("passmower")]),
                Some(json!([container("passmower-elector")])),
                json!({}),
            ),
        ),
        ("a passmower-elector volume", &opted_in.name, volume),
        (
            "a pod that opts in alone",
            &plain.name,
            replicaset_pod("passmower", json!({"labels": {INJECT_LABEL: "enabled"}})),
        ),
        (
            "redis that opts in alone",
            &plain.name,
            with(
                json!([container("redis")]),
                None,
                json!({"labels": {INJECT_LABEL: "enabled"}}),
            ),
        ),
        (
            "a neighbour",
            &plain.name,
            replicaset_pod("passmower", json!({})),
        ),
    ];
    // The configuration is in force once the plain passmower pod is refused (bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while create_pod(
        &admin,
        &opted_in.name,
        &replicaset_pod("passmower", json!({})),
    )
    .await
    .is_ok()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the configuration never took effect"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (mut admitted, mut refused) = (0, 0);
    for (what, namespace, pod) in &pods {
        // The namespaces hook covers every pod of opted_in; in plain only the labelled ones
        // are sent at all (objectSelector).
        let selected = *namespace == opted_in.name.as_str()
            || pod["metadata"]["labels"][INJECT_LABEL] == "enabled";
        let acts = selected && passmower_elector::webhook::acts_on(pod, "passmower");
        match create_pod(&admin, namespace, pod).await {
            Ok(stored) => {
                assert!(
                    !acts,
                    "{what}: admitted with the webhook down, though it acts on it"
                );
                // Stored as sent (a pod may carry an elector of its own making already).
                let sent_init = pod["spec"]["initContainers"].as_array().map_or(0, Vec::len);
                let stored_init = stored
                    .spec
                    .as_ref()
                    .and_then(|s| s.init_containers.as_ref())
                    .map_or(0, Vec::len);
                assert_eq!(
                    stored_init, sent_init,
                    "{what}: changed with the webhook down"
                );
                assert!(!is_injected(&stored) || sent_init > 0, "{what}");
                admitted += 1;
            }
            Err(e) => {
                assert!(
                    acts,
                    "{what}: refused though the webhook would not act on it: {e}"
                );
                assert!(
                    e.to_string().contains("failed calling webhook"),
                    "{what}: {e}"
                );
                refused += 1;
            }
        }
    }
    eprintln!("webhook down: {admitted} pods admitted without it, {refused} refused");
    assert!(
        admitted >= 9 && refused >= 5,
        "{admitted} admitted, {refused} refused"
    );
}

/// The chart's ValidatingAdmissionPolicy: the webhook's ServiceAccount (whose token the test
/// API server knows) may rotate the caBundle of its configuration, and its attempts to widen
/// the namespace selector, drop the object selector, change the failure policy or the URL, or
/// relabel the object are refused; the cluster admin is not held back. Before, RBAC alone let
/// the ServiceAccount rewrite the whole configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhooks_service_account_may_change_only_the_ca_bundle() {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    let home = cluster
        .new_namespace_with("passmower", &elector_lease_rules("passmower"))
        .await;
    let release = "pmw-vap";
    let fullname = "pmw-vap-passmower-elector-webhook";
    let docs = render(
        &pme_testkit::tools::helm3(),
        release,
        &home.name,
        &["serviceAccount.name=passmower"],
    )
    .expect("render");
    let mut applier = Applier::new(admin.clone());
    for doc in &docs {
        let mut doc = doc.clone();
        match doc["kind"].as_str() {
            Some(
                "ClusterRole"
                | "ClusterRoleBinding"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding",
            ) => {}
            Some("MutatingWebhookConfiguration") => {
                // Harmless whatever happens to it: nothing listens, Ignore, and it matches
                // only the test's namespace.
                for hook in doc["webhooks"].as_array_mut().unwrap() {
                    hook["clientConfig"] =
                        json!({"url": format!("https://127.0.0.1:{}/mutate", free_port())});
                    hook["failurePolicy"] = json!("Ignore");
                    hook["namespaceSelector"]["matchExpressions"]
                        .as_array_mut()
                        .unwrap()
                        .push(
                            json!({"key": "kubernetes.io/metadata.name", "operator": "In",
                                     "values": [home.name]}),
                        );
                }
            }
            _ => continue,
        }
        applier
            .send(&doc, &home.name, Mode::Create)
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", describe(&doc)));
    }
    let sa = pme_testkit::cluster::client_from_kubeconfig(&home.elector_kubeconfig).await;
    let api = kube::Api::<MutatingWebhookConfiguration>::all(sa.clone());
    let ca = passmower_elector::webhook::issue(
        &["127.0.0.1".into()],
        Duration::from_secs(3600),
        std::time::SystemTime::now(),
        None,
    )
    .expect("a CA")
    .ca_pem;
    type Change = fn(&mut Value, &str);
    let changes: [(&str, Change); 5] = [
        ("widen the namespace selector", |hooks, _| {
            for h in hooks.as_array_mut().unwrap() {
                h["namespaceSelector"] = json!({});
            }
        }),
        ("drop the object selector", |hooks, _| {
            hooks[0]["objectSelector"] = json!({});
        }),
        ("change the failure policy", |hooks, _| {
            hooks[0]["failurePolicy"] = json!("Fail");
        }),
        ("call elsewhere", |hooks, _| {
            hooks[0]["clientConfig"]["url"] = json!("https://127.0.0.1:1/mutate");
        }),
        ("match every operation", |hooks, _| {
            hooks[0]["rules"][0]["operations"] = json!(["*"]);
        }),
    ];
    let replace = |api: kube::Api<MutatingWebhookConfiguration>, value: Value| async move {
        let config: MutatingWebhookConfiguration = serde_json::from_value(value).expect("typed");
        api.replace(fullname, &Default::default(), &config).await
    };
    let current = || async {
        serde_json::to_value(api.get(fullname).await.expect("get as the ServiceAccount")).unwrap()
    };
    // The policy is in force a moment after it is created: the first change, retried (bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut config = current().await;
        (changes[0].1)(&mut config["webhooks"], "");
        match replace(api.clone(), config).await {
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => {
                assert!(
                    s.message.contains("may change only the caBundle"),
                    "{}",
                    s.message
                );
                break;
            }
            Err(e) => panic!("widening failed otherwise: {e}"),
            Ok(_) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the policy never took effect"
                );
                // Put it back (as admin) and try again.
                let mut restored = current().await;
                for h in restored["webhooks"].as_array_mut().unwrap() {
                    h["namespaceSelector"] = json!({"matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [home.name]}]});
                }
                replace(kube::Api::all(admin.clone()), restored)
                    .await
                    .expect("restore");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    for (what, change) in &changes[1..] {
        let mut config = current().await;
        change(&mut config["webhooks"], "");
        let err = replace(api.clone(), config).await.expect_err(what);
        assert!(
            matches!(&err, kube::Error::Api(s) if s.message.contains("may change only the caBundle")),
            "{what}: {err}"
        );
    }
    let mut relabel = current().await;
    relabel["metadata"]["labels"]["extra"] = json!("x");
    let err = replace(api.clone(), relabel).await.expect_err("relabel");
    assert!(
        err.to_string().contains("may not change the labels"),
        "{err}"
    );

    // A caBundle rotation is admitted, on every webhook at once.
    let mut rotated = api.get(fullname).await.expect("get");
    for h in rotated.webhooks.iter_mut().flatten() {
        h.client_config.ca_bundle = Some(k8s_openapi::ByteString(ca.as_bytes().to_vec()));
    }
    api.replace(fullname, &Default::default(), &rotated)
        .await
        .expect("a caBundle rotation");
    assert_eq!(ca_bundle(&admin, fullname).await, ca);
    // The admin is not bound by it.
    let mut widened = serde_json::to_value(
        kube::Api::<MutatingWebhookConfiguration>::all(admin.clone())
            .get(fullname)
            .await
            .expect("get"),
    )
    .unwrap();
    widened["webhooks"][0]["timeoutSeconds"] = json!(7);
    replace(kube::Api::all(admin.clone()), widened)
        .await
        .expect("the admin may");
}

/// The NetworkPolicy is on by default and lets only `networkPolicy.admissionFrom` send
/// AdmissionReviews; it can be switched off. `helm template` cannot look up the API server's
/// addresses, so there the default admits from anywhere and its annotation says so.
#[test]
fn the_network_policy_limits_who_may_send_reviews_and_can_be_turned_off() {
    let policy_of = |helm: &Path, set: &[&str]| -> Option<Value> {
        let docs = render(helm, "np", "passmower-elector-system", set)
            .unwrap_or_else(|e| panic!("{set:?}: {e}"));
        let policies = of_kind(&docs, "NetworkPolicy");
        assert!(policies.len() <= 1, "{set:?}");
        policies.first().map(|p| (*p).clone())
    };
    let admission_rule = |policy: &Value| -> Value {
        policy["spec"]["ingress"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["ports"][0]["port"] == 8443)
            .cloned()
            .unwrap_or_else(|| panic!("no rule for 8443: {policy}"))
    };
    for helm in [pme_testkit::tools::helm3(), pme_testkit::tools::helm4()] {
        let default = policy_of(&helm, &[]).expect("a NetworkPolicy by default");
        assert_eq!(default["spec"]["policyTypes"], json!(["Ingress"]));
        assert_eq!(
            default["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"],
            "np"
        );
        assert!(
            default["metadata"]["annotations"]["passmower-elector.io/admission-from"]
                .as_str()
                .is_some_and(|a| a.contains("could not be looked up")),
            "{default}"
        );

        let peers = policy_of(
            &helm,
            &[
                "networkPolicy.admissionFrom=peers",
                "networkPolicy.admissionPeers[0].ipBlock.cidr=172.16.0.0/28",
            ],
        )
        .expect("a NetworkPolicy");
        assert_eq!(
            admission_rule(&peers)["from"],
            json!([{"ipBlock": {"cidr": "172.16.0.0/28"}}])
        );
        let anywhere = policy_of(&helm, &["networkPolicy.admissionFrom=anywhere"]).unwrap();
        assert!(admission_rule(&anywhere).get("from").is_none());

        assert_eq!(policy_of(&helm, &["networkPolicy.enabled=false"]), None);

        for (set, expected) in [
            (
                "networkPolicy.admissionFrom=pods",
                "networkPolicy.admissionFrom \"pods\" must be apiServer, peers or anywhere",
            ),
            (
                "networkPolicy.admissionFrom=peers",
                "networkPolicy.admissionPeers is empty",
            ),
        ] {
            let err = render(&helm, "np", "passmower-elector-system", &[set]).expect_err(set);
            assert!(err.contains(expected), "{set}: {err}");
        }
    }
}

/// Installed against a cluster (`helm install --dry-run=server` runs the chart's lookups), the
/// default NetworkPolicy lets only the API server's own addresses send reviews. This control
/// plane runs no endpoint reconciler, so the test publishes them as a cluster's would: an
/// EndpointSlice of the `kubernetes` Service (documentation addresses, which the API refuses
/// nothing of and nothing connects to: loopback ones are refused in an EndpointSlice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_the_network_policy_admits_reviews_only_from_the_api_servers_addresses() {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    let slices = kube::Api::<EndpointSlice>::namespaced(admin.clone(), "default");
    let slice: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes-pme-network-policy",
                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["192.0.2.10"]}, {"addresses": ["192.0.2.11"]}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]
    }))
    .unwrap();
    slices
        .create(&kube::api::PostParams::default(), &slice)
        .await
        .expect("publish the API server's addresses");
    let listed: Value = serde_json::to_value(
        slices
            .list(&kube::api::ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
            .await
            .expect("list the kubernetes Service's EndpointSlices"),
    )
    .unwrap();
    let addresses: Vec<String> = listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let mut expected: Vec<Value> = addresses
        .into_iter()
        .map(|a| {
            let bits = if a.contains(':') { 128 } else { 32 };
            json!({"ipBlock": {"cidr": format!("{a}/{bits}")}})
        })
        .collect();
    assert!(!expected.is_empty(), "no address listed: {listed}");
    expected.sort_by_key(|v| v.to_string());
    let out = Command::new(pme_testkit::tools::helm3())
        .args(["install", "npl"])
        .arg(chart())
        .args(["-n", "default", "--dry-run=server", "--kubeconfig"])
        .arg(cluster.admin_kubeconfig())
        .args([
            "--set",
            "image.repository=registry.example.com/passmower-elector",
        ])
        .output()
        .expect("run helm");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest = stdout
        .split_once("MANIFEST:")
        .map(|(_, m)| m.split("NOTES:").next().unwrap_or(m))
        .unwrap_or_else(|| panic!("no MANIFEST in: {stdout}"));
    let docs = parse_stream(manifest);
    let policy = of_kind(&docs, "NetworkPolicy");
    assert_eq!(policy.len(), 1, "{manifest}");
    assert_eq!(
        policy[0]["metadata"]["annotations"]["passmower-elector.io/admission-from"],
        "apiServer"
    );
    let rule = &policy[0]["spec"]["ingress"][0];
    assert_eq!(rule["ports"][0]["port"], 8443);
    let mut from: Vec<Value> = rule["from"].as_array().cloned().unwrap_or_default();
    from.sort_by_key(|v| v.to_string());
    let _ = slices
        .delete(
            "kubernetes-pme-network-policy",
            &kube::api::DeleteParams::default(),
        )
        .await;
    assert_eq!(from, expected);
}
