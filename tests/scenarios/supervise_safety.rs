//! The supervisor's bounds on a leader app: never a longer kill grace than the elector announces,
//! a leader's leftovers and a late-noticed lapse killed by expiry + K (also in signal mode), and
//! failed leader starts reported in the signed ack for the elector's step-down.

use std::time::{Duration, Instant};

use crate::product::*;
use nix::sys::signal::Signal;
use passmower_elector::clock::BootInstant;
use pme_testkit::wait::{wait_until, POLL};

const LIMIT: Duration = Duration::from_secs(15);

/// A leader app that starts a helper in its own process group; both ignore SIGTERM, so only
/// SIGKILL ends the helper. The app exits on its own once `exit-now` appears in the sandbox.
fn app_with_stubborn_helper(sb: &Sandbox) -> std::path::PathBuf {
    let dir = sb.dir.path().display().to_string();
    sb.script(
        "app.sh",
        &format!(
            "trap '' TERM\n\
             echo \"$$ mode=$MODE\" >> {dir}/starts\n\
             if [ \"$MODE\" = leader ]; then\n\
               sh -c \"trap '' TERM; echo \\$\\$ > {dir}/helper; while :; do sleep 0.05; done\" &\n\
               while [ ! -e {dir}/exit-now ]; do sleep 0.02; done\n\
               exit 1\n\
             fi\n\
             while :; do sleep 0.05; done"
        ),
    )
}

fn helper_pid(sb: &Sandbox) -> i32 {
    assert!(
        wait_until(LIMIT, POLL, || !sb.lines("helper").is_empty()),
        "helper started"
    );
    sb.lines("helper")[0].trim().parse().expect("helper pid")
}

fn with_k(g: passmower_elector::grant::Grant, k: Duration) -> passmower_elector::grant::Grant {
    g.with_limits(TEST_RENEW_DEADLINE, k)
}

/// The elector releases without an ack K + 1s after a demotion, counting on its own K: a
/// supervisor with a longer --kill-grace let the old leader's app run past that.
#[test]
fn a_longer_kill_grace_than_the_electors_is_clamped_to_the_electors() {
    let sb = Sandbox::new();
    let app = app_with_stubborn_helper(&sb);
    let sv = Supervisor::start(
        &sb,
        &[
            "--leader-env",
            "MODE=leader",
            "--follower-env",
            "MODE=follower",
            "--kill-grace",
            "5s",
            "--on-follower",
            "stop",
        ],
        &[app.to_str().unwrap_or_default()],
    );
    let k = Duration::from_millis(800);
    assert_eq!(
        sv.push(&with_k(leader(1, 1, Duration::from_secs(60)), k)).0,
        200
    );
    let leader_pid = sv.wait_mode("leader", LIMIT).expect("leader child");
    let helper = helper_pid(&sb);
    assert!(
        wait_until(LIMIT, POLL, || sv.log_contains("longer than the elector's")),
        "the clamp was not logged"
    );
    assert_eq!(sv.mode()["kill_grace_ns"].as_u64(), Some(800_000_000));

    let sent = Instant::now();
    let (status, body) = sv.push(&with_k(follower(1, 2), k));
    let took = sent.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(!exists(leader_pid) && !exists(helper));
    assert!(
        took < Duration::from_millis(2500),
        "demotion took {took:?}: the supervisor's 5s grace was used, not the elector's 800ms"
    );
    eprintln!("demotion with the elector's 800ms grace (own 5s) acked after {took:?}");
}

/// A leader app that exits by itself leaves its group's other processes behind; they are
/// leader-mode processes too, so the grace they get is the elector's as well.
#[test]
fn a_leader_apps_leftovers_get_no_more_than_the_electors_kill_grace() {
    let sb = Sandbox::new();
    let app = app_with_stubborn_helper(&sb);
    let sv = Supervisor::start(
        &sb,
        &[
            "--leader-env",
            "MODE=leader",
            "--follower-env",
            "MODE=follower",
            "--kill-grace",
            "5s",
            "--on-follower",
            "stop",
            "--restart-backoff-initial",
            "10s",
        ],
        &[app.to_str().unwrap_or_default()],
    );
    let k = Duration::from_millis(800);
    assert_eq!(
        sv.push(&with_k(leader(1, 1, Duration::from_secs(60)), k)).0,
        200
    );
    sv.wait_mode("leader", LIMIT).expect("leader child");
    let helper = helper_pid(&sb);
    std::fs::write(sb.path("exit-now"), b"").expect("tell the app to exit");
    let exited = Instant::now();
    assert!(
        wait_until(LIMIT, POLL, || !alive(helper)),
        "the helper was never killed"
    );
    let took = exited.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "the leader's leftover ran {took:?} after the app exited: more than the elector's 800ms"
    );
    eprintln!("leftover of an exited leader killed {took:?} after the exit (K 800ms)");
}

/// The supervisor is frozen while the leader app exits and the grant expires: the leftovers'
/// right ended at the expiry, so they are killed at once when it wakes past expiry + K.
#[test]
fn a_leader_apps_leftovers_found_past_expiry_plus_k_are_killed_at_once() {
    let sb = Sandbox::new();
    let app = app_with_stubborn_helper(&sb);
    let sv = Supervisor::start(
        &sb,
        &[
            "--leader-env",
            "MODE=leader",
            "--follower-env",
            "MODE=follower",
            "--kill-grace",
            "2s",
            "--on-follower",
            "stop",
        ],
        &[app.to_str().unwrap_or_default()],
    );
    let g = leader(1, 1, Duration::from_millis(1500));
    assert_eq!(sv.push(&g).0, 200);
    sv.wait_mode("leader", LIMIT).expect("leader child");
    let helper = helper_pid(&sb);
    sv.signal(Signal::SIGSTOP);
    std::fs::write(sb.path("exit-now"), b"").expect("tell the app to exit");
    let overdue = g
        .expiry()
        .saturating_add(Duration::from_millis(2300))
        .as_nanos();
    assert!(wait_until(LIMIT, POLL, || BootInstant::now().as_nanos() >= overdue));
    sv.signal(Signal::SIGCONT);
    let resumed = Instant::now();
    assert!(
        wait_until(LIMIT, POLL, || !alive(helper)),
        "the helper was never killed"
    );
    let took = resumed.elapsed();
    assert!(
        took < Duration::from_millis(1000),
        "leftover killed {took:?} after the supervisor woke, past its expiry + grace"
    );
    eprintln!("overdue leftover killed {took:?} after the supervisor woke");
}

/// With --on-change=signal:, a lapse noticed late used to be signalled and then given a full
/// kill grace from the signal, with nothing to enforce it: the app could run on as leader.
#[test]
fn on_change_signal_a_lapse_noticed_late_stops_the_app_by_expiry_plus_k() {
    let sb = Sandbox::new();
    // Ignores SIGTERM (only SIGKILL ends it) and records SIGUSR2.
    let app = sb.recording_app(None);
    let sv = Supervisor::start(
        &sb,
        &[
            "--leader-env",
            "MODE=leader",
            "--follower-env",
            "MODE=follower",
            "--on-change",
            "signal:SIGUSR2",
            "--kill-grace",
            "2s",
        ],
        &[app.to_str().unwrap_or_default()],
    );
    let pid = sv
        .wait_started(&sb, "follower", LIMIT)
        .expect("follower child");
    let g = leader(1, 1, Duration::from_secs(3));
    assert_eq!(sv.push(&g).0, 200);
    // Frozen from well before the expiry until after it.
    let freeze_at = g.expiry().saturating_sub(Duration::from_secs(1)).as_nanos();
    assert!(wait_until(LIMIT, POLL, || BootInstant::now().as_nanos() >= freeze_at));
    sv.signal(Signal::SIGSTOP);
    let wake_at = g
        .expiry()
        .saturating_add(Duration::from_millis(500))
        .as_nanos();
    assert!(wait_until(LIMIT, POLL, || BootInstant::now().as_nanos() >= wake_at));
    sv.signal(Signal::SIGCONT);
    assert!(
        wait_until(LIMIT, POLL, || !alive(pid)),
        "the app that was leader still runs: nothing enforced expiry + K"
    );
    let died = BootInstant::now();
    let bound = g.expiry().saturating_add(Duration::from_secs(2));
    assert!(
        died <= bound.saturating_add(Duration::from_millis(300)),
        "the app died {:?} after expiry + K",
        died.saturating_since(bound)
    );
    eprintln!(
        "late-noticed lapse in signal mode: app gone {:.3}s after the expiry (K 2s)",
        died.saturating_since(g.expiry()).as_secs_f64()
    );
    // It is restarted as follower.
    assert!(sv.wait_mode("follower", LIMIT).is_some_and(|p| p != pid));
}

/// The other side of the rule: a lapse noticed on time is still a signal, sent before the
/// expiry so the app's grace from it ends by expiry + K, and the app keeps running.
#[test]
fn on_change_signal_a_lapse_on_time_is_signalled_before_the_expiry() {
    let sb = Sandbox::new();
    let app = sb.recording_app(Some(0));
    let sv = Supervisor::start(
        &sb,
        &[
            "--leader-env",
            "MODE=leader",
            "--follower-env",
            "MODE=follower",
            "--on-change",
            "signal:SIGUSR2",
            "--kill-grace",
            "1s",
        ],
        &[app.to_str().unwrap_or_default()],
    );
    let pid = sv
        .wait_started(&sb, "follower", LIMIT)
        .expect("follower child");
    let g = leader(1, 1, Duration::from_millis(1500));
    let expiry_secs = g.expires_boottime_ns as f64 / 1e9;
    assert_eq!(sv.push(&g).0, 200);
    let usr2 = || {
        sb.lines("signals")
            .iter()
            .filter(|l| l.starts_with(&format!("USR2 {pid} ")))
            .filter_map(|l| l.split_whitespace().nth(2)?.parse::<f64>().ok())
            .collect::<Vec<_>>()
    };
    assert!(
        wait_until(LIMIT, POLL, || usr2().len() == 2),
        "no demotion signal"
    );
    let demoted = usr2()[1];
    // /proc/uptime has 10 ms resolution.
    assert!(
        demoted <= expiry_secs + 0.01,
        "demotion signalled {:.3}s after the expiry",
        demoted - expiry_secs
    );
    assert!(alive(pid), "the app was stopped instead of signalled");
    assert_eq!(sb.starts().len(), 1);
    eprintln!(
        "on-time lapse signalled {:.3}s before the expiry",
        expiry_secs - demoted
    );
}

/// Item 11: a leader app that cannot run was restarted for ever while its pod kept the Lease.
#[test]
fn failed_leader_starts_are_counted_in_the_signed_ack_and_reset_by_a_demotion() {
    let sb = Sandbox::new();
    let dir = sb.dir.path().display().to_string();
    let app = sb.script(
        "app.sh",
        &format!(
            "echo \"$$ mode=$MODE\" >> {dir}/starts\n\
             if [ \"$MODE\" = leader ]; then sleep 0.1; exit 1; fi\n\
             while :; do sleep 0.05; done"
        ),
    );
    let sv = Supervisor::start(
        &sb,
        &[
            "--leader-env",
            "MODE=leader",
            "--follower-env",
            "MODE=follower",
            "--restart-backoff-initial",
            "100ms",
            "--restart-backoff-max",
            "200ms",
        ],
        &[app.to_str().unwrap_or_default()],
    );
    sv.wait_mode("follower", LIMIT).expect("follower child");
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    assert!(
        wait_until(LIMIT, POLL, || sb
            .ack_object()
            .is_some_and(|a| a.leader_start_failures >= 3)),
        "no failure count in the ack: {:?}",
        sb.ack()
    );
    assert!(sb.ack_verifies(), "the count travels in a signed ack");
    assert!(sv.mode()["leader_start_failures"].as_u64().unwrap_or(0) >= 3);
    assert_eq!(sv.push(&follower(1, 2)).0, 200);
    let ack = sb.ack_object().expect("ack");
    assert_eq!(ack.leader_start_failures, 0, "{ack:?}");
    assert_eq!(ack.seq, 2);
}
