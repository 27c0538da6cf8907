//! The fault campaign: N pods (elector + supervisor + recording child) against a private
//! etcd + kube-apiserver, faults drawn from a seeded schedule, the safety oracle — the
//! children's own operator-mode intervals, which must never overlap — and a liveness check of
//! every leaderless gap against the bound of the fault that caused it.
//!
//! Why not also the grants in the flag files (`pme_testkit::GrantRecorder`): that oracle assumes a
//! consumer may run for the kill grace after its grant ends, which is right when nobody acks,
//! but here the supervisor acks a demotion once its child is gone and the elector releases at
//! once, so a graceful handover legitimately starts the next grant within the kill grace. The
//! children's intervals are the ground truth that the acks stand for.
//!
//! Faults are injected one at a time: inject, hold (for lasting faults), heal, wait until the
//! pods have settled with one stable leader, idle, next. The schedule (kinds, targets, holds) is
//! a function of the seed; what the processes do with it depends on timing, so a seed
//! reproduces the schedule, not every interleaving.
//!
//! Not injected, on purpose:
//! - SIGSTOP of a supervisor alone: it *is* the dead man's switch; a frozen PID 1 beside a
//!   running app defeats any in-pod guard (a frozen container freezes both).
//! - The Lease released by hand (holder ""): the design makes a released Lease free at once,
//!   so a hand release under a running leader lets a follower lead while the old leader's app
//!   takes up to the kill grace to stop. That is the documented meaning of a release, not a
//!   fault the elector can detect; `PME_CAMPAIGN_FAULTS=lease-release` shows the window.
//!   (With this stand-in app it is usually missed: the old leader hears of the release through
//!   its watch as fast as the follower does and most apps stop quickly.)

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use nix::sys::signal::Signal;
use pme_testkit::cluster::ControlPlaneProcess;
use pme_testkit::oracle::runs::{overlapping, LeaderInterval, Observer};
use pme_testkit::pods::{Pod, PodSpec};
use pme_testkit::recording_app::OnTerm;
use pme_testkit::{BootTime, Cluster, FaultProxy, TestNs};

use super::schedule::{
    self, FaultKind, Plan, Rng, Schedule, Target, CHILD_BACKOFF_MAX, KILL_GRACE, LEASE_DURATION,
    RESTART_DELAY_MAX, RESTART_DELAY_MIN, RETRY_PERIOD, SLACK,
};

/// How long one leader must have run, with every process up, before the next fault.
const STABLE: Duration = Duration::from_millis(1500);
/// How often the harness tends the pods (restarts) and checks for a leader.
const TICK: Duration = Duration::from_millis(20);
/// A leaderless gap that no fault explains is allowed this long: a renew that missed the renew
/// deadline on a loaded machine demotes, and the holder re-acquires its own record at once, or
/// another pod takes it after a lease duration.
const UNEXPLAINED_GAP: Duration = Duration::from_millis(
    LEASE_DURATION.as_millis() as u64 + RETRY_PERIOD.as_millis() as u64 + SLACK.as_millis() as u64,
);

/// How long a terminated etcd or kube-apiserver may take to exit before it is killed (a
/// kube-apiserver drains its watches for much longer than a campaign wants to wait).
const CONTROL_PLANE_GRACE: Duration = Duration::from_secs(5);

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Number of pods.
    pub pods: usize,
    /// How long to inject faults (the last recovery may run past it).
    pub duration: Duration,
    /// Seed of the schedule; printed first, so any run can be repeated.
    pub seed: u64,
    /// The kinds of fault to draw from.
    pub kinds: Vec<FaultKind>,
    /// Whether the electors know their pod's UID (`POD_UID`), as inject sets it. Without it
    /// (`PME_CAMPAIGN_NO_POD_UID=1`) no elector can adopt: the behaviour without adoption, for
    /// before/after figures of the same seed.
    pub pod_uid: bool,
}

impl Config {
    /// `PME_CAMPAIGN_DURATION` (humantime, e.g. `10m`), `PME_CAMPAIGN_SEED` (u64),
    /// `PME_CAMPAIGN_PODS`, `PME_CAMPAIGN_FAULTS` (comma-separated [`FaultKind::id`]s) and
    /// `PME_CAMPAIGN_NO_POD_UID` override the defaults; the seed defaults to the clock.
    pub fn from_env(default_duration: Duration) -> Config {
        let duration = std::env::var("PME_CAMPAIGN_DURATION")
            .ok()
            .map(|d| {
                humantime::parse_duration(d.trim())
                    .unwrap_or_else(|e| panic!("PME_CAMPAIGN_DURATION={d:?}: {e}"))
            })
            .unwrap_or(default_duration);
        let seed = std::env::var("PME_CAMPAIGN_SEED")
            .ok()
            .map(|s| {
                s.trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("PME_CAMPAIGN_SEED={s:?}: {e}"))
            })
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        let pods = std::env::var("PME_CAMPAIGN_PODS")
            .ok()
            .map(|s| s.trim().parse().expect("PME_CAMPAIGN_PODS is a number"))
            .unwrap_or(5);
        assert!((2..=20).contains(&pods), "PME_CAMPAIGN_PODS must be 2..=20");
        let kinds = match std::env::var("PME_CAMPAIGN_FAULTS") {
            Ok(list) => {
                FaultKind::parse_list(&list).unwrap_or_else(|e| panic!("PME_CAMPAIGN_FAULTS: {e}"))
            }
            Err(_) => FaultKind::DEFAULT.to_vec(),
        };
        assert!(!kinds.is_empty(), "PME_CAMPAIGN_FAULTS names no fault");
        let pod_uid = std::env::var_os("PME_CAMPAIGN_NO_POD_UID").is_none_or(|v| v.is_empty());
        Config {
            pods,
            duration,
            seed,
            kinds,
            pod_uid,
        }
    }
}

/// One injected fault.
#[derive(Clone, Debug)]
pub struct Fault {
    pub kind: FaultKind,
    pub pod: Option<usize>,
    /// Whether the targeted pod led when the fault was injected.
    pub hit_leader: bool,
    pub injected: BootTime,
    pub healed: BootTime,
    /// A leader must run again by `healed + bound`.
    pub bound: Duration,
    /// From the heal until one stable leader ran (the start of its stable stretch).
    pub recovered_after: Option<Duration>,
    pub note: String,
}

/// A stretch with no leader child running.
#[derive(Clone, Debug)]
pub struct Gap {
    pub from: BootTime,
    pub to: BootTime,
    /// Index into the faults of the fault whose window explains it (the most lenient one).
    pub fault: Option<usize>,
    /// The latest end the explaining faults allow.
    pub deadline: Option<BootTime>,
}

impl Gap {
    pub fn len(&self) -> Duration {
        self.to.saturating_since(self.from)
    }

    fn violates(&self) -> bool {
        match self.deadline {
            Some(d) => self.to > d,
            None => self.len() > UNEXPLAINED_GAP,
        }
    }
}

/// What followed one elector restart in place on the leader (see
/// [`Report::restarts_in_place`]).
#[derive(Clone, Debug)]
pub struct RestartInPlace {
    pub fault: usize,
    /// The pod kept its leader app running, unrestarted, until the next fault.
    pub kept: bool,
    pub app_starts: usize,
    pub gap: Duration,
}

/// What a campaign saw.
pub struct Report {
    pub config: Config,
    pub ran_for: Duration,
    pub faults: Vec<Fault>,
    pub intervals: Vec<LeaderInterval>,
    pub stopped_at: BootTime,
    pub follower_starts: u64,
    pub takeovers: usize,
    pub gaps: Vec<Gap>,
    /// Operator-mode intervals that overlapped (any two children, same pod included).
    pub overlaps: Vec<(LeaderInterval, LeaderInterval)>,
    /// Record lines the observer could not parse.
    pub malformed: Vec<String>,
    /// Faults after which no stable leader was seen in time (online check).
    pub unrecovered: Vec<String>,
    /// (elector starts, supervisor starts) per pod, first starts included.
    pub starts: Vec<(u32, u32)>,
    /// Where the pods' logs and records are.
    pub dir: PathBuf,
}

impl Report {
    pub fn longest_gap(&self) -> Option<&Gap> {
        self.gaps.iter().max_by_key(|g| g.len())
    }

    pub fn liveness_violations(&self) -> Vec<&Gap> {
        self.gaps.iter().filter(|g| g.violates()).collect()
    }

    pub fn safe(&self) -> bool {
        self.overlaps.is_empty() && self.malformed.is_empty()
    }

    pub fn live(&self) -> bool {
        self.liveness_violations().is_empty() && self.unrecovered.is_empty()
    }

    /// The smallest time between one leader child's end and the next one's start, across
    /// pods: how close the campaign came to an overlap.
    pub fn closest_handover(&self) -> Option<Duration> {
        self.intervals
            .windows(2)
            .filter(|w| w[0].pod != w[1].pod)
            .filter_map(|w| {
                let end = w[0].end_or(self.stopped_at);
                (w[1].start >= end).then(|| w[1].start.saturating_since(end))
            })
            .min()
    }

    /// For every elector restart in place that hit the leader: whether that pod went on
    /// leading without an app restart until the next fault (or the end), the leader app starts
    /// in any pod in that stretch, and its longest leaderless gap.
    pub fn restarts_in_place(&self) -> Vec<RestartInPlace> {
        let mut found = Vec::new();
        for (i, fault) in self.faults.iter().enumerate() {
            let (FaultKind::ElectorRestart, Some(pod), true) =
                (fault.kind, fault.pod, fault.hit_leader)
            else {
                continue;
            };
            let until = self
                .faults
                .get(i + 1)
                .map_or(self.stopped_at, |next| next.injected);
            let kept = self.intervals.iter().any(|iv| {
                iv.pod == pod && iv.start <= fault.injected && iv.end_or(self.stopped_at) >= until
            });
            let app_starts = self
                .intervals
                .iter()
                .filter(|iv| iv.start > fault.injected && iv.start <= until)
                .count();
            let gap = self
                .gaps
                .iter()
                .filter(|g| g.from < until && g.to > fault.injected)
                .map(|g| g.to.min(until).saturating_since(g.from.max(fault.injected)))
                .max()
                .unwrap_or(Duration::ZERO);
            found.push(RestartInPlace {
                fault: i,
                kept,
                app_starts,
                gap,
            });
        }
        found
    }

    fn t(&self, at: BootTime) -> String {
        let origin = self.faults.first().map(|f| f.injected).unwrap_or(at);
        if at >= origin {
            format!("+{:.3}s", at.saturating_since(origin).as_secs_f64())
        } else {
            format!("-{:.3}s", origin.saturating_since(at).as_secs_f64())
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(f, "=== fault campaign report ===")?;
        writeln!(
            f,
            "seed {} (rerun: PME_CAMPAIGN_SEED={} PME_CAMPAIGN_DURATION={}s)",
            c.seed,
            c.seed,
            c.duration.as_secs()
        )?;
        writeln!(
            f,
            "{} pods, faults for {:?}, ran {:.1}s; timings D={:?} R={:?} P={:?} K={:?}, slack {:?}",
            c.pods,
            c.duration,
            self.ran_for.as_secs_f64(),
            LEASE_DURATION,
            schedule::RENEW_DEADLINE,
            RETRY_PERIOD,
            KILL_GRACE,
            SLACK
        )?;
        let mut by_kind: BTreeMap<FaultKind, (usize, usize, Duration)> = BTreeMap::new();
        for fault in &self.faults {
            let e = by_kind.entry(fault.kind).or_default();
            e.0 += 1;
            e.1 += usize::from(fault.hit_leader);
        }
        for gap in &self.gaps {
            if let Some(i) = gap.fault {
                let e = by_kind.entry(self.faults[i].kind).or_default();
                e.2 = e.2.max(gap.len());
            }
        }
        if !self.config.pod_uid {
            writeln!(f, "electors without POD_UID (no adoption)")?;
        }
        if self.config.kinds != FaultKind::DEFAULT {
            let ids: Vec<&str> = self.config.kinds.iter().map(|k| k.id()).collect();
            writeln!(f, "fault kinds: {}", ids.join(","))?;
        }
        writeln!(f, "faults injected: {}", self.faults.len())?;
        writeln!(
            f,
            "  {:<38} {:>5} {:>10} {:>12} {:>12}",
            "kind", "count", "on leader", "longest gap", "bound*"
        )?;
        for (kind, (n, leader, worst)) in &by_kind {
            writeln!(
                f,
                "  {:<38} {:>5} {:>10} {:>11.2}s {:>11.1}s",
                kind.to_string(),
                n,
                leader,
                worst.as_secs_f64(),
                kind.bound().as_secs_f64()
            )?;
        }
        writeln!(
            f,
            "  * a gap must end within the bound after the fault healed; a lasting fault's gap \
             may start before that (e.g. while etcd is down)"
        )?;
        let in_place = self.restarts_in_place();
        if let Some(worst) = in_place.iter().max_by_key(|r| r.gap) {
            let kept = in_place.iter().filter(|r| r.kept).count();
            let starts: usize = in_place.iter().map(|r| r.app_starts).sum();
            writeln!(
                f,
                "elector restarts in place on the leader: {}; the pod kept leading without an \
                 app restart until the next fault: {kept}; leader app starts after them: \
                 {starts}; longest leaderless gap after one: {:.3}s (fault #{})",
                in_place.len(),
                worst.gap.as_secs_f64(),
                worst.fault
            )?;
        }
        let restarts: Vec<String> = self
            .starts
            .iter()
            .enumerate()
            .map(|(i, (e, s))| format!("pod-{i} {}/{}", e - 1, s - 1))
            .collect();
        writeln!(f, "restarts (elector/supervisor): {}", restarts.join(", "))?;
        writeln!(
            f,
            "leader children started: {}, follower children started: {}, takeovers (leader moved to another pod): {}",
            self.intervals.len(),
            self.follower_starts,
            self.takeovers
        )?;
        match self.longest_gap() {
            Some(g) => writeln!(
                f,
                "longest leaderless gap: {:.3}s at {} ({})",
                g.len().as_secs_f64(),
                self.t(g.from),
                match g.fault {
                    Some(i) => format!("after fault #{i}: {}", self.faults[i].kind),
                    None => "no fault explains it".to_owned(),
                }
            )?,
            None => writeln!(f, "longest leaderless gap: none")?,
        }
        if let Some(h) = self.closest_handover() {
            writeln!(
                f,
                "closest handover (end of one leader child to start of the next): {:.1}ms",
                h.as_secs_f64() * 1000.0
            )?;
        }
        writeln!(
            f,
            "overlaps (two children in operator mode at once): {}",
            self.overlaps.len()
        )?;
        for (a, b) in &self.overlaps {
            writeln!(
                f,
                "  TWO LEADERS: pod-{} pid {} [{} .. {}] and pod-{} pid {} [{} .. {}]",
                a.pod,
                a.pid,
                self.t(a.start),
                self.t(a.end_or(self.stopped_at)),
                b.pod,
                b.pid,
                self.t(b.start),
                self.t(b.end_or(self.stopped_at))
            )?;
        }
        for m in &self.malformed {
            writeln!(f, "  malformed record: {m}")?;
        }
        let violations = self.liveness_violations();
        writeln!(
            f,
            "liveness violations: {}",
            violations.len() + self.unrecovered.len()
        )?;
        for g in violations {
            writeln!(
                f,
                "  gap {:.3}s at {} .. {}: {}",
                g.len().as_secs_f64(),
                self.t(g.from),
                self.t(g.to),
                match (g.fault, g.deadline) {
                    (Some(i), Some(d)) => format!(
                        "fault #{i} ({}) allowed until {}",
                        self.faults[i].kind,
                        self.t(d)
                    ),
                    _ => format!("no fault explains it (allowed {UNEXPLAINED_GAP:?})"),
                }
            )?;
        }
        for u in &self.unrecovered {
            writeln!(f, "  {u}")?;
        }
        writeln!(f, "schedule:")?;
        for (i, fault) in self.faults.iter().enumerate() {
            writeln!(
                f,
                "  #{i:<3} {} {:<38} {:<6} {}{} healed {} recovered {}",
                self.t(fault.injected),
                fault.kind.to_string(),
                fault.pod.map(|p| format!("pod-{p}")).unwrap_or_default(),
                if fault.hit_leader { "(leader) " } else { "" },
                fault.note,
                self.t(fault.healed),
                fault
                    .recovered_after
                    .map(|d| format!("{:.2}s", d.as_secs_f64()))
                    .unwrap_or_else(|| "NO".into()),
            )?;
        }
        writeln!(
            f,
            "logs and records (kept on failure or with PME_KEEP_TMP=1): {}",
            self.dir.display()
        )
    }
}

/// The pods, the clocks of the harness, and the oracles, while the campaign runs.
struct Harness<'a> {
    cluster: &'a Cluster,
    rt: tokio::runtime::Runtime,
    leases: Api<Lease>,
    lease_name: String,
    pods: Vec<Pod>,
    observer: Observer,
    tend_rng: Rng,
    edits: u32,
    /// Where etcd snapshots are kept.
    dir: PathBuf,
}

/// Runs a campaign and returns its report; panics only when the harness itself cannot run.
pub fn run(config: &Config) -> Report {
    eprintln!(
        "fault campaign: seed {} ({} pods, {:?}); rerun with PME_CAMPAIGN_SEED={}",
        config.seed, config.pods, config.duration, config.seed
    );
    let cluster = Cluster::start_private();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("campaign runtime");
    let ns = rt.block_on(crate::product::ElectorNamespaces::new_namespace(&cluster));
    let admin = rt.block_on(cluster.admin_client());
    let leases: Api<Lease> = Api::namespaced(admin, &ns.name);
    // Released, so the first leader comes at once rather than after a lease duration.
    rt.block_on(leases.create(
        &PostParams::default(),
        &Lease {
            metadata: ObjectMeta {
                name: Some(ns.lease_name.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(String::new()),
                lease_duration_seconds: Some(1),
                ..Default::default()
            }),
        },
    ))
    .expect("create the Lease");

    let dir = tempfile::Builder::new()
        .prefix("pme-campaign-")
        .tempdir()
        .expect("campaign dir")
        .keep();
    let pods: Vec<Pod> = (0..config.pods)
        .map(|i| campaign_pod(i, &dir, &ns, config.pod_uid))
        .collect();
    let observer = Observer::start(pods.iter().map(Pod::runs_file).collect());
    let mut h = Harness {
        cluster: &cluster,
        rt,
        leases,
        lease_name: ns.lease_name.clone(),
        pods,
        observer,
        tend_rng: Rng::new(config.seed ^ 0x7e4d_5eed),
        edits: 0,
        dir: dir.clone(),
    };
    for p in &mut h.pods {
        p.start_processes();
    }
    let started = Instant::now();
    let first = h.settle(Instant::now() + Duration::from_secs(60));
    assert!(
        first.is_some(),
        "no stable leader within 60s of the start; logs in {}",
        dir.display()
    );

    let mut schedule = Schedule::new(config.seed, config.pods, &config.kinds);
    let mut faults: Vec<Fault> = Vec::new();
    let mut unrecovered = Vec::new();
    let campaign_start = Instant::now();
    while campaign_start.elapsed() < config.duration {
        let plan = schedule.next_plan();
        let mut fault = h.inject(&plan);
        let give_up = Instant::now() + fault.bound + Duration::from_secs(30);
        match h.settle(give_up) {
            Some(stable_since) => {
                fault.recovered_after = Some(stable_since.saturating_since(fault.healed));
            }
            None => unrecovered.push(format!(
                "fault #{} ({}): no stable leader within {:?} of the heal",
                faults.len(),
                fault.kind,
                fault.bound + Duration::from_secs(30)
            )),
        }
        eprintln!(
            "  #{:<3} {:<38} {:<6} {} recovered in {}",
            faults.len(),
            fault.kind.to_string(),
            fault.pod.map(|p| format!("pod-{p}")).unwrap_or_default(),
            fault.note,
            fault
                .recovered_after
                .map(|d| format!("{:.2}s", d.as_secs_f64()))
                .unwrap_or_else(|| "NO".into())
        );
        faults.push(fault);
        h.hold(plan.idle);
    }

    let stopped_at = BootTime::now();
    let ran_for = started.elapsed();
    h.observer.stop();
    for p in &mut h.pods {
        p.shut_down();
    }
    let intervals = h.observer.intervals();
    let report = Report {
        config: config.clone(),
        ran_for,
        takeovers: intervals
            .windows(2)
            .filter(|w| w[0].pod != w[1].pod)
            .count(),
        gaps: gaps(&intervals, &faults, stopped_at),
        overlaps: overlapping(&intervals, stopped_at),
        follower_starts: h.observer.follower_starts(),
        malformed: h.observer.malformed(),
        starts: h.pods.iter().map(Pod::starts).collect(),
        intervals,
        stopped_at,
        faults,
        unrecovered,
        dir,
    };
    if report.safe() && report.live() && std::env::var_os("PME_KEEP_TMP").is_none() {
        let _ = std::fs::remove_dir_all(&report.dir);
    }
    report
}

impl Harness<'_> {
    /// Tends the pods for `d`.
    fn hold(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.tend();
            std::thread::sleep(TICK.min(until.saturating_duration_since(Instant::now())));
        }
    }

    fn tend(&mut self) {
        let rng = &mut self.tend_rng;
        for p in &mut self.pods {
            p.tend(|| rng.between(RESTART_DELAY_MIN, RESTART_DELAY_MAX));
        }
    }

    /// Pod `i`'s fault proxy (every campaign pod has one).
    fn proxy(&self, i: usize) -> &FaultProxy {
        self.pods[i]
            .proxy
            .as_ref()
            .expect("campaign pods have a proxy")
    }

    /// Tends the pods until every process has been up for a while and one pod has led for
    /// [`STABLE`]; returns when that stable stretch began, or None at `give_up`.
    fn settle(&mut self, give_up: Instant) -> Option<BootTime> {
        let mut stable: Option<(usize, BootTime, Instant)> = None;
        while Instant::now() < give_up {
            self.tend();
            let settled = self.pods.iter().all(|p| p.settled(Duration::from_secs(1)));
            match self.observer.leaders().as_slice() {
                // A leader child whose own elector or supervisor is not up (a killed elector's
                // child runs on until its grant lapses) is no recovery: its stretch starts only
                // once its pod is whole again. Otherwise the next fault could be injected
                // while the real takeover is still to come, and its gap blamed on this one.
                [one] if !self.pods[*one].settled(Duration::from_secs(1)) => stable = None,
                [one] => match stable {
                    Some((pod, since, t)) if pod == *one => {
                        if settled && t.elapsed() >= STABLE {
                            return Some(since);
                        }
                    }
                    _ => stable = Some((*one, BootTime::now(), Instant::now())),
                },
                _ => stable = None,
            }
            std::thread::sleep(TICK);
        }
        None
    }

    fn leader(&self) -> Option<usize> {
        self.observer.leaders().first().copied()
    }

    /// Injects `plan`, holds it, heals it.
    fn inject(&mut self, plan: &Plan) -> Fault {
        let kind = plan.kind;
        let leader = self.leader();
        let pod = kind.targets_a_pod().then(|| match plan.target {
            Target::Leader => leader.unwrap_or(0),
            Target::Pod(i) => i,
        });
        let injected = BootTime::now();
        let mut note = String::new();
        match (kind, pod) {
            (FaultKind::ElectorKill, Some(i)) => {
                missed(self.pods[i].signal_elector(Signal::SIGKILL), &mut note)
            }
            (FaultKind::ElectorRestart, Some(i)) => {
                missed(self.pods[i].restart_elector_in_place(), &mut note)
            }
            (FaultKind::ElectorTerm, Some(i)) => {
                missed(self.pods[i].signal_elector(Signal::SIGTERM), &mut note)
            }
            (FaultKind::ElectorStop, Some(i)) => {
                let hit = self.pods[i].signal_elector(Signal::SIGSTOP);
                missed(hit, &mut note);
                note.push_str(&format!("for {:.1}s", plan.hold.as_secs_f64()));
                self.hold(plan.hold);
                self.pods[i].signal_elector(Signal::SIGCONT);
            }
            (FaultKind::HandoverStall, Some(i)) => {
                let hit = self.pods[i].signal_elector(Signal::SIGTERM);
                missed(hit, &mut note);
                self.pods[i].signal_supervisor(Signal::SIGSTOP);
                note.push_str(&format!("supervisor stalled {}ms", plan.hold.as_millis()));
                std::thread::sleep(plan.hold);
                self.pods[i].signal_supervisor(Signal::SIGCONT);
            }
            (FaultKind::ChildKill, Some(i)) => {
                missed(self.pods[i].signal_child(Signal::SIGKILL), &mut note)
            }
            (FaultKind::ChildTerm, Some(i)) => {
                missed(self.pods[i].signal_child(Signal::SIGTERM), &mut note)
            }
            (FaultKind::ChildStop, Some(i)) => {
                let hit = self.pods[i].signal_child(Signal::SIGSTOP);
                missed(hit, &mut note);
                note.push_str(&format!("for {:.1}s", plan.hold.as_secs_f64()));
                self.hold(plan.hold);
                self.pods[i].continue_all();
            }
            (FaultKind::SupervisorKill, Some(i)) => {
                missed(self.pods[i].crash_container(), &mut note)
            }
            (FaultKind::SupervisorTerm, Some(i)) => {
                missed(self.pods[i].signal_supervisor(Signal::SIGTERM), &mut note)
            }
            (
                FaultKind::ProxyBlackhole | FaultKind::ProxyReset | FaultKind::ProxyDelay,
                Some(i),
            ) => {
                match kind {
                    FaultKind::ProxyBlackhole => self.proxy(i).blackhole(),
                    FaultKind::ProxyReset => self.proxy(i).reset(),
                    _ => {
                        self.proxy(i).delay(plan.delay);
                        note.push_str(&format!("{}ms per chunk ", plan.delay.as_millis()));
                    }
                }
                note.push_str(&format!("for {:.1}s", plan.hold.as_secs_f64()));
                self.hold(plan.hold);
                self.proxy(i).pass();
            }
            (FaultKind::ApiserverRestart | FaultKind::EtcdRestart, _) => {
                let which = if kind == FaultKind::EtcdRestart {
                    ControlPlaneProcess::Etcd
                } else {
                    ControlPlaneProcess::KubeApiserver
                };
                let sig = if plan.hard {
                    Signal::SIGKILL
                } else {
                    Signal::SIGTERM
                };
                let t0 = Instant::now();
                let cluster = self.cluster;
                self.tending(|| cluster.stop(which, sig, CONTROL_PLANE_GRACE));
                let stopped_in = t0.elapsed().as_secs_f64();
                self.hold(plan.hold);
                let ready_in = self.restart(which);
                note.push_str(&format!(
                    "{sig} (exited in {stopped_in:.1}s), down {:.1}s, ready {ready_in:.1}s after restarting",
                    plan.hold.as_secs_f64()
                ));
            }
            (FaultKind::EtcdRestore, _) => self.restore_etcd(plan, &mut note),
            (
                FaultKind::LeaseDelete
                | FaultKind::LeaseSteal
                | FaultKind::LeaseTouch
                | FaultKind::LeaseRelease,
                _,
            ) => {
                if let Err(e) = self.edit_lease(kind) {
                    note.push_str(&format!("admin call failed: {e}"));
                }
            }
            (_, None) => unreachable!("per-pod faults always have a target"),
        }
        Fault {
            kind,
            pod,
            hit_leader: pod.is_some() && pod == leader,
            injected,
            healed: BootTime::now(),
            bound: kind.bound(),
            recovered_after: None,
            note,
        }
    }

    /// Takes a cold copy of etcd's data dir, lets the pods run on (deposing the leader by a
    /// partition if the plan says so), then stops kube-apiserver and etcd, puts the copy back
    /// and starts both again: a restore without `--bump-revision`, resource versions go back.
    fn restore_etcd(&mut self, plan: &Plan, note: &mut String) {
        let sig = if plan.hard {
            Signal::SIGKILL
        } else {
            Signal::SIGTERM
        };
        let cluster = self.cluster;
        let data = cluster.etcd_data_dir();
        let snapshot = self.dir.join("etcd-snapshot");
        self.tending(|| cluster.stop(ControlPlaneProcess::Etcd, sig, CONTROL_PLANE_GRACE));
        copy_tree(&data, &snapshot);
        self.restart(ControlPlaneProcess::Etcd);
        let at_snapshot = self.lease_version();
        if plan.depose {
            // The short etcd stop may have cost the leader its grant: depose a settled one.
            self.settle(Instant::now() + Duration::from_secs(30));
            match self.leader() {
                Some(i) => {
                    self.proxy(i).blackhole();
                    self.hold(LEASE_DURATION + RETRY_PERIOD + Duration::from_secs(1));
                    self.proxy(i).pass();
                    note.push_str(&format!("pod-{i} (leader at the snapshot) deposed; "));
                }
                None => note.push_str("no leader to depose; "),
            }
        }
        self.hold(plan.hold);
        let before = self.lease_version();
        self.tending(|| {
            cluster.stop(ControlPlaneProcess::KubeApiserver, sig, CONTROL_PLANE_GRACE);
            cluster.stop(ControlPlaneProcess::Etcd, sig, CONTROL_PLANE_GRACE);
        });
        let _ = std::fs::remove_dir_all(&data);
        copy_tree(&snapshot, &data);
        let t0 = Instant::now();
        if let Err(e) = self.tending(|| cluster.restart_all()) {
            panic!("the control plane did not come back after the restore: {e}");
        }
        let after = self.lease_version();
        note.push_str(&format!(
            "{sig}, snapshot at Lease rv {at_snapshot}, restored from rv {before} to rv {after} \
             after {:.1}s, ready {:.1}s after restarting",
            plan.hold.as_secs_f64(),
            t0.elapsed().as_secs_f64()
        ));
    }

    /// The Lease's resourceVersion as an administrator reads it now ("?" if it cannot).
    fn lease_version(&self) -> String {
        let leases = self.leases.clone();
        let name = self.lease_name.clone();
        self.rt
            .block_on(async move { leases.get_opt(&name).await })
            .ok()
            .flatten()
            .and_then(|l| l.metadata.resource_version)
            .unwrap_or_else(|| "?".into())
    }

    /// Starts a stopped control-plane process again and waits until the apiserver is ready.
    /// Returns the seconds it took; panics if it never gets ready.
    fn restart(&mut self, which: ControlPlaneProcess) -> f64 {
        let t0 = Instant::now();
        let cluster = self.cluster;
        if let Err(e) = self.tending(|| cluster.restart(which)) {
            panic!("{} did not come back: {e}", which.name());
        }
        t0.elapsed().as_secs_f64()
    }

    /// Runs a blocking `job` on its own thread and tends the pods until it is done.
    fn tending<T: Send>(&mut self, job: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            let job = s.spawn(job);
            while !job.is_finished() {
                self.tend();
                std::thread::sleep(TICK);
            }
            job.join().expect("a control-plane job panicked")
        })
    }

    /// Deletes, steals or touches the Lease as an administrator would (retrying conflicts
    /// with the leader's renewals a few times).
    fn edit_lease(&mut self, kind: FaultKind) -> Result<(), String> {
        self.edits += 1;
        let edits = self.edits;
        let name = self.lease_name.clone();
        let leases = self.leases.clone();
        self.rt.block_on(async move {
            if kind == FaultKind::LeaseDelete {
                return match leases.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(e.to_string()),
                };
            }
            let mut last = String::new();
            for _ in 0..10 {
                let mut lease = match leases.get_opt(&name).await {
                    Ok(Some(l)) => l,
                    Ok(None) => return Err("no Lease to edit".into()),
                    Err(e) => return Err(e.to_string()),
                };
                let spec = lease.spec.get_or_insert_with(Default::default);
                if kind == FaultKind::LeaseSteal {
                    spec.holder_identity = Some(format!("intruder-{edits}"));
                    spec.lease_duration_seconds = Some(LEASE_DURATION.as_secs() as i32);
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                } else if kind == FaultKind::LeaseRelease {
                    spec.holder_identity = Some(String::new());
                    spec.lease_duration_seconds = Some(1);
                } else {
                    lease
                        .metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert("pme-campaign/edited".into(), edits.to_string());
                }
                match leases.replace(&name, &PostParams::default(), &lease).await {
                    Ok(_) => return Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 409 => last = s.message,
                    Err(e) => return Err(e.to_string()),
                }
            }
            Err(format!("conflicts on every try: {last}"))
        })
    }
}

/// Replaces `to` with a copy of the directory tree `from` (`cp -a`: modes and sparse files
/// as they are).
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    let _ = std::fs::remove_dir_all(to);
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("run cp");
    assert!(
        status.success(),
        "cp -a {} {}: {status}",
        from.display(),
        to.display()
    );
}

fn missed(hit: bool, note: &mut String) {
    if !hit {
        note.push_str("(nothing to hit: process not running) ");
    }
}

/// Campaign pod `index` in `root`: an elector behind its own fault proxy with the campaign's
/// timings, a supervisor in a session of its own (its "container") with a short restart
/// backoff, and the recording app as a real app is: slow to stop, or deaf to SIGTERM
/// ([`OnTerm::Linger`]), idling without forking (PIDs are scarce over minutes). Each pod has
/// its own UID; electors know it unless `electors_know_uid` is off (then none adopts).
fn campaign_pod(index: usize, root: &std::path::Path, ns: &TestNs, electors_know_uid: bool) -> Pod {
    let human = |d: Duration| format!("{}ms", d.as_millis());
    // PME_CAMPAIGN_ON_CHANGE=leader-instance runs the campaign against a separate leader
    // instance beside an always-running follower one; the oracle counts leader children.
    let on_change = std::env::var("PME_CAMPAIGN_ON_CHANGE")
        .map(|v| format!("--on-change={v}"))
        .unwrap_or_else(|_| "--on-change=restart".to_owned());
    let name = format!("pod-{index}");
    let spec = PodSpec {
        on_term: OnTerm::Linger,
        app_idle: "3600",
        supervisor_flags: vec![
            on_change,
            format!("--restart-backoff-max={}", human(CHILD_BACKOFF_MAX)),
        ],
        proxy: true,
        timings: vec![
            "--lease-duration".into(),
            human(LEASE_DURATION),
            "--renew-deadline".into(),
            human(schedule::RENEW_DEADLINE),
            "--retry-period".into(),
            human(RETRY_PERIOD),
            "--kill-grace".into(),
            human(KILL_GRACE),
        ],
        kill_grace: human(KILL_GRACE),
        // Unique per pod of a campaign; each campaign has its own Lease.
        uid: Some(format!("00000000-0000-4000-8000-{index:012x}")),
        electors_know_uid,
        ..PodSpec::default()
    };
    Pod::new(&name, Some(&root.join(&name)), ns, spec)
}

/// The leaderless stretches between the first leader and the end, each with the fault that
/// explains it: among the faults injected before the gap began whose window (heal + bound)
/// was still open then, the one allowing the latest end.
fn gaps(intervals: &[LeaderInterval], faults: &[Fault], end: BootTime) -> Vec<Gap> {
    let mut found: Vec<(BootTime, BootTime)> = Vec::new();
    let Some(first) = intervals.first() else {
        return Vec::new();
    };
    let mut covered_until = first.end_or(end);
    for i in &intervals[1..] {
        if i.start > covered_until {
            found.push((covered_until, i.start));
        }
        covered_until = covered_until.max(i.end_or(end));
    }
    if covered_until < end {
        found.push((covered_until, end));
    }
    found
        .into_iter()
        .map(|(from, to)| {
            let explaining = faults
                .iter()
                .enumerate()
                .filter(|(_, f)| f.injected <= from && from <= f.healed.saturating_add(f.bound))
                .max_by_key(|(_, f)| f.healed.saturating_add(f.bound));
            Gap {
                from,
                to,
                fault: explaining.map(|(i, _)| i),
                deadline: explaining.map(|(_, f)| f.healed.saturating_add(f.bound)),
            }
        })
        .collect()
}

/// A one-line summary, for a test's panic message.
pub fn summary(report: &Report) -> String {
    let mut s = String::new();
    let _ =
        write!(
        s,
        "seed {}: {} faults, {} takeovers, longest gap {:.2}s, {} overlaps, {} liveness violations",
        report.config.seed,
        report.faults.len(),
        report.takeovers,
        report.longest_gap().map(|g| g.len().as_secs_f64()).unwrap_or(0.0),
        report.overlaps.len(),
        report.liveness_violations().len() + report.unrecovered.len()
    );
    s
}
