//! The webhook page (docs/install/webhook.md) as written, in order, against a real
//! kube-apiserver: both charts, the namespace labelled before Passmower, Passmower with two
//! replicas and no post-renderer (admitted by the replica guard for the label), its upgrade,
//! passmower-elector's upgrade, and the removal in the page's order. No kubelet runs: the
//! webhook's replicas do not, so no pod is injected here (tests/node/webhook_node.rs runs this path
//! on real pods); what the apiserver stores and admits is checked.

use crate::product::install::{assert_refused_by_guard, replicas_and_elector_image};
use pme_testkit::install::{block, get, policies, Record};
use pme_testkit::tools::{released_image, Helm, Sandbox};
use pme_testkit::Cluster;

const WEBHOOK: &str = include_str!("../../docs/install/webhook.md");

/// The webhook's own image, checked to be the one it injects (its `--image`).
fn webhook_images(sandbox: &Sandbox) -> String {
    let webhook = get(
        sandbox,
        "passmower-elector-system",
        "deployment passmower-elector-webhook",
    )
    .expect("webhook");
    let container = &webhook["spec"]["template"]["spec"]["containers"][0];
    let image = container["image"].as_str().expect("image").to_owned();
    assert!(
        container["args"]
            .to_string()
            .contains(&format!("--image={image}")),
        "the webhook injects another image than its own: {}",
        container["args"]
    );
    image
}

#[test]
fn the_webhook_page_installs_upgrades_and_removes_as_written() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(Helm::V3, &cluster.admin_kubeconfig());
    sandbox.ok(&block(WEBHOOK, "webhook"));
    assert_eq!(replicas_and_elector_image(&sandbox, "passmower"), (2, None));
    // The released chart names the image released with it, and the webhook injects that one.
    assert_eq!(webhook_images(&sandbox), released_image("0.1.0"));
    sandbox.ok("kubectl get mutatingwebhookconfiguration passmower-elector-webhook");
    // The write fence, the replica guard and the pod guard, each a policy and its binding.
    assert_eq!(policies(&sandbox).len(), 6, "{:?}", policies(&sandbox));
    // Helm's manifest is the upstream chart as it is.
    let manifest = sandbox
        .ok("helm -n passmower get manifest passmower")
        .stdout;
    assert!(!manifest.contains("passmower-elector"), "{manifest}");
    // The guard admitted two replicas for the label, and would refuse them without it.
    let ran = sandbox.bash(
        "kubectl label namespace passmower passmower-elector.io/inject-\n\
         kubectl -n passmower rollout restart deployment passmower",
        std::time::Duration::from_secs(60),
    );
    assert_refused_by_guard(&ran, "asks for 2 replicas");
    sandbox.ok("kubectl label namespace passmower passmower-elector.io/inject=enabled");

    sandbox.ok(&block(WEBHOOK, "webhook-upgrade-passmower"));
    assert_eq!(replicas_and_elector_image(&sandbox, "passmower"), (3, None));
    sandbox.ok(&block(WEBHOOK, "webhook-upgrade-elector"));
    assert_eq!(webhook_images(&sandbox), released_image("0.1.1"));
    let restarted = pme_testkit::install::deployment(&sandbox, "passmower");
    assert!(restarted["spec"]["template"]["metadata"]["annotations"]
        .get("kubectl.kubernetes.io/restartedAt")
        .is_some());

    sandbox.ok(&block(WEBHOOK, "webhook-uninstall"));
    assert_eq!(replicas_and_elector_image(&sandbox, "passmower"), (1, None));
    assert_eq!(policies(&sandbox), Vec::<String>::new());
    assert!(get(
        &sandbox,
        "",
        "mutatingwebhookconfiguration passmower-elector-webhook"
    )
    .is_none());
    let ns = get(&sandbox, "", "namespace passmower").expect("namespace");
    assert!(ns["metadata"]["labels"]
        .get("passmower-elector.io/inject")
        .is_none());
    assert_eq!(sandbox.ok("helm list -A -q").stdout.trim(), "passmower");
    Record {
        path: "webhook",
        tier: "api",
        test: "install_webhook::the_webhook_page_installs_upgrades_and_removes_as_written",
        helm: Some(Helm::V3),
        kustomize: false,
        kubelet: None,
        ran: "install, upgrade Passmower, upgrade passmower-elector, uninstall",
    }
    .write(&sandbox);
}

/// The passmower-elector chart with `injectedBy=webhook` prints no post-renderer command (no
/// GitOps tool could run it) but the label, two or more replicas and the restart, which run as
/// printed.
#[test]
fn the_charts_notes_on_the_webhook_path_run_as_printed() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(Helm::V3, &cluster.admin_kubeconfig());
    sandbox.ok(&format!(
        "helm upgrade --install passmower {oci} --version {version} -n passmower \
         --create-namespace --set passmower.host=auth.example.com",
        oci = pme_testkit::tools::UPSTREAM_OCI,
        version = pme_testkit::tools::UPSTREAM_VERSION,
    ));
    let installed = sandbox.ok(
        "helm upgrade --install passmower-elector charts/passmower-elector -n passmower \
         --set image.repository=registry.example.com/passmower-elector --set injectedBy=webhook",
    );
    let notes = pme_testkit::install::notes_of(&installed.stdout);
    assert!(!notes.contains("--post-renderer"), "{notes}");
    assert!(notes.contains("runs 1 replica: run 2 or more"), "{notes}");
    assert!(notes.contains("replicaCount=2"), "{notes}");
    sandbox.ok(&pme_testkit::install::notes_block(
        &notes,
        "restart its pods so the webhook injects them:",
    ));
    let ns = get(&sandbox, "", "namespace passmower").expect("namespace");
    assert_eq!(
        ns["metadata"]["labels"]["passmower-elector.io/inject"],
        "enabled"
    );
    // With the label, the two replicas the NOTES ask for are admitted.
    sandbox.ok(&format!(
        "helm upgrade passmower {oci} --version {version} -n passmower --reuse-values \
         --set replicaCount=2",
        oci = pme_testkit::tools::UPSTREAM_OCI,
        version = pme_testkit::tools::UPSTREAM_VERSION,
    ));
    assert_eq!(replicas_and_elector_image(&sandbox, "passmower"), (2, None));
}

/// The webhook chart's own pods take the pod-level settings a chart user expects; those this
/// change added (`podLabels`, `topologySpreadConstraints`) land where Kubernetes reads them,
/// and a label that would let the webhook inject its own pods is refused.
#[test]
fn the_webhook_charts_pods_take_labels_and_spread_constraints() {
    let dir = tempfile::tempdir().expect("tmp");
    let sandbox = Sandbox::new(Helm::V3, &dir.path().join("no-cluster"));
    let render = |sets: &str| {
        sandbox.bash(
            &format!(
                "helm template pmw charts/passmower-elector-webhook -n passmower-elector-system \
                 --set image.repository=registry.example.com/passmower-elector \
                 --show-only templates/deployment.yaml {sets}"
            ),
            std::time::Duration::from_secs(60),
        )
    };
    let deployment = |sets: &str| -> serde_json::Value {
        let ran = render(sets);
        assert!(ran.success, "{}", ran.stderr);
        serde_norway::from_str(&ran.stdout).expect("one Deployment")
    };
    let default = deployment("");
    let pod = &default["spec"]["template"];
    assert_eq!(
        pod["spec"]["topologySpreadConstraints"][0]["topologyKey"],
        "kubernetes.io/hostname"
    );
    let set = deployment(
        "--set podLabels.team=auth \
         --set-json 'topologySpreadConstraints=[{\"maxSkew\":1,\"topologyKey\":\"topology.kubernetes.io/zone\",\"whenUnsatisfiable\":\"DoNotSchedule\",\"labelSelector\":{\"matchLabels\":{\"app.kubernetes.io/name\":\"passmower-elector-webhook\"}}}]'",
    );
    let pod = &set["spec"]["template"];
    assert_eq!(pod["metadata"]["labels"]["team"], "auth");
    assert_eq!(
        pod["metadata"]["labels"]["passmower-elector.io/inject"], "disabled",
        "the opt-out label stays"
    );
    let spread = pod["spec"]["topologySpreadConstraints"]
        .as_array()
        .expect("list");
    assert_eq!(spread.len(), 1);
    assert_eq!(spread[0]["topologyKey"], "topology.kubernetes.io/zone");
    for (sets, says) in [
        (
            "--set 'podLabels.passmower-elector\\.io/inject=enabled'",
            "podLabels must not set passmower-elector.io/inject",
        ),
        (
            "--set 'podLabels.app\\.kubernetes\\.io/name=x'",
            "podLabels must not set app.kubernetes.io/name",
        ),
    ] {
        let ran = render(sets);
        assert!(
            !ran.success && ran.stderr.contains(says),
            "{sets}: {}",
            ran.stderr
        );
    }
}
