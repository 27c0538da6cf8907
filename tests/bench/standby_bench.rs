//! Figures for `--leader-standby` on the real Passmower (printed, never asserted): promotion →
//! first reconcile of an OIDCClient created while the pod followed, with a fresh leader
//! instance and with a standby given the go; and the resident memory (after a 20 s idle window,
//! in the last round) of the serving instance, a waiting standby and a leader instance. Against
//! the real kube-apiserver and Redis. For a Passmower that elects itself (2.4: its adapter has
//! `getLease`) the same rounds run a third time under `--on-change=lease-bridge` (one process,
//! its own election answered from the grant). Each variant also reports the pod's memory: the
//! RSS of every process in it (supervisor and app processes) as follower and as leader.
//!
//! ```sh
//! PME_PASSMOWER_APP=$(scripts/build-passmower-app.sh | tail -n1) \
//!   cargo test --test bench -- standby_bench:: --ignored --nocapture   # 1.3.0
//! export PME_UPSTREAM=$PWD/../shared/upstream/passmower-with-election
//! PME_PASSMOWER_APP=$(scripts/build-passmower-app.sh | tail -n1) \
//!   cargo test --test bench -- standby_bench:: --ignored --nocapture   # 2.4
//! ```
//! `PME_STANDBY_BENCH_ROUNDS` (default 5) promotions per variant.

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
#[derive(Default)]
struct Figures {
    reconcile_ms: Vec<f64>,
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

/// How the pod runs Passmower.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
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
    let elects_itself = std::fs::read_to_string(app.join("src/adapters/kubernetes.js"))
        .is_ok_and(|a| a.contains("getLease"));
    let variants: &[Variant] = if elects_itself {
        &[Variant::Fresh, Variant::Standby, Variant::Bridge]
    } else {
        &[Variant::Fresh, Variant::Standby]
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
        if variant == Variant::Bridge {
            wrapper.push("--on-change=lease-bridge");
        } else {
            wrapper.extend(["--on-change=leader-instance", "--leader-port-map=*=0"]);
        }
        if standby {
            wrapper.push("--leader-standby");
        }
        wrapper.push("--");
        let log = dir.path().join(format!("{}.log", variant.name()));
        let supervisor: Killed = start_passmower_as(
            &app,
            &pod.kubeconfig,
            cluster.api_addr(),
            redis_port,
            &env,
            &wrapper,
            &log,
        );
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
                Variant::Bridge => m["child_pid"].as_i64(),
                _ => m["serving"]["pid"].as_i64(),
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
            let (status, body) = http(port, "POST", "/", &demotion.to_json()).expect("push");
            assert_eq!(status, 200, "{body}");
        }
        let pid = nix::unistd::Pid::from_raw(supervisor.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let mut supervisor = supervisor;
        let _ = wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
            matches!(supervisor.0.try_wait(), Ok(Some(_)))
        });
        report.push(format!(
            "{:<8} promotion → first reconcile ms min/median/max {:>16}   RSS MiB serving {:>12}  standby {:>12}  leader instance {:>12}  pod as follower {:>12}  pod as leader {:>12}",
            variant.name(),
            stats(&mut figures.reconcile_ms),
            stats(&mut figures.serving_mib),
            stats(&mut figures.standby_mib),
            stats(&mut figures.leader_mib),
            stats(&mut figures.pod_follower_mib),
            stats(&mut figures.pod_leader_mib),
        ));
    }
    eprintln!(
        "\nPassmower at {} ({} rounds each; node {}):",
        app.display(),
        rounds,
        String::from_utf8_lossy(
            &std::process::Command::new("node")
                .arg("--version")
                .output()
                .map(|o| o.stdout)
                .unwrap_or_default()
        )
        .trim()
    );
    for line in report {
        eprintln!("{line}");
    }
}
