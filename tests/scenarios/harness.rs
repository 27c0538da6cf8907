//! Tests of the harness itself. The overlap oracle must catch what it exists to catch: it is
//! fed synthetic looks (and real flag files) with and without two simultaneous leaders. And
//! `ElectorProcess` must capture, signal and reap by PID.

use std::ffi::OsStr;
use std::os::unix::process::ExitStatusExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;

use passmower_elector::clock::BootInstant;
use passmower_elector::grant::{self, Grant, Order};

use crate::product::{read_grant, view};
use pme_testkit::{BootTime, ElectorProcess, GrantRecorder, GrantTimeline, Seen};

const GRACE: Duration = Duration::from_secs(3);

fn ms(n: u64) -> BootTime {
    // Far from zero, so "previous look" arithmetic never saturates.
    BootTime::from_nanos(1_000_000_000_000 + n * 1_000_000)
}

fn leader(pod: &str, incarnation: u64, epoch: u64, expires: BootTime) -> Seen {
    Seen::Object(view(&Grant::leader(
        pod,
        epoch,
        Order {
            incarnation,
            seq: 1,
        },
        "ns/l",
        BootInstant::from_nanos(expires.as_nanos()),
    )))
}

fn follower(holder: &str) -> Seen {
    Seen::Object(view(&Grant::follower(
        holder,
        0,
        Order {
            incarnation: 1,
            seq: 9,
        },
        "ns/l",
    )))
}

/// a leads from 0 ms and is demoted (follower object) at 4000 ms; b's grant appears at `b_at`.
fn handover(b_at: u64) -> GrantTimeline {
    let mut t = GrantTimeline::new(GRACE);
    for at in (0..4000).step_by(100) {
        t.observe("a", ms(at), &leader("a", 1, 1, ms(at + 10_000)));
        t.observe("b", ms(at), &follower("a"));
    }
    t.observe("a", ms(4000), &follower(""));
    t.observe("b", ms(b_at - 1), &follower(""));
    t.observe("b", ms(b_at), &leader("b", 7, 2, ms(b_at + 10_000)));
    t
}

#[test]
fn clean_handover_after_kill_grace_is_not_an_overlap() {
    let t = handover(4000 + 3000 + 2);
    assert!(t.overlaps().is_empty(), "{:?}", t.intervals());
    t.assert_no_overlap();
    assert_eq!(t.intervals().len(), 2);
}

#[test]
fn takeover_within_kill_grace_is_an_overlap() {
    let t = handover(4000 + 1500);
    let overlaps = t.overlaps();
    assert_eq!(overlaps.len(), 1);
    assert_eq!(
        (overlaps[0].0.pod.as_str(), overlaps[0].1.pod.as_str()),
        ("a", "b")
    );
    let msg = catch_unwind(AssertUnwindSafe(|| t.assert_no_overlap()))
        .expect_err("assert_no_overlap must panic")
        .downcast::<String>()
        .expect("panic message");
    assert!(msg.contains("TWO LEADERS"), "{msg}");
    assert!(msg.contains("a (holder a"), "{msg}");
    assert!(msg.contains("b (holder b"), "{msg}");
}

#[test]
fn a_silent_leader_is_bounded_by_its_grant_expiry() {
    // a is SIGKILLed: its flag file keeps saying leader until 2000 ms forever.
    for (b_at, overlap) in [(2000 + 3000 + 1, false), (2000 + 3000 - 1, true)] {
        let mut t = GrantTimeline::new(GRACE);
        t.observe("a", ms(0), &leader("a", 1, 1, ms(2000)));
        for at in (100..=b_at).step_by(100) {
            t.observe("a", ms(at), &leader("a", 1, 1, ms(2000)));
        }
        t.observe("b", ms(b_at - 1), &Seen::Missing);
        t.observe("b", ms(b_at), &leader("b", 2, 2, ms(b_at + 2000)));
        assert_eq!(
            !t.overlaps().is_empty(),
            overlap,
            "b at {b_at}: {:?}",
            t.intervals()
        );
        assert_eq!(t.intervals()[0].end, ms(2000));
    }
}

#[test]
fn renewal_extends_the_grant() {
    let mut t = GrantTimeline::new(GRACE);
    t.observe("a", ms(0), &leader("a", 1, 1, ms(1000)));
    t.observe("a", ms(500), &leader("a", 1, 1, ms(3000)));
    t.observe("b", ms(5000), &Seen::Missing);
    t.observe("b", ms(5500), &leader("b", 2, 2, ms(9000)));
    // a's grant ran to 3000 (+3000 grace) despite the first object saying 1000.
    assert_eq!(t.overlaps().len(), 1, "{:?}", t.intervals());
}

#[test]
fn a_grant_starts_at_the_look_before_it_was_seen() {
    let mut t = GrantTimeline::new(GRACE);
    t.observe("a", ms(100), &Seen::Missing);
    t.observe("a", ms(200), &leader("a", 1, 1, ms(1000)));
    assert_eq!(t.intervals()[0].start, ms(100));
    assert!(t.intervals()[0].open);
    assert_eq!(t.leaders_at(ms(500)), vec!["a".to_owned()]);
    assert!(t.leaders_at(ms(1000)).is_empty());
}

#[test]
fn one_pod_changing_epoch_is_two_intervals_and_no_overlap() {
    let mut t = GrantTimeline::new(GRACE);
    t.observe("a", ms(0), &leader("a", 1, 1, ms(1000)));
    t.observe("a", ms(500), &leader("a", 1, 2, ms(1500)));
    let all = t.intervals();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].end, ms(500));
    assert!(t.overlaps().is_empty());
}

#[test]
fn an_expired_leader_object_grants_nothing() {
    let mut t = GrantTimeline::new(GRACE);
    t.observe("a", ms(5000), &leader("a", 1, 1, ms(1000)));
    assert!(t.intervals().is_empty());
}

#[test]
fn recorder_catches_two_leaders_in_real_flag_files() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let grace = Duration::from_millis(100);
    let recorder = GrantRecorder::start(grace, [("a".to_owned(), a.clone())], read_grant);
    recorder.watch("b", b.clone());
    let expires = BootInstant::now().saturating_add(Duration::from_secs(5));
    let grant = |holder: &str, incarnation| {
        Grant::leader(
            holder,
            1,
            Order {
                incarnation,
                seq: 1,
            },
            "ns/l",
            expires,
        )
    };
    grant::write_file(&a, &grant("a", 1)).unwrap();
    assert!(pme_testkit::wait_until(
        Duration::from_secs(2),
        Duration::from_millis(5),
        || recorder.leaders() == ["a"]
    ));
    recorder.assert_no_overlap();

    grant::write_file(&b, &grant("b", 2)).unwrap();
    assert!(pme_testkit::wait_until(
        Duration::from_secs(2),
        Duration::from_millis(5),
        || recorder.leaders().len() == 2
    ));
    let caught = catch_unwind(AssertUnwindSafe(|| recorder.assert_no_overlap()));
    assert!(
        caught.is_err(),
        "two leaders went unnoticed: {:?}",
        recorder.intervals()
    );
}

#[test]
fn recorder_reports_a_garbled_flag_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.json");
    std::fs::write(&a, b"{\"mode\":\"king\"}").unwrap();
    let mut recorder = GrantRecorder::start(GRACE, [("a".to_owned(), a)], read_grant);
    std::thread::sleep(Duration::from_millis(50));
    recorder.stop();
    assert!(catch_unwind(AssertUnwindSafe(|| recorder.assert_no_overlap())).is_err());
}

// --- ElectorProcess: spawn, capture, signal and reap by PID ---

#[test]
fn elector_process_captures_output_and_exit_code() {
    let mut version = ElectorProcess::spawn("version", &["--version"], &[]);
    let status = version.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(status.success(), "{}", version.logs());
    assert!(
        version.logs().contains("passmower-elector"),
        "{}",
        version.logs()
    );

    // A usage error is exit code 2 with the message on stderr.
    let mut bad = ElectorProcess::spawn("bad", &["elect", "--no-such-flag"], &[]);
    let status = bad.wait_exit(Duration::from_secs(10)).expect("exits");
    assert_eq!(status.code(), Some(2), "{}", bad.logs());
    assert!(bad.logs().contains("--no-such-flag"), "{}", bad.logs());
}

#[test]
fn elector_process_environment_is_only_what_the_test_gives() {
    let mut env = ElectorProcess::spawn_program(
        "env",
        Path::new("/usr/bin/env"),
        &[],
        &[("POD_NAME", OsStr::new("pod-a"))],
    );
    env.wait_exit(Duration::from_secs(10)).expect("exits");
    let logs = env.logs();
    assert!(logs.contains("POD_NAME=pod-a"), "{logs}");
    assert!(!logs.contains("CARGO_MANIFEST_DIR"), "{logs}");
}

#[test]
fn elector_process_is_signalled_by_pid_and_killed_on_drop() {
    let mut p = ElectorProcess::spawn_program("sleeper", Path::new("sleep"), &["30"], &[]);
    p.signal(Signal::SIGSTOP);
    p.signal(Signal::SIGCONT);
    assert!(p.wait_exit(Duration::from_millis(100)).is_none());
    p.signal(Signal::SIGTERM);
    let status = p
        .wait_exit(Duration::from_secs(5))
        .expect("SIGTERM ends sleep");
    assert_eq!(status.signal(), Some(Signal::SIGTERM as i32));
    // Signalling a reaped process is a no-op, never a recycled PID.
    p.signal(Signal::SIGKILL);

    let q = ElectorProcess::spawn_program("sleeper2", Path::new("sleep"), &["30"], &[]);
    let pid = q.pid();
    drop(q);
    assert!(
        nix::sys::signal::kill(pid, None).is_err(),
        "process {pid} survived drop"
    );
}
