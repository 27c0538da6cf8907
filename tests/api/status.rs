//! `passmower-elector status` against the real kube-apiserver, on processes-as-pods (the real
//! elector and supervisor per pod, a recording stand-in app) with Pod objects and a
//! Deployment in the API: run under the read-only RBAC of examples/status-rbac.yaml, it names
//! the leader and whether its operators run, says why a pod does not contend (an app that never
//! answers, a supervisor that cannot read the token), reports handovers with their cause and
//! leaderless time from the Events, sees the write fence and its refusals, and exits 0 for a
//! working leader, 1 for none, 2 for usage errors, 3 when it cannot read the Lease. The new
//! metrics move with the same scenarios.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod as ApiPod, Secret, ServiceAccount};
use kube::api::{Api, PostParams};
use nix::sys::signal::Signal;
use serde_json::{json, Value};

use crate::product::{install_fence, ElectorNamespaces, Sandbox, Supervisor};
use passmower_elector::wire::DENIAL_PREFIX;
use pme_testkit::fence::{grant_passmower_rights, mint_token, FakePod};
use pme_testkit::manifests::{parse_stream, Applier, Mode};
use pme_testkit::pods::{wait_for_leading_pod, Pod, PodSpec};
use pme_testkit::probe::{probe_body, sample};
use pme_testkit::wait::POLL;
use pme_testkit::{free_port, wait_until, wait_until_async, Cluster, ElectorProcess, TestNs};

/// The Pod objects of processes-as-pods: a Deployment `pm` whose template has an elector
/// container naming the namespace's Lease (as `inject` writes it), and one Pod per name with
/// its labels and spec (never scheduled: there is no kubelet). Returns each Pod's UID.
async fn api_pods(ns: &TestNs, names: &[&str]) -> Vec<String> {
    let admin = Cluster::shared().admin_client().await;
    let spec = json!({
        "serviceAccountName": "passmower",
        "initContainers": [{
            "name": "passmower-elector",
            "image": "example.invalid/passmower-elector:1",
            "restartPolicy": "Always",
            "args": ["elect", format!("--lease-name={}", ns.lease_name)],
        }],
        "containers": [{"name": "passmower", "image": "example.invalid/passmower:1"}],
    });
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "pm", "namespace": ns.name},
        "spec": {
            "replicas": names.len(),
            "selector": {"matchLabels": {"app": "pm"}},
            "template": {"metadata": {"labels": {"app": "pm"}}, "spec": spec},
        },
    }))
    .expect("deployment");
    Api::<Deployment>::namespaced(admin.clone(), &ns.name)
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create the Deployment");
    let mut uids = Vec::new();
    for name in names {
        let pod: ApiPod = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns.name, "labels": {"app": "pm"}},
            "spec": spec,
        }))
        .expect("pod");
        let pod = Api::<ApiPod>::namespaced(admin.clone(), &ns.name)
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("create pod {name}: {e}"));
        uids.push(pod.metadata.uid.expect("uid"));
    }
    uids
}

/// A kubeconfig of ServiceAccount `status-reader` bound to examples/status-rbac.yaml in `ns`
/// (its cluster-wide part named per namespace), once the reader can read the Lease.
async fn reader_kubeconfig(ns: &TestNs) -> PathBuf {
    let admin = Cluster::shared().admin_client().await;
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns.name)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "status-reader"}})).expect("sa"),
        )
        .await
        .expect("create the reader's ServiceAccount");
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/status-rbac.yaml"),
    )
    .expect("examples/status-rbac.yaml");
    let mut applier = Applier::new(admin.clone());
    for mut doc in parse_stream(&text) {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        if kind.starts_with("Cluster") {
            let name = format!("{}-{}", doc["metadata"]["name"].as_str().unwrap(), ns.name);
            doc["metadata"]["name"] = json!(name);
            if kind == "ClusterRoleBinding" {
                doc["roleRef"]["name"] = json!(name);
            }
        } else {
            doc["metadata"]["namespace"] = json!(ns.name);
        }
        if doc.get("subjects").is_some() {
            doc["subjects"] = json!([{
                "kind": "ServiceAccount", "name": "status-reader", "namespace": ns.name,
            }]);
        }
        applier
            .send(&doc, &ns.name, Mode::Create)
            .await
            .unwrap_or_else(|e| panic!("apply the status RBAC: {e}"));
    }
    let token = mint_token(&admin, &ns.name, "status-reader", None).await;
    let kubeconfig = Cluster::shared().kubeconfig_for_token(&format!("{}-status", ns.name), &token);
    let reader = pme_testkit::client_from_kubeconfig(&kubeconfig).await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(reader, &ns.name);
    let authorized = wait_until_async(Duration::from_secs(20), POLL * 10, || {
        let leases = leases.clone();
        let name = ns.lease_name.clone();
        async move { leases.get_opt(&name).await.is_ok() }
    })
    .await;
    assert!(authorized, "the reader's RBAC never took effect");
    kubeconfig
}

/// `status ARGS` (through `program`, the binary under its own or the kubectl plugin's name)
/// with `kubeconfig`: its exit code, stdout and stderr.
fn run_status_as(program: &Path, kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let mut process = ElectorProcess::spawn_program(
        "status",
        program,
        args,
        &[("KUBECONFIG", kubeconfig.as_os_str())],
    );
    let status = process
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("status did not finish\n{}", process.logs()));
    let (out, err) = process.log_paths();
    (
        status.code().unwrap_or(-1),
        std::fs::read_to_string(out).unwrap_or_default(),
        std::fs::read_to_string(err).unwrap_or_default(),
    )
}

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_passmower-elector"))
}

fn run_status(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["status"];
    all.extend_from_slice(args);
    run_status_as(binary(), kubeconfig, &all)
}

/// `status -o json` for Deployment `pm` of `ns`: the exit code and the report.
fn status_json(kubeconfig: &Path, ns: &TestNs) -> (i32, Value) {
    let (code, out, err) = run_status(
        kubeconfig,
        &["-n", &ns.name, "--deployment", "pm", "-o", "json"],
    );
    let report = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("status -o json printed no JSON ({e}):\n{out}\n{err}"));
    (code, report)
}

/// Polls `status -o json` until `cond` holds of it (bounded); the last report.
fn status_until(
    kubeconfig: &Path,
    ns: &TestNs,
    limit: Duration,
    mut cond: impl FnMut(i32, &Value) -> bool,
) -> (i32, Value) {
    let mut last = (0, Value::Null);
    let ok = wait_until(limit, Duration::from_millis(300), || {
        last = status_json(kubeconfig, ns);
        cond(last.0, &last.1)
    });
    assert!(
        ok,
        "status never showed what was awaited; last report:\n{:#}",
        last.1
    );
    last
}

/// The human screen, printed for the transcript.
fn show(kubeconfig: &Path, ns: &TestNs, when: &str) -> String {
    let (code, out, err) = run_status(kubeconfig, &["-n", &ns.name, "--deployment", "pm"]);
    eprintln!(
        "--- $ passmower-elector status -n {} --deployment pm   ({when}; exit {code})\n{out}{err}",
        ns.name
    );
    out
}

fn pod_state<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["pods"]
        .as_array()
        .and_then(|pods| pods.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no pod {name} in {report:#}"))
}

/// Timings with more room than the scenario tests' (R 1.5s): these tests assert which term is
/// the newest, and a renewal starved past R on a loaded machine would begin one more.
const TIMINGS: [&str; 8] = [
    "--lease-duration",
    "6s",
    "--renew-deadline",
    "3s",
    "--retry-period",
    "500ms",
    "--kill-grace",
    "1s",
];

/// [`TIMINGS`]' lease duration.
const LEASE_DURATION: Duration = Duration::from_secs(6);

fn pod_spec(uid: &str, probe: u16) -> PodSpec {
    PodSpec {
        uid: Some(uid.to_owned()),
        probe_addr: Some(format!("127.0.0.1:{probe}")),
        timings: TIMINGS.iter().map(|s| s.to_string()).collect(),
        ..PodSpec::default()
    }
}

/// Three pods lead by turns: status reads healthy and names the leader, then after a graceful
/// handover (cause released) and a killed leader (cause expired, after at least the lease
/// duration) it reports each with its cause and leaderless time, as the new leader's metrics
/// do; the fence is installed, its Lease parameter present, and a write it refused is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_working_leader_and_each_handover_with_its_cause() {
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let names = ["pm-a", "pm-b", "pm-c"];
    let uids = api_pods(&ns, &names).await;
    let admin = Cluster::shared().admin_client().await;
    install_fence(&admin, &ns).await;
    let kubeconfig = reader_kubeconfig(&ns).await;
    let ports: Vec<u16> = names.iter().map(|_| free_port()).collect();
    let mut pods: Vec<Pod> = names
        .iter()
        .zip(&uids)
        .zip(&ports)
        .map(|((name, uid), port)| Pod::start_spec(name, &ns, pod_spec(uid, *port)))
        .collect();

    let first = wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    let (code, report) = status_until(&kubeconfig, &ns, Duration::from_secs(20), |code, r| {
        code == 0
            && r["pods"]
                .as_array()
                .is_some_and(|p| p.iter().filter(|p| p["state"] == "follower-ready").count() == 2)
    });
    show(&kubeconfig, &ns, "healthy");
    assert_eq!(code, 0);
    assert_eq!(report["healthy"], true);
    assert_eq!(report["lease"]["holder_pod"], names[first]);
    assert_eq!(report["lease"]["operators_running"], true);
    assert_eq!(report["lease"]["consumer"], "live");
    assert_eq!(report["lease"]["acquired_cause"], "released");
    assert_eq!(
        report["lease"]["name_from"],
        "the elector container of the Deployment's pod template"
    );
    assert_eq!(pod_state(&report, names[first])["state"], "leader");
    assert_eq!(report["fence"]["policy"], "installed");
    assert_eq!(report["fence"]["binding"], "installed");
    assert_eq!(report["fence"]["param"], "present");
    assert_eq!(report["fence"]["refusals"], 0, "{:#}", report["fence"]);

    // A write the fence refuses (from a pod that does not hold the Lease) is counted by the
    // apiserver, and status reads the count from its metrics.
    grant_passmower_rights(&admin, &ns.name, "passmower").await;
    let stray = FakePod::create(Cluster::shared(), &ns.name, "stray", "passmower").await;
    // The policy and binding exist (status read them), but the apiserver enforces them only once
    // its admission informers have them: until then the write is admitted. Each try writes a
    // new name, so an admitted earlier try cannot answer a later one with AlreadyExists, and
    // only the fence's own refusal ends the wait (one refusal, the one status must count).
    let secrets = Api::<Secret>::namespaced(stray.client.clone(), &ns.name);
    let mut admitted = 0;
    let mut refusal = None;
    for attempt in 0..100 {
        let secret: Secret =
            serde_json::from_value(json!({"metadata": {"name": format!("stray-{attempt}")}}))
                .expect("secret");
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => admitted += 1,
            Err(e) => {
                refusal = Some(e.to_string());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refusal = refusal.unwrap_or_else(|| {
        panic!("the fence admitted a stray pod's write in all {admitted} tries over 10 s")
    });
    assert!(
        refusal.contains(DENIAL_PREFIX),
        "the stray pod's write was refused, but not by the fence: {refusal}"
    );
    eprintln!("the fence refused the stray pod's write after {admitted} admitted tries");
    let (_, report) = status_until(&kubeconfig, &ns, Duration::from_secs(20), |_, r| {
        r["fence"]["refusals"] == 1
    });
    assert_eq!(report["fence"]["refusals"], 1);

    // A graceful handover: the leader's elector hands over at SIGTERM.
    pods[first].elector().signal(Signal::SIGTERM);
    let second = wait_for_leading_pod(&pods, Duration::from_secs(20), Some(first));
    let (code, report) = status_until(&kubeconfig, &ns, Duration::from_secs(20), |code, r| {
        code == 0 && r["lease"]["holder_pod"] == names[second]
    });
    assert_eq!(code, 0);
    // On a loaded machine a renewal may miss its deadline and the holder take its own record
    // again (a term of cause expired): look for the takeover, not only at the newest term.
    let handover = handover_by(&report, names[second], "released");
    let leaderless = handover["leaderless_seconds"]
        .as_f64()
        .expect("leaderless time");
    assert!(
        leaderless < LEASE_DURATION.as_secs_f64(),
        "a release is taken at once: {leaderless}"
    );
    assert!(report["events"].as_array().unwrap().iter().any(|e| {
        e["reason"] == "StoppedLeading"
            && e["pod"] == names[first]
            && e["message"].as_str().unwrap().contains("shutting down")
    }));
    // The stopped elector's last word: it does not contend.
    let (_, report) = status_until(&kubeconfig, &ns, Duration::from_secs(10), |_, r| {
        pod_state(r, names[first])["state"] == "not-contending"
    });
    assert!(pod_state(&report, names[first])["detail"]
        .to_string()
        .contains("the elector is stopping"));
    assert_metrics_match_the_term(ports[second], &report);
    show(&kubeconfig, &ns, "after a graceful handover");

    // A crashed leader: its record stays unchanged until another pod may take it.
    pods[second].kill_elector();
    let third = wait_for_leading_pod(&pods, Duration::from_secs(30), Some(second));
    assert_ne!(
        third, first,
        "the pod whose elector stopped does not lead again"
    );
    let (_, report) = status_until(&kubeconfig, &ns, Duration::from_secs(20), |code, r| {
        code == 0 && r["lease"]["holder_pod"] == names[third]
    });
    let handover = handover_by(&report, names[third], "expired");
    let leaderless = handover["leaderless_seconds"]
        .as_f64()
        .expect("leaderless time");
    assert!(
        leaderless >= LEASE_DURATION.as_secs_f64(),
        "an expiry is waited out: {leaderless}"
    );
    assert_metrics_match_the_term(ports[third], &report);
    show(&kubeconfig, &ns, "after a killed leader's term expired");
    // (No check of the apps' records for overlaps here: the killed elector's app is stopped by
    // its supervisor's dead man's switch, by SIGKILL when that comes late, which leaves no stop
    // record; the election tests and the fault campaign check single leadership.)
}

/// The newest handover of `pod` with `cause` in a status report.
fn handover_by<'a>(report: &'a Value, pod: &str, cause: &str) -> &'a Value {
    report["handovers"]
        .as_array()
        .and_then(|h| h.iter().find(|h| h["pod"] == pod && h["cause"] == cause))
        .unwrap_or_else(|| panic!("no {cause} handover to {pod} in {report:#}"))
}

/// The holder's metrics say what its term's report says: operators run, the term's cause
/// counted, its leaderless time, a leader-app start, and it does not contend (it leads).
fn assert_metrics_match_the_term(port: u16, report: &Value) {
    let metrics = probe_body(port, "/metrics").expect("/metrics");
    let cause = report["lease"]["acquired_cause"].as_str().expect("cause");
    let series = format!("passmower_elector_handovers_total{{cause=\"{cause}\"}}");
    assert!(
        sample(&metrics, &series).is_some_and(|n| n >= 1.0),
        "{series}: {metrics}"
    );
    assert_eq!(
        sample(&metrics, "passmower_elector_operators_running"),
        Some(1.0)
    );
    assert_eq!(sample(&metrics, "passmower_elector_contending"), Some(0.0));
    assert!(
        sample(&metrics, "passmower_elector_leader_app_starts_total").is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    let gauge = sample(&metrics, "passmower_elector_last_leaderless_seconds").expect("gauge");
    let annotated = report["lease"]["leaderless_seconds"]
        .as_f64()
        .expect("leaderless");
    assert!(
        (gauge - annotated).abs() < 0.002,
        "metric {gauge} vs the Lease's {annotated}"
    );
}

/// A pod whose app never answers (its app container is down) and one whose supervisor cannot
/// read the elector's token: neither contends, each says why in a NotContending Event, and
/// status shows both while the third pod leads; the leader's metrics count its app's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_why_a_pod_does_not_contend() {
    let root = pme_testkit::have_or_skip(
        pme_testkit::is_root(),
        "pm-c is not run: a supervisor under another UID needs root",
    );
    let ns = Cluster::shared().new_namespace().await;
    Cluster::shared().create_released_lease(&ns).await;
    let names = ["pm-a", "pm-b", "pm-c"];
    let uids = api_pods(&ns, &names).await;
    let kubeconfig = reader_kubeconfig(&ns).await;
    let (port_a, port_b) = (free_port(), free_port());
    let port_c = root.then(free_port);
    let pods = vec![Pod::start_spec("pm-a", &ns, pod_spec(&uids[0], port_a))];
    let down = Pod::start_spec(
        "pm-b",
        &ns,
        PodSpec {
            app_container_down: true,
            ..pod_spec(&uids[1], port_b)
        },
    );
    // pm-c: the app container runs as another UID than the elector, so its supervisor cannot
    // read the token (0600, the elector's): it answers no push with a signed ack.
    let unreadable = root.then(|| {
        let sandbox = Sandbox::new();
        let _ = std::fs::remove_file(sandbox.token_file());
        std::fs::set_permissions(
            sandbox.dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .expect("chmod sandbox");
        let app = sandbox.recording_app(Some(0));
        let supervisor = Supervisor::start_as(
            &sandbox,
            &[
                "--leader-env",
                "ROLE=leader",
                "--follower-env",
                "ROLE=follower",
                "--kill-grace",
                "1s",
            ],
            &[app.to_str().expect("utf-8")],
            4242,
        );
        let flag = sandbox.flag_file().to_string_lossy().into_owned();
        let toggle = format!("http://127.0.0.1:{}/grant", supervisor.port);
        let probe = format!("127.0.0.1:{}", port_c.expect("root"));
        let mut args = vec![
            "--lease-name",
            &ns.lease_name,
            "--probe-addr",
            &probe,
            "--flag-file",
            &flag,
            "--toggle-url",
            &toggle,
        ];
        args.extend_from_slice(&TIMINGS);
        let elector = ElectorProcess::elect_in_pod(
            "pm-c",
            Some(&uids[2]),
            &ns,
            &ns.elector_kubeconfig,
            &args,
            |_| {},
        );
        (sandbox, supervisor, elector)
    });

    wait_for_leading_pod(&pods, Duration::from_secs(20), None);
    let (code, report) = status_until(&kubeconfig, &ns, Duration::from_secs(30), |code, r| {
        code == 0
            && pod_state(r, "pm-b")["state"] == "not-contending"
            && (!root || pod_state(r, "pm-c")["state"] == "not-contending")
    });
    show(
        &kubeconfig,
        &ns,
        "one app down, one supervisor without the token",
    );
    assert_eq!(
        code, 0,
        "a working leader: the other pods' trouble does not change that"
    );
    assert_eq!(report["lease"]["holder_pod"], "pm-a");
    // What the toggle answered tells the two apart: nothing listens, or the supervisor
    // refuses every object because it has no token to verify them with.
    let why = pod_state(&report, "pm-b")["detail"].to_string();
    assert!(
        why.contains("no signed ack") && why.contains("no connection to the toggle"),
        "{why}"
    );
    if root {
        let why = pod_state(&report, "pm-c")["detail"].to_string();
        assert!(
            why.contains("403 Forbidden") && why.contains("no trusted elector token"),
            "{why}"
        );
    }
    assert_metrics_match_the_term(port_a, &report);
    let metrics = probe_body(port_a, "/metrics").expect("/metrics");
    assert_eq!(
        sample(&metrics, "passmower_elector_leader_app_crashes_total"),
        Some(0.0)
    );
    // The pods that do not contend say so in their metrics too.
    for port in [port_b].into_iter().chain(port_c) {
        let metrics = probe_body(port, "/metrics").expect("/metrics");
        assert_eq!(sample(&metrics, "passmower_elector_may_contend"), Some(0.0));
        assert_eq!(sample(&metrics, "passmower_elector_contending"), Some(0.0));
        assert_eq!(
            sample(&metrics, "passmower_elector_operators_running"),
            Some(0.0)
        );
    }
    drop(down);
    drop(unreadable);
}

/// With no working leader status exits 1 and says why; a Lease it cannot read is 3; a usage
/// error is 2; and as `kubectl-passmower_elector` it is the kubectl plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_exits_1_without_a_working_leader_2_on_usage_errors_and_3_when_it_cannot_read() {
    let ns = Cluster::shared().new_namespace().await;
    let kubeconfig = reader_kubeconfig(&ns).await;
    let lease_args = [
        "-n",
        ns.name.as_str(),
        "--lease",
        ns.lease_name.as_str(),
        "-o",
        "json",
    ];

    let (code, out, _) = run_status(&kubeconfig, &lease_args);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("does not exist"), "{out}");

    Cluster::shared().create_released_lease(&ns).await;
    let (code, out, _) = run_status(&kubeconfig, &lease_args);
    assert_eq!(code, 1, "{out}");
    let report: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(report["healthy"], false);
    assert_eq!(report["lease"]["exists"], true);
    assert_eq!(report["lease"]["holder"], Value::Null);
    assert!(report["verdict"].as_str().unwrap().contains("released"));

    // A holder that said its operators run, but stopped renewing: its word is old news.
    let admin = Cluster::shared().admin_client().await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(admin, &ns.name);
    let mut lease = leases.get(&ns.lease_name).await.expect("lease");
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some("ghost_0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f40_0a1b2c3d".into());
    spec.lease_duration_seconds = Some(15);
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(60),
    ));
    lease.metadata.annotations = Some(
        [(
            "passmower-elector.io/operators-running".to_owned(),
            "true".to_owned(),
        )]
        .into(),
    );
    leases
        .replace(&ns.lease_name, &PostParams::default(), &lease)
        .await
        .expect("replace");
    let (code, out, _) = run_status(&kubeconfig, &lease_args);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("last renewed it"), "{out}");

    // The kubectl plugin: the same binary under the plugin's name, `status` implied.
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = dir.path().join("kubectl-passmower_elector");
    std::os::unix::fs::symlink(binary(), &plugin).expect("symlink");
    let (code, out, _) = run_status_as(&plugin, &kubeconfig, &lease_args);
    assert_eq!(code, 1, "{out}");
    assert!(serde_json::from_str::<Value>(&out).is_ok(), "{out}");
    let (code, screen, _) = run_status_as(
        &plugin,
        &kubeconfig,
        &["-n", &ns.name, "--lease", &ns.lease_name],
    );
    assert_eq!(code, 1);
    eprintln!(
        "--- $ kubectl passmower-elector -n {} --lease {} (exit {code})\n{screen}",
        ns.name, ns.lease_name
    );
    assert!(
        screen.starts_with("NO WORKING LEADER: no working leader: ghost holds the Lease"),
        "{screen}"
    );

    // Usage errors: no target, a bad name, an unknown output.
    for (args, needle) in [
        (vec!["-n", "x"], "--deployment"),
        (vec!["--lease", "Bad_Name"], "--lease"),
        (vec!["--lease", "pm", "-o", "yaml"], "yaml"),
    ] {
        let (code, _, err) = run_status(&kubeconfig, &args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }

    // A reader without the Role: the Lease cannot be read, so nothing can be told.
    let other = Cluster::shared().new_namespace().await;
    let (code, out, _) = run_status(&kubeconfig, &["-n", &other.name, "--lease", "x"]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("UNKNOWN") && out.contains("forbidden"),
        "{out}"
    );
}

/// While Passmower's own election holds its Lease (a running 2.4 install moving to the
/// elector, or back), the electors wait: status names that holder instead of a bare "no
/// Lease", from the `--native-lease` its pods' electors carry, under the read-only RBAC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_passmowers_own_election_while_it_holds_its_lease() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    let ns = Cluster::shared().new_namespace().await;
    let kubeconfig = reader_kubeconfig(&ns).await;
    let admin = Cluster::shared().admin_client().await;
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "pm", "namespace": ns.name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "pm"}},
            "template": {"metadata": {"labels": {"app": "pm"}}, "spec": {
                "initContainers": [{
                    "name": "passmower-elector",
                    "image": "example.invalid/passmower-elector:1",
                    "restartPolicy": "Always",
                    // Ours named after the Deployment, as inject names it (the test bed's
                    // default Lease name is upstream's).
                    "args": ["elect", "--lease-name=pm", "--native-lease", "passmower-operators"],
                }],
                "containers": [{"name": "passmower", "image": "example.invalid/passmower:2.4"}],
            }},
        },
    }))
    .expect("deployment");
    Api::<Deployment>::namespaced(admin.clone(), &ns.name)
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create the Deployment");
    let leases: Api<Lease> = Api::namespaced(admin, &ns.name);
    let held = |renewed_ago: i64| -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": "passmower-operators", "namespace": ns.name},
            "spec": {
                "holderIdentity": "passmower-old-7d9f-abcde",
                "leaseDurationSeconds": 15,
                "renewTime": MicroTime(Timestamp::now() - SignedDuration::from_secs(renewed_ago)),
            },
        }))
        .expect("lease")
    };
    leases
        .create(&PostParams::default(), &held(1))
        .await
        .expect("create passmower-operators");
    let args = ["-n", ns.name.as_str(), "--deployment", "pm"];

    let (code, out, _) = run_status(&kubeconfig, &[&args[..], &["-o", "json"]].concat());
    assert_eq!(code, 1, "{out}");
    let report: Value = serde_json::from_str(&out).expect("JSON");
    let verdict = report["verdict"].as_str().unwrap_or_default();
    assert!(
        verdict.contains(
            "no leader of ours: Passmower's own election holds its Lease passmower-operators \
             (passmower-old-7d9f-abcde"
        ),
        "{verdict}"
    );
    assert_eq!(report["native_lease"]["fresh"], true, "{out}");
    assert_eq!(report["native_lease"]["held_by_leader"], false, "{out}");
    let (code, screen, _) = run_status(&kubeconfig, &args);
    assert_eq!(code, 1);
    eprintln!("--- status while Passmower's own election holds its Lease\n{screen}");
    assert!(
        screen.contains("Passmower's own Lease")
            && screen.contains("no elector contends while it renews"),
        "{screen}"
    );

    // Its pods gone, it goes stale: free to take, and the verdict is about ours again.
    let mut stale = held(60);
    stale.metadata.resource_version = leases
        .get("passmower-operators")
        .await
        .expect("get")
        .metadata
        .resource_version;
    leases
        .replace("passmower-operators", &PostParams::default(), &stale)
        .await
        .expect("replace");
    let (code, out, _) = run_status(&kubeconfig, &[&args[..], &["-o", "json"]].concat());
    assert_eq!(code, 1, "{out}");
    let report: Value = serde_json::from_str(&out).expect("JSON");
    assert!(
        report["verdict"]
            .as_str()
            .is_some_and(|v| v.contains("does not exist")),
        "{out}"
    );
    assert_eq!(report["native_lease"]["fresh"], false, "{out}");
}
