//! The pod: whole "pods" against a real kube-apiserver, each a directory (its shared volume),
//! the real elector pushing to the real supervisor, which runs the recording app; what the apps
//! recorded is the ground truth (which pod ran in leader mode, and when). A pod has a UID,
//! given to its electors as the downward API would (`POD_UID`), may reach the apiserver
//! through a fault proxy of its own, and is restarted as a kubelet would restart its
//! containers: the elector and the supervisor, which runs in a session of its own (its
//! "container": everything it starts stays in that session, so a crash can take it all).

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::clock::BootTime;
use crate::elector::Product;
pub use crate::oracle::runs::AppRun;
use crate::recording_app::{self, OnTerm, Program, RecordingApp};
use crate::wait::POLL;
use crate::{free_port, wait_until, ElectorProcess, FaultProxy, TestNs, FAST_TIMINGS};

/// How a pod is made.
#[derive(Clone, Debug)]
pub struct PodSpec {
    /// The app exits 1 this long (sh `sleep` syntax) after starting in leader mode: an app that
    /// cannot run as leader.
    pub leader_crash_after: Option<String>,
    /// What the app does on SIGTERM.
    pub on_term: OnTerm,
    /// The app as a sh script or as a Node.js module (for the supervisor's Node-only modes,
    /// `--leader-port-map` and `--leader-standby`).
    pub program: Program,
    /// The app's idle sleep (see [`RecordingApp::idle`]).
    pub app_idle: &'static str,
    /// `supervise` flags besides the flag file, the toggle, the mode environments and the
    /// kill grace.
    pub supervisor_flags: Vec<String>,
    /// `elect` flags besides the Lease, probe, flag file, toggle and the timings.
    pub elector_flags: Vec<String>,
    /// Reach the apiserver through a [`FaultProxy`] of the pod's own.
    pub proxy: bool,
    /// The four election timings as `elect` flags; [`FAST_TIMINGS`] when empty.
    pub timings: Vec<String>,
    /// `supervise --kill-grace`.
    pub kill_grace: String,
    /// The app container is down before the elector starts (its image could not be pulled, it
    /// was OOM-killed): nothing listens on the toggle and nothing reads the flag file.
    pub app_container_down: bool,
    /// The pod's UID (a Pod object's, when the test made one): a random one when `None`.
    pub uid: Option<String>,
    /// The elector's `--probe-addr`; `127.0.0.1:0` (any free port) when unset.
    pub probe_addr: Option<String>,
    /// Whether its electors know the UID (`POD_UID`, as the downward API gives it); without
    /// it they never adopt.
    pub electors_know_uid: bool,
    /// The product the pod's elector and supervisor run (another architecture's build under an
    /// emulator, [`Product::from_env`]); this run's binary when `None`.
    pub product: Option<Product>,
}

impl Default for PodSpec {
    fn default() -> Self {
        PodSpec {
            leader_crash_after: None,
            on_term: OnTerm::Exit(0),
            program: Program::Sh,
            app_idle: "0.05",
            supervisor_flags: Vec::new(),
            elector_flags: Vec::new(),
            proxy: false,
            timings: Vec::new(),
            kill_grace: "1s".into(),
            app_container_down: false,
            uid: None,
            probe_addr: None,
            electors_know_uid: true,
            product: None,
        }
    }
}

/// The lives of a pod's elector or supervisor.
struct Life {
    /// When an exited process is started again ([`Pod::tend`]).
    restart_at: Option<Instant>,
    /// When the current process started (for "has been up for a while").
    started: Instant,
    starts: u32,
}

impl Life {
    fn new() -> Life {
        Life {
            restart_at: None,
            started: Instant::now(),
            starts: 0,
        }
    }
}

#[derive(Clone, Copy)]
enum Which {
    Elector,
    Supervisor,
}

pub struct Pod {
    pub name: String,
    /// `metadata.uid`, as the downward API gives it to the pod's electors (unless
    /// [`PodSpec::electors_know_uid`] is off).
    pub uid: String,
    /// The pod's directory (its shared volume), removed with the pod unless it was given.
    dir: PathBuf,
    _tempdir: Option<tempfile::TempDir>,
    /// The supervisor's toggle port, kept for the pod's whole life, so the elector's
    /// `--toggle-url` stays valid across supervisor restarts.
    port: u16,
    ns: TestNs,
    spec: PodSpec,
    /// The app's command (see [`RecordingApp::command`]).
    app: Vec<String>,
    pub proxy: Option<FaultProxy>,
    kubeconfig: PathBuf,
    /// The pod's elector (the one [`Pod::tend`] restarts).
    pub elector: Option<ElectorProcess>,
    elector_life: Life,
    supervisor: Option<ElectorProcess>,
    supervisor_life: Life,
    /// Electors of this pod that were killed or replaced, kept for their logs.
    pub retired: Vec<ElectorProcess>,
}

/// A fresh pod UID (RFC 4122 version 4, as the apiserver makes them).
pub fn random_uid() -> String {
    let mut b = [0u8; 16];
    let mut f = fs::File::open("/dev/urandom").expect("open /dev/urandom");
    std::io::Read::read_exact(&mut f, &mut b).expect("read /dev/urandom");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

impl Pod {
    /// A pod of the default spec, running.
    pub fn start(name: &str, ns: &TestNs) -> Pod {
        Self::start_spec(name, ns, PodSpec::default())
    }

    pub fn start_with(
        name: &str,
        ns: &TestNs,
        leader_crash_after: Option<&str>,
        supervisor_flags: &[&str],
    ) -> Pod {
        Self::start_spec(
            name,
            ns,
            PodSpec {
                leader_crash_after: leader_crash_after.map(str::to_owned),
                supervisor_flags: supervisor_flags.iter().map(|s| s.to_string()).collect(),
                ..PodSpec::default()
            },
        )
    }

    /// A pod of `spec`, running: its supervisor up (the toggle answers), then its elector.
    pub fn start_spec(name: &str, ns: &TestNs, spec: PodSpec) -> Pod {
        let mut pod = Self::new(name, None, ns, spec);
        pod.start_supervisor();
        assert!(
            wait_until(Duration::from_secs(20), POLL, || pod.toggle_up()),
            "{name}'s supervisor did not listen on its toggle\n{}",
            pod.supervisor_logs()
        );
        if pod.spec.app_container_down {
            pod.kill_app_container();
        }
        pod.start_elector();
        pod
    }

    /// A pod of `spec` in directory `dir` (a fresh temporary one when `None`), with nothing
    /// running yet: see [`Pod::start_processes`].
    pub fn new(name: &str, dir: Option<&Path>, ns: &TestNs, spec: PodSpec) -> Pod {
        let (dir, tempdir) = match dir {
            Some(dir) => {
                fs::create_dir_all(dir).expect("pod dir");
                (dir.to_owned(), None)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix(&format!("pme-pod-{name}-"))
                    .tempdir()
                    .expect("pod tempdir");
                (t.path().to_owned(), Some(t))
            }
        };
        let app = RecordingApp {
            dir: dir.clone(),
            program: spec.program,
            on_term: spec.on_term,
            runs: true,
            leader_crash_after: spec.leader_crash_after.clone(),
            idle: spec.app_idle,
        }
        .command();
        let proxy = spec.proxy.then(|| FaultProxy::start(ns.api_addr));
        let kubeconfig = match &proxy {
            Some(p) => p.kubeconfig_via(&ns.elector_kubeconfig),
            None => ns.elector_kubeconfig.clone(),
        };
        let uid = spec.uid.clone().unwrap_or_else(random_uid);
        Pod {
            name: name.to_owned(),
            uid,
            dir,
            _tempdir: tempdir,
            port: free_port(),
            ns: ns.clone(),
            spec,
            app,
            proxy,
            kubeconfig,
            elector: None,
            elector_life: Life::new(),
            supervisor: None,
            supervisor_life: Life::new(),
            retired: Vec::new(),
        }
    }

    /// Starts the supervisor, then the elector.
    pub fn start_processes(&mut self) {
        self.start_supervisor();
        self.start_elector();
    }

    /// A file in the pod's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn flag_file(&self) -> PathBuf {
        self.path("grant.json")
    }

    /// The ack file's object as JSON, if there is one.
    pub fn ack(&self) -> Option<serde_json::Value> {
        let bytes = fs::read(self.path("grant.json.ack")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The recording app's `runs` file, for [`crate::oracle::runs::Observer`].
    pub fn runs_file(&self) -> PathBuf {
        RecordingApp::runs_file(&self.dir)
    }

    /// The supervisor's `GET /mode`, as JSON.
    pub fn mode(&self) -> serde_json::Value {
        let (status, body) =
            crate::supervise::http(self.port, "GET", "/mode", b"").expect("GET /mode");
        assert_eq!(status, 200, "GET /mode: {body}");
        serde_json::from_str(&body).expect("GET /mode JSON")
    }

    fn toggle_up(&self) -> bool {
        crate::supervise::http(self.port, "GET", "/mode", b"").is_ok_and(|(s, _)| s == 200)
    }

    /// Starts another elector process in this pod (same flag file, toggle and proxy) with pod
    /// UID `uid` and `extra` flags; the pod's own is left alone.
    pub fn spawn_elector(&self, uid: Option<&str>, extra: &[&str]) -> ElectorProcess {
        let flag = self.flag_file().to_string_lossy().into_owned();
        let toggle = format!("http://127.0.0.1:{}/grant", self.port);
        let probe = self.spec.probe_addr.as_deref().unwrap_or("127.0.0.1:0");
        let mut args = vec![
            "--lease-name",
            &self.ns.lease_name,
            "--probe-addr",
            probe,
            "--flag-file",
            &flag,
            "--toggle-url",
            &toggle,
        ];
        if self.spec.timings.is_empty() {
            args.extend_from_slice(&FAST_TIMINGS);
        } else {
            args.extend(self.spec.timings.iter().map(String::as_str));
        }
        args.extend(self.spec.elector_flags.iter().map(String::as_str));
        args.extend_from_slice(extra);
        let product = self.product();
        ElectorProcess::elect_as(
            &product,
            &self.name,
            uid,
            &self.ns,
            &self.kubeconfig,
            &args,
            |_| {},
        )
    }

    fn product(&self) -> Product {
        self.spec.product.clone().unwrap_or_else(Product::native)
    }

    /// The UID the pod's electors are told, if any.
    fn elector_uid(&self) -> Option<String> {
        self.spec.electors_know_uid.then(|| self.uid.clone())
    }

    fn start_elector(&mut self) {
        self.restart_elector(&[]);
    }

    /// The supervisor runs under `setsid`, which execs in place (same PID): the supervisor
    /// leads a session of its own, and everything it starts stays in that session even in
    /// process groups of their own — the container, for [`Pod::crash_container`].
    fn start_supervisor(&mut self) {
        let flag = self.flag_file().to_string_lossy().into_owned();
        let listen = format!("127.0.0.1:{}", self.port);
        let product = self.product();
        let (program, prefix) = product.command(&[]);
        let program = program.to_str().expect("the product's path is UTF-8");
        let mut args = vec![program];
        args.extend(prefix);
        args.extend([
            "supervise",
            "--flag-file",
            &flag,
            "--listen",
            &listen,
            "--leader-env",
            "MODE=leader",
            "--follower-env",
            "MODE=follower",
            "--kill-grace",
            &self.spec.kill_grace,
        ]);
        args.extend(self.spec.supervisor_flags.iter().map(String::as_str));
        args.push("--");
        args.extend(self.app.iter().map(String::as_str));
        let name = format!("{}-supervise", self.name);
        let env: [(&str, &OsStr); 0] = [];
        let process = ElectorProcess::spawn_program(&name, &setsid(), &args, &env);
        self.supervisor = Some(process);
        self.supervisor_life.started = Instant::now();
        self.supervisor_life.starts += 1;
    }

    /// The `elect` flags of the electors started from now on (see [`PodSpec::elector_flags`]).
    pub fn set_elector_flags(&mut self, flags: &[&str]) {
        self.spec.elector_flags = flags.iter().map(|s| s.to_string()).collect();
    }

    /// The running elector.
    pub fn elector(&mut self) -> &mut ElectorProcess {
        self.elector.as_mut().expect("elector running")
    }

    /// SIGKILLs the pod's elector (an OOM kill, a crash) and keeps it for its logs.
    pub fn kill_elector(&mut self) {
        if let Some(mut e) = self.elector.take() {
            e.signal(Signal::SIGKILL);
            let _ = e.wait_exit(Duration::from_secs(10));
            self.retired.push(e);
        }
    }

    /// Starts the pod's elector again, as the kubelet restarts a container: same pod, same UID,
    /// same volume, with `extra` flags.
    pub fn restart_elector(&mut self, extra: &[&str]) {
        assert!(self.elector.is_none(), "kill the running elector first");
        let process = self.spawn_elector(self.elector_uid().as_deref(), extra);
        self.elector = Some(process);
        self.elector_life.started = Instant::now();
        self.elector_life.starts += 1;
    }

    /// SIGKILLs the elector and starts it again at once, as the kubelet restarts a crashed
    /// container the first time; `false` when no elector was running (nothing is started then:
    /// [`Pod::tend`] restarts it on its own schedule).
    pub fn restart_elector_in_place(&mut self) -> bool {
        let Some(p) = self.elector.as_mut() else {
            return false;
        };
        if !p.signal_if_running(Signal::SIGKILL) {
            return false;
        }
        let _ = p.wait_exit(Duration::from_secs(5));
        if let Some(p) = self.elector.take() {
            self.retire(Which::Elector, p);
        }
        self.elector_life.restart_at = None;
        self.start_elector();
        true
    }

    /// Every elector log of this pod, the retired ones first.
    pub fn elector_logs(&self) -> String {
        self.retired
            .iter()
            .chain(self.elector.iter())
            .map(ElectorProcess::logs)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Whether the supervisor's output (this run's) contains `needle`.
    pub fn supervisor_log_contains(&self, needle: &str) -> bool {
        self.supervisor_logs().contains(needle)
    }

    fn supervisor_logs(&self) -> String {
        self.supervisor
            .as_ref()
            .map(ElectorProcess::logs)
            .unwrap_or_default()
    }

    /// What the app runs of this pod recorded, in order of start.
    pub fn runs(&self) -> Vec<AppRun> {
        let text = fs::read_to_string(self.runs_file()).unwrap_or_default();
        let mut runs: Vec<AppRun> = Vec::new();
        for record in recording_app::parse_runs(&text).into_iter().flatten() {
            if record.stop {
                if let Some(run) = runs.iter_mut().rev().find(|r| r.pid == record.pid) {
                    run.stop = Some(record.at.as_secs_f64());
                }
            } else {
                runs.push(AppRun {
                    pid: record.pid,
                    role: record.mode,
                    start: record.at.as_secs_f64(),
                    stop: None,
                });
            }
        }
        runs
    }

    /// The app currently running in leader mode, if any.
    pub fn leading_app(&self) -> Option<AppRun> {
        self.runs()
            .into_iter()
            .find(|r| r.role == "leader" && r.stop.is_none())
    }

    /// Restarts an elector or supervisor that has exited, `restart_delay()` after it did, as
    /// the kubelet would; their logs are kept in the pod directory. Call it often.
    pub fn tend(&mut self, mut restart_delay: impl FnMut() -> Duration) {
        let now = Instant::now();
        for which in [Which::Elector, Which::Supervisor] {
            let exited = match (which, self.process(which).as_mut()) {
                (_, None) => true,
                (Which::Elector, Some(p)) => p.try_exit_status().is_some(),
                (Which::Supervisor, Some(p)) => {
                    // Not reaped yet, so its PID (the session ID) cannot have been reused:
                    // whatever the container left behind can be killed safely, then reaped.
                    let pid = p.pid().as_raw();
                    if !p.reaped() && process_state(pid) == Some('Z') {
                        kill_session(pid);
                    }
                    p.try_exit_status().is_some()
                }
            };
            if !exited {
                continue;
            }
            match self.life(which).restart_at {
                None => {
                    if let Some(p) = self.process(which).take() {
                        self.retire(which, p);
                    }
                    self.life(which).restart_at = Some(now + restart_delay());
                }
                Some(at) if now >= at => {
                    self.life(which).restart_at = None;
                    match which {
                        Which::Elector => self.start_elector(),
                        Which::Supervisor => self.start_supervisor(),
                    }
                }
                Some(_) => {}
            }
        }
    }

    /// Whether both processes run and have been up for at least `for_at_least`.
    pub fn settled(&self, for_at_least: Duration) -> bool {
        [
            (self.elector.is_some(), &self.elector_life),
            (self.supervisor.is_some(), &self.supervisor_life),
        ]
        .iter()
        .all(|(running, l)| {
            *running && l.restart_at.is_none() && l.started.elapsed() >= for_at_least
        })
    }

    pub fn signal_elector(&mut self, sig: Signal) -> bool {
        signal(self.elector.as_mut(), sig)
    }

    pub fn signal_supervisor(&mut self, sig: Signal) -> bool {
        signal(self.supervisor.as_mut(), sig)
    }

    /// Waits up to `timeout` for the supervisor to exit; its status.
    pub fn wait_supervisor_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        self.supervisor.as_mut()?.wait_exit(timeout)
    }

    /// Signals the app child (the group leader in the supervisor's session), if one runs.
    pub fn signal_child(&mut self, sig: Signal) -> bool {
        let Some(sid) = self.session() else {
            return false;
        };
        let child = session_members(sid)
            .into_iter()
            .find(|m| m.pid == m.pgid && m.pid != sid);
        match child {
            Some(m) => kill(Pid::from_raw(m.pid), sig).is_ok(),
            None => false,
        }
    }

    /// SIGCONT to every process of the supervisor's session (after a child was frozen; harmless
    /// to the ones that were not).
    pub fn continue_all(&mut self) {
        if let Some(sid) = self.session() {
            for m in session_members(sid) {
                let _ = kill(Pid::from_raw(m.pid), Signal::SIGCONT);
            }
        }
    }

    /// SIGKILLs the supervisor and then everything left in its session, as a container runtime
    /// tears down a container whose PID 1 died. [`Pod::tend`] restarts the supervisor later.
    pub fn crash_container(&mut self) -> bool {
        let Some(p) = self.supervisor.as_mut() else {
            return false;
        };
        // The supervisor is not reaped here (only `tend` reaps), so its PID stays the
        // session's ID for as long as the session is killed.
        let hit = p.signal_if_running(Signal::SIGKILL);
        if hit {
            kill_session(p.pid().as_raw());
        }
        hit
    }

    /// SIGKILLs the whole app container, as an OOM kill does: the supervisor and the app's
    /// process group, with no chance to write `stopped` to the ack file, and waits until the
    /// supervisor is gone. Returns when (boot clock seconds, as the apps record) the app was
    /// killed.
    pub fn kill_app_container(&mut self) -> f64 {
        let at = BootTime::now().as_secs_f64();
        let hit = self.crash_container();
        assert!(hit, "{}: no supervisor to kill", self.name);
        assert!(
            self.wait_supervisor_exit(Duration::from_secs(10)).is_some(),
            "the SIGKILLed supervisor did not exit"
        );
        at
    }

    /// The session ID of the running supervisor: its PID.
    fn session(&self) -> Option<i32> {
        let p = self.supervisor.as_ref()?;
        (!p.reaped()).then(|| p.pid().as_raw())
    }

    fn life(&mut self, which: Which) -> &mut Life {
        match which {
            Which::Elector => &mut self.elector_life,
            Which::Supervisor => &mut self.supervisor_life,
        }
    }

    fn process(&mut self, which: Which) -> &mut Option<ElectorProcess> {
        match which {
            Which::Elector => &mut self.elector,
            Which::Supervisor => &mut self.supervisor,
        }
    }

    /// Appends a finished process's output to `<pod dir>/<role>.log`; an elector is kept for
    /// [`Pod::elector_logs`] too.
    fn retire(&mut self, which: Which, p: ElectorProcess) {
        let file = match which {
            Which::Elector => "elector.log",
            Which::Supervisor => "supervisor.log",
        };
        if let Ok(mut f) = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(file))
        {
            let _ = writeln!(f, "=== pid {} ===\n{}", p.pid(), p.logs());
        }
        if let Which::Elector = which {
            self.retired.push(p);
        }
    }

    /// (elector starts, supervisor starts), the first start included.
    pub fn starts(&self) -> (u32, u32) {
        (self.elector_life.starts, self.supervisor_life.starts)
    }

    /// Stops everything: SIGKILL of both processes and the session.
    pub fn shut_down(&mut self) {
        if let Some(p) = self.supervisor.as_mut() {
            if p.signal_if_running(Signal::SIGKILL) {
                kill_session(p.pid().as_raw());
            }
        }
        for which in [Which::Elector, Which::Supervisor] {
            if let Some(mut p) = self.process(which).take() {
                let _ = p.signal_if_running(Signal::SIGKILL);
                let _ = p.wait_exit(Duration::from_secs(10));
                self.retire(which, p);
            }
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Waits until one pod (not `other_than`) runs its app in leader mode; its index.
pub fn wait_for_leading_pod(pods: &[Pod], timeout: Duration, other_than: Option<usize>) -> usize {
    let mut found = None;
    let ok = wait_until(timeout, POLL, || {
        found = (0..pods.len()).find(|&i| Some(i) != other_than && pods[i].leading_app().is_some());
        found.is_some()
    });
    assert!(ok, "no pod's app runs in leader mode within {timeout:?}");
    found.expect("checked")
}

/// Every pair of leader-mode app runs in different pods is disjoint in time.
pub fn assert_leader_runs_disjoint(pods: &[Pod]) {
    let runs: Vec<Vec<AppRun>> = pods.iter().map(Pod::runs).collect();
    crate::oracle::runs::assert_leader_runs_disjoint(&runs);
}

fn signal(process: Option<&mut ElectorProcess>, sig: Signal) -> bool {
    match process {
        Some(p) => p.signal_if_running(sig),
        None => false,
    }
}

/// Kills every live process of session `sid`, repeatedly until none is left (a fork in flight at
/// the first pass is caught by a later one). Bounded. Only call it while the session leader is
/// an unreaped child of ours, so `sid` cannot name a stranger's session.
fn kill_session(sid: i32) {
    for _ in 0..50 {
        let members = session_members(sid);
        if members.is_empty() {
            return;
        }
        for m in members {
            let _ = kill(Pid::from_raw(m.pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `T`, `Z`, ...).
fn process_state(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[derive(Debug)]
struct Member {
    pid: i32,
    pgid: i32,
}

/// Live (non-zombie) processes of session `sid`, from /proc.
fn session_members(sid: i32) -> Vec<Member> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        // state ppid pgrp session ...
        let f: Vec<&str> = rest.split_whitespace().take(4).collect();
        let (Some(state), Some(pgid), Some(session)) = (
            f.first(),
            f.get(2).and_then(|s| s.parse::<i32>().ok()),
            f.get(3).and_then(|s| s.parse::<i32>().ok()),
        ) else {
            continue;
        };
        if session == sid && *state != "Z" && *state != "X" {
            found.push(Member { pid, pgid });
        }
    }
    found
}

fn setsid() -> PathBuf {
    ["/usr/bin/setsid", "/bin/setsid"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("setsid(1) from util-linux is needed to give each supervisor its own session")
}
