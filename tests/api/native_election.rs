//! Passmower 2.4's own leader election beside the elector, with the real 2.4 tree
//! (`PME_PASSMOWER_APP_24`, an npm-installed copy of `../shared/upstream/passmower-with-election`)
//! as processes-as-pods against the real kube-apiserver and Redis.
//!
//! Each "pod" is what `inject` makes of upstream's 2.4 Deployment: the real elector pushing to
//! the real supervisor, which runs Passmower's serving instance (idle selector) and, while
//! leader, its operator instance (the real selector), with the container env and supervise
//! flags taken from `inject`'s output. Every pod has its own `POD_NAME`, as upstream's 2.4 chart
//! passes it; the pods' ServiceAccount may do anything (so the Lease RBAC upstream's 2.4 chart
//! grants, leases get/create/update, is there too and its election never meets a 403).
//!
//! Here the pods share one network namespace, which real pods do not: every instance gets
//! `NODE_OPTIONS` with the supervisor's own port-map preload moving Passmower's fixed metrics
//! port 9090 to a free loopback port (the serving instances would meet there otherwise); the
//! leader instance gets the supervisor's map (`*=0`) on top, as in a real pod.
//!
//! The arrangement that makes the failure certain rather than a coin toss: pod A's Passmower
//! boots first, so its serving instance takes Lease `passmower-operators`; pod B's elector
//! starts first, so B leads. Then the handovers are graceful (app container SIGTERM, then the
//! elector), and each new tenure creates a client.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DynamicObject, PostParams};
use nix::sys::signal::Signal;
use passmower_elector::inject::native_election::{DEFAULT_NATIVE_LEASE, ENABLED_VAR};
use passmower_elector::inject::{inject, InjectOptions};
use pme_testkit::fence::{create_client, install_crds_of, oidc_clients};
use pme_testkit::free_port;
use pme_testkit::passmower::{passmower_keys, start_redis};
use pme_testkit::supervise::{Sandbox, Supervisor};
use pme_testkit::{Cluster, ElectorProcess, TestNs};
use serde_json::json;
use serde_norway::Value;

/// The elector's Lease: inject's default for Deployment `passmower` (its name).
const LEASE: &str = "passmower";
/// Tenures in one run: the first, then one per graceful handover.
const TENURES: usize = 4;
/// How long a tenure waits for its client to be reconciled (a live operator instance does it
/// in 3 to 6 s here, 12 s with both tests of this file running on two busy cores).
const RECONCILE_LIMIT: Duration = Duration::from_secs(40);
/// How long a handover may take: the old pod's stop, the new leader's grant and its operator
/// instance's boot.
const HANDOVER_LIMIT: Duration = Duration::from_secs(40);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The 2.4 tree, for its CRDs.
fn tree() -> PathBuf {
    std::env::var_os("PME_UPSTREAM_24")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/upstream/passmower-with-election"))
}

fn app() -> Option<PathBuf> {
    pme_testkit::passmower::app_dir(
        "PME_PASSMOWER_APP_24",
        "Point it at a copy of ../shared/upstream/passmower-with-election after `npm install \
         --omit=dev` (`PME_UPSTREAM=../shared/upstream/passmower-with-election scripts/build-passmower-app.sh`)",
    )
}

/// Upstream's 2.4 Deployment as its chart renders the parts that matter here: the 2.4.0
/// image, `POD_NAME` from the downward API and `LEADER_ELECTION_ENABLED: "true"` (the chart's
/// default), and the leader's selector (the test namespace).
fn upstream_deployment(ns: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: passmower, namespace: {ns}}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: passmower}}}}
  template:
    metadata: {{labels: {{app: passmower}}}}
    spec:
      serviceAccountName: passmower
      containers:
      - name: passmower
        image: ghcr.io/passmower/passmower:2.4.0
        env:
        - {{name: DEPLOYMENT_NAME, value: passmower}}
        - {{name: NAMESPACE_SELECTOR, value: {ns}}}
        - name: POD_NAME
          valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
        - {{name: {ENABLED_VAR}, value: 'true'}}
"
    )
}

/// What a pod's app container is given, from `inject`'s output.
#[derive(Clone, Debug)]
pub(crate) struct AppContainer {
    /// Literal env entries, and `POD_NAME` (from `metadata.name`) as `None`.
    env: Vec<(String, Option<String>)>,
    /// `supervise` flags, without the flag file and listen address (the sandbox's).
    supervise: Vec<String>,
    /// The app command after `--`.
    command: Vec<String>,
}

impl AppContainer {
    fn of(deployment: &Value) -> AppContainer {
        let main = &deployment["spec"]["template"]["spec"]["containers"][0];
        let env = main["env"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|e| {
                let name = e["name"].as_str().expect("env name").to_owned();
                let field = e["valueFrom"]["fieldRef"]["fieldPath"].as_str();
                match field {
                    Some("metadata.name") => (name, None),
                    Some(other) => panic!("env {name} from {other}: not modelled here"),
                    None => (
                        name,
                        Some(e["value"].as_str().unwrap_or_default().to_owned()),
                    ),
                }
            })
            .collect();
        let args: Vec<String> = main["args"]
            .as_sequence()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("string arg").to_owned())
            .collect();
        assert_eq!(args[0], "supervise");
        let dashdash = args.iter().position(|a| a == "--").expect("--");
        AppContainer {
            env,
            supervise: args[1..dashdash]
                .iter()
                .filter(|a| !a.starts_with("--flag-file=") && !a.starts_with("--listen="))
                .cloned()
                .collect(),
            command: args[dashdash + 1..].to_vec(),
        }
    }

    fn enabled(&self) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == ENABLED_VAR)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// The injected app container (what `inject` makes of upstream's Deployment) and the one the
/// injection made before it recognised Passmower's own election: the same, with the chart's
/// `LEADER_ELECTION_ENABLED` as the manifest had it (the injection passed the env through).
pub(crate) fn containers(ns: &str) -> (AppContainer, AppContainer) {
    containers_of(&upstream_deployment(ns))
}

/// [`containers`] for the Deployment `input`.
fn containers_of(input: &str) -> (AppContainer, AppContainer) {
    let input = input.to_owned();
    let injected = inject(
        &input,
        &InjectOptions::new("registry.example.com/passmower-elector:test"),
    )
    .expect("inject upstream's 2.4 Deployment");
    let after = &injected.rewrites[0].after;
    assert_eq!(
        after["metadata"]["annotations"][passmower_elector::inject::LEASE_ANNOTATION].as_str(),
        Some(LEASE)
    );
    let now = AppContainer::of(after);
    let before: Value = serde_norway::from_str(&input).expect("input");
    let chart_value = before["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .expect("env")
        .iter()
        .find(|e| e["name"].as_str() == Some(ENABLED_VAR))
        .and_then(|e| e["value"].as_str())
        .map(str::to_owned);
    let mut today = now.clone();
    today.env.retain(|(k, _)| k != ENABLED_VAR);
    today.env.push((ENABLED_VAR.to_owned(), chart_value));
    (now, today)
}

/// What every pod shares: the control plane, the namespace, Redis, keys, and the preload that
/// moves port 9090.
pub(crate) struct Bed {
    /// A private control plane: Passmower 2.4's CRDs (served as v1 and v1beta1) are not the
    /// 1.3.0 ones the other api tests install into the shared one, and only one can be there.
    pub(crate) cluster: Cluster,
    pub(crate) ns: TestNs,
    pub(crate) app: PathBuf,
    pub(crate) redis_port: u16,
    pub(crate) keys: (String, String),
    pub(crate) preload: PathBuf,
    _dir: tempfile::TempDir,
}

impl Bed {
    /// A directory that lives as long as the bed.
    pub(crate) fn dir(&self) -> &Path {
        self._dir.path()
    }
}

/// One pod: sandbox (its shared volume), supervisor (its app container), elector (its sidecar).
pub(crate) struct PassmowerPod {
    pub(crate) name: String,
    sandbox: Sandbox,
    supervisor: Option<Supervisor>,
    pub(crate) elector: Option<ElectorProcess>,
    pub(crate) log: PathBuf,
}

impl PassmowerPod {
    /// The app container: the supervisor running Passmower with `container`'s env.
    pub(crate) fn start_app(bed: &Bed, name: &str, container: &AppContainer) -> PassmowerPod {
        // A real pod's shared volume starts empty: no token before its elector writes one.
        let sandbox = Sandbox::new();
        let log = sandbox.path("passmower.log");
        let mut env: Vec<(String, String)> = container
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().unwrap_or_else(|| name.to_owned())))
            .collect();
        let ns = &bed.ns.name;
        for (k, v) in [
            (
                "KUBECONFIG",
                bed.ns.elector_kubeconfig.display().to_string(),
            ),
            ("POD_NAMESPACE", ns.clone()),
            ("ISSUER_URL", "https://passmower.example.com/".into()),
            ("REDIS_URI", format!("redis://127.0.0.1:{}", bed.redis_port)),
            ("OIDC_JWKS", bed.keys.0.clone()),
            ("OIDC_COOKIE_KEYS", bed.keys.1.clone()),
            ("OUTBOUND_EMAIL_ENABLED", "false".into()),
            ("PORT", free_port().to_string()),
            (
                "NODE_OPTIONS",
                format!("--import=file://{}", bed.preload.display()),
            ),
            ("PASSMOWER_ELECTOR_PORT_MAP", "9090=0".into()),
        ] {
            env.push((k.to_owned(), v));
        }
        // No in-cluster config: the kubeconfig names the API (an empty host is unset to it).
        env.push(("KUBERNETES_SERVICE_HOST".to_owned(), String::new()));
        // The image's WORKDIR, and the instances' output into the pod's log.
        let mut command = vec![
            "sh".to_owned(),
            "-c".to_owned(),
            format!("cd \"$0\" && exec \"$@\" >> '{}' 2>&1", log.display()),
            bed.app.display().to_string(),
        ];
        command.extend(container.command.iter().cloned());
        let flags: Vec<&str> = container.supervise.iter().map(String::as_str).collect();
        let command: Vec<&str> = command.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let supervisor = Supervisor::start_env(&sandbox, &env, &flags, &command);
        PassmowerPod {
            name: name.to_owned(),
            sandbox,
            supervisor: Some(supervisor),
            elector: None,
            log,
        }
    }

    /// The sidecar: the elector, pushing to this pod's supervisor.
    pub(crate) fn start_elector(&mut self, bed: &Bed) {
        self.start_elector_with(bed, &[]);
    }

    /// [`Self::start_elector`] with `extra` flags.
    pub(crate) fn start_elector_with(&mut self, bed: &Bed, extra: &[&str]) {
        self.start_elector_timed(bed, &pme_testkit::FAST_TIMINGS, extra);
    }

    /// [`PassmowerPod::start_elector_with`] with `timings` (the four timing flags) instead of
    /// the fast ones.
    pub(crate) fn start_elector_timed(&mut self, bed: &Bed, timings: &[&str], extra: &[&str]) {
        let flag = self.sandbox.flag_file().to_string_lossy().into_owned();
        let toggle = format!(
            "http://127.0.0.1:{}/grant",
            self.supervisor.as_ref().expect("app container").port
        );
        let mut args = vec![
            "--lease-name",
            &bed.ns.lease_name,
            "--probe-addr",
            "127.0.0.1:0",
            "--flag-file",
            &flag,
            "--toggle-url",
            &toggle,
        ];
        args.extend_from_slice(timings);
        args.extend_from_slice(extra);
        let uid = pme_testkit::pods::random_uid();
        self.elector = Some(ElectorProcess::elect_in_pod(
            &self.name,
            Some(&uid),
            &bed.ns,
            &bed.ns.elector_kubeconfig,
            &args,
            |_| {},
        ));
    }

    /// Whether this pod's supervisor runs its operator instance (leader grant, child running).
    pub(crate) fn leads(&self) -> bool {
        self.supervisor.as_ref().is_some_and(|s| {
            let m = s.mode();
            m["mode"] == "leader" && m["child_mode"] == "leader" && m["child_pid"].is_i64()
        })
    }

    /// Whether this pod's operator instance is still there, stopping or not: a demotion flips
    /// the supervisor's mode at once, while the leader instance may run on for the kill grace.
    pub(crate) fn operator_instance_alive(&self) -> bool {
        self.supervisor.as_ref().is_some_and(|s| {
            let m = s.mode();
            m["child_mode"] == "leader" && m["child_pid"].is_i64()
        })
    }

    /// A pod deletion: the app container gets SIGTERM (the supervisor stops both instances,
    /// Passmower's leader instance releases its own Lease first if it holds it), then the
    /// elector, once the app container is gone, as the kubelet stops a native sidecar.
    pub(crate) fn terminate(&mut self) {
        if let Some(mut s) = self.supervisor.take() {
            s.signal(Signal::SIGTERM);
            assert!(
                s.wait_exit(Duration::from_secs(20)).is_some(),
                "{}: the supervisor did not exit within 20s of SIGTERM",
                self.name
            );
        }
        if let Some(mut e) = self.elector.take() {
            e.signal(Signal::SIGTERM);
            assert!(
                e.wait_exit(Duration::from_secs(20)).is_some(),
                "{}: the elector did not exit within 20s of SIGTERM",
                self.name
            );
        }
    }
}

pub(crate) async fn upstream_holder(admin: &kube::Client, ns: &str) -> Option<String> {
    Api::<Lease>::namespaced(admin.clone(), ns)
        .get_opt(DEFAULT_NATIVE_LEASE)
        .await
        .expect("read Lease passmower-operators")
        .map(|l| l.spec.and_then(|s| s.holder_identity).unwrap_or_default())
}

/// Whether client `name` carries the Ready condition its operator writes once reconciled.
pub(crate) async fn reconciled(admin: &kube::Client, ns: &str, name: &str) -> bool {
    let api = Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &oidc_clients());
    let Ok(obj) = api.get(name).await else {
        return false;
    };
    obj.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// What one tenure saw.
#[derive(Debug)]
struct Tenure {
    leader: String,
    client: String,
    /// Seconds from the client's creation to its Ready condition, if within the limit.
    reconciled_after: Option<f64>,
    /// Lease `passmower-operators`'s holder at the end of the tenure (`None`: no such Lease).
    upstream_holder: Option<String>,
}

/// Only the elector elected: every tenure's client was reconciled by its leader, and nobody
/// took (or created) upstream's Lease `passmower-operators`.
#[track_caller]
fn assert_one_election_reconciled_every_tenure(tenures: &[Tenure]) {
    for tenure in tenures {
        assert!(
            tenure.reconciled_after.is_some(),
            "{} was not reconciled within {RECONCILE_LIMIT:?} of its creation: {tenures:?}",
            tenure.client
        );
        assert_eq!(tenure.upstream_holder, None, "{tenures:?}");
    }
}

pub(crate) async fn setup() -> Option<Bed> {
    let app = app()?;
    let cluster = Cluster::start_private();
    let admin = cluster.admin_client().await;
    install_crds_of(&cluster.admin_client().await, &tree()).await;
    // The elector's Lease as inject names it (after the workload), not the test bed's default,
    // which is upstream's passmower-operators.
    let ns = cluster
        .new_namespace_with(LEASE, &crate::product::elector_lease_rules(LEASE))
        .await;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("passmower-all-{}", ns.name)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "passmower", "namespace": ns.name}],
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind cluster-admin to the pods' ServiceAccount");
    let dir = tempfile::tempdir().expect("tempdir");
    let preload = dir.path().join("port-map-preload.mjs");
    std::fs::write(
        &preload,
        include_str!("../../src/supervise/leader_instance/port_map/preload.mjs"),
    )
    .expect("write the preload");
    let redis_port = free_port();
    Some(Bed {
        cluster,
        ns,
        app,
        redis_port,
        keys: passmower_keys(),
        preload,
        _dir: dir,
    })
}

/// Waits until exactly one pod's operator instance runs and it is not `not`; its index.
pub(crate) fn wait_leader(
    pods: &[PassmowerPod],
    not: Option<&str>,
    limit: Duration,
) -> Option<usize> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        let leading: Vec<usize> = (0..pods.len()).filter(|&i| pods[i].leads()).collect();
        if let [one] = leading.as_slice() {
            if Some(pods[*one].name.as_str()) != not {
                return Some(*one);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// The run: A's Passmower first, B's elector first, C; then a client per tenure and a graceful
/// handover after each but the last, the leader replaced by a new pod.
async fn run(bed: &Bed, container: &AppContainer) -> Vec<Tenure> {
    let admin = bed.cluster.admin_client().await;
    let ns = bed.ns.name.clone();
    let mut pods = vec![PassmowerPod::start_app(bed, "passmower-a", container)];
    // A's serving instance boots and, with its own election on, takes passmower-operators.
    if container.enabled() != Some("false") {
        let took = pme_testkit::wait_until_async(
            Duration::from_secs(60),
            Duration::from_millis(200),
            || async { upstream_holder(&admin, &ns).await.as_deref() == Some("passmower-a") },
        )
        .await;
        assert!(
            took,
            "pod A's serving instance did not take {DEFAULT_NATIVE_LEASE}:\n{}",
            std::fs::read_to_string(&pods[0].log).unwrap_or_default()
        );
    } else {
        std::thread::sleep(Duration::from_secs(3));
    }
    let mut b = PassmowerPod::start_app(bed, "passmower-b", container);
    b.start_elector(bed);
    pods.push(b);
    let first = wait_leader(&pods, None, HANDOVER_LIMIT).expect("pod B never led");
    assert_eq!(pods[first].name, "passmower-b");
    pods[0].start_elector(bed);
    let mut c = PassmowerPod::start_app(bed, "passmower-c", container);
    c.start_elector(bed);
    pods.push(c);

    let mut tenures = Vec::new();
    let mut leader = first;
    for t in 0..TENURES {
        let client = format!("client-{t}");
        create_client(&admin, &ns, &client).await;
        let created = Instant::now();
        let done =
            pme_testkit::wait_until_async(RECONCILE_LIMIT, Duration::from_millis(200), || {
                reconciled(&admin, &ns, &client)
            })
            .await;
        let tenure = Tenure {
            leader: pods[leader].name.clone(),
            client: client.clone(),
            reconciled_after: done.then(|| created.elapsed().as_secs_f64()),
            upstream_holder: upstream_holder(&admin, &ns).await,
        };
        eprintln!("tenure {t}: {tenure:?}");
        tenures.push(tenure);
        if t + 1 == TENURES {
            break;
        }
        // Graceful handover: the leader's pod is deleted and a new pod replaces it.
        let old = pods[leader].name.clone();
        pods[leader].terminate();
        let mut next = PassmowerPod::start_app(
            bed,
            &format!("passmower-{}", (b'd' + t as u8) as char),
            container,
        );
        next.start_elector(bed);
        pods[leader] = next;
        leader = wait_leader(&pods, Some(&old), HANDOVER_LIMIT)
            .unwrap_or_else(|| panic!("no new leader within {HANDOVER_LIMIT:?} after {old} went"));
    }
    // A client created in a dark tenure stays so while that tenure lasts; the last check
    // shows whether any client was reconciled later (by another tenure's leader).
    for tenure in &tenures {
        eprintln!(
            "{}: reconciled by the end of the run: {}",
            tenure.client,
            reconciled(&admin, &ns, &tenure.client).await
        );
    }
    for pod in &mut pods {
        pod.terminate();
    }
    tenures
}

/// Today's env beside 2.4 (upstream's election on, as the chart sets it): the leader of our
/// Lease runs Passmower's operator instance, but that instance starts its operators only while
/// its own election holds `passmower-operators`, which a follower's serving instance took, so
/// a tenure reconciles nothing. Every tenure is measured: each is reconciled exactly
/// when upstream's Lease happens to name the leader's pod (both of its instances share its
/// `POD_NAME`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_upstreams_election_on_a_follower_can_hold_the_operators_and_a_tenure_reconciles_nothing(
) {
    let Some(bed) = setup().await else {
        return;
    };
    let _redis = start_redis(bed.redis_port);
    let (_, today) = containers(&bed.ns.name);
    assert_eq!(today.enabled(), Some("true"));
    let tenures = run(&bed, &today).await;
    assert_eq!(tenures[0].leader, "passmower-b");
    // Which tenure goes dark depends on which process holds upstream's Lease while it lasts:
    // 2.4's own election can move it mid-tenure (it judges expiry by its local clock against
    // the holder's renewTime, and a renew that runs late under load lets another instance
    // take it), so the run asserts that the defect shows, not where.
    let dark: Vec<&Tenure> = tenures
        .iter()
        .filter(|t| t.reconciled_after.is_none())
        .collect();
    assert!(
        !dark.is_empty(),
        "every tenure was reconciled with upstream's election on beside ours: {tenures:?}"
    );
    for tenure in &dark {
        assert_ne!(
            tenure.upstream_holder.as_deref(),
            Some(tenure.leader.as_str()),
            "{} reconciled nothing although its leader's pod held {DEFAULT_NATIVE_LEASE}: {tenure:?}",
            tenure.client
        );
    }
    let mismatched = tenures
        .iter()
        .filter(|t| t.upstream_holder.as_deref() != Some(t.leader.as_str()))
        .count();
    eprintln!(
        "today's env: {} of {} tenures reconciled nothing; upstream's Lease named another \
         pod than the leader at the end of {mismatched}",
        dark.len(),
        tenures.len()
    );
}

/// The injected env (`LEADER_ELECTION_ENABLED=false`, which the supervisor passes to both
/// instances): only the elector elects, every client is reconciled by the leader of each
/// tenure across graceful handovers, and nobody takes (or creates) `passmower-operators`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_injected_env_every_client_is_reconciled_across_handovers() {
    let Some(bed) = setup().await else {
        return;
    };
    let _redis = start_redis(bed.redis_port);
    let (injected, _) = containers(&bed.ns.name);
    assert_eq!(
        injected.enabled(),
        Some("false"),
        "inject did not turn upstream's election off: {injected:?}"
    );
    let tenures = run(&bed, &injected).await;
    assert_one_election_reconciled_every_tenure(&tenures);
    eprintln!(
        "injected env: every client reconciled, after {:?} s",
        tenures
            .iter()
            .map(|t| format!("{:.1}", t.reconciled_after.unwrap_or_default()))
            .collect::<Vec<_>>()
    );
}

/// The 2.4 tree as its own chart renders it: image tag `2.0.0-dev` and no
/// `LEADER_ELECTION_*` or `POD_NAME` in the env (that chart predates them), so neither the
/// manifest nor the tag says this Passmower elects itself. The injected env still turns its
/// election off: every tenure is reconciled by the elector's leader and nobody takes (or
/// creates) `passmower-operators` — one election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2_0_0_dev_tagged_2_4_gets_its_own_election_off_and_one_election_decides() {
    let Some(bed) = setup().await else {
        return;
    };
    let _redis = start_redis(bed.redis_port);
    let ns = &bed.ns.name;
    let input = format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: passmower, namespace: {ns}}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: passmower}}}}
  template:
    metadata: {{labels: {{app: passmower}}}}
    spec:
      serviceAccountName: passmower
      containers:
      - name: passmower
        image: ghcr.io/passmower/passmower:2.0.0-dev
        env:
        - {{name: DEPLOYMENT_NAME, value: passmower}}
        - {{name: NAMESPACE_SELECTOR, value: {ns}}}
"
    );
    let (injected, _) = containers_of(&input);
    assert_eq!(
        injected.enabled(),
        Some("false"),
        "inject left upstream's election on for a 2.0.0-dev tag: {injected:?}"
    );
    let tenures = run(&bed, &injected).await;
    assert_one_election_reconciled_every_tenure(&tenures);
}
