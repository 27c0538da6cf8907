//! `supervise --on-change=lease-bridge` with the real Passmower 2.4 (`PME_PASSMOWER_APP_24`), the
//! real elector, the real kube-apiserver and Redis: one Passmower process per pod, upstream's
//! election on and answered from the pod's grant.
//!
//! Two processes-as-pods (sandbox, supervisor, elector) share the elector's Lease. Pod A leads
//! and reconciles a client; pod B joins; A's elector is stopped (a graceful handover: follower
//! written, the ack awaited, the Lease released), so A's one process is killed and the supervisor
//! acks only once it is gone (an in-process stand-down let a reconcile already in flight write
//! to Redis after the ack, which is why a demotion ends the process); B leads and reconciles the
//! next client. Then B goes, and a client created with only A's new follower process left must
//! stay unreconciled. Redis `MONITOR` records every `oidc:Client:*` write by A's connections
//! after its ack, and the apps' own "Acquired"/"Lost the operator lease" lines (a killed
//! process's tenure ends when its supervisor reaped it) give each process's tenure, which must
//! never overlap. Upstream's Lease
//! (`passmower-operators`) must never be created: no traffic for it reaches the apiserver.
//!
//! A second run freezes A's elector (SIGSTOP) instead: A's grant lapses, its supervisor demotes
//! on its own, and the same checks hold against B, which can lead only after the lease duration.
//!
//! The pods share one network namespace here, so the port map's preload moves each process's
//! fixed metrics port 9090 (as in `native_election.rs`); it loads after the bridge's.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DynamicObject, PostParams};
use nix::sys::signal::Signal;
use passmower_elector::inject::native_election::DEFAULT_NATIVE_LEASE;
use pme_testkit::fence::{create_client, install_crds_of, oidc_clients};
use pme_testkit::free_port;
use pme_testkit::passmower::{passmower_keys, start_redis};
use pme_testkit::supervise::{Sandbox, Supervisor};
use pme_testkit::{Cluster, ElectorProcess, TestNs};
use serde_json::json;

const LEASE: &str = "passmower";
const IDLE: &str = "passmower-elector_idle";
/// Election timings with a kill grace the bridge accepts (at least 3s): R + K + 1s < D.
const TIMINGS: [&str; 8] = [
    "--lease-duration",
    "8s",
    "--renew-deadline",
    "2s",
    "--retry-period",
    "500ms",
    "--kill-grace",
    "4s",
];
const RECONCILE_LIMIT: Duration = Duration::from_secs(40);
const ACK_LIMIT: Duration = Duration::from_secs(40);
/// How long a client created with only the demoted pod left stays watched for a reconcile.
const QUIET: Duration = Duration::from_secs(12);
/// Redis commands that change a key.
const REDIS_WRITES: &[&str] = &[
    "SET",
    "SETEX",
    "PSETEX",
    "SETNX",
    "GETSET",
    "GETDEL",
    "DEL",
    "UNLINK",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "PERSIST",
    "HSET",
    "HMSET",
    "HSETNX",
    "HDEL",
    "SADD",
    "SREM",
    "ZADD",
    "ZREM",
    "RENAME",
    "APPEND",
    "INCR",
    "DECR",
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tree() -> PathBuf {
    std::env::var_os("PME_UPSTREAM_24")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/upstream/passmower-with-election"))
}

struct Bed {
    cluster: Cluster,
    ns: TestNs,
    app: PathBuf,
    redis_port: u16,
    keys: (String, String),
    preload: PathBuf,
    _dir: tempfile::TempDir,
}

async fn setup() -> Option<Bed> {
    let app = pme_testkit::passmower::app_dir(
        "PME_PASSMOWER_APP_24",
        "Point it at a copy of ../shared/upstream/passmower-with-election after `npm install \
         --omit=dev` (`PME_UPSTREAM=../shared/upstream/passmower-with-election scripts/build-passmower-app.sh`)",
    )?;
    let cluster = Cluster::start_private();
    let admin = cluster.admin_client().await;
    install_crds_of(&admin, &tree()).await;
    let ns = cluster
        .new_namespace_with(LEASE, &crate::product::elector_lease_rules(LEASE))
        .await;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("passmower-all-{}", ns.name)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "passmower", "namespace": ns.name}],
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind cluster-admin to the pods' ServiceAccount");
    let dir = tempfile::tempdir().expect("tempdir");
    let preload = dir.path().join("port-map-preload.mjs");
    std::fs::write(
        &preload,
        include_str!("../../src/supervise/leader_instance/port_map/preload.mjs"),
    )
    .expect("write the preload");
    Some(Bed {
        cluster,
        ns,
        app,
        redis_port: free_port(),
        keys: passmower_keys(),
        preload,
        _dir: dir,
    })
}

struct Pod {
    name: String,
    sandbox: Sandbox,
    supervisor: Option<Supervisor>,
    elector: Option<ElectorProcess>,
    log: PathBuf,
}

impl Pod {
    /// The app container, as `inject` leaves it for 2.4 (`LEADER_ELECTION_ENABLED=false` in the
    /// container's env), under `supervise --on-change=lease-bridge`.
    fn start(bed: &Bed, name: &str) -> Pod {
        let sandbox = Sandbox::new();
        let log = sandbox.path("passmower.log");
        let ns = &bed.ns.name;
        let env: Vec<(String, String)> = vec![
            ("DEPLOYMENT_NAME".into(), "passmower".into()),
            ("POD_NAME".into(), name.into()),
            ("LEADER_ELECTION_ENABLED".into(), "false".into()),
            (
                "KUBECONFIG".into(),
                bed.ns.elector_kubeconfig.display().to_string(),
            ),
            ("POD_NAMESPACE".into(), ns.clone()),
            ("ISSUER_URL".into(), "https://passmower.example.com/".into()),
            (
                "REDIS_URI".into(),
                format!("redis://127.0.0.1:{}", bed.redis_port),
            ),
            ("OIDC_JWKS".into(), bed.keys.0.clone()),
            ("OIDC_COOKIE_KEYS".into(), bed.keys.1.clone()),
            ("OUTBOUND_EMAIL_ENABLED".into(), "false".into()),
            ("PORT".into(), free_port().to_string()),
            (
                "NODE_OPTIONS".into(),
                format!("--import=file://{}", bed.preload.display()),
            ),
            ("PASSMOWER_ELECTOR_PORT_MAP".into(), "9090=0".into()),
            ("KUBERNETES_SERVICE_HOST".into(), String::new()),
        ];
        let command = [
            "sh".to_owned(),
            "-c".to_owned(),
            format!("cd \"$0\" && exec \"$@\" >> '{}' 2>&1", log.display()),
            bed.app.display().to_string(),
            "node".to_owned(),
            "--no-warnings".to_owned(),
            "src/app.js".to_owned(),
        ];
        let leader = format!("NAMESPACE_SELECTOR={ns}");
        let follower = format!("NAMESPACE_SELECTOR={IDLE}");
        let flags = [
            "--on-change=lease-bridge",
            "--leader-env",
            &leader,
            "--follower-env",
            &follower,
            "--kill-grace",
            "4s",
        ];
        let command: Vec<&str> = command.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let supervisor = Supervisor::start_env(&sandbox, &env, &flags, &command);
        let mut pod = Pod {
            name: name.to_owned(),
            sandbox,
            supervisor: Some(supervisor),
            elector: None,
            log,
        };
        pod.start_elector(bed);
        pod
    }

    fn start_elector(&mut self, bed: &Bed) {
        let flag = self.sandbox.flag_file().to_string_lossy().into_owned();
        let toggle = format!(
            "http://127.0.0.1:{}/grant",
            self.supervisor.as_ref().expect("app container").port
        );
        let mut args = vec![
            "--lease-name",
            &bed.ns.lease_name,
            "--probe-addr",
            "127.0.0.1:0",
            "--flag-file",
            &flag,
            "--toggle-url",
            &toggle,
        ];
        args.extend_from_slice(&TIMINGS);
        let uid = pme_testkit::pods::random_uid();
        self.elector = Some(ElectorProcess::elect_in_pod(
            &self.name,
            Some(&uid),
            &bed.ns,
            &bed.ns.elector_kubeconfig,
            &args,
            |_| {},
        ));
    }

    /// The mode of the pod's ack file (what the supervisor acked), with its seq.
    fn acked(&self) -> Option<(String, u64)> {
        let ack = self.sandbox.ack()?;
        Some((ack["mode"].as_str()?.to_owned(), ack["seq"].as_u64()?))
    }

    fn wait_acked(&self, mode: &str, limit: Duration) -> Option<Instant> {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if self.acked().is_some_and(|(m, seq)| m == mode && seq > 0) {
                return Some(Instant::now());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    fn app_pid(&self) -> Option<i32> {
        self.supervisor.as_ref()?.mode()["child_pid"]
            .as_i64()
            .map(|p| p as i32)
    }

    fn app_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// After a demotion's ack: the demoted process `pid` must be gone; when the supervisor
    /// reaped it (ms since the epoch), the end of the tenure it could not log, being killed.
    #[track_caller]
    fn demoted_process_end(&self, pid: i32) -> u64 {
        assert!(
            !pme_testkit::supervise::exists(pid),
            "{} acked follower while its demoted process {pid} still ran",
            self.name
        );
        self.stopped_at_ms(pid)
            .unwrap_or_else(|| panic!("{}'s supervisor logged no stop of {pid}", self.name))
    }

    /// When the supervisor reaped process `pid` (ms since the epoch, from its log line's
    /// timestamp).
    fn stopped_at_ms(&self, pid: i32) -> Option<u64> {
        let line = self
            .supervisor
            .as_ref()?
            .log_lines(&format!("child stopped pid={pid} "))
            .into_iter()
            .next()?;
        let stamp: k8s_openapi::jiff::Timestamp = line.split_whitespace().next()?.parse().ok()?;
        u64::try_from(stamp.as_millisecond()).ok()
    }

    fn stop_elector(&mut self) {
        if let Some(mut e) = self.elector.take() {
            e.signal(Signal::SIGTERM);
            assert!(
                e.wait_exit(Duration::from_secs(30)).is_some(),
                "{}: the elector did not exit within 30s of SIGTERM",
                self.name
            );
        }
    }

    fn terminate(&mut self) {
        if let Some(mut s) = self.supervisor.take() {
            s.signal(Signal::SIGTERM);
            assert!(
                s.wait_exit(Duration::from_secs(20)).is_some(),
                "{}: the supervisor did not exit within 20s of SIGTERM",
                self.name
            );
        }
        self.stop_elector();
    }
}

async fn reconciled(admin: &kube::Client, ns: &str, name: &str) -> bool {
    let api = Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &oidc_clients());
    let Ok(obj) = api.get(name).await else {
        return false;
    };
    obj.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

async fn wait_reconciled(admin: &kube::Client, ns: &str, name: &str, limit: Duration) -> bool {
    pme_testkit::wait_until_async(limit, Duration::from_millis(200), || {
        reconciled(admin, ns, name)
    })
    .await
}

/// Redis `MONITOR`, recorded in a thread until dropped.
struct Monitor {
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    stop: Arc<AtomicBool>,
}

impl Monitor {
    fn start(port: u16) -> Monitor {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect Redis");
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .expect("read timeout");
        stream.write_all(b"MONITOR\r\n").expect("MONITOR");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (lines.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            while !s.load(Ordering::Relaxed) {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        if let Ok(mut v) = l.lock() {
                            v.push((Instant::now(), line.trim_end().to_owned()));
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
        });
        Monitor { lines, stop }
    }

    /// Operator writes of `oidc:Client:*` after `since` from a client on one of `ports`. Not the
    /// built-in client (kind `SelfOIDCClient`): every Passmower process writes its own at start,
    /// leader or not, as the side-by-side's Redis count also leaves it out.
    fn client_writes(&self, ports: &[u16], since: Instant) -> Vec<String> {
        let lines = self.lines.lock().expect("monitor lines").clone();
        lines
            .into_iter()
            .filter(|(at, _)| *at >= since)
            .filter_map(|(_, line)| {
                // 1733360000.123456 [0 127.0.0.1:54321] "SET" "oidc:Client:x" ...
                let addr = line.split('[').nth(1)?.split(']').next()?;
                let port: u16 = addr.rsplit(':').next()?.parse().ok()?;
                let mut quoted = line.split('"').skip(1).step_by(2);
                let cmd = quoted.next()?.to_ascii_uppercase();
                let key = quoted.next()?;
                (ports.contains(&port)
                    && REDIS_WRITES.contains(&cmd.as_str())
                    && key.starts_with("oidc:Client:")
                    && !line.contains("SelfOIDCClient"))
                .then_some(line)
            })
            .collect()
    }

    fn all_client_writes(&self) -> usize {
        let lines = self.lines.lock().expect("monitor lines");
        lines
            .iter()
            .filter(|(_, l)| l.contains("\"oidc:Client:"))
            .count()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The local ports of `pid`'s TCP connections to `remote_port` on loopback (its Redis clients).
fn redis_client_ports(pid: i32, remote_port: u16) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("socket:[")?
                .strip_suffix(']')
                .map(str::to_owned)
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{}", &table[10..]))
            .or_else(|_| std::fs::read_to_string(table))
            .unwrap_or_default();
        for row in text.lines().skip(1) {
            let cols: Vec<&str> = row.split_whitespace().collect();
            let (Some(local), Some(remote), Some(inode)) = (cols.get(1), cols.get(2), cols.get(9))
            else {
                continue;
            };
            let port = |a: &str| {
                a.rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
            };
            if port(remote) == Some(remote_port) && inodes.iter().any(|i| i == inode) {
                ports.extend(port(local));
            }
        }
    }
    ports
}

/// The app's tenures from its own log: (acquired, lost) in ms since the epoch, `lost` open
/// (`None`) while it still leads.
fn tenures(log: &str) -> Vec<(u64, Option<u64>)> {
    let mut out: Vec<(u64, Option<u64>)> = Vec::new();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(msg), Some(time)) = (v["msg"].as_str(), v["time"].as_u64()) else {
            continue;
        };
        if msg.contains("Acquired the operator lease") {
            out.push((time, None));
        } else if msg.contains("Lost the operator lease") {
            if let Some(last) = out.last_mut().filter(|t| t.1.is_none()) {
                last.1 = Some(time);
            }
        }
    }
    out
}

fn overlap(a: &[(u64, Option<u64>)], b: &[(u64, Option<u64>)]) -> Option<String> {
    for &(a0, a1) in a {
        for &(b0, b1) in b {
            let (a1, b1) = (a1.unwrap_or(u64::MAX), b1.unwrap_or(u64::MAX));
            if a0 < b1 && b0 < a1 {
                return Some(format!("[{a0}, {a1}) and [{b0}, {b1})"));
            }
        }
    }
    None
}

/// The leader's one process reconciles; a graceful handover kills it and is acked only once it is
/// gone (no `oidc:Client:*` write of A's lands after the ack; a client created with only A's
/// next, follower, process left stays unreconciled); the processes' tenures never overlap;
/// upstream's Lease is never created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_per_pod_follows_the_grant_and_a_demotion_ends_it() {
    let Some(bed) = setup().await else {
        return;
    };
    let _redis = start_redis(bed.redis_port);
    let monitor = Monitor::start(bed.redis_port);
    let admin = bed.cluster.admin_client().await;
    let ns = bed.ns.name.clone();

    let mut a = Pod::start(&bed, "passmower-a");
    assert!(
        a.wait_acked("leader", ACK_LIMIT).is_some(),
        "pod A never acked leader (its app's election taking the grant in):\n{}",
        a.app_log()
    );
    assert!(a.app_log().contains("Acquired the operator lease"));
    create_client(&admin, &ns, "client-0").await;
    assert!(
        wait_reconciled(&admin, &ns, "client-0", RECONCILE_LIMIT).await,
        "the leader's one process did not reconcile client-0:\n{}",
        a.app_log()
    );

    let mut b = Pod::start(&bed, "passmower-b");
    assert!(
        b.wait_acked("follower", ACK_LIMIT).is_some(),
        "pod B never acked follower:\n{}",
        b.app_log()
    );
    let a_pid = a.app_pid().expect("A's process");
    let mut a_ports = redis_client_ports(a_pid, bed.redis_port);

    // Graceful handover: A's elector writes follower, awaits the ack, releases the Lease. A
    // client created just before it puts a reconcile in flight in A's operators as the demotion
    // lands: the demotion kills A's process, so nothing of it may reach Redis after the ack.
    let before_race = Instant::now();
    create_client(&admin, &ns, "client-race").await;
    let demoted = Instant::now();
    a.stop_elector();
    let a_ack = a
        .wait_acked("follower", Duration::from_secs(1))
        .expect("A's elector exited without A's supervisor acking follower");
    let a_end = a.demoted_process_end(a_pid);
    eprintln!(
        "A's demotion acked (its process killed) {:.2}s after its elector's SIGTERM",
        a_ack.duration_since(demoted).as_secs_f64()
    );
    assert!(
        b.wait_acked("leader", ACK_LIMIT).is_some(),
        "B never acked leader:\n{}",
        b.app_log()
    );
    assert!(
        wait_reconciled(&admin, &ns, "client-race", RECONCILE_LIMIT).await,
        "client-race, created as A was demoted, was never reconciled"
    );
    create_client(&admin, &ns, "client-1").await;
    assert!(
        wait_reconciled(&admin, &ns, "client-1", RECONCILE_LIMIT).await,
        "the new leader did not reconcile client-1:\n{}",
        b.app_log()
    );

    // Only the demoted A is left: nothing may reconcile now.
    let b_log_path = b.log.clone();
    b.terminate();
    // A's follower process after the demotion is A's too.
    let a_next = a.app_pid();
    if let Some(pid) = a_next {
        a_ports.extend(redis_client_ports(pid, bed.redis_port));
    }
    create_client(&admin, &ns, "client-2").await;
    let late = wait_reconciled(&admin, &ns, "client-2", QUIET).await;
    if let Some(pid) = a_next {
        a_ports.extend(redis_client_ports(pid, bed.redis_port));
    }
    a_ports.sort_unstable();
    a_ports.dedup();

    let leaked = monitor.client_writes(&a_ports, a_ack);
    let a_race_writes = monitor
        .client_writes(&a_ports, before_race)
        .into_iter()
        .filter(|l| l.contains("client-race"))
        .count();
    eprintln!(
        "client-race: A wrote it to Redis {a_race_writes} times between its creation and the \
         end of the run (0 means A's operators did not get to it before standing down)"
    );
    eprintln!(
        "Redis MONITOR: {} oidc:Client:* lines in all; A's connections (ports {a_ports:?}) wrote \
         {} oidc:Client:* after A's ack: {leaked:#?}",
        monitor.all_client_writes(),
        leaked.len()
    );
    let mut a_tenures = tenures(&a.app_log());
    close_killed(&mut a_tenures, a_end);
    let b_tenures = tenures(&std::fs::read_to_string(&b_log_path).unwrap_or_default());
    eprintln!("A's tenures {a_tenures:?}; B's tenures {b_tenures:?}");
    let upstream = Api::<Lease>::namespaced(admin.clone(), &ns)
        .get_opt(DEFAULT_NATIVE_LEASE)
        .await
        .expect("read upstream's Lease");
    a.terminate();

    assert!(
        !late,
        "client-2 was reconciled with only the demoted pod A running: its operators did not stop"
    );
    assert!(leaked.is_empty(), "A wrote clients to Redis after its ack");
    assert!(!a_tenures.is_empty() && !b_tenures.is_empty());
    assert_eq!(
        overlap(&a_tenures, &b_tenures),
        None,
        "both processes led at once"
    );
    assert!(
        upstream.is_none(),
        "{DEFAULT_NATIVE_LEASE} was created: the app's election reached the apiserver"
    );
}

/// A fault, not a handover: A's elector freezes (SIGSTOP) while A leads, so A's grant lapses
/// with nobody to say so. A's supervisor demotes on its own at the expiry and kills A's one
/// process, before B's elector can take the Lease (which waits the whole lease duration): A's
/// process ends before B's "Acquired", a client created in the leaderless gap is reconciled by
/// B, and A's connections write no `oidc:Client:*` after A's ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_grant_ends_the_process_before_another_pod_leads() {
    let Some(bed) = setup().await else {
        return;
    };
    let _redis = start_redis(bed.redis_port);
    let monitor = Monitor::start(bed.redis_port);
    let admin = bed.cluster.admin_client().await;
    let ns = bed.ns.name.clone();

    let mut a = Pod::start(&bed, "passmower-a");
    assert!(
        a.wait_acked("leader", ACK_LIMIT).is_some(),
        "pod A never acked leader:\n{}",
        a.app_log()
    );
    let mut b = Pod::start(&bed, "passmower-b");
    assert!(
        b.wait_acked("follower", ACK_LIMIT).is_some(),
        "pod B never acked follower:\n{}",
        b.app_log()
    );
    let a_pid = a.app_pid().expect("A's process");
    let mut a_ports = redis_client_ports(a_pid, bed.redis_port);

    create_client(&admin, &ns, "client-race").await;
    let frozen = Instant::now();
    if let Some(e) = a.elector.as_mut() {
        e.signal(Signal::SIGSTOP);
    }
    let a_ack = a
        .wait_acked("follower", ACK_LIMIT)
        .expect("A's supervisor never acked follower after its grant lapsed");
    eprintln!(
        "A acked follower {:.2}s after its elector froze (grant lapse R = 2s, then the demoted \
         process killed)",
        a_ack.duration_since(frozen).as_secs_f64()
    );
    let a_end = a.demoted_process_end(a_pid);
    assert!(
        b.wait_acked("leader", ACK_LIMIT).is_some(),
        "B never led after A's elector froze:\n{}",
        b.app_log()
    );
    create_client(&admin, &ns, "client-1").await;
    assert!(
        wait_reconciled(&admin, &ns, "client-1", RECONCILE_LIMIT).await,
        "B did not reconcile client-1:\n{}",
        b.app_log()
    );
    assert!(wait_reconciled(&admin, &ns, "client-race", RECONCILE_LIMIT).await);
    if let Some(pid) = a.app_pid() {
        a_ports.extend(redis_client_ports(pid, bed.redis_port));
    }
    a_ports.sort_unstable();
    a_ports.dedup();
    let leaked = monitor.client_writes(&a_ports, a_ack);
    let a_race_writes = monitor
        .client_writes(&a_ports, frozen)
        .into_iter()
        .filter(|l| l.contains("client-race"))
        .count();
    eprintln!(
        "lapse: A wrote client-race to Redis {a_race_writes} times; A's connections (ports \
         {a_ports:?}) wrote {} oidc:Client:* after A's ack: {leaked:#?}",
        leaked.len()
    );
    let mut a_tenures = tenures(&a.app_log());
    close_killed(&mut a_tenures, a_end);
    let b_tenures = tenures(&b.app_log());
    eprintln!("A's tenures {a_tenures:?}; B's tenures {b_tenures:?}");
    if let Some(e) = a.elector.as_mut() {
        e.signal(Signal::SIGCONT);
    }
    b.terminate();
    a.terminate();
    assert!(leaked.is_empty(), "A wrote clients to Redis after its ack");
    assert!(!a_tenures.is_empty() && !b_tenures.is_empty());
    assert_eq!(
        overlap(&a_tenures, &b_tenures),
        None,
        "both processes led at once"
    );
}

/// Ends the open tenure of a process killed at `at` (ms since the epoch): it logged no "Lost".
fn close_killed(tenures: &mut [(u64, Option<u64>)], at: u64) {
    if let Some(open) = tenures
        .iter_mut()
        .find(|(start, end)| end.is_none() && *start <= at)
    {
        open.1 = Some(at);
    }
}
