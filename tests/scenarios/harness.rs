//! Tests of the kit itself. The overlap oracles must catch what they exist to catch: the grant
//! oracle is fed synthetic looks (and real flag files) with and without two simultaneous
//! leaders, the single-writer rule and the node's audit check synthetic stretches and writes.
//! `ElectorProcess` must capture, signal and reap by PID, and the recording app write the
//! records the run oracle reads, as a sh script and as a Node.js module alike.

use std::ffi::OsStr;
use std::os::unix::process::ExitStatusExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;

use passmower_elector::clock::BootInstant;
use passmower_elector::grant::{self, Grant, Order};

use crate::product::{read_grant, view};
use pme_testkit::node::audit::{parse_rfc3339_us, single_writer_violations, Tenure, Write};
use pme_testkit::oracle::{overlaps, Stretch};
use pme_testkit::recording_app::{self, OnTerm, Program, RecordingApp, RunRecord};
use pme_testkit::wait::{wait_until, POLL};
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

// --- the single-writer rule every oracle applies ---

fn stretch(owner: u8, start: u32, end: Option<u32>) -> Stretch<u8, u32> {
    Stretch { owner, start, end }
}

#[test]
fn two_owners_at_once_overlap_and_touching_does_not() {
    let s = stretch;
    assert_eq!(overlaps(&[s(1, 0, Some(10)), s(2, 5, Some(20))]), [(0, 1)]);
    assert_eq!(overlaps(&[s(1, 0, Some(10)), s(2, 10, Some(20))]), []);
    assert_eq!(overlaps(&[s(2, 10, Some(20)), s(1, 0, Some(10))]), []);
}

#[test]
fn one_owner_never_overlaps_itself() {
    assert_eq!(
        overlaps(&[stretch(1, 0, Some(10)), stretch(1, 5, Some(20))]),
        []
    );
}

#[test]
fn a_stretch_still_going_overlaps_everything_after_its_start() {
    let s = stretch;
    assert_eq!(
        overlaps(&[s(1, 0, None), s(2, 1_000, Some(1_001))]),
        [(0, 1)]
    );
    assert_eq!(overlaps(&[s(1, 5, None), s(2, 0, Some(5))]), []);
    assert_eq!(overlaps(&[s(1, 5, None), s(2, 0, None)]), [(0, 1)]);
}

// --- the node's audit log: timestamps and the single-writer check ---

#[test]
fn parses_apiserver_timestamps() {
    assert_eq!(
        parse_rfc3339_us("1970-01-01T00:00:01.000002Z"),
        Some(1_000_002)
    );
    assert_eq!(
        parse_rfc3339_us("2026-12-01T00:00:00.5Z"),
        Some(1_796_083_200_500_000)
    );
}

fn write(ip: &str, at: i64, code: i32) -> Write {
    Write {
        received_us: at,
        completed_us: at,
        user: "system:serviceaccount:pm:passmower".into(),
        source_ip: ip.into(),
        verb: "update".into(),
        api_group: "codemowers.cloud".into(),
        resource: "oidcclients".into(),
        subresource: "status".into(),
        namespace: "pm".into(),
        name: "app".into(),
        code,
        lease_holder: None,
        dry_run: false,
    }
}

/// A write the apiserver refused (the fence's 403) changed nothing, so only an admitted one
/// outside its pod's tenure is a second writer.
#[test]
fn only_admitted_writes_outside_a_tenure_are_violations() {
    let tenures = [Tenure {
        source_ip: "10.88.0.2".into(),
        holder: "b".into(),
        start_us: 100,
        end_us: 200,
        released: false,
    }];
    let user = "system:serviceaccount:pm:passmower";
    let inside = write("10.88.0.2", 150, 200);
    let refused = write("10.88.0.3", 150, 403);
    let admitted = write("10.88.0.3", 160, 200);
    assert!(
        single_writer_violations(&[inside.clone(), refused.clone()], &tenures, user).is_empty()
    );
    let bad = single_writer_violations(&[inside, refused, admitted], &tenures, user);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].contains("10.88.0.3 at 160"), "{bad:?}");
}

#[test]
fn base64_matches_rfc_4648() {
    use pme_testkit::node::email_login::base64;
    assert_eq!(base64(b"foobar", false), "Zm9vYmFy");
    assert_eq!(base64(b"fo", false), "Zm8=");
    assert_eq!(base64(b"f", true), "Zg");
}

// --- the recording app: the sh script and its Node.js twin record the same lines ---

/// Runs the recording app of `program` in leader mode until it has recorded its start; the
/// process and its directory.
fn start_recording_app(
    program: Program,
    leader_crash_after: Option<&str>,
) -> (ElectorProcess, tempfile::TempDir) {
    start_recording_app_customized(program, leader_crash_after, |_| {})
}

/// As [`start_recording_app`], with `customize` applied to the command before the kit spawns it.
fn start_recording_app_customized(
    program: Program,
    leader_crash_after: Option<&str>,
    customize: impl FnOnce(&mut std::process::Command),
) -> (ElectorProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let command = RecordingApp {
        dir: dir.path().to_owned(),
        program,
        on_term: OnTerm::Exit(0),
        runs: true,
        leader_crash_after: leader_crash_after.map(str::to_owned),
        idle: "0.05",
    }
    .command();
    let args: Vec<&str> = command[1..].iter().map(String::as_str).collect();
    let app = ElectorProcess::spawn_program_customized(
        &format!("recording-app-{program:?}"),
        Path::new(&command[0]),
        &args,
        &[("MODE", OsStr::new("leader"))],
        customize,
    );
    let runs = RecordingApp::runs_file(dir.path());
    assert!(
        wait_until(Duration::from_secs(20), POLL, || {
            std::fs::read_to_string(&runs).is_ok_and(|r| r.starts_with("start "))
        }),
        "{program:?}: no start record\n{}",
        app.logs()
    );
    (app, dir)
}

/// The `runs` records in `dir`, each one parsed.
fn run_records(dir: &Path) -> Vec<RunRecord> {
    let text = std::fs::read_to_string(RecordingApp::runs_file(dir)).unwrap_or_default();
    recording_app::parse_runs(&text)
        .into_iter()
        .map(|r| r.unwrap_or_else(|line| panic!("a malformed record: {line:?}")))
        .collect()
}

#[test]
fn the_recording_app_as_sh_and_as_node_records_its_start_signals_and_stop_alike() {
    for program in [Program::Sh, Program::Node] {
        let (mut app, dir) = start_recording_app(program, None);
        let pid = app.pid().as_raw();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the app's stat");
        let ticks: u64 = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(19)?.parse().ok())
            .expect("starttime in /proc/PID/stat");
        let starts_file = dir.path().join("starts");
        assert!(
            wait_until(Duration::from_secs(10), POLL, || std::fs::read_to_string(
                &starts_file
            )
            .is_ok_and(|s| !s.is_empty())),
            "{program:?}: no starts line"
        );
        let starts: Vec<String> = std::fs::read_to_string(&starts_file)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(
            recording_app::starts(&starts),
            vec![(pid, "leader".to_owned())],
            "{program:?}"
        );
        app.signal(Signal::SIGHUP);
        let signals = dir.path().join("signals");
        assert!(
            wait_until(Duration::from_secs(10), POLL, || std::fs::read_to_string(
                &signals
            )
            .is_ok_and(|s| s.starts_with(&format!("HUP {pid} ")))),
            "{program:?}: the HUP was not recorded"
        );
        app.signal(Signal::SIGTERM);
        let status = app.wait_exit(Duration::from_secs(10)).expect("exits");
        assert_eq!(status.code(), Some(0), "{program:?}: {}", app.logs());
        let records = run_records(dir.path());
        let [start, stop] = records.as_slice() else {
            panic!("{program:?}: {records:?}");
        };
        assert!(!start.stop && stop.stop, "{program:?}: {records:?}");
        for r in [start, stop] {
            assert_eq!((r.pid, r.ticks, r.mode.as_str()), (pid, ticks, "leader"));
        }
        assert!(
            start.at <= stop.at && stop.at <= BootTime::now(),
            "{records:?}"
        );
    }
}

/// A test binary started with SIGHUP ignored (`nohup`, some CI runners) hands that on through
/// exec, and a POSIX shell cannot trap a signal ignored on entry: the sh app would drop every
/// HUP. The kit starts apps as a container runtime does, with default actions; the ignore is
/// set here in the child (before the kit's own pre-exec step), as an inherited one would be.
#[test]
fn an_app_the_kit_starts_can_trap_a_signal_its_test_process_ignores() {
    for program in [Program::Sh, Program::Node] {
        let (mut app, dir) = start_recording_app_customized(program, None, |cmd| {
            // SAFETY: between fork and exec; sigaction is async-signal-safe.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(cmd, || {
                    let ignore = nix::sys::signal::SigAction::new(
                        nix::sys::signal::SigHandler::SigIgn,
                        nix::sys::signal::SaFlags::empty(),
                        nix::sys::signal::SigSet::empty(),
                    );
                    nix::sys::signal::sigaction(Signal::SIGHUP, &ignore)
                        .map(drop)
                        .map_err(std::io::Error::from)
                });
            }
        });
        let pid = app.pid().as_raw();
        let starts = dir.path().join("starts");
        assert!(
            wait_until(Duration::from_secs(10), POLL, || {
                std::fs::read_to_string(&starts).is_ok_and(|s| !s.is_empty())
            }),
            "{program:?}: no starts line"
        );
        app.signal(Signal::SIGHUP);
        let signals = dir.path().join("signals");
        assert!(
            wait_until(Duration::from_secs(10), POLL, || {
                std::fs::read_to_string(&signals)
                    .is_ok_and(|s| s.starts_with(&format!("HUP {pid} ")))
            }),
            "{program:?}: the HUP was not recorded: the app inherited an ignored SIGHUP"
        );
        app.signal(Signal::SIGTERM);
        let status = app.wait_exit(Duration::from_secs(10)).expect("exits");
        assert_eq!(status.code(), Some(0), "{program:?}: {}", app.logs());
    }
}

#[test]
fn the_recording_app_as_sh_and_as_node_crashes_as_leader_when_told() {
    for program in [Program::Sh, Program::Node] {
        let (mut app, dir) = start_recording_app(program, Some("0.2"));
        let status = app
            .wait_exit(Duration::from_secs(10))
            .expect("a crashing leader exits");
        assert_eq!(status.code(), Some(1), "{program:?}: {}", app.logs());
        let records = run_records(dir.path());
        assert_eq!(
            records.iter().map(|r| r.stop).collect::<Vec<_>>(),
            [false, true],
            "{program:?}: {records:?}"
        );
    }
}
