//! etcd + kube-apiserver: the one bootstrap of every control plane here — the tests' shared and
//! private ones ([`crate::cluster`]), the audited one ([`crate::audit`]), the node's
//! ([`crate::node`], which runs the same command lines in its namespaces) and the scripts'
//! (`pme-testbed`). Its files (PKI, static tokens, an audit policy), the command lines, the
//! start with logs appended per process, readiness, and stop and restart in place.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::kubeconfig::{client_from_kubeconfig, write_kubeconfig};
use crate::pki::{self, files, PkiSpec};
use crate::{free_ports, process};

const START_TIMEOUT: Duration = Duration::from_secs(90);

/// One of the two control-plane processes, for [`ControlPlane::stop`] and
/// [`ControlPlane::restart`].
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

/// A static-token user of the apiserver (`--token-auth-file`), with the user name and groups
/// the apiserver puts into every request it authenticates.
#[derive(Clone, Debug)]
pub struct TokenUser {
    pub token: String,
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

impl TokenUser {
    /// A `system:masters` user.
    pub fn admin(token: &str, name: &str) -> TokenUser {
        TokenUser {
            token: token.to_owned(),
            name: name.to_owned(),
            uid: name.to_owned(),
            groups: vec!["system:masters".into()],
        }
    }
}

/// Writes the static token file.
pub fn write_tokens(path: &Path, users: &[TokenUser]) -> Result<(), String> {
    let csv: String = users
        .iter()
        .map(|u| {
            format!(
                "{},{},{},\"{}\"\n",
                u.token,
                u.name,
                u.uid,
                u.groups.join(",")
            )
        })
        .collect();
    fs::write(path, csv).map_err(|e| format!("write {}: {e}", path.display()))
}

/// etcd's command line.
#[derive(Clone, Debug)]
pub struct Etcd {
    pub binary: PathBuf,
    pub name: String,
    pub data_dir: PathBuf,
    /// `http://HOST:PORT` of the client and peer listeners.
    pub client_url: String,
    pub peer_url: String,
}

impl Etcd {
    pub fn command(&self) -> Command {
        let mut etcd = Command::new(&self.binary);
        etcd.args(["--name", &self.name])
            .arg(format!("--data-dir={}", self.data_dir.display()))
            .arg(format!("--listen-client-urls={}", self.client_url))
            .arg(format!("--advertise-client-urls={}", self.client_url))
            .arg(format!("--listen-peer-urls={}", self.peer_url))
            .arg(format!("--initial-advertise-peer-urls={}", self.peer_url))
            .arg(format!("--initial-cluster={}={}", self.name, self.peer_url))
            // Test data is thrown away; fsync would only slow every Lease write down.
            // (A killed process loses nothing by it: its writes are in the page cache.)
            .arg("--unsafe-no-fsync")
            .arg("--log-level=warn");
        etcd
    }
}

/// Where an apiserver writes its audit log, and by which policy.
#[derive(Clone, Debug)]
pub struct Audit {
    pub policy: PathBuf,
    pub log: PathBuf,
}

/// kube-apiserver's command line.
#[derive(Clone, Debug)]
pub struct Apiserver {
    pub binary: PathBuf,
    pub etcd_url: String,
    pub bind_address: String,
    pub port: u16,
    pub advertise_address: String,
    /// A configuration value on a loopback control plane: nothing routes to these addresses.
    pub service_cidr: String,
    /// The directory [`pki::generate`] wrote.
    pub pki: PathBuf,
    pub cert_dir: PathBuf,
    pub tokens: PathBuf,
    pub audit: Option<Audit>,
    /// More flags, last.
    pub extra: Vec<String>,
}

impl Apiserver {
    pub fn command(&self) -> Command {
        let p = |f: &str| self.pki.join(f).display().to_string();
        let mut api = Command::new(&self.binary);
        api.arg(format!("--etcd-servers={}", self.etcd_url))
            .arg(format!("--secure-port={}", self.port))
            .arg(format!("--bind-address={}", self.bind_address))
            .arg(format!("--advertise-address={}", self.advertise_address))
            .arg(format!("--service-cluster-ip-range={}", self.service_cidr))
            .arg(format!("--cert-dir={}", self.cert_dir.display()))
            .arg(format!("--tls-cert-file={}", p(files::SERVER_CERT)))
            .arg(format!("--tls-private-key-file={}", p(files::SERVER_KEY)))
            .arg(format!("--client-ca-file={}", p(files::CA_CERT)))
            .arg(format!("--service-account-key-file={}", p(files::SA_PUB)))
            .arg(format!(
                "--service-account-signing-key-file={}",
                p(files::SA_KEY)
            ))
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg(format!("--token-auth-file={}", self.tokens.display()))
            .arg("--authorization-mode=Node,RBAC")
            .arg("--allow-privileged=true");
        if let Some(audit) = &self.audit {
            api.arg(format!("--audit-policy-file={}", audit.policy.display()))
                .arg(format!("--audit-log-path={}", audit.log.display()))
                // Blocking: an event is written before the response, so nothing the tests saw
                // happen is missing from the log.
                .arg("--audit-log-mode=blocking")
                .arg("--audit-log-format=json");
        }
        api.args(&self.extra);
        api
    }
}

/// What a loopback control plane is made of.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Where its files go (created if missing); a fresh temporary directory, removed at exit,
    /// when `None`.
    pub dir: Option<PathBuf>,
    /// The temporary directory's name prefix (the PID is appended).
    pub prefix: String,
    /// The static-token users besides the admin.
    pub users: Vec<TokenUser>,
    /// An audit policy (YAML): the apiserver then writes `audit.log` in the directory.
    pub audit_policy: Option<String>,
    /// More apiserver flags.
    pub apiserver_args: Vec<String>,
}

/// How to start each process again on the same ports and data dir.
#[derive(Clone, Debug)]
struct Layout {
    etcd: Etcd,
    apiserver: Apiserver,
}

impl Layout {
    fn command(&self, which: ControlPlaneProcess) -> Command {
        match which {
            ControlPlaneProcess::Etcd => self.etcd.command(),
            ControlPlaneProcess::KubeApiserver => self.apiserver.command(),
        }
    }
}

/// A running etcd + kube-apiserver on loopback. Its processes are killed by PID when it is
/// dropped (or at exit, for one in a static).
pub struct ControlPlane {
    dir: PathBuf,
    api_addr: SocketAddr,
    admin_kubeconfig: PathBuf,
    admin_token: String,
    layout: Layout,
    /// Held so the processes can be polled for liveness and stopped by PID.
    children: Mutex<Vec<(ControlPlaneProcess, Child)>>,
    /// How long the start took, for reports.
    pub started_in: Duration,
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver from [`binaries`] with a fresh PKI and the static-token
    /// `users` plus an admin, and returns once `/readyz` says ok. Blocking: it runs on a
    /// thread of its own, since the readiness check needs a tokio runtime of its own, which
    /// would panic inside a caller's (`#[tokio::test]`).
    pub fn start(options: Options) -> Result<ControlPlane, String> {
        std::thread::Builder::new()
            .name("pme-control-plane-start".into())
            .spawn(move || start(options))
            .map_err(|e| format!("cannot spawn the start thread: {e}"))
            .and_then(|t| t.join().unwrap_or_else(|_| Err("start panicked".into())))
    }

    /// The directory of its files: `pki/`, `tokens.csv`, the logs, `etcd/`, kubeconfigs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `127.0.0.1:<secure port>` of the kube-apiserver.
    pub fn api_addr(&self) -> SocketAddr {
        self.api_addr
    }

    pub fn server_url(&self) -> String {
        format!("https://{}", self.api_addr)
    }

    /// Kubeconfig of a `system:masters` user (JSON, which every kubeconfig reader accepts).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.admin_kubeconfig.clone()
    }

    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    pub async fn admin_client(&self) -> kube::Client {
        client_from_kubeconfig(&self.admin_kubeconfig).await
    }

    /// The CA that signed the apiserver's certificate (PEM).
    pub fn ca_pem(&self) -> Vec<u8> {
        fs::read(self.dir.join("pki").join(files::CA_CERT)).expect("read the test CA")
    }

    /// Writes a kubeconfig for a bearer `token` to `<dir>/kubeconfig-<stem>.json` and returns
    /// its path.
    pub fn kubeconfig_for_token(&self, stem: &str, token: &str) -> PathBuf {
        let path = self.dir.join(format!("kubeconfig-{stem}.json"));
        write_kubeconfig(&path, &self.server_url(), &self.ca_pem(), token);
        path
    }

    /// etcd's data directory. Copy it only while etcd is stopped (a cold copy is a consistent
    /// snapshot); putting an old copy back and starting etcd again is a restore without
    /// `--bump-revision`.
    pub fn etcd_data_dir(&self) -> PathBuf {
        self.layout.etcd.data_dir.clone()
    }

    /// The audit log (with [`Options::audit_policy`]).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// Stops one process in place with `signal` (by PID), waiting up to `grace` for it to exit
    /// before a SIGKILL, as a kubelet would. Nothing is started again until
    /// [`ControlPlane::restart`].
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
    /// [`ControlPlane::restart`].
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

    /// Which process exited, and how, if one did (without stopping it through
    /// [`ControlPlane::stop`]).
    pub fn exited(&self) -> Option<String> {
        lock_children(&self.children)
            .iter_mut()
            .find_map(|(which, child)| match child.try_wait() {
                Ok(Some(status)) => Some(format!("{} exited: {status}", which.name())),
                _ => None,
            })
    }
}

/// Processes go at once, by PID (a control plane in a static is never dropped; the exit
/// handler of [`process`] kills it).
impl Drop for ControlPlane {
    fn drop(&mut self) {
        for (_, mut child) in lock_children(&self.children).drain(..).rev() {
            let _ = child.kill();
            let _ = child.wait();
            process::forget_at_exit(child.id() as i32);
        }
    }
}

fn lock_children(
    children: &Mutex<Vec<(ControlPlaneProcess, Child)>>,
) -> MutexGuard<'_, Vec<(ControlPlaneProcess, Child)>> {
    children.lock().unwrap_or_else(|e| e.into_inner())
}

fn start(options: Options) -> Result<ControlPlane, String> {
    let t0 = Instant::now();
    let bin = binaries()?;
    let dir = match options.dir {
        Some(dir) => {
            fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            dir
        }
        None => {
            sweep_stale_dirs(&options.prefix);
            let dir = tempfile::Builder::new()
                .prefix(&format!("{}{}-", options.prefix, std::process::id()))
                .tempdir()
                .map_err(|e| format!("tempdir: {e}"))?
                .keep();
            process::remove_at_exit(dir.clone());
            dir
        }
    };
    let pki_dir = dir.join("pki");
    fs::create_dir_all(&pki_dir).map_err(|e| format!("mkdir pki: {e}"))?;
    pki::generate(
        &pki_dir,
        &PkiSpec {
            ca_name: "passmower-elector-test-ca",
            server_names: &pki::LOOPBACK_SERVER_NAMES,
            clients: &[],
        },
    )?;
    let admin_token = random_token()?;
    let mut users = vec![TokenUser::admin(&admin_token, "pme-admin")];
    users.extend(options.users);
    write_tokens(&dir.join("tokens.csv"), &users)?;
    let audit = match options.audit_policy {
        Some(policy) => {
            let path = dir.join("audit-policy.yaml");
            fs::write(&path, policy).map_err(|e| format!("write the audit policy: {e}"))?;
            Some(Audit {
                policy: path,
                log: dir.join("audit.log"),
            })
        }
        None => None,
    };

    let [etcd_client, etcd_peer, api_port] = free_ports();
    let etcd_url = format!("http://127.0.0.1:{etcd_client}");
    let mut extra = vec![
        // Advertise loopback so the start does not depend on the host having a default route;
        // the `kubernetes` Service endpoint reconciler refuses loopback, and nothing here
        // routes to that Service anyway, so it is switched off.
        "--endpoint-reconciler-type=none".to_owned(),
    ];
    extra.extend(options.apiserver_args);
    let layout = Layout {
        etcd: Etcd {
            binary: bin.join("etcd"),
            name: "pme".into(),
            data_dir: dir.join("etcd"),
            client_url: etcd_url.clone(),
            peer_url: format!("http://127.0.0.1:{etcd_peer}"),
        },
        apiserver: Apiserver {
            binary: bin.join("kube-apiserver"),
            etcd_url,
            bind_address: "127.0.0.1".into(),
            port: api_port,
            advertise_address: Ipv4Addr::LOCALHOST.to_string(),
            service_cidr: "10.0.0.0/24".into(),
            pki: pki_dir.clone(),
            cert_dir: dir.join("apiserver-certs"),
            tokens: dir.join("tokens.csv"),
            audit,
            extra,
        },
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
    let ca = fs::read(pki_dir.join(files::CA_CERT)).map_err(|e| format!("read ca: {e}"))?;
    write_kubeconfig(
        &admin_kubeconfig,
        &format!("https://{api_addr}"),
        &ca,
        &admin_token,
    );
    wait_ready(&admin_kubeconfig, &mut children, &dir)?;
    Ok(ControlPlane {
        dir,
        api_addr,
        admin_kubeconfig,
        admin_token,
        layout,
        children: Mutex::new(children),
        started_in: t0.elapsed(),
    })
}

/// 32 hex digits from the kernel's CSPRNG: a static token nobody can guess (the control plane
/// listens on loopback only, but other users of the machine share it).
pub fn random_token() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    let mut f = fs::File::open("/dev/urandom").map_err(|e| format!("open /dev/urandom: {e}"))?;
    std::io::Read::read_exact(&mut f, &mut bytes).map_err(|e| format!("read /dev/urandom: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
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

/// Removes the tempdirs of test processes that were killed (SIGKILL skips the exit handler;
/// PDEATHSIG still killed their etcd). A dir is stale when the PID in its name is gone.
fn sweep_stale_dirs(prefix: &str) {
    if prefix.is_empty() {
        return;
    }
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
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

/// The directory of `etcd`, `kube-apiserver` and `kubectl`: `PME_CONTROL_PLANE` if set, else
/// whatever `scripts/build-test-cluster.sh` prints last (a cached build returns at once; a
/// cold one compiles for many minutes).
pub fn binaries() -> Result<PathBuf, String> {
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

/// Polls `/readyz` as the admin until it answers 200, a process exits, or the start times out.
pub fn wait_ready(
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
            match readyz(&client).await {
                Ok(()) => return Ok(()),
                Err(e) => last_error = e,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!(
            "kube-apiserver not ready within {START_TIMEOUT:?}: {last_error}\n{}",
            logs_tail(dir, 40)
        ))
    })
}

/// One `GET /readyz` (5 s at most): `Ok` when it says ok.
pub async fn readyz(client: &kube::Client) -> Result<(), String> {
    let req = hyper::Request::get("/readyz")
        .body(Vec::new())
        .expect("readyz request");
    match tokio::time::timeout(Duration::from_secs(5), client.request_text(req)).await {
        Ok(Ok(body)) if body.trim() == "ok" => Ok(()),
        Ok(Ok(body)) => Err(body),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("readyz timed out".into()),
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
