//! Whole pods against the real kube-apiserver: in each, the real elector pushes to the real
//! supervisor, which runs a recording stand-in app. What matters is what the apps did: the old
//! leader's app must be gone before another pod's app starts in leader mode.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::product::ElectorNamespaces;
use pme_testkit::pods::{assert_leader_runs_disjoint, wait_for_leading_pod, Pod};
use pme_testkit::wait::POLL;
use pme_testkit::{wait_until, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_elector_demotes_its_app_before_another_pod_promotes() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let mut pods = vec![Pod::start("pod-a", &ns), Pod::start("pod-b", &ns)];
    let first = wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    let old_app = pods[first].leading_app().expect("leader app");
    std::thread::sleep(Duration::from_millis(500));
    pods[first].elector().signal(Signal::SIGKILL);

    // Nobody tells the supervisor: its own copy of the grant's expiry demotes the app.
    let next = wait_for_leading_pod(&pods, Duration::from_secs(20), Some(first));
    let new_app = pods[next].leading_app().expect("new leader app");
    let old_stop = pods[first]
        .runs()
        .into_iter()
        .find(|r| r.pid == old_app.pid)
        .and_then(|r| r.stop)
        .expect("the orphaned leader app was stopped");
    assert!(
        old_stop < new_app.start,
        "old leader app stopped at {old_stop}, new one started at {}",
        new_app.start
    );
    eprintln!(
        "old leader's app stopped {:.2}s before the new leader's app started",
        new_app.start - old_stop
    );
    assert_eq!(pods[first].mode()["mode"], "follower");
    assert_leader_runs_disjoint(&pods);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_only_after_the_app_has_stopped_and_the_toggle_acked() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let mut pods = vec![
        Pod::start("pod-a", &ns),
        Pod::start("pod-b", &ns),
        Pod::start("pod-c", &ns),
    ];
    let first = wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    std::thread::sleep(Duration::from_millis(500));
    let started = std::time::Instant::now();
    pods[first].elector().signal(Signal::SIGTERM);
    let next = wait_for_leading_pod(&pods, Duration::from_secs(10), Some(first));
    let handover = started.elapsed();
    let status = pods[first]
        .elector()
        .wait_exit(Duration::from_secs(10))
        .expect("elector exits");
    assert!(status.success(), "{status:?}");
    let logs = pods[first].elector().logs();
    // The supervisor writes its ack file and answers the push in the same step, once the group
    // is gone; which of the two the elector reads first is a race (the ack file won 4 of 8 runs
    // even before acks were signed), and either is the consumer's signed word.
    assert!(
        logs.contains("consumer acknowledged the demotion source=Toggle")
            || logs.contains("consumer acknowledged the demotion source=AckFile"),
        "{logs}"
    );
    assert!(!logs.contains("toggle push failed"), "{logs}");
    assert_ne!(next, first);
    assert_leader_runs_disjoint(&pods);
    eprintln!("graceful handover through the consumer's ack: {handover:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_sidecar_order_hands_over_through_the_ack_file() {
    // With a native sidecar the kubelet stops the app container first; the elector hears SIGTERM
    // only after the supervisor has exited and nobody answers a push any more.
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let mut pods = vec![Pod::start("pod-a", &ns), Pod::start("pod-b", &ns)];
    let first = wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    pods[first].signal_supervisor(Signal::SIGTERM);
    assert!(
        pods[first]
            .wait_supervisor_exit(Duration::from_secs(10))
            .is_some(),
        "supervisor exits"
    );
    let ack = pods[first].ack().expect("ack file");
    assert_eq!(ack["mode"], "stopped", "{ack}");
    let started = std::time::Instant::now();
    pods[first].elector().signal(Signal::SIGTERM);
    let status = pods[first]
        .elector()
        .wait_exit(Duration::from_secs(10))
        .expect("elector exits");
    assert!(status.success());
    let logs = pods[first].elector().logs();
    assert!(
        logs.contains("AckFile"),
        "the elector must take the ack file's word: {logs}"
    );
    // Nobody listens on the toggle any more, and the ack file said so: no retry warnings.
    assert!(
        !logs.contains("toggle push failed"),
        "a demotion the ack file confirmed was still retried: {logs}"
    );
    let next = wait_for_leading_pod(&pods, Duration::from_secs(10), Some(first));
    assert_ne!(next, first);
    assert_leader_runs_disjoint(&pods);
    eprintln!(
        "handover with the app already stopped (ack file): {:?}",
        started.elapsed()
    );
}

/// Anything that can write the shared volume could put `stopped` in the ack file; before acks
/// were signed, the elector then released at once while its app still ran as leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_stopped_ack_does_not_release_the_lease_early() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let mut pods = vec![Pod::start("pod-a", &ns), Pod::start("pod-b", &ns)];
    let first = wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    std::thread::sleep(Duration::from_millis(500));
    // The consumer is busy (frozen): it answers neither the push nor in its ack file for now.
    pods[first].signal_supervisor(Signal::SIGSTOP);
    let acks = pods[first].path("grant.json.ack");
    let mut forged = passmower_elector::grant::read_file(&acks)
        .expect("ack file")
        .expect("ack file");
    forged.mode = passmower_elector::grant::Mode::Stopped;
    forged.mac = None;
    passmower_elector::grant::write_file(&acks, &forged).expect("forge the ack");
    pods[first].elector().signal(Signal::SIGTERM);
    // The consumer wakes up a second later and stops its app within its kill grace.
    std::thread::sleep(Duration::from_millis(1000));
    pods[first].signal_supervisor(Signal::SIGCONT);
    let status = pods[first]
        .elector()
        .wait_exit(Duration::from_secs(15))
        .expect("elector exits");
    assert!(status.success());
    let next = wait_for_leading_pod(&pods, Duration::from_secs(10), Some(first));
    assert_ne!(next, first);
    // Released only once the woken consumer had stopped its app and signed its ack.
    assert_leader_runs_disjoint(&pods);
}

/// Item 11: an app that cannot run as leader made its pod keep the Lease for ever while nothing
/// reconciled. Each pod steps down after three failed leader starts and sits out one lease
/// duration, so leadership moves between the pods — and there are never two leaders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_leader_steps_down_and_leadership_moves_without_two_leaders() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let backoff = [
        "--restart-backoff-initial",
        "100ms",
        "--restart-backoff-max",
        "300ms",
    ];
    let mut pods = vec![
        Pod::start_with("pod-a", &ns, Some("0.3"), &backoff),
        Pod::start_with("pod-b", &ns, Some("0.3"), &backoff),
    ];
    let stepped_down = |pods: &mut Vec<Pod>| -> Vec<usize> {
        (0..pods.len())
            .map(|i| {
                pods[i]
                    .elector()
                    .logs()
                    .matches("stepping down so another pod")
                    .count()
            })
            .collect()
    };
    // Both pods step down at least once: the Lease went from one to the other and back.
    let ok = wait_until(Duration::from_secs(40), POLL, || {
        let counts = stepped_down(&mut pods);
        counts.iter().all(|&c| c >= 1) && counts.iter().sum::<usize>() >= 3
    });
    let counts = stepped_down(&mut pods);
    assert!(
        ok,
        "leadership did not move between the crash-looping pods: step-downs {counts:?}"
    );
    // The apps' own records are the ground truth (the flag-file oracle of testkit/src/oracle/grants.rs
    // adds a kill grace after every grant, which acked handovers do not wait for).
    assert_leader_runs_disjoint(&pods);
    let leader_runs: Vec<usize> = pods
        .iter()
        .map(|p| p.runs().iter().filter(|r| r.role == "leader").count())
        .collect();
    eprintln!("step-downs per pod {counts:?}; leader app starts per pod {leader_runs:?}");
}

/// CPU seconds (user + system) a process has used, from /proc (clock ticks of 10 ms).
fn cpu_seconds(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // After the ')': state is field 3, utime 14 and stime 15 (1-based) of the whole line.
    let ticks = |i: usize| {
        fields
            .get(i - 3)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(14) + ticks(15)) / 100.0
}

/// Alone, a pod that stepped down leads again once its sit-out (one lease duration) is over —
/// and sits it out idle, not polling a free Lease in a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_crash_looping_leader_sits_out_one_lease_duration_then_leads_again() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let backoff = [
        "--restart-backoff-initial",
        "100ms",
        "--restart-backoff-max",
        "300ms",
    ];
    let mut pod = Pod::start_with("pod-a", &ns, Some("0.3"), &backoff);
    let step_downs = |p: &mut Pod| {
        p.elector()
            .logs()
            .matches("stepping down so another")
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(20), POLL, || step_downs(&mut pod) >= 1),
        "no step-down"
    );
    let stepped = std::time::Instant::now();
    let pid = pod.elector().pid().as_raw();
    let cpu_before = cpu_seconds(pid);
    let became = |p: &mut Pod| p.elector().logs().matches("became leader").count();
    let leads_before = became(&mut pod);
    assert!(
        wait_until(Duration::from_secs(20), POLL, || became(&mut pod)
            > leads_before),
        "never led again after sitting out"
    );
    let sat_out = stepped.elapsed();
    let cpu = cpu_seconds(pid) - cpu_before;
    // FAST_TIMINGS: D = 4s. The step-down was seen up to a poll after it happened.
    assert!(
        sat_out >= Duration::from_millis(3800),
        "led again {sat_out:?} after stepping down, before the lease duration"
    );
    assert!(
        cpu < sat_out.as_secs_f64() / 2.0,
        "the elector used {cpu:.2}s of CPU in a {sat_out:?} sit-out: it spun"
    );
    eprintln!("led again {sat_out:?} after stepping down; elector CPU meanwhile {cpu:.2}s");
}
