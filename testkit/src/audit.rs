//! A private etcd + kube-apiserver with an audit log, for counting API requests per client.
//!
//! `apiserver_request_total` only aggregates by verb and resource, so the benchmark gives every
//! candidate its own user (a static token) and reads the audit log, which names the user of
//! every request. The audit policy logs each request once, at stage `RequestReceived`, at level
//! `Metadata`, for users in the group [`AUDITED_GROUP`] only; nothing else is logged.
//!
//! Separate from [`super::cluster::Cluster::shared`]: its token file is fixed at start, and the
//! audit flags would slow every other test down. Loopback only, processes killed by PID on drop.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::cluster::{client_from_kubeconfig, write_kubeconfig, ControlPlaneProcess, Layout};
use crate::process;

/// Every audited user is in this group; RBAC binds the Lease and Event permissions to it.
pub const AUDITED_GROUP: &str = "pme-audited";
const ADMIN_TOKEN: &str = "pme-audit-admin-token";
const START_TIMEOUT: Duration = Duration::from_secs(90);

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
    dir: tempfile::TempDir,
    api_addr: SocketAddr,
    admin_kubeconfig: PathBuf,
    children: Vec<Child>,
}

impl AuditedCluster {
    /// Starts etcd and kube-apiserver from `$PME_CONTROL_PLANE` with one static-token user per
    /// name in `users` (all in [`AUDITED_GROUP`], which may get, watch, list, create, update,
    /// patch and delete Leases and create/patch Events anywhere), and waits until it is ready.
    pub async fn start(users: &[String]) -> AuditedCluster {
        let bin = PathBuf::from(
            std::env::var_os("PME_CONTROL_PLANE")
                .expect("PME_CONTROL_PLANE must name the kube-apiserver/etcd directory"),
        );
        let dir = tempfile::Builder::new()
            .prefix("pme-audit-")
            .tempdir()
            .expect("tempdir");
        let pki = dir.path().join("pki");
        fs::create_dir_all(&pki).expect("mkdir pki");
        generate_pki(&pki);
        let mut tokens = format!("{ADMIN_TOKEN},pme-admin,pme-admin,\"system:masters\"\n");
        for user in users {
            tokens.push_str(&format!(
                "{},{user},uid-{user},\"{AUDITED_GROUP},system:authenticated\"\n",
                token_of(user)
            ));
        }
        fs::write(dir.path().join("tokens.csv"), tokens).expect("tokens.csv");
        fs::write(
            dir.path().join("audit-policy.yaml"),
            format!(
                "apiVersion: audit.k8s.io/v1\nkind: Policy\n\
                 omitStages: [ResponseStarted, ResponseComplete, Panic]\n\
                 rules:\n\
                 - level: Metadata\n  userGroups: [\"{AUDITED_GROUP}\"]\n\
                 - level: None\n"
            ),
        )
        .expect("audit policy");

        let ports: Vec<TcpListener> = (0..3)
            .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind"))
            .collect();
        let port = |i: usize| ports[i].local_addr().expect("addr").port();
        let (etcd_client, etcd_peer, api_port) = (port(0), port(1), port(2));
        drop(ports);
        let d = |f: &str| dir.path().join(f).display().to_string();
        // The shared cluster's command lines (one statement of the flags), plus the audit log.
        let layout = Layout {
            bin: bin.clone(),
            dir: dir.path().to_owned(),
            etcd_client,
            etcd_peer,
            api_port,
        };
        let etcd = layout.command(ControlPlaneProcess::Etcd);
        let mut api = layout.command(ControlPlaneProcess::KubeApiserver);
        api.arg(format!("--audit-policy-file={}", d("audit-policy.yaml")))
            .arg(format!("--audit-log-path={}", d("audit.log")))
            .arg("--audit-log-mode=blocking")
            .arg("--audit-log-format=json");

        let mut children = Vec::new();
        for (name, mut cmd) in [("etcd", etcd), ("kube-apiserver", api)] {
            let log = fs::File::create(dir.path().join(format!("{name}.log"))).expect("log");
            let log2 = log.try_clone().expect("dup log");
            cmd.stdin(Stdio::null()).stdout(log).stderr(log2);
            children.push(
                process::spawn_tracked(cmd)
                    .unwrap_or_else(|e| panic!("spawn {name} from {}: {e}", bin.display())),
            );
        }
        let api_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, api_port));
        let admin_kubeconfig = dir.path().join("kubeconfig-admin.json");
        let ca = fs::read(pki.join("ca.crt")).expect("ca");
        write_kubeconfig(
            &admin_kubeconfig,
            &format!("https://{api_addr}"),
            &ca,
            ADMIN_TOKEN,
        );
        let cluster = AuditedCluster {
            dir,
            api_addr,
            admin_kubeconfig,
            children,
        };
        cluster.wait_ready().await;
        cluster.bind_group().await;
        cluster
    }

    pub fn api_addr(&self) -> SocketAddr {
        self.api_addr
    }

    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    pub async fn admin_client(&self) -> kube::Client {
        client_from_kubeconfig(&self.admin_kubeconfig).await
    }

    /// Writes (once) and returns the kubeconfig of `user`, talking to the apiserver directly.
    pub fn kubeconfig_of(&self, user: &str) -> PathBuf {
        let path = self.dir.path().join(format!("kubeconfig-{user}.json"));
        if !path.exists() {
            let ca = fs::read(self.dir.path().join("pki/ca.crt")).expect("ca");
            write_kubeconfig(
                &path,
                &format!("https://{}", self.api_addr),
                &ca,
                &token_of(user),
            );
        }
        path
    }

    /// The audit log's current length: pass it to [`Self::requests_since`] later.
    pub fn audit_offset(&self) -> u64 {
        fs::metadata(self.dir.path().join("audit.log"))
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// Requests logged after `offset` (a value of [`Self::audit_offset`]).
    pub fn requests_since(&self, offset: u64) -> Vec<AuditedRequest> {
        let bytes = fs::read(self.dir.path().join("audit.log")).unwrap_or_default();
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

    async fn wait_ready(&self) {
        let client = self.admin_client().await;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let req = hyper::Request::get("/readyz")
                .body(Vec::new())
                .expect("readyz request");
            let ready = matches!(
                tokio::time::timeout(Duration::from_secs(5), client.request_text(req)).await,
                Ok(Ok(body)) if body.trim() == "ok"
            );
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "audited kube-apiserver not ready within {START_TIMEOUT:?}\n{}",
                fs::read_to_string(self.dir.path().join("kube-apiserver.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
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

impl Drop for AuditedCluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().rev() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
            process::forget_at_exit(child.id() as i32);
        }
    }
}

fn token_of(user: &str) -> String {
    format!("token-{user}")
}

/// A CA, a serving certificate for 127.0.0.1 (so clients and the fault proxy verify the
/// apiserver honestly) and the ServiceAccount signing key, made with openssl.
fn generate_pki(pki: &Path) {
    fs::write(
        pki.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .expect("server.ext");
    let steps: [&str; 4] = [
        "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=pme-audit-ca",
        "req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=kube-apiserver",
        "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile server.ext",
        "genrsa -out sa.key 2048",
    ];
    for step in steps {
        let out = Command::new("openssl")
            .args(step.split(' '))
            .current_dir(pki)
            .stdin(Stdio::null())
            .output()
            .expect("run openssl");
        assert!(
            out.status.success(),
            "openssl {step}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
