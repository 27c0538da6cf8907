//! The k3s page (docs/install/k3s.md) as written against a real kube-apiserver, and after each
//! block what k3s's helm-controller does with the `HelmChart`s (no k3s runs here; its CRD stands
//! in schema-less; `pme_testkit::install::helm_controller` says what it does in its place).
//!
//! What it shows: the namespace exists, labelled, before Passmower's Deployment; the replica
//! guard admits its two replicas there; the webhook and the passmower-elector chart are what
//! the page says; upgrade and removal leave what the page says. And in a namespace without the
//! label, the guard refuses Passmower's Deployment, so helm-controller's install fails.

use crate::product::install::{assert_refused_by_guard, replicas_and_elector_image};
use pme_testkit::install::helm_controller::HelmController;
use pme_testkit::install::{block, deployment, get, policies, stand_in_crd, Record};
use pme_testkit::tools::{released_image, Helm, Sandbox};
use pme_testkit::Cluster;

const K3S: &str = include_str!("../../docs/install/k3s.md");

fn k3s_sandbox(cluster: &Cluster) -> Sandbox {
    // klipper-helm runs Helm 4.
    let sandbox = Sandbox::new(Helm::V4, &cluster.admin_kubeconfig());
    stand_in_crd(&sandbox, "helm.cattle.io", "v1", "HelmChart", "helmcharts");
    sandbox
}

#[test]
fn the_k3s_page_installs_upgrades_and_removes_as_helm_controller_runs_it() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = k3s_sandbox(&cluster);
    let mut controller = HelmController::default();

    controller.run_beside(&sandbox, &block(K3S, "k3s-webhook"));
    let webhook = get(
        &sandbox,
        "passmower-elector-system",
        "deployment passmower-elector-webhook",
    )
    .expect("the webhook's Deployment");
    // The released chart names the image released with it.
    assert_eq!(
        webhook["spec"]["template"]["spec"]["containers"][0]["image"],
        released_image("0.1.0").as_str()
    );
    sandbox.ok("kubectl get mutatingwebhookconfiguration passmower-elector-webhook");

    sandbox.ok(&block(K3S, "k3s"));
    // The namespace came with the file, labelled, before any Job ran.
    let ns = get(&sandbox, "", "namespace passmower").expect("namespace");
    assert_eq!(
        ns["metadata"]["labels"]["passmower-elector.io/inject"],
        "enabled"
    );
    assert!(get(&sandbox, "passmower", "deployment passmower").is_none());
    controller.reconcile_ok(&sandbox);
    // Passmower's Deployment as its chart wrote it, two replicas, admitted in the labelled
    // namespace; the elector comes from the webhook at pod admission.
    assert_eq!(replicas_and_elector_image(&sandbox, "passmower"), (2, None));
    assert!(
        policies(&sandbox).contains(
            &"ValidatingAdmissionPolicy/passmower-elector-guard.passmower.passmower".to_owned()
        ),
        "{:?}",
        policies(&sandbox)
    );
    let guard = get(
        &sandbox,
        "",
        "validatingadmissionpolicy passmower-elector-guard.passmower.passmower",
    )
    .expect("guard");
    assert!(guard["spec"]["validations"][0]["expression"]
        .as_str()
        .unwrap_or_default()
        .contains("webhookInjects"));
    // Created by the Job with server-side apply, owned by the release the HelmChart names.
    let d = deployment(&sandbox, "passmower");
    assert_eq!(
        d["metadata"]["annotations"]["meta.helm.sh/release-name"],
        "passmower"
    );

    controller.run_beside(&sandbox, &block(K3S, "k3s-upgrade"));
    let webhook = get(
        &sandbox,
        "passmower-elector-system",
        "deployment passmower-elector-webhook",
    )
    .expect("the webhook's Deployment");
    let container = &webhook["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], released_image("0.1.1").as_str());
    assert!(container["args"]
        .to_string()
        .contains(&format!("--image={}", released_image("0.1.1"))));

    controller.run_beside(&sandbox, &block(K3S, "k3s-uninstall"));
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
    assert_eq!(
        sandbox.ok("helm list -A -q").stdout.trim(),
        "passmower",
        "only Passmower's release is left"
    );
    Record {
        path: "k3s",
        tier: "api",
        test: "install_k3s::the_k3s_page_installs_upgrades_and_removes_as_helm_controller_runs_it",
        helm: Some(Helm::V4),
        kustomize: false,
        kubelet: None,
        ran: "install, upgrade, uninstall; helm-controller's Jobs done by the test",
    }
    .write(&sandbox);
}

/// What `createNamespace: true` (upstream's example) amounts to: a namespace without the
/// label. With the passmower-elector chart there, the replica guard refuses Passmower's
/// two-replica Deployment, so helm-controller's Job fails rather than run it unprotected.
#[test]
fn without_the_label_the_guard_refuses_passmowers_deployment() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = k3s_sandbox(&cluster);
    let mut controller = HelmController::default();
    // The page's files, with the namespace's label taken out.
    sandbox.ok(&block(K3S, "k3s-webhook")
        .replace("kubectl apply -f passmower-elector-webhook.yaml", "true"));
    sandbox.ok(&block(K3S, "k3s")
        .replace("  labels:\n    passmower-elector.io/inject: enabled\n", "")
        .replace("kubectl apply -f passmower.yaml", "true"));
    sandbox.ok(
        "grep -q 'chart: oci://ghcr.io/passmower/charts/passmower-elector$' passmower.yaml \
           && ! grep -q 'passmower-elector.io/inject' passmower.yaml\n\
         kubectl apply -f passmower.yaml",
    );
    // helm-controller runs the Jobs at once; here the passmower-elector chart's finishes
    // first. (The other order creates the Deployment before the guard exists: hence the label
    // in the same file, before either.)
    let elector = controller.run_one(&sandbox, "passmower-elector");
    assert!(elector.success, "{}", elector.stderr);
    crate::product::install::wait_for_guard(&sandbox, "passmower");
    let ran = controller.run_one(&sandbox, "passmower");
    assert_refused_by_guard(&ran, "asks for 2 replicas");
    assert!(ran.stderr.contains("Label its namespace"), "{}", ran.stderr);
    // helm-controller's next Job sees a failed release and (failurePolicy reinstall)
    // uninstalls and installs again: refused again, nothing runs.
    assert!(get(&sandbox, "passmower", "deployment passmower").is_none());
}
