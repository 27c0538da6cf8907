//! The replica guard on a real kube-apiserver, through the commands a user types: a `helm
//! upgrade` (or `helm rollback` to a revision before the retrofit) of Passmower without the
//! post-renderer is refused with the guard's message, the same upgrade with the post-renderer
//! is admitted, and so are a scale to one replica and every other Deployment. On the webhook
//! path (the passmower-elector chart with `injectedBy=webhook`) the namespace's opt-in label
//! admits more than one replica instead. The chart renders the guard `inject` generates (for a
//! cluster before 1.30 `inject` leaves it out: tests/scenarios/inject_golden.rs).

use std::time::Duration;

use crate::product::install::{assert_refused_by_guard, elector, replicas_and_elector_image};
use passmower_elector::inject::guard::{
    guard_binding_spec, guard_policy_name, guard_policy_spec, pod_guard_policy_name,
    pod_guard_policy_spec, GuardTarget, WebhookOptIn,
};
use passmower_elector::inject::WorkloadKind;
use pme_testkit::install::{deployment, policies, DOCS_IMAGE};
use pme_testkit::tools::{Helm, Sandbox, UPSTREAM_OCI, UPSTREAM_VERSION};
use pme_testkit::Cluster;

const REFERENCE: &str = include_str!("../../docs/reference/inject.md");

/// `helm upgrade --install` of upstream Passmower into `passmower` with `extra` flags.
fn passmower(extra: &str) -> String {
    format!(
        "helm upgrade --install passmower {UPSTREAM_OCI} --version {UPSTREAM_VERSION} \
         -n passmower --create-namespace --set passmower.host=auth.example.com {extra}"
    )
}

/// The post-renderer's flags as the Helm 3 page writes them.
fn post_renderer() -> String {
    format!(
        "--post-renderer passmower-elector --post-renderer-args inject \
         --post-renderer-args=--image={DOCS_IMAGE} --post-renderer-args=--namespace=passmower"
    )
}

#[test]
fn an_upgrade_without_the_post_renderer_is_refused_and_a_scale_to_one_admitted() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(Helm::V3, &cluster.admin_kubeconfig());
    sandbox.ok(&passmower(&format!(
        "--set replicaCount=2 {}",
        post_renderer()
    )));
    assert!(policies(&sandbox).contains(&format!(
        "ValidatingAdmissionPolicy/{}",
        guard_policy_name("passmower", "passmower")
    )));

    crate::product::install::wait_for_guard(&sandbox, "passmower");
    // The same upgrade without the post-renderer: refused, nothing changed.
    let ran = sandbox.bash(&passmower("--reuse-values"), Duration::from_secs(180));
    assert_refused_by_guard(&ran, "Deployment passmower/passmower asks for 2 replicas");
    // What the reference shows users is what Helm prints.
    let shown = REFERENCE
        .lines()
        .find(|l| l.starts_with("Error: UPGRADE FAILED: "))
        .expect("docs/reference/inject.md shows the refusal");
    assert!(
        ran.stderr.contains(shown),
        "Helm printed:\n{}\nthe reference shows:\n{shown}",
        ran.stderr
    );
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (2, Some(DOCS_IMAGE.to_owned()))
    );
    // With the post-renderer, the failed release upgrades.
    sandbox.ok(&passmower(&format!("--reuse-values {}", post_renderer())));
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (2, Some(DOCS_IMAGE.to_owned()))
    );

    // `kubectl scale` goes through the scale subresource, which the guard does not see; a
    // scale to one through the Deployment itself is admitted too.
    sandbox.ok("kubectl -n passmower scale deployment passmower --replicas=1");
    sandbox.ok(
        "kubectl -n passmower patch deployment passmower --type=merge -p '{\"spec\":{\"replicas\":3}}'",
    );
    let ran = sandbox.bash(
        "kubectl -n passmower patch deployment passmower --type=json \
         -p '[{\"op\":\"remove\",\"path\":\"/spec/template/spec/initContainers\"}]'",
        Duration::from_secs(60),
    );
    assert_refused_by_guard(&ran, "asks for 3 replicas");
    // Passmower's own election in the app container does not admit this one: the image is
    // 1.3.0, which inject knows is older than 2.4 (no --native-lease, so its guard has no such
    // clause; tests/api/guard_skip_rules.rs checks the clause where it is).
    let ran = sandbox.bash(
        "kubectl -n passmower patch deployment passmower --type=strategic -p \
         '{\"spec\":{\"template\":{\"spec\":{\"initContainers\":null,\"containers\":\
         [{\"name\":\"passmower\",\"env\":[{\"name\":\"LEADER_ELECTION_ENABLED\",\
         \"value\":\"true\"}]}]}}}}'",
        Duration::from_secs(60),
    );
    assert_refused_by_guard(&ran, "asks for 3 replicas");

    // Without the post-renderer to one replica: admitted, and Helm removes what inject added.
    sandbox.ok(&passmower("--reuse-values --set replicaCount=1"));
    let (replicas, image) = replicas_and_elector_image(&sandbox, "passmower");
    assert_eq!((replicas, image), (1, None));
    assert_eq!(policies(&sandbox), Vec::<String>::new());
    // Any other Deployment of the namespace was never the guard's business.
    sandbox.ok(
        "kubectl -n passmower create deployment other --image=registry.example.com/other:1 --replicas=3",
    );
}

#[test]
fn a_rollback_to_the_revision_before_the_retrofit_is_refused() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(Helm::V4, &cluster.admin_kubeconfig());
    // Revision 1: two replicas, unprotected (what the retrofit is for).
    sandbox.ok(&passmower("--set replicaCount=2"));
    // Revision 2: the retrofit, with the Helm 4 plugin.
    sandbox.ok("helm plugin install examples/retrofit-passmower/helm4-plugin");
    sandbox.ok(&passmower(&format!(
        "--reuse-values --post-renderer passmower-elector \
         --post-renderer-args=--image={DOCS_IMAGE} --post-renderer-args=--namespace=passmower"
    )));
    crate::product::install::wait_for_guard(&sandbox, "passmower");
    let ran = sandbox.bash(
        "helm -n passmower rollback passmower 1",
        Duration::from_secs(180),
    );
    assert_refused_by_guard(&ran, "asks for 2 replicas");
    assert!(elector(&deployment(&sandbox, "passmower")).is_some());
    // Helm stores what the post-renderer printed, so rolling back to a retrofitted revision
    // keeps the elector (revision 3 is the failed rollback).
    sandbox.ok("helm -n passmower rollback passmower 2");
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (2, Some(DOCS_IMAGE.to_owned()))
    );
}

#[test]
fn on_the_webhook_path_the_namespace_label_admits_more_than_one_replica() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(Helm::V3, &cluster.admin_kubeconfig());
    sandbox.ok("kubectl create namespace passmower\n\
         helm upgrade --install passmower-elector charts/passmower-elector -n passmower \
           --set image.repository=registry.example.com/passmower-elector --set injectedBy=webhook");
    crate::product::install::wait_for_guard(&sandbox, "passmower");
    let ran = sandbox.bash(&passmower("--set replicaCount=2"), Duration::from_secs(180));
    assert_refused_by_guard(&ran, "asks for 2 replicas");
    assert!(
        ran.stderr
            .contains("Label its namespace passmower-elector.io/inject=enabled"),
        "{}",
        ran.stderr
    );
    // One replica is always admitted; the label admits more (the webhook injects the pods).
    sandbox.ok(&passmower("--set replicaCount=1"));
    sandbox.ok("kubectl label namespace passmower passmower-elector.io/inject=enabled");
    sandbox.ok(&passmower("--set replicaCount=2"));
    assert_eq!(replicas_and_elector_image(&sandbox, "passmower"), (2, None));
    // A pod template that opts out is not injected, so it does not count.
    let ran = sandbox.bash(
        "kubectl -n passmower patch deployment passmower --type=merge \
         -p '{\"spec\":{\"template\":{\"metadata\":{\"labels\":{\"passmower-elector.io/inject\":\"disabled\"}}}}}'",
        Duration::from_secs(60),
    );
    assert_refused_by_guard(&ran, "asks for 2 replicas");
    // Removing the label while two replicas run: the next update is refused.
    sandbox.ok("kubectl label namespace passmower passmower-elector.io/inject-");
    let ran = sandbox.bash(
        "kubectl -n passmower rollout restart deployment passmower",
        Duration::from_secs(60),
    );
    assert_refused_by_guard(&ran, "asks for 2 replicas");
}

/// The chart's guard is the one `inject` generates, in both modes.
#[test]
fn the_charts_guard_is_the_library_guard() {
    let dir = tempfile::tempdir().expect("tmp");
    let sandbox = Sandbox::new(Helm::V3, &dir.path().join("no-cluster"));
    let app = WebhookOptIn {
        container: "app",
        ..WebhookOptIn::DEFAULT
    };
    let excluded = WebhookOptIn {
        excluded_namespaces: &["other", "auth"],
        ..WebhookOptIn::DEFAULT
    };
    for (injected_by, webhook) in [
        ("postRenderer", None),
        ("webhook", Some(WebhookOptIn::DEFAULT)),
        ("webhook --set webhookOptIn.container=app", Some(app)),
        (
            "webhook --set 'webhookOptIn.excludeNamespaces={other,auth}'",
            Some(excluded),
        ),
    ] {
        let rendered = sandbox.ok(&format!(
            "helm template passmower-elector charts/passmower-elector -n auth \
             --set image.repository=registry.example.com/passmower-elector \
             --set injectedBy={injected_by} --show-only templates/guard.yaml"
        ));
        let docs: Vec<serde_json::Value> = rendered
            .stdout
            .split("\n---")
            .filter_map(|d| serde_norway::from_str::<serde_json::Value>(d).ok())
            .filter(|d| d.is_object())
            .collect();
        assert_eq!(docs.len(), 2, "{injected_by}: policy and binding");
        let target = GuardTarget {
            namespace: "auth",
            kind: WorkloadKind::Deployment,
            name: "passmower",
            webhook,
            app_container: "passmower",
            native_lease: Some("passmower-operators"),
        };
        let name = guard_policy_name("auth", "passmower");
        assert_eq!(docs[0]["metadata"]["name"], name.as_str());
        assert_eq!(
            docs[0]["spec"],
            serde_json::to_value(guard_policy_spec(&target)).unwrap(),
            "{injected_by}: the chart's guard differs from inject's"
        );
        assert_eq!(
            docs[1]["spec"],
            serde_json::to_value(guard_binding_spec(&name)).unwrap()
        );
        assert_eq!(
            docs[0]["metadata"]["labels"]["app.kubernetes.io/component"],
            "replica-guard"
        );
        // The pod guard: on the webhook path only, where the webhook injects the namespace.
        let all = sandbox.ok(&format!(
            "helm template passmower-elector charts/passmower-elector -n auth \
             --set image.repository=registry.example.com/passmower-elector \
             --set injectedBy={injected_by}"
        ));
        let pod_guard_name = pod_guard_policy_name("auth", "passmower");
        let pod_guard: Vec<serde_json::Value> = all
            .stdout
            .split("\n---")
            .filter_map(|d| serde_norway::from_str::<serde_json::Value>(d).ok())
            .filter(|d| d["metadata"]["name"] == pod_guard_name.as_str())
            .collect();
        match pod_guard_policy_spec(&target) {
            None => assert!(pod_guard.is_empty(), "{injected_by}: {pod_guard:?}"),
            Some(spec) => {
                assert_eq!(
                    pod_guard.len(),
                    2,
                    "{injected_by}: pod guard policy and binding"
                );
                assert_eq!(
                    pod_guard[0]["spec"],
                    serde_json::to_value(spec).unwrap(),
                    "{injected_by}: the chart's pod guard differs from inject's"
                );
                assert_eq!(
                    pod_guard[1]["spec"],
                    serde_json::to_value(guard_binding_spec(&pod_guard_name)).unwrap()
                );
            }
        }
    }
    let off = sandbox.ok(
        "helm template passmower-elector charts/passmower-elector -n auth \
         --set image.repository=registry.example.com/passmower-elector --set guard.enabled=false",
    );
    assert!(!off.stdout.contains("replica-guard"), "{}", off.stdout);
    let refused = sandbox.bash(
        "helm template passmower-elector charts/passmower-elector -n auth \
         --set image.repository=registry.example.com/passmower-elector --set injectedBy=argo",
        Duration::from_secs(60),
    );
    assert!(
        !refused.success && refused.stderr.contains("injectedBy \"argo\" must be"),
        "{}",
        refused.stderr
    );
}
