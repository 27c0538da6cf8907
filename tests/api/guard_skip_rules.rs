//! The replica guard on the webhook path decides from the webhook's own rule: on a real
//! kube-apiserver, which evaluates the policy, a Deployment of two replicas is admitted only
//! when the webhook would inject its pods, and refused for every reason the webhook skips a
//! pod (an opt-out, no container to wrap, the markers of an earlier injection, a namespace it
//! never injects). Each case is checked against the webhook's decision for the same pod
//! (`acts_on`), so the two cannot drift apart unnoticed.

use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use passmower_elector::inject::guard::{
    guard_binding_spec, guard_policy_name, guard_policy_spec, pod_guard, pod_guard_policy_name,
    GuardTarget, WebhookOptIn, GUARD_DENIAL_PREFIX, POD_GUARD_DENIAL_PREFIX,
};
use passmower_elector::inject::WorkloadKind;
use passmower_elector::webhook::acts_on;
use pme_testkit::Cluster;
use serde_json::{json, Value};

use crate::webhook_harness::opt_in;

const NAME: &str = "passmower";

/// A Deployment `passmower` of two replicas whose pod template is `template` merged over a
/// plain Passmower template (container `passmower`).
fn deployment(template: &Value) -> Value {
    let mut pod = json!({
        "metadata": {"labels": {"app": NAME}},
        "spec": {"containers": [{"name": "passmower", "image": "ghcr.io/passmower/passmower:1.3.0"}]}
    });
    for part in ["metadata", "spec"] {
        if let Some(extra) = template[part].as_object() {
            for (k, v) in extra {
                pod[part][k] = v.clone();
            }
        }
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": NAME}}, "template": pod}
    })
}

/// Server-side dry run of creating `deployment`: `Ok` or the refusal's message.
async fn dry_create(client: &kube::Client, ns: &str, deployment: &Value) -> Result<(), String> {
    let typed: Deployment = serde_json::from_value(deployment.clone()).expect("a Deployment");
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&params, &typed)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Installs the guard for `passmower` in `ns` and waits (bounded) until the apiserver applies
/// it; returns its name.
async fn install_guard(
    client: &kube::Client,
    ns: &str,
    opt_in: WebhookOptIn<'_>,
    native_lease: Option<&str>,
) -> String {
    let target = GuardTarget {
        namespace: ns,
        kind: WorkloadKind::Deployment,
        name: NAME,
        webhook: Some(opt_in),
        app_container: "passmower",
        native_lease,
    };
    let name = guard_policy_name(ns, NAME);
    let meta = ObjectMeta {
        name: Some(name.clone()),
        ..Default::default()
    };
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(
            &PostParams::default(),
            &ValidatingAdmissionPolicy {
                metadata: meta.clone(),
                spec: Some(guard_policy_spec(&target)),
                status: None,
            },
        )
        .await
        .expect("create the guard policy");
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .create(
            &PostParams::default(),
            &ValidatingAdmissionPolicyBinding {
                metadata: meta,
                spec: Some(guard_binding_spec(&name)),
            },
        )
        .await
        .expect("create the guard binding");
    // A template that opts out is refused by every guard on the webhook path, once it is in
    // effect.
    let opted_out = deployment(
        &json!({"metadata": {"annotations": {"passmower-elector.io/inject": "disabled"}}}),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while dry_create(client, ns, &opted_out).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "the guard {name} not in effect after 30s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    name
}

async fn remove_guard(client: &kube::Client, name: &str) {
    let _ = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    let _ = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// The template as the pod the webhook would be asked about.
fn pod_of(deployment: &Value) -> Value {
    let template = &deployment["spec"]["template"];
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": template["metadata"], "spec": template["spec"]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_refuses_two_replicas_for_every_reason_the_webhook_skips_their_pods() {
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    let ns = cluster.new_bare_namespace(NAME).await;
    opt_in(&admin, &ns.name).await;
    let guard = install_guard(&admin, &ns.name, WebhookOptIn::DEFAULT, None).await;

    let cases: [(&str, Value); 8] = [
        ("the webhook injects it", json!({})),
        (
            "opts out by label",
            json!({"metadata": {"labels": {"app": NAME, "passmower-elector.io/inject": "disabled"}}}),
        ),
        (
            "no container named passmower",
            json!({"spec": {"containers": [{"name": "app", "image": "passmower:1.3.0"}]}}),
        ),
        (
            "the container annotation names a container it lacks",
            json!({"metadata": {"annotations": {"passmower-elector.io/container": "app"}}}),
        ),
        (
            "the injected annotation",
            json!({"metadata": {"annotations": {"passmower-elector.io/injected": "0.1.0"}}}),
        ),
        (
            "the install container",
            json!({"spec": {
                "initContainers": [{"name": "passmower-elector-install", "image": "x"}],
                "containers": [{"name": "passmower", "image": "passmower:1.3.0"}]}}),
        ),
        (
            "a passmower-elector volume",
            json!({"spec": {
                "volumes": [{"name": "passmower-elector-grant", "emptyDir": {}}],
                "containers": [{"name": "passmower", "image": "passmower:1.3.0"}]}}),
        ),
        (
            "the container annotation names the container it has",
            json!({"metadata": {"annotations": {"passmower-elector.io/container": "app"}},
                   "spec": {"containers": [{"name": "app", "image": "passmower:1.3.0"}]}}),
        ),
    ];
    for (case, template) in cases {
        let deployment = deployment(&template);
        let webhook_injects = acts_on(&pod_of(&deployment), "passmower");
        let answer = dry_create(&admin, &ns.name, &deployment).await;
        match &answer {
            Ok(()) => {}
            Err(message) => assert!(
                message.contains(GUARD_DENIAL_PREFIX) && message.contains("asks for 2 replicas"),
                "{case}: refused by something else than the guard: {message}"
            ),
        }
        assert_eq!(
            answer.is_ok(),
            webhook_injects,
            "{case}: the guard {} two replicas whose pods the webhook {}: {answer:?}",
            if answer.is_ok() { "admits" } else { "refuses" },
            if webhook_injects { "injects" } else { "skips" },
        );
    }
    let refused = dry_create(
        &admin,
        &ns.name,
        &deployment(&json!({"spec": {"containers": [{"name": "app", "image": "x"}]}})),
    )
    .await
    .expect_err("refused");
    assert!(
        refused.contains("else passmower, and no passmower-elector.io/inject=disabled"),
        "{refused}"
    );
    remove_guard(&admin, &guard).await;

    // A namespace the webhook's chart excludes: nothing there is injected, whatever its labels.
    let excluded = [ns.name.as_str()];
    let guard = install_guard(
        &admin,
        &ns.name,
        WebhookOptIn {
            excluded_namespaces: &excluded,
            ..WebhookOptIn::DEFAULT
        },
        None,
    )
    .await;
    // The apiserver may still apply the guard just replaced for a moment: retry (bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        match dry_create(&admin, &ns.name, &deployment(&json!({}))).await {
            Err(message) => break message,
            Ok(()) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Ok(()) => panic!("two replicas in an excluded namespace admitted after 30s"),
        }
    };
    assert!(
        refused.contains(&format!(
            "The admission webhook never injects namespace {}",
            ns.name
        )),
        "{refused}"
    );
    remove_guard(&admin, &guard).await;
}

/// The pod guard: a pod of the Deployment that the webhook would inject, but that arrives
/// without the elector, is one the webhook never saw (down under `failurePolicy: Ignore`, or
/// its configuration gone). It is refused; the same pod injected, a pod the webhook skips, and
/// the pods of other workloads are admitted. Each case against the webhook's own decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_the_webhook_would_inject_is_refused_when_it_arrives_without_the_elector() {
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    let ns = cluster.new_bare_namespace(NAME).await;
    opt_in(&admin, &ns.name).await;
    // Pods name a ServiceAccount (here the namespace's default, which this control plane has
    // no controller to create).
    let sa: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "default"}})).expect("sa");
    Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(admin.clone(), &ns.name)
        .create(&PostParams::default(), &sa)
        .await
        .expect("create the default ServiceAccount");
    let target = GuardTarget {
        namespace: &ns.name,
        kind: WorkloadKind::Deployment,
        name: NAME,
        webhook: Some(WebhookOptIn::DEFAULT),
        app_container: "passmower",
        native_lease: None,
    };
    let objects = pod_guard(&target, "Deployment/passmower");
    assert_eq!(objects.len(), 2, "policy and binding");
    let name = pod_guard_policy_name(&ns.name, NAME);
    let policy: ValidatingAdmissionPolicy =
        serde_json::from_value(serde_json::to_value(&objects[0]).expect("json")).expect("policy");
    let binding: ValidatingAdmissionPolicyBinding =
        serde_json::from_value(serde_json::to_value(&objects[1]).expect("json")).expect("binding");
    Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("create the pod guard");
    Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("create its binding");

    // A pod as the Deployment's ReplicaSet creates it: owned by `passmower-<hash>`, labelled
    // with the hash.
    let pod = |owner: &str, template: &Value| -> Value {
        let mut pod = pod_of(&deployment(template));
        pod["metadata"]["generateName"] = json!(format!("{owner}-"));
        pod["metadata"]["labels"]["pod-template-hash"] = json!("5d8f7c9b4");
        pod["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{owner}-5d8f7c9b4"),
            "uid": "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f40", "controller": true,
        }]);
        pod
    };
    let uninjected = pod(NAME, &json!({}));
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        match dry_create_pod(&admin, &ns.name, &uninjected).await {
            Err(message) if message.contains(POD_GUARD_DENIAL_PREFIX) => break message,
            Err(message) => panic!("refused by something else than the pod guard: {message}"),
            Ok(()) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Ok(()) => panic!("the pod guard {name} not in effect after 30s"),
        }
    };
    assert!(
        refused.contains(POD_GUARD_DENIAL_PREFIX) && refused.contains("failurePolicy Ignore"),
        "{refused}"
    );

    let injected = json!({"spec": {
        "initContainers": [{"name": "passmower-elector", "image": "x", "restartPolicy": "Always"}],
        "containers": [{"name": "passmower", "image": "passmower:1.3.0"}]}});
    let cases: [(&str, Value); 5] = [
        ("the webhook did not run", pod(NAME, &json!({}))),
        ("injected", pod(NAME, &injected)),
        (
            "opted out by label",
            pod(
                NAME,
                &json!({"metadata": {"labels": {"app": NAME, "passmower-elector.io/inject": "disabled"}}}),
            ),
        ),
        (
            "no container to wrap",
            pod(
                NAME,
                &json!({"spec": {"containers": [{"name": "app", "image": "x"}]}}),
            ),
        ),
        (
            "another Deployment's pod",
            pod("passmower-redis", &json!({})),
        ),
    ];
    for (case, pod) in cases {
        let answer = dry_create_pod(&admin, &ns.name, &pod).await;
        let ours = pod["metadata"]["generateName"] == json!(format!("{NAME}-"));
        let never_seen_by_the_webhook = ours && acts_on(&pod, "passmower");
        assert_eq!(
            answer.is_err(),
            never_seen_by_the_webhook,
            "{case}: {answer:?}"
        );
        if let Err(message) = answer {
            assert!(
                message.contains(POD_GUARD_DENIAL_PREFIX),
                "{case}: {message}"
            );
        }
    }
    remove_guard(&admin, &name).await;
}

/// Server-side dry run of creating `pod`: `Ok` or the refusal's message.
async fn dry_create_pod(client: &kube::Client, ns: &str, pod: &Value) -> Result<(), String> {
    let typed: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(pod.clone()).expect("a Pod");
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
        .create(&params, &typed)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Where the electors hold Passmower's own Lease (`--native-lease`, a Passmower not known to be
/// older than 2.4), a template that keeps that election on that Lease is admitted with every
/// replica: removing passmower-elector from a 2.4 install returns to it. Anything short of it
/// (the election off, or on another Lease, or a duplicate that turns it off) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_keeps_passmowers_own_election_on_the_held_lease_is_admitted() {
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    // Not opted in: the webhook would inject nothing here.
    let ns = cluster.new_bare_namespace(NAME).await;
    let guard = install_guard(
        &admin,
        &ns.name,
        WebhookOptIn::DEFAULT,
        Some("passmower-operators"),
    )
    .await;
    let with_env = |vars: &[(&str, &str)]| {
        let env: Vec<Value> = vars
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        deployment(&json!({"spec": {"containers": [{
            "name": "passmower", "image": "ghcr.io/passmower/passmower:2.4.0", "env": env,
        }]}}))
    };
    let on = ("LEADER_ELECTION_ENABLED", "true");
    for vars in [
        vec![on],
        vec![on, ("LEADER_ELECTION_LEASE_NAME", "passmower-operators")],
    ] {
        let result = dry_create(&admin, &ns.name, &with_env(&vars)).await;
        assert!(result.is_ok(), "{vars:?}: {result:?}");
    }
    for vars in [
        vec![],
        vec![("LEADER_ELECTION_ENABLED", "false")],
        vec![on, ("LEADER_ELECTION_ENABLED", "false")],
        vec![on, ("LEADER_ELECTION_LEASE_NAME", "another-lease")],
    ] {
        let refused = dry_create(&admin, &ns.name, &with_env(&vars))
            .await
            .expect_err("admitted");
        assert!(refused.contains(GUARD_DENIAL_PREFIX), "{vars:?}: {refused}");
    }
    remove_guard(&admin, &guard).await;
}
