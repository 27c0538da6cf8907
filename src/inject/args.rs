//! The command lines that say what is injected: `inject`'s (`InjectArgs`) and the flags it
//! shares with the webhook (`SidecarArgs`), turned into the `InjectOptions` that `options.rs`
//! checks; and the help text.

use std::path::PathBuf;

use crate::config::ConfigError;
use crate::election::timing::TimingArgs;
use crate::inject::kube_version::KubeVersion;
use crate::inject::names::{WorkloadKind, DEFAULT_CONTAINER, DEFAULT_IDLE_NAMESPACE};
use crate::inject::native_election::PassmowerElection;
use crate::inject::options::{parse_app_command, AppOnChange, InjectOptions, OnError};
use crate::inject::published;

/// `inject --help`: what it does and the command lines for each tool.
pub const LONG_ABOUT: &str =
    "Reads Kubernetes manifests (multi-document YAML, a `kind: List` as `kubectl get -o \
    yaml` prints, or `helm template` output) and writes them to stdout with the elector sidecar, \
    the supervisor entrypoint, shared volumes, a Role + RoleBinding for the Lease, a \
    PodDisruptionBudget, the write fence (a ValidatingAdmissionPolicy admitting Passmower's \
    operator writes only from the Lease holder's pod) and the replica guard (one refusing the \
    workload with more than one replica and no elector, as a `helm upgrade` without the \
    post-renderer would write it) added to each targeted workload. Other \
    documents pass through unchanged; running it twice equals running it once.\n\n\
    A released binary defaults --image to the image released with it, pinned by version and \
    digest (`passmower-elector --version` names it); a development build requires --image: \
    build and push the image first (docs/install/sidecar-image.md).\n\n\
    Helm 3: `helm upgrade --install ... -n NAMESPACE --post-renderer passmower-elector \
    --post-renderer-args inject --post-renderer-args=--image=IMAGE \
    --post-renderer-args=--namespace=NAMESPACE` (helm gives a post-renderer no namespace; the \
    write fence needs it).\n\
    Helm 4: `helm plugin install examples/retrofit-passmower/helm4-plugin` once (it runs \
    `passmower-elector inject --on-error=manifest`), then `helm upgrade --install ... -n \
    NAMESPACE --post-renderer passmower-elector --post-renderer-args=--image=IMAGE \
    --post-renderer-args=--namespace=NAMESPACE`.\n\
    Kustomize, Flux, Argo CD: --kustomize DIR writes a kustomize Component instead.\n\n\
    Errors (invalid YAML, no target, bad flags) print nothing on stdout and exit 2.";

/// The flags that say what is injected, shared by both front doors (`inject` and `webhook`).
#[derive(Debug, clap::Args)]
pub struct SidecarArgs {
    /// The container to wrap with `supervise`; workloads without it are not targets.
    #[arg(long, env = "ELECTOR_CONTAINER", default_value = DEFAULT_CONTAINER)]
    pub container: String,
    /// Sidecar image (runs `elect` and the `copy-self` initContainer). Default in a released
    /// binary: the image released with it, `REPOSITORY:VERSION@DIGEST` (`--version` names it).
    /// A development build has none and requires it: build the image from this repository and
    /// push it to a registry your nodes pull from (`docker build -f Dockerfile.sidecar`, or
    /// without Docker `scripts/build-sidecar-image.sh` + `skopeo copy`).
    #[arg(long, env = "ELECTOR_IMAGE", value_name = "IMAGE")]
    pub image: Option<String>,
    /// A Secret in the pod's namespace (type kubernetes.io/dockerconfigjson) with which the
    /// kubelet pulls the sidecar image from a private registry (repeatable or comma-separated).
    /// Added to the pod's imagePullSecrets after the app's own, each name once.
    #[arg(
        long = "image-pull-secret",
        env = "ELECTOR_IMAGE_PULL_SECRET",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub image_pull_secrets: Vec<String>,
    /// The app's command when the container sets none (what the image's entrypoint runs):
    /// words split on spaces, or a JSON array. Overrides the container's own `command`; its
    /// `args` are appended. Default for container `passmower`: `node --no-warnings src/app.js`.
    #[arg(long, env = "ELECTOR_APP_COMMAND", value_name = "COMMAND")]
    pub app_command: Option<String>,
    /// How the app goes between follower and leader: `leader-instance` (it keeps serving; a
    /// second, operator-only instance runs beside it while leader, its Node.js listeners moved
    /// to loopback), `restart` (restarted on every change, HTTP down while it boots) or
    /// `lease-bridge` (Passmower 2.4 and later: one process per pod whose own election follows
    /// the pod's grant; kill grace at least 3s). Default: `leader-instance` for container
    /// `passmower`, else `restart`.
    #[arg(long, env = "ELECTOR_ON_CHANGE", value_enum)]
    pub on_change: Option<AppOnChange>,
    /// With `leader-instance`: no warm standby. By default `supervise --leader-standby` keeps the
    /// leader instance started ahead in every pod that does not lead (its dependencies imported,
    /// no app code run until the promotion), so a handover does not wait for Node to boot; that
    /// costs each such pod about one more app instance's memory, as the leader pod uses anyway.
    #[arg(long, env = "ELECTOR_NO_LEADER_STANDBY")]
    pub no_leader_standby: bool,
    /// Run the elector as a plain container instead of a native sidecar (initContainer with
    /// restartPolicy: Always), for clusters older than Kubernetes 1.29.
    #[arg(long, env = "ELECTOR_CLASSIC_SIDECAR")]
    pub classic_sidecar: bool,
    /// The Kubernetes version of the cluster the output is for (`1.29`, `v1.29.3`, as
    /// `kubectl version` prints it); default: 1.30 or later. Below 1.30 the app's `preStop`
    /// sleep drain is left out (the sleep action is served from 1.30; a 1.29 apiserver refuses
    /// the Deployment) and the write fence and --deny-idle-namespace are refused; below 1.29
    /// the native sidecar is refused (use --classic-sidecar).
    #[arg(long, env = "ELECTOR_KUBE_VERSION", value_name = "MAJOR.MINOR",
        value_parser = KubeVersion::parse)]
    pub kube_version: Option<KubeVersion>,
    /// Lease name; default: the workload's name.
    #[arg(long, env = "ELECTOR_LEASE_NAME")]
    pub lease_name: Option<String>,
    #[command(flatten)]
    pub timing: TimingArgs,
    /// Port of the elector's /healthz, /readyz, /leader and /metrics (on the pod IP); its
    /// container port is named `elector-probe`, which a PodMonitor in the stream gets added.
    #[arg(long, env = "ELECTOR_PROBE_PORT", default_value_t = 8081)]
    pub probe_port: u16,
    /// Loopback port on which `supervise` serves the toggle (POST /grant).
    #[arg(long, env = "ELECTOR_TOGGLE_PORT", default_value_t = 8082)]
    pub toggle_port: u16,
    /// NAMESPACE_SELECTOR given to followers: one name that no namespace can have (it has an
    /// upper-case letter, '.' or '_', or is longer than 63), which the apiserver lists and
    /// watches as an empty collection; letters, digits, '-', '.' and '_' only. A valid
    /// namespace name is refused unless --deny-idle-namespace forbids creating it.
    #[arg(long, env = "ELECTOR_IDLE_NAMESPACE", default_value = DEFAULT_IDLE_NAMESPACE)]
    pub idle_namespace: String,
    /// NAMESPACE_SELECTOR given to the leader, as Passmower reads it: empty for the pod's own
    /// namespace, one name, `*` for every namespace, or comma-separated patterns. Default: the
    /// container's own, wherever it comes from (`env`, `envFrom`, the image); a container that
    /// sets none keeps Passmower's default, the pod's own namespace.
    #[arg(long, env = "ELECTOR_NAMESPACE_SELECTOR", value_name = "SELECTOR")]
    pub namespace_selector: Option<String>,
    /// The elector container's resources as JSON (a Kubernetes ResourceRequirements), e.g.
    /// '{"requests":{"cpu":"10m","memory":"32Mi"},"limits":{"memory":"128Mi"}}'.
    #[arg(long, env = "ELECTOR_SIDECAR_RESOURCES", value_name = "JSON")]
    pub sidecar_resources: Option<String>,
    /// The elector and install containers' securityContext as JSON (a Kubernetes
    /// SecurityContext); default: the "restricted" profile as the app's non-root
    /// runAsUser/runAsGroup when it sets one (the elector must read files the app writes and
    /// the reverse), else as UID 65532.
    #[arg(long, env = "ELECTOR_SIDECAR_SECURITY_CONTEXT", value_name = "JSON")]
    pub sidecar_security_context: Option<String>,
    /// Who elects the pod that runs Passmower's operators, for Passmower 2.4.0 and later, which
    /// elects a leader itself (Lease passmower-operators): `auto` (default) gives the target
    /// container LEADER_ELECTION_ENABLED=false whatever its image (releases before 2.4.0 ignore
    /// it), so only the elector elects, and warns when the generation cannot be read: the env
    /// names no LEADER_ELECTION_ENABLED or LEADER_ELECTION_LEASE_NAME and the image tag is no
    /// plain release (latest, a branch, a digest alone, a line such as 2 or 2.4, a pre-release
    /// such as 2.4.0-rc.1 or 2.0.0-dev, a custom tag). `ours` does the same without the warning.
    /// `fence-only` (inject only) keeps Passmower's own election and adds no elector: the Lease
    /// RBAC it needs, POD_NAME from metadata.name, and the write fence keyed on its Lease with
    /// the pod name as holder.
    #[arg(
        long,
        env = "ELECTOR_PASSMOWER_ELECTION",
        value_enum,
        default_value = "auto"
    )]
    pub passmower_election: PassmowerElection,
}

impl SidecarArgs {
    /// The options these flags set; the settings only `inject` has keep their defaults.
    /// Not validated yet: the caller adds its own settings first.
    pub fn options(&self) -> Result<InjectOptions, ConfigError> {
        let app_command = self
            .app_command
            .as_deref()
            .map(parse_app_command)
            .transpose()?;
        Ok(InjectOptions {
            container: self.container.clone(),
            image: self
                .image
                .clone()
                .or_else(published::release_image)
                .unwrap_or_default(),
            image_pull_secrets: self.image_pull_secrets.clone(),
            app_command,
            on_change: self.on_change,
            leader_standby: !self.no_leader_standby,
            classic_sidecar: self.classic_sidecar,
            kube_version: self.kube_version,
            lease_name: self.lease_name.clone(),
            timing: self.timing.timing(),
            probe_port: self.probe_port,
            toggle_port: self.toggle_port,
            idle_namespace: self.idle_namespace.clone(),
            namespace_selector: self.namespace_selector.clone(),
            sidecar_resources: parse_json_flag(
                "--sidecar-resources",
                self.sidecar_resources.as_deref(),
            )?,
            sidecar_security_context: parse_json_flag(
                "--sidecar-security-context",
                self.sidecar_security_context.as_deref(),
            )?,
            passmower_election: self.passmower_election,
            ..InjectOptions::new(String::new())
        })
    }
}

#[derive(Debug, clap::Args)]
pub struct InjectArgs {
    /// Read manifests from FILE (`-` for stdin).
    #[arg(
        short = 'f',
        long = "file",
        env = "ELECTOR_FILE",
        value_name = "FILE",
        default_value = "-"
    )]
    pub file: PathBuf,
    #[command(flatten)]
    pub sidecar: SidecarArgs,
    /// Workload kinds to target (repeatable or comma-separated): Deployment, StatefulSet.
    #[arg(
        long = "kind",
        env = "ELECTOR_KIND",
        value_delimiter = ',',
        default_value = "Deployment"
    )]
    pub kinds: Vec<WorkloadKind>,
    /// The namespace of manifests that name none (`helm template` output names none: pass the
    /// release namespace; when Helm sets HELM_NAMESPACE, as for post-renderers and plugins, it
    /// must be that). Names the cluster-wide --deny-idle-namespace policy per install.
    #[arg(long, env = "ELECTOR_NAMESPACE")]
    pub namespace: Option<String>,
    /// Guard an --idle-namespace that is a valid namespace name: emit a
    /// ValidatingAdmissionPolicy + binding that forbids creating it (Kubernetes >= 1.30), named
    /// after the workload and its namespace; with --workload-only the passmower-elector chart
    /// installs it (denyIdleNamespace) and nothing is emitted. Not needed for the default.
    #[arg(long, env = "ELECTOR_DENY_IDLE_NAMESPACE")]
    pub deny_idle_namespace: bool,
    /// Keep a Deployment's explicit rollout strategy even when it stops every pod at once
    /// (Recreate, or maxUnavailable covering all replicas); by default such a strategy is
    /// replaced by RollingUpdate (maxSurge 1, maxUnavailable 0), and the manifest says why.
    #[arg(long, env = "ELECTOR_KEEP_STRATEGY")]
    pub keep_strategy: bool,
    /// Succeed (passing the stream through) when no workload is a target.
    #[arg(long, env = "ELECTOR_ALLOW_NONE")]
    pub allow_none: bool,
    /// Rewrite workloads only: add no Role, RoleBinding, PodDisruptionBudget, write fence or
    /// replica guard, because they come from elsewhere (the passmower-elector Helm chart, installed as its own
    /// release).
    #[arg(long, env = "ELECTOR_WORKLOAD_ONLY")]
    pub workload_only: bool,
    /// Leave out the write fence: the ValidatingAdmissionPolicy (Kubernetes >= 1.30, cluster
    /// scoped) that lets the apiserver admit Passmower's operator writes only from the pod
    /// holding the Lease. For clusters before 1.30, or without permission to create
    /// cluster-scoped objects; a pod frozen past the lease duration can then write once more.
    #[arg(long, env = "ELECTOR_NO_FENCE")]
    pub no_fence: bool,
    /// Leave out the replica guard: the ValidatingAdmissionPolicy (Kubernetes >= 1.30, cluster
    /// scoped) that refuses to create or update the workload with more than one replica
    /// unless its pods have the elector, so a `helm upgrade` or `helm rollback` without the
    /// post-renderer cannot run several replicas' operators at once. Before 1.30
    /// (--kube-version) it is left out with a warning.
    #[arg(long, env = "ELECTOR_NO_GUARD")]
    pub no_guard: bool,
    /// Instead of the rewritten stream, write a kustomize Component to DIR: kustomization.yaml
    /// with the workload patches (the form Flux's HelmRelease postRenderers take) and
    /// resources.yaml with the objects to add. Nothing goes to stdout.
    #[arg(long, env = "ELECTOR_KUSTOMIZE", value_name = "DIR")]
    pub kustomize: Option<PathBuf>,
    /// On failure: `exit` (stderr, exit 2) or `manifest` (for Helm 4, which hides a plugin's
    /// stderr: also print one object naming the reason that Helm refuses, and exit 0).
    #[arg(long, env = "ELECTOR_ON_ERROR", value_enum, default_value = "exit")]
    pub on_error: OnError,
}

impl TryFrom<&InjectArgs> for InjectOptions {
    type Error = ConfigError;

    fn try_from(args: &InjectArgs) -> Result<Self, ConfigError> {
        let options = InjectOptions {
            kinds: args.kinds.clone(),
            namespace: args.namespace.clone(),
            deny_idle_namespace: args.deny_idle_namespace,
            keep_strategy: args.keep_strategy,
            allow_none: args.allow_none,
            workload_only: args.workload_only,
            fence: !args.no_fence,
            guard: !args.no_guard,
            ..args.sidecar.options()?
        };
        options.validate()?;
        options.check_cluster_objects()?;
        check_helm_namespace(
            options.namespace.as_deref(),
            std::env::var("HELM_NAMESPACE").ok().as_deref(),
        )?;
        Ok(options)
    }
}

/// Refuses a --namespace other than the release namespace Helm gives its post-renderers and
/// plugins (`HELM_NAMESPACE`): the objects that name no namespace (the workload, its Role,
/// RoleBinding and budget) land in Helm's namespace and work there, while the write fence would
/// bind a Lease in a namespace where no elector ever creates it, and so admit everything.
fn check_helm_namespace(
    namespace: Option<&str>,
    helm_namespace: Option<&str>,
) -> Result<(), ConfigError> {
    match (namespace, helm_namespace) {
        (Some(ours), Some(helm)) if !helm.is_empty() && ours != helm => Err(ConfigError::new(
            "--namespace",
            ours,
            format!(
                "must be the release namespace, and helm installs this release into {helm:?} \
                 (HELM_NAMESPACE): the manifests that name no namespace would land there while \
                 the write fence names a Lease in {ours:?} that no elector creates, so it would \
                 admit every write; pass --namespace={helm}"
            ),
        )),
        _ => Ok(()),
    }
}

/// Parses a flag holding a Kubernetes object as JSON (YAML flow style works too).
fn parse_json_flag<T: serde::de::DeserializeOwned>(
    flag: &str,
    value: Option<&str>,
) -> Result<Option<T>, ConfigError> {
    value
        .map(|text| {
            serde_norway::from_str(text).map_err(|e| {
                ConfigError::new(flag, text, format!("not a valid Kubernetes object: {e}"))
            })
        })
        .transpose()
}
