//! The write fence against the real kube-apiserver: the ValidatingAdmissionPolicy `inject`
//! generates admits Passmower's operator writes only from the pod the Lease names.
//!
//! Pods exist in the apiserver without a kubelet, so each "pod" here is a Pod object that never
//! runs, and its writes are made with a ServiceAccount token minted by the TokenRequest API and
//! bound to it (`boundObjectRef` kind Pod): the apiserver then puts the pod's name and UID into
//! the request's user info, as for a token the kubelet mounts. Passmower's CRDs come from the
//! upstream chart (`PME_UPSTREAM`, default `../shared/upstream/passmower`), read at test time.

use std::time::{Duration, Instant};

use crate::product::{install_fence, ElectorNamespaces};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use passmower_elector::inject::fence::DENIAL_PREFIX;
use pme_testkit::fence::{
    create_client, grant_passmower_rights, install_crds, mint_token, oidc_client_object,
    oidc_clients, oidc_users, remove_fence, set_holder, FakePod,
};
use pme_testkit::{client_from_kubeconfig, Cluster};
use serde_json::json;

const SA: &str = pme_testkit::cluster::ELECTOR_SERVICE_ACCOUNT;

/// The outcome of one write: admitted, or the apiserver's refusal (code and message).
type Verdict = Result<(), (u16, String)>;

fn verdict<T>(result: Result<T, kube::Error>) -> Verdict {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message)),
        Err(e) => panic!("the write failed without an API answer: {e}"),
    }
}

/// What Passmower's OIDCClient operator does to claim a client: a PUT of the status
/// subresource, conditional on the resourceVersion it read.
async fn claim_client(client: &kube::Client, ns: &str, name: &str, by: &str) -> Verdict {
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &oidc_clients());
    let mut obj = api.get_status(name).await.expect("read the OIDCClient");
    obj.data["status"] = json!({"instance": by});
    verdict(api.replace_status(name, &PostParams::default(), &obj).await)
}

/// What it does with a client's Secret: create it, patch it, delete it.
async fn secret_writes(client: &kube::Client, ns: &str, name: &str) -> [Verdict; 3] {
    let api = Api::<Secret>::namespaced(client.clone(), ns);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        string_data: Some([("OIDC_CLIENT_SECRET".to_owned(), "s".to_owned())].into()),
        ..Default::default()
    };
    let create = verdict(api.create(&PostParams::default(), &secret).await);
    // Patch and delete need an object to act on: one made by the admin when the create
    // was refused.
    if create.is_err() {
        let admin = Cluster::shared().admin_client().await;
        Api::<Secret>::namespaced(admin, ns)
            .create(&PostParams::default(), &secret)
            .await
            .expect("admin creates the Secret");
    }
    // Passmower sends a JSON patch; every kind of PATCH is an UPDATE to admission.
    let patch = json!({"metadata": {"labels": {"patched": "yes"}}});
    let patched = verdict(
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await,
    );
    let deleted = verdict(api.delete(name, &DeleteParams::default()).await);
    if deleted.is_err() {
        let admin = Cluster::shared().admin_client().await;
        let _ = Api::<Secret>::namespaced(admin, ns)
            .delete(name, &DeleteParams::default())
            .await;
    }
    [create, patched, deleted]
}

/// A secret-refresh Pod, as Passmower creates them.
async fn create_pod(client: &kube::Client, ns: &str, name: &str) -> Verdict {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        // No controller-manager makes the `default` ServiceAccount here.
        "spec": {
            "serviceAccountName": SA,
            "restartPolicy": "Never",
            "containers": [{"name": "refresh", "image": "example.invalid/refresh:1"}],
        },
    }))
    .expect("pod");
    verdict(
        Api::<Pod>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &pod)
            .await,
    )
}

/// What the 2.x operators add: the secret refresh and the user-event-hook provisioning run as
/// `batch/v1` Jobs.
async fn create_job(client: &kube::Client, ns: &str, name: &str) -> Verdict {
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "serviceAccountName": SA,
            "restartPolicy": "Never",
            "containers": [{"name": "refresh", "image": "example.invalid/refresh:1"}],
        }}},
    }))
    .expect("job");
    verdict(
        Api::<Job>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &job)
            .await,
    )
}

/// What 2.x's ingress discovery does with the OIDCClient of an Ingress: create it, patch it,
/// delete it when the Ingress goes (which garbage-collects the client's Secret).
async fn discovery_writes(client: &kube::Client, ns: &str, name: &str) -> [Verdict; 3] {
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &oidc_clients());
    let create = verdict(
        api.create(&PostParams::default(), &oidc_client_object(ns, name))
            .await,
    );
    let patch = verdict(
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"displayName": format!("{name} (discovered)")}})),
        )
        .await,
    );
    let delete = verdict(api.delete(name, &DeleteParams::default()).await);
    [create, patch, delete]
}

/// Creates OIDCClient `name` in `ns` as admin.
#[track_caller]
fn assert_denied(what: &str, v: &Verdict, must_mention: &[&str]) {
    match v {
        Ok(()) => panic!("{what}: admitted, but the fence must deny it"),
        Err((code, message)) => {
            assert_eq!(*code, 403, "{what}: {message}");
            assert!(
                message.contains(DENIAL_PREFIX),
                "{what}: refused, but not by the fence: {message}"
            );
            for m in must_mention {
                assert!(message.contains(m), "{what}: {message:?} lacks {m:?}");
            }
        }
    }
}

#[track_caller]
fn assert_admitted(what: &str, v: &Verdict) {
    if let Err((code, message)) = v {
        panic!("{what}: refused ({code}): {message}");
    }
}

/// Polls `write` until it gives a verdict of the wanted kind (the policy, or a Lease change,
/// reaches the apiserver's informers asynchronously); returns how long that took.
async fn until<F, Fut>(want_admitted: bool, limit: Duration, mut write: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Verdict>,
{
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if write().await.is_ok() == want_admitted {
            return Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holders_pod_may_write_operator_objects() {
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let admin = cluster.admin_client().await;
    let ns = cluster.new_namespace().await;
    grant_passmower_rights(&admin, &ns.name, SA).await;
    let a = FakePod::create(cluster, &ns.name, "passmower-a", SA).await;
    let b = FakePod::create(cluster, &ns.name, "passmower-b", SA).await;
    create_client(&admin, &ns.name, "app").await;
    set_holder(&admin, &ns, Some(&a.holder("1a2b3c4d"))).await;
    // RBAC reaches the authorizer's cache asynchronously.
    let allowed = until(true, Duration::from_secs(15), || {
        claim_client(&b.client, &ns.name, "app", "b")
    })
    .await;
    assert!(
        allowed.is_some(),
        "RBAC for the fake pods never took effect"
    );

    // Without the fence both pods write: what the fence must change.
    assert_admitted(
        "B's status PUT without the fence",
        &claim_client(&b.client, &ns.name, "app", "b").await,
    );

    let policy = install_fence(&admin, &ns).await;
    let active = until(false, Duration::from_secs(30), || {
        claim_client(&b.client, &ns.name, "app", "b")
    })
    .await
    .expect("the fence never took effect within 30s");
    println!(
        "fence in force {} ms after it was created",
        active.as_millis()
    );

    // A holds the Lease: A's operator writes are admitted, B's denied with the reason.
    let holder_a = a.holder("1a2b3c4d");
    assert_admitted(
        "A's status PUT",
        &claim_client(&a.client, &ns.name, "app", "a").await,
    );
    for (i, v) in secret_writes(&a.client, &ns.name, "secret-a")
        .await
        .iter()
        .enumerate()
    {
        assert_admitted(&format!("A's Secret write {i}"), v);
    }
    assert_admitted(
        "A's Pod create",
        &create_pod(&a.client, &ns.name, "refresh-a").await,
    );
    assert_admitted(
        "A's Job create",
        &create_job(&a.client, &ns.name, "refresh-a").await,
    );
    for (v, what) in discovery_writes(&a.client, &ns.name, "discovered-a")
        .await
        .iter()
        .zip(["create", "patch", "delete"])
    {
        assert_admitted(&format!("A's discovered OIDCClient {what}"), v);
    }
    let b_mentions = [
        "pod passmower-b does not hold Lease",
        &ns.lease_ref(),
        &holder_a,
    ];
    assert_denied(
        "B's status PUT",
        &claim_client(&b.client, &ns.name, "app", "b").await,
        &b_mentions,
    );
    let [create, patch, delete] = secret_writes(&b.client, &ns.name, "secret-b").await;
    assert_denied("B's Secret create", &create, &b_mentions);
    assert_denied("B's Secret JSON patch", &patch, &b_mentions);
    assert_denied("B's Secret delete", &delete, &b_mentions);
    assert_denied(
        "B's Pod create",
        &create_pod(&b.client, &ns.name, "refresh-b").await,
        &b_mentions,
    );
    // A cut-off or thawed 2.x leader's secret-refresh or hook Job, and its ingress discovery.
    assert_denied(
        "B's Job create",
        &create_job(&b.client, &ns.name, "refresh-b").await,
        &b_mentions,
    );
    create_client(&admin, &ns.name, "discovered-b").await;
    // Its create is refused, so its patch and delete then find nothing (404): only the
    // create's verdict is the fence's.
    let [create, _, _] = discovery_writes(&b.client, &ns.name, "discovered-b2").await;
    assert_denied("B's discovered OIDCClient create", &create, &b_mentions);
    let api = Api::<DynamicObject>::namespaced_with(b.client.clone(), &ns.name, &oidc_clients());
    assert_denied(
        "B's OIDCClient patch",
        &verdict(
            api.patch(
                "discovered-b",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"displayName": "stale"}})),
            )
            .await,
        ),
        &b_mentions,
    );
    assert_denied(
        "B's OIDCClient delete",
        &verdict(api.delete("discovered-b", &DeleteParams::default()).await),
        &b_mentions,
    );

    // Released: nobody writes.
    set_holder(&admin, &ns, Some("")).await;
    let followed = until(false, Duration::from_secs(5), || {
        claim_client(&a.client, &ns.name, "app", "a")
    })
    .await
    .expect("A still admitted 5s after the release");
    println!("release followed within {} ms", followed.as_millis());
    for (who, pod) in [("A", &a), ("B", &b)] {
        assert_denied(
            &format!("{who}'s status PUT on a released Lease"),
            &claim_client(&pod.client, &ns.name, "app", who).await,
            &["(released)"],
        );
    }

    // The holder moves to B: the verdict follows.
    set_holder(&admin, &ns, Some(&b.holder("5e6f7a8b"))).await;
    let followed = until(true, Duration::from_secs(5), || {
        claim_client(&b.client, &ns.name, "app", "b")
    })
    .await
    .expect("B not admitted 5s after it became the holder");
    println!("takeover followed within {} ms", followed.as_millis());
    assert_denied(
        "A's status PUT after the takeover",
        &claim_client(&a.client, &ns.name, "app", "a").await,
        &["pod passmower-a does not hold Lease", &b.holder("5e6f7a8b")],
    );
    assert_denied(
        "A's Secret create after the takeover",
        &secret_writes(&a.client, &ns.name, "secret-a2").await[0],
        &[],
    );
    // Another elector process of B (a restart adopting the Lease): still B's pod.
    set_holder(&admin, &ns, Some(&b.holder("99999999"))).await;
    assert_admitted(
        "B's status PUT under a new suffix",
        &claim_client(&b.client, &ns.name, "app", "b").await,
    );

    // Same pod name, another UID (a recreated StatefulSet pod, a force-deleted one): not it.
    let stale = format!(
        "{}_{}_1a2b3c4d",
        a.name, "00000000-0000-4000-8000-000000000000"
    );
    set_holder(&admin, &ns, Some(&stale)).await;
    let _ = until(false, Duration::from_secs(5), || {
        claim_client(&b.client, &ns.name, "app", "b")
    })
    .await
    .expect("B still admitted 5s after losing the Lease");
    assert_denied(
        "A's status PUT with another UID in the Lease",
        &claim_client(&a.client, &ns.name, "app", "a").await,
        &["pod passmower-a does not hold Lease"],
    );
    // A holder without a UID (an elector without --pod-uid) admits nobody either.
    set_holder(&admin, &ns, Some(&format!("{}_1a2b3c4d", a.name))).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_denied(
        "A's status PUT with a holder that has no UID",
        &claim_client(&a.client, &ns.name, "app", "a").await,
        &[],
    );

    // No Lease at all. The apiserver looks the parameter up before it runs the
    // matchConditions, so a missing parameter must not refuse: with
    // `parameterNotFoundAction: Deny` every Secret and Pod write in the cluster, by anyone,
    // would be refused (the Passmower pods whose electors would create the Lease included).
    // The fence is open then (documented): Passmower's writes are admitted too.
    set_holder(&admin, &ns, None).await;
    let open = until(true, Duration::from_secs(5), || {
        claim_client(&b.client, &ns.name, "app", "b")
    })
    .await;
    assert!(open.is_some(), "without a Lease the fence still refuses");
    let pods = Api::<Pod>::namespaced(admin.clone(), &ns.name);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "anyone"},
        "spec": {"serviceAccountName": SA, "containers": [{"name": "c", "image": "example.invalid/c:1"}]},
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the admin creates a Pod while the fenced Lease is missing");
    assert_admitted(
        "the admin's Secret writes while the Lease is missing",
        &secret_writes(&admin, &ns.name, "secret-admin").await[0],
    );

    remove_fence(&admin, &policy).await;
}

/// Why a missing Lease opens the fence (`parameterNotFoundAction: Allow`): the apiserver looks
/// the parameter up before it evaluates the matchConditions, so with `Deny` (and failurePolicy
/// Fail) a missing Lease refuses matched writes by anyone — here the admin's Pod create, as it would refuse the
/// ReplicaSet controller creating the Passmower pods of a fresh install, whose electors are what
/// creates the Lease. A private apiserver: for a while nobody can create a Pod in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_on_a_missing_lease_would_refuse_everyones_writes() {
    let cluster = Cluster::start_private();
    let admin = cluster.admin_client().await;
    let ns = cluster.new_namespace().await;
    set_holder(&admin, &ns, None).await;
    let policy = install_fence(&admin, &ns).await;
    // A missing parameter with Deny is an error of the policy, which inject's failurePolicy
    // (Ignore) would swallow: Fail shows what Deny alone does.
    Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .patch(
            &policy,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"failurePolicy": "Fail"}})),
        )
        .await
        .expect("set failurePolicy Fail");
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone());
    let set_action = |action: &'static str| {
        let (bindings, policy) = (bindings.clone(), policy.clone());
        async move {
            let patch = json!({"spec": {"paramRef": {"parameterNotFoundAction": action}}});
            bindings
                .patch(&policy, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap_or_else(|e| panic!("set parameterNotFoundAction {action}: {e}"));
        }
    };
    let mut attempt = 0;
    let mut admin_creates_a_pod = || {
        attempt += 1;
        let (admin, ns, name) = (admin.clone(), ns.name.clone(), format!("anyone-{attempt}"));
        async move { create_pod(&admin, &ns, &name).await }
    };

    // inject's binding: the admin is not affected by a missing Lease.
    assert_admitted(
        "the admin's Pod create with Allow",
        &admin_creates_a_pod().await,
    );
    set_action("Deny").await;
    let refused = until(false, Duration::from_secs(30), &mut admin_creates_a_pod)
        .await
        .expect("with Deny, a missing Lease never refused the admin's Pod create within 30s");
    let answer = admin_creates_a_pod().await;
    let Err((_, message)) = &answer else {
        panic!("with Deny the admin's Pod create was admitted again");
    };
    // Refused for the missing parameter (as a configuration error, 422), not by the
    // expression: the admin is no Passmower pod, and the matchConditions never ran.
    assert!(
        message.contains("no params found") && !message.contains(DENIAL_PREFIX),
        "{message}"
    );
    println!(
        "with Deny, the admin's Pod create was refused {} ms after the change: {message}",
        refused.as_millis()
    );
    set_action("Allow").await;
    until(true, Duration::from_secs(30), &mut admin_creates_a_pod)
        .await
        .expect("back to Allow, the admin's Pod create still refused after 30s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_users_and_other_resources_are_not_fenced() {
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let admin = cluster.admin_client().await;
    let ns = cluster.new_namespace().await;
    grant_passmower_rights(&admin, &ns.name, SA).await;
    // Another app in the same namespace, with the same rights.
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns.name)
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: ObjectMeta {
                    name: Some("other".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("create serviceaccount other");
    grant_passmower_rights(&admin, &ns.name, "other").await;
    let a = FakePod::create(cluster, &ns.name, "passmower-a", SA).await;
    let other = FakePod::create(cluster, &ns.name, "other-a", "other").await;
    create_client(&admin, &ns.name, "app").await;
    // Released: Passmower's operator writes are all denied from here on.
    set_holder(&admin, &ns, Some("")).await;
    let policy = install_fence(&admin, &ns).await;
    let active = until(false, Duration::from_secs(30), || {
        claim_client(&a.client, &ns.name, "app", "a")
    })
    .await;
    assert!(active.is_some(), "the fence never took effect within 30s");

    // The admin, and another ServiceAccount's pod: untouched.
    assert_admitted(
        "the admin's status PUT",
        &claim_client(&admin, &ns.name, "app", "admin").await,
    );
    let until_rbac = until(true, Duration::from_secs(15), || {
        claim_client(&other.client, &ns.name, "app", "other")
    })
    .await;
    assert!(until_rbac.is_some(), "another app's status PUT was refused");
    for (i, v) in secret_writes(&other.client, &ns.name, "secret-other")
        .await
        .iter()
        .enumerate()
    {
        assert_admitted(&format!("another app's Secret write {i}"), v);
    }

    // Passmower's writes the fence does not cover: OIDCUsers (its HTTP side writes them on
    // every replica), and anything else its ServiceAccount may do.
    let user: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "codemowers.cloud/v1beta1",
        "kind": "OIDCUser",
        "metadata": {"name": "alice", "namespace": ns.name},
        "spec": {"type": "person", "email": "alice@example.com"},
    }))
    .expect("OIDCUser");
    assert_admitted(
        "Passmower's OIDCUser create",
        &verdict(
            Api::<DynamicObject>::namespaced_with(a.client.clone(), &ns.name, &oidc_users())
                .create(&PostParams::default(), &user)
                .await,
        ),
    );
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("unfenced".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    assert_admitted(
        "Passmower's ConfigMap create",
        &verdict(
            Api::<ConfigMap>::namespaced(a.client.clone(), &ns.name)
                .create(&PostParams::default(), &cm)
                .await,
        ),
    );

    // Passmower's ServiceAccount without a pod-bound token (a static token here; a legacy
    // Secret token in a cluster): it cannot be tied to the holder, so it is denied even when
    // a pod holds the Lease.
    set_holder(&admin, &ns, Some(&a.holder("1a2b3c4d"))).await;
    until(true, Duration::from_secs(5), || {
        claim_client(&a.client, &ns.name, "app", "a")
    })
    .await
    .expect("A admitted as holder");
    let unbound = ns.elector_client().await;
    assert_denied(
        "a status PUT with a token bound to no pod",
        &claim_client(&unbound, &ns.name, "app", "x").await,
        &["no pod-bound ServiceAccount token"],
    );
    // A token bound to no object at all, minted for the same ServiceAccount.
    let token = mint_token(&admin, &ns.name, SA, None).await;
    let unbound = client_from_kubeconfig(
        &cluster.kubeconfig_for_token(&format!("{}-unbound", ns.name), &token),
    )
    .await;
    assert_denied(
        "a status PUT with an unbound TokenRequest token",
        &claim_client(&unbound, &ns.name, "app", "x").await,
        &["no pod-bound ServiceAccount token"],
    );

    remove_fence(&admin, &policy).await;
}

/// An unrelated user's Secret writes (create, update, delete) in `ns`: each must be admitted.
/// A write that reaches no apiserver (it is restarting) is `Err((0, _))`.
async fn unrelated_secret_writes(admin: &kube::Client, ns: &str, name: &str) -> [Verdict; 3] {
    let api = Api::<Secret>::namespaced(admin.clone(), ns);
    let lenient = |r: Result<(), kube::Error>| match r {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message)),
        Err(e) => Err((0, e.to_string())),
    };
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        string_data: Some([("password".to_owned(), "s".to_owned())].into()),
        ..Default::default()
    };
    let create = lenient(api.create(&PostParams::default(), &secret).await.map(drop));
    let patch = json!({"metadata": {"labels": {"patched": "yes"}}});
    let update = lenient(
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop),
    );
    let delete = lenient(api.delete(name, &DeleteParams::default()).await.map(drop));
    [create, update, delete]
}

#[track_caller]
fn assert_all_admitted(state: &str, verdicts: &[Verdict; 3]) {
    for (what, v) in ["create", "update", "delete"].iter().zip(verdicts) {
        assert_admitted(
            &format!("{state}: an unrelated namespace's Secret {what} by the admin"),
            v,
        );
    }
}

/// The fence must never hurt the cluster: its binding matches every Secret write and Pod
/// create, and the apiserver looks the Lease up before the matchConditions run, so any failure
/// of that look-up (the Lease informer not synced, stopped or broken) would, under
/// failurePolicy Fail, refuse every such write by anyone. With Ignore, an unrelated user's
/// Secret writes in an unrelated namespace stay admitted whatever happens to the Lease and the
/// fence: missing, created, deleted, recreated, the binding deleted and recreated (which stops
/// and restarts the apiserver's Lease informer for policies), and right after an apiserver
/// restart, from its first answer on. A private apiserver, as it is restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrelated_writes_are_admitted_whatever_the_lease_and_the_fence_go_through() {
    use pme_testkit::cluster::ControlPlaneProcess;
    let cluster = std::sync::Arc::new(Cluster::start_private());
    install_crds(&cluster).await;
    let admin = cluster.admin_client().await;
    let ns = cluster.new_namespace().await;
    let other = cluster.new_namespace().await;
    grant_passmower_rights(&admin, &ns.name, SA).await;
    let a = FakePod::create(&cluster, &ns.name, "passmower-a", SA).await;
    let b = FakePod::create(&cluster, &ns.name, "passmower-b", SA).await;
    create_client(&admin, &ns.name, "app").await;
    let mut n = 0;
    let mut writes = || {
        n += 1;
        let (admin, other) = (admin.clone(), other.name.clone());
        async move { unrelated_secret_writes(&admin, &other, &format!("unrelated-{n}")).await }
    };

    set_holder(&admin, &ns, None).await;
    let policy = install_fence(&admin, &ns).await;
    assert_all_admitted("the Lease missing", &writes().await);
    set_holder(&admin, &ns, Some(&a.holder("1a2b3c4d"))).await;
    until(false, Duration::from_secs(30), || {
        claim_client(&b.client, &ns.name, "app", "b")
    })
    .await
    .expect("the fence never took effect within 30s");
    assert_all_admitted("the Lease held", &writes().await);
    set_holder(&admin, &ns, None).await;
    assert_all_admitted("the Lease just deleted", &writes().await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_all_admitted("the Lease deleted", &writes().await);
    set_holder(&admin, &ns, Some(&a.holder("1a2b3c4d"))).await;
    assert_all_admitted("the Lease just recreated", &writes().await);
    until(false, Duration::from_secs(30), || {
        claim_client(&b.client, &ns.name, "app", "b")
    })
    .await
    .expect("the recreated Lease never closed the fence within 30s");
    assert_all_admitted("the Lease recreated", &writes().await);

    // No binding names a Lease parameter for longer than the policy source's refresh (1s):
    // the apiserver drops its Lease informer for policies, and starts one again for the new
    // binding.
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone());
    let binding = bindings.get(&policy).await.expect("the fence binding");
    bindings
        .delete(&policy, &DeleteParams::default())
        .await
        .expect("delete the fence binding");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_all_admitted("the binding deleted", &writes().await);
    let mut recreated = binding.clone();
    recreated.metadata = ObjectMeta {
        name: binding.metadata.name.clone(),
        labels: binding.metadata.labels.clone(),
        annotations: binding.metadata.annotations.clone(),
        ..Default::default()
    };
    bindings
        .create(&PostParams::default(), &recreated)
        .await
        .expect("recreate the fence binding");
    assert_all_admitted("the binding just recreated", &writes().await);
    let closed = until(false, Duration::from_secs(30), || {
        claim_client(&b.client, &ns.name, "app", "b")
    })
    .await;
    assert_all_admitted("the binding recreated", &writes().await);
    println!(
        "binding recreated: the fence refused the other pod again after {closed:?} (None: it \
         stayed open for 30s)"
    );

    // Restarted: from the first answer of the new apiserver on, every unrelated write is
    // admitted (one that reaches no apiserver only marks the outage).
    let c = cluster.clone();
    let restart = tokio::task::spawn_blocking(move || {
        c.stop(
            ControlPlaneProcess::KubeApiserver,
            nix::sys::signal::Signal::SIGTERM,
            Duration::from_secs(15),
        );
        c.restart(ControlPlaneProcess::KubeApiserver)
    });
    let t0 = Instant::now();
    let (mut down, mut answered) = (false, 0);
    let mut other_answers: std::collections::BTreeMap<String, usize> = Default::default();
    while t0.elapsed() < Duration::from_secs(60) && answered < 20 {
        let verdicts = writes().await;
        if verdicts.iter().any(|v| matches!(v, Err((0, _)))) {
            down = true;
        } else if down {
            answered += 1;
            for v in &verdicts {
                let Err((code, message)) = v else { continue };
                // The fence's refusals name it; anything else is the apiserver starting.
                assert!(
                    !message.contains(&policy),
                    "{} ms after the restart began, the fence refused an unrelated \
                     namespace's Secret write by the admin: {code} {message}",
                    t0.elapsed().as_millis()
                );
                *other_answers
                    .entry(format!("{code} {message}"))
                    .or_default() += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("after the restart, answers other than admitted: {other_answers:?}");
    restart
        .await
        .expect("restart task")
        .expect("the apiserver starts again");
    assert!(
        answered > 0,
        "the restarted apiserver did not answer within 60s"
    );
    remove_fence(&admin, &policy).await;
}

/// Right after an apiserver start, could the fence be evaluated before its Lease informer has
/// synced, it would admit (failurePolicy Ignore). Measured here: how long after the restarted
/// apiserver's first answer the holder's writes are admitted, and what is answered before.
/// Asserted: the pod that does not hold the Lease is never admitted meanwhile (the apiserver
/// answers only once its admission plugins are ready).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_apiserver_restart_the_other_pod_is_still_refused() {
    use pme_testkit::cluster::ControlPlaneProcess;
    let cluster = std::sync::Arc::new(Cluster::start_private());
    install_crds(&cluster).await;
    let admin = cluster.admin_client().await;
    let ns = cluster.new_namespace().await;
    grant_passmower_rights(&admin, &ns.name, SA).await;
    let a = FakePod::create(&cluster, &ns.name, "passmower-a", SA).await;
    let b = FakePod::create(&cluster, &ns.name, "passmower-b", SA).await;
    create_client(&admin, &ns.name, "app").await;
    set_holder(&admin, &ns, Some(&a.holder("1a2b3c4d"))).await;
    install_fence(&admin, &ns).await;
    until(false, Duration::from_secs(30), || {
        claim_client(&b.client, &ns.name, "app", "b")
    })
    .await
    .expect("the fence never took effect within 30s");
    until(true, Duration::from_secs(15), || {
        claim_client(&a.client, &ns.name, "app", "a")
    })
    .await
    .expect("the holder is admitted before the restart");

    for round in 1..=3 {
        // Stopped, then started again; meanwhile both pods keep writing, from the stop on,
        // so what a client sees before /readyz says ok is measured too.
        let c = cluster.clone();
        let restart = tokio::task::spawn_blocking(move || {
            c.stop(
                ControlPlaneProcess::KubeApiserver,
                nix::sys::signal::Signal::SIGTERM,
                Duration::from_secs(15),
            );
            c.restart(ControlPlaneProcess::KubeApiserver)
        });
        let t0 = Instant::now();
        let mut answers: std::collections::BTreeMap<String, usize> = Default::default();
        // Answers count from the first moment nothing listened (or from the restarted
        // apiserver's readiness): before it, the old process was still draining.
        let mut down = false;
        let mut first_answer = None;
        let mut admitted = None;
        while t0.elapsed() < Duration::from_secs(60) {
            let vb = claim_client_lenient(&b.client, &ns.name, "app", "b").await;
            assert!(
                vb.is_err(),
                "round {round}: B, which does not hold the Lease, was admitted {:?} after the stop",
                t0.elapsed()
            );
            let va = claim_client_lenient(&a.client, &ns.name, "app", "a").await;
            // An iteration in which either pod reached no apiserver only marks the outage.
            if [&va, &vb].iter().any(|v| matches!(v, Err((0, _)))) {
                down = true;
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            // A restart quicker than one iteration shows no outage to either pod: once the
            // apiserver is back (the restart task returned), the answers count anyway.
            if !down && !restart.is_finished() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            first_answer.get_or_insert(t0.elapsed());
            for (who, v) in [("holder", &va), ("other pod", &vb)] {
                if let Err((code, message)) = v {
                    let kind = if message.contains("not yet synced") {
                        "Lease informer not yet synced"
                    } else if message.contains("not yet ready") {
                        "policy plugin not yet ready"
                    } else if message.contains(DENIAL_PREFIX) {
                        "denied by the fence's expression"
                    } else if message.starts_with("read: ") {
                        "the read before the write refused"
                    } else {
                        "other"
                    };
                    *answers.entry(format!("{who}: {code} {kind}")).or_default() += 1;
                }
            }
            if va.is_ok() {
                admitted = Some(t0.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        restart
            .await
            .expect("restart task")
            .expect("the apiserver starts again");
        let (Some(first), Some(admitted)) = (first_answer, admitted) else {
            panic!("round {round}: the holder was not admitted within 60s: {answers:?}");
        };
        println!(
            "round {round}: the restarted apiserver answered {} ms after the stop began; the \
             holder was admitted {} ms after that first answer; refusals until then: {answers:?}",
            first.as_millis(),
            (admitted - first).as_millis()
        );
    }
}

/// [`claim_client`] that reports a failed read (the apiserver still starting) as a refusal.
async fn claim_client_lenient(client: &kube::Client, ns: &str, name: &str, by: &str) -> Verdict {
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &oidc_clients());
    let mut obj = match api.get_status(name).await {
        Ok(o) => o,
        Err(kube::Error::Api(s)) => return Err((s.code, format!("read: {}", s.message))),
        Err(e) => return Err((0, format!("read: {e}"))),
    };
    obj.data["status"] = json!({"instance": by});
    match api.replace_status(name, &PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message)),
        Err(e) => Err((0, e.to_string())),
    }
}

/// `--passmower-election=fence-only`: Passmower 2.4's own election writes its pod name into
/// Lease `passmower-operators` as the holder. The objects `inject` emits for it (the Role for
/// that Lease and the fence keyed on it) are applied as they come; then a pod whose name is not
/// the holder is refused its operator writes and the holder's pod is admitted, and the verdict
/// follows the holder as upstream's election moves it. The Role lets a pod-bound token do what
/// upstream's election does to its Lease (create, get, update).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_only_admits_the_pod_named_as_holder_of_passmowers_own_lease() {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use passmower_elector::inject::{fence, inject, InjectOptions, PassmowerElection};
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let admin = cluster.admin_client().await;
    let lease_name = passmower_elector::inject::native_election::DEFAULT_NATIVE_LEASE;
    let ns = cluster.new_namespace_with(lease_name, &[]).await;
    grant_passmower_rights(&admin, &ns.name, SA).await;
    let deployment = format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: passmower, namespace: {ns}}}
spec:
  selector: {{matchLabels: {{app: passmower}}}}
  template:
    metadata: {{labels: {{app: passmower}}}}
    spec:
      serviceAccountName: {SA}
      containers:
      - name: passmower
        image: ghcr.io/passmower/passmower:2.4.0
        env: [{{name: LEADER_ELECTION_ENABLED, value: 'true'}}]
",
        ns = ns.name
    );
    let opts = InjectOptions {
        passmower_election: PassmowerElection::FenceOnly,
        ..InjectOptions::new("registry.example.com/passmower-elector:test")
    };
    let injected = inject(&deployment, &opts).expect("inject --passmower-election=fence-only");
    let kinds: Vec<&str> = injected
        .added
        .iter()
        .filter_map(|o| o["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "Role",
            "RoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    let mut applier = pme_testkit::manifests::Applier::new(admin.clone());
    for object in &injected.added {
        let doc = serde_json::to_value(object).expect("json");
        applier
            .send(&doc, &ns.name, pme_testkit::manifests::Mode::Create)
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", pme_testkit::manifests::describe(&doc)));
    }
    let policy = fence::fence_policy_name(&ns.name, SA);

    let a = FakePod::create(cluster, &ns.name, "passmower-a", SA).await;
    let b = FakePod::create(cluster, &ns.name, "passmower-b", SA).await;
    create_client(&admin, &ns.name, "app").await;

    // Upstream's election as pod A: create the Lease with its pod name as holder, read it,
    // renew it (a PUT) — through the Role inject emitted (RBAC reaches the cache lazily).
    let leases = Api::<Lease>::namespaced(a.client.clone(), &ns.name);
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(lease_name.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(a.name.clone()),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
    };
    let created = pme_testkit::wait_until_async(
        Duration::from_secs(15),
        Duration::from_millis(200),
        || async { leases.create(&PostParams::default(), &lease).await.is_ok() },
    )
    .await;
    assert!(
        created,
        "pod A could not create {lease_name} through the emitted Role"
    );
    let read = leases.get(lease_name).await.expect("pod A reads its Lease");
    leases
        .replace(lease_name, &PostParams::default(), &read)
        .await
        .expect("pod A renews (updates) its Lease");

    // The holder is "passmower-a": A admitted, B refused naming the holder.
    let active = until(false, Duration::from_secs(30), || {
        claim_client(&b.client, &ns.name, "app", "b")
    })
    .await
    .expect("the fence-only fence never refused the non-holder within 30s");
    println!("fence-only fence in force after {} ms", active.as_millis());
    assert_admitted(
        "the holder's status PUT",
        &claim_client(&a.client, &ns.name, "app", "a").await,
    );
    for (i, v) in secret_writes(&a.client, &ns.name, "secret-a")
        .await
        .iter()
        .enumerate()
    {
        assert_admitted(&format!("the holder's Secret write {i}"), v);
    }
    let mentions = [
        "pod passmower-b does not hold Lease",
        &format!("{}/{lease_name}", ns.name),
        "(holder passmower-a)",
    ];
    assert_denied(
        "the non-holder's status PUT",
        &claim_client(&b.client, &ns.name, "app", "b").await,
        &mentions,
    );
    assert_denied(
        "the non-holder's Secret create",
        &secret_writes(&b.client, &ns.name, "secret-b").await[0],
        &mentions,
    );
    assert_denied(
        "the non-holder's Pod create",
        &create_pod(&b.client, &ns.name, "refresh-b").await,
        &mentions,
    );

    // Upstream's stop(): the holder is cleared; nobody writes. Then B takes it.
    set_holder(&admin, &ns, Some("")).await;
    until(false, Duration::from_secs(5), || {
        claim_client(&a.client, &ns.name, "app", "a")
    })
    .await
    .expect("A still admitted 5s after the release");
    set_holder(&admin, &ns, Some(&b.name)).await;
    until(true, Duration::from_secs(5), || {
        claim_client(&b.client, &ns.name, "app", "b")
    })
    .await
    .expect("B not admitted 5s after it became the holder");
    assert_denied(
        "the old holder's status PUT",
        &claim_client(&a.client, &ns.name, "app", "a").await,
        &[
            "pod passmower-a does not hold Lease",
            "(holder passmower-b)",
        ],
    );
    // The elector's identity format does not name a pod for this fence.
    set_holder(&admin, &ns, Some(&b.holder("1a2b3c4d"))).await;
    until(false, Duration::from_secs(5), || {
        claim_client(&b.client, &ns.name, "app", "b")
    })
    .await
    .expect("B still admitted under an elector-style holder");

    remove_fence(&admin, &policy).await;
}
