//! Every manifest this project ships or generates is accepted by a real kube-apiserver: a
//! server-side dry run (`dryRun=All`) with `fieldValidation=Strict`, so a field the server does
//! not know (a misspelt or too-new native-sidecar field), a kind it does not serve or an invalid
//! object (a PodDisruptionBudget with both minAvailable and maxUnavailable) fails the build.
//!
//! Covered: the expected outputs of the `inject` golden tests, the retrofit example's injected
//! Deployment, and the chart as `scripts/check-chart.sh` renders it into
//! `PME_RENDERED_CHART_DIR` (`.ci/run` always sets it; without it the chart tests say so and
//! check nothing).

use std::path::{Path, PathBuf};

use k8s_openapi::api::rbac::v1::Role;
use pme_testkit::manifests::{describe, parse_stream, Applier, Mode};
use pme_testkit::Cluster;
use serde_json::{json, Value};

/// Namespace for namespaced documents that name none (as `helm template` without `-n`).
const DEFAULT_NAMESPACE: &str = "pme-dry-run";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The chart renderings of `scripts/check-chart.sh`, or `None` (said on stderr) without
/// `PME_RENDERED_CHART_DIR`.
fn rendered_chart_files() -> Option<Vec<PathBuf>> {
    let dir = std::env::var_os("PME_RENDERED_CHART_DIR");
    if !pme_testkit::have_or_skip(
        dir.is_some(),
        "PME_RENDERED_CHART_DIR is not set: the rendered chart is NOT checked \
         (scripts/check-chart.sh renders it; .ci/run sets the variable)",
    ) {
        return None;
    }
    let dir = dir?;
    let dir = PathBuf::from(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("PME_RENDERED_CHART_DIR {}: {e}", dir.display()))
        .map(|e| e.expect("read_dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "PME_RENDERED_CHART_DIR {} holds no *.yaml: did scripts/check-chart.sh render?",
        dir.display()
    );
    Some(files)
}

/// The objects of a stream as `kubectl create` sends them: the items of a `kind: List` one by
/// one, without what only the server sets (a List from `kubectl get` carries it).
fn objects(yaml: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for doc in parse_stream(yaml) {
        let items = match (doc["kind"].as_str(), doc["items"].as_array()) {
            (Some("List"), Some(items)) => items.clone(),
            _ => vec![doc],
        };
        for mut item in items {
            if let Some(meta) = item["metadata"].as_object_mut() {
                for field in ["resourceVersion", "uid", "creationTimestamp", "generation"] {
                    meta.remove(field);
                }
            }
            if let Some(object) = item.as_object_mut() {
                object.remove("status");
            }
            out.push(item);
        }
    }
    out
}

/// A stand-in for the Prometheus Operator's PodMonitor CRD, so the PodMonitors `inject`
/// rewrites are checked too: the part of its schema `inject` writes (selector, endpoints'
/// port, path and interval), strict about those fields and open about the rest.
async fn install_podmonitor_crd(applier: &mut Applier) {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "podmonitors.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": "PodMonitor", "listKind": "PodMonitorList", "plural": "podmonitors", "singular": "podmonitor"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["selector"],
                            "properties": {
                                "selector": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                "podMetricsEndpoints": {"type": "array", "items": {
                                    "type": "object",
                                    "properties": {
                                        "port": {"type": "string"},
                                        "path": {"type": "string"},
                                        "interval": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                                    },
                                }},
                            },
                        },
                    },
                }},
            }],
        },
    });
    match applier.send(&crd, DEFAULT_NAMESPACE, Mode::Create).await {
        Ok(_) => {}
        Err(e) if e.contains("AlreadyExists") || e.contains("already exists") => {}
        Err(e) => panic!("stand-in PodMonitor CRD: {e}"),
    }
    // Discovery serves the new kind once the CRD is established.
    let probe = json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": {"name": "probe"}, "spec": {"selector": {}},
    });
    let ready = pme_testkit::wait_until_async(
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(200),
        || async {
            Applier::new(Cluster::shared().admin_client().await)
                .send(&probe, DEFAULT_NAMESPACE, Mode::DryRun)
                .await
                .is_ok()
        },
    )
    .await;
    assert!(ready, "the stand-in PodMonitor CRD was not served in time");
}

/// Dry-runs every document of every file; panics listing all refusals. Returns the count.
async fn dry_run_files(files: &[PathBuf]) -> usize {
    let cluster = Cluster::shared();
    let mut applier = Applier::new(cluster.admin_client().await);
    install_podmonitor_crd(&mut applier).await;
    let mut applier = Applier::new(cluster.admin_client().await);
    let mut refused = Vec::new();
    let mut checked = 0;
    for file in files {
        let docs = objects(&read(file));
        assert!(!docs.is_empty(), "{} has no documents", file.display());
        for doc in &docs {
            checked += 1;
            if let Err(e) = applier.send(doc, DEFAULT_NAMESPACE, Mode::DryRun).await {
                refused.push(format!("{}: {e}", file.display()));
            } else {
                eprintln!("dry-run ok: {}: {}", file.display(), describe(doc));
            }
        }
    }
    assert!(
        refused.is_empty(),
        "the apiserver refused {} of {checked} documents:\n{}",
        refused.len(),
        refused.join("\n")
    );
    checked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_inject_outputs_pass_a_strict_server_side_dry_run() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo("tests/golden/inject"))
        .expect("tests/golden/inject")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".out.yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 4,
        "expected the golden outputs, got {files:?}"
    );
    files.push(repo(
        "examples/retrofit-passmower/passmower-deployment.injected.yaml",
    ));
    let checked = dry_run_files(&files).await;
    eprintln!("{checked} documents from {} files accepted", files.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_chart_passes_a_strict_server_side_dry_run() {
    let Some(files) = rendered_chart_files() else {
        return;
    };
    let checked = dry_run_files(&files).await;
    eprintln!("{checked} chart documents from {files:?} accepted");
}

/// The chart's Role grants exactly the rules `inject` generates (one statement, in the
/// library), for the Lease the chart names and, when it names a second one, Passmower's own
/// Lease that the elector holds beside it (`nativeLease`).
#[test]
fn rendered_chart_role_has_the_library_rules() {
    let Some(files) = rendered_chart_files() else {
        return;
    };
    for file in files {
        let roles: Vec<Role> = parse_stream(&read(&file))
            .into_iter()
            .filter(|d| d["kind"] == "Role")
            .map(|d| serde_json::from_value(d).expect("a Role"))
            .collect();
        assert_eq!(roles.len(), 1, "{}: one Role", file.display());
        let rules = roles[0].rules.clone().unwrap_or_default();
        // The Lease names are the ones the chart put into the name-restricted rules: ours first,
        // then Passmower's own.
        let mut named = rules
            .iter()
            .filter_map(|r| r.resource_names.as_ref()?.first().cloned());
        let lease = named
            .next()
            .unwrap_or_else(|| panic!("{}: no resourceNames", file.display()));
        let native = named.next();
        assert_eq!(
            rules,
            passmower_elector::inject::elector_rules(&lease, native.as_deref()),
            "{}: the chart's Role differs from inject's",
            file.display()
        );
    }
}

/// The chart's write fence is the one `inject` generates (one statement, in the library):
/// the same policy spec for the ServiceAccount the chart binds, and a binding to the Lease the
/// chart's Role names.
#[test]
fn rendered_chart_fence_is_the_library_fence() {
    use passmower_elector::inject::fence::{fence_binding_spec, fence_policy_spec, FenceTarget};
    let Some(files) = rendered_chart_files() else {
        return;
    };
    for file in files {
        let docs = parse_stream(&read(&file));
        let of_kind = |kind: &str| -> Vec<&Value> {
            docs.iter()
                .filter(|d| {
                    d["kind"] == kind
                        && d["metadata"]["labels"]["app.kubernetes.io/component"] == "write-fence"
                })
                .collect()
        };
        let (policies, bindings) = (
            of_kind("ValidatingAdmissionPolicy"),
            of_kind("ValidatingAdmissionPolicyBinding"),
        );
        assert_eq!(
            (policies.len(), bindings.len()),
            (1, 1),
            "{}: one fence",
            file.display()
        );
        let binding = docs
            .iter()
            .find(|d| d["kind"] == "RoleBinding")
            .expect("the chart's RoleBinding");
        let subject = &binding["subjects"][0];
        let (namespace, service_account) = (
            subject["namespace"].as_str().expect("subject namespace"),
            subject["name"].as_str().expect("subject name"),
        );
        let role: Role = serde_json::from_value(
            docs.iter()
                .find(|d| d["kind"] == "Role")
                .expect("the chart's Role")
                .clone(),
        )
        .expect("a Role");
        let lease = role
            .rules
            .unwrap_or_default()
            .iter()
            .find_map(|r| r.resource_names.as_ref()?.first().cloned())
            .expect("the Lease name");
        assert_eq!(
            policies[0]["spec"],
            serde_json::to_value(fence_policy_spec(namespace, service_account)).unwrap(),
            "{}: the chart's fence policy differs from inject's",
            file.display()
        );
        let name = policies[0]["metadata"]["name"].as_str().expect("name");
        let target = FenceTarget {
            namespace,
            service_account,
            lease: &lease,
        };
        assert_eq!(
            bindings[0]["spec"],
            serde_json::to_value(fence_binding_spec(name, &target)).unwrap(),
            "{}: the chart's fence binding differs from inject's",
            file.display()
        );
        assert_eq!(bindings[0]["metadata"]["name"], name);
    }
}

/// The dry run can fail: what it is there to catch is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_refuses_unknown_fields_and_invalid_objects() {
    let cluster = Cluster::shared();
    let mut applier = Applier::new(cluster.admin_client().await);
    let deployment = |sidecar: Value| {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "bad"},
            "spec": {
                "selector": {"matchLabels": {"app": "bad"}},
                "template": {
                    "metadata": {"labels": {"app": "bad"}},
                    "spec": {
                        "initContainers": [sidecar],
                        "containers": [{"name": "app", "image": "example.com/app:1"}],
                    },
                },
            },
        })
    };
    let good = deployment(json!({
        "name": "elector", "image": "example.com/elector:1", "restartPolicy": "Always",
    }));
    applier
        .send(&good, DEFAULT_NAMESPACE, Mode::DryRun)
        .await
        .expect("the well-formed control case is accepted");

    let cases = [
        (
            "unknown field in a container",
            deployment(json!({
                "name": "elector", "image": "example.com/elector:1", "restartPolicy": "Always",
                "restartPolicyy": "Always",
            })),
            "unknown field",
        ),
        (
            "native-sidecar restartPolicy the server does not know",
            deployment(json!({
                "name": "elector", "image": "example.com/elector:1", "restartPolicy": "Sometimes",
            })),
            "restartPolicy",
        ),
        (
            "PodDisruptionBudget with minAvailable and maxUnavailable",
            json!({
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "bad"},
                "spec": {
                    "minAvailable": 1,
                    "maxUnavailable": 1,
                    "selector": {"matchLabels": {"app": "bad"}},
                },
            }),
            "minAvailable",
        ),
        (
            "kind the server does not serve",
            json!({
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudgett",
                "metadata": {"name": "bad"},
            }),
            "does not serve",
        ),
    ];
    for (what, doc, expected) in cases {
        let err = applier
            .send(&doc, DEFAULT_NAMESPACE, Mode::DryRun)
            .await
            .expect_err(what);
        assert!(err.contains(expected), "{what}: refused, but for: {err}");
        eprintln!("refused as expected: {what}: {err}");
    }

    // A dry run persists nothing.
    let again = applier
        .send(&good, DEFAULT_NAMESPACE, Mode::DryRun)
        .await
        .expect("accepted again");
    assert_eq!(again["metadata"]["name"], "bad");
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(cluster.admin_client().await, DEFAULT_NAMESPACE);
    assert!(deployments
        .get_opt("bad")
        .await
        .expect("get deployment")
        .is_none());
}

/// An object that exists is checked by a dry-run server-side apply instead of a create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_objects_are_dry_run_applied() {
    let cluster = Cluster::shared();
    let mut applier = Applier::new(cluster.admin_client().await);
    let cm = |extra: Value| {
        let mut doc = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "exists", "namespace": "pme-dry-run-existing"},
            "data": {"a": "1"},
        });
        if let (Some(doc), Some(extra)) = (doc.as_object_mut(), extra.as_object()) {
            doc.extend(extra.clone());
        }
        doc
    };
    applier
        .send(&cm(json!({})), DEFAULT_NAMESPACE, Mode::Create)
        .await
        .expect("create for real");
    let applied = applier
        .send(
            &cm(json!({"data": {"a": "2"}})),
            DEFAULT_NAMESPACE,
            Mode::DryRun,
        )
        .await
        .expect("dry-run apply over the existing object");
    assert_eq!(applied["data"]["a"], "2");
    let err = applier
        .send(&cm(json!({"bogus": true})), DEFAULT_NAMESPACE, Mode::DryRun)
        .await
        .expect_err("unknown field refused for an existing object too");
    assert!(err.contains("bogus"), "{err}");
    let live: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(cluster.admin_client().await, "pme-dry-run-existing");
    let live = live.get("exists").await.expect("get configmap");
    assert_eq!(
        live.data.unwrap_or_default()["a"],
        "1",
        "dry run changed it"
    );
}
