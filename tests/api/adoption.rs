//! Adoption against the real kube-apiserver: an elector restarted in its own pod (same pod UID,
//! same volume) adopts the Lease, so the app keeps running in leader mode — and adoption never
//! makes a second pod leader: not for a pod with the same name and another UID, not with two
//! elector processes in one pod, not when another pod's takeover lands between the restarted
//! elector's read and its write, not for an app that keeps failing as leader.
//!
//! Each "pod" is an elector (with `POD_UID` as the downward API sets it), a supervisor and a
//! recording stand-in app (`testkit/src/recording_app.rs`); the apps' records are the ground truth.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use passmower_elector::clock::BootInstant;
use passmower_elector::grant;

use crate::product::ElectorNamespaces;
use pme_testkit::pods::{
    assert_leader_runs_disjoint, random_uid, wait_for_leading_pod, AppRun, Pod, PodSpec,
};
use pme_testkit::wait::POLL;
use pme_testkit::{wait_until, Cluster, TestNs};

/// FAST_TIMINGS' lease duration and retry period: D + 2P is longer than any takeover takes.
const SETTLE: Duration = Duration::from_millis(4_000 + 2 * 300);
/// What the kubelet takes to restart a crashed container the first time (it restarts it at
/// once; pulling nothing, starting the process): a few hundred milliseconds.
const RESTART_DELAY: Duration = Duration::from_millis(300);

async fn lease(ns: &TestNs) -> Lease {
    let client = Cluster::shared().admin_client().await;
    Api::<Lease>::namespaced(client, &ns.name)
        .get(&ns.lease_name)
        .await
        .expect("read the Lease")
}

async fn holder_and_transitions(ns: &TestNs) -> (String, i32) {
    let spec = lease(ns).await.spec.unwrap_or_default();
    (
        spec.holder_identity.unwrap_or_default(),
        spec.lease_transitions.unwrap_or(0),
    )
}

/// Waits (bounded) until the Lease holder satisfies `want`; returns it.
async fn wait_holder(ns: &TestNs, limit: Duration, want: impl Fn(&str) -> bool) -> Option<String> {
    let deadline = Instant::now() + limit;
    loop {
        let (holder, _) = holder_and_transitions(ns).await;
        if want(&holder) {
            return Some(holder);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

fn leader_runs(pod: &Pod) -> Vec<AppRun> {
    pod.runs()
        .into_iter()
        .filter(|r| r.role == "leader")
        .collect()
}

/// `<pod-name>_<pod-uid>_`: what every holder identity of `pod`'s electors starts with.
fn prefix(pod: &Pod) -> String {
    format!("{}_{}_", pod.name, pod.uid)
}

/// The longest stretch with no app in leader mode in any pod, between `from` and `to` (boot
/// seconds), and the number of leader-mode app starts after `from`.
fn leaderless(pods: &[Pod], from: f64, to: f64) -> (f64, usize) {
    let mut runs: Vec<(f64, f64)> = pods
        .iter()
        .flat_map(leader_runs)
        .map(|r| (r.start, r.stop.unwrap_or(f64::MAX)))
        .collect();
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let starts = runs.iter().filter(|r| r.0 > from).count();
    let mut covered = from;
    let mut longest: f64 = 0.0;
    for (start, stop) in runs {
        if stop <= covered {
            continue;
        }
        if start > covered {
            longest = longest.max(start.min(to) - covered);
        }
        covered = covered.max(stop);
        if covered >= to {
            break;
        }
    }
    if covered < to {
        longest = longest.max(to - covered);
    }
    (longest, starts)
}

/// A pod whose electors do not check their consumer (`--consumer-check=none`).
fn unchecked() -> PodSpec {
    PodSpec {
        elector_flags: vec!["--consumer-check".into(), "none".into()],
        ..PodSpec::default()
    }
}

fn boot_secs() -> f64 {
    BootInstant::now().as_nanos() as f64 / 1e9
}

/// Without adoption the restarted elector published `follower` first: its app was restarted, the
/// Lease went to whoever took it after the lease duration, and no app ran operators meanwhile.
/// Waits until `pod`'s restarted elector declines the adoption, for `reason` (a phrase of its
/// log), and checks it adopted nothing.
fn assert_declined(pod: &mut Pod, reason: &str) {
    let declined = wait_until(Duration::from_secs(10), POLL, || {
        pod.elector_logs().contains("not adopting the Lease")
    });
    let logs = pod.elector_logs();
    assert!(declined, "{logs}");
    assert!(logs.contains(reason), "{logs}");
    assert!(!logs.contains("adopted the Lease"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_elector_adopts_the_lease_and_its_app_keeps_running() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let mut pods = vec![Pod::start("pod-a", &ns), Pod::start("pod-b", &ns)];
    let first = wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    std::thread::sleep(Duration::from_millis(500));
    let app = pods[first].leading_app().expect("leader app");
    let (old_holder, transitions) = holder_and_transitions(&ns).await;
    let mine = prefix(&pods[first]);
    assert!(old_holder.starts_with(&mine), "{old_holder} vs {mine}");

    let killed = Instant::now();
    let t_kill = boot_secs();
    pods[first].kill_elector();
    std::thread::sleep(RESTART_DELAY);
    pods[first].restart_elector(&[]);
    let adopted = wait_holder(&ns, Duration::from_secs(10), |h| {
        h != old_holder && h.starts_with(&mine)
    })
    .await;
    let took = killed.elapsed();
    let logs = pods[first].elector_logs();
    let holder = adopted.unwrap_or_else(|| panic!("the restarted elector did not adopt\n{logs}"));

    std::thread::sleep(SETTLE);
    let runs = leader_runs(&pods[first]);
    assert_eq!(runs.len(), 1, "the app was restarted: {runs:?}\n{logs}");
    assert_eq!(runs[0].pid, app.pid);
    assert_eq!(runs[0].stop, None, "the app was stopped: {runs:?}\n{logs}");
    let other = 1 - first;
    assert!(
        leader_runs(&pods[other]).is_empty(),
        "another pod led: {:?}",
        leader_runs(&pods[other])
    );
    let (holder_now, transitions_now) = holder_and_transitions(&ns).await;
    assert_eq!(holder_now, holder, "the new process keeps renewing it");
    assert_eq!(
        transitions_now, transitions,
        "the epoch does not change on adoption"
    );
    let logs = pods[first].elector_logs();
    assert!(logs.contains("adopted the Lease from"), "{logs}");
    assert_eq!(pods[first].mode()["mode"], "leader");
    assert!(
        pods[first].supervisor_log_contains("a new elector incarnation continues the grant"),
        "the supervisor did not see a continuation"
    );
    assert_leader_runs_disjoint(&pods);
    let (gap, starts) = leaderless(&pods, t_kill, boot_secs());
    assert_eq!(gap, 0.0);
    eprintln!(
        "elector SIGKILLed, restarted {RESTART_DELAY:?} later: Lease adopted {took:?} after the \
         kill; leaderless gap {gap:.2}s, leader app starts since the kill {starts}"
    );
}

/// The same restart without a pod UID (an elector without `--pod-uid`/`POD_UID`, like every
/// elector without adoption): it cannot prove it is the same pod, so it starts as a follower
/// and the Lease moves after the lease duration. Its figures are those of an elector that cannot adopt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_pod_uid_a_restarted_elector_waits_like_everyone_else() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let mut pods = vec![Pod::start("pod-a", &ns), Pod::start("pod-b", &ns)];
    let first = wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    std::thread::sleep(Duration::from_millis(500));
    let (_, transitions) = holder_and_transitions(&ns).await;
    let t_kill = boot_secs();
    pods[first].kill_elector();
    std::thread::sleep(RESTART_DELAY);
    pods[first].elector = Some(pods[first].spawn_elector(None, &[]));
    std::thread::sleep(SETTLE + Duration::from_secs(2));
    let logs = pods[first].elector_logs();
    assert!(!logs.contains("adopted the Lease"), "{logs}");
    let (_, transitions_now) = holder_and_transitions(&ns).await;
    assert!(transitions_now > transitions, "nobody took the Lease over");
    assert_leader_runs_disjoint(&pods);
    let (gap, starts) = leaderless(&pods, t_kill, boot_secs());
    assert!(gap > 0.0 && starts >= 1, "gap {gap}, starts {starts}");
    eprintln!(
        "without a pod UID (no adoption): leaderless gap {gap:.2}s, leader app starts since \
         the kill {starts}"
    );
}

/// A pod with the same name and another UID (a StatefulSet replica, a force-deleted pod
/// recreated) never adopts — here even with the previous pod's volume, live grant and ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_the_same_name_and_another_uid_never_adopts() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let mut pods = vec![Pod::start("pod-a", &ns), Pod::start("pod-b", &ns)];
    let first = wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    std::thread::sleep(Duration::from_millis(500));
    let (old_holder, transitions) = holder_and_transitions(&ns).await;
    let app = pods[first].leading_app().expect("leader app");
    pods[first].kill_elector();
    std::thread::sleep(RESTART_DELAY);
    let other_uid = random_uid();
    let restarted = boot_secs();
    pods[first].elector = Some(pods[first].spawn_elector(Some(&other_uid), &[]));
    assert_declined(&mut pods[first], "held by another pod");
    // It published follower at its first view of the Lease: the old app stopped then.
    assert!(
        wait_until(Duration::from_secs(5), POLL, || pods[first]
            .runs()
            .iter()
            .any(|r| r.pid == app.pid && r.stop.is_some())),
        "the app of the previous pod kept running"
    );
    std::thread::sleep(SETTLE + Duration::from_secs(1));
    let (holder, transitions_now) = holder_and_transitions(&ns).await;
    assert_ne!(holder, old_holder);
    assert!(
        transitions_now > transitions,
        "taken over as a new term, not adopted ({holder})"
    );
    assert_leader_runs_disjoint(&pods);
    let stop = pods[first]
        .runs()
        .iter()
        .find(|r| r.pid == app.pid)
        .and_then(|r| r.stop)
        .unwrap_or(f64::NAN);
    eprintln!(
        "same name, other UID: no adoption; the old app stopped {:.2}s after the restart; the \
         Lease went to {holder} as a new term",
        stop - restarted
    );
}

/// Two elector processes in one pod (a second container sharing the volume, an exec) are still
/// one pod: the second adopts from the running first, which then sees another holder and
/// demotes; the other pod never leads meanwhile, and after the second dies the Lease moves
/// without overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_electors_in_one_pod_never_make_two_pods_leaders() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    // Without the consumer check: the second elector's token replaces the first's, so the
    // supervisor stops answering the first, which (checking) would step down after the
    // consumer timeout and let either pod take the Lease. This test is about the adoption.
    let mut pods = vec![
        Pod::start_spec("pod-a", &ns, unchecked()),
        Pod::start_spec("pod-b", &ns, unchecked()),
    ];
    let first = wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    let other = 1 - first;
    std::thread::sleep(Duration::from_millis(500));
    let (old_holder, _) = holder_and_transitions(&ns).await;
    let uid = pods[first].uid.clone();
    // The first elector keeps renewing (every P = 300 ms) and rewriting the flag file, so the
    // second can read a grant and a token of different writes, or lose its conditional write to
    // a renewal landing between its read and its write; it then declines, which is the safe
    // outcome. Up to five attempts for an adoption; the safety checks below hold either way.
    let mut attempts = 0;
    let (mut second, adopted) = loop {
        attempts += 1;
        let mut candidate = pods[first].spawn_elector(Some(&uid), &[]);
        let decided = wait_until(Duration::from_secs(10), POLL, || {
            let logs = candidate.logs();
            logs.contains("adopted the Lease from")
                || ["not adopting", "nothing to adopt", "starting as follower"]
                    .iter()
                    .any(|declined| logs.contains(declined))
        });
        assert!(
            decided,
            "the second elector neither adopted nor declined\n{}",
            candidate.logs()
        );
        if candidate.logs().contains("adopted the Lease from") {
            break (candidate, true);
        }
        if attempts == 5 {
            break (candidate, false);
        }
        candidate.signal(nix::sys::signal::Signal::SIGKILL);
        let _ = candidate.wait_exit(Duration::from_secs(5));
        assert!(
            leader_runs(&pods[other]).is_empty(),
            "pod B led after a declined adoption in pod A"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    if adopted {
        assert!(
            wait_until(Duration::from_secs(10), POLL, || pods[first]
                .elector()
                .logs()
                .contains("stopped leading")),
            "the first elector did not demote\n{}",
            pods[first].elector().logs()
        );
    }
    // Three lease durations with both electors of pod A running: pod B never leads, and the
    // Lease stays in pod A (with the second elector if it adopted; the first then waits on it
    // like any follower).
    std::thread::sleep(Duration::from_secs(12));
    assert!(
        leader_runs(&pods[other]).is_empty(),
        "pod B led while pod A's two electors ran: {:?}",
        leader_runs(&pods[other])
    );
    let (holder, _) = holder_and_transitions(&ns).await;
    assert!(holder.starts_with(&prefix(&pods[first])), "{holder}");
    assert_eq!(
        holder != old_holder,
        adopted,
        "the holder {holder} says adopted={}, the logs adopted={adopted}",
        holder != old_holder
    );
    let restarts_in_a = leader_runs(&pods[first]).len() - 1;
    // The holding elector dies: the other one of pod A and pod B contend after D, without
    // overlap.
    if adopted {
        second.signal(nix::sys::signal::Signal::SIGKILL);
        let _ = second.wait_exit(Duration::from_secs(5));
    } else {
        pods[first]
            .elector()
            .signal(nix::sys::signal::Signal::SIGKILL);
        let _ = pods[first].elector().wait_exit(Duration::from_secs(5));
    }
    let t_kill = boot_secs();
    std::thread::sleep(SETTLE + Duration::from_secs(2));
    let (holder_after, _) = holder_and_transitions(&ns).await;
    assert_ne!(
        holder_after, holder,
        "nobody took over from the dead elector"
    );
    assert_leader_runs_disjoint(&pods);
    let (gap, _) = leaderless(&pods, t_kill, boot_secs());
    eprintln!(
        "two electors in pod A: the second {} (attempt {attempts}), pod B never led; pod A's app \
         restarted {restarts_in_a} time(s) meanwhile (the other elector's late objects, refused \
         by the supervisor, demote until the next renewal); after the holder died the Lease \
         went to {holder_after} after a gap of {gap:.2}s",
        if adopted {
            "adopted"
        } else {
            "declined every time"
        }
    );
    drop(second);
}

/// The adoption is one write conditional on the record it read: another pod's takeover landing
/// between the read and the write makes it fail, and nothing is granted. The restarted
/// elector's write is held on its way (its proxy holds new connections: its first one carries
/// the read and the watch) while the Lease is taken over, then let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adoption_that_loses_the_race_to_a_takeover_grants_nothing() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    // An API timeout of 2.5s (R/2), so the held write is let go before the client gives up.
    let timings: Vec<String> = [
        "--lease-duration",
        "8s",
        "--renew-deadline",
        "5s",
        "--retry-period",
        "2s",
        "--kill-grace",
        "1s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let spec = PodSpec {
        proxy: true,
        timings,
        ..PodSpec::default()
    };
    let mut pods = vec![Pod::start_spec("pod-a", &ns, spec.clone())];
    wait_for_leading_pod(&pods, Duration::from_secs(30), None);
    pods.push(Pod::start_spec("pod-b", &ns, spec));
    std::thread::sleep(Duration::from_millis(500));
    let app = pods[0].leading_app().expect("leader app");
    let proxy_before = pods[0].proxy.as_ref().expect("proxy").accepted();

    pods[0].kill_elector();
    let proxy = pods[0].proxy.as_ref().expect("proxy");
    proxy.hold_new_connections_after(1);
    pods[0].restart_elector(&[]);
    // The held connection is the adoption write (the first one carried the read).
    let held = wait_until(Duration::from_secs(5), Duration::from_millis(2), || {
        pods[0].proxy.as_ref().expect("proxy").accepted() >= proxy_before + 2
    });
    assert!(held, "the restarted elector opened no second connection");
    // Another pod's takeover lands first (written as an administrator would, naming a pod
    // that exists nowhere, so that nobody renews it).
    let client = Cluster::shared().admin_client().await;
    let api = Api::<Lease>::namespaced(client, &ns.name);
    let mut taken = api.get(&ns.lease_name).await.expect("Lease");
    let spec = taken.spec.get_or_insert_with(Default::default);
    let intruder = format!("pod-z_{}_0000000f", random_uid());
    spec.holder_identity = Some(intruder.clone());
    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    api.replace(&ns.lease_name, &PostParams::default(), &taken)
        .await
        .expect("take the Lease over");
    pods[0].proxy.as_ref().expect("proxy").release_held();

    let lost = wait_until(Duration::from_secs(10), POLL, || {
        pods[0]
            .elector_logs()
            .contains("the Lease changed before the adoption could be written")
    });
    let logs = pods[0].elector_logs();
    assert!(
        lost,
        "the held adoption write did not meet the takeover\n{logs}"
    );
    assert!(!logs.contains("adopted the Lease"), "{logs}");
    let (holder, _) = holder_and_transitions(&ns).await;
    assert_eq!(holder, intruder, "the adoption overwrote the takeover");
    // The app ran on the previous elector's grant only, and stopped with it.
    assert!(
        wait_until(Duration::from_secs(10), POLL, || pods[0]
            .runs()
            .iter()
            .any(|r| r.pid == app.pid && r.stop.is_some())),
        "pod A's app kept running after losing the race"
    );
    // The intruder's record ages a lease duration; then a real pod takes over, never two.
    assert!(
        wait_holder(&ns, Duration::from_secs(30), |h| h != intruder)
            .await
            .is_some(),
        "nobody took over from the intruder"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_leader_runs_disjoint(&pods);
}

/// An app that keeps failing as leader is not adopted: the restarted elector finishes the
/// step-down its predecessor was due — demote, ack, release — so another pod takes over at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_failing_as_leader_is_handed_over_not_adopted() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let spec = PodSpec {
        leader_crash_after: Some("0.3".into()),
        supervisor_flags: [
            "--restart-backoff-initial",
            "100ms",
            "--restart-backoff-max",
            "300ms",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        // The first elector never steps down, so the failures pile up under it.
        elector_flags: vec!["--max-leader-failures".into(), "0".into()],
        ..PodSpec::default()
    };
    let mut pods = vec![Pod::start_spec("pod-a", &ns, spec)];
    assert!(
        wait_until(Duration::from_secs(20), POLL, || pods[0]
            .ack()
            .and_then(|a| a["leader_start_failures"].as_u64())
            .is_some_and(|f| f >= 3)),
        "pod A's app did not fail as leader\n{}",
        pods[0].elector_logs()
    );
    pods.push(Pod::start("pod-b", &ns));
    std::thread::sleep(Duration::from_millis(500));
    pods[0].kill_elector();
    pods[0].set_elector_flags(&["--max-leader-failures", "3"]);
    std::thread::sleep(RESTART_DELAY);
    let restarted = Instant::now();
    pods[0].restart_elector(&[]);
    let next = wait_for_leading_pod(&pods, Duration::from_secs(10), Some(0));
    let handed_over = restarted.elapsed();
    assert_eq!(next, 1);
    let logs = pods[0].elector_logs();
    assert!(logs.contains("finishing its step-down"), "{logs}");
    assert!(logs.contains("released the Lease"), "{logs}");
    assert!(!logs.contains("adopted the Lease"), "{logs}");
    assert_leader_runs_disjoint(&pods);
    eprintln!("failing app: pod B led {handed_over:?} after pod A's elector restarted");
}

/// While the API cannot be reached, the restarted elector publishes nothing until the inherited
/// grant's expiry — no early demotion — and then follower at once: a leader grant is never left
/// on disk past its expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_api_no_demotion_before_the_inherited_expiry_and_follower_at_it() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let spec = PodSpec {
        proxy: true,
        ..PodSpec::default()
    };
    let mut pods = vec![Pod::start_spec("pod-a", &ns, spec)];
    wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    pods.push(Pod::start("pod-b", &ns));
    std::thread::sleep(Duration::from_millis(500));
    pods[0].kill_elector();
    let inherited = grant::read_file(&pods[0].flag_file())
        .expect("flag file")
        .expect("flag file");
    assert_eq!(inherited.mode, grant::Mode::Leader);
    pods[0].proxy.as_ref().expect("proxy").blackhole();
    std::thread::sleep(RESTART_DELAY);
    pods[0].restart_elector(&[]);
    let mut replaced = None;
    wait_until(Duration::from_secs(10), Duration::from_millis(2), || {
        let now = BootInstant::now();
        if let Ok(Some(g)) = grant::read_file(&pods[0].flag_file()) {
            if g.incarnation != inherited.incarnation {
                replaced = Some((now, g));
            }
        }
        replaced.is_some()
    });
    let (seen_at, first) = replaced.unwrap_or_else(|| {
        panic!(
            "the inherited leader grant was never replaced\n{}",
            pods[0].elector_logs()
        )
    });
    assert_eq!(first.mode, grant::Mode::Follower);
    assert!(
        seen_at >= inherited.expiry(),
        "follower published {:?} before the inherited grant's expiry",
        inherited.expiry().saturating_since(seen_at)
    );
    let late = seen_at.saturating_since(inherited.expiry());
    pods[0].proxy.as_ref().expect("proxy").pass();
    let next = wait_for_leading_pod(&pods, Duration::from_secs(20), Some(0));
    std::thread::sleep(Duration::from_secs(1));
    assert_leader_runs_disjoint(&pods);
    eprintln!(
        "API unreachable at restart: the inherited grant stayed until its expiry, follower \
         {late:?} after it; pod {next} leads after the lease duration"
    );
}

/// The supervisor has stopped (its last ack says `stopped`: the app container is exiting) while
/// the elector still held the Lease and its grant was live: a restarted elector has nothing to
/// continue, so it does not adopt — it publishes follower at its first view of the Lease, and
/// another pod takes over after the lease duration, never two leaders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_supervisor_is_not_adopted() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    // The first electors do not check their consumer, so the leader still holds the Lease when
    // its supervisor has stopped (a checking elector hands it over at once, which
    // tests/consumer_proof.rs shows); its restarted elector checks, as every elector does.
    let mut pods = vec![
        Pod::start_spec("pod-a", &ns, unchecked()),
        Pod::start_spec("pod-b", &ns, unchecked()),
    ];
    let first = wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    let other = 1 - first;
    std::thread::sleep(Duration::from_millis(500));
    let (old_holder, _) = holder_and_transitions(&ns).await;
    pods[first].signal_supervisor(nix::sys::signal::Signal::SIGTERM);
    assert!(
        pods[first]
            .wait_supervisor_exit(Duration::from_secs(10))
            .is_some(),
        "the supervisor did not exit"
    );
    let ack = pods[first].ack().expect("ack file");
    assert_eq!(ack["mode"], "stopped", "{ack}");
    // The elector still holds the Lease and renews; then it is killed and restarted at once.
    let (holder, _) = holder_and_transitions(&ns).await;
    assert_eq!(holder, old_holder);
    pods[first].kill_elector();
    std::thread::sleep(RESTART_DELAY);
    pods[first].set_elector_flags(&[]);
    pods[first].restart_elector(&[]);
    assert_declined(&mut pods[first], "reports that it has stopped");
    let next = wait_for_leading_pod(&pods, Duration::from_secs(20), Some(first));
    assert_eq!(next, other);
    std::thread::sleep(Duration::from_secs(1));
    assert_leader_runs_disjoint(&pods);
}
