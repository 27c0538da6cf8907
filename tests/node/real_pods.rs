//! The real Passmower, retrofitted by `inject` as a helm post-renderer, on a real one-node
//! Kubernetes (kubelet + containerd): one replica reconciles, the others serve; faults never
//! make two pods write operator objects at once (from the apiserver's audit log, by source
//! address), an OIDCClient created during each fault is reconciled, HTTP keeps being served,
//! and the probes do what their names say. Timings are printed and written to a report.
//!
//! The tests of this file share one node and one install and run one at a time. Rounds per
//! fault: `PME_REAL_PODS_ROUNDS` (default 1; `scripts/real-pods.sh` runs 3).

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use pme_testkit::node::audit::{self, now_us};
use pme_testkit::node::faketime;
use pme_testkit::node::passmower::{self, ElectionMode, Install, Retrofit, APP_CONTAINER};
use pme_testkit::node::redis_monitor::{self, Monitored};
use pme_testkit::node::single_writer::{
    app_processes, assert_one_operator, assert_single_writer, leader_instance_mode,
};
use pme_testkit::node::{pods, report, Node};

/// The tests change the one install (faults, restarts): one at a time. (tokio's Mutex: the
/// guard is held across awaits, and a failed test does not poison it.)
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// The install every test of this binary uses (3 replicas), made by the first caller.
async fn install(node: &Node) -> Install {
    static INSTALL: OnceLock<Install> = OnceLock::new();
    if let Some(i) = INSTALL.get() {
        return i.clone();
    }
    let t0 = Instant::now();
    // The clock-skew fault needs libfaketime preloaded into every app (idle until the test
    // writes one pod's offset file); the install has it only when that fault is selected.
    let (env, stages) = if faults(ElectionMode::from_env()).contains(&Fault::ClockSkew) {
        (&faketime::ENV[..], &[faketime::STAGE][..])
    } else {
        (&[][..], &[][..])
    };
    let ns = node.new_namespace("passmower").await;
    let i =
        Install::install_with_stages(node, &ns, 3, 1, Retrofit::PostRenderer, env, stages).await;
    report(&format!(
        "install: election {} (Lease {}); node started in {:.1}s; helm install with inject to 3 Ready replicas and a leader in {:.1}s",
        i.election.name(),
        i.election.lease_name(),
        node.started_in.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    ));
    INSTALL.get_or_init(|| i).clone()
}

/// What [`OperatorSampler`] saw while a fault ran.
#[derive(Debug, Default)]
pub(crate) struct OperatorSamples {
    /// The longest stretch (ms) in which no pod ran Passmower's operators.
    pub(crate) longest_none_ms: f64,
    /// When that stretch began (the last sample with an operator) and ended (µs since the
    /// epoch; 0 when there was none).
    pub(crate) longest_none_us: (i64, i64),
    /// The time (ms) in which two or more pods ran Passmower's operators at once.
    pub(crate) two_ms: f64,
    /// Every (pod, PID) seen running Passmower's operators, in order of first sight.
    pub(crate) leaders: Vec<(String, i32)>,
    /// Resident memory of each pod (KiB, the sum over every process of the pod: app, elector,
    /// supervisor, sandbox), one value per pod about every half second.
    pub(crate) pod_rss_kib: Vec<u64>,
}

impl OperatorSamples {
    /// The median and the largest pod's resident memory over the samples, in MiB.
    pub(crate) fn pod_rss_mib(&self) -> Option<(f64, f64)> {
        let mut kib = self.pod_rss_kib.clone();
        if kib.is_empty() {
            return None;
        }
        kib.sort_unstable();
        let median = kib[kib.len() / 2] as f64 / 1024.0;
        let peak = kib[kib.len() - 1] as f64 / 1024.0;
        Some((median, peak))
    }
}

/// Whether process `pid` is stopped (SIGSTOP: state `T` in /proc/PID/stat): a frozen process
/// runs nothing until it is continued.
fn is_stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let (_, rest) = s.rsplit_once(')')?;
            rest.trim_start().chars().next()
        })
        .is_some_and(|c| c == 'T' || c == 't')
}

/// Passmower 2.4's own word on whether it runs its operators: the last of its log lines
/// "Acquired the operator lease" (it starts them) and "Lost the operator lease" (it stops
/// them) in the app container's current log (the highest-numbered file of the container in
/// the kubelet's pod log directory). Reads each file on from where it stopped.
#[derive(Default)]
struct LeaderLogs {
    /// Log file → (bytes read, leading after them, the PID in the pod that logged the last
    /// "Acquired" line).
    files: BTreeMap<std::path::PathBuf, (u64, bool, Option<i32>)>,
}

impl LeaderLogs {
    fn leading(&mut self, node: &Node, install: &Install, pod: &Pod) -> bool {
        self.leader(node, install, pod).0
    }

    /// The PID (in the pod's PID namespace, as the app's log gives it) of the process whose
    /// log last said it acquired the operator lease, when it has not said it lost it since. With
    /// the lease bridge the container outlives its Passmower process (the supervisor restarts
    /// a process it killed, in the same container, into the same log file), and a killed
    /// process logs no "Lost": only that process counts, not a later one of the same container.
    /// `Some(None)`: leading, but the line named no PID (then every process of the pod counts,
    /// as in the modes with one process per container: more operators, never fewer).
    fn leading_pid(&mut self, node: &Node, install: &Install, pod: &Pod) -> Option<Option<i32>> {
        match self.leader(node, install, pod) {
            (true, pid) => Some(pid),
            (false, _) => None,
        }
    }

    fn leader(&mut self, node: &Node, install: &Install, pod: &Pod) -> (bool, Option<i32>) {
        use std::io::{Read, Seek, SeekFrom};
        let (Some(name), Some(uid)) = (pod.metadata.name.as_deref(), pod.metadata.uid.as_deref())
        else {
            return (false, None);
        };
        let dir = node
            .layout
            .path("pod-logs")
            .join(format!("{}_{name}_{uid}", install.namespace))
            .join(APP_CONTAINER);
        let Some(file) = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let n: u32 = e.file_name().to_str()?.strip_suffix(".log")?.parse().ok()?;
                Some((n, e.path()))
            })
            .max_by_key(|(n, _)| *n)
            .map(|(_, p)| p)
        else {
            return (false, None);
        };
        let (offset, leading, pid) = self.files.entry(file.clone()).or_insert((0, false, None));
        if let Ok(mut f) = std::fs::File::open(&file) {
            let mut buf = Vec::new();
            if f.seek(SeekFrom::Start(*offset)).is_ok() && f.read_to_end(&mut buf).is_ok() {
                // Only whole lines: the rest is read next time.
                if let Some(end) = buf.iter().rposition(|b| *b == b'\n') {
                    for line in buf[..=end].split(|b| *b == b'\n') {
                        let line = String::from_utf8_lossy(line);
                        if line.contains("Acquired the operator lease") {
                            *leading = true;
                            *pid = logged_pid(&line);
                        } else if line.contains("Lost the operator lease") {
                            *leading = false;
                        }
                    }
                    *offset += end as u64 + 1;
                }
            }
        }
        (*leading, *pid)
    }
}

/// The `pid` field of one of the app's log lines (pino writes it into every line).
fn logged_pid(line: &str) -> Option<i32> {
    let rest = &line[line.find("\"pid\":")? + 6..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

#[test]
fn the_pid_of_a_log_line_is_pinos_field() {
    // As the kubelet writes the app's line into the container log (CRI format).
    let line = r#"2026-12-05T01:00:00.000000000Z stdout F {"level":30,"time":1,"pid":17,"hostname":"p-1","lease":"passmower-operators","msg":"Acquired the operator lease"}"#;
    assert_eq!(logged_pid(line), Some(17));
    assert_eq!(logged_pid(r#"stdout F {"level":30,"msg":"x"}"#), None);
    // Outside a PID namespace of its own, this process's innermost PID is its own.
    assert_eq!(
        pid_in_pod(std::process::id() as i32),
        Some(std::process::id() as i32)
    );
}

/// Process `pid`'s PID in its innermost PID namespace (the last of `NSpid` in
/// /proc/PID/status): what the app itself logs as its `pid`.
fn pid_in_pod(pid: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// The pod-freeze fault's thaw: the frozen pod and until when its processes are not counted as
/// running operators. A whole frozen pod is continued at once, its supervisor with its leader
/// instance; nothing can stop that instance before its supervisor runs again, which then kills
/// it at once (a leader past its grant's expiry + K is killed without grace). So it is given the
/// kill grace K from the SIGCONT, in every mode alike; past that it counts again. What the excuse
/// hides is reported, not assumed: how long the thawed pod was still seen running operators
/// after the SIGCONT, and every write it sent (see `thawed_pod_writes`).
#[derive(Clone, Default)]
pub(crate) struct ThawWindow(std::sync::Arc<Mutex<Option<Thaw>>>);

#[derive(Clone, Debug)]
struct Thaw {
    pod: String,
    until: Instant,
    /// The SIGCONT (µs since the epoch).
    continued_us: i64,
    /// The last sample after the SIGCONT that saw the pod run operators (µs since the epoch).
    last_operating_us: Option<i64>,
}

impl ThawWindow {
    fn open(&self, pod: &str, grace: Duration) {
        if let Ok(mut w) = self.0.lock() {
            *w = Some(Thaw {
                pod: pod.to_owned(),
                until: Instant::now() + grace,
                continued_us: now_us(),
                last_operating_us: None,
            });
        }
    }

    fn excuses(&self, pod: &str, now: Instant) -> bool {
        self.0
            .lock()
            .ok()
            .and_then(|w| w.clone())
            .is_some_and(|t| t.pod == pod && now < t.until)
    }

    /// Records that `pod` ran operators at `at_us`, if it is the thawed one.
    fn saw_operating(&self, pod: &str, at_us: i64) {
        if let Ok(mut w) = self.0.lock() {
            if let Some(t) = w
                .as_mut()
                .filter(|t| t.pod == pod && at_us >= t.continued_us)
            {
                t.last_operating_us = Some(at_us);
            }
        }
    }

    fn seen(&self) -> Option<Thaw> {
        self.0.lock().ok().and_then(|w| w.clone())
    }
}

/// Which election a pod of `install` runs, from its spec: a pod with our elector runs the
/// install's election of ours (`ours` when the install is on Passmower's own: a pod left from
/// before a switch), one without runs Passmower's own. While an install moves between the two
/// (`helm upgrade` adding or removing inject) old and new pods differ.
pub(crate) fn pod_election(pod: &Pod, install: ElectionMode) -> ElectionMode {
    let spec = pod.spec.as_ref();
    let has_elector = spec.is_some_and(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(s.containers.iter())
            .any(|c| c.name == passmower::ELECTOR_CONTAINER)
    });
    match (has_elector, install) {
        (true, ElectionMode::OursBridge) => ElectionMode::OursBridge,
        (true, _) => ElectionMode::Ours,
        (false, mode) if mode.ours_decides() => ElectionMode::Upstream,
        (false, mode) => mode,
    }
}

/// Samples every 100 ms which pods run Passmower's operators, from the processes, not from
/// the Lease: with our elector, the Passmower process with the real selector in its
/// environment (read from /proc); with Passmower's own election, a live Passmower process
/// whose log last said it acquired the operator lease; with the lease bridge, the live process
/// that logged that line itself. A stopped (frozen) process counts as
/// running nothing, and a continued one is left out while its [`ThawWindow`] is open.
pub(crate) struct OperatorSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<OperatorSamples>,
}

impl OperatorSampler {
    pub(crate) fn start(
        node: &'static Node,
        install: &Install,
        client: kube::Client,
        thaw: ThawWindow,
        redis_clients: RedisClients,
    ) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let install = install.clone();
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut seen = OperatorSamples::default();
            let mut logs = LeaderLogs::default();
            let mut pods: Vec<Pod> = Vec::new();
            let mut last_leader = Instant::now();
            let mut last_leader_us = now_us();
            let mut last_sample = Instant::now();
            let mut samples: u64 = 0;
            // Bounded: a fault and its settle take minutes at most.
            let deadline = Instant::now() + Duration::from_secs(1800);
            while !flag.load(Ordering::Relaxed) && Instant::now() < deadline {
                // The pod list from the API when it answers (a rollout replaces pods), else
                // the last one: the processes are read from /proc either way.
                let listed =
                    tokio::time::timeout(Duration::from_millis(500), install.pods(&client))
                        .await
                        .unwrap_or_default();
                if !listed.is_empty() {
                    pods = listed;
                }
                let mut operating_pods = 0;
                let sampled_at = Instant::now();
                let sampled_at_us = now_us();
                samples += 1;
                for p in &pods {
                    let pod_name = p.metadata.name.as_deref().unwrap_or("");
                    // Every Passmower process of the pod: with a separate leader instance the
                    // leader's pod runs two, and only the leader instance has the real selector.
                    let procs = app_processes(node, p);
                    // Memory per pod: every process in it, every fifth sample.
                    if samples.is_multiple_of(5) {
                        let kib = node.pod_rss_kib(p);
                        if kib > 0 {
                            seen.pod_rss_kib.push(kib);
                        }
                    }
                    // Which process holds which Redis connection, to name the writers MONITOR
                    // shows (connections live long: every fifth sample is enough).
                    if samples % 5 == 1 {
                        if let Some(ip) = pods::pod_ip(p) {
                            let mut seen_ports = Vec::new();
                            for (pid, _) in &procs {
                                for port in redis_monitor::redis_ports(*pid) {
                                    seen_ports
                                        .push(((ip.clone(), port), (pod_name.to_owned(), *pid)));
                                }
                            }
                            if let Ok(mut c) = redis_clients.lock() {
                                c.extend(seen_ports);
                            }
                        }
                    }
                    let operating: Vec<i32> = match pod_election(p, install.election) {
                        ElectionMode::Ours | ElectionMode::OursNoStandby => procs
                            .into_iter()
                            .filter(|(_, s)| s.as_deref() == Some(install.namespace.as_str()))
                            .map(|(pid, _)| pid)
                            .collect(),
                        ElectionMode::FenceOnly
                        | ElectionMode::Upstream
                        | ElectionMode::UpstreamSigterm => {
                            if logs.leading(node, &install, p) {
                                procs.into_iter().map(|(pid, _)| pid).collect()
                            } else {
                                Vec::new()
                            }
                        }
                        // One process per pod, its selector set inside it: the one whose
                        // log last said it acquired the operator lease, while it lives.
                        ElectionMode::OursBridge => match logs.leading_pid(node, &install, p) {
                            Some(leading) => procs
                                .into_iter()
                                .map(|(pid, _)| pid)
                                .filter(|pid| leading.is_none() || pid_in_pod(*pid) == leading)
                                .collect(),
                            None => Vec::new(),
                        },
                    };
                    let operating: Vec<i32> = operating
                        .into_iter()
                        .filter(|pid| !is_stopped(*pid))
                        .collect();
                    if !operating.is_empty() {
                        thaw.saw_operating(pod_name, sampled_at_us);
                    }
                    if thaw.excuses(pod_name, sampled_at) {
                        continue;
                    }
                    if !operating.is_empty() {
                        operating_pods += 1;
                    }
                    for pid in operating {
                        let who = (p.metadata.name.clone().unwrap_or_default(), pid);
                        if !seen.leaders.contains(&who) {
                            seen.leaders.push(who);
                        }
                    }
                }
                let now = Instant::now();
                let two = operating_pods >= 2;
                // Counted from the sample before: resolution one sampling period.
                if two {
                    seen.two_ms += (now - last_sample).as_secs_f64() * 1000.0;
                }
                last_sample = now;
                if operating_pods > 0 {
                    last_leader = now;
                    last_leader_us = sampled_at_us;
                } else {
                    let none_ms = last_leader.elapsed().as_secs_f64() * 1000.0;
                    if none_ms > seen.longest_none_ms {
                        seen.longest_none_ms = none_ms;
                        seen.longest_none_us = (last_leader_us, sampled_at_us);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            seen
        });
        OperatorSampler { stop, task }
    }

    pub(crate) async fn finish(self) -> OperatorSamples {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_reconciles_with_the_real_selector() {
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    let _serial = serial().await;
    let install = install(node).await;

    // The retrofit is there: the chart's Deployment, rewritten by inject.
    assert!(
        install.manifest.contains("passmower-elector") && install.manifest.contains("supervise"),
        "the post-renderer did not inject the elector:\n{}",
        install.manifest
    );

    assert_one_operator(node, &install, "first").await;
}

/// The faults, each injected into the pod that leads at the time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// `kubectl rollout restart`: every pod replaced, one at a time (the gap counts from the
    /// moment the leader's pod is marked for deletion).
    RolloutRestart,
    /// The leader's pod deleted (as `kubectl delete pod`, through the API): a graceful stop (app
    /// first, then the elector).
    DeleteLeader,
    /// SIGKILL to the elector container's process; the kubelet restarts it.
    ElectorCrash,
    /// SIGKILL to the app container's processes (supervise and Passmower).
    AppCrash,
    /// SIGSTOP to every process of the leader's pod for longer than the lease duration.
    PodFreeze,
    /// The apiserver stopped (SIGTERM) and started again.
    ApiserverRestart,
    /// `kubectl scale --replicas=1` with the leader among the removed pods (the leader and one
    /// follower get the lowest `pod-deletion-cost`), then back to the install's replicas once
    /// the OIDCClient created meanwhile is reconciled.
    ScaleDown,
    /// `kubectl delete pod <leader>`, then 3 s later a follower: that follower is in its
    /// `preStop` drain (its app still answers) when the leader hands over, ~5 s after its own
    /// deletion. A rollout does the same when it deletes the leader's pod while an older one
    /// drains.
    DrainingSuccessor,
    /// The leader's pod cut off from the apiserver for the lease duration + 10 s, every packet
    /// it sends there answered with a TCP reset (requests fail at once), then healed.
    Partition,
    /// The same cut, but what the pod sends is dropped: every request of the leader hangs (a
    /// renew that never fails, only times out), and is retransmitted once the cut heals.
    RenewHang,
    /// One follower's app container's wall clock put [`CLOCK_SKEW`] ahead (libfaketime, see
    /// `pme_testkit::node::faketime`) for the lease duration + 10 s, the others' and everything
    /// else's right; then back. An election that judges expiry by its own wall clock against
    /// the holder's `renewTime` takes the Lease from a live leader; ours never compares clocks.
    ClockSkew,
}

/// How far ahead the clock-skew fault puts one app's clock: more than the lease duration.
const CLOCK_SKEW: Duration = Duration::from_secs(60);

impl Fault {
    const ALL: [Fault; 11] = [
        Fault::RolloutRestart,
        Fault::ScaleDown,
        Fault::DrainingSuccessor,
        Fault::DeleteLeader,
        Fault::ElectorCrash,
        Fault::AppCrash,
        Fault::PodFreeze,
        Fault::ApiserverRestart,
        Fault::Partition,
        Fault::RenewHang,
        Fault::ClockSkew,
    ];

    fn name(self) -> &'static str {
        match self {
            Fault::RolloutRestart => "rollout-restart",
            Fault::DeleteLeader => "delete-leader",
            Fault::ElectorCrash => "elector-crash",
            Fault::AppCrash => "app-crash",
            Fault::PodFreeze => "pod-freeze",
            Fault::ApiserverRestart => "apiserver-restart",
            Fault::ScaleDown => "scale-down",
            Fault::DrainingSuccessor => "draining-successor",
            Fault::Partition => "partition",
            Fault::RenewHang => "renew-hang",
            Fault::ClockSkew => "clock-skew",
        }
    }
}

/// What one round of one fault measured.
#[derive(Clone, Debug)]
struct Round {
    /// Fault → first operator write of the OIDCClient created during the fault (`None`: not
    /// reconciled within 240 s).
    gap_ms: Option<f64>,
    /// Time (ms) with two or more pods running Passmower's operators at once (sampled).
    two_operators_ms: f64,
    /// Operator writes the apiserver admitted from a pod the Lease did not name then.
    non_holder_writes: usize,
    /// Lease write requests per minute by the install's ServiceAccount, fault to steady.
    lease_writes_per_min: f64,
    /// Whether another pod leads once the fault has settled.
    moved: bool,
    /// Requests that failed, to the ready pods' addresses and to the Service address.
    pod_failures: usize,
    service_failures: usize,
    /// Of `pod_failures`, those to pods that stay up: not being deleted at the time, and not
    /// the pod the fault itself hit (whose app was killed, frozen, or cut off from the API).
    stay_up_failures: usize,
    /// Pods present before and after the fault (and not hit by it) whose serving Passmower
    /// process was replaced: restarted to switch mode.
    serving_restarts: usize,
    /// Fault → steady again (all replicas Ready, a leader renewing), checked after a settle
    /// of a lease duration and two retry periods.
    recovery_s: f64,
    /// The longest stretch with no Passmower process in operator mode in any pod (sampled
    /// every 100 ms from /proc, from just before the fault to steady again).
    operator_gap_ms: f64,
    /// Passmower processes started in operator mode after the fault (any pod).
    leader_app_starts: usize,
    /// Times the Lease changed hands from the fault to steady again (`leaseTransitions`).
    handovers: i32,
}

/// The faults to inject: `PME_REAL_PODS_FAULTS` (comma-separated names), default all; with
/// Passmower's own election alone (no `ours` or `ours-bridge`) there is no elector to crash.
fn faults(election: ElectionMode) -> Vec<Fault> {
    let mut list = named_faults();
    if !election.ours_decides() {
        list.retain(|f| *f != Fault::ElectorCrash);
    }
    list
}

fn named_faults() -> Vec<Fault> {
    match std::env::var("PME_REAL_PODS_FAULTS") {
        Ok(list) if !list.trim().is_empty() => list
            .split(',')
            .map(|name| {
                Fault::ALL
                    .into_iter()
                    .find(|f| f.name() == name.trim())
                    .unwrap_or_else(|| panic!("PME_REAL_PODS_FAULTS: unknown fault {name:?}"))
            })
            .collect(),
        _ => Fault::ALL.to_vec(),
    }
}

fn rounds() -> usize {
    std::env::var("PME_REAL_PODS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1)
}

/// Keeps `pod_loop` aimed at the addresses of the Service's ready endpoints (what a Service
/// routes to), refreshed every 300 ms while the API answers.
fn follow_endpoints(
    client: kube::Client,
    namespace: String,
    pod_loop: std::sync::Arc<Mutex<Vec<String>>>,
) -> tokio::task::JoinHandle<()> {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    tokio::spawn(async move {
        let api = kube::Api::<EndpointSlice>::namespaced(client, &namespace);
        let lp = kube::api::ListParams::default()
            .labels(&format!("kubernetes.io/service-name={}", passmower::NAME));
        loop {
            if let Ok(list) = api.list(&lp).await {
                let mut addrs = Vec::new();
                for slice in list.items {
                    for ep in slice.endpoints {
                        let ready = ep.conditions.as_ref().and_then(|c| c.ready) == Some(true);
                        if ready {
                            addrs.extend(ep.addresses.iter().map(|a| format!("{a}:3000")));
                        }
                    }
                }
                if let Ok(mut t) = pod_loop.lock() {
                    *t = addrs;
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

/// When each pod IP's pod was deleted (µs since the epoch), as far as the API told: the
/// deletion timestamp minus the grace period, i.e. the delete request to the second, rounded
/// down, so a failure counts as one to a terminating pod from up to a second before.
type Deletions = std::sync::Arc<Mutex<BTreeMap<String, i64>>>;

/// Pod IP → pod name, of every pod of the install seen during the test (an IP names the pod in
/// the audit log and in Redis MONITOR; the pod may be gone by the time a round is read).
type PodNames = std::sync::Arc<Mutex<BTreeMap<String, String>>>;

/// Redis client address → (pod, PID), from the sampler.
pub(crate) type RedisClients = std::sync::Arc<Mutex<redis_monitor::Clients>>;

/// Keeps `deletions` and `names` up to date for the install's pods, every 300 ms while the API
/// answers.
fn follow_deletions(
    client: kube::Client,
    install: Install,
    deletions: Deletions,
    names: PodNames,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            for p in install.pods(&client).await {
                if let (Some(ip), Some(name)) = (pods::pod_ip(&p), p.metadata.name.clone()) {
                    if let Ok(mut n) = names.lock() {
                        n.insert(ip, name);
                    }
                }
                let (Some(ip), Some(ts)) = (pods::pod_ip(&p), p.metadata.deletion_timestamp) else {
                    continue;
                };
                let grace = p.metadata.deletion_grace_period_seconds.unwrap_or(0);
                let at = ts.0.as_microsecond() - grace * 1_000_000;
                if let Ok(mut d) = deletions.lock() {
                    d.entry(ip).or_insert(at);
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

/// Per pod, the PIDs of the Passmower processes that serve HTTP: with a leader instance, those
/// with the idle selector; in restart mode, the one process there is.
async fn serving_pids(
    node: &Node,
    install: &Install,
    client: &kube::Client,
) -> BTreeMap<String, Vec<i32>> {
    let real = Some(install.namespace.clone());
    let separate = leader_instance_mode(install);
    let mut out = BTreeMap::new();
    for p in install.pods(client).await {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let pids = app_processes(node, &p)
            .into_iter()
            .filter(|(_, s)| !separate || *s != real)
            .map(|(pid, _)| pid)
            .collect();
        out.insert(p.metadata.name.clone().unwrap_or_default(), pids);
    }
    out
}

/// Waits for the holder of the install's Lease (ours, or Passmower's own) to renew it and
/// returns how long ago that renew was seen (at most the 20 ms poll). The faults that end in a
/// takeover after the Lease expires (a frozen, a cut-off or a hung leader) start here: the time
/// from the fault to the takeover is then a lease duration plus what each election adds, the
/// same for every election, instead of a lease duration minus the age of the last renew at the
/// instant of the fault, which is anywhere in a retry period (2 s) and would decide a comparison
/// of one round by itself.
async fn right_after_a_renew(client: &kube::Client, install: &Install) -> Duration {
    let renew_time = || async { install.lease_spec(client).await?.renew_time.map(|t| t.0) };
    let first = renew_time().await;
    // A live holder renews every retry period; four of them and a second is ample.
    let limit = install.timings.retry_period * 4 + Duration::from_secs(1);
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let polled = Instant::now();
        let now = renew_time().await;
        if now.is_some() && now != first {
            return polled.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "Lease {} was not renewed within {limit:?} (renewTime {first:?}): no live holder to fault",
        install.election.lease_name()
    );
}

/// Injects `fault` into the current leader; returns (fault instant in µs, leader pod IP).
/// Creates OIDCClient `client_name` right after (once the API answers again, for the
/// apiserver restart).
async fn inject(
    node: &'static Node,
    install: &Install,
    fault: Fault,
    client_name: &str,
    thaw: &ThawWindow,
) -> (i64, String) {
    use nix::sys::signal::Signal;
    let client = node.admin_client().await;
    let leader = install
        .leader_pod(&client)
        .await
        .expect("a leader before the fault");
    let leader_name = leader.metadata.name.clone().unwrap_or_default();
    let leader_ip = pods::pod_ip(&leader).unwrap_or_default();
    let ns = install.namespace.clone();
    let t_fault;
    match fault {
        Fault::RolloutRestart => {
            let out = node
                .kubectl()
                .args([
                    "rollout",
                    "restart",
                    "deployment",
                    passmower::NAME,
                    "-n",
                    &ns,
                ])
                .output()
                .expect("run kubectl");
            assert!(out.status.success(), "kubectl rollout restart: {out:?}");
            let pods_api = kube::Api::<Pod>::namespaced(client.clone(), &ns);
            let deadline = Instant::now() + Duration::from_secs(300);
            loop {
                let p = pods_api.get_opt(&leader_name).await.ok().flatten();
                if p.is_none_or(|p| p.metadata.deletion_timestamp.is_some()) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the rollout never reached the leader's pod"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            t_fault = now_us();
        }
        Fault::ScaleDown => {
            // The ReplicaSet removes the pods of lowest deletion cost first: the leader, then
            // the newest follower; the oldest follower stays.
            let pods_api = kube::Api::<Pod>::namespaced(client.clone(), &ns);
            let followers: Vec<String> = install
                .pods(&client)
                .await
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .filter(|n| *n != leader_name)
                .collect();
            let doomed = followers.last().expect("a follower").clone();
            for (pod, cost) in [(&leader_name, "-1000"), (&doomed, "-500")] {
                let patch = serde_json::json!({"metadata": {"annotations": {
                    "controller.kubernetes.io/pod-deletion-cost": cost}}});
                pods_api
                    .patch(
                        pod,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(&patch),
                    )
                    .await
                    .expect("annotate the deletion cost");
            }
            t_fault = now_us();
            scale(node, install, 1);
            report(&format!(
                "scale-down: {leader_name} (leader) and {doomed} removed, {} stays",
                followers.first().map_or("-", String::as_str)
            ));
        }
        Fault::DrainingSuccessor => {
            let doomed = install
                .pods(&client)
                .await
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .rfind(|n| *n != leader_name)
                .expect("a follower");
            t_fault = now_us();
            for (pod, pause) in [(&leader_name, 3), (&doomed, 0)] {
                let out = node
                    .kubectl()
                    .args(["delete", "pod", pod, "-n", &ns, "--wait=false"])
                    .output()
                    .expect("run kubectl");
                assert!(out.status.success(), "kubectl delete pod: {out:?}");
                tokio::time::sleep(Duration::from_secs(pause)).await;
            }
            report(&format!(
                "draining-successor: {leader_name} (leader) deleted, {doomed} 3 s later"
            ));
        }
        Fault::DeleteLeader => {
            // Through the API, not a `kubectl` process: a process's start (a Go binary reading
            // the kubeconfig) would sit between the fault and the client's creation, in every
            // mode alike, and the gap would measure it (97-216 ms per round against 22-119 ms
            // for rollout-restart, whose client follows the deletion mark at once).
            let pods_api = kube::Api::<Pod>::namespaced(client.clone(), &ns);
            t_fault = now_us();
            pods_api
                .delete(&leader_name, &kube::api::DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("delete pod {leader_name}: {e}"));
        }
        Fault::ElectorCrash => {
            let restarts = pods::restart_count(&leader, passmower::ELECTOR_CONTAINER);
            t_fault = now_us();
            let n = node.signal_container(&leader, passmower::ELECTOR_CONTAINER, Signal::SIGKILL);
            assert!(n > 0, "no elector process in {leader_name}");
            report_elector_restart(
                client.clone(),
                ns.clone(),
                leader_name.clone(),
                restarts,
                t_fault,
            );
        }
        Fault::AppCrash => {
            t_fault = now_us();
            let n = node.signal_container(&leader, APP_CONTAINER, Signal::SIGKILL);
            assert!(n > 0, "no app process in {leader_name}");
        }
        Fault::PodFreeze => {
            let pids = node.pod_pids(&leader);
            assert!(!pids.is_empty(), "no processes in {leader_name}");
            let since_renew = right_after_a_renew(&client, install).await;
            t_fault = now_us();
            pods::signal_all(&pids, Signal::SIGSTOP);
            install.create_client(&client, client_name).await;
            tokio::time::sleep(install.timings.lease_duration + Duration::from_secs(3)).await;
            thaw.open(&leader_name, install.timings.kill_grace);
            pods::signal_all(&pids, Signal::SIGCONT);
            report(&format!(
                "pod-freeze: {leader_name} (leader) frozen {} ms after its renew was seen",
                since_renew.as_millis()
            ));
            return (t_fault, leader_ip);
        }
        Fault::Partition | Fault::RenewHang => {
            let how = if fault == Fault::Partition {
                pods::Cut::Reset
            } else {
                pods::Cut::Drop
            };
            let since_renew = right_after_a_renew(&client, install).await;
            t_fault = now_us();
            let cut_at = Instant::now();
            // Healed below, or on drop if the test panics before.
            let cut = node
                .cut_off_from_apiserver(&leader, how)
                .unwrap_or_else(|e| panic!("cut {leader_name} off from the apiserver: {e}"));
            // The test's own client reaches the apiserver from the host, not from the pod.
            install.create_client(&client, client_name).await;
            let hold = install.timings.lease_duration + Duration::from_secs(10);
            tokio::time::sleep(hold.saturating_sub(cut_at.elapsed())).await;
            let addresses = cut.addresses();
            let matched = cut
                .heal()
                .unwrap_or_else(|e| panic!("heal the cut of {leader_name}: {e}"));
            report(&format!(
                "{}: {leader_name} (leader) cut off from the apiserver ({addresses}, packets {}) {} ms after its renew was seen, for {:.1} s; packets matched: {}",
                fault.name(),
                how.name(),
                since_renew.as_millis(),
                cut_at.elapsed().as_secs_f64(),
                matched
                    .iter()
                    .map(|(addr, n)| format!("{addr} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            // A cut that matched nothing cut nothing: the pods reach the apiserver elsewhere.
            assert!(
                matched.iter().any(|(_, n)| *n > 0),
                "{}: no packet of {leader_name} matched the cut ({addresses})",
                fault.name()
            );
            return (t_fault, leader_ip);
        }
        Fault::ClockSkew => {
            // The newest follower: it stays up, so what it does with its wrong clock shows.
            let skewed = install
                .pods(&client)
                .await
                .into_iter()
                .rfind(|p| p.metadata.name.as_deref() != Some(leader_name.as_str()))
                .expect("a follower");
            let hold = install.timings.lease_duration + Duration::from_secs(10);
            let t_fault =
                faketime::skew_one_app(node, install, &skewed, CLOCK_SKEW, hold, client_name).await;
            return (t_fault, leader_ip);
        }
        Fault::ApiserverRestart => {
            t_fault = now_us();
            tokio::task::spawn_blocking(move || {
                node.stop(
                    pme_testkit::node::config::Component::KubeApiserver,
                    Signal::SIGTERM,
                    Duration::from_secs(15),
                );
                std::thread::sleep(Duration::from_secs(2));
                node.restart(pme_testkit::node::config::Component::KubeApiserver)
                    .expect("restart the apiserver");
            })
            .await
            .expect("restart task");
        }
    }
    let client = node.admin_client().await;
    install.create_client(&client, client_name).await;
    (t_fault, leader_ip)
}

/// `kubectl scale deployment --replicas=N` on the install.
fn scale(node: &Node, install: &Install, replicas: i32) {
    let out = node
        .kubectl()
        .args([
            "scale",
            "deployment",
            passmower::NAME,
            "-n",
            &install.namespace,
            &format!("--replicas={replicas}"),
        ])
        .output()
        .expect("run kubectl");
    assert!(out.status.success(), "kubectl scale: {out:?}");
}

/// `leaseTransitions` of the Lease the install's election keeps (ours, or Passmower's own;
/// 0 when unreadable).
async fn lease_transitions(install: &Install, client: &kube::Client) -> i32 {
    install
        .lease_spec(client)
        .await
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
}

/// Reports, in the background, when the kubelet had the killed elector container running
/// again: whether the restarted elector can adopt depends on it coming back within the renew
/// deadline (the kubelet restarts a container at once the first time, then backs off from 10s).
fn report_elector_restart(
    client: kube::Client,
    ns: String,
    pod: String,
    restarts_before: Option<i32>,
    t_fault: i64,
) {
    tokio::spawn(async move {
        let api = kube::Api::<Pod>::namespaced(client, &ns);
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if let Ok(Some(p)) = api.get_opt(&pod).await {
                let restarts = pods::restart_count(&p, passmower::ELECTOR_CONTAINER);
                let running = p
                    .status
                    .as_ref()
                    .and_then(|s| s.init_container_statuses.as_ref())
                    .into_iter()
                    .flatten()
                    .chain(
                        p.status
                            .as_ref()
                            .and_then(|s| s.container_statuses.as_ref())
                            .into_iter()
                            .flatten(),
                    )
                    .find(|c| c.name == passmower::ELECTOR_CONTAINER)
                    .and_then(|c| c.state.as_ref()?.running.as_ref()?.started_at.clone());
                if let (Some(after), Some(started)) = (restarts, running) {
                    if restarts_before.is_some_and(|b| after > b) {
                        let started_us = started.0.as_microsecond();
                        report(&format!(
                            "elector of {pod} killed; restart #{after} running {:.1} s after the kill",
                            (started_us - t_fault) as f64 / 1e6
                        ));
                        return;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        report(&format!(
            "elector of {pod}: not seen running again within 120 s"
        ));
    });
}

fn summary(values: &mut [f64]) -> String {
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    if n == 0 {
        return "-".into();
    }
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    format!("{:.0}/{:.0}/{:.0}", values[0], median, values[n - 1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_keep_one_writer_and_reconcile() {
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    let _serial = serial().await;
    let install = install(node).await;
    let client = node.admin_client().await;
    let rounds = rounds();

    // HTTP through every fault: the ready endpoints' addresses, and the Service address
    // (kube-proxy's choice among them).
    let service: k8s_openapi::api::core::v1::Service =
        kube::Api::namespaced(client.clone(), &install.namespace)
            .get(passmower::NAME)
            .await
            .expect("the Passmower Service");
    let cluster_ip = service.spec.and_then(|s| s.cluster_ip).expect("ClusterIP");
    let budget = Duration::from_secs(3600);
    let path = "/.well-known/openid-configuration";
    let pod_loop = pme_testkit::node::http::HttpLoop::start(
        node,
        path,
        Duration::from_millis(200),
        Duration::from_secs(1),
        budget,
    );
    let service_loop = pme_testkit::node::http::HttpLoop::start(
        node,
        path,
        Duration::from_millis(200),
        Duration::from_secs(1),
        budget,
    );
    service_loop.set_targets(vec![format!("{cluster_ip}:80")]);
    let follower = follow_endpoints(
        client.clone(),
        install.namespace.clone(),
        pod_loop.targets.clone(),
    );
    let deletions: Deletions = Default::default();
    let pod_names: PodNames = Default::default();
    let deletion_follower = follow_deletions(
        client.clone(),
        install.clone(),
        deletions.clone(),
        pod_names.clone(),
    );
    // Every Redis command of the test, for the operator keys' writers.
    let monitor = redis_monitor::Monitor::start(node, &node.layout.path("redis-monitor.log"));
    let redis_clients: RedisClients = Default::default();

    let mut results: BTreeMap<Fault, Vec<Round>> = BTreeMap::new();
    for round in 1..=rounds {
        for fault in faults(install.election) {
            install.wait_steady(node, Duration::from_secs(300)).await;
            let name = format!("{}-{round}", fault.name());
            let serving_before = serving_pids(node, &install, &node.admin_client().await).await;
            let leader_before = install
                .leader_pod(&node.admin_client().await)
                .await
                .and_then(|p| p.metadata.name);
            let thaw = ThawWindow::default();
            let sampler = OperatorSampler::start(
                node,
                &install,
                client.clone(),
                thaw.clone(),
                redis_clients.clone(),
            );
            let transitions_before = lease_transitions(&install, &client).await;
            let t_begin = now_us();
            let (t_fault, old_ip) = inject(node, &install, fault, &name, &thaw).await;
            let client = node.admin_client().await;
            let reconciled = pme_testkit::wait_until_async(
                Duration::from_secs(240),
                Duration::from_millis(100),
                || install.client_reconciled(&client, &name),
            )
            .await;
            // Ours must reconcile; Passmower's own election is measured, not asserted.
            assert!(
                reconciled || !install.election.ours_decides(),
                "{name}: the OIDCClient created during the fault was not reconciled in 240s\n{}",
                node.logs_tail(10)
            );
            if fault == Fault::ScaleDown {
                // Wait for the removed pods to be gone before counting the handovers, then
                // scale back up (new pods start as followers: no handover).
                let gone = pme_testkit::wait_until_async(
                    Duration::from_secs(120),
                    Duration::from_millis(300),
                    || async { install.pods(&client).await.len() == 1 },
                )
                .await;
                assert!(gone, "{name}: the removed pods did not go away");
                scale(node, &install, install.replicas);
            }
            // Settle for a lease duration and two renewals: a takeover that a fault causes
            // (an elector that does not come back in time) has happened by then, so the next
            // fault starts from a real steady state and hits the real leader.
            tokio::time::sleep(install.timings.lease_duration + 2 * install.timings.retry_period)
                .await;
            install.wait_steady(node, Duration::from_secs(300)).await;
            let t_steady = now_us();
            let leader_after = install
                .leader_pod(&node.admin_client().await)
                .await
                .and_then(|p| pods::pod_ip(&p))
                .unwrap_or_default();
            // Late audit events of the reconcile (blocking mode: written before the answer).
            let writes = audit::read(&node.audit_log());
            let secret = passmower::secret_name(&name);
            let first = writes
                .iter()
                .filter(|w| w.user == install.user() && w.is_operator_write() && w.succeeded())
                .find(|w| {
                    (w.resource == "oidcclients" && w.name == name)
                        || (w.resource == "secrets" && w.name == secret)
                });
            assert!(
                first.is_some() || !reconciled,
                "{name}: reconciled, but no operator write in the audit log"
            );
            let non_holder = audit::non_holder_operator_writes(
                &writes,
                &install.namespace,
                install.election.lease_name(),
                &install.user(),
                t_begin,
                t_steady,
            );
            let lease_writes = audit::lease_writes_between(
                &writes,
                &install.namespace,
                &install.user(),
                t_fault,
                t_steady,
            );
            let p = pod_loop.snapshot();
            let s = service_loop.snapshot();
            // The pod the fault hit directly: its own failures are the fault, not a handover
            // (a cut-off leader's app has to demote without the API).
            let hit = matches!(
                fault,
                Fault::AppCrash | Fault::PodFreeze | Fault::Partition | Fault::RenewHang
            );
            let deleted = deletions.lock().map(|d| d.clone()).unwrap_or_default();
            let stay_up_failures = p
                .failures
                .iter()
                .filter(|(t, _, _)| (t_begin..=t_steady).contains(t))
                .filter(|(t, addr, _)| {
                    let ip = addr.rsplit_once(':').map_or(addr.as_str(), |(ip, _)| ip);
                    let terminating = deleted.get(ip).is_some_and(|at| at <= t);
                    let hit_pod = hit && ip == old_ip;
                    !(terminating || hit_pod)
                })
                .count();
            let serving_after = serving_pids(node, &install, &node.admin_client().await).await;
            let serving_restarts = serving_before
                .iter()
                .filter(|(pod, _)| !(hit && leader_before.as_ref() == Some(*pod)))
                .filter_map(|(pod, before)| Some((before, serving_after.get(pod)?)))
                .filter(|(before, after)| before.iter().any(|pid| !after.contains(pid)))
                .count();
            let operator = sampler.finish().await;
            let who = who_wrote(
                &writes,
                &monitor.read(),
                &install,
                &name,
                &first,
                &old_ip,
                (t_begin, t_fault, t_steady),
                pod_names.lock().map(|n| n.clone()).unwrap_or_default(),
                redis_clients.lock().map(|c| c.clone()).unwrap_or_default(),
                (fault == Fault::PodFreeze).then(|| thaw.seen()).flatten(),
            );
            let handovers =
                lease_transitions(&install, &node.admin_client().await).await - transitions_before;
            let r = Round {
                handovers,
                operator_gap_ms: operator.longest_none_ms,
                // The first one seen ran before the fault.
                leader_app_starts: operator.leaders.len().saturating_sub(1),
                gap_ms: first.map(|w| (w.received_us - t_fault) as f64 / 1000.0),
                two_operators_ms: operator.two_ms,
                non_holder_writes: non_holder.len(),
                lease_writes_per_min: lease_writes as f64 * 60e6
                    / (t_steady - t_fault).max(1) as f64,
                moved: leader_after != old_ip,
                // From the start of the injection (a rollout replaces other pods before the
                // leader's) to steady again.
                pod_failures: p.failed_between(t_begin, t_steady),
                service_failures: s.failed_between(t_begin, t_steady),
                stay_up_failures,
                serving_restarts,
                recovery_s: (t_steady - t_fault) as f64 / 1e6,
            };
            // One machine-readable line per round, for scripts/side-by-side.sh.
            let ms_after_fault = |us: i64| format!("{:.0}", (us - t_fault) as f64 / 1000.0);
            let (none_from, none_to) = operator.longest_none_us;
            report(&format!(
                "side-by-side mode={} fault={} round={round} gap_ms={} two_operators_ms={:.0} non_holder_writes={} failed_stay_up={} failed_pods={} failed_service={} lease_writes_per_min={:.1} no_operator_ms={:.0} leader_moved={} {} {}",
                install.election.name(),
                fault.name(),
                r.gap_ms.map_or("none".into(), |g| format!("{g:.0}")),
                r.two_operators_ms,
                r.non_holder_writes,
                r.stay_up_failures,
                r.pod_failures,
                r.service_failures,
                r.lease_writes_per_min,
                r.operator_gap_ms,
                r.moved,
                operator.pod_rss_mib().map_or("pod_rss_mib=none pod_rss_peak_mib=none".into(), |(median, peak)| {
                    format!("pod_rss_mib={median:.0} pod_rss_peak_mib={peak:.0}")
                }),
                [
                    format!("first_writer={}", who.first_writer.as_deref().unwrap_or("none")),
                    format!("first_writer_held={}", who.first_held.map_or("none".into(), |b| b.to_string())),
                    format!("first_writer_old_leader={}", who.first_old.map_or("none".into(), |b| b.to_string())),
                    format!("handover_ms={}", who.handover_us.map_or("none".into(), ms_after_fault)),
                    format!("handover_writer={}", who.handover_writer.as_deref().unwrap_or("none")),
                    format!(
                        "no_operator_from_ms={} no_operator_to_ms={}",
                        if none_from == 0 { "none".into() } else { ms_after_fault(none_from) },
                        if none_to == 0 { "none".into() } else { ms_after_fault(none_to) },
                    ),
                    format!("non_holder_redis={}", who.non_holder_redis.len()),
                    format!("after_release={}", who.after_release.len()),
                    format!(
                        "after_release_max_ms={}",
                        who.after_release_max_ms.map_or("none".into(), |m| format!("{m:.0}"))
                    ),
                    format!(
                        "thaw_operating_ms={}",
                        who.thaw.as_ref().map_or("-".into(), |t| t.operating_ms.map_or("none".into(), |m| format!("{m:.0}")))
                    ),
                    format!(
                        "thaw_writes_admitted={}",
                        who.thaw.as_ref().map_or("-".into(), |t| t.admitted.len().to_string())
                    ),
                ]
                .join(" "),
            ));
            who.report(&name);
            if !non_holder.is_empty() {
                report(&format!(
                    "{name}: admitted operator writes from a non-holder: {:?}",
                    non_holder
                        .iter()
                        .map(|w| format!(
                            "{} {}/{} from {} at +{} ms",
                            w.verb,
                            w.resource,
                            w.name,
                            w.source_ip,
                            (w.received_us - t_fault) / 1000
                        ))
                        .collect::<Vec<_>>()
                ));
            }
            report(&format!(
                "round {round} {:<18} {} handover(s), gap {:>7.0} ms ({}), recovered in {:>5.1} s, failed requests: pods {} (on pods that stay up {}) service {}; serving Passmower restarted on {} pod(s) that stayed up; no app in operator mode for {:.0} ms, leader app starts {} {:?}",
                fault.name(),
                r.handovers,
                r.gap_ms.unwrap_or(f64::NAN),
                if r.moved { "leader moved" } else { "same leader" },
                r.recovery_s,
                r.pod_failures,
                r.stay_up_failures,
                r.service_failures,
                r.serving_restarts,
                r.operator_gap_ms,
                r.leader_app_starts,
                operator.leaders,
            ));
            // A wrong wall clock in one app reaches nothing of ours: no second writer at all.
            assert!(
                fault != Fault::ClockSkew
                    || !install.election.ours_decides()
                    || (r.two_operators_ms == 0.0 && non_holder.is_empty()),
                "{name}: a skewed app clock made a second writer ({:.0} ms, {} admitted writes)",
                r.two_operators_ms,
                non_holder.len()
            );
            let r_two_operators_ms = r.two_operators_ms;
            results.entry(fault).or_default().push(r);
            // Our election's guarantees are asserted; Passmower's own is measured.
            if install.election.ours_decides() {
                // A pod that lost the Lease without seeing it (frozen, or cut off and healed with
                // its writes still in flight) must not have got an operator write through.
                let lost = match fault {
                    Fault::PodFreeze => Some("frozen"),
                    Fault::Partition | Fault::RenewHang => Some("cut-off"),
                    _ => None,
                };
                if let Some(what) = lost {
                    lost_pod_was_fenced(&writes, &install, &old_ip, t_fault, t_steady, &name, what);
                }
                // Fail early, naming the fault, if two pods ever wrote at once.
                assert_single_writer(node, &install);
                // Nor may a thawed pod get a write through, to the apiserver or to Redis (which
                // has no fence): its kill grace excuses its processes from the sampler, not
                // what they send.
                if let Some(t) = &who.thaw {
                    assert!(
                        t.admitted.is_empty(),
                        "{name}: the thawed pod's writes after the SIGCONT were admitted: {:?}",
                        t.admitted
                    );
                }
                // Redis has no fence either: no operator-key write from a non-holder.
                assert!(
                    who.non_holder_redis.is_empty(),
                    "{name}: Redis took operator-key writes from a pod the Lease did not name: {:?}",
                    who.non_holder_redis
                );
                // Nor may two pods' processes ever run the operators at once (a frozen one runs
                // nothing; a thawed one has its kill grace, see ThawWindow), which the audit log
                // alone would not show while neither writes.
                assert!(
                    r_two_operators_ms == 0.0,
                    "{name}: two pods ran Passmower's operators at once for {r_two_operators_ms:.0} ms: {:?}",
                    operator.leaders
                );
            }
        }
    }
    follower.abort();
    deletion_follower.abort();
    let pods_stats = pod_loop.finish();
    let service_stats = service_loop.finish();

    report(&format!(
        "faults over {rounds} round(s); gap = fault → first reconcile of an OIDCClient created during it (ms, min/median/max)"
    ));
    report(&format!(
        "{:<18} {:>10} {:>20} {:>14} {:>28} {:>18} {:>24} {:>28} {:>12}",
        "fault",
        "handovers",
        "gap min/med/max ms",
        "leader moved",
        "failed HTTP pods(up)/svc",
        "serving restarts",
        "recovery min/med/max s",
        "no-operator min/med/max ms",
        "app starts"
    ));
    for (fault, rs) in &results {
        let mut gaps: Vec<f64> = rs.iter().filter_map(|r| r.gap_ms).collect();
        let mut rec: Vec<f64> = rs.iter().map(|r| r.recovery_s).collect();
        let mut none: Vec<f64> = rs.iter().map(|r| r.operator_gap_ms).collect();
        report(&format!(
            "{:<18} {:>10} {:>20} {:>14} {:>28} {:>18} {:>24} {:>28} {:>12}",
            fault.name(),
            rs.iter()
                .map(|r| r.handovers.to_string())
                .collect::<Vec<_>>()
                .join(","),
            summary(&mut gaps),
            format!("{}/{}", rs.iter().filter(|r| r.moved).count(), rs.len()),
            format!(
                "{}({})/{}",
                rs.iter().map(|r| r.pod_failures).sum::<usize>(),
                rs.iter().map(|r| r.stay_up_failures).sum::<usize>(),
                rs.iter().map(|r| r.service_failures).sum::<usize>()
            ),
            rs.iter().map(|r| r.serving_restarts).sum::<usize>(),
            summary(&mut rec).replace(".0", ""),
            summary(&mut none),
            rs.iter().map(|r| r.leader_app_starts).sum::<usize>(),
        ));
    }
    report(&format!(
        "HTTP requests in all: {} to pods ({} failed), {} to the Service ({} failed)",
        pods_stats.sent, pods_stats.failed, service_stats.sent, service_stats.failed
    ));
    for (what, stats) in [("pods", &pods_stats), ("Service", &service_stats)] {
        report(&format!(
            "HTTP failures to the {what} by kind: {:?}",
            stats.kinds()
        ));
    }
    if install.election.ours_decides() {
        let tenures = assert_single_writer(node, &install);
        report(&format!(
            "single writer: {} leadership tenures, none overlapping; every operator write inside its pod's tenure",
            tenures.len()
        ));
    }
}

/// Who wrote around one fault ([`who_wrote`]): the first writer of the round's OIDCClient, the
/// handover, and the writes the table's counts would otherwise hide.
struct WhoWrote {
    /// The pod (process, where Redis named one) that first wrote the round's OIDCClient or its
    /// Secret; whether the Lease named it at that instant; whether it was the leader the fault
    /// hit.
    first_writer: Option<String>,
    first_held: Option<bool>,
    first_old: Option<bool>,
    /// The new holder's first admitted operator write (µs since the epoch), and its pod.
    handover_us: Option<i64>,
    handover_writer: Option<String>,
    /// Redis's operator-key writes from a pod the Lease did not name then, described.
    non_holder_redis: Vec<String>,
    /// Admitted operator writes (apiserver and Redis) a pod sent after releasing the Lease.
    after_release: Vec<String>,
    after_release_max_ms: Option<f64>,
    /// The pod-freeze fault's thawed pod.
    thaw: Option<ThawSeen>,
    /// The round's OIDCClient's creation (ms after the fault), and the releases of the Lease
    /// in the round (pod, ms after the fault).
    client_created_ms: Option<i64>,
    releases: Vec<String>,
}

/// What the thaw's excuse hides: how long after the SIGCONT the thawed pod was still seen
/// running operators, and what it sent from the SIGCONT on (until it leads again).
struct ThawSeen {
    pod: String,
    operating_ms: Option<f64>,
    admitted: Vec<String>,
    refused: Vec<String>,
}

impl WhoWrote {
    fn report(&self, name: &str) {
        report(&format!(
            "{name}: client created at {} ms; Lease released by {}; first writer {} ({}, {}); new holder's first operator write: {}",
            self.client_created_ms
                .map_or("?".into(), |c| format!("{c:+}")),
            if self.releases.is_empty() {
                "nobody".into()
            } else {
                self.releases.join(", ")
            },
            self.first_writer.as_deref().unwrap_or("none"),
            match self.first_held {
                Some(true) => "holding the Lease",
                Some(false) => "NOT holding the Lease",
                None => "-",
            },
            match self.first_old {
                Some(true) => "the leader the fault hit",
                Some(false) => "another pod",
                None => "-",
            },
            self.handover_writer.as_deref().unwrap_or("none"),
        ));
        if !self.non_holder_redis.is_empty() {
            report(&format!(
                "{name}: Redis operator-key writes from a non-holder: {}",
                self.non_holder_redis.join(", ")
            ));
        }
        if !self.after_release.is_empty() {
            report(&format!(
                "{name}: admitted operator writes after the writer's own release of the Lease: {}",
                self.after_release.join(", ")
            ));
        }
        if let Some(t) = &self.thaw {
            report(&format!(
                "{name}: thawed {}: seen running operators {} after the SIGCONT; its writes from then: {} admitted{}, {} refused{}",
                t.pod,
                t.operating_ms
                    .map_or("never".into(), |m| format!("until {m:.0} ms")),
                t.admitted.len(),
                if t.admitted.is_empty() { String::new() } else { format!(" ({})", t.admitted.join(", ")) },
                t.refused.len(),
                if t.refused.is_empty() { String::new() } else { format!(" ({})", t.refused.join(", ")) },
            ));
        }
    }
}

/// The round's writers from the audit log (`writes`) and Redis MONITOR (`redis`), each against
/// the Lease's holder at its instant. `client`: the round's OIDCClient. `times`: (round begin, fault, steady again), µs since the
/// epoch; `names`: pod IP → pod; `clients`: Redis client address → (pod, PID).
#[allow(clippy::too_many_arguments)]
fn who_wrote(
    writes: &[audit::Write],
    redis: &[Monitored],
    install: &Install,
    client: &str,
    first: &Option<&audit::Write>,
    old_ip: &str,
    (t_begin, t_fault, t_steady): (i64, i64, i64),
    names: BTreeMap<String, String>,
    clients: redis_monitor::Clients,
    thaw: Option<Thaw>,
) -> WhoWrote {
    use pme_testkit::node::writers::{self, OpWrite, Store};
    let holders =
        audit::Holders::from_writes(writes, &install.namespace, install.election.lease_name());
    let ops = writers::operator_writes(writes, redis, &install.user(), t_begin, t_steady);
    let pod = |ip: &str| names.get(ip).cloned().unwrap_or_else(|| ip.to_owned());
    let writer = |w: &OpWrite| match w.port.and_then(|port| clients.get(&(w.ip.clone(), port))) {
        Some((p, pid)) => format!("{p}/pid{pid}"),
        None => pod(&w.ip),
    };
    let describe = |w: &OpWrite, at: i64, since: &str| {
        format!(
            "{} {}{} from {} at +{} ms {since}",
            match w.store {
                Store::Api => "api",
                Store::Redis => "redis",
            },
            w.what,
            w.code
                .filter(|_| !w.admitted)
                .map_or(String::new(), |c| format!(" (answered {c})")),
            writer(w),
            (w.t_us - at) / 1000
        )
    };
    // The round's own client in Redis too: whichever store heard of it first.
    // Passmower's client ID: `<namespace>.<name>`.
    let client_key = format!("oidc:Client:{}.{client}", install.namespace);
    let first_redis = redis
        .iter()
        .find(|m| m.is_operator_write() && m.t_us >= t_fault && m.key() == client_key);
    let (first_ip, first_at, first_name) = match (first, first_redis) {
        (Some(w), Some(m)) if m.t_us < w.received_us => (
            m.ip.clone(),
            m.t_us,
            clients
                .get(&(m.ip.clone(), m.port))
                .map(|(p, pid)| format!("{p}/pid{pid}")),
        ),
        (Some(w), _) => (w.source_ip.clone(), w.received_us, None),
        (None, _) => (String::new(), 0, None),
    };
    let first_seen = first.is_some();
    let handover = writers::handover(&ops, &holders, old_ip, t_fault);
    let after: Vec<(&OpWrite, i64)> = writers::after_release(&ops, &holders, t_begin, t_steady);
    let thaw = thaw.map(|t| {
        let sent = writers::from_pod(&ops, &holders, old_ip, t.continued_us, t_steady);
        let list = |admitted: bool| {
            sent.iter()
                .filter(|w| w.admitted == admitted)
                .map(|w| describe(w, t.continued_us, "after the SIGCONT"))
                .collect::<Vec<_>>()
        };
        ThawSeen {
            pod: t.pod.clone(),
            operating_ms: t
                .last_operating_us
                .map(|l| (l - t.continued_us) as f64 / 1000.0),
            admitted: list(true),
            refused: list(false),
        }
    });
    // The timeline the first writer depends on: when the round's client was created and when
    // a holder released the Lease, relative to the fault.
    let created = writes
        .iter()
        .find(|w| {
            w.verb == "create"
                && w.resource == "oidcclients"
                && w.name == client
                && w.succeeded()
                && w.user != install.user()
        })
        .map(|w| (w.received_us - t_fault) / 1000);
    let releases = holders
        .releases(t_begin, t_steady)
        .into_iter()
        .map(|(t, ip)| format!("{} at {:+} ms", pod(ip), (t - t_fault) / 1000))
        .collect();
    WhoWrote {
        client_created_ms: created,
        releases,
        first_writer: first_seen.then(|| first_name.unwrap_or_else(|| pod(&first_ip))),
        first_held: first_seen.then(|| holders.at(first_at) == Some(first_ip.as_str())),
        first_old: first_seen.then(|| first_ip == old_ip),
        handover_us: handover.map(|w| w.t_us),
        handover_writer: handover.map(|w| format!("{}:{}", writer(w), w.what.replace(' ', "_"))),
        non_holder_redis: writers::non_holder(&ops, &holders)
            .into_iter()
            .filter(|w| w.store == Store::Redis)
            .map(|w| describe(w, t_fault, "after the fault"))
            .collect(),
        after_release_max_ms: after
            .iter()
            .map(|(_, d)| *d as f64 / 1000.0)
            .reduce(f64::max),
        after_release: after
            .iter()
            .map(|(w, d)| {
                format!(
                    "{} ({} ms after its release)",
                    describe(w, t_fault, "after the fault"),
                    d / 1000
                )
            })
            .collect(),
        thaw,
    }
}

/// The operator writes of the pod that lost the Lease without seeing it (`what`: frozen, or
/// cut off from the apiserver) after another pod took the Lease: the apiserver must have
/// admitted none (the write fence `inject` installs refuses them; before the fence, one got
/// through when the race was lost). The refused ones are reported: they are the writes the
/// fence stopped.
fn lost_pod_was_fenced(
    writes: &[audit::Write],
    install: &Install,
    lost_ip: &str,
    t_fault: i64,
    t_steady: i64,
    name: &str,
    what: &str,
) {
    // The fence comes from inject (on by default): the release must hold it.
    let fence = format!(
        "name: {}",
        passmower_elector::inject::fence::fence_policy_name(&install.namespace, passmower::NAME)
    );
    assert!(
        install.manifest.matches(&fence).count() >= 2,
        "{name}: the release holds no write fence ({fence}: a policy and its binding)"
    );
    let tenures = audit::tenures(
        writes,
        &install.namespace,
        passmower::NAME,
        install.bound_us(),
        now_us(),
    );
    let Some(takeover) = tenures
        .iter()
        .find(|t| t.source_ip != lost_ip && t.start_us > t_fault)
    else {
        report(&format!(
            "{name}: no other pod took the Lease after the fault (the {what} pod kept it)"
        ));
        return;
    };
    // Until the pod leads again, if it does before steady (then its writes are its own).
    let until = tenures
        .iter()
        .filter(|t| t.source_ip == lost_ip && t.start_us > takeover.start_us)
        .map(|t| t.start_us - 1)
        .fold(t_steady, i64::min);
    let (admitted, refused) =
        audit::operator_writes_from(writes, &install.user(), lost_ip, takeover.start_us, until);
    let describe = |ws: &[&audit::Write]| {
        ws.iter()
            .map(|w| {
                format!(
                    "{} {}/{}{} {} ms after the takeover",
                    w.verb,
                    w.resource,
                    w.name,
                    if w.subresource.is_empty() {
                        String::new()
                    } else {
                        format!("/{}", w.subresource)
                    },
                    (w.received_us - takeover.start_us) / 1000
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    report(&format!(
        "{name}: the {what} pod's operator writes after the takeover: {} admitted, {} refused by the fence{}",
        admitted.len(),
        refused.len(),
        if refused.is_empty() {
            String::new()
        } else {
            format!(" ({})", describe(&refused))
        }
    ));
    assert!(
        admitted.is_empty(),
        "{name}: the apiserver admitted operator writes from the {what} pod after another took over: {}",
        describe(&admitted)
    );
}

/// Per pod of `install`, whether the kubelet's readiness probes currently count it as
/// failing: some container had `failureThreshold` (3, as inject and the chart set) or more
/// failed readiness probes since its last successful one — the kubelet's own rule for
/// taking a pod out of its Service. Read from the kubelet's probe counters, which stay
/// readable while the apiserver is down (the pod status is only published through it).
struct ReadinessTracker {
    /// (pod, container) → (successes, failures) at the last success.
    at_last_success: BTreeMap<(String, String), (f64, f64)>,
}

impl ReadinessTracker {
    fn new() -> Self {
        ReadinessTracker {
            at_last_success: BTreeMap::new(),
        }
    }

    /// (pod, container) pairs over the failure threshold now.
    fn failing(&mut self, node: &Node, namespace: &str) -> Result<Vec<(String, String)>, String> {
        let counts = node.kubelet_probe_counts()?;
        let mut now: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
        for c in counts
            .iter()
            .filter(|c| c.namespace == namespace && c.probe_type == "Readiness")
        {
            let e = now.entry((c.pod.clone(), c.container.clone())).or_default();
            match c.result.as_str() {
                "successful" => e.0 += c.count,
                _ => e.1 += c.count,
            }
        }
        let mut failing = Vec::new();
        for (key, (ok, bad)) in &now {
            let last = self
                .at_last_success
                .entry(key.clone())
                .or_insert((*ok, *bad));
            if *ok > last.0 {
                *last = (*ok, *bad);
            } else if bad - last.1 >= 3.0 {
                failing.push(key.clone());
            }
        }
        Ok(failing)
    }
}

/// An apiserver outage must not take every replica out of its Service: Passmower serves
/// HTTP without the API, so at least one pod must stay Ready in the kubelet's eyes. (It
/// failed while `inject` gave the native sidecar, whose readiness counts toward the pod's, the
/// elector's `/readyz` as readiness probe, which fails on API errors: it is gone.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_outage_keeps_a_replica_in_service() {
    use nix::sys::signal::Signal;
    use pme_testkit::node::config::Component;
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    let _serial = serial().await;
    let install = install(node).await;
    install.wait_steady(node, Duration::from_secs(300)).await;
    let client = node.admin_client().await;
    let names: Vec<String> = install
        .pods(&client)
        .await
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let mut tracker = ReadinessTracker::new();
    tracker
        .failing(node, &install.namespace)
        .expect("kubelet probe counters");
    // Long enough for three failed readiness probes (period 5s) and then some.
    let outage = Duration::from_secs(30);
    tokio::task::spawn_blocking(move || {
        node.stop(
            Component::KubeApiserver,
            Signal::SIGTERM,
            Duration::from_secs(15),
        )
    })
    .await
    .expect("stop task");
    let t0 = Instant::now();
    let mut worst = 0usize;
    let mut timeline = Vec::new();
    let mut containers = std::collections::BTreeSet::new();
    while t0.elapsed() < outage {
        // A reader error is a failure of the test, never "no pod failing": that would pass an
        // outage nobody looked at.
        let failing: Vec<(String, String)> = tracker
            .failing(node, &install.namespace)
            .unwrap_or_else(|e| panic!("the kubelet's probe counters during the outage: {e}"))
            .into_iter()
            .filter(|(p, _)| names.contains(p))
            .collect();
        let pods: std::collections::BTreeSet<&String> = failing.iter().map(|(p, _)| p).collect();
        containers.extend(failing.iter().map(|(_, c)| c.clone()));
        worst = worst.max(pods.len());
        timeline.push(format!("{:.0}s:{}", t0.elapsed().as_secs_f64(), pods.len()));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::task::spawn_blocking(move || node.restart(Component::KubeApiserver))
        .await
        .expect("restart task")
        .expect("restart the apiserver");
    report(&format!(
        "apiserver outage of {}s: at worst {worst} of {} replicas failing readiness, in containers {containers:?} (time:failing pods {})",
        outage.as_secs(),
        names.len(),
        timeline.join(" ")
    ));
    install.wait_steady(node, Duration::from_secs(300)).await;
    assert_single_writer(node, &install);
    assert!(
        worst < names.len(),
        "the apiserver outage took every replica out of its Service ({worst} of {} failing readiness)",
        names.len()
    );
}

/// One pod's app image cannot be pulled (`ErrImagePull`): its elector runs, but its app's
/// supervisor never answers, so that pod never takes the Lease, even as the only candidate
/// ready when the one leader is deleted; the Deployment's replacement pod leads and reconciles.
/// (On an elector that contends without a consumer, the broken pod takes the Lease the moment
/// it is released and keeps it while nothing reconciles.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_app_image_cannot_be_pulled_never_leads() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::api::{Api, DeleteParams, PostParams};
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    let _serial = serial().await;
    let install = install(node).await;
    if !install.election.ours_decides() {
        report("unpullable app image: not run (Passmower's own election, no elector)");
        return;
    }
    install.wait_steady(node, Duration::from_secs(300)).await;
    let client = node.admin_client().await;
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &install.namespace);

    // A copy of a working pod: the same ServiceAccount, elector and Lease, but labels that no
    // ReplicaSet or Service selects, and an app image no registry serves.
    let model = install
        .pods(&client)
        .await
        .into_iter()
        .next()
        .expect("a pod");
    let mut spec = model.spec.clone().expect("a pod spec");
    for c in &mut spec.containers {
        if c.name == APP_CONTAINER {
            c.image = Some("127.0.0.1:9/passmower-elector-test/unpullable:none".into());
            c.image_pull_policy = Some("Always".into());
        }
    }
    let broken_name = "passmower-unpullable";
    let broken = Pod {
        metadata: ObjectMeta {
            name: Some(broken_name.into()),
            labels: Some([("test".to_owned(), "unpullable".to_owned())].into()),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    pods_api
        .create(&PostParams::default(), &broken)
        .await
        .expect("create the pod with an unpullable app image");

    // Its elector runs and its app container waits for an image that never comes.
    let deadline = Instant::now() + Duration::from_secs(180);
    let waiting = loop {
        let pod = pods_api.get_opt(broken_name).await.ok().flatten();
        let status = pod.as_ref().and_then(|p| p.status.clone());
        let elector_running = status
            .iter()
            .flat_map(|s| s.init_container_statuses.iter().flatten())
            .chain(
                status
                    .iter()
                    .flat_map(|s| s.container_statuses.iter().flatten()),
            )
            .any(|c| {
                c.name != APP_CONTAINER && c.state.as_ref().is_some_and(|s| s.running.is_some())
            });
        let app_reason = status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
            .find(|c| c.name == APP_CONTAINER)
            .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
        if elector_running
            && app_reason
                .as_deref()
                .is_some_and(|r| r == "ErrImagePull" || r == "ImagePullBackOff")
        {
            break app_reason;
        }
        assert!(
            Instant::now() < deadline,
            "the pod with the unpullable image never reached ErrImagePull with its elector running: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    // One working replica, so the broken pod is the only other candidate when it goes.
    let kubectl = |args: &[&str]| {
        let out = node
            .kubectl()
            .args(args)
            .args(["-n", &install.namespace])
            .output()
            .expect("run kubectl");
        assert!(out.status.success(), "kubectl {args:?}: {out:?}");
    };
    let deployment = format!("deployment/{}", passmower::NAME);
    kubectl(&["scale", &deployment, "--replicas=1"]);
    let deadline = Instant::now() + Duration::from_secs(180);
    while install.pods(&client).await.len() != 1 || install.leader_pod(&client).await.is_none() {
        assert!(
            Instant::now() < deadline,
            "the Deployment did not scale to one leading replica"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let leader = install.leader_pod(&client).await.expect("a leader");
    let leader_name = leader.metadata.name.clone().unwrap_or_default();

    // Watch the Lease from the deletion until a new pod leads and a client is reconciled.
    let t0 = Instant::now();
    kubectl(&["delete", "pod", &leader_name, "--wait=false"]);
    let client_name = "unpullable-image";
    let mut created = false;
    let mut holders: Vec<String> = Vec::new();
    let mut new_leader_after = None;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let holder = install.lease_holder(&client).await.unwrap_or_default();
        if holders.last() != Some(&holder) {
            holders.push(holder.clone());
        }
        assert!(
            !passmower::holder_is_pod(&holder, broken_name),
            "the pod whose app image cannot be pulled took the Lease (holders in order: {holders:?})"
        );
        if !holder.is_empty() && !passmower::holder_is_pod(&holder, &leader_name) {
            new_leader_after.get_or_insert(t0.elapsed());
            if !created {
                install.create_client(&client, client_name).await;
                created = true;
            }
            if install.client_reconciled(&client, client_name).await {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no working pod led and reconciled within 300 s (holders in order: {holders:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And it stays that way for a lease duration and more, the broken pod still contending.
    let settle = Instant::now() + install.timings.lease_duration * 2;
    while Instant::now() < settle {
        let holder = install.lease_holder(&client).await.unwrap_or_default();
        assert!(
            !passmower::holder_is_pod(&holder, broken_name),
            "the pod whose app image cannot be pulled took the Lease later: {holder}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    report(&format!(
        "unpullable app image ({}): never held the Lease; the replacement pod led {:.1} s after the only working pod was deleted and reconciled in {:.1} s (holders: {holders:?})",
        waiting.unwrap_or_default(),
        new_leader_after.unwrap_or_default().as_secs_f64(),
        t0.elapsed().as_secs_f64()
    ));

    pods_api
        .delete(broken_name, &DeleteParams::default())
        .await
        .expect("delete the pod with the unpullable image");
    kubectl(&[
        "scale",
        &deployment,
        &format!("--replicas={}", install.replicas),
    ]);
    install.wait_steady(node, Duration::from_secs(300)).await;
    assert_single_writer(node, &install);
}

/// A wedged elector (SIGSTOP to the elector process only) is restarted by its liveness probe,
/// and the pod's app, whose grant lapses, stops operating: another pod takes over without
/// overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wedged_elector_is_restarted_by_liveness() {
    use nix::sys::signal::Signal;
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    let _serial = serial().await;
    let install = install(node).await;
    install.wait_steady(node, Duration::from_secs(300)).await;
    let client = node.admin_client().await;
    let leader = install.leader_pod(&client).await.expect("a leader");
    let name = leader.metadata.name.clone().unwrap_or_default();
    let restarts_before =
        pods::restart_count(&leader, passmower::ELECTOR_CONTAINER).expect("elector status");
    let t0 = Instant::now();
    let n = node.signal_container(&leader, passmower::ELECTOR_CONTAINER, Signal::SIGSTOP);
    assert!(n > 0, "no elector process in {name}");
    install.create_client(&client, "wedged").await;
    let pods_api = kube::Api::<Pod>::namespaced(client.clone(), &install.namespace);
    // Liveness: period 10s, 3 failures, then the kubelet's stop (SIGTERM is not delivered to
    // a stopped process: the termination grace period runs out before SIGKILL).
    let restarted = pme_testkit::wait_until_async(
        Duration::from_secs(180),
        Duration::from_millis(250),
        || async {
            pods_api
                .get(&name)
                .await
                .ok()
                .and_then(|p| pods::restart_count(&p, passmower::ELECTOR_CONTAINER))
                .is_some_and(|c| c > restarts_before)
        },
    )
    .await;
    let restart_s = t0.elapsed().as_secs_f64();
    assert!(
        restarted,
        "the wedged elector of {name} was not restarted in 180s"
    );
    let reconciled =
        pme_testkit::wait_until_async(Duration::from_secs(120), Duration::from_millis(100), || {
            install.client_reconciled(&client, "wedged")
        })
        .await;
    assert!(
        reconciled,
        "the OIDCClient created while the elector was wedged was not reconciled"
    );
    report(&format!(
        "wedged elector (SIGSTOP) in {name}: restarted by liveness after {restart_s:.1} s"
    ));
    install.wait_steady(node, Duration::from_secs(300)).await;
    assert_single_writer(node, &install);
}

/// Not a test: installs Passmower and keeps the node up for `PME_HOLD` seconds (default 600),
/// printing how to reach it, for a look around (`kubectl get pods,lease -w`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "keeps a node up for a person to look at; run by hand"]
async fn hold_for_a_look() {
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    let _serial = serial().await;
    let install = install(node).await;
    let hold: u64 = std::env::var("PME_HOLD")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    println!(
        "node up for {hold}s: KUBECONFIG={} {} get pods,lease -n {} -w",
        node.admin_kubeconfig().display(),
        node.layout.node_bin.join("kubectl").display(),
        install.namespace
    );
    tokio::time::sleep(Duration::from_secs(hold)).await;
}

/// Not a test: the demo on real pods (`scripts/demo.sh --node`). Installs Passmower with three
/// replicas, runs `kubectl get pods,lease -w` where you can see it, and hands over three ways:
/// a graceful delete of the leader's pod, a crash of the next leader's elector (restarted in
/// place, it keeps the Lease), and a frozen leader pod (another takes over after the lease
/// duration).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the real-pod demo; run by scripts/demo.sh --node"]
async fn demo_handover() {
    use nix::sys::signal::Signal;
    let _serial = serial().await;
    let say = |s: &str| println!("\n\x1b[1m== {s}\x1b[0m");
    say("starting a one-node Kubernetes and installing Passmower (helm + inject, 3 replicas)");
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    let install = install(node).await;
    let client = node.admin_client().await;
    println!(
        "to look yourself: KUBECONFIG={} {} get pods -n {} -w (and lease)",
        node.admin_kubeconfig().display(),
        node.layout.node_bin.join("kubectl").display(),
        install.namespace
    );
    // kubectl watches one resource type at a time: pods and the Lease side by side.
    let mut watches: Vec<std::process::Child> = ["pods", "lease"]
        .iter()
        .map(|kind| {
            node.kubectl()
                .args(["get", kind, "-n", &install.namespace, "-w"])
                .spawn()
                .expect("kubectl get -w")
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;

    let leader = |client: kube::Client| {
        let install = install.clone();
        async move { install.leader_pod(&client).await }
    };
    let wait_new_leader = |old: String| {
        let (client, install) = (client.clone(), install.clone());
        async move {
            let t0 = Instant::now();
            loop {
                if let Some(p) = install.leader_pod(&client).await {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    if name != old {
                        return (name, t0.elapsed());
                    }
                }
                if t0.elapsed() > Duration::from_secs(120) {
                    return ("(none)".into(), t0.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };

    let first = leader(client.clone()).await.expect("a leader");
    let first_name = first.metadata.name.clone().unwrap_or_default();
    say(&format!(
        "1. graceful: kubectl delete pod {first_name} (the leader)"
    ));
    let _ = node
        .kubectl()
        .args([
            "delete",
            "pod",
            &first_name,
            "-n",
            &install.namespace,
            "--wait=false",
        ])
        .status();
    let (second, took) = wait_new_leader(first_name).await;
    say(&format!(
        "{second} holds the Lease {} ms after the delete (app stopped, ack, release, watch)",
        took.as_millis()
    ));
    install.wait_steady(node, Duration::from_secs(300)).await;

    let second_pod = leader(client.clone()).await.expect("a leader");
    let second_name = second_pod.metadata.name.clone().unwrap_or_default();
    say(&format!(
        "2. crash: SIGKILL the elector in {second_name}; the kubelet restarts it (watch who holds the Lease after {}s)",
        install.timings.lease_duration.as_secs()
    ));
    node.signal_container(&second_pod, passmower::ELECTOR_CONTAINER, Signal::SIGKILL);
    tokio::time::sleep(install.timings.lease_duration + 2 * install.timings.retry_period).await;
    install.wait_steady(node, Duration::from_secs(300)).await;
    let still = leader(client.clone())
        .await
        .and_then(|p| p.metadata.name)
        .unwrap_or_default();
    say(&format!(
        "the Lease is held by {still} (restarts: see the RESTARTS column)"
    ));

    let third_pod = leader(client.clone()).await.expect("a leader");
    let third_name = third_pod.metadata.name.clone().unwrap_or_default();
    say(&format!(
        "3. freeze: SIGSTOP every process of {third_name}; nobody may take over before the lease duration (15s)"
    ));
    let pids = node.pod_pids(&third_pod);
    pods::signal_all(&pids, Signal::SIGSTOP);
    let (fourth, took) = wait_new_leader(third_name.clone()).await;
    say(&format!(
        "{fourth} took over {} ms after the freeze (the frozen pod's app was stopped by its own supervisor when its grant expired, if it ran at all)",
        took.as_millis()
    ));
    pods::signal_all(&pids, Signal::SIGCONT);
    install.wait_steady(node, Duration::from_secs(300)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for w in &mut watches {
        let _ = w.kill();
        let _ = w.wait();
    }
    let tenures = assert_single_writer(node, &install);
    say(&format!(
        "passmower-elector status -n {} --deployment {}: what an operator sees now",
        install.namespace,
        passmower::NAME
    ));
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_passmower-elector"))
        .arg("status")
        .args(["-n", &install.namespace, "--deployment", passmower::NAME])
        .env_clear()
        .env("KUBECONFIG", node.admin_kubeconfig())
        .output()
        .expect("run status");
    print!("{}", String::from_utf8_lossy(&status.stdout));
    assert_eq!(
        status.status.code(),
        Some(0),
        "status after the demo: no working leader?\n{}",
        String::from_utf8_lossy(&status.stderr)
    );
    say(&format!(
        "done: {} leadership tenures in the audit log, none overlapping; the node is torn down now",
        tenures.len()
    ));
}
