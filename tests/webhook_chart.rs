//! The chart `charts/passmower-elector-webhook`: rendered by Helm 3 and Helm 4 and accepted by
//! a real kube-apiserver (strict server-side dry run), and installed for real (everything but
//! the Deployment, which no kubelet would run) so the webhook binary, with the chart's
//! ServiceAccount identity and nothing else, keeps its caBundle, checks Lease permissions and
//! is called for exactly the pods the chart's selectors pick.

mod support;
#[allow(dead_code)]
#[path = "inject_support/tools.rs"]
mod tools;
mod webhook_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use support::manifests::{describe, parse_stream, Applier, Mode};
use support::{elector_lease_rules, Cluster};
use webhook_support::*;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_renders_with_both_helms_and_passes_a_strict_dry_run() {
    let cluster = Cluster::shared();
    let mut applier = Applier::new(cluster.admin_client().await);
    let variants: [&[&str]; 5] = [
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
        ],
        &["certificates.mode=certManager"],
        // An idle namespace a namespace could have, with the policy that forbids creating it.
        &[
            "injection.idleNamespace=pm-idle",
            "injection.denyIdleNamespace=true",
        ],
    ];
    let mut checked = 0;
    for helm in [tools::helm3(), tools::helm4()] {
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
            let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
            let guarded = set.contains(&"injection.denyIdleNamespace=true");
            assert_eq!(
                args.contains("\"--deny-idle-namespace\""),
                guarded,
                "{args}"
            );
            assert_eq!(
                of_kind(&docs, "ValidatingAdmissionPolicy").len(),
                usize::from(guarded),
                "{set:?}"
            );
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
        &tools::helm3(),
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
        process: support::ElectorProcess::spawn(
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
        configuration: FULLNAME.into(),
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
    assert!(err.to_string().contains("may not update Lease"), "{err}");
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
