//! The control plane the api tests run against ([`crate::control_plane`]): one per test
//! binary, on loopback, started on first use and killed at exit, with a static token for an
//! elector identity in every namespace a test asks for. A test that stops or restarts the
//! control plane, or needs cluster-wide objects others must not see, starts a private one,
//! whose processes it can stop and start again in place.

use std::net::SocketAddr;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

pub use crate::control_plane::ControlPlaneProcess;
use crate::control_plane::{ControlPlane, Options, TokenUser};
pub use crate::kubeconfig::client_from_kubeconfig;
use crate::kubeconfig::write_kubeconfig;

/// Writes Lease `name` as a writer other than the electors would (an administrator, another
/// election): reads it (a default one named `name` when absent), lets `change` edit it, and
/// creates or replaces it. An elector renewing the same Lease can make the write meet a newer
/// resourceVersion (409): it is read again and retried, as any Lease writer must, at most 20
/// times.
pub async fn write_lease(
    api: &Api<k8s_openapi::api::coordination::v1::Lease>,
    name: &str,
    change: impl Fn(&mut k8s_openapi::api::coordination::v1::Lease),
) {
    let pp = PostParams::default();
    for attempt in 1..=20 {
        let mut lease = api
            .get_opt(name)
            .await
            .unwrap_or_else(|e| panic!("read Lease {name}: {e}"))
            .unwrap_or_default();
        lease.metadata.name = Some(name.to_owned());
        change(&mut lease);
        let written = if lease.metadata.resource_version.is_some() {
            api.replace(name, &pp, &lease).await.map(drop)
        } else {
            api.create(&pp, &lease).await.map(drop)
        };
        match written {
            Ok(()) => return,
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 20 => {}
            Err(e) => panic!("write Lease {name} (attempt {attempt}): {e}"),
        }
    }
}

/// Elector identities baked into the static token file (it is read once, at start): namespace
/// `e2e-N` for N in 1..=this. The api tier's tests share one control plane; more namespaces
/// than this per test binary is a test design problem.
pub const MAX_NAMESPACES: usize = 512;

/// The Lease name test namespaces use unless a test asks for another.
pub const DEFAULT_LEASE_NAME: &str = "passmower-operators";

/// The ServiceAccount name the elector runs as in every test namespace, as in the chart.
pub const ELECTOR_SERVICE_ACCOUNT: &str = "passmower";

const RBAC_SETTLE_TIMEOUT: Duration = Duration::from_secs(15);

/// A running etcd + kube-apiserver pair (a [`ControlPlane`]: stop, restart, logs, the admin)
/// and its test namespaces. Get it with [`Cluster::shared`], or [`Cluster::start_private`] for
/// one a test may restart.
pub struct Cluster {
    control_plane: ControlPlane,
    next_namespace: AtomicUsize,
}

impl Deref for Cluster {
    type Target = ControlPlane;

    fn deref(&self) -> &ControlPlane {
        &self.control_plane
    }
}

/// A fresh namespace with an elector identity bound to the Lease RBAC.
#[derive(Clone, Debug)]
pub struct TestNs {
    /// The namespace name, `e2e-N`.
    pub name: String,
    /// `127.0.0.1:<port>` of the kube-apiserver the namespace lives in.
    pub api_addr: SocketAddr,
    /// The Lease name the RBAC in this namespace is scoped to.
    pub lease_name: String,
    /// Kubeconfig of `system:serviceaccount:<name>:passmower`, talking to the apiserver
    /// directly (see `FaultProxy::kubeconfig_via` to route it through a fault proxy).
    pub elector_kubeconfig: PathBuf,
    /// The rules the elector identity was granted.
    pub rules: Vec<PolicyRule>,
}

impl TestNs {
    /// A client with the elector's identity and permissions.
    pub async fn elector_client(&self) -> kube::Client {
        client_from_kubeconfig(&self.elector_kubeconfig).await
    }

    /// `namespace/name` of the Lease, as the grant objects spell it.
    pub fn lease_ref(&self) -> String {
        format!("{}/{}", self.name, self.lease_name)
    }
}

impl Cluster {
    /// The control plane of this test binary, started on first call (a few seconds). Panics
    /// with the control plane's last log lines if it cannot start; every later caller gets the
    /// same panic instead of a second attempt.
    pub fn shared() -> &'static Cluster {
        static SHARED: OnceLock<Result<Cluster, String>> = OnceLock::new();
        let started = SHARED.get_or_init(start);
        match started {
            Ok(cluster) => cluster,
            Err(e) => panic!("test control plane unavailable: {e}"),
        }
    }

    /// A control plane of the caller's own (a few seconds to start), which it may stop and
    /// restart with [`Cluster::stop`] / [`Cluster::restart`] without disturbing other tests.
    /// Its processes are killed when it is dropped. Panics like [`Cluster::shared`].
    pub fn start_private() -> Cluster {
        start().unwrap_or_else(|e| panic!("private control plane unavailable: {e}"))
    }

    /// Creates `ns`'s Lease as released (empty holder), as admin: candidates take it at once
    /// instead of waiting a lease duration for an absent one.
    pub async fn create_released_lease(&self, ns: &TestNs) {
        let lease = k8s_openapi::api::coordination::v1::Lease {
            metadata: ObjectMeta {
                name: Some(ns.lease_name.clone()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some(String::new()),
                ..Default::default()
            }),
        };
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
            self.admin_client().await,
            &ns.name,
        )
        .create(&PostParams::default(), &lease)
        .await
        .expect("create the released Lease");
    }

    /// A fresh namespace `e2e-N` with a `passmower` ServiceAccount bound by a Role to `rules`
    /// (pass fewer rules to show that a permission is needed). Returns once the apiserver's
    /// RBAC cache authorizes the first verb of every rule for that identity.
    pub async fn new_namespace_with(&self, lease_name: &str, rules: &[PolicyRule]) -> TestNs {
        let mut ns = self.new_bare_namespace(lease_name).await;
        let name = ns.name.clone();
        let client = self.admin_client().await;
        let pp = PostParams::default();
        let meta = |object: &str| ObjectMeta {
            name: Some(object.to_owned()),
            namespace: Some(name.clone()),
            ..Default::default()
        };
        Api::<ServiceAccount>::namespaced(client.clone(), &name)
            .create(
                &pp,
                &ServiceAccount {
                    metadata: meta(ELECTOR_SERVICE_ACCOUNT),
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create serviceaccount in {name}: {e}"));
        Api::<Role>::namespaced(client.clone(), &name)
            .create(
                &pp,
                &Role {
                    metadata: meta("passmower-elector"),
                    rules: Some(rules.to_vec()),
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create role in {name}: {e}"));
        Api::<RoleBinding>::namespaced(client.clone(), &name)
            .create(
                &pp,
                &RoleBinding {
                    metadata: meta("passmower-elector"),
                    role_ref: RoleRef {
                        api_group: "rbac.authorization.k8s.io".into(),
                        kind: "Role".into(),
                        name: "passmower-elector".into(),
                    },
                    subjects: Some(vec![Subject {
                        kind: "ServiceAccount".into(),
                        name: ELECTOR_SERVICE_ACCOUNT.into(),
                        namespace: Some(name.clone()),
                        api_group: None,
                    }]),
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create rolebinding in {name}: {e}"));
        self.wait_for_rbac(&ns, rules).await;
        ns.rules = rules.to_vec();
        ns
    }

    /// A fresh namespace `e2e-N` and a kubeconfig for `system:serviceaccount:e2e-N:passmower`,
    /// but no ServiceAccount object and no RBAC: for tests that install the RBAC under test
    /// themselves (e.g. what `inject` generates), then call [`Cluster::wait_for_rbac`].
    pub async fn new_bare_namespace(&self, lease_name: &str) -> TestNs {
        let n = self.next_namespace.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(
            n <= MAX_NAMESPACES,
            "test binary asked for more than {MAX_NAMESPACES} namespaces"
        );
        let name = format!("e2e-{n}");
        let client = self.admin_client().await;
        let pp = PostParams::default();

        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("pme-test".to_owned(), "true".to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&pp, &ns)
            .await
            .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));

        let elector_kubeconfig = self.dir().join(format!("kubeconfig-{name}-elector.json"));
        write_kubeconfig(
            &elector_kubeconfig,
            &self.server_url(),
            &self.ca_pem(),
            &elector_token(n),
        );
        TestNs {
            name,
            api_addr: self.api_addr(),
            lease_name: lease_name.to_owned(),
            elector_kubeconfig,
            rules: Vec::new(),
        }
    }

    /// Returns once the apiserver's RBAC cache authorizes, for the elector identity of `ns`,
    /// the first verb of every rule in `rules` (panics after a while otherwise).
    pub async fn wait_for_rbac(&self, ns: &TestNs, rules: &[PolicyRule]) {
        wait_for_rbac(&self.admin_client().await, &ns.name, rules).await;
    }
}

/// `rules` with one verb taken away from every rule on `group`/`resource` (rules left without
/// verbs are dropped): "one permission less", for tests that show each grant is needed.
pub fn rules_without(
    rules: &[PolicyRule],
    group: &str,
    resource: &str,
    verb: &str,
) -> Vec<PolicyRule> {
    rules
        .iter()
        .cloned()
        .filter_map(|mut r| {
            let matches = r.api_groups.iter().flatten().any(|g| g == group)
                && r.resources.iter().flatten().any(|x| x == resource);
            if matches {
                r.verbs.retain(|v| v != verb);
            }
            (!r.verbs.is_empty()).then_some(r)
        })
        .collect()
}

fn elector_token(n: usize) -> String {
    format!("elector-{n}")
}

/// A control plane with an elector identity for each of `e2e-1` .. `e2e-{MAX_NAMESPACES}`: the
/// user name and groups a real ServiceAccount token would carry, so RBAC bindings to the
/// ServiceAccount subject apply to it exactly as in a cluster.
fn start() -> Result<Cluster, String> {
    let users = (1..=MAX_NAMESPACES)
        .map(|n| {
            let ns = format!("e2e-{n}");
            let sa = ELECTOR_SERVICE_ACCOUNT;
            TokenUser {
                token: elector_token(n),
                name: format!("system:serviceaccount:{ns}:{sa}"),
                uid: format!("uid-{ns}-{sa}"),
                groups: vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{ns}"),
                    "system:authenticated".into(),
                ],
            }
        })
        .collect();
    let control_plane = ControlPlane::start(Options {
        prefix: "pme-cluster-".into(),
        users,
        ..Options::default()
    })?;
    Ok(Cluster {
        control_plane,
        next_namespace: AtomicUsize::new(0),
    })
}

/// Waits until the RBAC authorizer's cache has caught up with a new binding: for every rule,
/// its first verb on its first resource (and name) is allowed for the elector identity.
async fn wait_for_rbac(client: &kube::Client, namespace: &str, rules: &[PolicyRule]) {
    let sar = Api::<SubjectAccessReview>::all(client.clone());
    let deadline = Instant::now() + RBAC_SETTLE_TIMEOUT;
    for rule in rules {
        let (Some(verb), Some(resource)) = (
            rule.verbs.first(),
            rule.resources.as_ref().and_then(|r| r.first()),
        ) else {
            continue;
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(format!(
                    "system:serviceaccount:{namespace}:{ELECTOR_SERVICE_ACCOUNT}"
                )),
                groups: Some(vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{namespace}"),
                    "system:authenticated".into(),
                ]),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_owned()),
                    verb: Some(verb.clone()),
                    group: rule.api_groups.as_ref().and_then(|g| g.first()).cloned(),
                    resource: Some(resource.clone()),
                    name: rule
                        .resource_names
                        .as_ref()
                        .and_then(|n| n.first())
                        .cloned(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        loop {
            let allowed = sar
                .create(&PostParams::default(), &review)
                .await
                .ok()
                .and_then(|r| r.status)
                .is_some_and(|s| s.allowed);
            if allowed {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "RBAC for {namespace} did not take effect within {RBAC_SETTLE_TIMEOUT:?} \
                 ({verb} {resource})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
