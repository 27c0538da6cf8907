//! A real one-node Kubernetes: etcd, kube-apiserver (with an audit log),
//! kube-controller-manager, kube-scheduler, kube-proxy, containerd, the kubelet and Redis, all
//! inside a network and mount namespace and a cgroup subtree of the run's own, torn down (by PID
//! and by cgroup) so the host's network, mounts, cgroups, /var/log/pods and /run/containerd are
//! left as they were.
//!
//! One node at a time, one per test group (a scenario file): [`Node::of_group`] gives the
//! first test of a group a fresh node once every test of the group before it is done, and the
//! group's tests share it, as each file once had a node of its own. The last node is torn down
//! at exit.
//!
//! The binaries come from `scripts/build-test-cluster.sh` (`PME_CONTROL_PLANE`) and
//! `scripts/build-node.sh` (`PME_NODE_BIN`), the images from `scripts/build-node-images.sh`
//! (`PME_NODE_IMAGES`) and `scripts/build-sidecar-image.sh`.

pub mod audit;
pub mod cgroups;
pub mod config;
pub mod email_login;
pub mod faketime;
pub mod http;
pub mod netns;
pub mod passmower;
pub mod pods;
pub mod redis_monitor;
pub mod single_writer;
pub mod smtp;
pub mod writers;

use std::collections::HashSet;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node as KubeNode, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use crate::kubeconfig::{client_from_kubeconfig, write_kubeconfig};
use crate::process;
use cgroups::CgroupTree;
use config::{Component, Layout, ADMIN_TOKEN, API_PORT, NODE_IP, NODE_NAME};
use netns::Namespaces;

/// Every node's name: `pme-node-<test pid>-<n>`, the n-th node of the test process (its netns,
/// cgroup and mount folder).
pub const PREFIX: &str = "pme-node-";
const API_START_TIMEOUT: Duration = Duration::from_secs(120);
const NODE_READY_TIMEOUT: Duration = Duration::from_secs(180);

/// The running node. Get it with [`Node::of_group`].
pub struct Node {
    pub layout: Layout,
    pub ns: Arc<Namespaces>,
    pub cgroups: CgroupTree,
    /// Kubeconfig of a `system:masters` user for the test process (through the forwarder).
    admin_kubeconfig: PathBuf,
    /// Host loopback port forwarded to the apiserver inside the namespace.
    pub api_forward_port: u16,
    procs: Mutex<Vec<(Component, Child)>>,
    imported: Mutex<HashSet<String>>,
    pub images: Images,
    /// How long the start took (everything up to a Ready node), for reports.
    pub started_in: Duration,
    torn_down: std::sync::atomic::AtomicBool,
}

/// The image archives and references the tests use.
#[derive(Clone, Debug)]
pub struct Images {
    pub pause_ref: String,
    pub passmower_ref: String,
    pub passmower_archive: PathBuf,
    /// Built on first use (a static release build): see [`Node::sidecar_image`].
    sidecar: Arc<OnceLock<Result<(String, PathBuf), String>>>,
}

impl Node {
    /// The node of test group `group` (pass `module_path!()`), started for it (a minute or
    /// so) once the tests of the group that had the node before are all done; tests of the
    /// same group share it. Hold the returned [`NodeUse`] for the whole test. Panics with the
    /// reason (and log tails) if the node cannot start; the group's later tests get the same
    /// panic, and the next group tries a fresh node.
    pub async fn of_group(group: &'static str) -> NodeUse {
        let taken = tokio::task::spawn_blocking(move || take_for(group))
            .await
            .unwrap_or_else(|e| Err(format!("the node start panicked: {e}")));
        match taken {
            Ok(node) => NodeUse { node },
            Err(e) => panic!("test node unavailable: {e}"),
        }
    }

    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    pub async fn admin_client(&self) -> kube::Client {
        client_from_kubeconfig(&self.admin_kubeconfig).await
    }

    /// The apiserver as pods and node processes see it.
    pub fn api_addr_inside(&self) -> SocketAddr {
        format!("{NODE_IP}:{API_PORT}").parse().expect("address")
    }

    /// `kubectl` (built with the node binaries) as the admin.
    pub fn kubectl(&self) -> Command {
        let mut c = Command::new(self.layout.node_bin.join("kubectl"));
        c.env("KUBECONFIG", &self.admin_kubeconfig);
        c
    }

    /// Imports an OCI archive into containerd's `k8s.io` namespace (once per reference).
    pub fn import_image(&self, reference: &str, archive: &Path) -> Result<(), String> {
        if self
            .imported
            .lock()
            .map(|s| s.contains(reference))
            .unwrap_or(false)
        {
            return Ok(());
        }
        import_image(&self.layout, archive)?;
        if let Ok(mut s) = self.imported.lock() {
            s.insert(reference.to_owned());
        }
        Ok(())
    }

    /// The sidecar image (reference, archive): the static release binary packed by
    /// `scripts/build-sidecar-image.sh` as users would, imported into containerd.
    pub fn sidecar_image(&self) -> (String, PathBuf) {
        let built = self
            .images
            .sidecar
            .get_or_init(|| build_sidecar_image(&self.layout));
        let (reference, archive) = match built {
            Ok(pair) => pair.clone(),
            Err(e) => panic!("sidecar image: {e}"),
        };
        self.import_image(&reference, &archive)
            .unwrap_or_else(|e| panic!("import the sidecar image: {e}"));
        (reference, archive)
    }

    /// Passmower's image reference, imported into containerd.
    pub fn passmower_image(&self) -> String {
        self.import_image(&self.images.passmower_ref, &self.images.passmower_archive)
            .unwrap_or_else(|e| panic!("import the Passmower image: {e}"));
        self.images.passmower_ref.clone()
    }

    /// A fresh namespace, returned once its `default` ServiceAccount exists (the
    /// controller-manager creates it; pods are refused until then).
    pub async fn new_namespace(&self, name: &str) -> String {
        let client = self.admin_client().await;
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
        let sa = Api::<ServiceAccount>::namespaced(client, name);
        let ok = crate::wait_until_async(
            Duration::from_secs(60),
            Duration::from_millis(200),
            || async { sa.get_opt("default").await.ok().flatten().is_some() },
        )
        .await;
        assert!(ok, "no default ServiceAccount in {name} after 60s");
        name.to_owned()
    }

    /// Stops one node process with `signal`, waiting up to `grace` before SIGKILL.
    pub fn stop(&self, which: Component, signal: nix::sys::signal::Signal, grace: Duration) {
        let mut procs = lock(&self.procs);
        let Some(i) = procs.iter().position(|(c, _)| *c == which) else {
            return;
        };
        let (_, mut child) = procs.remove(i);
        drop(procs);
        stop_child(&mut child, signal, grace);
    }

    /// Starts a stopped process again with the same command line (a no-op if it runs).
    /// For the apiserver, returns once `/readyz` answers ok.
    pub fn restart(&self, which: Component) -> Result<(), String> {
        {
            let mut procs = lock(&self.procs);
            if !procs.iter().any(|(c, _)| *c == which) {
                let child = spawn(self, which)?;
                procs.push((which, child));
            }
        }
        if which == Component::KubeApiserver {
            wait_api_ready(&self.admin_kubeconfig, &self.procs, &self.layout.dir)?;
        }
        Ok(())
    }

    /// Panics (with log tails) unless every node process still runs.
    pub fn assert_alive(&self) {
        let mut procs = lock(&self.procs);
        for (which, child) in procs.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "{} exited: {status}\n{}",
                    which.name(),
                    logs_tail(&self.layout.dir, 30)
                );
            }
        }
    }

    pub fn logs_tail(&self, lines: usize) -> String {
        logs_tail(&self.layout.dir, lines)
    }

    /// The apiserver's audit log.
    pub fn audit_log(&self) -> PathBuf {
        self.layout.path("audit.log")
    }

    /// Stops everything in the order the kubelet and containerd need (see NODE-NOTES): the
    /// kubelet first (it would restart containers), then every container, then containerd
    /// and its shims, then the rest; then removes the cgroups, the namespaces and the run's
    /// directory (unless `PME_KEEP_TMP` is set). Safe to call twice; runs at exit.
    pub fn teardown(&self) -> Vec<String> {
        if self
            .torn_down
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return Vec::new();
        }
        let mut problems = Vec::new();
        let mut procs = match self.procs.try_lock() {
            Ok(mut p) => std::mem::take(&mut *p),
            Err(_) => Vec::new(),
        };
        let mut take = |which: Component| {
            procs
                .iter()
                .position(|(c, _)| *c == which)
                .map(|i| procs.remove(i).1)
        };
        use nix::sys::signal::Signal;
        if let Some(mut kubelet) = take(Component::Kubelet) {
            stop_child(&mut kubelet, Signal::SIGTERM, Duration::from_secs(5));
        }
        let left = self
            .cgroups
            .kill_all(Some("kubepods"), Duration::from_secs(20));
        if !left.is_empty() {
            problems.push(format!("containers survived SIGKILL: {left:?}"));
        }
        if let Some(mut containerd) = take(Component::Containerd) {
            stop_child(&mut containerd, Signal::SIGTERM, Duration::from_secs(5));
        }
        for which in Component::ALL.iter().rev() {
            if let Some(mut child) = take(*which) {
                stop_child(&mut child, Signal::SIGTERM, Duration::from_secs(5));
            }
        }
        // Shims (they left containerd's process tree, not its cgroup) and anything else.
        problems.extend(self.cgroups.destroy());
        problems.extend(self.ns.remove());
        if std::env::var_os("PME_KEEP_TMP").is_none() {
            if let Err(e) = fs::remove_dir_all(&self.layout.dir) {
                problems.push(format!("remove {}: {e}", self.layout.dir.display()));
            }
        } else {
            eprintln!("pme_testkit::node: kept {}", self.layout.dir.display());
        }
        problems
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn stop_child(child: &mut Child, signal: nix::sys::signal::Signal, grace: Duration) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, signal);
    let deadline = Instant::now() + grace;
    while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    process::forget_at_exit(pid.as_raw());
}

/// A test's use of its group's node: the group keeps the node while one is alive.
#[must_use = "the node may go to another group once this is dropped"]
pub struct NodeUse {
    node: &'static Node,
}

impl NodeUse {
    pub fn node(&self) -> &'static Node {
        self.node
    }
}

impl std::ops::Deref for NodeUse {
    type Target = Node;

    fn deref(&self) -> &Node {
        self.node
    }
}

impl Drop for NodeUse {
    fn drop(&mut self) {
        let mut slot = lock(&SLOT);
        slot.users = slot.users.saturating_sub(1);
        drop(slot);
        FREED.notify_all();
    }
}

/// Which group has the node, and how many of its tests use it now.
struct Slot {
    group: Option<&'static str>,
    node: Option<Result<&'static Node, String>>,
    users: usize,
    started: u32,
}

static SLOT: Mutex<Slot> = Mutex::new(Slot {
    group: None,
    node: None,
    users: 0,
    started: 0,
});
static FREED: std::sync::Condvar = std::sync::Condvar::new();
/// The node up now, for the exit handler.
static CURRENT: std::sync::atomic::AtomicPtr<Node> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// Blocks until `group` has the node: its own, or a fresh one once no test of the group before
/// uses the old one any more (which is torn down first).
fn take_for(group: &'static str) -> Result<&'static Node, String> {
    let mut slot = lock(&SLOT);
    loop {
        if slot.group == Some(group) {
            match &slot.node {
                Some(Ok(node)) => {
                    let node = *node;
                    slot.users += 1;
                    return Ok(node);
                }
                Some(Err(e)) => return Err(e.clone()),
                None => {}
            }
        }
        if slot.users == 0 {
            if let Some(Ok(old)) = slot.node.take() {
                for p in old.teardown() {
                    eprintln!("pme_testkit::node teardown: {p}");
                }
            }
            slot.started += 1;
            slot.group = Some(group);
            let started = slot.started;
            slot.node = Some(
                std::thread::Builder::new()
                    .name("pme-node-start".into())
                    .spawn(move || start(started))
                    .map_err(|e| format!("spawn: {e}"))
                    .and_then(|t| {
                        t.join()
                            .unwrap_or_else(|_| Err("node start panicked".into()))
                    })
                    .map(|node| &*Box::leak(Box::new(node))),
            );
            if let Some(Ok(node)) = &slot.node {
                register_teardown(node);
            }
            continue;
        }
        slot = FREED.wait(slot).unwrap_or_else(|e| e.into_inner());
    }
}

fn register_teardown(node: &'static Node) {
    CURRENT.store(
        node as *const Node as *mut Node,
        std::sync::atomic::Ordering::SeqCst,
    );
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        extern "C" fn at_exit() {
            let node = CURRENT.load(std::sync::atomic::Ordering::SeqCst);
            // SAFETY: CURRENT holds null or a leaked `&'static Node`, never freed.
            if let Some(node) = unsafe { node.as_ref() } {
                for p in node.teardown() {
                    eprintln!("pme_testkit::node teardown: {p}");
                }
            }
        }
        // Registered after crate::process's handler (which runs on the first spawn), so it
        // runs before it: the kubelet stops before its containers, the containers before
        // containerd.
        // SAFETY: registering a plain `extern "C" fn()` is what atexit expects.
        unsafe {
            libc::atexit(at_exit);
        }
    });
}

fn env_dir(var: &str, script: &str) -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os(var) {
        return Ok(PathBuf::from(dir));
    }
    let script = crate::repo().join(script);
    let out = Command::new(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed: {}", script.display(), out.status));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    Ok(PathBuf::from(
        stdout.lines().last().unwrap_or_default().trim(),
    ))
}

/// Prints a line and appends it to the real-pod report file (`PME_REAL_PODS_REPORT`, default
/// `target/real-pods-report.txt`).
pub fn report(line: &str) {
    println!("{line}");
    let path = std::env::var_os("PME_REAL_PODS_REPORT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(
                &std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()),
            )
            .join("real-pods-report.txt")
        });
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        use std::io::Write;
        let _ = writeln!(f, "{line}");
    }
}

/// The upstream tree of the generation under test (`PME_PASSMOWER_GENERATION`, see
/// [`passmower::Generation`]) in `../shared/upstream/` beside the repository, or `PME_UPSTREAM`.
pub fn upstream_dir() -> PathBuf {
    std::env::var_os("PME_UPSTREAM")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            crate::repo()
                .join("../shared/upstream")
                .join(passmower::Generation::from_env().folder())
        })
}

fn read_images(dir: &Path) -> Result<Images, String> {
    let env = fs::read_to_string(dir.join("images.env"))
        .map_err(|e| format!("read {}/images.env: {e}", dir.display()))?;
    let get = |key: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
            .ok_or_else(|| format!("{key} missing in {}/images.env", dir.display()))
    };
    // An image set names the tree it was built from: the chart and env the tests use must be
    // that tree's (a 2.4 image installed with the 1.3.0 chart would test neither).
    if let Ok(built_from) = get("PASSMOWER_UPSTREAM") {
        let want = fs::canonicalize(upstream_dir()).unwrap_or_else(|_| upstream_dir());
        if Path::new(&built_from) != want {
            return Err(format!(
                "{}/images.env was built from {built_from}, but the tests use {} \
                 (PME_PASSMOWER_GENERATION={}): build the images with PME_UPSTREAM set to \
                 the same tree (scripts/real-pods.sh does)",
                dir.display(),
                want.display(),
                passmower::Generation::from_env().name()
            ));
        }
    }
    Ok(Images {
        pause_ref: get("PAUSE_REF")?,
        passmower_ref: get("PASSMOWER_REF")?,
        passmower_archive: dir.join("passmower.tar"),
        sidecar: Arc::new(OnceLock::new()),
    })
}

fn build_sidecar_image(layout: &Layout) -> Result<(String, PathBuf), String> {
    let archive = layout.path("sidecar-image.tar");
    let reference = "docker.io/local/passmower-elector:test".to_owned();
    let script = crate::repo().join("scripts/build-sidecar-image.sh");
    let status = Command::new(&script)
        .arg("--out")
        .arg(&archive)
        .arg("--image")
        .arg(&reference)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("run {}: {e}", script.display()))?;
    if !status.success() {
        return Err(format!("{} failed: {status}", script.display()));
    }
    Ok((reference, archive))
}

fn import_image(layout: &Layout, archive: &Path) -> Result<(), String> {
    let out = Command::new("ctr")
        .arg(format!(
            "--address={}",
            layout.containerd_socket().display()
        ))
        .args([
            "--namespace=k8s.io",
            "images",
            "import",
            "--snapshotter=overlayfs",
        ])
        .arg(archive)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run ctr: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ctr images import {}: {}\n{}",
            archive.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Removes what earlier test binaries left when they were killed before their exit handler
/// ran: their cgroups (killing what is inside), network namespaces and directories.
fn sweep_stale_runs() {
    let alive = |name: &str| {
        name.strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
    };
    for name in CgroupTree::list(PREFIX) {
        if !alive(&name) {
            for p in CgroupTree::existing(&name).destroy() {
                eprintln!("pme_testkit::node: stale cgroup {name}: {p}");
            }
        }
    }
    let stale_dirs: Vec<PathBuf> = fs::read_dir(std::env::temp_dir())
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.starts_with(PREFIX) && !alive(&name)
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    for name in netns::list(PREFIX) {
        if !alive(&name) {
            let dir = stale_dirs.iter().find(|d| {
                d.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{name}-")))
            });
            netns::remove_stale(&name, dir.map(PathBuf::as_path));
        }
    }
    for dir in stale_dirs {
        let _ = fs::remove_dir_all(dir);
    }
}

fn spawn(node_parts: &Node, which: Component) -> Result<Child, String> {
    spawn_in(
        &node_parts.layout,
        &node_parts.ns,
        &node_parts.cgroups,
        which,
    )
}

fn spawn_in(
    layout: &Layout,
    ns: &Namespaces,
    cgroups: &CgroupTree,
    which: Component,
) -> Result<Child, String> {
    let name = which.name();
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(layout.path(&format!("{name}.log")))
        .map_err(|e| format!("open {name}.log: {e}"))?;
    let log2 = log.try_clone().map_err(|e| format!("dup log: {e}"))?;
    let mut cmd = layout.command(which);
    cmd.stdin(Stdio::null()).stdout(log).stderr(log2);
    ns.enter(&mut cmd, &layout.dir, &cgroups.node_procs());
    process::spawn_tracked(cmd).map_err(|e| format!("spawn {name}: {e}"))
}

fn start(n: u32) -> Result<Node, String> {
    let t0 = Instant::now();
    if unsafe { libc::geteuid() } != 0 {
        return Err("the node needs root (namespaces, cgroups, mounts)".into());
    }
    let control_plane = env_dir("PME_CONTROL_PLANE", "scripts/build-test-cluster.sh")?;
    let node_bin = env_dir("PME_NODE_BIN", "scripts/build-node.sh")?;
    if std::env::var_os("PME_UPSTREAM").is_none() {
        std::env::set_var("PME_UPSTREAM", upstream_dir());
    }
    let images = read_images(&env_dir("PME_NODE_IMAGES", "scripts/build-node-images.sh")?)?;
    sweep_stale_runs();

    let pid = std::process::id();
    let name = format!("{PREFIX}{pid}-{n}");
    let dir = tempfile::Builder::new()
        .prefix(&format!("{name}-"))
        .tempdir()
        .map_err(|e| format!("tempdir: {e}"))?
        .keep();
    let cgroups = CgroupTree::create(&name)?;
    let layout = Layout {
        control_plane,
        node_bin,
        dir: dir.clone(),
        cgroup_root: cgroups.kubelet_root(),
        sandbox_image: images.pause_ref.clone(),
    };
    layout.write_files()?;
    let ns = Arc::new(Namespaces::create(
        &name,
        config::BRIDGE,
        &format!("{NODE_IP}/24"),
        &dir,
    )?);
    // Service addresses are translated by kube-proxy's rules in the namespace; a route makes
    // them reachable from the namespace itself too (the tests' HTTP loop), not only from pods.
    netns::run(
        "ip",
        &[
            "-n",
            &name,
            "route",
            "add",
            config::SERVICE_CIDR,
            "dev",
            config::BRIDGE,
        ],
    )?;
    let api_forward_port = ns.forward(format!("{NODE_IP}:{API_PORT}").parse().expect("addr"))?;
    let admin_kubeconfig = dir.join("admin-host.kubeconfig");
    let ca = fs::read(dir.join("pki/ca.crt")).map_err(|e| format!("read ca: {e}"))?;
    write_kubeconfig(
        &admin_kubeconfig,
        &format!("https://127.0.0.1:{api_forward_port}"),
        &ca,
        ADMIN_TOKEN,
    );

    let node = Node {
        layout,
        ns,
        cgroups,
        admin_kubeconfig,
        api_forward_port,
        procs: Mutex::new(Vec::new()),
        imported: Mutex::new(HashSet::new()),
        images,
        started_in: Duration::ZERO,
        torn_down: std::sync::atomic::AtomicBool::new(false),
    };
    // From here on a failure must tear down what was started.
    match bring_up(&node) {
        Ok(()) => Ok(Node {
            started_in: t0.elapsed(),
            ..node
        }),
        Err(e) => {
            let logs = node.logs_tail(40);
            let problems = node.teardown();
            Err(format!("{e}\n{logs}\nteardown: {problems:?}"))
        }
    }
}

fn bring_up(node: &Node) -> Result<(), String> {
    let layout = &node.layout;
    for which in [Component::Etcd, Component::KubeApiserver] {
        let child = spawn(node, which)?;
        lock(&node.procs).push((which, child));
    }
    wait_api_ready(&node.admin_kubeconfig, &node.procs, &layout.dir)?;
    for which in [
        Component::ControllerManager,
        Component::Scheduler,
        Component::Redis,
        Component::Containerd,
    ] {
        let child = spawn(node, which)?;
        lock(&node.procs).push((which, child));
    }
    wait_for(
        "containerd's socket",
        Duration::from_secs(30),
        &node.procs,
        &layout.dir,
        || layout.containerd_socket().exists(),
    )?;
    import_image(
        layout,
        &env_dir("PME_NODE_IMAGES", "scripts/build-node-images.sh")?.join("pause.tar"),
    )?;
    for which in [Component::KubeProxy, Component::Kubelet] {
        let child = spawn(node, which)?;
        lock(&node.procs).push((which, child));
    }
    wait_node_ready(node)
}

fn wait_for(
    what: &str,
    timeout: Duration,
    procs: &Mutex<Vec<(Component, Child)>>,
    dir: &Path,
    mut cond: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return Ok(());
        }
        for (which, child) in lock(procs).iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "{} exited ({status}) while waiting for {what}",
                    which.name()
                ));
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no {what} after {timeout:?}\n{}",
                logs_tail(dir, 30)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_api_ready(
    admin_kubeconfig: &Path,
    procs: &Mutex<Vec<(Component, Child)>>,
    dir: &Path,
) -> Result<(), String> {
    let rt = runtime()?;
    let client = rt.block_on(client_from_kubeconfig(admin_kubeconfig));
    wait_for("ready apiserver", API_START_TIMEOUT, procs, dir, || {
        rt.block_on(async {
            let req = hyper::Request::get("/readyz")
                .body(Vec::new())
                .expect("request");
            matches!(
                tokio::time::timeout(Duration::from_secs(5), client.request_text(req)).await,
                Ok(Ok(body)) if body.trim() == "ok"
            )
        })
    })
}

fn wait_node_ready(node: &Node) -> Result<(), String> {
    let rt = runtime()?;
    let client = rt.block_on(client_from_kubeconfig(&node.admin_kubeconfig));
    let nodes = Api::<KubeNode>::all(client);
    wait_for(
        "Ready node",
        NODE_READY_TIMEOUT,
        &node.procs,
        &node.layout.dir,
        || {
            rt.block_on(async {
                let Ok(Some(n)) = nodes.get_opt(NODE_NAME).await else {
                    return false;
                };
                n.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
        },
    )
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))
}

pub fn logs_tail(dir: &Path, lines: usize) -> String {
    let mut out = String::new();
    for which in Component::ALL {
        let name = which.name();
        let text = fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        if all.is_empty() {
            continue;
        }
        out.push_str(&format!("--- last {lines} lines of {name}.log ---\n"));
        for line in &all[all.len().saturating_sub(lines)..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
