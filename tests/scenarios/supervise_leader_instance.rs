//! `--on-change=leader-instance`: the serving instance runs from start to shutdown and is never
//! restarted because of the grant; a second, leader-only instance comes and goes with the grant
//! and obeys all of it (acks, dead man's switch, kill grace, failed-start count); a Node app's
//! listening ports are moved out of the serving instance's way by `--leader-port-map`.

use std::time::{Duration, Instant};

use crate::product::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pme_testkit::wait::{wait_until, POLL};
use pme_testkit::{free_port, needs_node};

const LIMIT: Duration = Duration::from_secs(15);
const FLAGS: [&str; 5] = [
    "--on-change=leader-instance",
    "--leader-env",
    "MODE=leader",
    "--follower-env",
    "MODE=follower",
];

fn start(sb: &Sandbox, app: &std::path::Path, extra: &[&str]) -> Supervisor {
    let mut flags = FLAGS.to_vec();
    flags.extend_from_slice(extra);
    Supervisor::start(sb, &flags, &[app.to_str().unwrap_or_default()])
}

/// The serving instance's PID from GET /mode, once it runs.
fn serving_pid(sv: &Supervisor) -> Option<i32> {
    sv.mode()["serving"]["pid"].as_i64().map(|p| p as i32)
}

fn wait_serving(sv: &Supervisor, sb: &Sandbox) -> i32 {
    let mut pid = None;
    assert!(
        wait_until(LIMIT, POLL, || {
            pid = serving_pid(sv);
            pid.is_some_and(|p| sb.starts().iter().any(|(s, _)| *s == p))
        }),
        "the serving instance started and recorded its start"
    );
    pid.unwrap_or_default()
}

#[test]
fn the_serving_instance_runs_through_promotion_and_demotion_and_a_leader_instance_comes_and_goes() {
    let sb = Sandbox::new();
    let sv = start(&sb, &sb.recording_app(Some(0)), &[]);
    let serving = wait_serving(&sv, &sb);
    let m = sv.mode();
    assert_eq!(m["on_change"], "leader-instance");
    assert_eq!(m["serving"]["mode"], "follower");
    assert!(
        m["child_pid"].is_null(),
        "no leader instance while follower: {m}"
    );

    let (status, body) = sv.push(&leader(1, 1, Duration::from_secs(60)));
    assert_eq!(status, 200, "{body}");
    // Acked once the leader instance runs: no waiting needed to see it.
    let m = sv.mode();
    let leader_pid = m["child_pid"].as_i64().expect("leader instance") as i32;
    assert_eq!(
        (m["mode"].as_str(), m["child_mode"].as_str()),
        (Some("leader"), Some("leader"))
    );
    assert_eq!(serving_pid(&sv), Some(serving), "serving instance kept");
    assert!(alive(serving) && alive(leader_pid));
    assert_eq!(sb.ack().expect("ack")["mode"], "leader");

    // A renewal touches neither.
    assert_eq!(sv.push(&leader(1, 2, Duration::from_secs(60))).0, 200);
    assert_eq!(sv.mode()["child_pid"].as_i64(), Some(i64::from(leader_pid)));

    let (status, body) = sv.push(&follower(1, 3));
    assert_eq!(status, 200, "{body}");
    assert!(
        !exists(leader_pid),
        "demotion acked while the leader instance existed"
    );
    assert!(
        alive(serving),
        "the serving instance went with the demotion"
    );
    let m = sv.mode();
    assert_eq!(m["mode"], "follower");
    assert!(m["child_pid"].is_null(), "{m}");
    assert_eq!(serving_pid(&sv), Some(serving));
    assert_eq!(m["serving"]["restarts"], 0);
    assert_eq!(
        sb.starts(),
        vec![
            (serving, "follower".to_owned()),
            (leader_pid, "leader".to_owned())
        ],
        "one serving start, one leader start, nothing restarted"
    );
}

/// An app whose leader instance, and a helper in its process group (its PID in `helper`),
/// ignore SIGTERM: only SIGKILL ends them. Every start is recorded in `starts`.
fn term_ignoring_leader_app(sb: &Sandbox) -> std::path::PathBuf {
    let dir = sb.dir.path().display().to_string();
    sb.script(
        "app.sh",
        &format!(
            "if [ \"$MODE\" = leader ]; then trap '' TERM; \
             sh -c \"trap '' TERM; echo \\$\\$ > {dir}/helper; while :; do sleep 0.05; done\" & fi\n\
             echo \"$$ mode=$MODE\" >> {dir}/starts\n\
             while :; do sleep 0.05; done"
        ),
    )
}

#[test]
fn the_leader_instance_is_killed_by_expiry_plus_kill_grace_and_the_serving_instance_stays() {
    let sb = Sandbox::new();
    let app = term_ignoring_leader_app(&sb);
    let sv = start(&sb, &app, &["--kill-grace", "500ms"]);
    let serving = wait_serving(&sv, &sb);
    let ttl = Duration::from_millis(1500);
    let granted = Instant::now();
    assert_eq!(sv.push(&leader(1, 1, ttl)).0, 200);
    let leader_pid = sv.wait_mode("leader", LIMIT).expect("leader instance");
    assert!(wait_until(LIMIT, POLL, || !sb.lines("helper").is_empty()));
    let helper: i32 = sb.lines("helper")[0].trim().parse().expect("helper pid");

    // No elector: the grant lapses on its own.
    assert!(
        wait_until(LIMIT, POLL, || !exists(leader_pid) && !exists(helper)),
        "the leader instance's group is gone"
    );
    let gone = granted.elapsed();
    let bound = ttl + Duration::from_millis(500);
    eprintln!("leader instance group gone {gone:?} after the grant (expiry + K = {bound:?})");
    // Safety: never later than expiry + K (the poll adds up to 10 ms; scheduling more).
    assert!(
        gone <= bound + Duration::from_millis(300),
        "leader instance outlived expiry + K: {gone:?}"
    );
    assert!(alive(serving), "the serving instance went with the lapse");
    assert_eq!(serving_pid(&sv), Some(serving));
    assert!(wait_until(LIMIT, POLL, || sb
        .ack()
        .is_some_and(|a| a["mode"] == "follower")));
}

/// The supervisor is frozen across the grant's expiry + K: the leader instance's right to run
/// ended at the expiry, so when the supervisor wakes its group is killed at once, not given a
/// fresh kill grace.
#[test]
fn a_lapse_noticed_past_expiry_plus_kill_grace_kills_the_leader_instance_at_once() {
    let sb = Sandbox::new();
    let app = term_ignoring_leader_app(&sb);
    let sv = start(&sb, &app, &["--kill-grace", "2s"]);
    let serving = wait_serving(&sv, &sb);
    let g = leader(1, 1, Duration::from_millis(1500));
    assert_eq!(sv.push(&g).0, 200);
    let leader_pid = sv
        .wait_started(&sb, "leader", LIMIT)
        .expect("leader instance");
    assert!(wait_until(LIMIT, POLL, || !sb.lines("helper").is_empty()));
    let helper: i32 = sb.lines("helper")[0].trim().parse().expect("helper pid");
    sv.signal(Signal::SIGSTOP);
    let overdue = g
        .expiry()
        .saturating_add(Duration::from_millis(2300))
        .as_nanos();
    assert!(wait_until(LIMIT, POLL, || {
        passmower_elector::clock::BootInstant::now().as_nanos() >= overdue
    }));
    assert!(
        alive(leader_pid),
        "the leader instance died without SIGKILL"
    );
    sv.signal(Signal::SIGCONT);
    let resumed = Instant::now();
    assert!(
        wait_until(LIMIT, POLL, || !exists(leader_pid) && !exists(helper)),
        "the leader instance's group was never killed"
    );
    let took = resumed.elapsed();
    assert!(
        took < Duration::from_millis(1000),
        "leader instance killed {took:?} after the supervisor woke past expiry + K"
    );
    eprintln!("overdue leader instance killed {took:?} after the supervisor woke");
    assert!(alive(serving), "the serving instance went with the lapse");
    assert_eq!(serving_pid(&sv), Some(serving));
}

/// An app whose leader instance exits 3 at once; its serving instance runs until SIGTERM.
/// Every start is recorded in `starts`.
fn failing_leader_app(sb: &Sandbox) -> std::path::PathBuf {
    let dir = sb.dir.path().display().to_string();
    sb.script(
        "app.sh",
        &format!(
            "echo \"$$ mode=$MODE\" >> {dir}/starts\n\
             if [ \"$MODE\" = leader ]; then exit 3; fi\n\
             trap 'exit 0' TERM\n\
             while :; do sleep 0.05 & wait $!; done"
        ),
    )
}

#[test]
fn a_crashing_leader_instance_counts_as_a_failed_leader_start_and_the_serving_one_keeps_serving() {
    let sb = Sandbox::new();
    let app = failing_leader_app(&sb);
    let sv = start(&sb, &app, &["--restart-backoff-initial", "100ms"]);
    let serving = wait_serving(&sv, &sb);
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    assert!(
        wait_until(LIMIT, POLL, || sb
            .ack()
            .and_then(|a| a["leader_start_failures"].as_u64())
            .is_some_and(|n| n >= 2)),
        "leader instance exits are reported in the ack: {:?}",
        sb.ack()
    );
    assert!(sb.ack_verifies());
    assert!(alive(serving));
    assert_eq!(serving_pid(&sv), Some(serving));
    let leader_starts = sb.starts().iter().filter(|(_, m)| m == "leader").count();
    assert!(
        leader_starts >= 2,
        "restarted with backoff: {:?}",
        sb.starts()
    );
    assert_eq!(sv.mode()["serving"]["restarts"], 0);
}

/// A supervisor that starts while its pod leads (the app container restarted, the Lease kept)
/// boots the leader instance first: the serving instance waits out `--serving-head-start`.
#[test]
fn a_supervisor_started_as_leader_gives_the_leader_instance_a_head_start() {
    let sb = Sandbox::new();
    sb.write_grant(&leader(1, 1, Duration::from_secs(60)));
    let sv = start(
        &sb,
        &sb.recording_app(Some(0)),
        &["--serving-head-start", "2s"],
    );
    assert!(
        wait_until(LIMIT, POLL, || sb
            .starts()
            .iter()
            .any(|(_, m)| m == "leader")),
        "the leader instance started from the flag file: {:?}",
        sb.starts()
    );
    assert_eq!(
        serving_pid(&sv),
        None,
        "the serving instance waits for the head start: {}",
        sv.mode()
    );
    let serving = wait_serving(&sv, &sb);
    let modes: Vec<String> = sb.starts().into_iter().map(|(_, m)| m).collect();
    assert_eq!(modes, ["leader", "follower"]);
    assert!(alive(serving));
    assert_eq!(
        sv.mode()["serving"]["restarts"],
        0,
        "a held start is no restart"
    );
    assert!(
        sv.mode()["child_pid"].as_i64().is_some(),
        "the leader instance runs on"
    );
}

/// The head start is for a leader instance that boots: one that cannot run does not keep the
/// pod from serving. The wait here (5s) is half the head start (10s).
#[test]
fn a_held_serving_instance_starts_at_once_when_the_leader_instance_fails() {
    let sb = Sandbox::new();
    sb.write_grant(&leader(1, 1, Duration::from_secs(60)));
    let app = failing_leader_app(&sb);
    let sv = start(
        &sb,
        &app,
        &[
            "--serving-head-start",
            "10s",
            "--restart-backoff-initial",
            "1s",
        ],
    );
    assert!(
        wait_until(Duration::from_secs(5), POLL, || serving_pid(&sv).is_some()),
        "the serving instance started once the leader instance exited: {:?} {}",
        sb.starts(),
        sv.mode()
    );
    assert_eq!(sb.starts().first().map(|(_, m)| m.as_str()), Some("leader"));
}

/// With the port map, the head start is only an upper bound: the leader instance's preload says
/// when its first server listens (the end of a Node app's boot), and the serving instance starts
/// then. The leader instance here listens 2s after it starts; the head start is 10s, longer than
/// the 8s the serving instance is given to start and listen.
#[test]
fn a_held_serving_instance_starts_once_the_node_leader_instance_listens() {
    needs_node();
    let port = free_port();
    let sb = Sandbox::new();
    sb.write_grant(&leader(1, 1, Duration::from_secs(60)));
    let dir = sb.dir.path().display().to_string();
    let app = sb.node_app(&format!(
        r#"import http from 'node:http';
import fs from 'node:fs';
const mode = process.env.MODE;
const note = (what) => fs.appendFileSync('{dir}/events', `${{Date.now()}} ${{process.pid}} ${{mode}} ${{what}}\n`);
note(`start fd-variable=[${{process.env.PASSMOWER_ELECTOR_LISTENING_FD ?? ''}}]`);
const listen = () => http.createServer((q, r) => r.end(mode)).listen({port}, () => note('listening'));
if (mode === 'leader') setTimeout(listen, 2000); else listen();
process.on('SIGTERM', () => process.exit(0));
"#
    ));
    let sv = start(
        &sb,
        &app,
        &["--leader-port-map=*=0", "--serving-head-start", "10s"],
    );
    let serving = wait_serving_listening(&sb, Duration::from_secs(8));
    // `MS PID MODE WHAT...`
    let events: Vec<Vec<String>> = sb
        .lines("events")
        .iter()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    let at = |mode: &str, what: &str| -> u64 {
        events
            .iter()
            .find(|e| e[2] == mode && e[3].starts_with(what))
            .and_then(|e| e[0].parse().ok())
            .unwrap_or_else(|| panic!("no {mode} {what} in {events:?}"))
    };
    assert!(
        at("follower", "start") >= at("leader", "listening"),
        "the serving instance started after the leader instance listened: {events:?}"
    );
    assert!(sv.logged("the leader instance listens; starting the serving instance"));
    // The pipe's number reached the leader instance alone, and the preload kept it from the
    // app's environment (and so from the app's own child processes).
    let leader = sv.mode()["child_pid"].as_i64().expect("leader instance") as i32;
    let has_fd_variable = |pid: i32| {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        environ_var(&environ, "PASSMOWER_ELECTOR_LISTENING_FD").is_some()
    };
    assert!(
        has_fd_variable(leader),
        "the leader instance was given the pipe"
    );
    assert!(!has_fd_variable(serving), "the serving instance was not");
    assert!(
        events
            .iter()
            .all(|e| e[3] != "start" || e[4] == "fd-variable=[]"),
        "the app never sees the variable: {events:?}"
    );
}

/// The serving instance's PID once it listens (its `listening` line in `events`).
fn wait_serving_listening(sb: &Sandbox, limit: Duration) -> i32 {
    let mut pid = None;
    assert!(
        wait_until(limit, POLL, || {
            pid = sb
                .lines("events")
                .iter()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .find(|e| e.get(2) == Some(&"follower") && e.get(3) == Some(&"listening"))
                .and_then(|e| e[1].parse().ok());
            pid.is_some()
        }),
        "the serving instance started and listens: {:?}",
        sb.lines("events")
    );
    pid.unwrap_or_default()
}

#[test]
fn a_crashed_serving_instance_restarts_and_the_leader_instance_is_left_alone() {
    let sb = Sandbox::new();
    let sv = start(&sb, &sb.recording_app(Some(0)), &[]);
    let serving = wait_serving(&sv, &sb);
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    let leader_pid = sv.wait_started(&sb, "leader", LIMIT).expect("leader");

    kill(Pid::from_raw(serving), Signal::SIGKILL).expect("kill serving instance");
    let mut again = None;
    assert!(
        wait_until(LIMIT, POLL, || {
            again = serving_pid(&sv).filter(|p| *p != serving);
            again.is_some()
        }),
        "the serving instance is restarted"
    );
    assert_eq!(sv.mode()["serving"]["restarts"], 1);
    assert!(alive(leader_pid), "the leader instance was touched");
    assert_eq!(sv.mode()["child_pid"].as_i64(), Some(i64::from(leader_pid)));
    assert_eq!(sb.ack().expect("ack")["mode"], "leader");
    assert!(sb.ack().expect("ack")["leader_start_failures"].is_null());
}

#[test]
fn sigterm_stops_both_writes_stopped_and_exits_with_the_serving_instances_status() {
    let sb = Sandbox::new();
    let dir = sb.dir.path().display().to_string();
    let app = sb.script(
        "app.sh",
        &format!(
            "if [ \"$MODE\" = leader ]; then trap 'exit 7' TERM; else trap 'exit 5' TERM; fi\n\
             echo \"$$ mode=$MODE\" >> {dir}/starts\n\
             while :; do sleep 0.05 & wait $!; done"
        ),
    );
    let mut sv = start(&sb, &app, &[]);
    let serving = wait_serving(&sv, &sb);
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    let leader_pid = sv.wait_started(&sb, "leader", LIMIT).expect("leader");

    sv.signal(Signal::SIGTERM);
    let status = sv.wait_exit(LIMIT).expect("supervisor exits");
    assert_eq!(status.code(), Some(5), "the serving instance's status");
    assert!(!exists(serving) && !exists(leader_pid));
    assert_eq!(sb.ack().expect("ack")["mode"], "stopped");
}

#[test]
fn with_exit_with_child_a_leader_instance_exit_takes_the_serving_one_down_too() {
    let sb = Sandbox::new();
    let dir = sb.dir.path().display().to_string();
    let app = sb.script(
        "app.sh",
        &format!(
            "echo \"$$ mode=$MODE\" >> {dir}/starts\n\
             if [ \"$MODE\" = leader ]; then sleep 0.3; exit 9; fi\n\
             trap 'exit 0' TERM\n\
             while :; do sleep 0.05 & wait $!; done"
        ),
    );
    let mut sv = start(&sb, &app, &["--exit-with-child"]);
    let serving = wait_serving(&sv, &sb);
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    let status = sv
        .wait_exit(LIMIT)
        .expect("supervisor exits with the child");
    assert_eq!(status.code(), Some(9));
    assert!(
        !exists(serving),
        "the serving instance outlived the supervisor"
    );
}

/// A Node app with two fixed ports, bound the ways real apps do (a numeric string as from
/// `process.env.PORT`, an options object, a number with a host), answering its MODE. Needs
/// `node` (Debian `nodejs`, installed by .ci/run).
fn node_app(sb: &Sandbox, port_a: u16, port_b: u16) -> std::path::PathBuf {
    let dir = sb.dir.path().display().to_string();
    sb.node_app(&format!(
        r#"import http from 'node:http';
import fs from 'node:fs';
const mode = process.env.MODE;
const seen = [];
const done = () => {{ if (seen.length === 3) fs.appendFileSync('{dir}/starts', `${{process.pid}} mode=${{mode}} ${{seen.join(' ')}}\n`); }};
const serve = () => http.createServer((q, r) => r.end(mode));
const a = serve().listen(String({port_a}), () => {{ seen.push(`a=${{a.address().address}}:${{a.address().port}}`); done(); }});
const b = serve().listen({{ port: {port_b} }}, () => {{ seen.push(`b=${{b.address().address}}:${{b.address().port}}`); done(); }});
const c = serve().listen(0, '0.0.0.0', () => {{ seen.push(`c=${{c.address().address}}`); done(); }});
for (const s of [a, b, c]) s.on('error', (e) => {{ console.error(`${{mode}}: ${{e.message}}`); process.exit(4); }});
process.on('SIGTERM', () => process.exit(0));
"#
    ))
}

#[test]
fn a_node_leader_instance_binds_elsewhere_with_the_port_map_and_cannot_start_without_it() {
    needs_node();
    let (port_a, port_b) = (free_port(), free_port());
    let sb = Sandbox::new();
    let app = node_app(&sb, port_a, port_b);
    let sv = start(&sb, &app, &["--leader-port-map=*=0"]);
    wait_serving(&sv, &sb);
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    let leader_pid = sv.wait_mode("leader", LIMIT).expect("leader instance");
    assert!(
        wait_until(LIMIT, POLL, || sb.lines("starts").len() == 2),
        "both instances listen: {:?}",
        sb.lines("starts")
    );
    let lines = sb.lines("starts");
    // `PID mode=M a=HOST:PORT b=HOST:PORT c=HOST` in the order the listeners came up.
    let listeners = |mode: &str| -> Vec<(String, String)> {
        let line = lines
            .iter()
            .find(|l| l.split_whitespace().nth(1) == Some(&format!("mode={mode}")))
            .unwrap_or_else(|| panic!("no {mode} start in {lines:?}"));
        let mut found: Vec<(String, String)> = line
            .split_whitespace()
            .skip(2)
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        found.sort();
        found
    };
    let on_serving = listeners("follower");
    assert!(
        on_serving[0].1.ends_with(&format!(":{port_a}")),
        "{on_serving:?}"
    );
    assert!(
        on_serving[1].1.ends_with(&format!(":{port_b}")),
        "{on_serving:?}"
    );
    let on_leader = listeners("leader");
    assert_eq!(on_leader.len(), 3, "{on_leader:?}");
    for (name, address) in &on_leader {
        // Every listener of the leader instance is on loopback, off the fixed ports.
        assert!(address.starts_with("127.0.0.1"), "{name}={address}");
        assert!(
            !address.ends_with(&format!(":{port_a}")) && !address.ends_with(&format!(":{port_b}")),
            "{name}={address}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{leader_pid} mode=leader"))),
        "{lines:?}"
    );
    // The move goes to stderr, which reaches the log through a pipe: it may trail the record.
    assert!(
        wait_until(LIMIT, POLL, || sv
            .log_contains("leader instance: listen on port")),
        "the move is logged"
    );
    // The fixed ports still answer from the serving instance.
    for port in [port_a, port_b] {
        assert_eq!(http(port, "GET", "/", b"").expect("GET").1, "follower");
    }
    assert!(sb.ack().expect("ack")["leader_start_failures"].is_null());
    drop(sv);

    // Without the map the leader instance collides with the serving one and cannot run: the
    // failures reach the elector in the ack, which steps down after --max-leader-failures.
    let sb = Sandbox::new();
    let app = node_app(&sb, port_a, port_b);
    let sv = start(&sb, &app, &["--restart-backoff-initial", "100ms"]);
    wait_serving(&sv, &sb);
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    assert!(
        wait_until(LIMIT, POLL, || sb
            .ack()
            .and_then(|a| a["leader_start_failures"].as_u64())
            .is_some_and(|n| n >= 1)),
        "{:?}",
        sb.ack()
    );
    assert!(
        wait_until(LIMIT, POLL, || sv.log_contains("EADDRINUSE")),
        "the collision is in the log"
    );
}

/// An agent preloaded through NODE_OPTIONS that opens a fixed port of its own (an APM or
/// OpenTelemetry exporter), as a CommonJS `--require` module or an ES `--import` one, with no
/// error handler: on a collision the whole instance dies, as such agents' do. It records
/// `PID MODE NAME HOST:PORT` in `agents`.
fn listening_agent(sb: &Sandbox, name: &str, port: u16, esm: bool) -> std::path::PathBuf {
    let dir = sb.dir.path().display().to_string();
    let (file, header) = if esm {
        (
            format!("{name}.mjs"),
            "import net from 'node:net';\nimport fs from 'node:fs';",
        )
    } else {
        (
            format!("{name}.js"),
            "const net = require('net');\nconst fs = require('fs');",
        )
    };
    let path = sb.path(&file);
    std::fs::write(
        &path,
        format!(
            "{header}\n\
             const s = net.createServer((c) => c.end('{name}'));\n\
             s.listen({port}, () => fs.appendFileSync('{dir}/agents', \
             `${{process.pid}} ${{process.env.MODE}} {name} ${{s.address().address}}:${{s.address().port}}\\n`));\n"
        ),
    )
    .expect("write agent");
    path
}

/// Node runs every `--require` before any `--import`, and the port map's preload was appended
/// after the container's own NODE_OPTIONS: an agent's port was bound unmoved in the leader
/// instance, beside the serving instance's, and every leader instance died of EADDRINUSE. Both
/// kinds of agent now load after the port map's patch and are moved with the app's ports.
#[test]
fn agents_preloaded_through_node_options_are_moved_with_the_apps_ports() {
    needs_node();
    let (port_a, port_b, port_cjs, port_esm) = (free_port(), free_port(), free_port(), free_port());
    let sb = Sandbox::new();
    let cjs = listening_agent(&sb, "cjs-agent", port_cjs, false);
    let esm = listening_agent(&sb, "esm-agent", port_esm, true);
    let node_options = format!("--import={} --require {}", esm.display(), cjs.display());
    let app = node_app(&sb, port_a, port_b);
    let sv = Supervisor::start_env(
        &sb,
        &[("NODE_OPTIONS", &node_options)],
        &[FLAGS.as_slice(), &["--leader-port-map=*=0"]].concat(),
        &[app.to_str().unwrap_or_default()],
    );
    wait_serving(&sv, &sb);
    assert!(
        wait_until(LIMIT, POLL, || sb.lines("agents").len() == 2),
        "the serving instance's agents listen: {:?}",
        sb.lines("agents")
    );
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    let leader_pid = sv.wait_mode("leader", LIMIT).expect("leader instance");
    assert!(
        wait_until(LIMIT, POLL, || sb.lines("agents").len() == 4
            && sb.lines("starts").len() == 2),
        "the leader instance's agents and app listen too: agents {:?}, starts {:?}",
        sb.lines("agents"),
        sb.lines("starts")
    );
    let agents = sb.lines("agents");
    for (name, port) in [("cjs-agent", port_cjs), ("esm-agent", port_esm)] {
        let on = |mode: &str| {
            agents
                .iter()
                .find(|l| l.contains(&format!(" {mode} {name} ")))
                .and_then(|l| l.split_whitespace().nth(3))
                .unwrap_or_else(|| panic!("no {mode} {name} in {agents:?}"))
                .to_owned()
        };
        assert!(on("follower").ends_with(&format!(":{port}")), "{agents:?}");
        let moved = on("leader");
        assert!(
            moved.starts_with("127.0.0.1:") && !moved.ends_with(&format!(":{port}")),
            "{name} in the leader instance: {moved}"
        );
        // The fixed port still answers from the serving instance's agent.
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let mut reply = String::new();
        std::io::Read::read_to_string(&mut conn, &mut reply).expect("read");
        assert_eq!(reply, name);
    }
    assert!(
        agents
            .iter()
            .any(|l| l.starts_with(&format!("{leader_pid} leader "))),
        "{agents:?}"
    );
    assert_eq!(sv.mode()["child_pid"].as_i64(), Some(i64::from(leader_pid)));
    assert!(sb.ack().expect("ack")["leader_start_failures"].is_null());
    assert!(!sv.log_contains("EADDRINUSE"));
}

/// A leader instance whose group outlives its main process for a while after SIGTERM: the
/// main process exits at once, a helper in its group takes `linger` to follow.
fn app_with_lingering_helper(sb: &Sandbox, linger: Duration) -> std::path::PathBuf {
    let dir = sb.dir.path().display().to_string();
    let linger = linger.as_secs_f64();
    sb.script(
        "app.sh",
        &format!(
            "if [ \"$MODE\" = leader ]; then \
             sh -c \"trap 'sleep {linger}; exit 0' TERM; echo \\$\\$ >> {dir}/helper; \
             while :; do sleep 0.05 & wait \\$!; done\" & fi\n\
             trap 'exit 0' TERM\n\
             echo \"$$ mode=$MODE\" >> {dir}/starts\n\
             while :; do sleep 0.05 & wait $!; done"
        ),
    )
}

/// The newest helper's PID, once the leader instance has started it.
fn newest_helper(sb: &Sandbox, count: usize) -> i32 {
    assert!(
        wait_until(LIMIT, POLL, || sb.lines("helper").len() >= count),
        "helper {count} started"
    );
    sb.lines("helper")[count - 1]
        .trim()
        .parse()
        .expect("helper pid")
}

#[test]
fn a_demotion_is_acked_only_once_the_leader_instances_whole_group_is_gone() {
    let sb = Sandbox::new();
    let linger = Duration::from_millis(600);
    let sv = start(
        &sb,
        &app_with_lingering_helper(&sb, linger),
        &["--kill-grace", "5s"],
    );
    let serving = wait_serving(&sv, &sb);

    // By push: the 200 is the ack.
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    let leader_pid = sv.wait_started(&sb, "leader", LIMIT).expect("leader");
    let helper = newest_helper(&sb, 1);
    let asked = Instant::now();
    let (status, body) = sv.push(&follower(1, 2));
    let took = asked.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(
        !exists(leader_pid) && !exists(helper),
        "demotion acked while the leader instance's group still had a process \
         (leader {leader_pid} exists: {}, helper {helper} exists: {})",
        exists(leader_pid),
        exists(helper)
    );
    // The helper really held the ack back (else this test could not tell a group from a PID).
    assert!(took >= linger / 2, "acked after {took:?}");
    assert_eq!(sb.ack().expect("ack")["mode"], "follower");

    // By the flag file: the ack file says follower only once the group is gone.
    sb.write_grant(&leader(1, 3, Duration::from_secs(60)));
    sv.wait_started(&sb, "leader", LIMIT).expect("leader again");
    let helper = newest_helper(&sb, 2);
    assert!(wait_until(LIMIT, POLL, || sb
        .ack()
        .is_some_and(|a| a["mode"] == "leader" && a["seq"] == 3)));
    sb.write_grant(&follower(1, 4));
    let mut early = None;
    let acked = wait_until(LIMIT, POLL, || {
        let demoted = sb
            .ack()
            .is_some_and(|a| a["mode"] == "follower" && a["seq"] == 4);
        if demoted && exists(helper) {
            early = Some(helper);
        }
        demoted
    });
    assert!(acked, "the demotion was never acked: {:?}", sb.ack());
    assert_eq!(
        early, None,
        "the ack file said follower while the helper lived"
    );
    assert!(!exists(helper));
    assert!(alive(serving), "the serving instance went with a demotion");
    assert_eq!(serving_pid(&sv), Some(serving));
}

#[test]
fn a_forged_or_unverified_grant_never_starts_a_leader_instance() {
    let sb = Sandbox::new();
    let sv = start(&sb, &sb.recording_app(Some(0)), &[]);
    let serving = wait_serving(&sv, &sb);
    for (what, forged) in forgeries() {
        let (status, body) = sv.push_raw(&forged);
        assert!(
            status == 401 || status == 403,
            "{what}: answered {status} {body}"
        );
        sb.write_raw_grant(&forged);
    }
    // Signed by the elector's key, but naming an incarnation the token does not.
    let (status, body) = sv.push(&leader(2, 1, Duration::from_secs(60)));
    assert_eq!(status, 403, "{body}");
    assert!(
        wait_until(LIMIT, POLL, || sv
            .log_contains("cannot be tied to the elector")),
        "the flag file's forgeries were not refused"
    );
    // Long enough for a start the refusal failed to prevent to be recorded.
    std::thread::sleep(Duration::from_millis(500));
    let m = sv.mode();
    assert!(m["child_pid"].is_null(), "a leader instance runs: {m}");
    assert_eq!(m["mode"], "follower");
    assert_eq!(
        sb.starts(),
        vec![(serving, "follower".to_owned())],
        "only the serving instance ever started"
    );
    // The elector's own grant still works after them.
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    sv.wait_started(&sb, "leader", LIMIT)
        .expect("leader instance");
}

#[test]
fn the_serving_instance_never_has_the_leader_environment_or_arguments() {
    let sb = Sandbox::new();
    let dir = sb.dir.path().display().to_string();
    // Records what matters of its environment: MODE, a leader-only key, the port map's table
    // and NODE_OPTIONS (the preload), and its arguments.
    let app = sb.script(
        "app.sh",
        &format!(
            "echo \"$$ mode=$MODE extra=[$EXTRA] table=[$PASSMOWER_ELECTOR_PORT_MAP] \
             node_options=[$NODE_OPTIONS] args=[$*]\" >> {dir}/starts\n\
             trap 'exit 0' TERM\n\
             while :; do sleep 0.05 & wait $!; done"
        ),
    );
    let sv = start(
        &sb,
        &app,
        &[
            "--leader-port-map=*=0",
            "--leader-env",
            "EXTRA=leader-only",
            "--follower-env",
            "EXTRA=",
            "--leader-args",
            "--operators",
            "--follower-args",
            "--serve",
        ],
    );
    let serving = wait_serving(&sv, &sb);
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    let leader_pid = sv.wait_started(&sb, "leader", LIMIT).expect("leader");
    // The serving instance crashes while the pod leads: its restart is a serving one too.
    kill(Pid::from_raw(serving), Signal::SIGKILL).expect("kill serving instance");
    assert!(
        wait_until(LIMIT, POLL, || sb.lines("starts").len() == 3),
        "{:?}",
        sb.lines("starts")
    );
    let lines = sb.lines("starts");
    for line in &lines {
        let pid: i32 = line
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("pid");
        if pid == leader_pid {
            assert!(line.contains("mode=leader extra=[leader-only]"), "{line}");
            assert!(line.contains("args=[--operators]"), "{line}");
            assert!(!line.contains("table=[]"), "no port map table: {line}");
            assert!(line.contains("--import=data:"), "no preload: {line}");
        } else {
            assert_eq!(
                line,
                &format!("{pid} mode=follower extra=[] table=[] node_options=[] args=[--serve]"),
                "a serving instance with (part of) the leader's environment"
            );
        }
    }
    assert_eq!(sv.mode()["serving"]["restarts"], 1);
    assert_eq!(sv.mode()["child_pid"].as_i64(), Some(i64::from(leader_pid)));
}
