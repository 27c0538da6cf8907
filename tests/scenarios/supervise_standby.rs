//! `--leader-standby`: a Node leader instance started ahead of the promotion with the follower
//! environment, its dependencies imported, runs no app code until the go; a promotion gives it
//! the leader environment instead of starting a process, and every rule of a leader instance
//! (acks, expiry + K, the kill grace, a new one only once the old one is gone) holds from the go.
//! A supervisor that dies or shuts down leaves no standby that could run the app.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::product::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pme_testkit::wait::{wait_until, POLL};
use pme_testkit::{free_port, needs_node};

const LIMIT: Duration = Duration::from_secs(30);

/// A Node app in the sandbox, laid out as an npm-installed one: `package.json` naming two
/// dependencies, `warm-dep` (in `node_modules`, with one file for `import` and another for
/// `require`, each recording `PID import|require` in `deps` when it is loaded) and
/// `missing-dep` (not installed). Its top-level code (the app's first line) records
/// `PID mode=… extra=… fd=… imports=N child=[…]` in `starts`: MODE and EXTRA, the standby's
/// descriptor variable, how many `--import`s its NODE_OPTIONS holds, and what a child process
/// it runs sees. It listens on `port` (moved by the port map in a leader instance) and records
/// `PID MODE HOST:PORT` in `listens`. On SIGTERM it records `PID` in `stops` and exits, unless
/// it is a leader and `leader_ignores_term`.
fn node_app(sb: &Sandbox, port: u16, leader_ignores_term: bool) -> PathBuf {
    let dir = sb.dir.path().display().to_string();
    let dep = sb.path("node_modules/warm-dep");
    std::fs::create_dir_all(&dep).expect("node_modules");
    std::fs::write(
        dep.join("package.json"),
        r#"{"name":"warm-dep","version":"1.0.0","exports":{".":{"import":"./esm.mjs","require":"./cjs.cjs"}}}"#,
    )
    .expect("dep package.json");
    std::fs::write(
        dep.join("esm.mjs"),
        format!(
            "import fs from 'node:fs';\nfs.appendFileSync('{dir}/deps', `${{process.pid}} import\\n`);\nexport const warm = true;\n"
        ),
    )
    .expect("esm.mjs");
    std::fs::write(
        dep.join("cjs.cjs"),
        format!(
            "require('fs').appendFileSync('{dir}/deps', `${{process.pid}} require\\n`);\nexports.warm = true;\n"
        ),
    )
    .expect("cjs.cjs");
    std::fs::write(
        sb.path("package.json"),
        r#"{"name":"app","type":"module","dependencies":{"warm-dep":"1.0.0","missing-dep":"1.0.0"}}"#,
    )
    .expect("app package.json");
    let js = sb.path("app.mjs");
    std::fs::write(
        &js,
        format!(
            r#"import fs from 'node:fs';
import http from 'node:http';
import {{ execFileSync }} from 'node:child_process';
import {{ warm }} from 'warm-dep';
const mode = process.env.MODE;
// The handler before the start record: a test that saw the start may signal the app.
process.on('SIGTERM', () => {{
  if (mode === 'leader' && {leader_ignores_term}) return;
  fs.appendFileSync('{dir}/stops', `${{process.pid}}\n`);
  process.exit(0);
}});
const imports = (process.env.NODE_OPTIONS || '').split(' ').filter((w) => w.startsWith('--import')).length;
const child = execFileSync('sh', ['-c', 'echo "$MODE,${{PASSMOWER_ELECTOR_STANDBY_FD:-unset}}"']).toString().trim();
fs.appendFileSync('{dir}/starts', `${{process.pid}} mode=${{mode}} extra=${{process.env.EXTRA ?? 'unset'}} fd=${{process.env.PASSMOWER_ELECTOR_STANDBY_FD ?? 'unset'}} imports=${{imports}} child=[${{child}}] warm=${{warm}}\n`);
const server = http.createServer((q, r) => r.end(mode));
server.listen({port}, () => fs.appendFileSync('{dir}/listens', `${{process.pid}} ${{mode}} ${{server.address().address}}:${{server.address().port}}\n`));
server.on('error', (e) => {{ console.error(`${{mode}}: ${{e.message}}`); process.exit(4); }});
"#
        ),
    )
    .expect("app.mjs");
    js
}

const FLAGS: [&str; 9] = [
    "--on-change=leader-instance",
    "--leader-port-map=*=0",
    "--leader-standby",
    "--leader-env",
    "MODE=leader",
    "--follower-env",
    "MODE=follower",
    "--follower-env",
    "EXTRA=follower-only",
];

fn start(sb: &Sandbox, app: &Path, extra: &[&str]) -> Supervisor {
    start_env(sb, app, &[], extra)
}

fn start_env(sb: &Sandbox, app: &Path, env: &[(&str, &str)], extra: &[&str]) -> Supervisor {
    needs_node();
    let mut flags = FLAGS.to_vec();
    flags.extend_from_slice(extra);
    Supervisor::start_env(sb, env, &flags, &["node", app.to_str().unwrap_or_default()])
}

fn serving_pid(sv: &Supervisor) -> Option<i32> {
    sv.mode()["serving"]["pid"].as_i64().map(|p| p as i32)
}

/// The waiting standby's PID, once it has imported the app's dependency (so it waits in the
/// pipe read, past everything the preload does before).
fn wait_standby(sv: &Supervisor, sb: &Sandbox) -> i32 {
    let mut pid = None;
    let ok = wait_until(LIMIT, POLL, || {
        let m = sv.mode();
        pid = (m["standby"]["ready"] == true)
            .then(|| m["standby"]["pid"].as_i64())
            .flatten()
            .map(|p| p as i32);
        pid.is_some_and(|p| deps_of(sb, p).contains(&"import".to_owned()))
            && sv.log_contains("waiting for the go")
    });
    assert!(ok, "no standby waits: {}", sv.mode());
    pid.unwrap_or_default()
}

/// What `pid` recorded of the dependency's loads (`import`, `require`).
fn deps_of(sb: &Sandbox, pid: i32) -> Vec<String> {
    sb.lines("deps")
        .iter()
        .filter_map(|l| l.split_once(' '))
        .filter(|(p, _)| p.parse() == Ok(pid))
        .map(|(_, how)| how.to_owned())
        .collect()
}

/// The app's start record of `pid`, if its first line ran.
fn start_of(sb: &Sandbox, pid: i32) -> Option<String> {
    sb.lines("starts")
        .into_iter()
        .find(|l| l.split_whitespace().next() == Some(&pid.to_string()))
}

fn wait_serving(sv: &Supervisor, sb: &Sandbox) -> i32 {
    let mut pid = None;
    assert!(
        wait_until(LIMIT, POLL, || {
            pid = serving_pid(sv);
            pid.is_some_and(|p| start_of(sb, p).is_some())
        }),
        "the serving instance started"
    );
    pid.unwrap_or_default()
}

#[test]
fn a_standby_runs_no_app_code_until_promoted_then_leads_with_exactly_the_leader_environment() {
    let sb = Sandbox::new();
    let port = free_port();
    let app = node_app(&sb, port, false);
    let sv = start_env(&sb, &app, &[("EXTRA", "container")], &[]);
    let serving = wait_serving(&sv, &sb);
    let standby = wait_standby(&sv, &sb);
    assert_ne!(standby, serving);
    // The dependency was imported ahead, resolved as the app's own `import` resolves it.
    assert_eq!(deps_of(&sb, standby), vec!["import".to_owned()]);
    // Long enough for app code that ran early to have recorded itself.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        start_of(&sb, standby),
        None,
        "the standby ran app code before its go"
    );
    let m = sv.mode();
    assert!(m["child_pid"].is_null(), "{m}");
    assert_eq!(m["standby"]["spawned"], 1);
    assert!(
        sv.logged("1 of 2 dependencies imported; skipped missing-dep"),
        "a dependency that cannot be imported is skipped"
    );

    let (status, body) = sv.push(&leader(1, 1, Duration::from_secs(60)));
    assert_eq!(status, 200, "{body}");
    let m = sv.mode();
    assert_eq!(
        m["child_pid"].as_i64(),
        Some(i64::from(standby)),
        "the standby became the leader instance: {m}"
    );
    assert_eq!(m["child_mode"], "leader");
    assert_eq!(m["standby"]["used"], 1);
    assert_eq!(m["standby"]["ready"], false, "{m}");
    assert!(
        wait_until(LIMIT, POLL, || start_of(&sb, standby).is_some()),
        "the app never started after the go"
    );
    // The leader environment, exactly: MODE from --leader-env, EXTRA (follower-only) back to
    // the container's own, the descriptor's variable gone, NODE_OPTIONS with the port map's
    // preload only, and a child process started by the app sees the same.
    assert_eq!(
        start_of(&sb, standby).as_deref(),
        Some(
            format!(
                "{standby} mode=leader extra=container fd=unset imports=1 child=[leader,unset] warm=true"
            )
            .as_str()
        )
    );
    assert_eq!(
        deps_of(&sb, standby),
        vec!["import".to_owned()],
        "the app's import found the dependency in the module cache"
    );
    // Its listener is moved like a fresh leader instance's, and the serving one keeps the port.
    assert!(
        wait_until(LIMIT, POLL, || sb.lines("listens").len() == 2),
        "{:?}",
        sb.lines("listens")
    );
    let moved = sb
        .lines("listens")
        .into_iter()
        .find(|l| l.starts_with(&format!("{standby} leader ")))
        .expect("the leader instance listens");
    assert!(
        moved.contains(" 127.0.0.1:") && !moved.ends_with(&format!(":{port}")),
        "{moved}"
    );
    assert_eq!(http(port, "GET", "/", b"").expect("GET").1, "follower");
    assert_eq!(serving_pid(&sv), Some(serving));

    // Demoted: the leader instance goes, and only then does a new standby start.
    let (status, body) = sv.push(&follower(1, 2));
    assert_eq!(status, 200, "{body}");
    assert!(
        !exists(standby),
        "demotion acked while the leader instance existed"
    );
    let next = wait_standby(&sv, &sb);
    assert_ne!(next, standby);
    assert_eq!(start_of(&sb, next), None, "the new standby ran app code");
    assert_eq!(sv.mode()["standby"]["spawned"], 2);
    assert_eq!(serving_pid(&sv), Some(serving), "the serving instance kept");
}

#[test]
fn a_supervisor_killed_while_the_standby_waits_leaves_no_app_running_its_code() {
    let sb = Sandbox::new();
    let app = node_app(&sb, free_port(), false);
    let mut sv = start(&sb, &app, &[]);
    let serving = wait_serving(&sv, &sb);
    let standby = wait_standby(&sv, &sb);
    sv.signal(Signal::SIGKILL);
    assert!(sv.wait_exit(LIMIT).is_some(), "the supervisor did not die");
    let gone = wait_until(LIMIT, POLL, || !alive(standby));
    // The serving instance is orphaned by the SIGKILL, as in a container whose PID 1 died;
    // ours to end.
    let _ = kill(Pid::from_raw(-serving), Signal::SIGKILL);
    assert!(gone, "the standby outlived its supervisor");
    assert_eq!(start_of(&sb, standby), None, "the standby ran the app");
    assert!(
        sv.logged("withdrawn (the supervisor closed the pipe or is gone)"),
        "the standby did not say why it exited"
    );
}

#[test]
fn no_go_is_sent_for_a_demotion_a_lapsed_grant_or_a_grant_that_cannot_be_tied_to_the_elector() {
    let sb = Sandbox::new();
    let app = node_app(&sb, free_port(), false);
    let sv = start(&sb, &app, &[]);
    wait_serving(&sv, &sb);
    let standby = wait_standby(&sv, &sb);
    assert_eq!(sv.push(&follower(1, 1)).0, 200);
    // Lapsed when it arrives: obeyed as follower.
    let (status, body) = sv.push(&leader(1, 2, Duration::ZERO));
    assert_eq!(status, 200, "{body}");
    assert_eq!(sv.mode()["mode"], "follower");
    sb.write_grant(&leader(1, 3, Duration::ZERO));
    for (what, forged) in forgeries() {
        let (status, body) = sv.push_raw(&forged);
        assert!(status == 401 || status == 403, "{what}: {status} {body}");
        sb.write_raw_grant(&forged);
    }
    assert!(wait_until(LIMIT, POLL, || sv
        .log_contains("cannot be tied to the elector")));
    assert_eq!(sv.push(&follower(1, 4)).0, 200);
    // Long enough for a go that slipped through to have started the app.
    std::thread::sleep(Duration::from_millis(700));
    let m = sv.mode();
    assert_eq!(m["standby"]["used"], 0, "{m}");
    assert_eq!(m["standby"]["pid"].as_i64(), Some(i64::from(standby)));
    assert!(m["child_pid"].is_null(), "{m}");
    assert_eq!(start_of(&sb, standby), None, "the standby ran the app");
    // The same standby still takes a real promotion.
    assert_eq!(sv.push(&leader(1, 5, Duration::from_secs(60))).0, 200);
    assert_eq!(sv.mode()["child_pid"].as_i64(), Some(i64::from(standby)));
    assert!(wait_until(LIMIT, POLL, || start_of(&sb, standby)
        .is_some_and(|l| l.contains("mode=leader"))));
}

#[test]
fn the_kill_grace_and_expiry_plus_k_bound_a_standby_born_leader_as_any_leader_instance() {
    let sb = Sandbox::new();
    let app = node_app(&sb, free_port(), true);
    let grace = Duration::from_millis(800);
    let sv = start(&sb, &app, &["--kill-grace", "800ms"]);
    let serving = wait_serving(&sv, &sb);

    // A demotion: SIGTERM is ignored, so the group goes at SIGKILL, the kill grace after it.
    let standby = wait_standby(&sv, &sb);
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    assert_eq!(sv.mode()["child_pid"].as_i64(), Some(i64::from(standby)));
    assert!(wait_until(LIMIT, POLL, || start_of(&sb, standby).is_some()));
    let asked = Instant::now();
    let (status, body) = sv.push(&follower(1, 2));
    let took = asked.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(!exists(standby), "acked while the leader instance existed");
    assert!(
        took >= grace - Duration::from_millis(100) && took <= grace + Duration::from_millis(700),
        "demotion acked after {took:?}, kill grace {grace:?}"
    );
    eprintln!("standby-born leader demoted: acked {took:?} after the follower push");

    // A lapse: no elector, no renewal; gone no later than expiry + K.
    let second = wait_standby(&sv, &sb);
    let ttl = Duration::from_millis(1500);
    let granted = Instant::now();
    assert_eq!(sv.push(&leader(1, 3, ttl)).0, 200);
    assert_eq!(sv.mode()["child_pid"].as_i64(), Some(i64::from(second)));
    assert!(
        wait_until(LIMIT, POLL, || !exists(second)),
        "the lapsed leader instance was never killed"
    );
    let gone = granted.elapsed();
    assert!(
        gone <= ttl + grace + Duration::from_millis(300),
        "the standby-born leader outlived expiry + K: {gone:?}"
    );
    eprintln!(
        "lapsed standby-born leader gone {gone:?} after the grant (expiry + K {:?})",
        ttl + grace
    );
    assert!(alive(serving));
    assert!(wait_until(LIMIT, POLL, || sb
        .ack()
        .is_some_and(|a| a["mode"] == "follower" && a["seq"] == 3)));
}

#[test]
fn a_promotion_with_no_standby_waiting_starts_the_leader_instance_afresh() {
    let sb = Sandbox::new();
    let app = node_app(&sb, free_port(), false);
    // The standby's restart waits out the backoff: the promotion below finds none.
    let sv = start(
        &sb,
        &app,
        &[
            "--restart-backoff-initial",
            "20s",
            "--restart-backoff-max",
            "20s",
        ],
    );
    wait_serving(&sv, &sb);
    let standby = wait_standby(&sv, &sb);
    kill(Pid::from_raw(standby), Signal::SIGKILL).expect("kill the standby");
    assert!(wait_until(LIMIT, POLL, || sv.log_contains("standby exited on its own")));
    assert!(sv.mode()["standby"]["ready"] == false);
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    let m = sv.mode();
    let leader_pid = m["child_pid"].as_i64().expect("a leader instance") as i32;
    assert_ne!(leader_pid, standby);
    assert_eq!(m["standby"]["missed"], 1, "{m}");
    assert_eq!(m["standby"]["used"], 0, "{m}");
    assert!(sv.logged("no standby waiting; starting the leader instance afresh"));
    assert!(wait_until(LIMIT, POLL, || start_of(&sb, leader_pid)
        .is_some_and(|l| l.starts_with(&format!(
            "{leader_pid} mode=leader extra=unset fd=unset imports=1 "
        )))));
    assert_eq!(start_of(&sb, standby), None);
}

#[test]
fn shutdown_kills_a_waiting_standby_at_once_and_exits_with_the_serving_instances_status() {
    let sb = Sandbox::new();
    let app = node_app(&sb, free_port(), false);
    let mut sv = start(&sb, &app, &["--kill-grace", "5s"]);
    let serving = wait_serving(&sv, &sb);
    let standby = wait_standby(&sv, &sb);
    let asked = Instant::now();
    sv.signal(Signal::SIGTERM);
    let status = sv.wait_exit(LIMIT).expect("the supervisor exits");
    let took = asked.elapsed();
    assert_eq!(status.code(), Some(0), "the serving instance's status");
    assert!(!exists(standby) && !exists(serving));
    assert!(
        took < Duration::from_secs(3),
        "the standby was given a grace: exit took {took:?}"
    );
    assert_eq!(start_of(&sb, standby), None);
    assert_eq!(sb.ack().expect("ack")["mode"], "stopped");
    assert!(sv.logged("standby killed: the supervisor is shutting down"));
}

#[test]
fn leader_standby_without_a_node_leader_instance_or_with_leader_args_exits_2() {
    let sb = Sandbox::new();
    for (flags, expect) in [
        (
            &["--leader-standby"][..],
            "needs --on-change=leader-instance",
        ),
        (
            &["--leader-standby", "--on-change=leader-instance"][..],
            "needs --leader-port-map",
        ),
        (
            &[
                "--leader-standby",
                "--on-change=leader-instance",
                "--leader-port-map=*=0",
                "--leader-args",
                "--operators",
                "--follower-args",
                "--serve",
            ][..],
            "cannot be combined with --leader-args",
        ),
    ] {
        let out = std::process::Command::new(BIN)
            .arg("supervise")
            .arg("--flag-file")
            .arg(sb.flag_file())
            .args(["--listen", "127.0.0.1:0"])
            .args(flags)
            .args(["--", "node", "app.mjs"])
            .output()
            .expect("run supervise");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains("--leader-standby"), "{flags:?}: {stderr}");
        assert!(stderr.contains(expect), "{flags:?}: {stderr}");
    }
    // ELECTOR_LEADER_STANDBY is the same flag.
    let out = std::process::Command::new(BIN)
        .env("ELECTOR_LEADER_STANDBY", "true")
        .arg("supervise")
        .arg("--flag-file")
        .arg(sb.flag_file())
        .args(["--listen", "127.0.0.1:0", "--", "node", "app.mjs"])
        .output()
        .expect("run supervise");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--leader-standby"));
}
