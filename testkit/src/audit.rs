//! A private etcd + kube-apiserver with an audit log, for counting API requests per client.
//!
//! `apiserver_request_total` only aggregates by verb and resource, so the benchmark gives every
//! candidate its own user (a static token) and reads the audit log, which names the user of
//! every request. The audit policy logs each request once, at stage `RequestReceived`, at level
//! `Metadata`, for users in the group [`AUDITED_GROUP`] only; nothing else is logged.
//!
//! Separate from [`crate::cluster::Cluster::shared`]: its token file is fixed at start, and the
//! audit flags would slow every other test down. Loopback only, processes killed by PID on drop.

use std::fs;
use std::ops::Deref;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use crate::control_plane::{ControlPlane, Options, TokenUser};

/// Every audited user is in this group; RBAC binds the Lease and Event permissions to it.
pub const AUDITED_GROUP: &str = "pme-audited";

/// One audited request (from a `RequestReceived` audit event).
#[derive(Clone, Debug)]
pub struct AuditedRequest {
    pub user: String,
    pub verb: String,
    pub uri: String,
    /// The client's `User-Agent` header, as the apiserver recorded it.
    pub user_agent: String,
}

/// A running audited control plane. Dropping it kills both processes.
pub struct AuditedCluster {
    control_plane: ControlPlane,
}

impl Deref for AuditedCluster {
    type Target = ControlPlane;

    fn deref(&self) -> &ControlPlane {
        &self.control_plane
    }
}

impl AuditedCluster {
    /// Starts etcd and kube-apiserver from `$PME_CONTROL_PLANE` with one static-token user per
    /// name in `users` (all in [`AUDITED_GROUP`], which may get, watch, list, create, update,
    /// patch and delete Leases and create/patch Events anywhere), and waits until it is ready.
    pub async fn start(users: &[String]) -> AuditedCluster {
        let users = users
            .iter()
            .map(|user| TokenUser {
                token: token_of(user),
                name: user.clone(),
                uid: format!("uid-{user}"),
                groups: vec![AUDITED_GROUP.into(), "system:authenticated".into()],
            })
            .collect();
        let options = Options {
            prefix: "pme-audit-".into(),
            users,
            audit_policy: Some(format!(
                "apiVersion: audit.k8s.io/v1\nkind: Policy\n\
                 omitStages: [ResponseStarted, ResponseComplete, Panic]\n\
                 rules:\n\
                 - level: Metadata\n  userGroups: [\"{AUDITED_GROUP}\"]\n\
                 - level: None\n"
            )),
            ..Options::default()
        };
        let control_plane = tokio::task::spawn_blocking(move || ControlPlane::start(options))
            .await
            .expect("the start thread")
            .unwrap_or_else(|e| panic!("audited control plane unavailable: {e}"));
        let cluster = AuditedCluster { control_plane };
        cluster.bind_group().await;
        cluster
    }

    /// Writes (once) and returns the kubeconfig of `user`, talking to the apiserver directly.
    pub fn kubeconfig_of(&self, user: &str) -> PathBuf {
        let path = self.dir().join(format!("kubeconfig-{user}.json"));
        if !path.exists() {
            self.kubeconfig_for_token(user, &token_of(user));
        }
        path
    }

    /// The audit log's current length: pass it to [`Self::requests_since`] later.
    pub fn audit_offset(&self) -> u64 {
        fs::metadata(self.audit_log()).map(|m| m.len()).unwrap_or(0)
    }

    /// Requests logged after `offset` (a value of [`Self::audit_offset`]).
    pub fn requests_since(&self, offset: u64) -> Vec<AuditedRequest> {
        let bytes = fs::read(self.audit_log()).unwrap_or_default();
        let tail = bytes.get(offset as usize..).unwrap_or_default();
        String::from_utf8_lossy(tail)
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|e| e["stage"] == "RequestReceived")
            .map(|e| AuditedRequest {
                user: e["user"]["username"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                verb: e["verb"].as_str().unwrap_or_default().to_owned(),
                uri: e["requestURI"].as_str().unwrap_or_default().to_owned(),
                user_agent: e["userAgent"].as_str().unwrap_or_default().to_owned(),
            })
            .collect()
    }

    /// The control plane's versions, from its cache directory's name
    /// (`kube-v1.37.2-etcd-v3.6.16`, as `scripts/build-test-cluster.sh` names it): a binary built
    /// from the Go module reports no version of its own.
    pub fn version() -> String {
        let bin = PathBuf::from(std::env::var_os("PME_CONTROL_PLANE").unwrap_or_default());
        let name = bin
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match name
            .strip_prefix("kube-")
            .and_then(|r| r.split_once("-etcd-"))
        {
            Some((kube, etcd)) => format!("{kube} (etcd {etcd})"),
            None => format!("unknown ({})", bin.display()),
        }
    }

    async fn bind_group(&self) {
        let client = self.admin_client().await;
        let pp = PostParams::default();
        let rule = |group: &str, resource: &str, verbs: &[&str]| PolicyRule {
            api_groups: Some(vec![group.to_owned()]),
            resources: Some(vec![resource.to_owned()]),
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            ..Default::default()
        };
        let name = || ObjectMeta {
            name: Some(AUDITED_GROUP.to_owned()),
            ..Default::default()
        };
        Api::<ClusterRole>::all(client.clone())
            .create(
                &pp,
                &ClusterRole {
                    metadata: name(),
                    rules: Some(vec![
                        rule(
                            "coordination.k8s.io",
                            "leases",
                            &[
                                "get", "list", "watch", "create", "update", "patch", "delete",
                            ],
                        ),
                        rule("", "events", &["create", "patch", "update"]),
                        rule("events.k8s.io", "events", &["create", "patch", "update"]),
                    ]),
                    ..Default::default()
                },
            )
            .await
            .expect("create ClusterRole");
        Api::<ClusterRoleBinding>::all(client)
            .create(
                &pp,
                &ClusterRoleBinding {
                    metadata: name(),
                    role_ref: RoleRef {
                        api_group: "rbac.authorization.k8s.io".into(),
                        kind: "ClusterRole".into(),
                        name: AUDITED_GROUP.into(),
                    },
                    subjects: Some(vec![Subject {
                        kind: "Group".into(),
                        name: AUDITED_GROUP.into(),
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        namespace: None,
                    }]),
                },
            )
            .await
            .expect("create ClusterRoleBinding");
        // The RBAC cache catches up within a moment.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn token_of(user: &str) -> String {
    format!("token-{user}")
}
