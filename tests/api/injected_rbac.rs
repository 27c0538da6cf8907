//! The RBAC `inject` generates is exactly what the elector needs: the real elector, run with
//! the arguments `inject` gave its sidecar and the token of the ServiceAccount the generated
//! RoleBinding names, leads and releases; with one permission less it cannot lead — and gets
//! there as soon as the permission is given back, so the missing one was the cause.
//!
//! Nothing here is hand-written RBAC: the ServiceAccount, Role, RoleBinding (and the rest of
//! `inject`'s output) are created from `inject_str`'s output for a Passmower-shaped Deployment
//! in the test namespace, whose identity `system:serviceaccount:<ns>:passmower` the harness
//! holds a token for.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use kube::api::{Api, PostParams};
use nix::sys::signal::Signal;
use passmower_elector::election::Timing;
use passmower_elector::grant::{self, Mode};
use passmower_elector::inject::{inject_str, InjectOptions};
use pme_testkit::manifests::{parse_stream, Applier, Mode as Send};
use pme_testkit::{free_port, Cluster, ElectorProcess, TestNs};
use serde_json::Value;

const LEASE_DURATION: Duration = Duration::from_secs(4);
/// How long a one-permission-less elector is watched not leading: more than a lease duration
/// (an absent Lease is only created after one) plus several retry periods.
const NOT_LEADING_FOR: Duration = Duration::from_secs(7);
/// Bound on becoming leader when it may (an absent Lease: one lease duration, then create).
const LEADS_WITHIN: Duration = Duration::from_secs(20);

/// What `inject` produced for one namespace.
struct Injected {
    docs: Vec<Value>,
    lease: String,
    role_name: String,
    rules: Vec<PolicyRule>,
    /// The sidecar's `elect` arguments, as the pod would run them.
    elect_args: Vec<String>,
}

fn passmower(namespace: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: passmower, namespace: {namespace}}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: passmower
  namespace: {namespace}
  labels: {{app.kubernetes.io/name: passmower, app.kubernetes.io/instance: passmower}}
spec:
  replicas: 2
  selector:
    matchLabels: {{app.kubernetes.io/name: passmower, app.kubernetes.io/instance: passmower}}
  template:
    metadata:
      labels: {{app.kubernetes.io/name: passmower, app.kubernetes.io/instance: passmower}}
    spec:
      serviceAccountName: passmower
      containers:
        - name: passmower
          image: docker.io/codemowers/passmower:2.2.0
          env:
            - {{name: NAMESPACE_SELECTOR, value: "*"}}
"#
    )
}

fn inject_for(ns: &TestNs) -> Injected {
    let opts = InjectOptions {
        timing: Timing {
            lease_duration: LEASE_DURATION,
            renew_deadline: Duration::from_millis(1500),
            retry_period: Duration::from_millis(300),
            kill_grace: Duration::from_secs(1),
        },
        ..InjectOptions::new("registry.example.com/passmower-elector:0.1.0")
    };
    let out = inject_str(&passmower(&ns.name), &opts).expect("inject");
    let docs = parse_stream(&out);
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("inject emitted no {kind}:\n{out}"))
            .clone()
    };
    let deployment = find("Deployment");
    let lease = deployment["metadata"]["annotations"][passmower_elector::inject::LEASE_ANNOTATION]
        .as_str()
        .expect("lease annotation")
        .to_owned();
    let pod = &deployment["spec"]["template"]["spec"];
    let sidecar = pod["initContainers"]
        .as_array()
        .into_iter()
        .chain(pod["containers"].as_array())
        .flatten()
        .find(|c| c["args"][0] == "elect")
        .expect("the elector container");
    let elect_args = sidecar["args"]
        .as_array()
        .expect("args")
        .iter()
        .skip(1)
        .map(|a| a.as_str().expect("string arg").to_owned())
        .collect();

    let role: Role = serde_json::from_value(find("Role")).expect("Role");
    let binding = find("RoleBinding");
    // The binding names exactly the identity the harness holds a token for, and the Role.
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "passmower", "namespace": ns.name}])
    );
    let role_name = role.metadata.name.clone().expect("role name");
    assert_eq!(binding["roleRef"]["name"], role_name.as_str());
    let rules = role.rules.clone().unwrap_or_default();
    assert_eq!(
        rules,
        crate::product::elector_lease_rules(&lease),
        "inject's Role is the library's rule set"
    );
    Injected {
        docs,
        lease,
        role_name,
        rules,
        elect_args,
    }
}

/// The rules of the Role `inject` generates. They depend only on the Lease name, which inject
/// derives from the Deployment's name, not on the namespace.
fn injected_rules() -> Vec<PolicyRule> {
    let elsewhere = TestNs {
        name: "elsewhere".into(),
        api_addr: (std::net::Ipv4Addr::LOCALHOST, 0).into(),
        lease_name: String::new(),
        elector_kubeconfig: Default::default(),
        rules: Vec::new(),
    };
    inject_for(&elsewhere).rules
}

/// The sidecar's arguments with what only makes sense in a pod replaced: the flag file in the
/// process's own directory, the probe port on loopback, no toggle (nothing listens; the
/// handover then waits the kill grace for an ack, as with a dead consumer).
fn local_args(args: &[String], probe_port: u16) -> Vec<String> {
    let mut out: Vec<String> = args
        .iter()
        .filter(|a| {
            !a.starts_with("--flag-file")
                && !a.starts_with("--probe-addr")
                && !a.starts_with("--toggle-url")
        })
        .cloned()
        .collect();
    out.push("--flag-file=grant.json".into());
    out.push(format!("--probe-addr=127.0.0.1:{probe_port}"));
    out
}

/// `passmower_elector_api_errors_total{kind}` from the elector's /metrics (0 when absent).
async fn api_errors(port: u16, kind: &str) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the probe port");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("send");
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut text))
        .await
        .expect("metrics in time")
        .expect("read metrics");
    let series = format!("passmower_elector_api_errors_total{{kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().expect("counter value"))
}

/// A namespace with `inject`'s output created in it for real, the Role's rules replaced by
/// `rules` when given. Returns once RBAC authorizes what was granted.
async fn install(cluster: &Cluster, rules: Option<&[PolicyRule]>) -> (TestNs, Injected) {
    let mut ns = cluster.new_bare_namespace("unset").await;
    let injected = inject_for(&ns);
    ns.lease_name = injected.lease.clone();
    let mut applier = Applier::new(cluster.admin_client().await);
    for doc in &injected.docs {
        let mut doc = doc.clone();
        if let (Some(rules), true) = (rules, doc["kind"] == "Role") {
            doc["rules"] = serde_json::to_value(rules).expect("rules");
        }
        applier
            .send(&doc, &ns.name, Send::Create)
            .await
            .unwrap_or_else(|e| panic!("create inject's output: {e}"));
    }
    let granted = rules.unwrap_or(&injected.rules).to_vec();
    cluster.wait_for_rbac(&ns, &granted).await;
    ns.rules = granted;
    (ns, injected)
}

fn start_elector(ns: &TestNs, injected: &Injected, probe_port: u16) -> ElectorProcess {
    let args = local_args(&injected.elect_args, probe_port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ElectorProcess::elect("pod-a", ns, &args)
}

fn mode(elector: &ElectorProcess) -> Option<Mode> {
    grant::read_file(&elector.flag_file())
        .ok()
        .flatten()
        .map(|g| g.mode)
}

async fn wait_for_leader(elector: &ElectorProcess, within: Duration) -> bool {
    pme_testkit::wait_until_async(within, Duration::from_millis(50), || async {
        mode(elector) == Some(Mode::Leader)
    })
    .await
}

/// Polls the flag file for `period`; panics if it ever says leader.
async fn assert_never_leads(elector: &ElectorProcess, period: Duration, why: &str) {
    let end = Instant::now() + period;
    while Instant::now() < end {
        assert_ne!(
            mode(elector),
            Some(Mode::Leader),
            "{why}: the elector became leader\n{}",
            elector.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn lease_holder(cluster: &Cluster, ns: &TestNs) -> Option<String> {
    Api::<Lease>::namespaced(cluster.admin_client().await, &ns.name)
        .get_opt(&ns.lease_name)
        .await
        .expect("get Lease")
        .map(|l| l.spec.and_then(|s| s.holder_identity).unwrap_or_default())
}

/// Gives the Role back the rules `inject` generated.
async fn restore_role(cluster: &Cluster, ns: &TestNs, injected: &Injected) {
    let roles: Api<Role> = Api::namespaced(cluster.admin_client().await, &ns.name);
    let mut role = roles.get(&injected.role_name).await.expect("get Role");
    role.rules = Some(injected.rules.clone());
    roles
        .replace(&injected.role_name, &PostParams::default(), &role)
        .await
        .expect("restore Role");
    cluster.wait_for_rbac(ns, &injected.rules).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_injected_role_the_elector_creates_leads_and_releases() {
    creates_leads_and_releases(None).await;
}

/// The Role grants on Leases exactly the verbs the elector sends, each of which has a test
/// below showing the elector cannot do without it (`patch` was granted once and never used:
/// a permission for nothing, to whoever holds the pod's token). With the injected Role the
/// elector creates, leads, renews and releases without one refused call (above).
#[test]
fn the_role_grants_on_leases_only_the_verbs_the_elector_uses() {
    let mut verbs: Vec<String> = injected_rules()
        .iter()
        .filter(|r| r.resources.as_deref() == Some(&["leases".to_owned()][..]))
        .flat_map(|r| r.verbs.clone())
        .collect();
    verbs.sort();
    // Each one's test: without_create_…, without_get_…, without_update_…, without_watch_….
    assert_eq!(verbs, ["create", "get", "update", "watch"]);
}

async fn creates_leads_and_releases(rules: Option<&[PolicyRule]>) {
    let cluster = Cluster::shared();
    let (ns, injected) = install(cluster, rules).await;
    // No Lease yet: the elector waits one lease duration, creates it (create), renews it
    // (update), watches it (get, watch) and at SIGTERM releases it (update).
    assert_eq!(lease_holder(cluster, &ns).await, None);
    let port = free_port();
    let mut elector = start_elector(&ns, &injected, port);
    assert!(
        wait_for_leader(&elector, LEADS_WITHIN).await,
        "did not lead with the injected Role\n{}",
        elector.logs()
    );
    let holder = lease_holder(cluster, &ns).await.expect("the Lease exists");
    assert!(holder.starts_with("pod-a"), "holder {holder}");
    // Still leading after several renewals.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(mode(&elector), Some(Mode::Leader), "{}", elector.logs());
    assert_eq!(api_errors(port, "forbidden").await, 0, "{}", elector.logs());

    elector.signal(Signal::SIGTERM);
    let status = elector
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no exit after SIGTERM\n{}", elector.logs()));
    assert!(status.success(), "{status}\n{}", elector.logs());
    assert_eq!(mode(&elector), Some(Mode::Follower));
    assert_eq!(
        lease_holder(cluster, &ns).await.as_deref(),
        Some(""),
        "released\n{}",
        elector.logs()
    );
}

/// Runs the elector under the injected Role less `verbs` on Leases; it must not lead for
/// [`NOT_LEADING_FOR`], then leads once the Role is whole again.
async fn one_permission_less(verbs: &[&str], lease_exists: bool) {
    let cluster = Cluster::shared();
    let mut rules = injected_rules();
    for verb in verbs {
        rules = pme_testkit::rules_without(&rules, "coordination.k8s.io", "leases", verb);
    }
    let (ns, injected) = install(cluster, Some(&rules)).await;
    if lease_exists {
        cluster.create_released_lease(&ns).await;
    }
    let elector = start_elector(&ns, &injected, free_port());
    let why = format!("without {verbs:?} on leases");
    assert_never_leads(&elector, NOT_LEADING_FOR, &why).await;
    let holder = lease_holder(cluster, &ns).await;
    if lease_exists {
        assert_eq!(holder.as_deref(), Some(""), "{why}: the Lease was taken");
    } else {
        assert_eq!(holder, None, "{why}: the Lease was created");
    }
    restore_role(cluster, &ns, &injected).await;
    assert!(
        wait_for_leader(&elector, LEADS_WITHIN).await,
        "{why}: still no leader after the Role was restored\n{}",
        elector.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_get_on_the_lease_the_elector_cannot_lead() {
    one_permission_less(&["get"], true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_update_on_the_lease_the_elector_cannot_lead() {
    one_permission_less(&["update"], true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_create_on_leases_the_elector_cannot_create_an_absent_lease() {
    one_permission_less(&["create"], false).await;
}

/// The watch is the one grant the elector can do without: it is how a follower takes a
/// released Lease at once, but safety never depends on it (a Lease is only taken when released
/// or unchanged for a lease duration on the candidate's own clock), and when the watch is
/// refused the watch task falls back to re-reading with `get` every retry period at most. So
/// "one permission less" shows here as the apiserver refusing the watch, counted in
/// `api_errors{kind="forbidden"}`, while the elector still leads by polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_watch_the_elector_is_refused_its_watch_and_polls() {
    let cluster = Cluster::shared();
    let rules =
        pme_testkit::rules_without(&injected_rules(), "coordination.k8s.io", "leases", "watch");
    let (ns, injected) = install(cluster, Some(&rules)).await;
    cluster.create_released_lease(&ns).await;
    let port = free_port();
    let elector = start_elector(&ns, &injected, port);
    assert!(
        wait_for_leader(&elector, LEADS_WITHIN).await,
        "without watch the elector should still lead by polling\n{}",
        elector.logs()
    );
    let refused = pme_testkit::wait_until_async(
        Duration::from_secs(5),
        Duration::from_millis(100),
        || async { api_errors(port, "forbidden").await >= 2 },
    )
    .await;
    assert!(
        refused,
        "the watch was not refused (is it still used?)\n{}",
        elector.logs()
    );
}

/// `GET /leader` from the elector's probe port, as JSON (`null` while nothing listens yet).
async fn leader_view(port: u16) -> Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return Value::Null;
    };
    stream
        .write_all(b"GET /leader HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("send");
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut text))
        .await
        .expect("/leader in time")
        .expect("read /leader");
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("/leader is not JSON ({e}): {text}"))
}

/// Waits until `/leader` says `pod` is in `state`; returns the last view.
async fn wait_for_pod_state(port: u16, state: &str, within: Duration) -> (bool, Value) {
    let end = Instant::now() + within;
    loop {
        let view = leader_view(port).await;
        if view["pod"] == state {
            return (true, view);
        }
        if Instant::now() >= end {
            return (false, view);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates Pod `name` (never run: no kubelet) with a finalizer, so that deleting it leaves it
/// terminating until the namespace's test ends.
async fn create_kept_pod(cluster: &Cluster, ns: &TestNs, name: &str) {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "finalizers": ["passmower-elector.test/keep"]},
        "spec": {
            "serviceAccountName": "passmower",
            "automountServiceAccountToken": false,
            "containers": [{"name": "passmower", "image": "example.invalid/passmower:1"}],
        },
    }))
    .expect("pod");
    Api::namespaced(cluster.admin_client().await, &ns.name)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("create pod {name}: {e}"));
}

/// On pods the Role grants what the elector's watch of its own Pod sends: `get` and `watch`,
/// no `list` (the watch is by field selector on the pod's name).
#[test]
fn the_role_grants_on_pods_only_get_and_watch() {
    let verbs: Vec<String> = injected_rules()
        .iter()
        .filter(|r| r.resources.as_deref() == Some(&["pods".to_owned()][..]))
        .flat_map(|r| r.verbs.clone())
        .collect();
    assert_eq!(verbs, ["get", "watch"]);
}

/// With the injected Role the elector reads its own Pod, and sees it terminating as soon as it
/// is deleted (its watch delivers the deletionTimestamp), without a refused call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_injected_role_the_elector_sees_its_pod_terminating() {
    let cluster = Cluster::shared();
    let (ns, injected) = install(cluster, None).await;
    create_kept_pod(cluster, &ns, "pod-a").await;
    cluster.create_released_lease(&ns).await;
    let port = free_port();
    let elector = start_elector(&ns, &injected, port);
    let (ok, view) = wait_for_pod_state(port, "staying", Duration::from_secs(10)).await;
    assert!(ok, "{view}\n{}", elector.logs());
    assert!(
        wait_for_leader(&elector, LEADS_WITHIN).await,
        "{}",
        elector.logs()
    );
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(cluster.admin_client().await, &ns.name)
        .delete("pod-a", &Default::default())
        .await
        .expect("delete pod-a");
    // Well within the watch's first backoff steps: delivered by the watch, not a re-read.
    let (ok, view) = wait_for_pod_state(port, "terminating", Duration::from_secs(3)).await;
    assert!(ok, "{view}\n{}", elector.logs());
    assert_eq!(view["contending"], false, "{view}");
    // A leader keeps its term until it is stopped.
    assert_eq!(mode(&elector), Some(Mode::Leader), "{}", elector.logs());
    assert_eq!(api_errors(port, "forbidden").await, 0, "{}", elector.logs());
}

/// Without `get`/`watch` on pods (a Role from before the elector watched its Pod), the
/// elector cannot tell whether its pod is terminating: it says so in /leader and contends as
/// before, so the missing permission never stops the election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pods_in_the_role_the_elector_says_so_and_still_leads() {
    let cluster = Cluster::shared();
    let rules: Vec<PolicyRule> = injected_rules()
        .into_iter()
        .filter(|r| r.resources.as_deref() != Some(&["pods".to_owned()][..]))
        .collect();
    let (ns, injected) = install(cluster, Some(&rules)).await;
    create_kept_pod(cluster, &ns, "pod-a").await;
    cluster.create_released_lease(&ns).await;
    let port = free_port();
    let elector = start_elector(&ns, &injected, port);
    assert!(
        wait_for_leader(&elector, LEADS_WITHIN).await,
        "without pods in the Role the elector must still lead\n{}",
        elector.logs()
    );
    let (ok, view) = wait_for_pod_state(port, "unknown", Duration::from_secs(5)).await;
    assert!(ok, "{view}\n{}", elector.logs());
    let reason = view["pod_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("get and watch on pods"), "{view}");
    let warned = elector
        .logs()
        .matches("cannot tell whether this pod is terminating")
        .count();
    assert_eq!(warned, 1, "warned once\n{}", elector.logs());
}
