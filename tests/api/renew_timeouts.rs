//! A leader's renews against a slow or stalling apiserver, through the kit's fault proxy: a
//! renew that stalls is abandoned within its own timeout and retried inside the renew
//! deadline, and an apiserver that answers every call slower than the retry period (but
//! within the deadline) costs no leadership. A second candidate, connected directly, and the
//! grant recorder make any second leader a failure.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use passmower_elector::clock::BootInstant;
use passmower_elector::grant::{self, Mode};

use crate::product::{read_grant, ElectorNamespaces};
use pme_testkit::{
    client_from_kubeconfig, wait_until, BootTime, Cluster, ElectorProcess, FaultProxy,
    GrantRecorder, TestNs,
};

/// D 8s, R 4s, P 500ms, K 1s: R leaves room for a stalled renew and a retry as slow as a
/// slow apiserver's answers.
const TIMINGS: [&str; 8] = [
    "--lease-duration",
    "8s",
    "--renew-deadline",
    "4s",
    "--retry-period",
    "500ms",
    "--kill-grace",
    "1s",
];
const RENEW_DEADLINE: Duration = Duration::from_secs(4);
const RETRY_PERIOD: Duration = Duration::from_millis(500);
const KILL_GRACE: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(10);

/// `pod-a` through a fault proxy, leading; `pod-b` directly, following.
struct Setup {
    ns: TestNs,
    _dir: tempfile::TempDir,
    flag_a: PathBuf,
    recorder: GrantRecorder,
    proxy: FaultProxy,
    a: ElectorProcess,
    b: ElectorProcess,
}

impl Setup {
    async fn leading_through_a_proxy() -> Setup {
        let ns = Cluster::shared().new_namespace().await;
        Cluster::shared().create_released_lease(&ns).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let recorder = GrantRecorder::start(KILL_GRACE, [], read_grant);
        let proxy = FaultProxy::start(Cluster::shared().api_addr());
        let via_proxy = proxy.kubeconfig_via(&ns.elector_kubeconfig);
        let start = |pod: &str, kubeconfig: &std::path::Path| {
            let flag = dir.path().join(pod).join("grant.json");
            std::fs::create_dir_all(flag.parent().expect("parent")).expect("pod dir");
            recorder.watch(pod, flag.clone());
            let flag_arg = flag.to_string_lossy().into_owned();
            let mut args = vec![
                "--lease-name",
                &ns.lease_name,
                "--flag-file",
                &flag_arg,
                "--probe-addr",
                "127.0.0.1:0",
            ];
            args.extend_from_slice(&TIMINGS);
            (
                ElectorProcess::elect_with_kubeconfig(pod, &ns, kubeconfig, &args),
                flag,
            )
        };
        let (a, flag_a) = start("pod-a", &via_proxy);
        let leads = wait_until(Duration::from_secs(20), POLL, || is_leader(&flag_a));
        assert!(leads, "pod-a never led\n{}", a.logs());
        let (b, flag_b) = start("pod-b", &ns.elector_kubeconfig);
        let holder = grant::read_file(&flag_a)
            .ok()
            .flatten()
            .expect("grant")
            .holder;
        let follows = wait_until(Duration::from_secs(10), POLL, || {
            grant::read_file(&flag_b)
                .ok()
                .flatten()
                .is_some_and(|g| g.holder == holder)
        });
        assert!(follows, "pod-b never saw the leader\n{}", b.logs());
        Setup {
            ns,
            _dir: dir,
            flag_a,
            recorder,
            proxy,
            a,
            b,
        }
    }

    async fn renew_time(&self) -> String {
        let client = client_from_kubeconfig(&self.ns.elector_kubeconfig).await;
        let lease = Api::<Lease>::namespaced(client, &self.ns.name)
            .get(&self.ns.lease_name)
            .await
            .expect("read the Lease");
        format!("{:?}", lease.spec.and_then(|s| s.renew_time))
    }

    /// pod-a held one grant without a break from before `since` until now, and nobody else
    /// held one.
    fn assert_a_led_throughout(&self, since: BootTime, what: &str) {
        let intervals = self.recorder.intervals();
        let a: Vec<_> = intervals.iter().filter(|i| i.pod == "pod-a").collect();
        assert!(
            a.len() == 1 && a[0].open && a[0].start < since,
            "{what} cost pod-a its leadership: {intervals:#?}\n{}\n{}",
            self.a.logs(),
            self.b.logs()
        );
        assert!(
            intervals.iter().all(|i| i.pod == "pod-a"),
            "pod-b led: {intervals:#?}"
        );
        self.recorder.assert_no_overlap();
    }
}

fn is_leader(flag: &std::path::Path) -> bool {
    grant::read_file(flag)
        .ok()
        .flatten()
        .is_some_and(|g| g.effective_mode(BootInstant::now()) == Mode::Leader)
}

/// Every connection of the leader goes silent at once (a NAT table flushed): the renew in
/// flight, or the next one on the pooled connection, never gets an answer. It must be given up
/// within its own timeout and retried on a new connection, inside the renew deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_renew_is_abandoned_and_retried_within_the_renew_deadline() {
    let s = Setup::leading_through_a_proxy().await;
    std::thread::sleep(Duration::from_secs(1));
    let before = s.renew_time().await;
    let since = BootTime::now();
    s.proxy.silence_open_connections();
    std::thread::sleep(RENEW_DEADLINE * 3);
    assert!(
        s.a.logs().contains("the API did not answer within"),
        "no renew stalled and timed out\n{}",
        s.a.logs()
    );
    assert_ne!(s.renew_time().await, before, "no renew got through");
    for line in s.a.logs().lines().filter(|l| l.contains("did not answer")) {
        eprintln!("stalled: {line}");
    }
    assert!(is_leader(&s.flag_a));
    s.assert_a_led_throughout(since, "a stalled renew");
}

/// Every answer of the apiserver comes about 700ms late (each direction delayed 350ms): more
/// than the retry period, well within the renew deadline. Renews keep succeeding, so the
/// leader keeps its grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_slower_than_the_retry_period_costs_no_leadership() {
    let s = Setup::leading_through_a_proxy().await;
    std::thread::sleep(Duration::from_secs(1));
    let since = BootTime::now();
    let one_way = Duration::from_millis(350);
    assert!(one_way * 2 > RETRY_PERIOD);
    s.proxy.delay(one_way);
    let mut renewals = 0;
    let mut last = s.renew_time().await;
    let deadline = std::time::Instant::now() + RENEW_DEADLINE * 3;
    while std::time::Instant::now() < deadline {
        std::thread::sleep(RENEW_DEADLINE / 2);
        let now = s.renew_time().await;
        if now != last {
            renewals += 1;
        }
        last = now;
    }
    assert!(
        renewals >= 5,
        "the Lease was renewed in only {renewals} of 6 looks\n{}",
        s.a.logs()
    );
    eprintln!(
        "answers delayed {:?}: the Lease was renewed in {renewals} of 6 looks",
        one_way * 2
    );
    s.assert_a_led_throughout(since, "a slow apiserver");
    s.proxy.pass();
}
