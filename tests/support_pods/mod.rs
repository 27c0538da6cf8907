//! Whole "pods" against the real kube-apiserver: in each, the real elector pushes to the real
//! supervisor, which runs a recording stand-in app; what the apps recorded is the ground truth
//! (which pod ran in leader mode, and when). Each pod has a UID, given to its electors as the
//! downward API would (`POD_UID`), and may reach the apiserver through a fault proxy of its own.
#![allow(dead_code)] // each test file uses a different part of the harness

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::{self, wait_until, ElectorProcess, FaultProxy, TestNs};
use crate::support_supervise::{Sandbox, Supervisor};

pub const POLL: Duration = Duration::from_millis(10);

/// What a stand-in app recorded: its pid, the mode it ran in, and when it started and stopped
/// (CLOCK_BOOTTIME seconds from /proc/uptime; the margins checked are a second or more).
#[derive(Clone, Debug)]
pub struct AppRun {
    pub pid: i32,
    pub role: String,
    pub start: f64,
    pub stop: Option<f64>,
}

/// How a pod is made.
#[derive(Clone, Debug, Default)]
pub struct PodSpec {
    /// The app exits 1 this long (sh `sleep` syntax) after starting in leader mode: an app that
    /// cannot run as leader.
    pub leader_crash_after: Option<String>,
    pub supervisor_flags: Vec<String>,
    /// `elect` flags besides the Lease, probe, flag file, toggle and the fast timings.
    pub elector_flags: Vec<String>,
    /// Reach the apiserver through a [`FaultProxy`] of the pod's own.
    pub proxy: bool,
    /// The four election timings as `elect` flags; [`support::FAST_TIMINGS`] when empty.
    pub timings: Vec<String>,
    /// The app container is down before the elector starts (its image could not be pulled, it
    /// was OOM-killed): nothing listens on the toggle and nothing reads the flag file.
    pub app_container_down: bool,
    /// The stand-in app is a Node.js program ([`node_app_command`]) instead of a shell script,
    /// for the supervisor's Node-only modes (`--leader-port-map`, `--leader-standby`).
    pub node_app: bool,
    /// The pod's UID (a Pod object's, when the test made one); a random one when unset.
    pub uid: Option<String>,
    /// The elector's `--probe-addr`; `127.0.0.1:0` (any free port) when unset.
    pub probe_addr: Option<String>,
}

pub struct Pod {
    pub name: String,
    /// `metadata.uid` as the downward API gives it to the pod's electors.
    pub uid: String,
    pub sandbox: Sandbox,
    pub supervisor: Supervisor,
    pub elector: Option<ElectorProcess>,
    /// Electors of this pod that were killed or replaced, kept for their logs.
    pub retired: Vec<ElectorProcess>,
    pub proxy: Option<FaultProxy>,
    spec: PodSpec,
    ns: TestNs,
}

/// The stand-in app: records its start and stop; `leader_crash_after`, if set, makes it exit 1
/// that long after starting in leader mode (an app that cannot run as leader).
pub fn app_script(sandbox: &Sandbox, leader_crash_after: Option<&str>) -> String {
    let records = sandbox.path("runs");
    let crash = match leader_crash_after {
        Some(after) => format!(
            r#"if [ "$ROLE" = leader ]; then sleep {after}; echo "stop $$ $ROLE $(now)" >> {records}; exit 1; fi"#,
            records = records.display()
        ),
        None => String::new(),
    };
    let app = sandbox.script(
        "app.sh",
        &format!(
            r#"now() {{ cut -d' ' -f1 /proc/uptime; }}
echo "start $$ $ROLE $(now)" >> {records}
trap 'echo "stop $$ $ROLE $(now)" >> {records}; exit 0' TERM
{crash}
while :; do sleep 0.05 & wait $!; done"#,
            records = records.display()
        ),
    );
    app.to_string_lossy().into_owned()
}

/// The stand-in app as a Node.js program, recording as [`app_script`]'s does (`start` when its
/// first line runs, `stop` on SIGTERM), from a directory laid out as an npm install (a
/// `package.json`, no dependencies). Returns the command (`node PATH`).
pub fn node_app_command(sandbox: &Sandbox) -> Vec<String> {
    let records = sandbox.path("runs");
    std::fs::write(
        sandbox.path("package.json"),
        r#"{"name":"stand-in","type":"module"}"#,
    )
    .expect("write package.json");
    let js = sandbox.path("app.mjs");
    std::fs::write(
        &js,
        format!(
            r#"import fs from 'node:fs';
const now = () => fs.readFileSync('/proc/uptime', 'utf8').split(' ')[0];
const role = process.env.ROLE;
// The handler before the start record: a test that saw the start may stop the app.
process.on('SIGTERM', () => {{
  fs.appendFileSync('{records}', `stop ${{process.pid}} ${{role}} ${{now()}}\n`);
  process.exit(0);
}});
fs.appendFileSync('{records}', `start ${{process.pid}} ${{role}} ${{now()}}\n`);
setInterval(() => {{}}, 1 << 30);
"#,
            records = records.display()
        ),
    )
    .expect("write app.mjs");
    vec!["node".to_owned(), js.to_string_lossy().into_owned()]
}

/// A fresh pod UID (RFC 4122 version 4, as the apiserver makes them).
pub fn random_uid() -> String {
    let mut b = [0u8; 16];
    let mut f = std::fs::File::open("/dev/urandom").expect("open /dev/urandom");
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

    pub fn start_spec(name: &str, ns: &TestNs, spec: PodSpec) -> Pod {
        let sandbox = Sandbox::new();
        // The sandbox plays an elector for the supervisor's own tests: remove its token, so
        // the pod starts as a real one does, with nothing on the volume.
        let _ = std::fs::remove_file(sandbox.token_file());
        let app = if spec.node_app {
            node_app_command(&sandbox)
        } else {
            vec![app_script(&sandbox, spec.leader_crash_after.as_deref())]
        };
        let mut flags: Vec<&str> = vec![
            "--leader-env",
            "ROLE=leader",
            "--follower-env",
            "ROLE=follower",
            "--kill-grace",
            "1s",
        ];
        flags.extend(spec.supervisor_flags.iter().map(String::as_str));
        let app: Vec<&str> = app.iter().map(String::as_str).collect();
        let supervisor = Supervisor::start(&sandbox, &flags, &app);
        let proxy = spec
            .proxy
            .then(|| FaultProxy::start(support::Cluster::shared().api_addr()));
        let mut pod = Pod {
            name: name.to_owned(),
            uid: spec.uid.clone().unwrap_or_else(random_uid),
            sandbox,
            supervisor,
            elector: None,
            retired: Vec::new(),
            proxy,
            spec,
            ns: ns.clone(),
        };
        if pod.spec.app_container_down {
            pod.kill_app_container();
        }
        pod.elector = Some(pod.spawn_elector(Some(&pod.uid.clone()), &[]));
        pod
    }

    /// SIGKILLs the whole app container, as an OOM kill does: the supervisor and the app's
    /// process group, with no chance to write `stopped` to the ack file. Returns when (boot
    /// clock seconds, as the apps record) the app was killed.
    pub fn kill_app_container(&mut self) -> f64 {
        let app = self.supervisor.mode()["child_pid"].as_i64();
        let at = crate::support_supervise::boot_secs();
        if let Some(app) = app {
            // The supervisor starts each app in a process group of its own.
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(-(app as i32)), Signal::SIGKILL);
        }
        self.supervisor.signal(Signal::SIGKILL);
        assert!(
            self.supervisor.wait_exit(Duration::from_secs(10)).is_some(),
            "the SIGKILLed supervisor did not exit"
        );
        at
    }

    /// Starts another elector process in this pod (same flag file, toggle and proxy) with pod
    /// UID `uid` and `extra` flags; the pod's own is left alone.
    pub fn spawn_elector(&self, uid: Option<&str>, extra: &[&str]) -> ElectorProcess {
        let flag = self.sandbox.flag_file().to_string_lossy().into_owned();
        let toggle = format!("http://127.0.0.1:{}/grant", self.supervisor.port);
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
            args.extend_from_slice(&support::FAST_TIMINGS);
        } else {
            args.extend(self.spec.timings.iter().map(String::as_str));
        }
        args.extend(self.spec.elector_flags.iter().map(String::as_str));
        args.extend_from_slice(extra);
        let kubeconfig = match &self.proxy {
            Some(p) => p.kubeconfig_via(&self.ns.elector_kubeconfig),
            None => self.ns.elector_kubeconfig.clone(),
        };
        ElectorProcess::elect_in_pod(&self.name, uid, &self.ns, &kubeconfig, &args, |_| {})
    }

    /// The `elect` flags of the electors started from now on (see [`PodSpec::elector_flags`]).
    pub fn set_elector_flags(&mut self, flags: &[&str]) {
        self.spec.elector_flags = flags.iter().map(|s| s.to_string()).collect();
    }

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
    /// same volume.
    pub fn restart_elector(&mut self, extra: &[&str]) {
        assert!(self.elector.is_none(), "kill the running elector first");
        self.elector = Some(self.spawn_elector(Some(&self.uid.clone()), extra));
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

    pub fn runs(&self) -> Vec<AppRun> {
        let mut runs: Vec<AppRun> = Vec::new();
        for line in self.sandbox.lines("runs") {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [kind, pid, role, at] = f.as_slice() else {
                continue;
            };
            let (Ok(pid), Ok(at)) = (pid.parse::<i32>(), at.parse::<f64>()) else {
                continue;
            };
            match *kind {
                "start" => runs.push(AppRun {
                    pid,
                    role: role.to_string(),
                    start: at,
                    stop: None,
                }),
                "stop" => {
                    if let Some(run) = runs.iter_mut().find(|r| r.pid == pid) {
                        run.stop = Some(at);
                    }
                }
                _ => {}
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
}

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
    let runs: Vec<(usize, AppRun)> = pods
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            p.runs()
                .into_iter()
                .filter(|r| r.role == "leader")
                .map(move |r| (i, r))
        })
        .collect();
    for (i, a) in &runs {
        for (j, b) in &runs {
            if i < j {
                let a_end = a.stop.unwrap_or(f64::MAX);
                let b_end = b.stop.unwrap_or(f64::MAX);
                assert!(
                    a_end <= b.start || b_end <= a.start,
                    "two apps in leader mode at once: pod {i} {a:?} and pod {j} {b:?}"
                );
            }
        }
    }
}
