//! `--on-change=lease-bridge`: the flags it refuses (exit 2, the flag named), an app whose
//! election the bridge cannot reach (refused, exit 2, nothing acked), and the ack rule against a
//! small Node app whose election is built like Passmower 2.4's (one tick a second, never two at
//! once, its Lease read through `KubernetesAdapter` in `src/adapters/kubernetes.js`): a promotion
//! is acked only once that election has taken it in, and a demotion ends the process (SIGKILL)
//! before it is acked. The real Passmower 2.4 under this mode is
//! `tests/api/lease_bridge.rs`.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use crate::product::*;
use pme_testkit::wait::{wait_until, POLL};

const LIMIT: Duration = Duration::from_secs(20);

fn run(sb: &Sandbox, args: &[&str], command: &[&str]) -> Output {
    let flag = sb.flag_file().display().to_string();
    let mut child = Command::new(BIN)
        .arg("supervise")
        .args(["--flag-file", &flag, "--listen", "127.0.0.1:0"])
        .args(args)
        .arg("--")
        .args(command)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let exited = wait_until(Duration::from_secs(40), POLL, || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = child.kill();
    }
    child.wait_with_output().expect("wait")
}

#[test]
fn what_one_process_for_both_modes_cannot_do_is_refused_with_the_flag_named() {
    for (args, flag, why) in [
        (
            &["--on-change=lease-bridge", "--on-follower=stop"][..],
            "--on-follower",
            "runs (and serves) in both modes",
        ),
        (
            &[
                "--on-change=lease-bridge",
                "--leader-args=--x=1",
                "--follower-args=--x=2",
            ][..],
            "--leader-args",
            "cannot differ between the modes",
        ),
        (
            &["--on-change=lease-bridge", "--kill-grace=2s"][..],
            "--kill-grace",
            "at least 3s",
        ),
        (
            &["--on-change=lease-bridge", "--converge-oidc-clients"][..],
            "--converge-oidc-clients",
            "with lease-bridge",
        ),
        (
            &["--on-change=lease-bridgee"][..],
            "--on-change",
            "lease-bridge",
        ),
    ] {
        let sb = Sandbox::new();
        let marker = sb.path("started");
        let app = sb.script("app.sh", &format!("touch {}", marker.display()));
        let out = run(&sb, args, &[app.to_str().unwrap_or_default()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {flag} not in {stderr}");
        assert!(stderr.contains(why), "{args:?}: {why:?} not in {stderr}");
        assert!(!marker.exists(), "{args:?}: the app was started");
    }
}

/// A Node app with no adapter for the preload to patch (a Passmower whose election moved) is
/// stopped and the supervisor exits 2 naming the two-instance mode; nothing was acked for it, so
/// its pod never contended.
#[test]
fn an_app_whose_election_does_not_go_through_the_bridge_is_refused_and_never_acked() {
    pme_testkit::needs_node();
    let sb = Sandbox::new();
    let src = sb.path("src");
    std::fs::create_dir_all(&src).expect("src");
    let main = src.join("app.js");
    std::fs::write(&main, "setInterval(() => {}, 1000);\n").expect("app.js");
    let out = run(
        &sb,
        &["--on-change=lease-bridge"],
        &["node", main.to_str().unwrap_or_default()],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for needle in [
        "does not go through the lease bridge",
        "--on-change=leader-instance",
        "no adapters/kubernetes.js beside the main script",
    ] {
        assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
    }
    let ack = sb.ack().expect("ack file");
    assert_eq!(ack["mode"], "stopped", "{ack}");
    assert_eq!(
        ack["seq"], 0,
        "a grant was acked for an unproven app: {ack}"
    );
}

/// Upstream's `src/adapters/kubernetes.js` in miniature: its three Lease methods, each failing
/// loudly if a call ever gets past the bridge to it.
fn write_adapter(src: &std::path::Path) {
    std::fs::create_dir_all(src.join("adapters")).expect("src/adapters");
    std::fs::write(
        src.join("adapters/kubernetes.js"),
        "export class KubernetesAdapter {
  async getLease() { throw new Error('reached the API server'); }
  async createLease() { throw new Error('reached the API server'); }
  async replaceLease() { throw new Error('reached the API server'); }
}
",
    )
    .expect("adapter");
}

/// Passmower 2.4's election in miniature: the same adapter methods and file, a tick a second
/// with a guard against overlap, stand down on "held by another", renew and lead on "held by
/// us". It records `start SELECTOR` / `stop` in `state`, and `exit` when SIGTERM ends it; with
/// the file `hang` present it ignores SIGTERM (a shutdown that hangs).
fn mini_passmower(sb: &Sandbox) -> PathBuf {
    let src = sb.path("src");
    write_adapter(&src);
    let state = sb.path("state");
    let hang = sb.path("hang");
    let main = src.join("app.js");
    std::fs::write(
        &main,
        format!(
            "import fs from 'node:fs';
import {{ KubernetesAdapter }} from './adapters/kubernetes.js';
const adapter = new KubernetesAdapter();
const NAME = 'passmower-operators';
let leading = false, ticking = false;
const log = (line) => fs.appendFileSync({state:?}, line + '\\n');
setInterval(async () => {{
  if (ticking) return;
  ticking = true;
  try {{
    const lease = await adapter.getLease('ns', NAME);
    if (lease.spec.holderIdentity === (process.env.POD_NAME || 'none')) {{
      await adapter.replaceLease('ns', NAME, lease);
      if (!leading) {{ leading = true; log('start ' + process.env.NAMESPACE_SELECTOR); }}
    }} else if (leading) {{
      leading = false;
      log('stop');
    }}
  }} catch (e) {{
    log('error ' + e.message);
  }} finally {{
    ticking = false;
  }}
}}, 1000);
process.on('SIGTERM', () => {{
  if (fs.existsSync({hang:?})) return;
  log('exit');
  process.exit(0);
}});
",
            state = state.display().to_string(),
            hang = hang.display().to_string(),
        ),
    )
    .expect("app.js");
    main
}

/// The supervisor in lease-bridge mode around `node MAIN`, as pod-a, the real selector for the
/// leader and the idle one for the follower.
fn start_bridge(sb: &Sandbox, main: &std::path::Path) -> Supervisor {
    Supervisor::start_env(
        sb,
        &[("POD_NAME", "pod-a"), ("NAMESPACE_SELECTOR", "container")],
        &[
            "--on-change=lease-bridge",
            "--leader-env",
            "NAMESPACE_SELECTOR=real",
            "--follower-env",
            "NAMESPACE_SELECTOR=passmower-elector_idle",
            "--kill-grace",
            "3s",
        ],
        &["node", main.to_str().unwrap_or_default()],
    )
}

fn acked(sb: &Sandbox, mode: &str, seq: u64) -> bool {
    sb.ack()
        .is_some_and(|a| a["mode"] == mode && a["seq"].as_u64() == Some(seq))
}

/// A promotion is taken in by the one process and acked once its election has started the
/// operators. A demotion ends the process (callbacks in flight after an in-process stand-down
/// could still write): SIGKILL, whatever the app does with SIGTERM, acked once the process is
/// gone, and the next one starts as follower.
#[test]
fn a_promotion_is_acked_once_taken_in_and_a_demotion_ends_the_process_before_its_ack() {
    pme_testkit::needs_node();
    let sb = Sandbox::new();
    let main = mini_passmower(&sb);
    let sv = start_bridge(&sb, &main);
    let state = |sb: &Sandbox| sb.lines("state");
    sb.write_grant(&follower(1, 1));
    assert!(
        wait_until(LIMIT, POLL, || acked(&sb, "follower", 1)),
        "follower never acked"
    );

    sb.write_grant(&leader(1, 2, Duration::from_secs(100)));
    assert!(
        wait_until(LIMIT, POLL, || acked(&sb, "leader", 2)),
        "leader never acked: {:?}",
        state(&sb)
    );
    // The ack came after the election took the grant in, with the leader's selector.
    assert_eq!(state(&sb), ["start real"]);
    let pid = sv.mode()["child_pid"].as_i64().expect("pid");

    sb.write_grant(&follower(1, 3));
    assert!(
        wait_until(LIMIT, POLL, || acked(&sb, "follower", 3)),
        "demotion never acked: {:?}",
        state(&sb)
    );
    assert_eq!(
        state(&sb),
        ["start real"],
        "the demoted process stood down or exited itself"
    );
    assert!(!alive(pid), "the demoted process {pid} still runs");
    assert!(
        wait_until(LIMIT, POLL, || sv.mode()["child_pid"]
            .as_i64()
            .is_some_and(|p| p != pid)),
        "no follower process after the demotion"
    );

    // A process that ignores SIGTERM is ended as fast: the demotion kills it.
    sb.write_grant(&leader(1, 4, Duration::from_secs(100)));
    assert!(
        wait_until(LIMIT, POLL, || acked(&sb, "leader", 4)),
        "the new process's promotion was never acked: {:?}",
        state(&sb)
    );
    let pid = sv.mode()["child_pid"].as_i64().expect("pid");
    std::fs::write(sb.path("hang"), "").expect("hang");
    sb.write_grant(&follower(1, 5));
    assert!(
        wait_until(Duration::from_secs(2), POLL, || acked(&sb, "follower", 5)),
        "the demotion waited for a process that ignores SIGTERM: {:?}",
        state(&sb)
    );
    assert!(!alive(pid), "acked while {pid} still ran");
    let errors: Vec<String> = state(&sb)
        .into_iter()
        .filter(|l| l.starts_with("error"))
        .collect();
    assert!(
        errors.is_empty(),
        "a Lease call reached the adapter: {errors:?}"
    );
}

/// Whether process `pid` exists (not yet reaped by its parent counts as existing).
fn alive(pid: i64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// An adapter the preload can patch, but an election that never reads its Lease through it (a
/// later version that reads it another way): nothing is acked, not even with a grant written,
/// and the process is refused once the proof window has passed.
#[test]
fn an_app_that_never_reads_its_lease_through_the_bridge_is_refused_after_the_window() {
    pme_testkit::needs_node();
    let sb = Sandbox::new();
    let src = sb.path("src");
    std::fs::create_dir_all(src.join("adapters")).expect("src/adapters");
    std::fs::write(
        src.join("adapters/kubernetes.js"),
        "export class KubernetesAdapter {
  async getLease() {} async createLease() {} async replaceLease() {}
}
",
    )
    .expect("adapter");
    let main = src.join("app.js");
    std::fs::write(&main, "setInterval(() => {}, 1000);\n").expect("app.js");
    let started = std::time::Instant::now();
    sb.write_grant(&follower(1, 1));
    let out = run(
        &sb,
        &["--on-change=lease-bridge"],
        &["node", main.to_str().unwrap_or_default()],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        started.elapsed() >= Duration::from_secs(30),
        "refused before the window ended"
    );
    for needle in [
        "does not go through the lease bridge",
        "no read of its Lease came through the bridge within 30s",
    ] {
        assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
    }
    let ack = sb.ack().expect("ack file");
    assert_eq!(ack["mode"], "stopped", "{ack}");
}

/// Passmower 2.4's election class in miniature (`src/services/leader-election.js`: a public
/// `tick()`, the `ticking` and `stopped` fields, a private guard that never runs two ticks at
/// once), with a timer of an hour and callbacks that take 400 ms, like operators starting and
/// stopping. It records `start SELECTOR` / `stop` in `state`, and `overlap` if a tick ever starts
/// while another runs.
fn mini_election(sb: &Sandbox) -> PathBuf {
    let src = sb.path("src");
    write_adapter(&src);
    std::fs::create_dir_all(src.join("services")).expect("src/services");
    let state = sb.path("state").display().to_string();
    std::fs::write(
        src.join("services/leader-election.js"),
        format!(
            "import fs from 'node:fs';
const log = (line) => fs.appendFileSync({state:?}, line + '\\n');
export class LeaderElection {{
  constructor({{ adapter, onStartedLeading, onStoppedLeading }}) {{
    this.adapter = adapter;
    this.identity = process.env.POD_NAME || 'none';
    this.onStartedLeading = onStartedLeading;
    this.onStoppedLeading = onStoppedLeading;
    this.leading = false;
    this.timer = null;
    this.ticking = false;
    this.stopped = false;
    this.active = 0;
  }}
  start() {{
    this.timer = setInterval(() => this.#tickQuietly(), 3600 * 1000);
    return this.#tickQuietly();
  }}
  #tickQuietly() {{
    if (this.ticking) return;
    this.ticking = true;
    return this.tick()
      .catch((e) => log('error ' + e.message))
      .finally(() => {{ this.ticking = false; }});
  }}
  async tick() {{
    this.active += 1;
    if (this.active > 1) log('overlap');
    try {{
      const lease = await this.adapter.getLease('ns', 'passmower-operators');
      if (lease.spec.holderIdentity === this.identity) {{
        await this.adapter.replaceLease('ns', 'passmower-operators', lease);
        if (!this.leading) {{ this.leading = true; await this.onStartedLeading(); }}
      }} else if (this.leading) {{
        this.leading = false;
        await this.onStoppedLeading();
      }}
    }} finally {{
      this.active -= 1;
    }}
  }}
}}
"
        ),
    )
    .expect("leader-election.js");
    let main = src.join("app.js");
    std::fs::write(
        &main,
        format!(
            "import fs from 'node:fs';
import {{ KubernetesAdapter }} from './adapters/kubernetes.js';
import {{ LeaderElection }} from './services/leader-election.js';
const log = (line) => fs.appendFileSync({state:?}, line + '\\n');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
new LeaderElection({{
  adapter: new KubernetesAdapter(),
  onStartedLeading: async () => {{ await sleep(400); log('start ' + process.env.NAMESPACE_SELECTOR); }},
  onStoppedLeading: async () => {{ await sleep(400); log('stop'); }},
}}).start();
"
        ),
    )
    .expect("app.js");
    main
}

/// With upstream's election class beside the main script, a new grant is read at once and its
/// ack comes from the read right after the tick that took it in, not from the app's timer (an
/// hour here: every ack below is one the timer could not have given). Grants that change while a
/// tick is in flight wait for it: no two ticks ever run at once, and each promotion's ack comes
/// only after the callbacks have finished.
#[test]
fn an_election_like_upstreams_takes_each_grant_in_at_once_and_never_ticks_twice_at_once() {
    pme_testkit::needs_node();
    let sb = Sandbox::new();
    let main = mini_election(&sb);
    let sv = start_bridge(&sb, &main);
    let state = |sb: &Sandbox| sb.lines("state");
    sb.write_grant(&follower(1, 1));
    assert!(
        wait_until(LIMIT, POLL, || acked(&sb, "follower", 1)),
        "follower never acked: {:?}",
        state(&sb)
    );
    let pid = sv.mode()["child_pid"].as_i64().expect("pid");

    sb.write_grant(&leader(1, 2, Duration::from_secs(100)));
    assert!(
        wait_until(LIMIT, POLL, || acked(&sb, "leader", 2)),
        "leader never acked without the app's timer: {:?}",
        state(&sb)
    );
    assert_eq!(
        state(&sb),
        ["start real"],
        "acked before the start finished"
    );

    // A demotion ends the process (SIGTERM: this app has no handler) and a new one starts as
    // follower; its first promotion is taken in at once too.
    sb.write_grant(&follower(1, 3));
    assert!(
        wait_until(LIMIT, POLL, || acked(&sb, "follower", 3)),
        "demotion never acked: {:?}",
        state(&sb)
    );
    assert!(
        wait_until(LIMIT, POLL, || sv.mode()["child_pid"]
            .as_i64()
            .is_some_and(|p| p != pid)),
        "no new process after the demotion"
    );

    // Grants that change while the tick taking the previous one in is still in its callbacks.
    sb.write_grant(&leader(1, 4, Duration::from_secs(100)));
    std::thread::sleep(Duration::from_millis(150));
    sb.write_grant(&follower(1, 5));
    std::thread::sleep(Duration::from_millis(150));
    sb.write_grant(&leader(1, 6, Duration::from_secs(100)));
    assert!(
        wait_until(LIMIT, POLL, || acked(&sb, "leader", 6)),
        "the last of three quick grants was never acked: {:?}",
        state(&sb)
    );
    let lines = state(&sb);
    assert!(
        !lines
            .iter()
            .any(|l| l == "overlap" || l.starts_with("error")),
        "two ticks ran at once, or a Lease call reached the adapter: {lines:?}"
    );
    assert_eq!(
        lines.last().map(String::as_str),
        Some("start real"),
        "{lines:?}"
    );
}
