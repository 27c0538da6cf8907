//! `--leader-health-url`: the supervisor asks the leader instance's own health endpoint (the
//! kubelet's probes reach only the serving instance), restarts one that stops answering as if
//! it had crashed, and reports it in the signed ack, where a leader that cannot stay healthy
//! counts towards the elector's step-down like one that keeps exiting.

use std::time::Duration;

use crate::product::*;
use pme_testkit::wait::{wait_until, POLL};
use pme_testkit::{free_port, needs_node};

/// Generous: the probes below run every second, two failures restart, and a Node boot on a busy
/// machine takes a few seconds.
const LIMIT: Duration = Duration::from_secs(60);

/// A Node app whose health server listens on `port` (fixed in its code, as Passmower's 9090)
/// and answers `/health` 200. It records each start in `starts` once it listens. With `wedge`,
/// the leader instance blocks its event loop for good 300ms after it listens: its process lives
/// on, and nothing it serves answers. It handles SIGTERM as Passmower does (in JavaScript), so
/// a wedged one only dies of SIGKILL.
fn health_app(sb: &Sandbox, port: u16, wedge: bool) -> std::path::PathBuf {
    let dir = sb.dir.path().display().to_string();
    sb.node_app(&format!(
        r#"import http from 'node:http';
import fs from 'node:fs';
const mode = process.env.MODE;
const server = http.createServer((q, r) => {{
  r.statusCode = q.url === '/health' ? 200 : 404;
  r.end(mode);
}});
server.listen({port}, () => {{
  fs.appendFileSync('{dir}/starts', `${{process.pid}} mode=${{mode}}\n`);
  if (mode === 'leader' && {wedge}) setTimeout(() => {{ for (;;) {{}} }}, 300);
}});
process.on('SIGTERM', () => process.exit(0));
"#
    ))
}

/// The supervisor with probes every second, `timeout` to answer, two failures in a row.
fn start(
    sb: &Sandbox,
    app: &std::path::Path,
    (app_port, leader_port): (u16, u16),
    timeout: &str,
) -> Supervisor {
    let map = format!("--leader-port-map={app_port}={leader_port}");
    let url = format!("--leader-health-url=http://127.0.0.1:{leader_port}/health");
    let timeout = format!("--leader-health-timeout={timeout}");
    Supervisor::start(
        sb,
        &[
            "--on-change=leader-instance",
            "--leader-env",
            "MODE=leader",
            "--follower-env",
            "MODE=follower",
            &map,
            "--leader-port-map=*=0",
            &url,
            "--leader-health-period=1s",
            &timeout,
            "--leader-health-failures=2",
            "--restart-backoff-initial=100ms",
            "--restart-backoff-max=300ms",
            "--kill-grace=500ms",
        ],
        &[app.to_str().unwrap_or_default()],
    )
}

fn leader_starts(sb: &Sandbox) -> Vec<i32> {
    sb.starts()
        .into_iter()
        .filter(|(_, m)| m == "leader")
        .map(|(pid, _)| pid)
        .collect()
}

fn ack_count(sb: &Sandbox, field: &str) -> u64 {
    sb.ack().and_then(|a| a[field].as_u64()).unwrap_or(0)
}

/// The replayed finding: a leader instance whose event loop blocked kept its pod on the Lease,
/// acked as leader with nothing counted, for as long as anyone watched. Now it is killed and
/// restarted, each time counted as a failed leader start (it never answered healthy), so the
/// ack reaches the elector's default step-down budget (--max-leader-failures 3).
#[test]
fn a_leader_instance_whose_event_loop_blocks_is_restarted_and_counted_towards_the_step_down() {
    needs_node();
    let (app_port, leader_port) = (free_port(), free_port());
    let sb = Sandbox::new();
    let app = health_app(&sb, app_port, true);
    let sv = start(&sb, &app, (app_port, leader_port), "500ms");
    assert!(
        wait_until(LIMIT, POLL, || sb
            .starts()
            .iter()
            .any(|(_, m)| m == "follower")),
        "the serving instance listens"
    );
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(110))).0, 200);
    assert!(
        wait_until(LIMIT, POLL, || !leader_starts(&sb).is_empty()),
        "the leader instance listens"
    );
    let first = leader_starts(&sb)[0];

    assert!(
        wait_until(LIMIT, POLL, || !exists(first)
            && leader_starts(&sb).len() >= 2),
        "the wedged leader instance {first} was not replaced: starts {:?}, mode {}",
        sb.starts(),
        sv.mode()
    );
    assert!(sv.log_contains("leader instance failed its health probe too often in a row"));
    assert!(
        wait_until(LIMIT, POLL, || ack_count(&sb, "leader_start_failures") >= 3),
        "the restarts are counted in a row for the elector's budget: ack {:?}",
        sb.ack()
    );
    assert!(sb.ack_verifies(), "the counts are signed");
    let ack = sb.ack().expect("ack");
    assert_eq!(ack["mode"], "leader", "{ack}");
    assert!(ack["leader_unhealthy"].as_u64() >= Some(3), "{ack}");
    assert!(ack["leader_probe_failures"].as_u64() >= Some(6), "{ack}");
    assert!(
        ack["leader_crashes"].is_null(),
        "no leader instance exited on its own: {ack}"
    );
    // The serving instance was never touched.
    let serving: Vec<i32> = sb
        .starts()
        .into_iter()
        .filter(|(_, m)| m == "follower")
        .map(|(pid, _)| pid)
        .collect();
    assert_eq!(serving.len(), 1, "{:?}", sb.starts());
    assert!(alive(serving[0]));
    assert_eq!(
        http(app_port, "GET", "/health", b"").expect("GET").1,
        "follower"
    );
}

/// The control: a leader instance that answers is left alone, and its probes are not failures.
#[test]
fn a_healthy_leader_instance_is_probed_and_left_running() {
    needs_node();
    let (app_port, leader_port) = (free_port(), free_port());
    let sb = Sandbox::new();
    let app = health_app(&sb, app_port, false);
    // A long timeout: on a loaded machine a healthy Node process can take longer than usual,
    // and this test is about a leader instance that answers.
    let sv = start(&sb, &app, (app_port, leader_port), "5s");
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(110))).0, 200);
    assert!(
        wait_until(LIMIT, POLL, || !leader_starts(&sb).is_empty()),
        "the leader instance listens"
    );
    let leader_pid = leader_starts(&sb)[0];
    // Several periods: at least three probes answered.
    std::thread::sleep(Duration::from_millis(4500));
    assert_eq!(
        http(leader_port, "GET", "/health", b"").expect("GET").1,
        "leader",
        "the probe's target is the leader instance"
    );
    assert_eq!(leader_starts(&sb), vec![leader_pid], "not restarted");
    assert!(alive(leader_pid));
    let m = sv.mode();
    assert_eq!(m["leader_unhealthy"], 0, "{m}");
    assert_eq!(m["leader_probe_failures"], 0, "{m}");
    // A renewal's ack carries the counts: none.
    assert_eq!(sv.push(&leader(1, 2, Duration::from_secs(110))).0, 200);
    assert!(sb.ack().expect("ack")["leader_start_failures"].is_null());
}
