//! Moving a running Passmower 2.4 install from its own election to ours and back, with the real
//! 2.4 tree as processes-as-pods against the real kube-apiserver and Redis (the harness of
//! `native_election.rs`): pods that run upstream's election as its chart does (its election on,
//! `POD_NAME`, the real selector) beside pods that run ours with `elect --native-lease
//! passmower-operators`, as during a rollout that applies `inject`'s output, or removes it.
//!
//! Asserted: no pod of ours leads while an upstream process holds `passmower-operators` and
//! runs its operators, nor the other way round; an upstream leader that dies without releasing
//! its Lease (its image drops SIGTERM) is followed by ours once that Lease has not changed for
//! its duration; an upstream pod started while ours leads waits, and takes over once our
//! leader has handed over, within one lease duration; and each side reconciles a client when
//! it leads. Figures (the waits) are printed.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use passmower_elector::inject::native_election::DEFAULT_NATIVE_LEASE;
use pme_testkit::cluster::write_lease;
use pme_testkit::fence::create_client;
use pme_testkit::free_port;
use pme_testkit::passmower::start_redis;

use crate::native_election::{containers, reconciled, setup, upstream_holder, Bed, PassmowerPod};

/// Upstream's log line when its election starts the operators.
const ACQUIRED: &str = "Acquired the operator lease";
const LIMIT: Duration = Duration::from_secs(60);
const RECONCILE_LIMIT: Duration = Duration::from_secs(40);

/// A pod as upstream's 2.4 chart runs it: `node src/app.js`, its own election on.
struct UpstreamPod {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl UpstreamPod {
    fn start(bed: &Bed, name: &str) -> UpstreamPod {
        let log = bed.dir().join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("log");
        let err = out.try_clone().expect("log");
        let ns = &bed.ns.name;
        let mut cmd = Command::new("node");
        cmd.args(["--no-warnings", "src/app.js"])
            .current_dir(&bed.app)
            .env("POD_NAME", name)
            .env("LEADER_ELECTION_ENABLED", "true")
            .env("NAMESPACE_SELECTOR", ns)
            .env("DEPLOYMENT_NAME", "passmower")
            .env("KUBECONFIG", &bed.ns.elector_kubeconfig)
            .env("KUBERNETES_SERVICE_HOST", "")
            .env("POD_NAMESPACE", ns)
            .env("ISSUER_URL", "https://passmower.example.com/")
            .env("REDIS_URI", format!("redis://127.0.0.1:{}", bed.redis_port))
            .env("OIDC_JWKS", &bed.keys.0)
            .env("OIDC_COOKIE_KEYS", &bed.keys.1)
            .env("OUTBOUND_EMAIL_ENABLED", "false")
            .env("PORT", free_port().to_string())
            .env(
                "NODE_OPTIONS",
                format!("--import=file://{}", bed.preload.display()),
            )
            .env("PASSMOWER_ELECTOR_PORT_MAP", "9090=0")
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        let child = pme_testkit::process::spawn_tracked(cmd).expect("node src/app.js");
        UpstreamPod {
            name: name.to_owned(),
            child: Some(child),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether its election has started the operators and not stopped them since.
    fn leads(&self) -> bool {
        let log = self.log();
        let acquired = log.rfind(ACQUIRED);
        let lost = log.rfind("Lost the operator lease");
        self.child.is_some() && acquired.is_some() && acquired > lost
    }

    /// Ends the process with `sig` (SIGKILL: as the kubelet ends upstream's image, whose shell
    /// drops SIGTERM; SIGTERM: its graceful stop, which releases the Lease) and waits for it.
    fn stop(&mut self, sig: Signal) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = kill(Pid::from_raw(pid), sig);
            }
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(20) {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for UpstreamPod {
    fn drop(&mut self) {
        self.stop(Signal::SIGKILL);
    }
}

/// Every ~100 ms until `until` holds or `limit` passes: fails when an upstream process and a
/// pod of ours run operators at the same sample. Returns whether `until` held.
fn watch_one_writer(
    ups: &[&UpstreamPod],
    ours: &[&PassmowerPod],
    limit: Duration,
    mut until: impl FnMut() -> bool,
) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        let up: Vec<&str> = ups
            .iter()
            .filter(|u| u.leads())
            .map(|u| u.name.as_str())
            .collect();
        let us: Vec<&str> = ours
            .iter()
            .filter(|p| p.leads())
            .map(|p| p.name.as_str())
            .collect();
        assert!(
            up.is_empty() || us.is_empty(),
            "two elections ran operators at once: upstream's in {up:?}, ours in {us:?}"
        );
        if until() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

fn native_flags() -> [&'static str; 2] {
    ["--native-lease", DEFAULT_NATIVE_LEASE]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_moves_from_upstreams_election_to_ours_and_back_with_one_writer_at_a_time() {
    let Some(bed) = setup().await else {
        return;
    };
    let _redis = start_redis(bed.redis_port);
    let admin = bed.cluster.admin_client().await;
    let ns = bed.ns.name.clone();
    let (injected, _) = containers(&ns);

    // Upstream's install: two pods, one of them leads.
    let mut u1 = UpstreamPod::start(&bed, "upstream-a");
    let mut u2 = UpstreamPod::start(&bed, "upstream-b");
    let led = watch_one_writer(&[&u1, &u2], &[], LIMIT, || u1.leads() || u2.leads());
    assert!(led, "no upstream pod led:\n{}\n{}", u1.log(), u2.log());
    let (leader, other) = if u1.leads() {
        (&mut u1, &mut u2)
    } else {
        (&mut u2, &mut u1)
    };
    assert_eq!(
        upstream_holder(&admin, &ns).await.as_deref(),
        Some(leader.name.as_str())
    );

    // The rollout begins: two pods of ours start beside them. They must not lead while the
    // upstream leader holds its Lease.
    let mut ours = Vec::new();
    for name in ["passmower-x", "passmower-y"] {
        let mut pod = PassmowerPod::start_app(&bed, name, &injected);
        pod.start_elector_with(&bed, &native_flags());
        ours.push(pod);
    }
    let early = watch_one_writer(
        &[&*leader, &*other],
        &[&ours[0], &ours[1]],
        Duration::from_secs(10),
        || false,
    );
    assert!(!early);
    assert!(
        !ours.iter().any(PassmowerPod::leads),
        "a pod of ours led while upstream's leader held {DEFAULT_NATIVE_LEASE}"
    );

    // The old pods go: the follower, then the leader, killed as the kubelet kills upstream's
    // image (its shell drops SIGTERM): no release, the Lease must go stale first.
    other.stop(Signal::SIGKILL);
    let killed = Instant::now();
    leader.stop(Signal::SIGKILL);
    let took = watch_one_writer(&[], &[&ours[0], &ours[1]], LIMIT, || {
        ours.iter().any(PassmowerPod::leads)
    });
    assert!(took, "no pod of ours led after upstream's leader died");
    let waited = killed.elapsed();
    let new_leader = ours.iter().position(PassmowerPod::leads).expect("leader");
    eprintln!(
        "way in: upstream's leader killed (no release); {} led {:.1}s later (upstream's Lease \
         declares 15s)",
        ours[new_leader].name,
        waited.as_secs_f64()
    );
    let holder = pme_testkit::wait_until_async(LIMIT, Duration::from_millis(200), || async {
        upstream_holder(&admin, &ns).await.as_deref() == Some(ours[new_leader].name.as_str())
    })
    .await;
    assert!(holder, "our leader does not hold {DEFAULT_NATIVE_LEASE}");
    create_client(&admin, &ns, "client-ours").await;
    let done = pme_testkit::wait_until_async(RECONCILE_LIMIT, Duration::from_millis(200), || {
        reconciled(&admin, &ns, "client-ours")
    })
    .await;
    assert!(done, "our leader did not reconcile client-ours");

    // The way back: a pod with upstream's election starts while ours leads. It must wait.
    let mut back = UpstreamPod::start(&bed, "upstream-c");
    let early = watch_one_writer(
        &[&back],
        &[&ours[0], &ours[1]],
        Duration::from_secs(12),
        || false,
    );
    assert!(!early);
    assert!(
        !back.log().contains(ACQUIRED),
        "upstream's pod took its Lease while ours led:\n{}",
        back.log()
    );
    // Our pods are removed, the leader first, each as a pod deletion (app, then elector): the
    // other pod of ours takes over in between (ours is still the one election then), and
    // upstream's pod only once the last of ours is gone.
    let mut first = ours.remove(new_leader);
    first.terminate();
    let took = watch_one_writer(&[&back], &[&ours[0]], LIMIT, || ours[0].leads());
    assert!(took, "the other pod of ours did not take over");
    assert!(!back.log().contains(ACQUIRED), "{}", back.log());
    let mut last = ours.remove(0);
    last.terminate();
    let gone = Instant::now();
    let took = watch_one_writer(&[&back], &[], LIMIT, || back.leads());
    assert!(
        took,
        "upstream's pod never led after ours handed over:\n{}",
        back.log()
    );
    let waited = gone.elapsed();
    eprintln!(
        "way back: the last pod of ours handed over; upstream's pod led {:.1}s after it was gone",
        waited.as_secs_f64()
    );
    assert!(
        waited < Duration::from_secs(15),
        "the way back took longer than upstream's lease duration: {waited:?}"
    );
    create_client(&admin, &ns, "client-upstream").await;
    let done = pme_testkit::wait_until_async(RECONCILE_LIMIT, Duration::from_millis(200), || {
        reconciled(&admin, &ns, "client-upstream")
    })
    .await;
    assert!(
        done,
        "upstream's leader did not reconcile client-upstream:\n{}",
        back.log()
    );
    back.stop(Signal::SIGTERM);
}

/// Writes upstream's Lease as a live upstream holder would: `holder`, a 4 s duration, renewed now.
async fn renew_as_upstream(api: &kube::Api<Lease>, holder: &str) {
    write_renewed(api, DEFAULT_NATIVE_LEASE, holder, 4).await;
}

/// Writes Lease `name` held by `holder` for `duration_seconds`, renewed now, the rest of its
/// spec kept (see [`write_lease`]).
async fn write_renewed(api: &kube::Api<Lease>, name: &str, holder: &str, duration_seconds: i32) {
    write_lease(api, name, |lease| {
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some(holder.to_owned());
        spec.lease_duration_seconds = Some(duration_seconds);
        spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::now(),
        ));
    })
    .await;
}

/// The leader's hold on upstream's Lease, on plain electors (no app, the grant files recorded
/// for overlaps): when a pod running upstream's election takes that Lease (here the test, as
/// one that renews every second), our leader steps down at once and no pod of ours leads while
/// it is renewed; once it stops, ours leads again, no sooner than the Lease's duration after
/// the last renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_upstream_lease_is_taken_steps_down_and_ours_wait_while_it_is_renewed() {
    use passmower_elector::clock::BootInstant;
    use passmower_elector::grant::{self, Mode};
    use pme_testkit::{BootTime, Cluster, ElectorProcess, GrantRecorder};

    let cluster = Cluster::shared();
    // Ours is named after the Deployment, as inject names it; the test bed's default is
    // upstream's name.
    let mut rules = crate::product::elector_lease_rules("passmower");
    rules.extend(passmower_elector::inject::native_lease_rules(
        DEFAULT_NATIVE_LEASE,
    ));
    let ns = cluster.new_namespace_with("passmower", &rules).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut recorder = GrantRecorder::start(Duration::from_secs(1), [], crate::product::read_grant);
    let mut electors = Vec::new();
    let mut flags = Vec::new();
    for pod in ["pod-a", "pod-b"] {
        let flag = dir.path().join(pod).join("grant.json");
        std::fs::create_dir_all(flag.parent().expect("parent")).expect("dir");
        recorder.watch(pod, flag.clone());
        let flag_arg = flag.to_string_lossy().into_owned();
        let mut args = vec![
            "--lease-name",
            &ns.lease_name,
            "--flag-file",
            &flag_arg,
            "--probe-addr",
            "127.0.0.1:0",
            "--consumer-check",
            "none",
        ];
        args.extend_from_slice(&pme_testkit::FAST_TIMINGS);
        args.extend_from_slice(&native_flags());
        electors.push(ElectorProcess::elect(pod, &ns, &args));
        flags.push(flag);
    }
    let leads = |i: usize| {
        grant::read_file(&flags[i])
            .ok()
            .flatten()
            .is_some_and(|g| g.effective_mode(BootInstant::now()) == Mode::Leader)
    };
    let logs = |e: &[ElectorProcess]| {
        e.iter()
            .map(ElectorProcess::logs)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let led = pme_testkit::wait_until(LIMIT, Duration::from_millis(20), || leads(0) || leads(1));
    assert!(led, "nobody led:\n{}", logs(&electors));
    let leader = usize::from(leads(1));
    let admin = cluster.admin_client().await;
    let leases: kube::Api<Lease> = kube::Api::namespaced(admin, &ns.name);
    let holder = pme_testkit::wait_until_async(LIMIT, Duration::from_millis(100), || async {
        upstream_holder_in(&leases).await.as_deref() == Some(["pod-a", "pod-b"][leader])
    })
    .await;
    assert!(holder, "the leader does not hold {DEFAULT_NATIVE_LEASE}");

    // An upstream pod takes it and renews it every second for 8 s.
    let taken = Instant::now();
    renew_as_upstream(&leases, "upstream-pod").await;
    let demoted =
        pme_testkit::wait_until(Duration::from_secs(5), Duration::from_millis(20), || {
            !leads(leader)
        });
    assert!(demoted, "the leader kept leading:\n{}", logs(&electors));
    eprintln!(
        "our leader stepped down {:.2}s after upstream's Lease was taken",
        taken.elapsed().as_secs_f64()
    );
    let mut last = BootTime::now();
    while taken.elapsed() < Duration::from_secs(8) {
        assert!(
            !leads(0) && !leads(1),
            "a pod of ours led while upstream's holder renewed:\n{}",
            logs(&electors)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Taken before the write: ours can only see the write after it, so its wait of the
        // Lease's duration ends after last + 4 s.
        last = BootTime::now();
        renew_as_upstream(&leases, "upstream-pod").await;
    }
    let led = pme_testkit::wait_until(LIMIT, Duration::from_millis(20), || leads(0) || leads(1));
    assert!(led, "ours never led again:\n{}", logs(&electors));
    let after = BootTime::now().saturating_since(last);
    eprintln!(
        "ours led again {:.2}s after upstream's last renewal (its Lease declares 4s)",
        after.as_secs_f64()
    );
    assert!(
        after >= Duration::from_secs(4),
        "ours led {after:?} after upstream's last renewal, within its duration"
    );
    drop(electors);
    recorder.stop();
    recorder.assert_no_overlap();
}

async fn upstream_holder_in(api: &kube::Api<Lease>) -> Option<String> {
    api.get_opt(DEFAULT_NATIVE_LEASE)
        .await
        .expect("read")
        .and_then(|l| l.spec.and_then(|s| s.holder_identity))
}

/// The four timing flags with upstream's lease duration (15 s), so that its Lease going stale
/// cannot pass for a clear, and a 1 s retry period.
fn upstream_like_timings(
    renew_deadline: &'static str,
    kill_grace: &'static str,
) -> [&'static str; 8] {
    [
        "--lease-duration",
        "15s",
        "--renew-deadline",
        renew_deadline,
        "--retry-period",
        "1s",
        "--kill-grace",
        kill_grace,
    ]
}

/// A pod of ours leading with `timings` and holding upstream's Lease, and a pod running
/// upstream's election started beside it, which must not lead for 8 s.
async fn ours_leading_upstream_waiting(
    bed: &Bed,
    admin: &kube::Client,
    timings: &[&str],
) -> (PassmowerPod, UpstreamPod) {
    let (injected, _) = containers(&bed.ns.name);
    let mut ours = PassmowerPod::start_app(bed, "passmower-x", &injected);
    ours.start_elector_timed(bed, timings, &native_flags());
    let led = watch_one_writer(&[], &[&ours], LIMIT, || ours.leads());
    assert!(led, "the pod of ours never led");
    let holds = pme_testkit::wait_until_async(LIMIT, Duration::from_millis(200), || async {
        upstream_holder(admin, &bed.ns.name).await.as_deref() == Some("passmower-x")
    })
    .await;
    assert!(holds, "our leader does not hold {DEFAULT_NATIVE_LEASE}");
    let up = UpstreamPod::start(bed, "upstream-c");
    let early = watch_one_writer(&[&up], &[&ours], Duration::from_secs(8), || false);
    assert!(!early);
    assert!(!up.log().contains(ACQUIRED), "{}", up.log());
    (ours, up)
}

/// A leader of ours whose term ends without a hand-over (its own Lease taken from it here; a
/// Role that no longer grants it, on the way back to `fence-only`, lapses it the same way)
/// clears upstream's Lease once its app has stopped for sure (the kill grace and the margin),
/// so a pod running upstream's election leads within seconds, not after that Lease's whole
/// duration, and never beside ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_that_ends_without_a_hand_over_clears_upstreams_lease_once_the_app_has_stopped() {
    let Some(bed) = setup().await else {
        return;
    };
    let _redis = start_redis(bed.redis_port);
    let admin = bed.cluster.admin_client().await;
    let ns = bed.ns.name.clone();
    let (mut ours, up) =
        ours_leading_upstream_waiting(&bed, &admin, &upstream_like_timings("10s", "1s")).await;

    // Our Lease is taken from under our leader (held by another, fresh, for a minute).
    let leases: kube::Api<Lease> = kube::Api::namespaced(admin.clone(), &ns);
    write_renewed(
        &leases,
        &bed.ns.lease_name,
        "someone-else_0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f40_0a1b2c3d",
        60,
    )
    .await;
    let taken = Instant::now();
    let took = watch_one_writer(&[&up], &[&ours], LIMIT, || up.leads());
    assert!(took, "upstream's pod never led:\n{}", up.log());
    let waited = taken.elapsed();
    eprintln!(
        "our term ended without a hand-over; upstream's pod led {:.1}s later (its Lease declares \
         15s; kill grace 1s, margin 1s, its tick 2s)",
        waited.as_secs_f64()
    );
    assert!(
        waited < Duration::from_secs(8),
        "upstream's pod waited {waited:?}: {DEFAULT_NATIVE_LEASE} was left to go stale"
    );
    ours.terminate();
    drop(up);
}

/// A leader of ours whose own Lease can no longer be written while upstream's still can (on
/// the way back to `fence-only` the release deletes the elector's Role; here a policy refuses
/// every update of our Lease) lapses and keeps retrying: each retry takes upstream's Lease and
/// fails on ours. Upstream's Lease is cleared only once the app has stopped for sure (the
/// grant's end, the kill grace, the margin), never at a failed retry, so upstream's election
/// never runs operators beside ours, and still leads well before that Lease's own 15 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_can_no_longer_write_its_lease_lets_upstream_lead_only_after_its_app_stopped()
{
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let Some(bed) = setup().await else {
        return;
    };
    let _redis = start_redis(bed.redis_port);
    let admin = bed.cluster.admin_client().await;
    let ns = bed.ns.name.clone();
    // A kill grace of 3 s (inject's default): a clear at a failed retry would come well inside
    // it, while the leader instance still runs.
    let (mut ours, up) =
        ours_leading_upstream_waiting(&bed, &admin, &upstream_like_timings("5s", "3s")).await;

    // Our Lease may no longer be updated; upstream's still may.
    let name = format!("pme-refuse-our-lease-{ns}");
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["leases"],
                "resourceNames": [bed.ns.lease_name],
            }]},
            "validations": [{"expression": "false", "message": "our Lease is refused"}],
        },
    }))
    .expect("policy");
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": ns,
            }}},
        },
    }))
    .expect("binding");
    kube::Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .create(&Default::default(), &policy)
        .await
        .expect("create the policy");
    kube::Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone())
        .create(&Default::default(), &binding)
        .await
        .expect("create the binding");
    let refused_at = Instant::now();

    // Ours stops: its grant lapses within the renew deadline once the policy is in force, and
    // the supervisor demotes. Its app may run operators for up to the kill grace after that (an
    // app slow to stop; Passmower's leader instance is gone sooner), so upstream's Lease may be
    // cleared only after the demotion + the kill grace + the margin, whatever the retries in
    // between do. Upstream's pod must not lead before then, nor while our operator instance is
    // still there.
    let mut demoted = None;
    let t0 = Instant::now();
    while t0.elapsed() < LIMIT && !up.leads() {
        if !ours.leads() && demoted.is_none() {
            demoted = Some(Instant::now());
        }
        assert!(
            !ours.operator_instance_alive() || !up.leads(),
            "upstream's pod runs operators while our operator instance is still there"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(up.leads(), "upstream's pod never led:\n{}", up.log());
    let led = Instant::now();
    let demoted = demoted.expect("our leader was demoted");
    let after_demotion = led.saturating_duration_since(demoted);
    eprintln!(
        "our Lease refused: demoted {:.1}s later, upstream's pod led {:.1}s after the demotion \
         (kill grace 3s, margin 1s, its tick 2s; its Lease declares 15s)",
        demoted.saturating_duration_since(refused_at).as_secs_f64(),
        after_demotion.as_secs_f64()
    );
    // The bound, less the sampling's 50 ms and the supervisor's re-read of the file.
    assert!(
        after_demotion >= Duration::from_millis(3500),
        "upstream's pod led {after_demotion:?} after our demotion, before the kill grace and \
         the margin had passed: {DEFAULT_NATIVE_LEASE} was cleared while our app could still run"
    );
    assert!(
        after_demotion < Duration::from_secs(12),
        "upstream's pod waited {after_demotion:?} after our demotion: {DEFAULT_NATIVE_LEASE} \
         was left to go stale"
    );
    let dp = kube::api::DeleteParams::default();
    let _ = kube::Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone())
        .delete(&name, &dp)
        .await;
    let _ = kube::Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .delete(&name, &dp)
        .await;
    ours.terminate();
    drop(up);
}
