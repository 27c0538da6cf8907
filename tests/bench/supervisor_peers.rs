//! `supervise` + `elect` beside LINBIT's `k8s-await-election`, the closest existing tool: both
//! run an app only while their pod holds a Lease and stop it when the pod loses it. Four faults
//! on the kit's real kube-apiserver, two pods per implementation, the same timings (lease 15 s,
//! renew deadline 10 s, retry 2 s: `k8s-await-election`'s own defaults):
//!
//! - **graceful**: the leader's pod is deleted (SIGTERM to every container's PID 1, SIGKILL after
//!   a 30 s grace period, then a new pod with a new name);
//! - **child crash**: the leader's app is SIGKILLed (a wrapper that exits is restarted at once
//!   under the same pod name, as the kubelet restarts a container);
//! - **ignores SIGTERM**: graceful, with an app that traps SIGTERM away;
//! - **apiserver cut**: the leader pod's link to the apiserver holds every byte for 25 s.
//!
//! Each wrapper is PID 1 of its own PID namespace (`unshare`), as in a container: when it exits,
//! the kernel kills what is left in the namespace. `k8s-await-election` reads only the in-cluster
//! configuration, so its namespace also has a private mount namespace where a tmpfs over `/run`
//! holds the service-account token and CA it expects. The app records its host PID on start;
//! the bench polls (2 ms) every recorded PID's liveness and reports, per round, the time from
//! the fault to the next leader app's start, how long the old app lived after the fault, the
//! time two leader apps were alive at once, and whether the old app was killed.
//!
//! `scripts/bench.sh` runs it and writes `docs/results/supervisor-peers.md`; alone:
//! `cargo test --test bench -- --ignored --exact supervisor_peers::supervisor_peers --nocapture`
//! with `PME_BENCH_PEERS` (scripts/build-bench-peers.sh) and `PME_CONTROL_PLANE` set.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pme_testkit::audit::AuditedCluster;
use pme_testkit::{free_port, BootTime, ElectorProcess, FaultProxy};

use crate::bench_election::{create_namespace, fmt_d, machine};

const PODS: usize = 2;
const POLL: Duration = Duration::from_millis(2);
/// The kubelet's default termination grace period.
const GRACE: Duration = Duration::from_secs(30);
const CUT: Duration = Duration::from_secs(25);
/// The longest a round watches after its fault; a bound, not an expectation.
const WATCH: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Ours,
    Await,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Ours => "supervise + elect",
            Kind::Await => "k8s-await-election",
        }
    }
    fn slug(self) -> &'static str {
        match self {
            Kind::Ours => "ours",
            Kind::Await => "await",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scenario {
    Graceful,
    Crash,
    IgnoresTerm,
    Cut,
}

const SCENARIOS: [Scenario; 4] = [
    Scenario::Graceful,
    Scenario::Crash,
    Scenario::IgnoresTerm,
    Scenario::Cut,
];

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Graceful => "graceful handover (leader pod deleted)",
            Scenario::Crash => "crash of the leader's app (SIGKILL)",
            Scenario::IgnoresTerm => "leader pod deleted, app ignores SIGTERM",
            Scenario::Cut => "leader pod cut off from the apiserver for 25 s",
        }
    }
}

/// An app that records its host PID (the shell's own read of /proc/self, which is the host's
/// /proc: the PID namespace has no /proc of its own) and its mode, then idles.
fn app_script(ignore_term: bool) -> String {
    let trap = if ignore_term {
        "trap '' TERM"
    } else {
        "trap 'exit 0' TERM"
    };
    format!(
        "read -r pid rest < /proc/self/stat\necho \"$pid $MODE\" >> \"$POD_DIR/starts\"\n{trap}\n\
         while :; do sleep 1 & wait $!; done\n"
    )
}

/// The mount setup `k8s-await-election` needs for `rest.InClusterConfig()`: token and CA at
/// the fixed service-account path, on a tmpfs only this mount namespace sees.
const IN_CLUSTER: &str = "mount -t tmpfs tmpfs /run && \
     mkdir -p /run/secrets/kubernetes.io/serviceaccount && \
     cp \"$1/token\" \"$1/ca.crt\" /run/secrets/kubernetes.io/serviceaccount/ && \
     shift && exec \"$@\"";

struct Pod {
    proxy: FaultProxy,
    kubeconfig: PathBuf,
    /// Token and CA for the in-cluster configuration.
    sa_dir: PathBuf,
    starts: PathBuf,
    dir: PathBuf,
    /// Pod generation: a deleted pod is replaced by one with a new name.
    gen: usize,
    /// `unshare` running the app container's PID 1.
    wrapper: Option<ElectorProcess>,
    /// Ours: the `elect` sidecar.
    elect: Option<ElectorProcess>,
}

/// One leader app process, as recorded and observed.
struct Child {
    pod: usize,
    /// The pod's generation when the start was read (a replacement pod has a new one).
    gen: usize,
    pid: i32,
    seen: BootTime,
    gone: Option<BootTime>,
}

struct Group {
    kind: Kind,
    namespace: String,
    pods: Vec<Pod>,
    children: Vec<Child>,
    /// Lines already read from each pod's starts file.
    read: Vec<usize>,
    app: PathBuf,
    _dir: tempfile::TempDir,
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_owned()))
        .is_some_and(|r| !r.starts_with('Z') && !r.starts_with('X'))
}

/// The PID of `parent`'s only child (unshare's forked namespace init).
fn only_child(parent: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
}

impl Group {
    fn new(kind: Kind, cluster: &AuditedCluster, namespace: &str, ignore_term: bool) -> Group {
        let dir = tempfile::Builder::new()
            .prefix(&format!("pme-supervisor-peers-{}-", kind.slug()))
            .tempdir()
            .expect("tempdir");
        let pods = (0..PODS)
            .map(|i| {
                let user = format!("sv-{}-{i}", kind.slug());
                let proxy = FaultProxy::start(cluster.api_addr());
                let direct = cluster.kubeconfig_of(&user);
                let kubeconfig = proxy.kubeconfig_via(&direct);
                let pod_dir = dir.path().join(format!("pod-{i}"));
                let sa_dir = pod_dir.join("sa");
                std::fs::create_dir_all(&sa_dir).expect("pod dir");
                let json: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(&direct).expect("read kubeconfig"))
                        .expect("kubeconfig json");
                let token = json["users"][0]["user"]["token"]
                    .as_str()
                    .expect("token in kubeconfig");
                std::fs::write(sa_dir.join("token"), token).expect("token");
                std::fs::write(sa_dir.join("ca.crt"), cluster.ca_pem()).expect("ca");
                Pod {
                    proxy,
                    kubeconfig,
                    sa_dir,
                    starts: pod_dir.join("starts"),
                    dir: pod_dir,
                    gen: 0,
                    wrapper: None,
                    elect: None,
                }
            })
            .collect();
        let app = dir.path().join("app.sh");
        // One script for every pod: each writes to its own POD_DIR.
        std::fs::write(&app, app_script(ignore_term)).expect("app script");
        Group {
            kind,
            namespace: namespace.to_owned(),
            pods,
            children: Vec::new(),
            read: vec![0; PODS],
            app,
            _dir: dir,
        }
    }

    fn identity(&self, i: usize) -> String {
        format!("{}-{i}-{}", self.kind.slug(), self.pods[i].gen)
    }

    fn start(&mut self, i: usize) {
        let identity = self.identity(i);
        let ns = self.namespace.clone();
        let app = self.app.to_string_lossy().into_owned();
        let elector = crate::bench_election::elector_bin();
        let pod = &mut self.pods[i];
        let pod_dir = pod.dir.to_string_lossy().into_owned();
        let unshare = Path::new("/usr/bin/unshare");
        match self.kind {
            Kind::Ours => {
                let flag = pod.dir.join(format!("grant-{}.json", pod.gen));
                let flag_s = flag.to_string_lossy().into_owned();
                let port = free_port();
                let listen = format!("127.0.0.1:{port}");
                let toggle = format!("http://127.0.0.1:{port}/");
                let elector_s = elector.to_string_lossy().into_owned();
                pod.wrapper = Some(ElectorProcess::spawn_program(
                    &format!("{identity}-supervise"),
                    unshare,
                    &[
                        "--pid",
                        "--fork",
                        "--kill-child",
                        "--",
                        &elector_s,
                        "supervise",
                        "--flag-file",
                        &flag_s,
                        "--listen",
                        &listen,
                        "--kill-grace",
                        "3s",
                        "--on-follower",
                        "stop",
                        "--leader-env",
                        "MODE=leader",
                        "--follower-env",
                        "MODE=follower",
                        "--",
                        "/bin/sh",
                        &app,
                    ],
                    &[("POD_DIR", OsStr::new(&pod_dir))],
                ));
                // Let the supervisor bind its toggle port before the elector pushes to it.
                std::thread::sleep(Duration::from_millis(200));
                let kubeconfig = pod.kubeconfig.clone();
                pod.elect = Some(ElectorProcess::spawn_program(
                    &identity,
                    &elector,
                    &[
                        "elect",
                        "--lease-name",
                        "bench",
                        "--namespace",
                        &ns,
                        "--identity",
                        &identity,
                        "--lease-duration",
                        "15s",
                        "--renew-deadline",
                        "10s",
                        "--retry-period",
                        "2s",
                        "--kill-grace",
                        "3s",
                        "--flag-file",
                        &flag_s,
                        "--toggle-url",
                        &toggle,
                        "--probe-addr",
                        "127.0.0.1:0",
                    ],
                    &[
                        ("KUBECONFIG", kubeconfig.as_os_str()),
                        ("POD_NAME", OsStr::new(&identity)),
                        ("POD_NAMESPACE", OsStr::new(&ns)),
                    ],
                ));
            }
            Kind::Await => {
                let bin =
                    PathBuf::from(std::env::var_os("PME_BENCH_PEERS").expect("PME_BENCH_PEERS"))
                        .join("k8s-await-election");
                let bin_s = bin.to_string_lossy().into_owned();
                let sa = pod.sa_dir.to_string_lossy().into_owned();
                let port = pod.proxy.addr().port().to_string();
                pod.wrapper = Some(ElectorProcess::spawn_program(
                    &identity,
                    unshare,
                    &[
                        "--mount",
                        "--pid",
                        "--fork",
                        "--kill-child",
                        "--",
                        "/bin/sh",
                        "-c",
                        IN_CLUSTER,
                        "sh",
                        &sa,
                        &bin_s,
                        "/bin/sh",
                        &app,
                    ],
                    &[
                        ("POD_DIR", OsStr::new(&pod_dir)),
                        ("MODE", OsStr::new("leader")),
                        ("K8S_AWAIT_ELECTION_ENABLED", OsStr::new("1")),
                        ("K8S_AWAIT_ELECTION_NAME", OsStr::new("bench")),
                        ("K8S_AWAIT_ELECTION_LOCK_NAME", OsStr::new("bench")),
                        ("K8S_AWAIT_ELECTION_LOCK_NAMESPACE", OsStr::new(&ns)),
                        ("K8S_AWAIT_ELECTION_IDENTITY", OsStr::new(&identity)),
                        ("KUBERNETES_SERVICE_HOST", OsStr::new("127.0.0.1")),
                        ("KUBERNETES_SERVICE_PORT", OsStr::new(&port)),
                    ],
                ));
            }
        }
    }

    /// Reads new start records and notes every recorded leader app that has gone.
    fn poll(&mut self) {
        let now = BootTime::now();
        for i in 0..PODS {
            let text = std::fs::read_to_string(&self.pods[i].starts).unwrap_or_default();
            // Only whole lines: the app may be writing the last one.
            let lines: Vec<&str> = text
                .split_inclusive('\n')
                .filter(|l| l.ends_with('\n'))
                .collect();
            for line in &lines[self.read[i].min(lines.len())..] {
                let mut parts = line.split_whitespace();
                let pid = parts.next().and_then(|p| p.parse::<i32>().ok());
                if let (Some(pid), Some("leader")) = (pid, parts.next()) {
                    self.children.push(Child {
                        pod: i,
                        gen: self.pods[i].gen,
                        pid,
                        seen: now,
                        gone: None,
                    });
                }
            }
            self.read[i] = lines.len();
        }
        for c in &mut self.children {
            if c.gone.is_none() && !alive(c.pid) {
                c.gone = Some(now);
            }
        }
    }

    fn live(&self) -> Vec<usize> {
        (0..self.children.len())
            .filter(|&c| self.children[c].gone.is_none())
            .collect()
    }

    /// The one live leader app, once it has run for 3 s (the elector renewed at least once).
    fn stable_leader(&mut self) -> Option<usize> {
        let deadline = BootTime::now().saturating_add(WATCH);
        while BootTime::now() < deadline {
            self.restart_exited();
            self.poll();
            if let [c] = self.live().as_slice() {
                if BootTime::now().saturating_since(self.children[*c].seen)
                    >= Duration::from_secs(3)
                {
                    return Some(*c);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Restarts a wrapper (or, ours, sidecar) that exited on its own, under the same pod name:
    /// what the kubelet does with a container that exits.
    fn restart_exited(&mut self) -> usize {
        let mut n = 0;
        for i in 0..PODS {
            let pod = &mut self.pods[i];
            let exited = |p: &mut Option<ElectorProcess>| {
                p.as_mut().is_none_or(|p| p.try_exit_status().is_some())
            };
            let w = exited(&mut pod.wrapper);
            let e = self.kind == Kind::Ours && exited(&mut pod.elect);
            if w || e {
                // One container restarting is enough to model; restart the pod's processes.
                pod.wrapper = None;
                pod.elect = None;
                self.start(i);
                n += 1;
            }
        }
        n
    }

    /// Deletes pod `i` as the kubelet would: SIGTERM to each container's PID 1, SIGKILL after the
    /// grace period; then a replacement pod with a new name.
    fn delete_pod(&mut self, i: usize, until: BootTime) -> Option<Duration> {
        let t0 = BootTime::now();
        let pod = &mut self.pods[i];
        let mut pids = Vec::new();
        if let Some(w) = pod.wrapper.as_ref() {
            if let Some(init) = only_child(w.pid().as_raw()) {
                pids.push(init);
            }
        }
        if let Some(e) = pod.elect.as_ref() {
            pids.push(e.pid().as_raw());
        }
        for &p in &pids {
            let _ = kill(Pid::from_raw(p), Signal::SIGTERM);
        }
        let deadline = t0.saturating_add(GRACE).min(until);
        let mut exited_after = None;
        while BootTime::now() < deadline {
            self.poll();
            let pod = &mut self.pods[i];
            let w_done = pod
                .wrapper
                .as_mut()
                .is_none_or(|p| p.try_exit_status().is_some());
            let e_done = pod
                .elect
                .as_mut()
                .is_none_or(|p| p.try_exit_status().is_some());
            if w_done && e_done {
                exited_after = Some(BootTime::now().saturating_since(t0));
                break;
            }
            std::thread::sleep(POLL);
        }
        let pod = &mut self.pods[i];
        for p in [pod.wrapper.take(), pod.elect.take()].into_iter().flatten() {
            drop(p); // SIGKILL if still running: the grace period is over.
        }
        pod.gen += 1;
        self.start(i);
        exited_after
    }
}

/// One round's figures, from the fault.
#[derive(Default)]
struct Round {
    /// The next leader app's start (any pod, the old one's restarted app included).
    next_start: Option<Duration>,
    next_same_pod: bool,
    /// When the old app was seen gone (`None`: alive at the end of the watch).
    old_gone: Option<Duration>,
    /// Time during which two or more leader apps were alive.
    overlap: Duration,
    note: String,
}

fn overlap(children: &[Child], from: BootTime, to: BootTime) -> Duration {
    let mut edges: Vec<(BootTime, i32)> = Vec::new();
    for c in children {
        let s = c.seen.max(from);
        let e = c.gone.unwrap_or(to).min(to);
        if s < e {
            edges.push((s, 1));
            edges.push((e, -1));
        }
    }
    edges.sort_by_key(|&(t, d)| (t, d));
    let (mut n, mut last, mut total) = (0, from, Duration::ZERO);
    for (t, d) in edges {
        if n >= 2 {
            total += t.saturating_since(last);
        }
        n += d;
        last = t;
    }
    total
}

fn run_round(g: &mut Group, scenario: Scenario) -> Round {
    let mut r = Round::default();
    g.restart_exited();
    let Some(old) = g.stable_leader() else {
        r.note = "no leader before the fault".into();
        return r;
    };
    let old_pod = g.children[old].pod;
    let old_gen = g.children[old].gen;
    let t0 = BootTime::now();
    let end_by = t0.saturating_add(WATCH);
    match scenario {
        Scenario::Graceful | Scenario::IgnoresTerm => {
            if g.delete_pod(old_pod, end_by).is_none() {
                r.note = "pod outlived the grace period".into();
            }
        }
        Scenario::Crash => {
            let _ = kill(Pid::from_raw(g.children[old].pid), Signal::SIGKILL);
        }
        Scenario::Cut => g.pods[old_pod].proxy.blackhole(),
    }
    let heal = t0.saturating_add(CUT);
    let mut healed = scenario != Scenario::Cut;
    let mut settled_at: Option<BootTime> = None;
    while BootTime::now() < end_by {
        let now = BootTime::now();
        if !healed && now >= heal {
            g.pods[old_pod].proxy.pass();
            healed = true;
        }
        g.poll();
        if scenario != Scenario::Graceful && scenario != Scenario::IgnoresTerm {
            g.restart_exited();
        }
        let next = g.children.iter().skip(old + 1).any(|c| c.seen >= t0);
        let done = next && g.children[old].gone.is_some() && healed;
        match (done, settled_at) {
            (true, None) => settled_at = Some(now),
            (true, Some(at)) if now.saturating_since(at) >= Duration::from_secs(2) => break,
            (false, _) => settled_at = None,
            _ => {}
        }
        std::thread::sleep(POLL);
    }
    if !healed {
        g.pods[old_pod].proxy.pass();
    }
    let to = BootTime::now();
    if let Some(c) = g.children.iter().skip(old + 1).find(|c| c.seen >= t0) {
        r.next_start = Some(c.seen.saturating_since(t0));
        r.next_same_pod = c.pod == old_pod && c.gen == old_gen;
    }
    r.old_gone = g.children[old].gone.map(|x| x.saturating_since(t0));
    r.overlap = overlap(&g.children, t0, to);
    eprintln!(
        "{} / {:?}: next app {:?} (same pod {}), old app gone {:?}, two alive {:?} {}",
        g.kind.name(),
        scenario,
        r.next_start,
        r.next_same_pod,
        r.old_gone,
        r.overlap,
        r.note
    );
    r
}

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "benchmark: writes docs/results/supervisor-peers.md, run by scripts/bench.sh"]
fn supervisor_peers() {
    let rounds: usize = env_or("PME_BENCH_SUPERVISOR_ROUNDS", 5);
    let started = std::time::Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let kinds = [Kind::Ours, Kind::Await];
    let users: Vec<String> = kinds
        .iter()
        .flat_map(|k| (0..PODS).map(move |i| format!("sv-{}-{i}", k.slug())))
        .collect();
    let cluster = rt.block_on(AuditedCluster::start(&users));
    let mut results: Vec<(Kind, Scenario, Vec<Round>)> = Vec::new();
    let mut n = 0;
    for scenario in SCENARIOS {
        for kind in kinds {
            n += 1;
            let ns = format!("sv-{}-{n}", kind.slug());
            rt.block_on(async {
                let client = cluster.admin_client().await;
                create_namespace(&client, &ns).await;
                // Ours waits a lease duration before creating an absent Lease; start both from a
                // released one.
                Api::<Lease>::namespaced(client, &ns)
                    .create(
                        &PostParams::default(),
                        &Lease {
                            metadata: ObjectMeta {
                                name: Some("bench".into()),
                                ..Default::default()
                            },
                            spec: Some(LeaseSpec {
                                holder_identity: Some(String::new()),
                                lease_duration_seconds: Some(1),
                                ..Default::default()
                            }),
                        },
                    )
                    .await
                    .expect("create Lease");
            });
            let mut g = Group::new(kind, &cluster, &ns, scenario == Scenario::IgnoresTerm);
            for i in 0..PODS {
                g.start(i);
            }
            let rs = (0..rounds).map(|_| run_round(&mut g, scenario)).collect();
            results.push((kind, scenario, rs));
            drop(g);
        }
    }
    let md = render(&results, rounds, started.elapsed());
    println!("{md}");
    let out = std::env::var_os("PME_BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results"));
    std::fs::create_dir_all(&out).expect("docs dir");
    std::fs::write(out.join("supervisor-peers.md"), md).expect("write supervisor-peers.md");
    eprintln!("wrote {}", out.display());
}

fn list(rs: &[Round], f: impl Fn(&Round) -> String) -> String {
    rs.iter().map(f).collect::<Vec<_>>().join(", ")
}

fn render(results: &[(Kind, Scenario, Vec<Round>)], rounds: usize, elapsed: Duration) -> String {
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| "unknown".into());
    let (nproc, cpu, mem) = machine();
    let mut md = String::new();
    let _ = writeln!(md, "# The supervisor beside k8s-await-election\n");
    let _ = writeln!(
        md,
        "Generated by `PME_BENCH_SUITES=supervisors scripts/bench.sh` (part of \
         `scripts/bench.sh`) on {} in {:.1} minutes ({rounds} rounds per fault; \
         machine and versions at the end; do not edit, run it again). One kube-apiserver, two \
         pods per implementation, the same timings for both: lease duration 15 s, renew deadline \
         10 s, retry period 2 s (`k8s-await-election`'s defaults; kill grace 3 s for ours). \
         **A shared two-core machine on which other builds ran at the same time: read the \
         orders of magnitude.**\n",
        env("BENCH_DATE"),
        elapsed.as_secs_f64() / 60.0
    );
    let _ = writeln!(
        md,
        "Per round, from the fault: **next app** is when the next leader app started (in any \
         pod; \"same pod\" when the old pod's own restarted wrapper took it back), **old app \
         lived** is how long the old leader's app ran after the fault (\"not killed\" when it was \
         still running at the end of the watch, {} s), **two alive** is the time during which two \
         leader apps ran at once.\n",
        WATCH.as_secs()
    );
    for scenario in SCENARIOS {
        let _ = writeln!(md, "## {}\n", scenario.name());
        let _ = writeln!(
            md,
            "| | next app | old app lived | two alive | old app killed |\n|---|---|---|---|---|"
        );
        for (kind, s, rs) in results {
            if *s != scenario {
                continue;
            }
            let killed = rs.iter().filter(|r| r.old_gone.is_some()).count();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {killed} of {} |",
                kind.name(),
                list(rs, |r| match r.next_start {
                    Some(d) if r.next_same_pod => format!("{} (same pod)", fmt_d(d)),
                    Some(d) => fmt_d(d),
                    None => "none".into(),
                }),
                list(rs, |r| r.old_gone.map_or("not killed".into(), fmt_d)),
                list(rs, |r| fmt_d(r.overlap)),
                rs.len(),
            );
            for r in rs.iter().filter(|r| !r.note.is_empty()) {
                let _ = writeln!(md, "\n{}: {}\n", kind.name(), r.note);
            }
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md, "## Machine and versions\n");
    let _ = writeln!(md, "| | |\n|---|---|");
    let _ = writeln!(md, "| date | {} |", env("BENCH_DATE"));
    let _ = writeln!(md, "| CPUs (nproc) | {nproc} |");
    let _ = writeln!(md, "| CPU model | {cpu} |");
    let _ = writeln!(md, "| memory | {mem} |");
    let _ = writeln!(md, "| kube-apiserver | {} |", AuditedCluster::version());
    let _ = writeln!(
        md,
        "| passmower-elector | {} ({}) |",
        env!("CARGO_PKG_VERSION"),
        env("BENCH_GIT_REV")
    );
    let _ = writeln!(
        md,
        "| k8s-await-election | {} |",
        env("AWAIT_ELECTION_VERSION")
    );
    let _ = writeln!(md, "| go | {} |", env("GO_VERSION"));
    md.push_str(METHOD);
    md
}

const METHOD: &str = r#"
## How each was run

- **supervise + elect**: `elect` as the sidecar (its own process, `--lease-duration 15s
  --renew-deadline 10s --retry-period 2s --kill-grace 3s`, pushing to the supervisor over the
  loopback toggle) and `supervise --on-follower stop --kill-grace 3s` as PID 1 of the app
  container's PID namespace, running the app only while leader.
- **k8s-await-election** (LINBIT, built unmodified by `scripts/build-bench-peers.sh`):
  `K8S_AWAIT_ELECTION_ENABLED=1` with `_NAME`, `_LOCK_NAME`, `_LOCK_NAMESPACE`, `_IDENTITY`;
  no status endpoint or service endpoints; its default timings (15 s / 10 s / 2 s). It wraps
  client-go's `leaderelection` with `ReleaseOnCancel`, runs the app with `exec.CommandContext`
  once it leads (SIGKILL when the leadership context ends), and exits when the app exits. It
  installs no signal handler, so SIGTERM ends it without cancelling that context: the Lease is
  not released. It reads only the in-cluster configuration; the bench gives each wrapper a
  private mount namespace with the token and CA at the service-account path, and
  `KUBERNETES_SERVICE_HOST`/`_PORT` pointing at the pod's own fault proxy.
- Both wrappers are PID 1 of a PID namespace (`unshare --pid --fork`), as in a container, so
  what is left in it is killed when PID 1 exits. A pod deletion sends SIGTERM to each
  container's PID 1 (ours: the supervisor and the sidecar), SIGKILL after 30 s, and starts a
  pod with a new name; a wrapper that exits by itself is restarted at once under the same pod
  name (the kubelet restarts it after a back-off, so a real restart comes later).
- The app is `/bin/sh`: it appends its host PID to a file on start and idles; the bench reads
  that file and each recorded PID's `/proc` state every 2 ms (a zombie counts as gone).

## Where the differences come from (read from the source)

- **Pod deleted**: `k8s-await-election` has no SIGTERM handler, so PID 1 exits at once, the
  kernel kills the app with the namespace, and the Lease is left held: the next pod starts its
  app once the Lease has gone unrenewed for a lease duration. Ours: the sidecar demotes, the
  supervisor stops the app (SIGTERM, SIGKILL after the kill grace), and the sidecar releases the
  Lease once the supervisor acknowledges, so the next pod starts at once, or a kill grace later
  when the app ignores SIGTERM.
- **App crash**: `k8s-await-election` exits with its app, keeping the Lease; the container
  restarted under the same pod name is still the holder and starts the app at once, but in a
  cluster only after the kubelet's restart back-off (10 s, doubling up to 5 minutes), and a
  crash-looping app keeps the Lease for ever. Ours restarts the app inside the container after
  `--restart-backoff-initial` (200 ms), keeping the grant; a leader run shorter than
  `--restart-backoff-reset` (10 s) counts as a failed start, and after `--max-leader-failures`
  (3) in a row the sidecar hands the Lease over and sits out a lease duration. The bench
  crashes the app 3 s after it starts, so the third crash in a row in one pod's term is such a
  hand-over to the other pod.
- **Apiserver cut**: client-go stops leading after its renew deadline, but with
  `ReleaseOnCancel` it first calls `release()`, a read and an update over the same cut link
  bounded by another renew deadline, and only then cancels the context the app runs under: the
  app outlives the renew deadline by up to 10 s while the other pod, seeing the Lease expire,
  starts its own. Ours: the grant ends at the last successful
  renewal plus the renew deadline on the holder's own clock, whether or not the apiserver
  answers, and the supervisor stops the app then; the other pod takes over only after a lease
  duration without renewals.
"#;
