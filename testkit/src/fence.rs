//! Fixtures for the write fence on the real apiserver: Passmower's CRDs and rights, Pod
//! objects that never run (no kubelet) with ServiceAccount tokens bound to them (the apiserver
//! then puts the pod's name and UID into the request's user info, as for a token the kubelet
//! mounts), the Lease's holder, and a fence's objects installed and removed. (The fence
//! `inject` generates comes from the product: `tests/product`.)

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::manifests::{self, Applier};
use crate::{client_from_kubeconfig, Cluster, TestNs};

/// Upstream Passmower 1.3.0: `PME_UPSTREAM`, else `../shared/upstream/passmower` beside the
/// repository.
pub fn upstream_dir() -> PathBuf {
    std::env::var_os("PME_UPSTREAM")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo().join("../shared/upstream/passmower"))
}

/// Creates Passmower's CRDs from the upstream chart (a no-op when they exist) and waits until
/// the OIDCClient kind is served.
pub async fn install_crds(cluster: &Cluster) {
    install_crds_of(&cluster.admin_client().await, &upstream_dir()).await;
}

/// [`install_crds`] through `client` (an administrator of any cluster), from the chart of the
/// upstream tree `tree` (another generation, or [`upstream_dir`]).
pub async fn install_crds_of(client: &kube::Client, tree: &std::path::Path) {
    let path = tree.join("charts/passmower/templates/crds.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (set PME_UPSTREAM to the upstream Passmower checkout)",
            path.display()
        )
    });
    let mut applier = Applier::new(client.clone());
    for doc in manifests::parse_stream(&text) {
        match applier.send(&doc, "default", manifests::Mode::Create).await {
            Ok(_) => {}
            Err(e) if e.contains("AlreadyExists") || e.contains("already exists") => {}
            Err(e) => panic!("create {}: {e}", manifests::describe(&doc)),
        }
    }
    let served = crate::wait_until_async(
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            Api::<DynamicObject>::all_with(client.clone(), &oidc_clients())
                .list(&Default::default())
                .await
                .is_ok()
        },
    )
    .await;
    assert!(served, "the OIDCClient CRD was not served within 30s");
}

pub fn oidc_clients() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("codemowers.cloud", "v1beta1", "OIDCClient"),
        "oidcclients",
    )
}

pub fn oidc_users() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("codemowers.cloud", "v1beta1", "OIDCUser"),
        "oidcusers",
    )
}

/// What Passmower's ClusterRole allows, in `ns`, for `subject` (a ServiceAccount of `ns`).
pub async fn grant_passmower_rights(admin: &kube::Client, ns: &str, subject: &str) {
    let name = format!("passmower-writes-{subject}");
    let rule = |group: &str, resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let rules = vec![
        rule(
            "codemowers.cloud",
            &[
                "oidcclients",
                "oidcclients/status",
                "oidcusers",
                "oidcusers/status",
            ],
            &["get", "list", "watch", "create", "update", "patch"],
        ),
        rule(
            "",
            &["secrets"],
            &["get", "create", "update", "patch", "delete"],
        ),
        rule("codemowers.cloud", &["oidcclients"], &["delete"]),
        rule("", &["pods"], &["create"]),
        rule("batch", &["jobs"], &["create"]),
        rule("", &["configmaps"], &["create"]),
    ];
    let meta = ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(ns.into()),
        ..Default::default()
    };
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &Role {
                metadata: meta.clone(),
                rules: Some(rules.clone()),
            },
        )
        .await
        .expect("create role");
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: meta,
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "Role".into(),
                    name,
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: subject.into(),
                    namespace: Some(ns.into()),
                    ..Default::default()
                }]),
            },
        )
        .await
        .expect("create rolebinding");
}

/// A Pod object that never runs (no kubelet) and a client whose token is bound to it.
pub struct FakePod {
    pub name: String,
    pub uid: String,
    pub client: kube::Client,
    /// A kubeconfig with the pod-bound token, for processes that run "in" this pod.
    pub kubeconfig: PathBuf,
}

impl FakePod {
    pub async fn create(cluster: &Cluster, ns: &str, name: &str, service_account: &str) -> FakePod {
        let admin = cluster.admin_client().await;
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "serviceAccountName": service_account,
                "containers": [{"name": "passmower", "image": "example.invalid/passmower:1"}],
            },
        }))
        .expect("pod");
        let pod = Api::<Pod>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("create pod {name}: {e}"));
        let uid = pod.metadata.uid.expect("pod uid");
        let token = mint_token(&admin, ns, service_account, Some((name, &uid))).await;
        let kubeconfig = cluster.kubeconfig_for_token(&format!("{ns}-{name}"), &token);
        FakePod {
            name: name.into(),
            uid,
            client: client_from_kubeconfig(&kubeconfig).await,
            kubeconfig,
        }
    }

    /// A holder identity as this pod's elector writes it.
    pub fn holder(&self, suffix: &str) -> String {
        format!("{}_{}_{suffix}", self.name, self.uid)
    }
}

/// A TokenRequest token of `service_account`, bound to pod `(name, uid)` when given.
pub async fn mint_token(
    admin: &kube::Client,
    ns: &str,
    service_account: &str,
    pod: Option<(&str, &str)>,
) -> String {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            bound_object_ref: pod.map(|(name, uid)| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
            }),
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request(service_account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {service_account}: {e}"))
        .status
        .expect("token status")
        .token
}

/// Sets the Lease's holder (`None` deletes the Lease), as admin.
pub async fn set_holder(admin: &kube::Client, ns: &TestNs, holder: Option<&str>) {
    let leases = Api::<Lease>::namespaced(admin.clone(), &ns.name);
    let Some(holder) = holder else {
        let _ = leases
            .delete(&ns.lease_name, &DeleteParams::default())
            .await;
        return;
    };
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(ns.lease_name.clone()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
    };
    leases
        .patch(
            &ns.lease_name,
            &PatchParams::apply("pme-tests").force(),
            &Patch::Apply(&lease),
        )
        .await
        .unwrap_or_else(|e| panic!("set the Lease holder to {holder:?}: {e}"));
}

/// Installs a fence: its policy and its binding (as `inject` generates them, in that order),
/// named `name`; returns the name.
pub async fn install_fence_objects(
    admin: &kube::Client,
    name: String,
    objects: &[serde_json::Value],
) -> String {
    let policy: ValidatingAdmissionPolicy =
        serde_json::from_value(objects[0].clone()).expect("policy");
    let binding: ValidatingAdmissionPolicyBinding =
        serde_json::from_value(objects[1].clone()).expect("binding");
    Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("create the fence policy");
    Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("create the fence binding");
    name
}

pub async fn remove_fence(admin: &kube::Client, name: &str) {
    let dp = DeleteParams::default();
    let _ = Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone())
        .delete(name, &dp)
        .await;
    let _ = Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .delete(name, &dp)
        .await;
}

/// An OIDCClient `name` in `ns` with a minimal valid spec, as admin.
pub async fn create_client(admin: &kube::Client, ns: &str, name: &str) {
    Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &oidc_clients())
        .create(&PostParams::default(), &oidc_client_object(ns, name))
        .await
        .unwrap_or_else(|e| panic!("create OIDCClient {name}: {e}"));
}

/// An OIDCClient `name` in `ns` as Passmower's CRD accepts it (what ingress discovery creates).
pub fn oidc_client_object(ns: &str, name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "codemowers.cloud/v1beta1",
        "kind": "OIDCClient",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "displayName": name,
            "uri": "https://app.example.com/",
            "redirectUris": ["https://app.example.com/callback"],
            "grantTypes": ["authorization_code"],
            "responseTypes": ["code"],
            "availableScopes": ["openid"],
        },
    }))
    .expect("OIDCClient")
}
