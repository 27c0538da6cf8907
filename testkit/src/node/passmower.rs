//! The real Passmower on the node: installed from its upstream chart
//! (`../shared/upstream/passmower/charts/passmower`) by helm, with `passmower-elector inject`
//! as the post-renderer or with none (the webhook injects the pods), exactly as an operator
//! would retrofit it; and what the tests ask of it (its pods, the leader, OIDCClients, whether
//! they were reconciled, and whether only the leader wrote).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};

use super::config::{NODE_IP, REDIS_PORT};
use super::pods;
use super::Node;

/// Election timings given to `inject`: its defaults (and the elector's), so the figures are
/// what an install gets. Shorter ones were tried: with a 1s retry period (then also the
/// elector's API timeout) and a 6s renew deadline, leaders on this loaded two-core machine
/// missed renewals ("the API did not answer within 1s") and demoted themselves, as NODE-NOTES
/// saw with 2s; the defaults did not.
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    pub kill_grace: Duration,
}

pub const TIMINGS: Timings = Timings {
    lease_duration: Duration::from_secs(15),
    renew_deadline: Duration::from_secs(10),
    retry_period: Duration::from_secs(2),
    kill_grace: Duration::from_secs(3),
};

pub const RELEASE: &str = "passmower";
/// The chart's fullname for release `passmower`: the Deployment, its ServiceAccount, its
/// Service, and (by inject's default) the Lease.
pub const NAME: &str = "passmower";
pub const APP_CONTAINER: &str = "passmower";
pub const ELECTOR_CONTAINER: &str = "passmower-elector";
/// A public-suffix domain: Passmower refuses a private one at import.
pub const HOST: &str = "passmower.example.com";

/// The Passmower generation under test, from `PME_PASSMOWER_GENERATION` (default `1.3`); each
/// is a tree in `../shared/upstream/` (see its README). What a generation needs besides the
/// 1.3.0 install lives here: its chart's value names and the environment its app requires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generation {
    /// Release 1.3.0 (`passmower/`).
    V1_3,
    /// The 2.2/2.3 era, no leader election of its own (`passmower-before-election/`).
    V2_2,
    /// 2.4.0, upstream's own leader election (`passmower-with-election/`).
    V2_4,
}

impl Generation {
    pub const ALL: [Generation; 3] = [Generation::V1_3, Generation::V2_2, Generation::V2_4];

    /// `PME_PASSMOWER_GENERATION`: `1.3`, `2.2` or `2.4` (unset: `1.3`). Panics naming the
    /// variable and the allowed values on anything else.
    pub fn from_env() -> Generation {
        let v = std::env::var("PME_PASSMOWER_GENERATION").unwrap_or_default();
        Generation::parse(v.trim()).unwrap_or_else(|| {
            panic!("PME_PASSMOWER_GENERATION={v:?}: allowed values are 1.3, 2.2 and 2.4")
        })
    }

    pub fn parse(s: &str) -> Option<Generation> {
        match s {
            "" | "1.3" => Some(Generation::V1_3),
            "2.2" => Some(Generation::V2_2),
            "2.4" => Some(Generation::V2_4),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Generation::V1_3 => "1.3",
            Generation::V2_2 => "2.2",
            Generation::V2_4 => "2.4",
        }
    }

    /// The tree's folder under `../shared/upstream/`.
    pub fn folder(self) -> &'static str {
        match self {
            Generation::V1_3 => "passmower",
            Generation::V2_2 => "passmower-before-election",
            Generation::V2_4 => "passmower-with-election",
        }
    }

    /// The chart's values for the namespace selector, email and GitHub login: 1.3.0's chart
    /// spells them in snake case, the later chart in camel case.
    fn chart_sets(self, ns: &str) -> Vec<String> {
        let names: [&str; 5] = match self {
            Generation::V1_3 => [
                "namespace_selector",
                "email_enabled",
                "github_enabled",
                "email_credentials_secretRef",
                "github_client_secretRef",
            ],
            Generation::V2_2 | Generation::V2_4 => [
                "namespaceSelector",
                "emailEnabled",
                "githubEnabled",
                "emailCredentialsSecretRef",
                "githubClientSecretRef",
            ],
        };
        vec![
            // Operators only for this install's namespace: the leader's selector.
            format!("passmower.{}={ns}", names[0]),
            format!("passmower.{}=false", names[1]),
            format!("passmower.{}=false", names[2]),
            format!("passmower.{}=", names[3]),
            format!("passmower.{}=", names[4]),
        ]
    }

    /// What the app container's environment needs besides what the chart sets (name, value;
    /// a value `fieldRef:<path>` is taken from the downward API). `ISSUER_URL` on a public
    /// suffix ([`HOST`]), `OIDC_JWKS` and `OIDC_COOKIE_KEYS` (the `oidc-keys` Secret) every
    /// generation gets already.
    pub fn required_env(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Generation::V1_3 => vec![],
            // The newer trees refuse to boot without outbound email configured or turned off.
            Generation::V2_2 => vec![("OUTBOUND_EMAIL_ENABLED", "false")],
            Generation::V2_4 => vec![
                ("OUTBOUND_EMAIL_ENABLED", "false"),
                // As upstream's 2.4 chart renders it by default (this tree's chart predates
                // it): inject must turn it off, or 2.4's own election runs in every instance
                // and starts the operators in whichever one holds its Lease.
                ("LEADER_ELECTION_ENABLED", "true"),
                // As upstream's 2.4 chart passes it (the holder identity of its election).
                ("POD_NAME", "fieldRef:metadata.name"),
            ],
        }
    }
}

/// Who decides which pod runs Passmower's operators, from `PME_ELECTION_MODE` (default
/// `ours`). Every other mode needs generation 2.4
/// (Passmower's own election) and the post-renderer; they are what the side-by-side comparison
/// (`scripts/side-by-side.sh`) sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionMode {
    /// `inject` as it defaults: our elector and supervisor, `LEADER_ELECTION_ENABLED=false`.
    Ours,
    /// `inject --passmower-election=fence-only`: Passmower's own election plus our write
    /// fence keyed on its Lease.
    FenceOnly,
    /// No `inject` at all: Passmower 2.4's own election alone, with what upstream's 2.4 chart
    /// adds and this tree's chart lacks (Lease RBAC, `POD_NAME`, `LEADER_ELECTION_ENABLED`),
    /// added by the test. The image's command is upstream's shell form (`/bin/sh -c "node
    /// --no-warnings src/app.js"`): the shell is PID 1, stays the parent of node and, as PID 1
    /// with no handler, drops the kubelet's SIGTERM, so Passmower never releases its Lease on a
    /// stop. What a user of upstream's image gets.
    Upstream,
    /// [`ElectionMode::Upstream`] with the app container's command in exec form
    /// ([`EXEC_FORM_COMMAND`]): node is PID 1, gets the SIGTERM and releases the Lease. What a
    /// user gets with that override (or an init); upstream's election at its best.
    UpstreamSigterm,
    /// `inject --on-change=lease-bridge`: our elector and grant, one Passmower process per pod
    /// whose own election (on) follows the grant through the supervisor's preload. The Lease
    /// that decides is ours; the real `NAMESPACE_SELECTOR` is set inside the process, so
    /// /proc/PID/environ never shows it and who runs the operators is read from the app's log.
    OursBridge,
    /// `inject --no-leader-standby`: [`ElectionMode::Ours`] without the warm standby of the
    /// leader instance (a promotion starts it cold), what inject renders for pods sized for
    /// one instance.
    OursNoStandby,
}

/// The app container's command in [`ElectionMode::UpstreamSigterm`]: the image's own, in exec
/// form, so that node itself is PID 1 and receives the kubelet's SIGTERM.
pub const EXEC_FORM_COMMAND: [&str; 3] = ["node", "--no-warnings", "src/app.js"];

impl ElectionMode {
    /// `PME_ELECTION_MODE`: `ours` (or unset), `ours-no-standby`, `ours-bridge`, `fence-only`,
    /// `upstream` or `upstream-sigterm`.
    /// Panics naming the variable and the allowed values on anything else.
    pub fn from_env() -> ElectionMode {
        let v = std::env::var("PME_ELECTION_MODE").unwrap_or_default();
        match v.trim() {
            "" | "ours" => ElectionMode::Ours,
            "fence-only" => ElectionMode::FenceOnly,
            "upstream" => ElectionMode::Upstream,
            "upstream-sigterm" => ElectionMode::UpstreamSigterm,
            "ours-bridge" => ElectionMode::OursBridge,
            "ours-no-standby" => ElectionMode::OursNoStandby,
            _ => panic!(
                "PME_ELECTION_MODE={v:?}: allowed values are ours, ours-no-standby, ours-bridge, fence-only, upstream and upstream-sigterm"
            ),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ElectionMode::Ours => "ours",
            ElectionMode::FenceOnly => "fence-only",
            ElectionMode::Upstream => "upstream",
            ElectionMode::UpstreamSigterm => "upstream-sigterm",
            ElectionMode::OursBridge => "ours-bridge",
            ElectionMode::OursNoStandby => "ours-no-standby",
        }
    }

    /// Whether Passmower's own election decides (no elector of ours in the pods).
    pub fn passmowers_own(self) -> bool {
        !self.ours_decides()
    }

    /// Whether our elector's grant decides who runs the operators (its Lease, its fence, its
    /// guarantees asserted): `ours`, and `ours-bridge`, where Passmower's own election runs
    /// but only follows the grant.
    pub fn ours_decides(self) -> bool {
        matches!(
            self,
            ElectionMode::Ours | ElectionMode::OursNoStandby | ElectionMode::OursBridge
        )
    }

    /// Whether the install has no `inject` at all (upstream's election alone).
    pub fn upstream_alone(self) -> bool {
        matches!(self, ElectionMode::Upstream | ElectionMode::UpstreamSigterm)
    }

    /// The Lease that names the pod running the operators: ours (the workload's name, inject's
    /// default) or Passmower's own (`passmower-operators`, its default).
    pub fn lease_name(self) -> &'static str {
        match self {
            ElectionMode::Ours | ElectionMode::OursNoStandby | ElectionMode::OursBridge => NAME,
            ElectionMode::FenceOnly | ElectionMode::Upstream | ElectionMode::UpstreamSigterm => {
                UPSTREAM_LEASE
            }
        }
    }
}

/// Passmower 2.4's own Lease (`LEADER_ELECTION_LEASE_NAME`'s default).
pub const UPSTREAM_LEASE: &str = "passmower-operators";

/// One installed release.
#[derive(Clone, Debug)]
pub struct Install {
    pub namespace: String,
    pub generation: Generation,
    pub election: ElectionMode,
    pub replicas: i32,
    pub timings: Timings,
    /// What the post-renderer produced (helm's manifest), for the record.
    pub manifest: String,
}

/// How the elector gets into Passmower's pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retrofit {
    /// `helm install --post-renderer` running `passmower-elector inject`: the Deployment
    /// itself carries the elector, and inject adds the Role, RoleBinding and budget.
    PostRenderer,
    /// The upstream chart as it is: the namespace opted in to the admission webhook, which
    /// injects each pod; the Role, RoleBinding and budget come from the passmower-elector
    /// chart, installed before.
    Webhook,
}

impl Install {
    /// Installs Passmower into a new namespace `namespace` with `replicas` replicas and Redis
    /// database `redis_db`, retrofitted by the post-renderer, and waits until every replica
    /// is Ready.
    pub async fn install(node: &Node, namespace: &str, replicas: i32, redis_db: u32) -> Install {
        let ns = node.new_namespace(namespace).await;
        Self::install_into(node, &ns, replicas, redis_db, Retrofit::PostRenderer).await
    }

    /// Installs Passmower into the existing namespace `ns` (see [`Install::install`]), the
    /// elector brought in by `retrofit`.
    pub async fn install_into(
        node: &Node,
        ns: &str,
        replicas: i32,
        redis_db: u32,
        retrofit: Retrofit,
    ) -> Install {
        Self::install_with_env(node, ns, replicas, redis_db, retrofit, &[]).await
    }

    /// [`Install::install_into`], the app container given `extra_env` (name, value) besides
    /// what the generation requires.
    pub async fn install_with_env(
        node: &Node,
        ns: &str,
        replicas: i32,
        redis_db: u32,
        retrofit: Retrofit,
        extra_env: &[(&str, &str)],
    ) -> Install {
        Self::install_with_stages(node, ns, replicas, redis_db, retrofit, extra_env, &[]).await
    }

    /// [`Install::install_with_env`], the chart's manifests also passed through `stages`
    /// (file name, Python source reading the stream on stdin and writing it to stdout) before
    /// `inject`: what a test bed adds to the app's pod (a volume, a preload), never the product.
    pub async fn install_with_stages(
        node: &Node,
        ns: &str,
        replicas: i32,
        redis_db: u32,
        retrofit: Retrofit,
        extra_env: &[(&str, &str)],
        stages: &[(&str, &str)],
    ) -> Install {
        let release = Release {
            replicas,
            retrofit,
            extra_env,
            stages,
        };
        Self::install_as(node, ns, redis_db, &release, ElectionMode::from_env()).await
    }

    /// Installs `release` into the existing namespace `ns` with `election` deciding (not
    /// `PME_ELECTION_MODE`), and waits until every replica is Ready.
    pub async fn install_as(
        node: &Node,
        ns: &str,
        redis_db: u32,
        release: &Release<'_>,
        election: ElectionMode,
    ) -> Install {
        let ns = ns.to_owned();
        let generation = Generation::from_env();
        if election != ElectionMode::Ours {
            assert!(
                generation == Generation::V2_4 && release.retrofit == Retrofit::PostRenderer,
                "PME_ELECTION_MODE={} needs PME_PASSMOWER_GENERATION=2.4 and a post-renderer install",
                election.name()
            );
        }
        let client = node.admin_client().await;
        create_secrets(&client, &ns, redis_db).await;
        if election.upstream_alone() {
            grant_upstream_lease(&client, &ns).await;
        }
        let dir = node.layout.path(&format!("helm-{ns}"));
        fs::create_dir_all(&dir).expect("mkdir helm dir");
        helm_release(node, &dir, "install", &ns, generation, election, release);
        let install = Install {
            manifest: release_manifest(node, &dir, &ns),
            namespace: ns,
            generation,
            election,
            replicas: release.replicas,
            timings: TIMINGS,
        };
        install.wait_steady(node, Duration::from_secs(300)).await;
        install
    }

    /// Moves the running install to `to` with `helm upgrade`, with the post-renderer `to`
    /// needs (none for Passmower's own election alone): what a user does who applies inject to
    /// a running release, or removes it. Returns once helm has applied it; the rollout goes on
    /// ([`Install::wait_steady`] waits for it).
    pub async fn switch_election(&mut self, node: &Node, to: ElectionMode) {
        assert!(
            self.generation == Generation::V2_4,
            "switching elections needs PME_PASSMOWER_GENERATION=2.4 (Passmower's own election)"
        );
        if to.upstream_alone() {
            grant_upstream_lease(&node.admin_client().await, &self.namespace).await;
        }
        let dir = node.layout.path(&format!("helm-{}", self.namespace));
        let release = Release {
            replicas: self.replicas,
            retrofit: Retrofit::PostRenderer,
            extra_env: &[],
            stages: &[],
        };
        helm_release(
            node,
            &dir,
            "upgrade",
            &self.namespace,
            self.generation,
            to,
            &release,
        );
        self.election = to;
        self.manifest = release_manifest(node, &dir, &self.namespace);
    }

    /// The ServiceAccount user Passmower's pods (and their electors) write as.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{NAME}", self.namespace)
    }

    pub fn bound_us(&self) -> i64 {
        (self.timings.renew_deadline + self.timings.kill_grace).as_micros() as i64
    }

    /// The release's pods, oldest first.
    pub async fn pods(&self, client: &kube::Client) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}"));
        let mut list = Api::<Pod>::namespaced(client.clone(), &self.namespace)
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        list.sort_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
        list
    }

    /// The spec of the Lease the install's election keeps (ours, or Passmower's own); `None`
    /// when unreadable or absent.
    pub async fn lease_spec(&self, client: &kube::Client) -> Option<LeaseSpec> {
        Api::<Lease>::namespaced(client.clone(), &self.namespace)
            .get_opt(self.election.lease_name())
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
    }

    /// The Lease's holder identity (empty when released, `None` when unreadable or absent).
    pub async fn lease_holder(&self, client: &kube::Client) -> Option<String> {
        self.lease_spec(client).await?.holder_identity
    }

    /// The pod whose elector holds the Lease (the holder identity starts with the pod name).
    pub async fn leader_pod(&self, client: &kube::Client) -> Option<Pod> {
        let holder = self.lease_holder(client).await?;
        self.pods(client)
            .await
            .into_iter()
            .find(|p| holder_is_pod(&holder, p.metadata.name.as_deref().unwrap_or_default()))
    }

    /// Waits until the Deployment has rolled out (`replicas` updated, Ready, no old pods
    /// left) and a pod of it holds the Lease. Panics after `timeout` with the state seen.
    pub async fn wait_steady(&self, node: &Node, timeout: Duration) {
        let client = node.admin_client().await;
        let deployments = Api::<Deployment>::namespaced(client.clone(), &self.namespace);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last;
        let ok = loop {
            let (done, seen) = self.steady_now(&client, &deployments).await;
            last = seen;
            if done {
                break true;
            }
            if tokio::time::Instant::now() >= deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert!(
            ok,
            "Passmower in {} not steady after {timeout:?}: {last}\n{}",
            self.namespace,
            node.logs_tail(15)
        );
    }

    async fn steady_now(
        &self,
        client: &kube::Client,
        deployments: &Api<Deployment>,
    ) -> (bool, String) {
        let Ok(d) = deployments.get(NAME).await else {
            return (false, "no deployment".into());
        };
        let s = d.status.clone().unwrap_or_default();
        let pods = self.pods(client).await;
        let ready = pods.iter().filter(|p| pods::is_ready(p)).count() as i32;
        let leader = self.leader_pod(client).await;
        // A live elector renews every retry period: a Lease not renewed for two of them
        // belongs to an elector that is restarting or gone, which is not steady yet.
        let renewed_ago = self
            .lease_spec(client)
            .await
            .and_then(|s| s.renew_time)
            .map(|t| super::audit::now_us() - t.0.as_microsecond());
        let fresh = renewed_ago
            .is_some_and(|us| us < (2 * self.timings.retry_period).as_micros() as i64 + 1_000_000);
        let all_containers_ready = pods.iter().all(|p| {
            p.status.as_ref().is_some_and(|s| {
                s.container_statuses.iter().flatten().all(|c| c.ready)
                    && s.init_container_statuses
                        .iter()
                        .flatten()
                        .filter(|c| c.name == ELECTOR_CONTAINER)
                        .all(|c| c.ready && c.started == Some(true))
            })
        });
        let seen = format!(
            "updated {:?} ready {:?} available {:?} pods {} ready pods {ready} leader {:?} \
             renewed {renewed_ago:?} us ago, all containers ready {all_containers_ready}",
            s.updated_replicas,
            s.ready_replicas,
            s.available_replicas,
            pods.len(),
            leader.as_ref().and_then(|p| p.metadata.name.clone())
        );
        let done = s.observed_generation >= d.metadata.generation
            && s.updated_replicas == Some(self.replicas)
            && s.available_replicas == Some(self.replicas)
            && pods.len() as i32 == self.replicas
            && ready == self.replicas
            && leader.is_some_and(|p| pods::is_ready(&p))
            && fresh
            && all_containers_ready;
        (done, seen)
    }

    fn client_resource() -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("codemowers.cloud", "v1beta1", "OIDCClient"),
            "oidcclients",
        )
    }

    /// Creates an OIDCClient `name` through the API (as admin).
    pub async fn create_client(&self, client: &kube::Client, name: &str) {
        let api = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            &self.namespace,
            &Self::client_resource(),
        );
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "codemowers.cloud/v1beta1",
            "kind": "OIDCClient",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "displayName": name,
                "uri": "https://app.example.com/",
                "redirectUris": ["https://app.example.com/callback"],
                "grantTypes": ["authorization_code", "refresh_token"],
                "responseTypes": ["code"],
                "availableScopes": ["openid", "profile"],
            }
        }))
        .expect("OIDCClient object");
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create OIDCClient {name}: {e}"));
    }

    /// Whether the operator has claimed OIDCClient `name` (its status names this install's
    /// instance) and written its Secret.
    pub async fn client_reconciled(&self, client: &kube::Client, name: &str) -> bool {
        let api = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            &self.namespace,
            &Self::client_resource(),
        );
        let Ok(Some(obj)) = api.get_opt(name).await else {
            return false;
        };
        let instance = obj
            .data
            .pointer("/status/instance")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned();
        if instance != self.instance() {
            return false;
        }
        Api::<Secret>::namespaced(client.clone(), &self.namespace)
            .get_opt(&secret_name(name))
            .await
            .ok()
            .flatten()
            .is_some()
    }

    /// Passmower's instance name: `<namespace>-<DEPLOYMENT_NAME>` (the chart name).
    pub fn instance(&self) -> String {
        format!("{}-passmower", self.namespace)
    }
}

/// The Secret Passmower writes for OIDCClient `client`.
pub fn secret_name(client: &str) -> String {
    format!("oidc-client-{client}-owner-secrets")
}

/// Whether holder identity `holder` belongs to pod `pod` (`<pod name>_<suffix>` today; any
/// separator after the full pod name is accepted).
pub fn holder_is_pod(holder: &str, pod: &str) -> bool {
    !pod.is_empty()
        && holder.strip_prefix(pod).is_some_and(|rest| {
            rest.is_empty() || !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// `oidc-keys` (the signing keys and cookie keys Passmower reads from its environment; the
/// chart's key-manager hook would make it) and `redis` (the Redis URI, one database per
/// install so installs never share clients).
pub async fn create_secrets(client: &kube::Client, ns: &str, redis_db: u32) {
    let jwks = Command::new("node")
        .args([
            "-e",
            "const c=require('crypto');\
             const k=c.generateKeyPairSync('rsa',{modulusLength:2048}).privateKey.export({format:'jwk'});\
             k.use='sig';k.alg='RS256';k.kid=c.randomUUID();\
             process.stdout.write(JSON.stringify([k]));",
        ])
        .output()
        .expect("run node to make a JWK");
    assert!(jwks.status.success(), "node could not make a JWK");
    let cookie_keys = format!("[\"{}\",\"{}\"]", random_hex(32), random_hex(32));
    let secrets = Api::<Secret>::namespaced(client.clone(), ns);
    for (name, data) in [
        (
            "oidc-keys",
            vec![
                (
                    "OIDC_JWKS",
                    String::from_utf8_lossy(&jwks.stdout).into_owned(),
                ),
                ("OIDC_COOKIE_KEYS", cookie_keys),
            ],
        ),
        (
            "redis",
            vec![(
                "REDIS_URI",
                format!("redis://{NODE_IP}:{REDIS_PORT}/{redis_db}"),
            )],
        ),
    ] {
        let secret = Secret {
            metadata: kube::core::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            string_data: Some(data.into_iter().map(|(k, v)| (k.into(), v)).collect()),
            ..Default::default()
        };
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("create secret {name}: {e}"));
    }
}

/// What upstream's 2.4 chart grants its ServiceAccount for Passmower's own election and this
/// tree's chart lacks: `get`, `create` and `update` on coordination.k8s.io leases in the
/// release's namespace (a Role and RoleBinding `passmower-leader-election`).
async fn grant_upstream_lease(client: &kube::Client, ns: &str) {
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
    let name = "passmower-leader-election";
    let role = Role {
        metadata: kube::core::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".into()]),
            resources: Some(vec!["leases".into()]),
            verbs: vec!["get".into(), "create".into(), "update".into()],
            ..Default::default()
        }]),
    };
    let binding = RoleBinding {
        metadata: kube::core::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: name.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: NAME.into(),
            namespace: Some(ns.into()),
            ..Default::default()
        }]),
    };
    // Already there from an earlier install or switch of the same namespace: kept.
    match Api::<Role>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("create Role {name}: {e}"),
    }
    match Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("create RoleBinding {name}: {e}"),
    }
}

/// What a test installs besides the generation and the election: the replicas, how the
/// elector gets in, the app container's extra environment and the test bed's stages (see
/// [`Install::install_with_stages`]).
#[derive(Clone, Copy, Debug)]
pub struct Release<'a> {
    pub replicas: i32,
    pub retrofit: Retrofit,
    pub extra_env: &'a [(&'a str, &'a str)],
    pub stages: &'a [(&'a str, &'a str)],
}

/// `helm install` or `helm upgrade` (`verb`) of the upstream chart as release [`RELEASE`] in
/// `ns`, with the post-renderer `election` and `release` need. Panics with helm's output when
/// it fails.
fn helm_release(
    node: &Node,
    dir: &Path,
    verb: &str,
    ns: &str,
    generation: Generation,
    election: ElectionMode,
    release: &Release<'_>,
) {
    let (sidecar, _) = node.sidecar_image();
    let image = node.passmower_image();
    let (repository, tag) = image.rsplit_once(':').expect("image has a tag");
    let chart = super::upstream_dir().join("charts/passmower");
    let mut sets = vec![
        format!("replicaCount={}", release.replicas),
        format!("passmower.host={HOST}"),
        // No cluster DNS here: Redis (beside the node) by address, through the chart's
        // external-Redis option.
        "redis.internal.enabled=false".into(),
        "redis.external.enabled=true".into(),
        "redis.external.secretKeyRef.name=redis".into(),
        "redis.external.secretKeyRef.key=REDIS_URI".into(),
        format!("image.repository={repository}"),
        format!("image.tag={tag}"),
        "image.pullPolicy=Never".into(),
    ];
    sets.extend(generation.chart_sets(ns));
    let mut env: Vec<(&str, &str)> = generation.required_env();
    // A test's own value wins over the generation's (outbound e-mail on, for a login).
    env.retain(|(k, _)| !release.extra_env.iter().any(|(e, _)| e == k));
    env.extend_from_slice(release.extra_env);
    let mut helm = helm(node, dir);
    helm.args([verb, RELEASE])
        .arg(&chart)
        .args(["--namespace", ns])
        // The pre-install hook runs @codemowers/oidc-key-manager, which is not in the
        // npm registry (see build-node-images.sh); the oidc-keys Secret is made apart.
        .arg("--no-hooks");
    let inject = (release.retrofit == Retrofit::PostRenderer && !election.upstream_alone())
        .then_some((sidecar.as_str(), TIMINGS));
    let exec_form;
    let mut stages = release.stages.to_vec();
    if election == ElectionMode::UpstreamSigterm {
        exec_form = SET_COMMAND_PY.replace(
            "@COMMAND@",
            &serde_json::json!(EXEC_FORM_COMMAND).to_string(),
        );
        stages.push(("set-command.py", exec_form.as_str()));
    }
    if inject.is_some() || !env.is_empty() || !stages.is_empty() {
        helm.arg("--post-renderer")
            .arg(post_renderer(dir, inject, election, ns, &env, &stages));
    }
    for s in &sets {
        helm.arg("--set").arg(s);
    }
    let out = helm.output().expect("run helm");
    assert!(
        out.status.success(),
        "helm {verb}: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the post-renderer produced for the release's last revision (`helm get manifest`).
fn release_manifest(node: &Node, dir: &Path, ns: &str) -> String {
    let mut get = helm_cmd(node, dir);
    get.args(["get", "manifest", RELEASE, "--namespace", ns]);
    String::from_utf8_lossy(&get.output().expect("helm get").stdout).into_owned()
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    let _ = fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf));
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// The post-renderer: a wrapper that adds `env` to Passmower's container (the chart has no
/// value for extra variables; a user would patch them in the same way) and then runs this
/// build's `passmower-elector inject` with the test image and timings, when `inject` is given
/// (helm 3 passes no arguments of its own to a post-renderer). `--namespace`: helm gives a
/// post-renderer no namespace, and the write fence inject adds names the ServiceAccount's and
/// the Lease's.
fn post_renderer(
    dir: &Path,
    inject: Option<(&str, Timings)>,
    election: ElectionMode,
    namespace: &str,
    env: &[(&str, &str)],
    stages: &[(&str, &str)],
) -> PathBuf {
    let path = dir.join("inject-post-renderer.sh");
    let bin = crate::elector::binary().display();
    let d = |d: Duration| format!("{}ms", d.as_millis());
    let mut script = String::from("#!/bin/sh\nset -e\n");
    let mut commands = Vec::new();
    if !env.is_empty() {
        let add = dir.join("add-env.py");
        let list: Vec<serde_json::Value> = env
            .iter()
            .map(|(k, v)| match v.strip_prefix("fieldRef:") {
                Some(field) => {
                    serde_json::json!({"name": k, "valueFrom": {"fieldRef": {"fieldPath": field}}})
                }
                None => serde_json::json!({"name": k, "value": v}),
            })
            .collect();
        fs::write(
            &add,
            ADD_ENV_PY.replace("@ENV@", &serde_json::Value::Array(list).to_string()),
        )
        .expect("write add-env.py");
        commands.push(format!("python3 {}", add.display()));
    }
    for (file, source) in stages {
        let path = dir.join(file);
        fs::write(&path, source).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        commands.push(format!("python3 {}", path.display()));
    }
    if let Some((sidecar_image, t)) = inject {
        commands.push(format!(
            "{bin} inject --image {sidecar_image} --namespace {namespace} \
             --lease-duration {} --renew-deadline {} --retry-period {} --kill-grace {}{} \"$@\"",
            d(t.lease_duration),
            d(t.renew_deadline),
            d(t.retry_period),
            d(t.kill_grace),
            match election {
                ElectionMode::FenceOnly => " --passmower-election=fence-only",
                ElectionMode::OursBridge => " --on-change=lease-bridge",
                ElectionMode::OursNoStandby => " --no-leader-standby",
                _ => "",
            },
        ));
    }
    script.push_str(&commands.join(" | "));
    script.push('\n');
    fs::write(&path, script).expect("write post-renderer");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod post-renderer");
    path
}

/// Sets the `passmower` container's `command` of every Deployment read from stdin to `@COMMAND@`
/// (a JSON list): what a user writes to override the image's shell-form entrypoint.
const SET_COMMAND_PY: &str = r#"import json, sys, yaml
command = json.loads('@COMMAND@')
docs = [d for d in yaml.safe_load_all(sys.stdin) if d is not None]
for d in docs:
    if d.get("kind") != "Deployment":
        continue
    for c in d["spec"]["template"]["spec"].get("containers", []):
        if c.get("name") == "passmower":
            c["command"] = command
yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
"#;

/// Adds (or replaces) environment variables in the `passmower` container of every
/// Deployment read from stdin; `@ENV@` is a JSON list of Kubernetes EnvVar objects.
const ADD_ENV_PY: &str = r#"import json, sys, yaml
add = json.loads('@ENV@')
docs = [d for d in yaml.safe_load_all(sys.stdin) if d is not None]
for d in docs:
    if d.get("kind") != "Deployment":
        continue
    for c in d["spec"]["template"]["spec"].get("containers", []):
        if c.get("name") != "passmower":
            continue
        names = {e["name"] for e in add}
        c["env"] = [e for e in c.get("env", []) if e["name"] not in names] + add
yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
"#;

/// Helm 3 from `PME_HELM3` (as .ci/run sets it) or `PME_HELM`, else `scripts/build-helm.sh`
/// (cached by version).
pub fn helm_binary() -> PathBuf {
    if let Some(h) = std::env::var_os("PME_HELM3").or_else(|| std::env::var_os("PME_HELM")) {
        return PathBuf::from(h);
    }
    let script = crate::repo().join("scripts/build-helm.sh");
    let out = Command::new(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    assert!(out.status.success(), "{} failed", script.display());
    PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .trim(),
    )
}

pub fn helm_cmd(node: &Node, dir: &Path) -> Command {
    let mut c = Command::new(helm_binary());
    c.env("KUBECONFIG", node.admin_kubeconfig())
        // Helm's own state (repositories, cache) stays in the run's directory.
        .env("HELM_CACHE_HOME", dir.join("cache"))
        .env("HELM_CONFIG_HOME", dir.join("config"))
        .env("HELM_DATA_HOME", dir.join("data"))
        .stdin(Stdio::null());
    c
}

fn helm(node: &Node, dir: &Path) -> Command {
    helm_cmd(node, dir)
}
