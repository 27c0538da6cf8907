//! The admission webhook on real pods: the webhook chart installed on the one-node Kubernetes
//! (its two replicas run the sidecar image's `passmower-elector webhook`), the apiserver
//! calling it through its Service, and the real Passmower installed from its upstream chart
//! with no post-renderer, only the namespace label: its pods are admitted with the elector,
//! the supervisor and `copy-self`, its Deployment stays as the chart wrote it, and exactly one
//! replica writes operator objects (from the apiserver's audit log). Admission latency and the
//! webhook's RSS are printed and written to the real-pod report.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use pme_testkit::node::passmower::{self, helm_cmd, Install, Retrofit, APP_CONTAINER};
use pme_testkit::node::single_writer::assert_one_operator;
use pme_testkit::node::{pods, report, Node};

/// Where the webhook chart is installed (cluster-wide, once), as its values suggest.
const WEBHOOK_NAMESPACE: &str = "passmower-elector-system";
/// The release name; it contains the chart name, so it is also the chart's full name: the
/// Deployment, the Service, the MutatingWebhookConfiguration and `--service-name`.
const WEBHOOK_RELEASE: &str = "passmower-elector-webhook";
const WEBHOOK_CONTAINER: &str = "webhook";
/// The webhook of the configuration that picks every pod of a labelled namespace.
const NAMESPACES_HOOK: &str = "namespaces.inject.passmower-elector.io";
const INJECT_LABEL: &str = "passmower-elector.io/inject";
const INJECTED_ANNOTATION: &str = "passmower-elector.io/injected";
const COPY_SELF_CONTAINER: &str = "passmower-elector-install";
/// Dry-run pod creations per kind (opted in, opted out) for the latency figures.
const LATENCY_SAMPLES: usize = 100;

fn chart(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("charts")
        .join(name)
}

/// `helm install RELEASE CHART -n NAMESPACE --set ...`; panics with helm's output on failure.
fn helm_install(node: &Node, release: &str, chart: &Path, namespace: &str, sets: &[String]) {
    let dir = node.layout.path(&format!("helm-{release}"));
    std::fs::create_dir_all(&dir).expect("mkdir helm dir");
    let mut helm = helm_cmd(node, &dir);
    helm.args(["install", release])
        .arg(chart)
        .args(["--namespace", namespace]);
    for s in sets {
        helm.arg("--set").arg(s);
    }
    let out = helm.output().expect("run helm");
    assert!(
        out.status.success(),
        "helm install {release}: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The sidecar image as the charts' `image.*` values.
fn image_sets(reference: &str) -> Vec<String> {
    let (repository, tag) = reference.rsplit_once(':').expect("image has a tag");
    vec![
        format!("image.repository={repository}"),
        format!("image.tag={tag}"),
    ]
}

fn names(containers: &[Container]) -> Vec<&str> {
    containers.iter().map(|c| c.name.as_str()).collect()
}

/// Whether the elector is in the pod (as a native sidecar, or a classic one).
fn is_injected(spec: &PodSpec) -> bool {
    names(spec.init_containers.as_deref().unwrap_or_default())
        .into_iter()
        .chain(names(&spec.containers))
        .any(|n| n == passmower::ELECTOR_CONTAINER)
}

/// Panics unless `pod` carries what the webhook adds: the elector as a native sidecar, the
/// `copy-self` initContainer and the app container wrapped by `supervise`.
fn assert_injected(pod: &Pod) {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let spec = pod.spec.as_ref().expect("pod spec");
    let init = spec.init_containers.as_deref().unwrap_or_default();
    let elector = init
        .iter()
        .find(|c| c.name == passmower::ELECTOR_CONTAINER)
        .unwrap_or_else(|| panic!("{name}: no elector initContainer: {spec:#?}"));
    assert_eq!(
        elector.restart_policy.as_deref(),
        Some("Always"),
        "{name}: the elector is not a native sidecar"
    );
    let copy_self = init
        .iter()
        .find(|c| c.name == COPY_SELF_CONTAINER)
        .unwrap_or_else(|| panic!("{name}: no copy-self initContainer: {spec:#?}"));
    assert_eq!(
        copy_self
            .args
            .as_deref()
            .and_then(<[String]>::first)
            .map(String::as_str),
        Some("copy-self"),
        "{name}: {copy_self:?}"
    );
    let app = spec
        .containers
        .iter()
        .find(|c| c.name == APP_CONTAINER)
        .unwrap_or_else(|| panic!("{name}: no container {APP_CONTAINER}"));
    assert_eq!(
        app.args
            .as_deref()
            .and_then(<[String]>::first)
            .map(String::as_str),
        Some("supervise"),
        "{name}: the app is not wrapped by supervise: {app:?}"
    );
    assert!(
        pod.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(INJECTED_ANNOTATION)),
        "{name}: no {INJECTED_ANNOTATION} annotation"
    );
}

/// Waits until the webhook's Deployment has both replicas available (each is Ready only once
/// its CA is in the caBundle and the apiserver had time to see it).
async fn wait_webhook_available(node: &Node, timeout: Duration) {
    let client = node.admin_client().await;
    let api = Api::<Deployment>::namespaced(client, WEBHOOK_NAMESPACE);
    let deadline = Instant::now() + timeout;
    loop {
        let status = api.get(WEBHOOK_RELEASE).await.ok().and_then(|d| d.status);
        if status
            .as_ref()
            .is_some_and(|s| s.available_replicas == Some(2) && s.replicas == Some(2))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the webhook Deployment was not available after {timeout:?}: {status:?}\n{}",
            node.logs_tail(15)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// p50 and p99 of `samples` (nearest rank), in milliseconds.
fn percentiles(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
        samples[rank - 1]
    };
    (at(0.50), at(0.99))
}

/// Creates `LATENCY_SAMPLES` dry-run pods each like Passmower's (owned by its ReplicaSet,
/// its template's spec) opted in and opted out (`inject=disabled`: the apiserver does not
/// call the webhook), alternating, and reports the creation time of each kind. The dry run
/// goes through every admission step, the webhook included (`sideEffects: None`), and
/// stores nothing. Then the apiserver's own histogram of the webhook's calls (the real pods'
/// admissions included). The p99s of a hundred samples on a shared two-core machine are the
/// machine's noise as much as the webhook's, so only the medians are compared.
async fn admission_latency(node: &Node, install: &Install) {
    let client = node.admin_client().await;
    let replicasets = Api::<ReplicaSet>::namespaced(client.clone(), &install.namespace)
        .list(&ListParams::default().labels("app.kubernetes.io/instance=passmower"))
        .await
        .expect("list ReplicaSets");
    let rs = replicasets
        .items
        .iter()
        .find(|rs| rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0) > 0)
        .expect("Passmower's ReplicaSet");
    let template = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .expect("ReplicaSet template");
    let rs_name = rs.metadata.name.clone().unwrap_or_default();
    let pod = |opt_out: bool| -> Pod {
        let mut labels = template.metadata.as_ref().and_then(|m| m.labels.clone());
        if opt_out {
            labels
                .get_or_insert_with(Default::default)
                .insert(INJECT_LABEL.into(), "disabled".into());
        }
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": format!("{rs_name}-"),
                "labels": labels,
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name,
                    "uid": rs.metadata.uid, "controller": true, "blockOwnerDeletion": true
                }]
            },
            "spec": template.spec,
        }))
        .expect("pod")
    };
    let (opted_in, opted_out) = (pod(false), pod(true));
    let api = Api::<Pod>::namespaced(client.clone(), &install.namespace);
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(120);
    for _ in 0..LATENCY_SAMPLES {
        if Instant::now() > deadline {
            break;
        }
        for (pod, times, want) in [
            (&opted_in, &mut with, true),
            (&opted_out, &mut without, false),
        ] {
            let t0 = Instant::now();
            let stored = api.create(&dry, pod).await.expect("dry-run create");
            times.push(t0.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(
                stored.spec.as_ref().is_some_and(is_injected),
                want,
                "a dry-run pod (opted {}) came back {}injected",
                if want { "in" } else { "out" },
                if want { "not " } else { "" }
            );
        }
    }
    let n = with.len();
    let (in50, in99) = percentiles(&mut with);
    let (out50, out99) = percentiles(&mut without);
    report(&format!(
        "admission, {n} dry-run pod creations each, alternating (client → apiserver → Service \
         → webhook): opted in p50 {in50:.1} ms p99 {in99:.1} ms; opted out (webhook not \
         called) p50 {out50:.1} ms p99 {out99:.1} ms; added at the median {:.1} ms",
        in50 - out50
    ));

    let metrics = client
        .request_text(
            hyper::Request::get("/metrics")
                .body(Vec::new())
                .expect("request"),
        )
        .await
        .expect("apiserver /metrics");
    let series = |suffix: &str| -> Vec<(String, f64)> {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with(&format!(
                    "apiserver_admission_webhook_admission_duration_seconds_{suffix}{{"
                )) && l.contains(&format!("name=\"{NAMESPACES_HOOK}\""))
            })
            .filter_map(|l| {
                let (labels, value) = l.rsplit_once(' ')?;
                Some((labels.to_owned(), value.parse().ok()?))
            })
            .collect()
    };
    let count: f64 = series("count").iter().map(|(_, v)| v).sum();
    let sum: f64 = series("sum").iter().map(|(_, v)| v).sum();
    assert!(
        count >= n as f64,
        "the apiserver counted {count} calls of {NAMESPACES_HOOK}, fewer than the {n} dry runs"
    );
    report(&format!(
        "apiserver_admission_webhook_admission_duration_seconds{{name={NAMESPACES_HOOK}}}: \
         {count} calls, mean {:.1} ms",
        sum / count * 1000.0
    ));
}

/// Resident memory (KiB) of each webhook pod's container processes.
fn webhook_rss(node: &Node, webhook_pods: &[Pod]) -> Vec<(String, u64)> {
    webhook_pods
        .iter()
        .map(|p| {
            let kib = pods::container_id(p, WEBHOOK_CONTAINER)
                .map(|id| node.container_pids(&id))
                .unwrap_or_default()
                .iter()
                .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
                .filter_map(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("VmRSS:"))
                        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                })
                .sum();
            (p.metadata.name.clone().unwrap_or_default(), kib)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passmower_from_its_chart_with_only_the_namespace_label_has_one_writer() {
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    let client = node.admin_client().await;
    let (sidecar, _) = node.sidecar_image();

    // 1. The webhook, once per cluster, from the sidecar image (it holds the same binary).
    let t0 = Instant::now();
    node.new_namespace(WEBHOOK_NAMESPACE).await;
    let mut sets = image_sets(&sidecar);
    sets.push("image.pullPolicy=Never".into());
    helm_install(
        node,
        WEBHOOK_RELEASE,
        &chart("passmower-elector-webhook"),
        WEBHOOK_NAMESPACE,
        &sets,
    );
    wait_webhook_available(node, Duration::from_secs(180)).await;
    let webhook_ready_s = t0.elapsed().as_secs_f64();

    // 2. Next to the Passmower release: the Lease Role, its binding and the budget.
    let ns = node.new_namespace("passmower").await;
    helm_install(
        node,
        "passmower-elector",
        &chart("passmower-elector"),
        &ns,
        &image_sets(&sidecar),
    );
    // 3. The namespace opts in.
    let out = node
        .kubectl()
        .args([
            "label",
            "namespace",
            &ns,
            &format!("{INJECT_LABEL}=enabled"),
        ])
        .output()
        .expect("run kubectl");
    assert!(out.status.success(), "kubectl label: {out:?}");
    // 4. Passmower from its upstream chart, no post-renderer.
    let t1 = Instant::now();
    let install = Install::install_into(node, &ns, 3, 1, Retrofit::Webhook).await;
    report(&format!(
        "webhook: node started in {:.1}s; webhook chart to 2 available replicas in {webhook_ready_s:.1}s; \
         helm install of upstream Passmower (no post-renderer) to 3 Ready replicas and a leader in {:.1}s",
        node.started_in.as_secs_f64(),
        t1.elapsed().as_secs_f64()
    ));

    // What helm applied is the upstream chart as it is, and the Deployment stays so: the
    // elector is in the pods only, put there at admission.
    assert!(
        !install.manifest.contains("supervise") && !install.manifest.contains(INJECTED_ANNOTATION),
        "helm's manifest carries the elector, so it was not the webhook:\n{}",
        install.manifest
    );
    let deployment = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get(passmower::NAME)
        .await
        .expect("Passmower's Deployment");
    let template = deployment
        .spec
        .and_then(|s| s.template.spec)
        .expect("Deployment template");
    assert!(
        !is_injected(&template),
        "the Deployment's template was changed: {template:#?}"
    );
    let passmower_pods = install.pods(&client).await;
    assert_eq!(passmower_pods.len(), 3);
    for pod in &passmower_pods {
        assert_injected(pod);
    }

    // Never its own pods: they opt out by label, in a namespace that did not opt in.
    let webhook_pods = Api::<Pod>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
        .list(
            &ListParams::default().labels(&format!("app.kubernetes.io/instance={WEBHOOK_RELEASE}")),
        )
        .await
        .expect("list webhook pods")
        .items;
    assert_eq!(webhook_pods.len(), 2, "webhook pods");
    for pod in &webhook_pods {
        let spec = pod.spec.as_ref().expect("spec");
        assert!(
            !is_injected(spec)
                && !pod
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(INJECTED_ANNOTATION)),
            "the webhook injected its own pod {:?}",
            pod.metadata.name
        );
        assert_eq!(names(&spec.containers), [WEBHOOK_CONTAINER]);
        assert!(
            pods::is_ready(pod),
            "webhook pod {:?} not Ready",
            pod.metadata.name
        );
    }

    // One replica operates; the audit log shows a single writer.
    assert_one_operator(node, &install, "first").await;

    // Figures.
    admission_latency(node, &install).await;
    let rss = webhook_rss(node, &webhook_pods);
    assert!(
        rss.iter().all(|(_, kib)| *kib > 0),
        "no webhook process found: {rss:?}"
    );
    report(&format!("webhook RSS after the run: {rss:?} KiB"));
    // Nothing above restarted a webhook replica.
    let restarts: Vec<i32> = Api::<Pod>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
        .list(
            &ListParams::default().labels(&format!("app.kubernetes.io/instance={WEBHOOK_RELEASE}")),
        )
        .await
        .expect("list webhook pods")
        .items
        .iter()
        .filter_map(|p| pods::restart_count(p, WEBHOOK_CONTAINER))
        .collect();
    assert_eq!(restarts, [0, 0], "webhook restarts");
}
