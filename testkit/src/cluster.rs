//! The real control plane every integration test runs against: one etcd and one
//! kube-apiserver per test binary, on loopback, started on first use and killed at exit.
//! A test that restarts the control plane under load (the fault campaign) starts a private one
//! instead, whose processes it can stop and start again in place.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::process;

/// Elector identities baked into the static token file (it is read once, at start): namespace
/// `e2e-N` for N in 1..=this. The api tier's tests share one control plane; more namespaces
/// than this per test binary is a test design problem.
pub const MAX_NAMESPACES: usize = 512;

/// The Lease name test namespaces use unless a test asks for another.
pub const DEFAULT_LEASE_NAME: &str = "passmower-operators";

/// The ServiceAccount name the elector runs as in every test namespace, as in the chart.
pub const ELECTOR_SERVICE_ACCOUNT: &str = "passmower";

const ADMIN_TOKEN: &str = "pme-admin-token";
const START_TIMEOUT: Duration = Duration::from_secs(90);
const RBAC_SETTLE_TIMEOUT: Duration = Duration::from_secs(15);

/// A running etcd + kube-apiserver pair. Get it with [`Cluster::shared`], or
/// [`Cluster::start_private`] for one a test may restart.
pub struct Cluster {
    dir: PathBuf,
    api_addr: SocketAddr,
    admin_kubeconfig: PathBuf,
    next_namespace: AtomicUsize,
    /// How to start each process again on the same ports and data dir.
    layout: Layout,
    /// Held so the processes can be polled for liveness; they are killed by PID at exit.
    children: Mutex<Vec<(ControlPlaneProcess, Child)>>,
    /// How long the start took, for reports.
    pub started_in: Duration,
}

/// One of the two control-plane processes, for [`Cluster::stop`] and [`Cluster::restart`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlPlaneProcess {
    Etcd,
    KubeApiserver,
}

impl ControlPlaneProcess {
    pub fn name(self) -> &'static str {
        match self {
            ControlPlaneProcess::Etcd => "etcd",
            ControlPlaneProcess::KubeApiserver => "kube-apiserver",
        }
    }
}

/// Where the binaries are and which ports and directories the processes use: everything needed
/// to build their command lines again.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub(crate) bin: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) etcd_client: u16,
    pub(crate) etcd_peer: u16,
    pub(crate) api_port: u16,
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
        let started = SHARED.get_or_init(start_on_own_thread);
        match started {
            Ok(cluster) => cluster,
            Err(e) => panic!("test control plane unavailable: {e}"),
        }
    }

    /// A control plane of the caller's own (a few seconds to start), which it may stop and
    /// restart with [`Cluster::stop`] / [`Cluster::restart`] without disturbing other tests.
    /// Its processes are killed when it is dropped. Panics like [`Cluster::shared`].
    pub fn start_private() -> Cluster {
        start_on_own_thread().unwrap_or_else(|e| panic!("private control plane unavailable: {e}"))
    }

    /// Stops one process in place with `signal` (by PID), waiting up to `grace` for it to exit
    /// before a SIGKILL, as a kubelet would. Nothing is started again until
    /// [`Cluster::restart`].
    pub fn stop(
        &self,
        which: ControlPlaneProcess,
        signal: nix::sys::signal::Signal,
        grace: Duration,
    ) {
        let mut children = lock_children(&self.children);
        let Some(index) = children.iter().position(|(w, _)| *w == which) else {
            return; // already stopped
        };
        let (_, mut child) = children.remove(index);
        drop(children);
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, signal);
        let deadline = Instant::now() + grace;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        process::forget_at_exit(pid.as_raw());
    }

    /// Starts a stopped process again on the same ports and data dir (a no-op if it runs), and
    /// returns once the apiserver's `/readyz` says ok — which for etcd means the apiserver has
    /// reconnected to it. Blocking: call it outside any tokio runtime (or in `block_in_place`).
    pub fn restart(&self, which: ControlPlaneProcess) -> Result<(), String> {
        let mut children = lock_children(&self.children);
        if !children.iter().any(|(w, _)| *w == which) {
            let child = spawn_logged(which, self.layout.command(which), &self.dir)?;
            children.push((which, child));
        }
        wait_ready(&self.admin_kubeconfig, &mut children, &self.dir)
    }

    /// Starts every stopped process again, etcd first, and returns once the apiserver's
    /// `/readyz` says ok: for a fault that stops both (an etcd restore). Blocking, like
    /// [`Cluster::restart`].
    pub fn restart_all(&self) -> Result<(), String> {
        let mut children = lock_children(&self.children);
        for which in [
            ControlPlaneProcess::Etcd,
            ControlPlaneProcess::KubeApiserver,
        ] {
            if !children.iter().any(|(w, _)| *w == which) {
                let child = spawn_logged(which, self.layout.command(which), &self.dir)?;
                children.push((which, child));
            }
        }
        wait_ready(&self.admin_kubeconfig, &mut children, &self.dir)
    }

    /// etcd's data directory. Copy it only while etcd is stopped (a cold copy is a consistent
    /// snapshot); putting an old copy back and starting etcd again is a restore without
    /// `--bump-revision`.
    pub fn etcd_data_dir(&self) -> PathBuf {
        self.dir.join("etcd")
    }

    /// `127.0.0.1:<secure port>` of the kube-apiserver.
    pub fn api_addr(&self) -> SocketAddr {
        self.api_addr
    }

    /// Kubeconfig of a `system:masters` user (JSON, which every kubeconfig reader accepts).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.admin_kubeconfig.clone()
    }

    pub async fn admin_client(&self) -> kube::Client {
        client_from_kubeconfig(&self.admin_kubeconfig).await
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

        let elector_kubeconfig = self.dir.join(format!("kubeconfig-{name}-elector.json"));
        write_kubeconfig(
            &elector_kubeconfig,
            &self.server_url(),
            &self.ca_pem(),
            &elector_token(n),
        );
        TestNs {
            name,
            api_addr: self.api_addr,
            lease_name: lease_name.to_owned(),
            elector_kubeconfig,
            rules: Vec::new(),
        }
    }

    /// Writes a kubeconfig for a bearer `token` (e.g. one minted by the TokenRequest API) to
    /// `<cluster dir>/kubeconfig-<stem>.json` and returns its path.
    pub fn kubeconfig_for_token(&self, stem: &str, token: &str) -> PathBuf {
        let path = self.dir.join(format!("kubeconfig-{stem}.json"));
        write_kubeconfig(&path, &self.server_url(), &self.ca_pem(), token);
        path
    }

    /// Returns once the apiserver's RBAC cache authorizes, for the elector identity of `ns`,
    /// the first verb of every rule in `rules` (panics after a while otherwise).
    pub async fn wait_for_rbac(&self, ns: &TestNs, rules: &[PolicyRule]) {
        wait_for_rbac(&self.admin_client().await, &ns.name, rules).await;
    }

    /// The last `lines` lines of the etcd and kube-apiserver logs, for failure messages.
    pub fn logs_tail(&self, lines: usize) -> String {
        logs_tail(&self.dir, lines)
    }

    /// Panics (with logs) unless both control-plane processes are still running.
    pub fn assert_alive(&self) {
        let mut children = lock_children(&self.children);
        assert_eq!(children.len(), 2, "a control-plane process was stopped");
        for (which, child) in children.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "{} exited: {status}\n{}",
                    which.name(),
                    logs_tail(&self.dir, 30)
                );
            }
        }
    }

    fn server_url(&self) -> String {
        format!("https://{}", self.api_addr)
    }

    fn ca_pem(&self) -> Vec<u8> {
        fs::read(self.dir.join("pki/ca.crt")).expect("read test CA")
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

/// Only private clusters are ever dropped (the shared one lives in a static): their processes
/// go at once, by PID.
impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, mut child) in lock_children(&self.children).drain(..) {
            let _ = child.kill();
            let _ = child.wait();
            process::forget_at_exit(child.id() as i32);
        }
    }
}

fn lock_children(
    children: &Mutex<Vec<(ControlPlaneProcess, Child)>>,
) -> std::sync::MutexGuard<'_, Vec<(ControlPlaneProcess, Child)>> {
    children.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs [`start`] on a thread of its own: the start blocks on a private tokio runtime, which
/// would panic inside a caller's runtime (`#[tokio::test]`).
fn start_on_own_thread() -> Result<Cluster, String> {
    std::thread::Builder::new()
        .name("pme-cluster-start".into())
        .spawn(start)
        .map_err(|e| format!("cannot spawn the start thread: {e}"))
        .and_then(|t| t.join().unwrap_or_else(|_| Err("start panicked".into())))
}

/// Reads a harness kubeconfig into a client. Ignores `HTTPS_PROXY` from the environment: every
/// test address is loopback and must not leave the machine.
pub async fn client_from_kubeconfig(path: &Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("read kubeconfig {}: {e}", path.display()));
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap_or_else(|e| panic!("load kubeconfig {}: {e}", path.display()));
    config.proxy_url = None;
    kube::Client::try_from(config).expect("build kube client")
}

fn elector_token(n: usize) -> String {
    format!("elector-{n}")
}

fn start() -> Result<Cluster, String> {
    let t0 = Instant::now();
    let bin = control_plane_dir()?;
    sweep_stale_dirs();
    let tmp = tempfile::Builder::new()
        .prefix(&format!("pme-cluster-{}-", std::process::id()))
        .tempdir()
        .map_err(|e| format!("tempdir: {e}"))?;
    let dir = tmp.keep();
    process::remove_at_exit(dir.clone());
    let pki = dir.join("pki");
    fs::create_dir_all(&pki).map_err(|e| format!("mkdir pki: {e}"))?;
    generate_pki(&pki)?;
    write_token_file(&dir.join("tokens.csv"))?;

    let [etcd_client, etcd_peer, api_port] = free_ports()?;
    let layout = Layout {
        bin: bin.clone(),
        dir: dir.clone(),
        etcd_client,
        etcd_peer,
        api_port,
    };
    let mut children = Vec::new();
    for which in [
        ControlPlaneProcess::Etcd,
        ControlPlaneProcess::KubeApiserver,
    ] {
        let child = spawn_logged(which, layout.command(which), &dir)
            .map_err(|e| format!("{e} (from {})", bin.display()))?;
        children.push((which, child));
    }

    let api_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, api_port));
    let admin_kubeconfig = dir.join("kubeconfig-admin.json");
    let ca = fs::read(pki.join("ca.crt")).map_err(|e| format!("read ca: {e}"))?;
    write_kubeconfig(
        &admin_kubeconfig,
        &format!("https://{api_addr}"),
        &ca,
        ADMIN_TOKEN,
    );

    wait_ready(&admin_kubeconfig, &mut children, &dir)?;
    Ok(Cluster {
        dir,
        api_addr,
        admin_kubeconfig,
        next_namespace: AtomicUsize::new(0),
        layout,
        children: Mutex::new(children),
        started_in: t0.elapsed(),
    })
}

impl Layout {
    /// The command line of `which`; the same on every (re)start, so a restarted process finds
    /// its ports, certificates and (for etcd) its data again.
    pub(crate) fn command(&self, which: ControlPlaneProcess) -> Command {
        let etcd_url = format!("http://127.0.0.1:{}", self.etcd_client);
        match which {
            ControlPlaneProcess::Etcd => {
                let peer_url = format!("http://127.0.0.1:{}", self.etcd_peer);
                let mut etcd = Command::new(self.bin.join("etcd"));
                etcd.args(["--name", "pme"])
                    .arg(format!("--data-dir={}", self.dir.join("etcd").display()))
                    .arg(format!("--listen-client-urls={etcd_url}"))
                    .arg(format!("--advertise-client-urls={etcd_url}"))
                    .arg(format!("--listen-peer-urls={peer_url}"))
                    .arg(format!("--initial-advertise-peer-urls={peer_url}"))
                    .arg(format!("--initial-cluster=pme={peer_url}"))
                    // Test data is thrown away; fsync would only slow every Lease write down.
                    // (A killed process loses nothing by it: its writes are in the page cache.)
                    .arg("--unsafe-no-fsync")
                    .arg("--log-level=warn");
                etcd
            }
            ControlPlaneProcess::KubeApiserver => {
                let pki = self.dir.join("pki");
                let p = |f: &str| pki.join(f).display().to_string();
                let mut api = Command::new(self.bin.join("kube-apiserver"));
                api.arg(format!("--etcd-servers={etcd_url}"))
                    .arg(format!("--secure-port={}", self.api_port))
                    .arg("--bind-address=127.0.0.1")
                    // Advertise loopback so the start does not depend on the host having a
                    // default route; the `kubernetes` Service endpoint reconciler refuses
                    // loopback, and nothing here routes to that Service anyway, so it is
                    // switched off.
                    .arg(format!("--advertise-address={}", Ipv4Addr::LOCALHOST))
                    .arg("--endpoint-reconciler-type=none")
                    .arg(format!(
                        "--cert-dir={}",
                        self.dir.join("apiserver-certs").display()
                    ))
                    .arg(format!("--tls-cert-file={}", p("server.crt")))
                    .arg(format!("--tls-private-key-file={}", p("server.key")))
                    .arg(format!("--client-ca-file={}", p("ca.crt")))
                    .arg(format!("--service-account-key-file={}", p("sa.key")))
                    .arg(format!(
                        "--service-account-signing-key-file={}",
                        p("sa.key")
                    ))
                    .arg("--service-account-issuer=https://kubernetes.default.svc")
                    .arg(format!(
                        "--token-auth-file={}",
                        self.dir.join("tokens.csv").display()
                    ))
                    .arg("--authorization-mode=Node,RBAC")
                    // A configuration value only: nothing ever routes to these addresses.
                    .arg("--service-cluster-ip-range=10.0.0.0/24")
                    .arg("--allow-privileged=true");
                api
            }
        }
    }
}

/// Spawns `cmd` (tracked, see [`process::spawn_tracked`]) with its output appended to
/// `<dir>/<name>.log`, so a restart keeps the earlier run's log above the new one.
fn spawn_logged(which: ControlPlaneProcess, mut cmd: Command, dir: &Path) -> Result<Child, String> {
    let name = which.name();
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{name}.log")))
        .map_err(|e| format!("open {name}.log: {e}"))?;
    let log2 = log.try_clone().map_err(|e| format!("dup log: {e}"))?;
    cmd.stdin(Stdio::null()).stdout(log).stderr(log2);
    process::spawn_tracked(cmd).map_err(|e| format!("spawn {name}: {e}"))
}

/// Removes the tempdirs of test binaries that were killed (SIGKILL skips the exit handler;
/// PDEATHSIG still killed their etcd). A dir is stale when the PID in its name is gone.
fn sweep_stale_dirs() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("pme-cluster-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// `PME_CONTROL_PLANE` if set, else whatever `scripts/build-test-cluster.sh` prints last
/// (a cached build returns at once; a cold one compiles for many minutes).
fn control_plane_dir() -> Result<PathBuf, String> {
    let dir = match std::env::var_os("PME_CONTROL_PLANE") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let script = crate::repo().join("scripts/build-test-cluster.sh");
            let out = Command::new(&script)
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| format!("run {}: {e}", script.display()))?;
            if !out.status.success() {
                return Err(format!("{} failed: {}", script.display(), out.status));
            }
            let stdout = String::from_utf8_lossy(&out.stdout);
            let last = stdout.lines().last().unwrap_or_default().trim();
            PathBuf::from(last)
        }
    };
    for bin in ["etcd", "kube-apiserver"] {
        if !dir.join(bin).is_file() {
            return Err(format!(
                "{} has no {bin}; set PME_CONTROL_PLANE or run scripts/build-test-cluster.sh",
                dir.display()
            ));
        }
    }
    Ok(dir)
}

/// A CA and a serving certificate for 127.0.0.1, so clients verify the apiserver honestly
/// (also through the fault proxy, which listens on another 127.0.0.1 port), and the RSA key
/// that signs ServiceAccount tokens.
fn generate_pki(pki: &Path) -> Result<(), String> {
    fs::write(
        pki.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n\
         basicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\n",
    )
    .map_err(|e| format!("write server.ext: {e}"))?;
    let steps: [&[&str]; 4] = [
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "7",
            "-subj",
            "/CN=passmower-elector-test-ca",
        ],
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=kube-apiserver",
        ],
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "7",
            "-extfile",
            "server.ext",
        ],
        &["genrsa", "-out", "sa.key", "2048"],
    ];
    for args in steps {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(pki)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run openssl (is it installed?): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "openssl {}: {}\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(())
}

/// Static tokens: the admin, and one elector identity per possible test namespace, with the
/// user name and groups a real ServiceAccount token would carry — so RBAC bindings to the
/// ServiceAccount subject apply to it exactly as in a cluster.
fn write_token_file(path: &Path) -> Result<(), String> {
    let mut csv = format!("{ADMIN_TOKEN},pme-admin,pme-admin,\"system:masters\"\n");
    for n in 1..=MAX_NAMESPACES {
        let ns = format!("e2e-{n}");
        csv.push_str(&format!(
            "{},system:serviceaccount:{ns}:{sa},uid-{ns}-{sa},\"system:serviceaccounts,system:serviceaccounts:{ns},system:authenticated\"\n",
            elector_token(n),
            sa = ELECTOR_SERVICE_ACCOUNT,
        ));
    }
    fs::write(path, csv).map_err(|e| format!("write token file: {e}"))
}

/// Distinct free loopback ports, all held open together while choosing so none repeats. The
/// port may be taken again before the server binds it; then the start fails with its log.
fn free_ports<const N: usize>() -> Result<[u16; N], String> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("bind 127.0.0.1:0: {e}"))?;
    let mut ports = [0u16; N];
    for (port, l) in ports.iter_mut().zip(&listeners) {
        *port = l.local_addr().map_err(|e| e.to_string())?.port();
    }
    Ok(ports)
}

/// Writes a kubeconfig (as JSON) for a bearer-token user of the test cluster.
pub fn write_kubeconfig(path: &Path, server: &str, ca_pem: &[u8], token: &str) {
    use base64_engine::encode;
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "pme", "cluster": {
            "server": server,
            "certificate-authority-data": encode(ca_pem),
        }}],
        "users": [{"name": "pme", "user": {"token": token}}],
        "contexts": [{"name": "pme", "context": {"cluster": "pme", "user": "pme"}}],
        "current-context": "pme",
    });
    let bytes = serde_json::to_vec_pretty(&config).expect("serialize kubeconfig");
    fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Standard base64 for `certificate-authority-data`; a dozen lines instead of a dependency.
mod base64_engine {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn encode(input: &[u8]) -> String {
        let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
        for chunk in input.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }
}

/// Polls `/readyz` as the admin until it answers 200, a process exits, or the start times out.
fn wait_ready(
    admin_kubeconfig: &Path,
    children: &mut [(ControlPlaneProcess, Child)],
    dir: &Path,
) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async {
        let client = client_from_kubeconfig(admin_kubeconfig).await;
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last_error = String::from("no answer yet");
        while Instant::now() < deadline {
            for (which, child) in children.iter_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!(
                        "{} exited during start ({status})\n{}",
                        which.name(),
                        logs_tail(dir, 40)
                    ));
                }
            }
            let req = hyper::Request::get("/readyz")
                .body(Vec::new())
                .expect("readyz request");
            match tokio::time::timeout(Duration::from_secs(5), client.request_text(req)).await {
                Ok(Ok(body)) if body.trim() == "ok" => return Ok(()),
                Ok(Ok(body)) => last_error = body,
                Ok(Err(e)) => last_error = e.to_string(),
                Err(_) => last_error = "readyz timed out".into(),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!(
            "kube-apiserver not ready within {START_TIMEOUT:?}: {last_error}\n{}",
            logs_tail(dir, 40)
        ))
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

fn logs_tail(dir: &Path, lines: usize) -> String {
    let mut out = String::new();
    for name in ["etcd", "kube-apiserver"] {
        let text = fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        out.push_str(&format!("--- last {lines} lines of {name}.log ---\n"));
        for line in &all[all.len().saturating_sub(lines)..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
