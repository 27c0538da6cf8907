//! Figures for the ways `supervise` moves the real Passmower between follower and leader
//! (printed, never asserted): `--on-change=restart`, `leader-instance` with a fresh leader
//! instance, with a standby given the go (`--leader-standby`), and, for a Passmower that elects
//! itself (2.4: its adapter has `getLease`), `lease-bridge` (one process, its own election
//! answered from the grant). Per variant: promotion → first reconcile of an OIDCClient created
//! while the pod followed; the HTTP requests the pod failed around each promotion and demotion
//! (`GET /.well-known/openid-configuration` every 50 ms, 1 s timeout, on the port the kubelet's
//! Service would use: the pod stays up, so every failure is the handover's); and the resident
//! memory (after a 20 s idle window, in the last round) of the serving instance, a waiting
//! standby and a leader instance, and of the whole pod (supervisor and app processes) as
//! follower and as leader. Against the real kube-apiserver and Redis.
//!
//! ```sh
//! PME_PASSMOWER_APP=$(scripts/build-passmower-app.sh | tail -n1) \
//!   cargo test --test bench -- standby_bench:: --ignored --nocapture   # 1.3.0
//! export PME_UPSTREAM=$PWD/../shared/upstream/passmower-with-election
//! PME_PASSMOWER_APP=$(scripts/build-passmower-app.sh | tail -n1) \
//!   cargo test --test bench -- standby_bench:: --ignored --nocapture   # 2.4
//! ```
//! `PME_STANDBY_BENCH_ROUNDS` (default 5) promotions per variant. With
//! `PME_STANDBY_BENCH_OUT=FILE` every variant's raw figures are also written to FILE as JSON
//! (`scripts/bench-generations.sh` renders them per generation).

use std::time::{Duration, Instant};

use crate::product::{follower, http, leader, ElectorNamespaces, Sandbox, BIN};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use pme_testkit::cluster::ELECTOR_SERVICE_ACCOUNT as SA;
use pme_testkit::fence::{create_client, grant_passmower_rights, install_crds, FakePod};
use pme_testkit::passmower::{passmower_app, start_passmower_as, start_redis, Killed};
use pme_testkit::{free_port, wait_until, Cluster};

/// `VmRSS` of `pid` in MiB.
fn rss_mib(pid: i64) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

fn mode(port: u16) -> serde_json::Value {
    let (_, body) = http(port, "GET", "/mode", b"").expect("GET /mode");
    serde_json::from_str(&body).expect("GET /mode JSON")
}

fn stats(xs: &mut [f64]) -> String {
    xs.sort_by(f64::total_cmp);
    if xs.is_empty() {
        return "none".into();
    }
    format!(
        "{:.0}/{:.0}/{:.0}",
        xs[0],
        xs[xs.len() / 2],
        xs[xs.len() - 1]
    )
}

/// One variant's figures: promotion → reconcile (ms) per round, and RSS (MiB) samples.
#[derive(Default, serde::Serialize)]
struct Figures {
    reconcile_ms: Vec<f64>,
    /// Failed requests in each promotion's and each demotion's window, and all requests sent.
    failed_promotion: Vec<f64>,
    failed_demotion: Vec<f64>,
    requests: usize,
    serving_mib: Vec<f64>,
    standby_mib: Vec<f64>,
    leader_mib: Vec<f64>,
    /// Every process of the pod (the supervisor and its app processes), summed.
    pod_follower_mib: Vec<f64>,
    pod_leader_mib: Vec<f64>,
}

/// The RSS of the supervisor `supervisor` and every app process `GET /mode` names, summed.
fn pod_mib(supervisor: i64, m: &serde_json::Value) -> Option<f64> {
    let mut pids = vec![supervisor];
    for pid in [
        m["serving"]["pid"].as_i64(),
        m["standby"]["pid"].as_i64(),
        m["child_pid"].as_i64(),
    ]
    .into_iter()
    .flatten()
    {
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }
    pids.into_iter().map(rss_mib).sum()
}

/// `GET /.well-known/openid-configuration` on `port` every 50 ms (1 s timeout) from a thread
/// of its own until dropped: when each request was sent and whether it got a 200.
struct RequestLoop {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(Instant, bool)>>>,
}

impl RequestLoop {
    fn start(port: u16) -> RequestLoop {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (flag, record) = (stop.clone(), seen.clone());
        std::thread::spawn(move || {
            // Bounded: a variant's rounds take minutes.
            let deadline = Instant::now() + Duration::from_secs(3600);
            while !flag.load(Ordering::Relaxed) && Instant::now() < deadline {
                let sent = Instant::now();
                let ok = (|| -> std::io::Result<bool> {
                    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
                    let mut s =
                        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
                    s.set_read_timeout(Some(Duration::from_secs(1)))?;
                    s.set_write_timeout(Some(Duration::from_secs(1)))?;
                    s.write_all(
                        b"GET /.well-known/openid-configuration HTTP/1.1\r\nHost: passmower.example.com\r\nX-Forwarded-Proto: https\r\nConnection: close\r\n\r\n",
                    )?;
                    let mut head = [0u8; 12];
                    s.read_exact(&mut head)?;
                    Ok(head.starts_with(b"HTTP/1.1 200"))
                })()
                .unwrap_or(false);
                if let Ok(mut r) = record.lock() {
                    r.push((sent, ok));
                }
                std::thread::sleep(Duration::from_millis(50).saturating_sub(sent.elapsed()));
            }
        });
        RequestLoop { stop, seen }
    }

    /// Requests sent in `[from, to]` that failed.
    fn failed_between(&self, from: Instant, to: Instant) -> usize {
        self.seen.lock().map_or(0, |r| {
            r.iter()
                .filter(|(t, ok)| !ok && (from..=to).contains(t))
                .count()
        })
    }

    fn sent(&self) -> usize {
        self.seen.lock().map_or(0, |r| r.len())
    }
}

impl Drop for RequestLoop {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How the pod runs Passmower.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// `--on-change=restart`: one instance, restarted with the other environment at each
    /// change, so its HTTP is down while it boots.
    Restart,
    /// `--on-change=leader-instance`, the leader instance started afresh at each promotion.
    Fresh,
    /// The same with `--leader-standby`.
    Standby,
    /// `--on-change=lease-bridge`: one process, its own election answered from the grant.
    Bridge,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Restart => "restart",
            Variant::Fresh => "fresh",
            Variant::Standby => "standby",
            Variant::Bridge => "bridge",
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: prints figures, run with --ignored --nocapture"]
async fn bench_promotion_to_first_reconcile_with_and_without_a_standby() {
    let Some(app) = passmower_app() else {
        return;
    };
    let rounds: usize = std::env::var("PME_STANDBY_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let cluster = Cluster::shared();
    let admin = cluster.admin_client().await;
    install_crds(cluster).await;
    let ns = cluster.new_namespace().await;
    grant_passmower_rights(&admin, &ns.name, SA).await;
    let pod = FakePod::create(cluster, &ns.name, "passmower-a", SA).await;
    let redis_port = free_port();
    let _redis = start_redis(redis_port);
    let dir = tempfile::tempdir().expect("tempdir");
    // The serving instance's fixed 9090 moved too: other tests on this machine run Passmower.
    let preload = dir.path().join("port-map-preload.mjs");
    std::fs::write(
        &preload,
        include_str!("../../src/supervise/leader_instance/port_map/preload.mjs"),
    )
    .expect("write the preload");
    let node_options = format!("--import=file://{}", preload.display());
    let env = [
        ("PME_POD_NAMESPACE", ns.name.as_str()),
        ("DEPLOYMENT_NAME", "passmower"),
        ("LEADER_ELECTION_ENABLED", "false"),
        ("ACTIVITY_TRACKING_ENABLED", "false"),
        ("NODE_OPTIONS", node_options.as_str()),
        ("PASSMOWER_ELECTOR_PORT_MAP", "9090=0"),
    ];
    let idle = passmower_elector::inject::DEFAULT_IDLE_NAMESPACE;
    let leader_selector = format!("NAMESPACE_SELECTOR={}", ns.name);
    let follower_selector = format!("NAMESPACE_SELECTOR={idle}");
    let secrets = Api::<Secret>::namespaced(admin.clone(), &ns.name);
    let mut report = Vec::new();
    let mut raw = Vec::new();
    let elects_itself = std::fs::read_to_string(app.join("src/adapters/kubernetes.js"))
        .is_ok_and(|a| a.contains("getLease"));
    let variants: &[Variant] = if elects_itself {
        &[
            Variant::Restart,
            Variant::Fresh,
            Variant::Standby,
            Variant::Bridge,
        ]
    } else {
        &[Variant::Restart, Variant::Fresh, Variant::Standby]
    };
    for &variant in variants {
        let standby = variant == Variant::Standby;
        let sb = Sandbox::new();
        let flag = sb.flag_file().to_string_lossy().into_owned();
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut wrapper = vec![
            BIN,
            "supervise",
            "--flag-file",
            &flag,
            "--listen",
            &listen,
            "--leader-env",
            &leader_selector,
            "--follower-env",
            &follower_selector,
        ];
        match variant {
            Variant::Restart => wrapper.push("--on-change=restart"),
            Variant::Bridge => wrapper.push("--on-change=lease-bridge"),
            Variant::Fresh | Variant::Standby => {
                wrapper.extend(["--on-change=leader-instance", "--leader-port-map=*=0"]);
            }
        }
        if standby {
            wrapper.push("--leader-standby");
        }
        wrapper.push("--");
        let log = dir.path().join(format!("{}.log", variant.name()));
        // The app's HTTP port, chosen here so the request loop knows it.
        let app_port = free_port();
        let app_port_text = app_port.to_string();
        let mut app_env = env.to_vec();
        app_env.push(("PORT", app_port_text.as_str()));
        let supervisor: Killed = start_passmower_as(
            &app,
            &pod.kubeconfig,
            cluster.api_addr(),
            redis_port,
            &app_env,
            &wrapper,
            &log,
        );
        let requests = RequestLoop::start(app_port);
        let mut figures = Figures::default();
        let mut seq = 0;
        for round in 0..rounds {
            // Settled as a follower pod is between handovers: with a standby, it waits.
            let waiting = |n: usize| {
                std::fs::read_to_string(log.with_extension("err"))
                    .unwrap_or_default()
                    .matches("waiting for the go")
                    .count()
                    >= n
            };
            if standby {
                assert!(
                    wait_until(Duration::from_secs(120), Duration::from_millis(50), || {
                        waiting(round + 1)
                    }),
                    "no standby waited in round {round}"
                );
            }
            // Memory is sampled in the last round only, after a 20 s idle window (as the
            // handover benchmark does), so the instances' heaps have settled.
            let last = round + 1 == rounds;
            let settle = Duration::from_secs(if last { 20 } else { 3 });
            tokio::time::sleep(settle).await;
            let m = mode(port);
            let serving = match variant {
                Variant::Bridge | Variant::Restart => m["child_pid"].as_i64(),
                Variant::Fresh | Variant::Standby => m["serving"]["pid"].as_i64(),
            };
            if let (true, Some(pid)) = (last, serving) {
                figures.serving_mib.extend(rss_mib(pid));
            }
            if last {
                figures
                    .pod_follower_mib
                    .extend(pod_mib(i64::from(supervisor.0.id()), &m));
            }
            if let (true, Some(pid)) = (last, m["standby"]["pid"].as_i64()) {
                figures.standby_mib.extend(rss_mib(pid));
            }
            let client = format!("bench-{}-{round}", variant.name());
            create_client(&admin, &ns.name, &client).await;
            let secret = format!("oidc-client-{client}-owner-secrets");
            seq += 1;
            let grant = sb.sign(&leader(1, seq, Duration::from_secs(100)));
            let promoted = Instant::now();
            // The push is answered once the promotion took effect (with the lease bridge, once
            // the app's election took it in), which can be after the first reconcile: the clock
            // runs from the push, not from its answer.
            let body = grant.to_json();
            let push = std::thread::spawn(move || http(port, "POST", "/", &body));
            let mut reconciled = None;
            while promoted.elapsed() < Duration::from_secs(120) {
                if secrets.get_opt(&secret).await.ok().flatten().is_some() {
                    reconciled = Some(promoted.elapsed());
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let (status, body) = push.join().expect("push thread").expect("push");
            assert_eq!(status, 200, "{body}");
            let took = reconciled.unwrap_or_else(|| {
                panic!(
                    "round {round}: not reconciled in 120s:\n{}",
                    std::fs::read_to_string(log.with_extension("err")).unwrap_or_default()
                )
            });
            let m = mode(port);
            eprintln!(
                "{} round {round}: promotion → Secret of {client} {:.0} ms (leader instance {})",
                variant.name(),
                took.as_secs_f64() * 1e3,
                m["child_pid"]
            );
            figures.reconcile_ms.push(took.as_secs_f64() * 1e3);
            tokio::time::sleep(settle).await;
            figures
                .failed_promotion
                .push(requests.failed_between(promoted, Instant::now()) as f64);
            let m = mode(port);
            if let (true, Some(pid)) = (last, m["child_pid"].as_i64()) {
                figures.leader_mib.extend(rss_mib(pid));
            }
            if last {
                figures
                    .pod_leader_mib
                    .extend(pod_mib(i64::from(supervisor.0.id()), &m));
            }
            seq += 1;
            let demotion = sb.sign(&follower(1, seq));
            let demoted = Instant::now();
            let (status, body) = http(port, "POST", "/", &demotion.to_json()).expect("push");
            assert_eq!(status, 200, "{body}");
            // The demotion's window: until the pod serves as a follower again, as long as a
            // promotion's settle at the least.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let serves = wait_until(Duration::from_secs(60), Duration::from_millis(50), || {
                requests
                    .seen
                    .lock()
                    .is_ok_and(|r| r.last().is_some_and(|(t, ok)| *ok && *t > demoted))
            });
            assert!(
                serves,
                "round {round}: the pod did not serve again after the demotion"
            );
            figures
                .failed_demotion
                .push(requests.failed_between(demoted, Instant::now()) as f64);
        }
        figures.requests = requests.sent();
        drop(requests);
        let pid = nix::unistd::Pid::from_raw(supervisor.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let mut supervisor = supervisor;
        let _ = wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
            matches!(supervisor.0.try_wait(), Ok(Some(_)))
        });
        raw.push(serde_json::json!({ "variant": variant.name(), "figures": &figures }));
        report.push(format!(
            "{:<8} promotion → first reconcile ms min/median/max {:>16}   failed requests per promotion {:>8} per demotion {:>8} (of {} sent)   RSS MiB serving {:>12}  standby {:>12}  leader instance {:>12}  pod as follower {:>12}  pod as leader {:>12}",
            variant.name(),
            stats(&mut figures.reconcile_ms),
            stats(&mut figures.failed_promotion),
            stats(&mut figures.failed_demotion),
            figures.requests,
            stats(&mut figures.serving_mib),
            stats(&mut figures.standby_mib),
            stats(&mut figures.leader_mib),
            stats(&mut figures.pod_follower_mib),
            stats(&mut figures.pod_leader_mib),
        ));
    }
    let node_version = String::from_utf8_lossy(
        &std::process::Command::new("node")
            .arg("--version")
            .output()
            .map(|o| o.stdout)
            .unwrap_or_default(),
    )
    .trim()
    .to_owned();
    eprintln!(
        "\nPassmower at {} ({} rounds each; node {node_version}):",
        app.display(),
        rounds,
    );
    if let Some(out) = std::env::var_os("PME_STANDBY_BENCH_OUT") {
        let doc = serde_json::json!({
            "app": app.display().to_string(),
            "rounds": rounds,
            "node": node_version,
            "variants": raw,
        });
        let text = serde_json::to_string_pretty(&doc).expect("figures as JSON");
        std::fs::write(&out, text)
            .unwrap_or_else(|e| panic!("PME_STANDBY_BENCH_OUT {}: {e}", out.to_string_lossy()));
    }
    for line in report {
        eprintln!("{line}");
    }
}
