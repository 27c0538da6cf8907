//! What the node's processes are told: certificates, static tokens, kubeconfigs, the audit
//! policy, containerd's, the kubelet's, kube-proxy's and the CNI configuration, and each
//! process's command line. Addresses are fixed: everything listens inside the node's own
//! network namespace, where nothing else does.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::control_plane::{self, Apiserver, Audit, Etcd, TokenUser};
use crate::kubeconfig::write_kubeconfig;
use crate::pki::{self, PkiSpec};

/// The node's address on its bridge (the pods' gateway), where the apiserver, the kubelet and
/// Redis listen. A private address inside a network namespace the test created; no route
/// leads out of it.
pub const NODE_IP: &str = "10.88.0.1";
pub const POD_CIDR: &str = "10.88.0.0/24";
pub const BRIDGE: &str = "pme0";
pub const SERVICE_CIDR: &str = "10.96.0.0/24";
/// The `kubernetes` Service's ClusterIP (the first of [`SERVICE_CIDR`]).
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";
pub const API_PORT: u16 = 6443;
pub const REDIS_PORT: u16 = 6379;
pub const KUBELET_PORT: u16 = 10250;
pub const NODE_NAME: &str = "pme-node";

pub const ADMIN_TOKEN: &str = "pme-node-admin";

/// The node's processes, in start order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Component {
    Etcd,
    KubeApiserver,
    ControllerManager,
    Scheduler,
    Redis,
    Containerd,
    KubeProxy,
    Kubelet,
}

impl Component {
    pub const ALL: [Component; 8] = [
        Component::Etcd,
        Component::KubeApiserver,
        Component::ControllerManager,
        Component::Scheduler,
        Component::Redis,
        Component::Containerd,
        Component::KubeProxy,
        Component::Kubelet,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::KubeApiserver => "kube-apiserver",
            Component::ControllerManager => "kube-controller-manager",
            Component::Scheduler => "kube-scheduler",
            Component::Redis => "redis",
            Component::Containerd => "containerd",
            Component::KubeProxy => "kube-proxy",
            Component::Kubelet => "kubelet",
        }
    }
}

/// Where the binaries are and the run's directory: enough to build every command line again
/// (a restarted process finds its data and certificates where it left them).
#[derive(Clone, Debug)]
pub struct Layout {
    /// etcd (from scripts/build-test-cluster.sh).
    pub control_plane: PathBuf,
    /// kubelet, kube-proxy, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl.
    pub node_bin: PathBuf,
    pub dir: PathBuf,
    /// The kubelet's cgroup root, `/pme-node-<pid>`.
    pub cgroup_root: String,
    pub sandbox_image: String,
}

impl Layout {
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    fn p(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }

    pub fn containerd_socket(&self) -> PathBuf {
        self.path("containerd/containerd.sock")
    }

    /// Writes every file the processes read.
    pub fn write_files(&self) -> Result<(), String> {
        for d in [
            "pki",
            "etcd",
            "containerd",
            "cni/net.d",
            "cni/ipam",
            "kubelet",
            "kubelet-pki",
            "pod-logs",
            "redis",
        ] {
            fs::create_dir_all(self.path(d)).map_err(|e| format!("mkdir {d}: {e}"))?;
        }
        pki::generate(
            &self.path("pki"),
            &PkiSpec {
                ca_name: "pme-node-ca",
                // Every name and address the apiserver is reached by: host loopback through
                // the forwarder, the node address, the `kubernetes` Service.
                server_names: &[
                    "127.0.0.1",
                    NODE_IP,
                    KUBERNETES_SERVICE_IP,
                    "localhost",
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local",
                ],
                // What the apiserver (and the tests) present to the kubelet.
                clients: &[(
                    "kubelet-client",
                    "kube-apiserver-kubelet-client",
                    Some("system:masters"),
                )],
            },
        )?;
        self.write_tokens()?;
        let server = format!("https://{NODE_IP}:{API_PORT}");
        let ca = fs::read(self.path("pki/ca.crt")).map_err(|e| format!("read ca: {e}"))?;
        for (user, token) in TOKENS {
            write_kubeconfig(
                &self.path(&format!("{user}.kubeconfig")),
                &server,
                &ca,
                token,
            );
        }
        write(&self.path("audit-policy.yaml"), AUDIT_POLICY)?;
        write(
            &self.path("containerd/config.toml"),
            &self.containerd_config(),
        )?;
        write(&self.path("cni/net.d/10-pme.conflist"), &self.cni_config())?;
        write(&self.path("kubelet.yaml"), &self.kubelet_config())?;
        write(&self.path("kube-proxy.yaml"), &self.kube_proxy_config())?;
        Ok(())
    }

    fn write_tokens(&self) -> Result<(), String> {
        let mut users = Vec::new();
        for (user, token) in TOKENS {
            let (name, groups) = match *user {
                "admin" => ("pme-admin", "system:masters"),
                "kubelet" => ("system:node:pme-node", "system:nodes"),
                "controller-manager" => ("system:kube-controller-manager", ""),
                "scheduler" => ("system:kube-scheduler", ""),
                "kube-proxy" => ("system:kube-proxy", ""),
                other => return Err(format!("no identity for {other}")),
            };
            users.push(TokenUser {
                token: (*token).to_owned(),
                name: name.to_owned(),
                uid: format!("uid-{user}"),
                groups: groups
                    .split(',')
                    .filter(|g| !g.is_empty())
                    .map(str::to_owned)
                    .collect(),
            });
        }
        control_plane::write_tokens(&self.path("tokens.csv"), &users)
    }

    fn containerd_config(&self) -> String {
        // restrict_oom_score_adj: the VM gives root no CAP_SYS_RESOURCE, so runc cannot lower
        // a process's oom_score_adj and fails every sandbox unless told to leave it alone.
        // Root (runc's state dir) and opt: away from /run/containerd/runc and /opt/containerd.
        format!(
            r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{sock}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{runc}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
"#,
            root = self.p("containerd/root"),
            state = self.p("containerd/state"),
            sock = self.containerd_socket().display(),
            opt = self.p("containerd/opt"),
            sandbox = self.sandbox_image,
            runc = self.p("containerd/runc"),
            cni = self.p("cni/net.d"),
        )
    }

    fn cni_config(&self) -> String {
        // A bridge the harness created (holding the node's address) with host-local
        // addresses: pods get their own addresses, and the apiserver's audit log tells them
        // apart by source address. No masquerade: nothing leaves the namespace.
        serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "pme",
            "plugins": [{
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": self.p("cni/ipam"),
                }
            }]
        })
        .to_string()
    }

    fn kubelet_config(&self) -> String {
        // cgroupfs (no systemd here); a cgroup root of the run's own, so cleanup is exact;
        // podLogsDir inside the run's directory; no image garbage collection or disk
        // eviction (nothing could be pulled again); x509 client certificates authenticate the
        // apiserver and the tests, and authorization allows them without asking the apiserver
        // (so the tests can read the kubelet's view of the pods during an apiserver outage).
        serde_json::json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "containerRuntimeEndpoint": format!("unix://{}", self.containerd_socket().display()),
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "cgroupsPerQOS": true,
            "failCgroupV1": false,
            "failSwapOn": false,
            "address": NODE_IP,
            "port": KUBELET_PORT,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "authentication": {
                "anonymous": {"enabled": false},
                "webhook": {"enabled": false},
                "x509": {"clientCAFile": self.p("pki/ca.crt")}
            },
            "authorization": {"mode": "AlwaysAllow"},
            "podLogsDir": self.p("pod-logs"),
            "resolvConf": "",
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "64Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%"
            },
            "serializeImagePulls": false,
            "rotateCertificates": false,
            "serverTLSBootstrap": false,
            "shutdownGracePeriod": "0s",
            "maxPods": 64,
        })
        .to_string()
    }

    fn kube_proxy_config(&self) -> String {
        // iptables mode (nf_tables-backed iptables from Debian) inside the namespace. Conntrack
        // limits and timeouts stay as they are (0 = leave the sysctls alone).
        serde_json::json!({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": self.p("kube-proxy.kubeconfig")},
            "mode": "iptables",
            "clusterCIDR": POD_CIDR,
            "hostnameOverride": NODE_NAME,
            "bindAddress": NODE_IP,
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s"
            },
            "iptables": {"syncPeriod": "30s", "minSyncPeriod": "0s"},
        })
        .to_string()
    }

    /// The command line of `which`; the same on every (re)start.
    pub fn command(&self, which: Component) -> Command {
        let nb = |b: &str| Command::new(self.node_bin.join(b));
        match which {
            Component::Etcd => Etcd {
                binary: self.control_plane.join("etcd"),
                name: "pme-node".into(),
                data_dir: self.path("etcd"),
                client_url: "http://127.0.0.1:2379".into(),
                peer_url: "http://127.0.0.1:2380".into(),
            }
            .command(),
            // The node's own build (stamped with its version, which helm checks).
            Component::KubeApiserver => Apiserver {
                binary: self.node_bin.join("kube-apiserver"),
                etcd_url: "http://127.0.0.1:2379".into(),
                bind_address: "0.0.0.0".into(),
                port: API_PORT,
                // The `kubernetes` Service's endpoint: pods reach it through kube-proxy.
                advertise_address: NODE_IP.into(),
                service_cidr: SERVICE_CIDR.into(),
                pki: self.path("pki"),
                cert_dir: self.path("apiserver-certs"),
                tokens: self.path("tokens.csv"),
                audit: Some(Audit {
                    policy: self.path("audit-policy.yaml"),
                    log: self.path("audit.log"),
                }),
                extra: vec![
                    format!(
                        "--kubelet-client-certificate={}",
                        self.p("pki/kubelet-client.crt")
                    ),
                    format!("--kubelet-client-key={}", self.p("pki/kubelet-client.key")),
                    "--audit-log-maxsize=0".into(),
                    "--profiling=false".into(),
                ],
            }
            .command(),
            Component::ControllerManager => {
                let mut c = nb("kube-controller-manager");
                let kc = self.p("controller-manager.kubeconfig");
                c.arg(format!("--kubeconfig={kc}"))
                    .arg(format!("--authentication-kubeconfig={kc}"))
                    .arg(format!("--authorization-kubeconfig={kc}"))
                    .arg("--bind-address=127.0.0.1")
                    .arg("--leader-elect=false")
                    // Each controller as its own ServiceAccount, bound by the bootstrap RBAC,
                    // as in kubeadm clusters.
                    .arg("--use-service-account-credentials=true")
                    .arg(format!(
                        "--service-account-private-key-file={}",
                        self.p("pki/sa.key")
                    ))
                    // Published to every namespace as kube-root-ca.crt, which the projected
                    // ServiceAccount volume of every pod needs.
                    .arg(format!("--root-ca-file={}", self.p("pki/ca.crt")))
                    .arg("--cluster-name=pme");
                c
            }
            Component::Scheduler => {
                let mut c = nb("kube-scheduler");
                let kc = self.p("scheduler.kubeconfig");
                c.arg(format!("--kubeconfig={kc}"))
                    .arg(format!("--authentication-kubeconfig={kc}"))
                    .arg(format!("--authorization-kubeconfig={kc}"))
                    .arg("--bind-address=127.0.0.1")
                    .arg("--leader-elect=false");
                c
            }
            Component::Redis => {
                let mut c = Command::new("redis-server");
                c.args(["--bind", NODE_IP, "--port", &REDIS_PORT.to_string()])
                    .args(["--protected-mode", "no", "--save", "", "--appendonly", "no"])
                    .args(["--dir", &self.p("redis")]);
                c
            }
            Component::Containerd => {
                let mut c = Command::new("containerd");
                c.arg(format!("--config={}", self.p("containerd/config.toml")));
                c
            }
            Component::KubeProxy => {
                let mut c = nb("kube-proxy");
                c.arg(format!("--config={}", self.p("kube-proxy.yaml")));
                c
            }
            Component::Kubelet => {
                let mut c = nb("kubelet");
                c.arg(format!("--config={}", self.p("kubelet.yaml")))
                    .arg(format!("--kubeconfig={}", self.p("kubelet.kubeconfig")))
                    .arg(format!("--root-dir={}", self.p("kubelet")))
                    .arg(format!("--cert-dir={}", self.p("kubelet-pki")))
                    .arg(format!("--hostname-override={NODE_NAME}"))
                    .arg(format!("--node-ip={NODE_IP}"))
                    .arg("--v=1");
                c
            }
        }
    }
}

/// (kubeconfig name, static token).
const TOKENS: &[(&str, &str)] = &[
    ("admin", ADMIN_TOKEN),
    ("kubelet", "pme-node-kubelet"),
    ("controller-manager", "pme-node-kcm"),
    ("scheduler", "pme-node-scheduler"),
    ("kube-proxy", "pme-node-proxy"),
];

/// Writes by ServiceAccounts outside kube-system (the pods under test): Lease writes with
/// their bodies (the holder), every other write as metadata (who, what, when, from where); and
/// the tests' own creates of OIDCClients (when each was created, against the writes it
/// caused). Nothing else is logged.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted, Panic]
rules:
- level: None
  userGroups: ["system:serviceaccounts:kube-system"]
- level: RequestResponse
  userGroups: ["system:serviceaccounts"]
  verbs: [create, update, patch, delete]
  resources: [{group: coordination.k8s.io, resources: [leases]}]
- level: Metadata
  userGroups: ["system:serviceaccounts"]
  verbs: [create, update, patch, delete, deletecollection]
- level: Metadata
  users: ["pme-admin"]
  verbs: [create]
  resources: [{group: codemowers.cloud, resources: [oidcclients]}]
- level: None
"#;

fn write(path: &Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}
