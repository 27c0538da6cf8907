//! One pod's wall clock put ahead, for the real-pod fault `clock-skew`: libfaketime (in the
//! test bed's Passmower image, `scripts/build-node-images.sh`) is preloaded into every app
//! container, and reads its offset from a file on an `emptyDir` of the pod's own, which only
//! the test writes (through `/proc/<pid>/root` of a process of that container). A Deployment
//! gives every pod the same environment; the volume is what tells one pod from the others.
//!
//! Only the app container's clock moves: the elector's container, the kubelet and the apiserver
//! keep the real time, and so does `supervise` (a static binary, which ignores `LD_PRELOAD`).
//! The monotonic clocks are left alone (`FAKETIME_DONT_FAKE_MONOTONIC`), as a wrong wall clock
//! leaves them in a real pod. libfaketime reads the file again once a second
//! (`FAKETIME_CACHE_DURATION`); while it is absent the clock is the real one.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;

use super::passmower::APP_CONTAINER;
use super::single_writer::{app_processes, STANDBY_FD_VAR};
use super::{pods, Node};
use crate::supervise::environ_var;

/// The volume (an `emptyDir`, one per pod) and where the app container has it.
pub const VOLUME: &str = "pme-faketime";
pub const MOUNT: &str = "/pme-faketime";
/// The offset file libfaketime reads: `+60s` puts the clock 60 s ahead, `+0s` back.
pub const OFFSET_FILE: &str = "/pme-faketime/offset";

/// libfaketime's thread-safe build (Node.js has threads), where Debian installs it.
#[cfg(target_arch = "x86_64")]
pub const LIBRARY: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
#[cfg(target_arch = "aarch64")]
pub const LIBRARY: &str = "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1";

/// The app container's environment for it: the preload, the file, real monotonic clocks, and
/// the offset read again every second.
pub const ENV: [(&str, &str); 4] = [
    ("LD_PRELOAD", LIBRARY),
    ("FAKETIME_TIMESTAMP_FILE", OFFSET_FILE),
    ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ("FAKETIME_CACHE_DURATION", "1"),
];

/// The post-render stage that gives the `passmower` container of every Deployment the volume
/// (file name, Python source; see `Install::install_with_stages`).
pub const STAGE: (&str, &str) = ("add-faketime-volume.py", ADD_VOLUME_PY);

const ADD_VOLUME_PY: &str = r#"import sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d is not None]
for d in docs:
    if d.get("kind") != "Deployment":
        continue
    spec = d["spec"]["template"]["spec"]
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") != "pme-faketime"]
    spec["volumes"].append({"name": "pme-faketime", "emptyDir": {"medium": "Memory"}})
    for c in spec.get("containers", []):
        if c.get("name") != "passmower":
            continue
        mounts = [m for m in c.get("volumeMounts") or [] if m.get("name") != "pme-faketime"]
        c["volumeMounts"] = mounts + [{"name": "pme-faketime", "mountPath": "/pme-faketime"}]
yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
"#;

/// What one look at a pod's app clock found.
#[derive(Clone, Debug)]
pub struct ClockReading {
    /// `Date.now()` in the app container minus the test's own wall clock, in seconds (the
    /// midpoint of the run: ± a few hundred ms for Node.js's start).
    pub ahead_s: f64,
    /// Whether the running Passmower process has libfaketime mapped (it was preloaded).
    pub preloaded: bool,
    /// The Passmower process looked at.
    pub pid: i32,
}

impl Node {
    /// Writes `offset` (libfaketime's syntax: `+60s`, `+0s`) into `pod`'s offset file, through
    /// the root of a process of its app container, atomically (temp file, rename).
    pub fn set_app_clock_offset(&self, pod: &Pod, offset: &str) -> Result<(), String> {
        let pid = self.app_container_pid(pod)?;
        let dir = PathBuf::from(format!("/proc/{pid}/root{MOUNT}"));
        let tmp = dir.join(".offset.tmp");
        let mut f =
            std::fs::File::create(&tmp).map_err(|e| format!("create {}: {e}", tmp.display()))?;
        writeln!(f, "{offset}")
            .and_then(|()| f.sync_all())
            .map_err(|e| format!("write {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, dir.join("offset"))
            .map_err(|e| format!("rename into {}: {e}", dir.display()))
    }

    /// Reads the app clock of `pod`: runs `node -e 'Date.now()'` inside its app container (its
    /// mount namespace and root, with the environment of its running Passmower process, so the
    /// same preload and file) and compares with the test's clock.
    pub fn app_clock(&self, pod: &Pod) -> Result<ClockReading, String> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        // Not a standby-born leader instance: its environment holds the standby's preload and
        // pipe, which a fresh `node -e` cannot use. PIDs wrap, so the serving instance need not
        // be the first listed.
        let (pid, environ) = app_processes(self, pod)
            .into_iter()
            .filter_map(|(pid, _)| {
                let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
                environ_var(&environ, STANDBY_FD_VAR)
                    .is_none()
                    .then_some((pid, environ))
            })
            .next()
            .ok_or_else(|| {
                format!("no Passmower process in {name} whose environment can be read and was not a standby")
            })?;
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        let preloaded = maps.contains("libfaketime");
        let vars: Vec<String> = environ
            .split(|b| *b == 0)
            .filter(|kv| !kv.is_empty())
            .map(|kv| String::from_utf8_lossy(kv).into_owned())
            .collect();
        let before = unix_ms();
        // nsenter itself runs with a clean environment (the host has no such file to read);
        // `env -i` in the container gives node the process's.
        let out = Command::new("nsenter")
            .arg(format!("--target={pid}"))
            .args(["--mount", "--root", "--wd", "--", "/usr/bin/env", "-i"])
            .args(&vars)
            .args([
                "/usr/local/bin/node",
                "-e",
                "process.stdout.write(String(Date.now()))",
            ])
            .env_clear()
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run nsenter: {e}"))?;
        let after = unix_ms();
        if !out.status.success() {
            return Err(format!(
                "node -e Date.now() in {name}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let inside: f64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|e| format!("Date.now() in {name}: {e}: {:?}", out.stdout))?;
        Ok(ClockReading {
            ahead_s: (inside - (before + after) / 2.0) / 1000.0,
            preloaded,
            pid,
        })
    }

    /// Waits up to `timeout` until `pod`'s app clock is `ahead_s` ± 5 s ahead (libfaketime
    /// reads the file again every second); returns the last reading either way.
    pub fn wait_app_clock(
        &self,
        pod: &Pod,
        ahead_s: f64,
        timeout: Duration,
    ) -> Result<ClockReading, String> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let reading = self.app_clock(pod);
            let done = reading
                .as_ref()
                .is_ok_and(|r| (r.ahead_s - ahead_s).abs() < 5.0);
            if done || std::time::Instant::now() >= deadline {
                return reading;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// A process of `pod`'s app container (any: they share its mount namespace).
    fn app_container_pid(&self, pod: &Pod) -> Result<i32, String> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let id = pods::container_id(pod, APP_CONTAINER)
            .ok_or_else(|| format!("no {APP_CONTAINER} container in {name}"))?;
        self.container_pids(&id)
            .first()
            .copied()
            .ok_or_else(|| format!("no process in the {APP_CONTAINER} container of {name}"))
    }
}

fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// The fault: puts `pod`'s app clock `skew` ahead, checks it moved there and nowhere else,
/// creates OIDCClient `client_name`, holds for `hold`, reports what the Lease says then (the
/// holder, and how far its `renewTime` lies ahead of the real clock: an election that writes
/// its own wall clock there shows the skew), and puts the clock back. Returns the fault's
/// instant (µs since the epoch, when the offset file was written).
pub async fn skew_one_app(
    node: &'static Node,
    install: &super::passmower::Install,
    pod: &Pod,
    skew: Duration,
    hold: Duration,
    client_name: &str,
) -> i64 {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let offset = format!("+{}s", skew.as_secs());
    let t_fault = super::audit::now_us();
    let started = std::time::Instant::now();
    node.set_app_clock_offset(pod, &offset)
        .unwrap_or_else(|e| panic!("clock-skew: set the offset of {name}: {e}"));
    let client = node.admin_client().await;
    install.create_client(&client, client_name).await;
    let (p, others) = (pod.clone(), install.pods(&client).await);
    let want = skew.as_secs_f64();
    let (skewed, rest) = tokio::task::spawn_blocking(move || {
        let skewed = node.wait_app_clock(&p, want, Duration::from_secs(10));
        let rest: Vec<(String, Result<ClockReading, String>)> = others
            .iter()
            .filter(|o| o.metadata.name != p.metadata.name)
            .map(|o| {
                (
                    o.metadata.name.clone().unwrap_or_default(),
                    node.app_clock(o),
                )
            })
            .collect();
        (skewed, rest)
    })
    .await
    .expect("read the app clocks");
    let skewed = skewed.unwrap_or_else(|e| panic!("clock-skew: read the clock of {name}: {e}"));
    // The fault is what it says: this app's clock moved, with libfaketime loaded, and no
    // other app's did.
    assert!(
        skewed.preloaded && (skewed.ahead_s - want).abs() < 5.0,
        "clock-skew: {name}'s app clock is {:.1} s ahead (libfaketime mapped: {}), not {want} s",
        skewed.ahead_s,
        skewed.preloaded
    );
    for (other, reading) in &rest {
        let r = reading
            .as_ref()
            .unwrap_or_else(|e| panic!("clock-skew: read the clock of {other}: {e}"));
        assert!(
            r.ahead_s.abs() < 5.0,
            "clock-skew: {other}'s app clock moved too ({:.1} s)",
            r.ahead_s
        );
    }
    tokio::time::sleep(hold.saturating_sub(started.elapsed())).await;
    let lease = install.lease_spec(&client).await;
    let holder = lease
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default();
    let renew_ahead = lease
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| (t.0.as_microsecond() - super::audit::now_us()) as f64 / 1e6);
    node.set_app_clock_offset(pod, "+0s")
        .unwrap_or_else(|e| panic!("clock-skew: put the clock of {name} back: {e}"));
    super::report(&format!(
        "clock-skew: {name} (follower) app clock {:+.1} s (Date.now() in its container, libfaketime in PID {}), other apps {} for {:.1} s; then Lease {} held by {holder:?}, renewTime {} the real clock",
        skewed.ahead_s,
        skewed.pid,
        rest.iter()
            .map(|(n, r)| format!(
                "{n} {}",
                r.as_ref().map_or("?".into(), |r| format!("{:+.1} s", r.ahead_s))
            ))
            .collect::<Vec<_>>()
            .join(", "),
        started.elapsed().as_secs_f64(),
        install.election.lease_name(),
        renew_ahead.map_or("unset, vs".into(), |s| format!("{s:+.1} s from")),
    ));
    t_fault
}
