//! The k3s path (docs/install/k3s.md) on the one-node Kubernetes: the page's blocks applied as
//! written, helm-controller's Jobs done by the test (`pme_testkit::install::helm_controller`),
//! and the node's own values — its images, which it cannot pull, and its Redis — given as k3s
//! users override a chart's values, by a `HelmChartConfig` of the same name. The webhook's two
//! replicas run; the namespace is labelled before any Passmower pod exists, so every Passmower
//! pod is admitted with the elector, and exactly one replica writes operator objects (the
//! apiserver's audit log). Without the label: with the passmower-elector chart in the namespace
//! the replica guard refuses Passmower's two-replica Deployment; without it a Passmower pod
//! runs without the elector, as the page says.

use std::time::{Duration, Instant};

use crate::product::install::{assert_refused_by_guard, wait_for_guard};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use pme_testkit::install::helm_controller::HelmController;
use pme_testkit::install::{block, stand_in_crd, Record};
use pme_testkit::node::passmower::{
    create_secrets, ElectionMode, Generation, Install, ELECTOR_CONTAINER, HOST, TIMINGS,
};
use pme_testkit::node::single_writer::assert_one_operator;
use pme_testkit::node::{pods, report, Node};
use pme_testkit::tools::{Helm, Sandbox};

const K3S: &str = include_str!("../../docs/install/k3s.md");

/// Whether the elector is in the pod (a native or a classic sidecar).
fn has_elector(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref().expect("pod spec");
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .any(|c| c.name == ELECTOR_CONTAINER)
}

/// `valuesContent` of a `HelmChartConfig` named `name` in kube-system.
fn chart_config(name: &str, values: &str) -> String {
    let indented: String = values.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: helm.cattle.io/v1\nkind: HelmChartConfig\nmetadata:\n  name: {name}\n  \
         namespace: kube-system\nspec:\n  valuesContent: |-\n{indented}"
    )
}

async fn wait_available(node: &Node, namespace: &str, name: &str, replicas: i32) {
    let api = Api::<Deployment>::namespaced(node.admin_client().await, namespace);
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let status = api.get(name).await.ok().and_then(|d| d.status);
        if status
            .as_ref()
            .is_some_and(|s| s.available_replicas == Some(replicas))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{namespace}/{name} not available: {status:?}\n{}",
            node.logs_tail(15)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_k3s_page_on_real_pods_injects_a_labelled_namespace_only() {
    assert_eq!(
        Generation::from_env(),
        Generation::V1_3,
        "this test sets Passmower 1.3.0's chart values"
    );
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    let client = node.admin_client().await;
    let (sidecar, _) = node.sidecar_image();
    let passmower_image = node.passmower_image();
    let (sidecar_repository, sidecar_tag) = sidecar.rsplit_once(':').expect("tag");
    let (app_repository, app_tag) = passmower_image.rsplit_once(':').expect("tag");
    let sandbox = Sandbox::new(Helm::V4, node.admin_kubeconfig());
    stand_in_crd(&sandbox, "helm.cattle.io", "v1", "HelmChart", "helmcharts");
    stand_in_crd(
        &sandbox,
        "helm.cattle.io",
        "v1",
        "HelmChartConfig",
        "helmchartconfigs",
    );
    // What this node needs besides the page's values: its images (imported, never pulled, so
    // without the released charts' digest) and Redis beside the node (no cluster DNS), for
    // Passmower 1.3.0's chart.
    let sidecar_image =
        format!("image:\n  repository: {sidecar_repository}\n  tag: {sidecar_tag}\n  digest: \"\"");
    let configs = [
        chart_config(
            "passmower-elector-webhook",
            &format!("{sidecar_image}\n  pullPolicy: Never"),
        ),
        chart_config("passmower-elector", &sidecar_image),
        chart_config(
            "passmower",
            &format!(
                "image:\n  repository: {app_repository}\n  tag: {app_tag}\n  pullPolicy: Never\n\
                 passmower:\n  host: {HOST}\n  namespace_selector: passmower\n  \
                 email_enabled: false\n  github_enabled: false\n  \
                 email_credentials_secretRef: \"\"\n  github_client_secretRef: \"\"\n\
                 redis:\n  internal:\n    enabled: false\n  external:\n    enabled: true\n    \
                 secretKeyRef:\n      name: redis\n      key: REDIS_URI"
            ),
        ),
    ];
    std::fs::write(
        sandbox.root().join("node-values.yaml"),
        configs.join("---\n"),
    )
    .expect("node values");
    sandbox.ok("kubectl apply -f node-values.yaml");

    let t0 = Instant::now();
    let mut controller = HelmController::default();
    controller.run_beside(&sandbox, &block(K3S, "k3s-webhook"));
    wait_available(
        node,
        "passmower-elector-system",
        "passmower-elector-webhook",
        2,
    )
    .await;
    let webhook_ready = t0.elapsed();

    // The page's file: the labelled namespace and both HelmCharts, applied before any Job.
    sandbox.ok(&block(K3S, "k3s"));
    // The Secrets Passmower's chart hook would make (its key manager is not in the npm
    // registry; see testkit/src/node/passmower.rs).
    create_secrets(&client, "passmower", 1).await;
    // Here the passmower-elector Job finishes first; in the other order the webhook refuses
    // Passmower's pods until the Role exists, and the ReplicaSet retries.
    let elector = controller.run_one(&sandbox, "passmower-elector");
    assert!(elector.success, "{}", elector.stderr);
    controller.reconcile_ok(&sandbox);
    let manifest = sandbox
        .ok("helm -n passmower get manifest passmower")
        .stdout;
    assert!(
        !manifest.contains("passmower-elector"),
        "helm's manifest has the elector: it did not come from the webhook"
    );
    let install = Install {
        namespace: "passmower".into(),
        generation: Generation::V1_3,
        election: ElectionMode::Ours,
        replicas: 2,
        timings: TIMINGS,
        manifest,
    };
    install.wait_steady(node, Duration::from_secs(300)).await;
    let passmower_pods = install.pods(&client).await;
    assert_eq!(passmower_pods.len(), 2);
    for pod in &passmower_pods {
        assert!(has_elector(pod), "{:?} has no elector", pod.metadata.name);
    }
    report(&format!(
        "k3s path: webhook HelmChart to 2 available replicas in {:.1}s; Passmower HelmChart to \
         2 Ready injected replicas and a leader in {:.1}s",
        webhook_ready.as_secs_f64(),
        (t0.elapsed() - webhook_ready).as_secs_f64()
    ));
    assert_one_operator(node, &install, "k3s-first").await;

    // A namespace without the label, the passmower-elector chart in it: the replica guard
    // refuses Passmower's Deployment with two replicas.
    node.new_namespace("unlabelled").await;
    sandbox.ok(&format!(
        "helm install passmower-elector charts/passmower-elector -n unlabelled \
         --set image.repository={sidecar_repository} --set image.tag={sidecar_tag} \
         --set injectedBy=webhook"
    ));
    wait_for_guard(&sandbox, "unlabelled");
    let ran = sandbox.bash(
        &format!(
            "kubectl -n unlabelled create deployment passmower --image={} --replicas=2",
            node.images.pause_ref
        ),
        Duration::from_secs(60),
    );
    assert_refused_by_guard(&ran, "asks for 2 replicas");

    // Without the label and without the chart: a Passmower pod runs without the elector.
    node.new_namespace("bare").await;
    sandbox.ok(&format!(
        "kubectl -n bare apply -f - <<'EOF'\n\
         {{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{{\"name\":\"passmower\"}},\
         \"spec\":{{\"selector\":{{\"matchLabels\":{{\"app\":\"passmower\"}}}},\"template\":{{\
         \"metadata\":{{\"labels\":{{\"app\":\"passmower\"}}}},\"spec\":{{\"containers\":[\
         {{\"name\":\"passmower\",\"image\":\"{pause}\",\"imagePullPolicy\":\"Never\"}}]}}}}}}}}\n\
         EOF",
        pause = node.images.pause_ref
    ));
    wait_available(node, "bare", "passmower", 1).await;
    let bare = Api::<Pod>::namespaced(client.clone(), "bare")
        .list(&ListParams::default().labels("app=passmower"))
        .await
        .expect("list pods")
        .items;
    assert_eq!(bare.len(), 1);
    assert!(!has_elector(&bare[0]) && pods::is_ready(&bare[0]));

    let kubelet = sandbox
        .ok("kubectl get nodes -o jsonpath='{.items[0].status.nodeInfo.kubeletVersion}'")
        .stdout;
    Record {
        path: "k3s",
        tier: "node",
        test: "k3s_node::the_k3s_page_on_real_pods_injects_a_labelled_namespace_only",
        helm: Some(Helm::V4),
        kustomize: false,
        kubelet: Some(kubelet.trim().to_owned()),
        ran: "install on real pods: webhook replicas, injected pods, one writer; the guard and an unlabelled namespace",
    }
    .write(&sandbox);
}
