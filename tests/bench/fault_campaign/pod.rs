//! One campaign "pod": an elector behind its own fault proxy, a supervisor in a session of its
//! own (its "container"), and the recording child it runs; restarted like a kubelet would.

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use pme_testkit::{ElectorProcess, FaultProxy, TestNs};

use super::schedule::{
    Rng, CHILD_BACKOFF_MAX, KILL_GRACE, LEASE_DURATION, RENEW_DEADLINE, RESTART_DELAY_MAX,
    RESTART_DELAY_MIN, RETRY_PERIOD,
};

/// The stand-in for Passmower. Its first act is its start record (PID, fork time in clock
/// ticks, `$ROLE`, wall clock in ns — `/proc/uptime` has only 10ms, too coarse for handovers that
/// take a few). Like a real app it is not instant to stop: on SIGTERM one in four (by PID)
/// ignores it and is SIGKILLed by the supervisor after the kill grace, the others finish
/// "in-flight work" for 0–900ms, then write the stop record and exit, doing nothing in between.
/// Otherwise it idles without forking, because PIDs are scarce (32768) and a campaign runs for
/// minutes. Needs GNU `date` (`%N`).
const CHILD_SCRIPT: &str = r#"#!/bin/sh
rec="$1"
ticks=$(cut -d' ' -f22 /proc/$$/stat)
echo "start $$ $ticks ${ROLE:-unset} $(date +%s%N)" >> "$rec"
on_term() {
  [ $(($$ % 4)) -eq 0 ] && return
  sleep "0.$(($$ % 10))"
  echo "stop $$ $ticks ${ROLE:-unset} $(date +%s%N)" >> "$rec"
  kill $! 2>/dev/null
  exit 0
}
trap on_term TERM
while :; do sleep 3600 & wait $!; done
"#;

/// Writes the child script into `dir` and returns its path.
pub fn write_child_script(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("pme-child");
    fs::write(&path, CHILD_SCRIPT).expect("write child script");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod child script");
    path
}

/// One of an elector's or supervisor's lives.
struct Life {
    process: Option<ElectorProcess>,
    /// When an exited process is started again.
    restart_at: Option<Instant>,
    /// When the current process started (for "has been up for a while").
    started: Instant,
    starts: u32,
}

pub struct Pod {
    pub name: String,
    /// The pod's UID, as the downward API gives it to every elector of the pod (`POD_UID`): an
    /// elector restarted in place adopts the Lease from its predecessor. `None`:
    /// electors without it, which never adopt.
    pub uid: Option<String>,
    dir: PathBuf,
    port: u16,
    ns: TestNs,
    child_script: PathBuf,
    pub proxy: FaultProxy,
    kubeconfig: PathBuf,
    elector: Life,
    supervisor: Life,
}

impl Pod {
    /// Prepares pod `index` under `root` (nothing runs yet; see [`Pod::start`]).
    pub fn new(
        index: usize,
        root: &Path,
        ns: &TestNs,
        api: std::net::SocketAddr,
        child_script: &Path,
        with_uid: bool,
    ) -> Pod {
        let name = format!("pod-{index}");
        let dir = root.join(&name);
        fs::create_dir_all(&dir).expect("pod dir");
        let proxy = FaultProxy::start(api);
        let kubeconfig = proxy.kubeconfig_via(&ns.elector_kubeconfig);
        let life = || Life {
            process: None,
            restart_at: None,
            started: Instant::now(),
            starts: 0,
        };
        Pod {
            name,
            // Unique per pod of a campaign; each campaign has its own Lease.
            uid: with_uid.then(|| format!("00000000-0000-4000-8000-{index:012x}")),
            dir,
            port: free_port(),
            ns: ns.clone(),
            child_script: child_script.to_owned(),
            proxy,
            kubeconfig,
            elector: life(),
            supervisor: life(),
        }
    }

    pub fn flag_file(&self) -> PathBuf {
        self.dir.join("grant.json")
    }

    pub fn records(&self) -> PathBuf {
        self.dir.join("records")
    }

    pub fn start(&mut self) {
        self.start_supervisor();
        self.start_elector();
    }

    fn start_elector(&mut self) {
        let flag = self.flag_file().to_string_lossy().into_owned();
        let toggle = format!("http://127.0.0.1:{}/grant", self.port);
        let (d, r, p, k) = (
            human(LEASE_DURATION),
            human(RENEW_DEADLINE),
            human(RETRY_PERIOD),
            human(KILL_GRACE),
        );
        let args = [
            "--lease-name",
            &self.ns.lease_name,
            "--lease-duration",
            &d,
            "--renew-deadline",
            &r,
            "--retry-period",
            &p,
            "--kill-grace",
            &k,
            "--probe-addr",
            "127.0.0.1:0",
            "--flag-file",
            &flag,
            "--toggle-url",
            &toggle,
        ];
        let process = ElectorProcess::elect_in_pod(
            &self.name,
            self.uid.as_deref(),
            &self.ns,
            &self.kubeconfig,
            &args,
            |_| {},
        );
        self.elector.process = Some(process);
        self.elector.started = Instant::now();
        self.elector.starts += 1;
    }

    /// The supervisor runs under `setsid`, which execs in place (same PID): the supervisor
    /// leads a session of its own, and everything it starts stays in that session even in
    /// process groups of their own — the container, for [`Pod::crash_container`].
    fn start_supervisor(&mut self) {
        let flag = self.flag_file().to_string_lossy().into_owned();
        let listen = format!("127.0.0.1:{}", self.port);
        let records = self.records().to_string_lossy().into_owned();
        let script = self.child_script.to_string_lossy().into_owned();
        let (k, backoff) = (human(KILL_GRACE), human(CHILD_BACKOFF_MAX));
        let bin = env!("CARGO_BIN_EXE_passmower-elector");
        // PME_CAMPAIGN_ON_CHANGE=leader-instance runs the campaign against a separate leader
        // instance beside an always-running follower one; the oracle counts leader children.
        let on_change = std::env::var("PME_CAMPAIGN_ON_CHANGE")
            .map(|v| format!("--on-change={v}"))
            .unwrap_or_else(|_| "--on-change=restart".to_owned());
        let args = [
            bin,
            "supervise",
            &on_change,
            "--flag-file",
            &flag,
            "--listen",
            &listen,
            "--leader-env",
            "ROLE=leader",
            "--follower-env",
            "ROLE=follower",
            "--kill-grace",
            &k,
            "--restart-backoff-max",
            &backoff,
            "--",
            &script,
            &records,
        ];
        let name = format!("{}-supervise", self.name);
        let env: [(&str, &OsStr); 0] = [];
        let process = ElectorProcess::spawn_program(&name, &setsid(), &args, &env);
        self.supervisor.process = Some(process);
        self.supervisor.started = Instant::now();
        self.supervisor.starts += 1;
    }

    /// Restarts an elector or supervisor that has exited, after a random delay as the kubelet
    /// would; their logs are kept in the pod directory. Call it often.
    pub fn tend(&mut self, rng: &mut Rng) {
        let now = Instant::now();
        for which in [Which::Elector, Which::Supervisor] {
            let exited = match (which, self.life(which).process.as_mut()) {
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
            let dir = self.dir.clone();
            let life = self.life(which);
            match life.restart_at {
                None => {
                    if let Some(p) = life.process.take() {
                        archive(&dir, which, &p);
                    }
                    life.restart_at = Some(now + rng.between(RESTART_DELAY_MIN, RESTART_DELAY_MAX));
                }
                Some(at) if now >= at => {
                    life.restart_at = None;
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
        [&self.elector, &self.supervisor].iter().all(|l| {
            l.process.is_some() && l.restart_at.is_none() && l.started.elapsed() >= for_at_least
        })
    }

    pub fn signal_elector(&mut self, sig: Signal) -> bool {
        signal(self.elector.process.as_mut(), sig)
    }

    /// SIGKILLs the elector and starts it again at once, as the kubelet restarts a crashed
    /// container the first time; `false` when no elector was running (nothing is started then:
    /// `tend` restarts it on its own schedule).
    pub fn restart_elector_in_place(&mut self) -> bool {
        let Some(p) = self.elector.process.as_mut() else {
            return false;
        };
        if !p.signal_if_running(Signal::SIGKILL) {
            return false;
        }
        let _ = p.wait_exit(Duration::from_secs(5));
        if let Some(p) = self.elector.process.take() {
            archive(&self.dir, Which::Elector, &p);
        }
        self.elector.restart_at = None;
        self.start_elector();
        true
    }

    pub fn signal_supervisor(&mut self, sig: Signal) -> bool {
        signal(self.supervisor.process.as_mut(), sig)
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
    /// tears down a container whose PID 1 died. The harness restarts the supervisor later.
    pub fn crash_container(&mut self) -> bool {
        let Some(p) = self.supervisor.process.as_mut() else {
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

    /// The session ID of the running supervisor: its PID.
    fn session(&self) -> Option<i32> {
        let p = self.supervisor.process.as_ref()?;
        (!p.reaped()).then(|| p.pid().as_raw())
    }

    fn life(&mut self, which: Which) -> &mut Life {
        match which {
            Which::Elector => &mut self.elector,
            Which::Supervisor => &mut self.supervisor,
        }
    }

    /// (elector starts, supervisor starts), the first start included.
    pub fn starts(&self) -> (u32, u32) {
        (self.elector.starts, self.supervisor.starts)
    }

    /// Stops everything: SIGKILL of both processes and the session (the campaign is over; a
    /// graceful stop would only add a last handover to the record).
    pub fn shut_down(&mut self) {
        if let Some(p) = self.supervisor.process.as_mut() {
            if p.signal_if_running(Signal::SIGKILL) {
                kill_session(p.pid().as_raw());
            }
        }
        for which in [Which::Elector, Which::Supervisor] {
            let dir = self.dir.clone();
            if let Some(mut p) = self.life(which).process.take() {
                let _ = p.signal_if_running(Signal::SIGKILL);
                let _ = p.wait_exit(Duration::from_secs(10));
                archive(&dir, which, &p);
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Which {
    Elector,
    Supervisor,
}

fn signal(process: Option<&mut ElectorProcess>, sig: Signal) -> bool {
    match process {
        Some(p) => p.signal_if_running(sig),
        None => false,
    }
}

/// Appends a finished process's output to `<pod dir>/<role>.log`.
fn archive(dir: &Path, which: Which, p: &ElectorProcess) {
    let file = match which {
        Which::Elector => "elector.log",
        Which::Supervisor => "supervisor.log",
    };
    if let Ok(mut f) = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(file))
    {
        let _ = writeln!(f, "=== pid {} ===\n{}", p.pid(), p.logs());
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

/// A free loopback port for the supervisor's toggle; kept for the pod's whole life, so the
/// elector's `--toggle-url` stays valid across supervisor restarts.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free loopback port")
}

fn human(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}
