//! The leader instance's own metrics on the elector's probe port: with
//! `--on-change=leader-instance`, the leader instance's metrics port is moved to a fixed
//! loopback port (`--leader-port-map FROM=TO`), and the elector, given that port
//! (`--leader-app-metrics-port`), serves its page at `/metrics/leader-app` — where a PodMonitor
//! scrapes the elector's port. Real electors against the real kube-apiserver, real supervisors
//! and a Node app with a metrics server on a fixed port, as Passmower's 9090.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::product::{ElectorNamespaces, Sandbox, Supervisor};
use pme_testkit::{free_port, wait_until, Cluster, ElectorProcess, TestNs, FAST_TIMINGS};

const LIMIT: Duration = Duration::from_secs(20);

/// GET `path` on `port`: status code and body.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// A Node app whose metrics server listens on `metrics_port` (fixed in its code, as
/// Passmower's 9090) and says which mode it runs in.
fn metrics_app(sb: &Sandbox, metrics_port: u16) -> std::path::PathBuf {
    sb.node_app(&format!(
        r#"import http from 'node:http';
const mode = process.env.MODE;
http.createServer((q, r) => {{
  if (q.url !== '/metrics') {{ r.statusCode = 404; return r.end(); }}
  r.setHeader('content-type', 'text/plain; version=0.0.4');
  r.end(`app_mode{{mode="${{mode}}"}} 1\n`);
}}).listen({metrics_port});
process.on('SIGTERM', () => process.exit(0));
"#
    ))
}

/// One pod: a supervisor running the app with a leader instance whose metrics port goes to
/// `leader_metrics`, and an elector that serves that port's page.
struct MetricsPod {
    _sandbox: Sandbox,
    _supervisor: Supervisor,
    elector: ElectorProcess,
    probe: u16,
}

fn start_pod(name: &str, ns: &TestNs, metrics_port: u16, leader_metrics: u16) -> MetricsPod {
    let sandbox = Sandbox::new();
    let _ = std::fs::remove_file(sandbox.token_file());
    let app = metrics_app(&sandbox, metrics_port);
    let map = format!("--leader-port-map={metrics_port}={leader_metrics}");
    let supervisor = Supervisor::start(
        &sandbox,
        &[
            "--on-change=leader-instance",
            &map,
            "--leader-port-map=*=0",
            "--leader-env",
            "MODE=leader",
            "--follower-env",
            "MODE=follower",
            "--kill-grace",
            "1s",
        ],
        &[app.to_str().expect("utf-8")],
    );
    let probe = free_port();
    let probe_addr = format!("127.0.0.1:{probe}");
    let flag = sandbox.flag_file().to_string_lossy().into_owned();
    let toggle = format!("http://127.0.0.1:{}/grant", supervisor.port);
    let leader_port = leader_metrics.to_string();
    let mut args = vec![
        "--lease-name",
        &ns.lease_name,
        "--probe-addr",
        &probe_addr,
        "--flag-file",
        &flag,
        "--toggle-url",
        &toggle,
        "--leader-app-metrics-port",
        &leader_port,
    ];
    args.extend_from_slice(&FAST_TIMINGS);
    let elector = ElectorProcess::elect(name, ns, &args);
    MetricsPod {
        _sandbox: sandbox,
        _supervisor: supervisor,
        elector,
        probe,
    }
}

/// The leader's elector serves the leader instance's page; a follower's serves an empty page
/// that says no leader instance runs there (200, so its target stays up); the app's own fixed
/// port is the serving instance's, in follower mode, in both pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_elector_serves_the_leader_instances_metrics_and_a_follower_says_it_has_none() {
    pme_testkit::needs_node();
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let (metrics_a, moved_a) = (free_port(), free_port());
    let a = start_pod("pod-a", &ns, metrics_a, moved_a);
    let mut page = None;
    let served = wait_until(LIMIT, Duration::from_millis(100), || {
        page = get(a.probe, "/metrics/leader-app");
        page.as_ref()
            .is_some_and(|(_, body)| body.contains("app_mode{mode=\"leader\"} 1"))
    });
    assert!(served, "{page:?}\n{}", a.elector.logs());
    assert_eq!(page.expect("page").0, 200);
    assert_eq!(
        get(metrics_a, "/metrics").expect("the app's port").1,
        "app_mode{mode=\"follower\"} 1\n",
        "the fixed port is the serving instance's"
    );

    let (metrics_b, moved_b) = (free_port(), free_port());
    let b = start_pod("pod-b", &ns, metrics_b, moved_b);
    let mut page = None;
    let answered = wait_until(LIMIT, Duration::from_millis(100), || {
        page = get(b.probe, "/metrics/leader-app");
        page.is_some()
    });
    assert!(answered, "{}", b.elector.logs());
    let (code, body) = page.expect("page");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.starts_with("# passmower-elector: nothing listens") && !body.contains("app_mode"),
        "{body}"
    );
    // Only that one path reaches the leader instance.
    assert_eq!(
        get(a.probe, "/metrics/leader-app/x").map(|(c, _)| c),
        Some(404)
    );
}
