//! Following the grant: follower at start, leader/follower environments switched by the flag file
//! and by pushes, acks only after the old group is gone, the dead man's switch, ordering,
//! renewals, crash-loop backoff and the alternative policies.

use std::time::{Duration, Instant};

use crate::product::*;
use pme_testkit::wait::{wait_until, POLL};

const LIMIT: Duration = Duration::from_secs(15);
const MODE_FLAGS: [&str; 4] = [
    "--leader-env",
    "MODE=leader",
    "--follower-env",
    "MODE=follower",
];

fn start_recording(sb: &Sandbox, extra: &[&str]) -> Supervisor {
    let app = sb.recording_app(Some(0));
    let mut flags: Vec<&str> = MODE_FLAGS.to_vec();
    flags.extend_from_slice(extra);
    Supervisor::start(sb, &flags, &[app.to_str().unwrap_or_default()])
}

#[test]
fn without_a_flag_file_it_starts_as_follower_and_acks_that() {
    let sb = Sandbox::new();
    let sv = start_recording(&sb, &[]);
    let pid = sv
        .wait_started(&sb, "follower", LIMIT)
        .expect("follower child");
    assert!(
        wait_until(LIMIT, POLL, || sb.ack().is_some()),
        "ack written"
    );
    assert_eq!(sb.ack().expect("ack")["mode"], "follower");
    assert_eq!(sb.starts(), vec![(pid, "follower".to_owned())]);
}

#[test]
fn a_malformed_flag_file_means_follower() {
    let sb = Sandbox::new();
    std::fs::write(sb.flag_file(), b"{\"mode\":\"king\"").expect("write");
    let sv = start_recording(&sb, &[]);
    sv.wait_mode("follower", LIMIT).expect("follower child");
    assert!(
        sv.logged("not a grant object"),
        "the malformed file is logged"
    );
}

#[test]
fn a_valid_leader_grant_at_start_starts_the_leader() {
    let sb = Sandbox::new();
    sb.write_grant(&leader(1, 1, Duration::from_secs(30)));
    let sv = start_recording(&sb, &[]);
    let pid = sv.wait_started(&sb, "leader", LIMIT).expect("leader child");
    assert_eq!(sb.starts(), vec![(pid, "leader".to_owned())]);
}

#[test]
fn an_expired_leader_grant_at_start_means_follower() {
    let sb = Sandbox::new();
    let mut g = leader(1, 1, Duration::from_secs(1));
    g.expires_boottime_ns = 1; // long past
    sb.write_grant(&g);
    let sv = start_recording(&sb, &[]);
    sv.wait_mode("follower", LIMIT).expect("follower child");
}

#[test]
fn the_flag_file_switches_the_app_between_leader_and_follower_environments() {
    let sb = Sandbox::new();
    let sv = start_recording(
        &sb,
        &["--leader-args", "--operators", "--follower-args", "--idle"],
    );
    // Each child's start record before the next switch: one stopped before it ran its first
    // line (a loaded machine) leaves no record, and the count below would miss it.
    let f1 = sv
        .wait_started(&sb, "follower", LIMIT)
        .expect("follower child");

    sb.write_grant(&leader(1, 1, Duration::from_secs(60)));
    let l1 = sv
        .wait_started(&sb, "leader", LIMIT)
        .expect("promoted by the flag file");
    assert_ne!(l1, f1);
    assert!(
        !alive(f1),
        "the follower app is gone before the leader runs"
    );

    sb.write_grant(&follower(1, 2));
    let f2 = sv
        .wait_started(&sb, "follower", LIMIT)
        .expect("demoted by the flag file");
    assert!(!alive(l1));
    let lines = sb.lines("starts");
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].ends_with("mode=follower args=--idle"), "{lines:?}");
    assert!(
        lines[1].ends_with("mode=leader args=--operators"),
        "{lines:?}"
    );
    assert!(
        lines[2].starts_with(&format!("{f2} mode=follower")),
        "{lines:?}"
    );
    let ack = sb.ack().expect("ack");
    assert_eq!(
        (ack["mode"].as_str(), ack["seq"].as_u64()),
        (Some("follower"), Some(2))
    );
}

#[test]
fn pushes_switch_the_app_and_are_answered_once_in_effect() {
    let sb = Sandbox::new();
    let sv = start_recording(&sb, &[]);
    sv.wait_mode("follower", LIMIT).expect("follower child");

    let (status, body) = sv.push(&leader(1, 1, Duration::from_secs(60)));
    assert_eq!(status, 200, "{body}");
    // The answer comes after the leader runs: no waiting needed to see it.
    let m = sv.mode();
    assert_eq!(
        (m["mode"].as_str(), m["child_mode"].as_str()),
        (Some("leader"), Some("leader"))
    );
    let leader_pid = m["child_pid"].as_i64().expect("pid") as i32;
    // The app records its own start once it runs, which on a loaded machine may be a moment
    // after the supervisor spawned it and answered.
    wait_until(LIMIT, POLL, || {
        sb.starts().last() == Some(&(leader_pid, "leader".to_owned()))
    });
    assert_eq!(sb.starts().last(), Some(&(leader_pid, "leader".to_owned())));
    let ack = sb.ack().expect("ack");
    assert_eq!(
        (ack["mode"].as_str(), ack["seq"].as_u64()),
        (Some("leader"), Some(1))
    );
    assert_eq!(m["epoch"], 7);
    assert!(m["expires_boottime_ns"].as_u64().unwrap_or(0) > 0);
    assert!(m["expires_at"].is_string());

    let (status, body) = sv.push(&follower(1, 2));
    assert_eq!(status, 200, "{body}");
    assert!(
        !alive(leader_pid),
        "demotion acked while the leader still ran"
    );
    assert_eq!(sv.mode()["mode"], "follower");
}

#[test]
fn a_demotion_is_acked_only_after_the_whole_process_group_is_gone() {
    let sb = Sandbox::new();
    let dir = sb.dir.path().display().to_string();
    // Leader and a helper in its group both ignore SIGTERM: only SIGKILL after the grace ends them.
    let app = sb.script(
        "app.sh",
        &format!(
            "trap '' TERM\n\
             echo \"$$ mode=$MODE\" >> {dir}/starts\n\
             if [ \"$MODE\" = leader ]; then sh -c \"trap '' TERM; echo \\$\\$ > {dir}/helper; while :; do sleep 0.05; done\" & fi\n\
             while :; do sleep 0.05; done"
        ),
    );
    let mut flags = MODE_FLAGS.to_vec();
    flags.extend_from_slice(&["--kill-grace", "800ms"]);
    let sv = Supervisor::start(&sb, &flags, &[app.to_str().unwrap_or_default()]);
    sv.wait_mode("follower", LIMIT).expect("follower child");
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    let leader_pid = sv.wait_mode("leader", LIMIT).expect("leader child");
    assert!(
        wait_until(LIMIT, POLL, || !sb.lines("helper").is_empty()),
        "helper started"
    );
    let helper: i32 = sb.lines("helper")[0].trim().parse().expect("helper pid");
    assert!(alive(helper));

    let sent = Instant::now();
    let (status, body) = sv.push(&follower(1, 2));
    let took = sent.elapsed();
    assert_eq!(status, 200, "{body}");
    // The ack promises that no operator process of the old leader is left, grandchildren included.
    assert!(
        !exists(leader_pid),
        "leader {leader_pid} still exists after the ack"
    );
    assert!(
        !exists(helper),
        "helper {helper} still exists after the ack"
    );
    // Both ignored SIGTERM, so only SIGKILL after the grace could end them: the ack waited for it.
    assert!(
        took >= Duration::from_millis(800),
        "acked after {took:?}, before the kill grace"
    );
    let ack = sb.ack().expect("ack");
    assert_eq!(
        (ack["mode"].as_str(), ack["seq"].as_u64()),
        (Some("follower"), Some(2))
    );
    eprintln!("demotion with SIGKILL after 800ms grace acked after {took:?}");
}

#[test]
fn an_expired_leader_grant_demotes_at_its_expiry_without_the_elector() {
    let sb = Sandbox::new();
    let sv = start_recording(&sb, &[]);
    sv.wait_mode("follower", LIMIT).expect("follower child");
    let g = leader(1, 1, Duration::from_secs(2));
    let expiry_secs = g.expires_boottime_ns as f64 / 1e9;
    sb.write_grant(&g);
    let leader_pid = sv.wait_mode("leader", LIMIT).expect("leader child");
    // Nobody renews: the supervisor must demote on its own.
    let follower_pid = sv
        .wait_mode("follower", LIMIT)
        .expect("demoted after expiry");
    assert!(!alive(leader_pid));
    assert_ne!(follower_pid, leader_pid);
    let term = sb
        .lines("signals")
        .iter()
        .find(|l| l.starts_with(&format!("TERM {leader_pid} ")))
        .and_then(|l| l.split_whitespace().nth(2)?.parse::<f64>().ok())
        .expect("the leader recorded its SIGTERM");
    // /proc/uptime (CLOCK_BOOTTIME) has 10 ms resolution and is truncated: allow 20 ms below.
    assert!(
        term >= expiry_secs - 0.02,
        "demoted {:.3}s before expiry",
        expiry_secs - term
    );
    assert!(
        term <= expiry_secs + 5.0,
        "demoted {:.3}s after expiry",
        term - expiry_secs
    );
    eprintln!(
        "SIGTERM reached the leader {:.3}s after expiry",
        term - expiry_secs
    );
    let ack = sb.ack().expect("ack");
    assert_eq!(
        (ack["mode"].as_str(), ack["seq"].as_u64()),
        (Some("follower"), Some(1))
    );
}

#[test]
fn older_objects_are_ignored_and_a_retry_of_the_last_one_is_acked() {
    let sb = Sandbox::new();
    sb.elector_restart(5);
    let sv = start_recording(&sb, &[]);
    sv.wait_mode("follower", LIMIT).expect("follower child");
    let current = leader(5, 10, Duration::from_secs(60));
    assert_eq!(sv.push(&current).0, 200);
    let leader_pid = sv.wait_mode("leader", LIMIT).expect("leader child");

    let (status, body) = sv.push(&follower(5, 9));
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("stale"), "{body}");
    let (status, _) = sv.push(&follower(4, 99));
    assert_eq!(
        status, 403,
        "an older incarnation (not the token's) never outranks a newer one"
    );
    // A late flag file from the past is ignored as well.
    sb.write_grant(&follower(5, 3));
    let (status, _) = sv.push(&current);
    assert_eq!(status, 200, "a retried push of the last object is acked");

    std::thread::sleep(Duration::from_millis(1500)); // longer than the periodic re-read
    let m = sv.mode();
    assert_eq!(m["mode"], "leader");
    assert_eq!(m["child_pid"].as_i64(), Some(leader_pid as i64));
    assert_eq!(
        (m["incarnation"].as_u64(), m["seq"].as_u64()),
        (Some(5), Some(10))
    );
}

#[test]
fn renewals_move_the_expiry_without_restarting_the_app() {
    let sb = Sandbox::new();
    let sv = start_recording(&sb, &[]);
    // Its start recorded, so the two starts counted below are the follower's and the leader's.
    sv.wait_started(&sb, "follower", LIMIT)
        .expect("follower child");
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(2))).0, 200);
    let leader_pid = sv.wait_mode("leader", LIMIT).expect("leader child");
    let mut last_expiry = sv.mode()["expires_boottime_ns"].as_u64().unwrap_or(0);
    // Renew past the first grant's expiry, alternating channels.
    for seq in 2..=8 {
        std::thread::sleep(Duration::from_millis(400));
        let g = leader(1, seq, Duration::from_secs(2));
        if seq % 2 == 0 {
            assert_eq!(sv.push(&g).0, 200);
        } else {
            sb.write_grant(&g);
            assert!(wait_until(LIMIT, POLL, || sv.mode()["seq"].as_u64() == Some(seq)));
        }
        let m = sv.mode();
        let expiry = m["expires_boottime_ns"].as_u64().unwrap_or(0);
        assert!(expiry > last_expiry, "renewal moved the expiry");
        last_expiry = expiry;
        assert_eq!(
            m["child_pid"].as_i64(),
            Some(leader_pid as i64),
            "renewal restarted the app"
        );
    }
    assert_eq!(sb.starts().len(), 2, "{:?}", sb.starts());
    let to_leader: Vec<String> = sb
        .lines("signals")
        .into_iter()
        .filter(|l| l.split_whitespace().nth(1) == Some(&leader_pid.to_string()))
        .collect();
    assert!(
        to_leader.is_empty(),
        "renewals signalled the app: {to_leader:?}"
    );
}

#[test]
fn a_crashing_app_is_restarted_with_backoff_and_the_count_is_visible() {
    let sb = Sandbox::new();
    let dir = sb.dir.path().display().to_string();
    let app = sb.script(
        "app.sh",
        &format!("echo \"$$ mode=$MODE\" >> {dir}/starts; exit 1"),
    );
    let sv = Supervisor::start(
        &sb,
        &[
            "--restart-backoff-initial",
            "100ms",
            "--restart-backoff-max",
            "400ms",
        ],
        &[app.to_str().unwrap_or_default()],
    );
    assert!(
        wait_until(LIMIT, POLL, || sv.mode()["restarts"].as_u64().unwrap_or(0)
            >= 3),
        "restarts counted"
    );
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let starts_before = sb.starts().len();
    std::thread::sleep(Duration::from_secs(2));
    let in_two_secs = sb.starts().len() - starts_before;
    // Capped at 400 ms, two seconds hold about five restarts; without backoff, hundreds.
    assert!(
        in_two_secs <= 10,
        "{in_two_secs} restarts in 2s despite the backoff"
    );
    assert!(in_two_secs >= 1, "the app was not restarted at all");
    let restarts = sv.mode()["restarts"].as_u64().unwrap_or(0);
    assert!(
        restarts as usize + 1 >= sb.starts().len() - 1,
        "count {restarts} vs {:?}",
        sb.starts().len()
    );
    eprintln!(
        "{in_two_secs} restarts in 2s with 100ms..400ms backoff ({:?})",
        window.elapsed()
    );
}

#[test]
fn on_follower_stop_runs_nothing_until_promoted() {
    let sb = Sandbox::new();
    let sv = start_recording(&sb, &["--on-follower", "stop"]);
    assert!(
        wait_until(LIMIT, POLL, || sb.ack().is_some()),
        "ack written"
    );
    assert_eq!(sb.ack().expect("ack")["mode"], "follower");
    assert!(sv.mode()["child_pid"].is_null());
    assert!(sb.starts().is_empty());
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    let pid = sv.wait_mode("leader", LIMIT).expect("leader child");
    assert_eq!(sv.push(&follower(1, 2)).0, 200);
    assert!(!exists(pid), "demotion acked before the app was gone");
    assert!(sv.mode()["child_pid"].is_null());
}

#[test]
fn on_change_signal_tells_the_app_instead_of_restarting_it() {
    let sb = Sandbox::new();
    let sv = start_recording(&sb, &["--on-change", "signal:SIGUSR2"]);
    let pid = sv
        .wait_started(&sb, "follower", LIMIT)
        .expect("follower child");
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    assert!(
        wait_until(LIMIT, POLL, || sb
            .lines("signals")
            .iter()
            .any(|l| l.starts_with(&format!("USR2 {pid}")))),
        "the app got SIGUSR2"
    );
    let m = sv.mode();
    assert_eq!(
        (m["mode"].as_str(), m["child_mode"].as_str()),
        (Some("leader"), Some("leader"))
    );
    assert_eq!(m["child_pid"].as_i64(), Some(pid as i64));
    assert_eq!(sb.starts().len(), 1, "the app was restarted");
}

#[test]
fn a_leader_found_past_its_expiry_plus_the_grace_is_killed_at_once() {
    let sb = Sandbox::new();
    // The app ignores SIGTERM: only SIGKILL ends it, so the time to its end is the kill deadline.
    let app = sb.recording_app(None);
    let mut flags = MODE_FLAGS.to_vec();
    // Nothing runs as follower, so the promotion does not wait out a grace of its own.
    flags.extend_from_slice(&["--kill-grace", "2s", "--on-follower", "stop"]);
    let sv = Supervisor::start(&sb, &flags, &[app.to_str().unwrap_or_default()]);
    let g = leader(1, 1, Duration::from_millis(1500));
    assert_eq!(sv.push(&g).0, 200);
    let leader_pid = sv.wait_mode("leader", LIMIT).expect("leader child");
    // Freeze the supervisor (as cgroup throttling or a frozen container would) across the expiry
    // and the whole grace after it; the leader app keeps running meanwhile.
    sv.signal(nix::sys::signal::Signal::SIGSTOP);
    let overdue = g
        .expiry()
        .saturating_add(Duration::from_millis(2300))
        .as_nanos();
    assert!(wait_until(
        LIMIT,
        POLL,
        || passmower_elector::clock::BootInstant::now().as_nanos() >= overdue
    ));
    sv.signal(nix::sys::signal::Signal::SIGCONT);
    let resumed = Instant::now();
    assert!(
        wait_until(LIMIT, POLL, || !alive(leader_pid)),
        "the overdue leader was never stopped"
    );
    let took = resumed.elapsed();
    // Its expiry + K passed while frozen: SIGKILL at once, not a further full grace of 2s.
    assert!(
        took < Duration::from_millis(1000),
        "leader killed {took:?} after the supervisor woke, past its expiry + grace"
    );
    eprintln!("overdue leader killed {took:?} after the supervisor woke");
    assert!(wait_until(LIMIT, POLL, || sv.mode()["mode"] == "follower"));
}

#[test]
fn on_change_signal_acks_a_demotion_only_after_the_kill_grace() {
    let sb = Sandbox::new();
    let sv = start_recording(
        &sb,
        &["--on-change", "signal:SIGUSR2", "--kill-grace", "1500ms"],
    );
    let pid = sv
        .wait_started(&sb, "follower", LIMIT)
        .expect("follower child");
    // A promotion is acked on delivery.
    let sent = Instant::now();
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    assert!(
        sent.elapsed() < Duration::from_millis(1000),
        "promotion waited"
    );

    let port = sv.port;
    let body = sv.sign(&follower(1, 2)).to_json();
    let sent = Instant::now();
    let demotion = std::thread::spawn(move || {
        let r = http(port, "POST", "/", &body);
        (r, sent.elapsed())
    });
    // The app may still be finishing operator work: the ack file must not say follower before
    // the kill grace. Watched from the push on, so a slow machine cannot make the check look
    // at the file only after the grace (a fixed sleep here did).
    let mut acked_follower = None;
    assert!(
        wait_until(LIMIT, POLL, || {
            let ack = sb.ack();
            let follower = ack.as_ref().is_some_and(|a| {
                (a["mode"].as_str(), a["seq"].as_u64()) == (Some("follower"), Some(2))
            });
            if follower {
                acked_follower = Some(sent.elapsed());
            }
            follower
        }),
        "the demotion was never acked in the ack file"
    );
    let acked_follower = acked_follower.expect("set when the wait succeeded");
    assert!(
        acked_follower >= Duration::from_millis(1500),
        "demotion acked in the ack file {acked_follower:?} after the push, before the kill grace"
    );
    assert_eq!(
        sb.lines("signals")
            .iter()
            .filter(|l| l.starts_with(&format!("USR2 {pid}")))
            .count(),
        2,
        "the app got the demotion signal"
    );
    let (reply, took) = demotion.join().expect("demotion thread");
    let (status, body) = reply.expect("POST demotion");
    assert_eq!(status, 200, "{body}");
    assert!(
        took >= Duration::from_millis(1500),
        "demotion acked {took:?} after the push, before the kill grace"
    );
    let ack = sb.ack().expect("ack");
    assert_eq!(
        (ack["mode"].as_str(), ack["seq"].as_u64()),
        (Some("follower"), Some(2))
    );
    assert_eq!(sb.starts().len(), 1, "the app was restarted");
}

#[test]
fn on_change_signal_a_promotion_during_the_demotion_grace_supersedes_it() {
    let sb = Sandbox::new();
    let sv = start_recording(
        &sb,
        &["--on-change", "signal:SIGUSR2", "--kill-grace", "2s"],
    );
    sv.wait_started(&sb, "follower", LIMIT)
        .expect("follower child");
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    let port = sv.port;
    let body = sv.sign(&follower(1, 2)).to_json();
    let demotion = std::thread::spawn(move || http(port, "POST", "/", &body));
    assert!(wait_until(LIMIT, POLL, || sv.mode()["transitioning"] == true));
    let (status, body) = sv.push(&leader(1, 3, Duration::from_secs(60)));
    assert_eq!(status, 200, "{body}");
    let (status, body) = demotion
        .join()
        .expect("demotion thread")
        .expect("POST demotion");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("superseded"), "{body}");
    let ack = sb.ack().expect("ack");
    assert_eq!(
        (ack["mode"].as_str(), ack["seq"].as_u64()),
        (Some("leader"), Some(3))
    );
}

#[test]
fn no_leader_runs_until_the_ack_file_left_by_a_previous_supervisor_is_replaced() {
    let sb = Sandbox::new();
    // A directory where the ack file goes: the atomic rename onto it fails.
    let ack_path = sb.path("grant.json.ack");
    std::fs::create_dir(&ack_path).expect("mkdir");
    sb.write_grant(&leader(1, 1, Duration::from_secs(60)));
    let sv = start_recording(&sb, &["--reread-interval", "200ms"]);
    assert!(
        wait_until(LIMIT, POLL, || !sb.starts().is_empty()),
        "app started"
    );
    std::thread::sleep(Duration::from_millis(1000));
    let starts = sb.starts();
    assert!(
        starts.iter().all(|(_, m)| m == "follower"),
        "the app ran as leader without a fresh ack file: {starts:?}"
    );
    assert!(sv.logged("cannot write the ack file"));
    assert_eq!(sv.mode()["mode"], "follower");

    // Once the ack file can be written (retried on the re-read tick), the grant is obeyed.
    std::fs::remove_dir(&ack_path).expect("rmdir");
    sv.wait_mode("leader", LIMIT)
        .expect("leader once the ack file is written");
    let ack = sb.ack().expect("ack");
    assert_eq!(
        (ack["mode"].as_str(), ack["seq"].as_u64()),
        (Some("leader"), Some(1))
    );
}

#[test]
fn a_leftover_stopped_ack_file_is_replaced_before_the_app_starts() {
    let sb = Sandbox::new();
    let dir = sb.dir.path().display().to_string();
    let mut stopped = follower(1, 1);
    stopped.mode = passmower_elector::grant::Mode::Stopped;
    passmower_elector::grant::write_file(&sb.path("grant.json.ack"), &stopped).expect("ack");
    // The app's first act is to record the ack file as it finds it (`read` is a shell builtin).
    let app = sb.script(
        "app.sh",
        &format!(
            "read -r ack < {dir}/grant.json.ack; echo \"$ack\" >> {dir}/ack_at_start\n\
             echo \"$$ mode=$MODE\" >> {dir}/starts\n\
             while :; do sleep 0.05; done"
        ),
    );
    let sv = Supervisor::start(&sb, &MODE_FLAGS, &[app.to_str().unwrap_or_default()]);
    sv.wait_started(&sb, "follower", LIMIT)
        .expect("follower child");
    let seen = sb.lines("ack_at_start");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        !seen[0].contains("stopped"),
        "the app ran while the old supervisor's ack said stopped: {seen:?}"
    );
}

#[test]
fn forged_pushes_are_refused_and_the_electors_next_objects_still_take_effect() {
    let sb = Sandbox::new();
    let sv = start_recording(&sb, &[]);
    sv.wait_mode("follower", LIMIT).expect("follower child");
    for (what, forged) in forgeries() {
        let (status, body) = sv.push_raw(&forged);
        assert!(
            status == 401 || status == 403,
            "{what}: answered {status} {body}"
        );
        let m = sv.mode();
        assert_eq!(
            (m["mode"].as_str(), m["seq"].as_u64()),
            (Some("follower"), Some(0)),
            "{what} was obeyed"
        );
    }
    // An authentic grant that expires further ahead than the renew deadline it announces.
    let mut far = leader(1, 5, Duration::from_secs(60));
    far = far.with_limits(Duration::from_secs(10), Duration::from_secs(3));
    let (status, body) = sv.push(&far);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("renew deadline"), "{body}");
    // The real elector's objects still take effect: nothing forged made them look stale.
    assert_eq!(sv.push(&leader(1, 1, Duration::from_secs(60))).0, 200);
    let pid = sv.wait_mode("leader", LIMIT).expect("leader child");
    assert!(
        sb.ack_verifies(),
        "the ack is signed with the elector's key"
    );
    assert_eq!(sv.push(&follower(1, 2)).0, 200);
    assert!(!alive(pid));
    assert_eq!(sv.mode()["mode"], "follower");
}

#[test]
fn a_forged_flag_file_is_never_obeyed_and_the_electors_next_object_still_is() {
    let sb = Sandbox::new();
    let sv = start_recording(&sb, &[]);
    sv.wait_mode("follower", LIMIT).expect("follower child");
    for (what, forged) in forgeries() {
        sb.write_raw_grant(&forged);
        assert!(
            wait_until(LIMIT, POLL, || sv
                .log_contains("cannot be tied to the elector")),
            "{what}: the flag file's object was not refused"
        );
        std::thread::sleep(Duration::from_millis(300));
        let m = sv.mode();
        assert_eq!(
            (
                m["mode"].as_str(),
                m["child_mode"].as_str(),
                m["seq"].as_u64()
            ),
            (Some("follower"), Some("follower"), Some(0)),
            "{what} was obeyed"
        );
    }
    assert!(
        sb.starts().iter().all(|(_, m)| m == "follower"),
        "{:?}",
        sb.starts()
    );
    sb.write_grant(&leader(1, 1, Duration::from_secs(60)));
    sv.wait_mode("leader", LIMIT)
        .expect("the elector's grant is obeyed after the forgeries");
}

#[test]
fn a_forged_leader_over_an_obeyed_grant_demotes_rather_than_keeps_the_old_grant() {
    let sb = Sandbox::new();
    let sv = start_recording(&sb, &[]);
    sb.write_grant(&leader(1, 1, Duration::from_secs(60)));
    let pid = sv.wait_mode("leader", LIMIT).expect("leader child");
    // Something overwrites the flag file (perhaps over the elector's demotion): whatever the
    // elector last wrote there is unknown now, so the old grant is not trusted to be current.
    sb.write_raw_grant(&forgeries()[0].1);
    sv.wait_mode("follower", LIMIT)
        .expect("demoted when the file stopped holding a verifiable grant");
    assert!(!alive(pid));
    // The elector's next renewal restores it.
    sb.write_grant(&leader(1, 2, Duration::from_secs(60)));
    sv.wait_mode("leader", LIMIT).expect("leader again");
}

#[test]
fn a_restarted_elector_is_followed_through_its_new_token() {
    let sb = Sandbox::new();
    let sv = start_recording(&sb, &[]);
    assert_eq!(sv.push(&leader(1, 9, Duration::from_secs(60))).0, 200);
    sv.wait_mode("leader", LIMIT).expect("leader child");
    // The elector restarts: a new token, then its first object (a follower, lower seq).
    let incarnation = passmower_elector::clock::BootInstant::now().as_nanos();
    sb.elector_restart(incarnation);
    assert_eq!(sv.push(&follower(incarnation, 1)).0, 200);
    assert_eq!(sv.mode()["mode"], "follower");
    // The dead incarnation's objects are refused now, even signed (with the new key) ones.
    let (status, _) = sv.push(&leader(1, 10, Duration::from_secs(60)));
    assert_eq!(status, 403);
}

/// An elector restarted in its own pod adopts the Lease and grants under its new
/// incarnation and token. Same mode, so the app keeps running — through either channel — while
/// forged and stale objects are still refused.
#[test]
fn a_restarted_elector_s_leader_grant_continues_the_app_without_a_restart() {
    let sb = Sandbox::new();
    let sv = start_recording(&sb, &[]);
    assert_eq!(sv.push(&leader(1, 9, Duration::from_secs(60))).0, 200);
    let pid = sv.wait_mode("leader", LIMIT).expect("leader child");
    let starts = sb.starts().len();

    // The new elector's first object is a leader grant (flag file first, as the elector writes).
    let incarnation = passmower_elector::clock::BootInstant::now().as_nanos();
    let old_key = sb.sign(&leader(1, 10, Duration::from_secs(60)));
    sb.elector_restart(incarnation);
    let first = leader(incarnation, 1, Duration::from_secs(60));
    sb.write_grant(&first);
    assert!(wait_until(LIMIT, POLL, || sv.mode()["incarnation"]
        .as_u64()
        == Some(incarnation)));
    // The push of the same object is a repeat, acked.
    assert_eq!(sv.push(&first).0, 200);
    assert_eq!(
        sv.push(&leader(incarnation, 2, Duration::from_secs(60))).0,
        200
    );
    let m = sv.mode();
    assert_eq!(m["mode"], "leader");
    assert_eq!(
        m["child_pid"].as_i64(),
        Some(pid as i64),
        "the app was restarted"
    );
    assert_eq!(sb.starts().len(), starts, "{:?}", sb.starts());
    let to_leader: Vec<String> = sb
        .lines("signals")
        .into_iter()
        .filter(|l| l.split_whitespace().nth(1) == Some(&pid.to_string()))
        .collect();
    assert!(to_leader.is_empty(), "the app was signalled: {to_leader:?}");
    let ack = sb.ack_object().expect("ack");
    assert_eq!(
        (ack.mode, ack.incarnation, ack.seq),
        (passmower_elector::grant::Mode::Leader, incarnation, 2)
    );
    assert!(sb.ack_verifies(), "the ack is signed with the new key");

    // Still refused: the old incarnation (even correctly signed with its old key), a forged
    // object of the new one, an unsigned one.
    assert_eq!(sv.push(&old_key).0, 403);
    let mut forged = leader(incarnation, 3, Duration::from_secs(60))
        .with_limits(Duration::from_secs(120), Duration::from_secs(10));
    passmower_elector::grant::auth::Key::generate()
        .expect("key")
        .sign_grant(&mut forged);
    assert_eq!(sv.push_raw(&forged).0, 401);
    let mut unsigned = sb.sign(&follower(incarnation, 4));
    unsigned.mac = None;
    assert_eq!(sv.push_raw(&unsigned).0, 401);
    let m = sv.mode();
    assert_eq!(
        (m["mode"].as_str(), m["seq"].as_u64()),
        (Some("leader"), Some(2))
    );
    assert_eq!(m["child_pid"].as_i64(), Some(pid as i64));
}
