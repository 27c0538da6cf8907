//! Each install page's whole life as its blocks write it, in order, against a real
//! kube-apiserver of its own: install, upgrade Passmower, upgrade passmower-elector, roll
//! back, remove — for Helm 3, Helm 4, kustomize, kubectl on a live install and the
//! passmower-elector chart's route (docs/operations/). After each step the server says what
//! the step promised: the replica count, the elector's image or its absence, the objects
//! `inject` or the chart added, and after the removal nothing of passmower-elector left (the
//! Lease and its Events included). No kubelet runs:
//! these check what the apiserver stores and admits.

use crate::product::install::replicas_and_elector_image;
use pme_testkit::install::{block, get, notes_block, notes_of, policies, Record, DOCS_IMAGE};
use pme_testkit::tools::{released_image, Helm, Sandbox};
use pme_testkit::Cluster;

const HELM3: &str = include_str!("../../docs/install/helm3.md");
const HELM4: &str = include_str!("../../docs/install/helm4.md");
const KUSTOMIZE: &str = include_str!("../../docs/install/kustomize-flux.md");
const KUBECTL: &str = include_str!("../../docs/install/kubectl.md");
const UPGRADE: &str = include_str!("../../docs/operations/upgrade.md");
const UNINSTALL: &str = include_str!("../../docs/operations/uninstall.md");

/// The image the upgrade blocks move to.
const NEW_IMAGE: &str = "ghcr.io/passmower/passmower-elector:0.1.1";

fn image(reference: &str) -> Option<String> {
    Some(reference.to_owned())
}

/// What an elector would have left: the Lease and an Event on it.
fn leave_what_the_elector_left(sandbox: &Sandbox) {
    sandbox.ok(
        r#"kubectl -n passmower apply -f - <<'EOF'
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: passmower}
spec: {holderIdentity: ""}
---
apiVersion: v1
kind: Event
metadata: {name: passmower.became-leader}
involvedObject: {apiVersion: coordination.k8s.io/v1, kind: Lease, name: passmower, namespace: passmower}
reason: BecameLeader
message: passmower-0 became leader
type: Normal
EOF"#,
    );
}

/// Nothing of passmower-elector is left in namespace `passmower` or cluster-wide, and
/// Passmower runs one replica without the elector.
fn assert_removed(sandbox: &Sandbox) {
    assert_eq!(replicas_and_elector_image(sandbox, "passmower"), (1, None));
    assert_eq!(policies(sandbox), Vec::<String>::new());
    for what in [
        "role passmower-elector",
        "rolebinding passmower-elector",
        "lease passmower",
    ] {
        assert!(
            get(sandbox, "passmower", what).is_none(),
            "{what} is left behind"
        );
    }
    let deployment = pme_testkit::install::deployment(sandbox, "passmower");
    let annotations = deployment["metadata"]["annotations"].to_string();
    assert!(
        !annotations.contains("passmower-elector.io/injected"),
        "{annotations}"
    );
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        !args.contains("supervise"),
        "the supervisor is left: {args}"
    );
}

fn helm_lifecycle(page: &str, helm: Helm, prefix: &'static str, test: &'static str) {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(helm, &cluster.admin_kubeconfig());
    sandbox.ok(&block(page, prefix));
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (2, image(DOCS_IMAGE))
    );
    sandbox.ok(&block(page, &format!("{prefix}-upgrade-passmower")));
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (3, image(DOCS_IMAGE))
    );
    sandbox.ok(&block(page, &format!("{prefix}-upgrade-elector")));
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (3, image(NEW_IMAGE))
    );
    // The copy-self initContainer takes the same new image.
    let deployment = pme_testkit::install::deployment(&sandbox, "passmower");
    let images: Vec<&str> = deployment["spec"]["template"]["spec"]["initContainers"]
        .as_array()
        .expect("initContainers")
        .iter()
        .filter_map(|c| c["image"].as_str())
        .collect();
    assert!(
        images.iter().all(|i| *i == NEW_IMAGE),
        "{images:?}: not all on the new image"
    );
    // Back to the revision before: the old image, still injected, three replicas.
    let rolled = sandbox.ok(&block(page, &format!("{prefix}-rollback")));
    assert!(rolled.stdout.contains("REVISION"), "{}", rolled.stdout);
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (3, image(DOCS_IMAGE))
    );
    leave_what_the_elector_left(&sandbox);
    sandbox.ok(&block(page, &format!("{prefix}-uninstall")));
    assert_removed(&sandbox);
    let events = sandbox.ok("kubectl -n passmower get events -o name");
    assert_eq!(events.stdout.trim(), "", "Events left: {}", events.stdout);
    Record {
        path: prefix,
        tier: "api",
        test,
        helm: Some(helm),
        kustomize: false,
        kubelet: None,
        ran: "install, upgrade Passmower, upgrade passmower-elector, rollback, uninstall",
    }
    .write(&sandbox);
}

#[test]
fn helm3_install_upgrade_rollback_uninstall_as_written() {
    helm_lifecycle(
        HELM3,
        Helm::V3,
        "helm3",
        "install_lifecycle::helm3_install_upgrade_rollback_uninstall_as_written",
    );
}

#[test]
fn helm4_install_upgrade_rollback_uninstall_as_written() {
    helm_lifecycle(
        HELM4,
        Helm::V4,
        "helm4",
        "install_lifecycle::helm4_install_upgrade_rollback_uninstall_as_written",
    );
}

#[test]
fn kustomize_install_upgrade_uninstall_as_written() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(Helm::V3, &cluster.admin_kubeconfig());
    sandbox.ok(&block(KUSTOMIZE, "kustomize"));
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (2, image(DOCS_IMAGE))
    );
    assert_eq!(policies(&sandbox).len(), 4, "{:?}", policies(&sandbox));
    sandbox.ok(&block(KUSTOMIZE, "kustomize-upgrade"));
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (3, image(NEW_IMAGE))
    );
    leave_what_the_elector_left(&sandbox);
    sandbox.ok(&block(KUSTOMIZE, "kustomize-uninstall"));
    assert_removed(&sandbox);
    Record {
        path: "kustomize",
        tier: "api",
        test: "install_lifecycle::kustomize_install_upgrade_uninstall_as_written",
        helm: Some(Helm::V3),
        kustomize: true,
        kubelet: None,
        ran: "install, upgrade, uninstall (kustomize build, server-side apply)",
    }
    .write(&sandbox);
}

#[test]
fn kubectl_retrofit_upgrade_uninstall_as_written() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(Helm::V3, &cluster.admin_kubeconfig());
    // A live install made without the post-renderer.
    sandbox.ok(&format!(
        "helm upgrade --install passmower {oci} --version {version} -n passmower \
         --create-namespace --set passmower.host=auth.example.com",
        oci = pme_testkit::tools::UPSTREAM_OCI,
        version = pme_testkit::tools::UPSTREAM_VERSION,
    ));
    sandbox.ok(&block(KUBECTL, "kubectl"));
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (2, image(DOCS_IMAGE))
    );
    // Helm merges its chart into the live object and keeps what kubectl added.
    sandbox.ok(&block(KUBECTL, "kubectl-upgrade-passmower"));
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (2, image(DOCS_IMAGE))
    );
    let helm_owned = pme_testkit::install::deployment(&sandbox, "passmower");
    assert_eq!(
        helm_owned["metadata"]["annotations"]["meta.helm.sh/release-name"],
        "passmower"
    );
    // The same pipe with a new image changes nothing (the page says so).
    sandbox.ok(&format!(
        "kubectl -n passmower get deployment passmower -o yaml \
         | passmower-elector inject --image {NEW_IMAGE} | kubectl apply -f -"
    ));
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (2, image(DOCS_IMAGE))
    );
    sandbox.ok(&block(KUBECTL, "kubectl-uninstall"));
    assert_removed(&sandbox);
    Record {
        path: "kubectl",
        tier: "api",
        test: "install_lifecycle::kubectl_retrofit_upgrade_uninstall_as_written",
        helm: Some(Helm::V3),
        kustomize: false,
        kubelet: None,
        ran: "retrofit of a live Helm release, helm upgrade, uninstall",
    }
    .write(&sandbox);
}

/// The chart's route: the chart, its NOTES' Helm 3 command, then docs/operations/ as written.
#[test]
fn chart_route_upgrade_and_uninstall_as_written() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(Helm::V3, &cluster.admin_kubeconfig());
    let installed = sandbox.ok(&block(HELM3, "helm3-chart"));
    sandbox.ok(&notes_block(&notes_of(&installed.stdout), "Helm 3:"));
    // The NOTES name the image the released chart names, pinned by its digest.
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (2, Some(released_image("0.1.0")))
    );
    sandbox.ok(&block(UPGRADE, "upgrade-chart"));
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (2, image(NEW_IMAGE))
    );
    // The chart's own objects, the guard among them, came from the chart, not inject.
    let guard = sandbox.ok(
        "kubectl get validatingadmissionpolicy passmower-elector-guard.passmower.passmower \
         -o jsonpath='{.metadata.annotations.meta\\.helm\\.sh/release-name}'",
    );
    assert_eq!(guard.stdout, "passmower-elector");
    leave_what_the_elector_left(&sandbox);
    sandbox.ok(&block(UNINSTALL, "uninstall-chart"));
    assert_removed(&sandbox);
    assert_eq!(
        sandbox.ok("helm -n passmower list -q").stdout.trim(),
        "passmower"
    );
}
