//! PID-1 duties of `supervise`: signals reach the app, the supervisor exits with the app's code
//! (or 128+signal), an app that ignores SIGTERM is killed after the grace, orphans are reaped.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use crate::product::*;
use nix::sys::signal::Signal;
use pme_testkit::wait::{wait_until, POLL};

const LIMIT: Duration = Duration::from_secs(15);

fn exit_code_with_child(body: &str) -> (Option<i32>, Sandbox) {
    let sb = Sandbox::new();
    let app = sb.script("app.sh", body);
    let mut sv = Supervisor::start(
        &sb,
        &["--exit-with-child"],
        &[app.to_str().unwrap_or_default()],
    );
    let status = sv
        .wait_exit(LIMIT)
        .expect("supervisor exits with its child");
    (status.code(), sb)
}

#[test]
fn exits_with_the_childs_code_zero_nonzero_or_128_plus_signal() {
    let (code, sb) = exit_code_with_child("sleep 0.2; exit 0");
    assert_eq!(code, Some(0));
    // The ack file says the consumer stopped, so an elector at pod shutdown can tell.
    assert_eq!(sb.ack().expect("ack file")["mode"], "stopped");

    let (code, _) = exit_code_with_child("sleep 0.2; exit 3");
    assert_eq!(code, Some(3));

    let (code, _) = exit_code_with_child("sleep 0.2; kill -KILL $$");
    assert_eq!(code, Some(128 + 9));
}

#[test]
fn sigterm_is_forwarded_and_the_supervisor_exits_with_the_childs_code() {
    let sb = Sandbox::new();
    let app = sb.recording_app(Some(7));
    let mut sv = Supervisor::start(&sb, &[], &[app.to_str().unwrap_or_default()]);
    assert!(
        wait_until(LIMIT, POLL, || sb.starts().len() == 1),
        "app started"
    );
    sv.signal(Signal::SIGTERM);
    let status = sv.wait_exit(LIMIT).expect("supervisor exits after SIGTERM");
    assert_eq!(status.code(), Some(7));
    assert!(sb.lines("signals").iter().any(|l| l.starts_with("TERM ")));
    let ack = sb.ack().expect("ack file");
    assert_eq!(ack["mode"], "stopped");
}

#[test]
fn hup_usr1_usr2_are_forwarded_without_stopping_the_child() {
    let sb = Sandbox::new();
    let app = sb.recording_app(Some(0));
    let sv = Supervisor::start(&sb, &[], &[app.to_str().unwrap_or_default()]);
    assert!(
        wait_until(LIMIT, POLL, || sb.starts().len() == 1),
        "app started"
    );
    for (sig, name) in [
        (Signal::SIGHUP, "HUP"),
        (Signal::SIGUSR1, "USR1"),
        (Signal::SIGUSR2, "USR2"),
    ] {
        sv.signal(sig);
        assert!(
            wait_until(LIMIT, POLL, || sb
                .lines("signals")
                .iter()
                .any(|l| l.starts_with(name))),
            "{name} reached the child"
        );
    }
    assert_eq!(
        sb.starts().len(),
        1,
        "forwarded signals must not restart the app"
    );
}

#[test]
fn sigint_is_forwarded_and_ends_the_supervisor_with_the_childs_code() {
    let sb = Sandbox::new();
    let app = sb.recording_app(Some(0));
    let mut sv = Supervisor::start(&sb, &[], &[app.to_str().unwrap_or_default()]);
    assert!(
        wait_until(LIMIT, POLL, || sb.starts().len() == 1),
        "app started"
    );
    sv.signal(Signal::SIGINT);
    let status = sv.wait_exit(LIMIT).expect("supervisor exits after SIGINT");
    assert_eq!(status.code(), Some(130));
}

#[test]
fn a_child_ignoring_sigterm_is_killed_after_the_grace_and_the_exit_is_137() {
    let sb = Sandbox::new();
    let app = sb.recording_app(None);
    let mut sv = Supervisor::start(
        &sb,
        &["--kill-grace", "600ms"],
        &[app.to_str().unwrap_or_default()],
    );
    assert!(
        wait_until(LIMIT, POLL, || sb.starts().len() == 1),
        "app started"
    );
    let child = sb.starts()[0].0;
    let sent = Instant::now();
    sv.signal(Signal::SIGTERM);
    let status = sv
        .wait_exit(LIMIT)
        .expect("supervisor exits after the grace");
    let took = sent.elapsed();
    assert_eq!(
        status.code(),
        Some(137),
        "status {status:?} signal {:?}",
        status.signal()
    );
    // The grace is a promise to the app: no SIGKILL before it has passed.
    assert!(took >= Duration::from_millis(600), "killed after {took:?}");
    assert!(!alive(child), "the app is gone");
    assert!(sb.lines("signals").iter().any(|l| l.starts_with("TERM ")));
}

#[test]
fn orphaned_grandchildren_are_reaped() {
    let sb = Sandbox::new();
    let dir = sb.dir.path().display().to_string();
    // The inner shell exits at once, so its `sleep` is orphaned and reparented to the supervisor
    // (a child subreaper), which must reap it when it exits.
    let app = sb.script(
        "app.sh",
        &format!(
            "for i in 1 2 3; do sh -c 'sleep 0.3 & echo $! >> {dir}/orphans'; done\n\
             echo $$ >> {dir}/starts\n\
             while :; do sleep 0.05; done"
        ),
    );
    let sv = Supervisor::start(&sb, &[], &[app.to_str().unwrap_or_default()]);
    assert!(
        wait_until(LIMIT, POLL, || sb.lines("orphans").len() == 3),
        "orphans started"
    );
    let orphans: Vec<i32> = sb
        .lines("orphans")
        .iter()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(orphans.len(), 3);
    assert!(
        wait_until(LIMIT, POLL, || orphans.iter().all(|&p| !exists(p))),
        "orphans were reaped (not left as zombies): {:?}",
        orphans.iter().filter(|&&p| exists(p)).collect::<Vec<_>>()
    );
    // Let the app's own short sleeps come and go, then look for any zombie we left.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        wait_until(Duration::from_secs(2), POLL, || zombie_children(sv.pid())
            .is_empty()),
        "zombies left under the supervisor: {:?}",
        zombie_children(sv.pid())
    );
}

/// A supervisor started with SIGHUP and SIGTERM ignored (`nohup`, a shell's `trap '' TERM`)
/// must not hand the ignore on: a POSIX shell cannot trap a signal ignored on entry, so a
/// shell-wrapped app would drop the HUP and, worse, the TERM of every graceful stop, and be
/// killed after the grace instead (exit 137, no stop of its own). It holds because the
/// supervisor catches every signal it forwards, and a caught signal is back at its default
/// action in a child after exec; this test keeps it so.
#[test]
fn an_app_gets_forwarded_signals_even_when_the_supervisor_started_with_them_ignored() {
    let sb = Sandbox::new();
    let app = sb.recording_app(Some(7));
    let ignoring = ["sh", "-c", "trap '' HUP TERM; exec \"$0\" \"$@\""];
    let mut sv =
        Supervisor::start_wrapped(&sb, &ignoring, &[], &[app.to_str().unwrap_or_default()]);
    assert!(
        wait_until(LIMIT, POLL, || sb.starts().len() == 1),
        "app started"
    );
    sv.signal(Signal::SIGHUP);
    assert!(
        wait_until(LIMIT, POLL, || sb
            .lines("signals")
            .iter()
            .any(|l| l.starts_with("HUP "))),
        "the HUP reached the app"
    );
    sv.signal(Signal::SIGTERM);
    let status = sv.wait_exit(LIMIT).expect("supervisor exits after SIGTERM");
    assert_eq!(
        status.code(),
        Some(7),
        "the app stopped on the TERM, not on the kill after the grace"
    );
    assert!(sb.lines("signals").iter().any(|l| l.starts_with("TERM ")));
}
