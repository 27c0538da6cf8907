//! What `inject` is told, checked: the options the command line (`args.rs`) or the webhook
//! turns into (`InjectOptions`), and the checks that refuse options the roles would refuse at
//! start.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ResourceRequirements, SecurityContext};

use crate::config::{is_dns1123_label, is_dns1123_subdomain, ConfigError};
use crate::election::Timing;
use crate::inject::kube_version::KubeVersion;
use crate::inject::names::{WorkloadKind, DEFAULT_CONTAINER, DEFAULT_IDLE_NAMESPACE, VERSION};
use crate::inject::native_election::PassmowerElection;
use crate::inject::published;

/// The repository the project's releases publish the sidecar image to. Releases push version
/// tags only (never `latest`: pods restarted at different times would run different electors),
/// so a reference to it without a version tag or a digest is refused.
pub const PROJECT_IMAGE_REPOSITORY: &str = "ghcr.io/passmower/passmower-elector";

/// What to do when `inject` cannot produce manifests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OnError {
    /// Print the reason on stderr, nothing on stdout, and exit 2.
    #[default]
    Exit,
    /// Also print, on stdout, one manifest that names the reason and that Helm refuses
    /// (an unknown kind), and exit 0: Helm 4 drops a failing post-renderer plugin's stderr and
    /// shows only "exited with error", but it does show the object it cannot map.
    Manifest,
}

/// How the wrapped app goes between follower and leader (`supervise --on-change`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AppOnChange {
    /// The app keeps serving with the follower environment; while leader a second, operator-only
    /// instance runs beside it with its Node listeners moved to loopback
    /// (`--on-change=leader-instance --leader-port-map=*=0`, and `--leader-standby` unless
    /// `--no-leader-standby`). No handover takes HTTP down.
    LeaderInstance,
    /// The app is restarted with the other environment on every change (HTTP is down while it
    /// boots); for apps of which two instances cannot run in one pod.
    Restart,
    /// One Passmower process per pod, for the generations that elect themselves (2.4 and later):
    /// its own election stays on and is answered from the pod's grant
    /// (`supervise --on-change=lease-bridge`). An app whose election does not read its Lease
    /// through the bridge is refused by the supervisor at start.
    LeaseBridge,
}

/// The shortest kill grace `supervise --on-change=lease-bridge` takes (it refuses less, exit 2,
/// at the pod's start): refused here first, when the manifest is written.
/// `tests/scenarios/inject_lease_bridge.rs` holds the two together.
pub const LEASE_BRIDGE_MIN_KILL_GRACE: Duration = Duration::from_secs(3);

/// Everything `inject` needs to know. [`InjectOptions::new`] takes the one required setting,
/// the image, and matches the CLI defaults otherwise.
#[derive(Debug, Clone, PartialEq)]
pub struct InjectOptions {
    /// Name of the container to wrap with `supervise`.
    pub container: String,
    /// Sidecar image reference (`--image`, else a release build's own image).
    pub image: String,
    /// Secrets the pod pulls the sidecar image with, added after its own `imagePullSecrets`.
    pub image_pull_secrets: Vec<String>,
    /// The app command when set explicitly (replaces the container's `command`).
    pub app_command: Option<Vec<String>>,
    /// How the app goes between modes; `None`: `LeaderInstance` for Passmower, else `Restart`.
    pub on_change: Option<AppOnChange>,
    /// With `LeaderInstance`: keep a warm standby of the leader instance in pods that do not
    /// lead (`supervise --leader-standby`).
    pub leader_standby: bool,
    /// Elector as a plain container rather than a native sidecar.
    pub classic_sidecar: bool,
    /// The cluster's Kubernetes version; `None`: 1.30 or later (everything emitted is served).
    pub kube_version: Option<KubeVersion>,
    /// Kinds of workload to target.
    pub kinds: Vec<WorkloadKind>,
    /// Lease name for every target; `None` names each Lease after its workload.
    pub lease_name: Option<String>,
    /// Namespace of documents that name none.
    pub namespace: Option<String>,
    /// `elect`'s `--lease-duration`, `--renew-deadline` and `--retry-period`, and the
    /// `--kill-grace` of both roles.
    pub timing: Timing,
    /// Elector probe port.
    pub probe_port: u16,
    /// Loopback toggle port of `supervise`.
    pub toggle_port: u16,
    /// Follower NAMESPACE_SELECTOR: a name no namespace has (see [`check_idle_namespace`]).
    pub idle_namespace: String,
    /// Leader NAMESPACE_SELECTOR override (`""`: the pod's own namespace); `None`: the
    /// container's own.
    pub namespace_selector: Option<String>,
    /// `idle_namespace` is guarded by an admission policy that forbids creating it: emitted
    /// here (unless `workload_only`: the chart's), required when it is a valid namespace name.
    pub deny_idle_namespace: bool,
    /// Keep an explicit rollout strategy even when it stops every pod at once.
    pub keep_strategy: bool,
    /// No target is not an error.
    pub allow_none: bool,
    /// Add no RBAC, PodDisruptionBudget or write fence (they come from the chart).
    pub workload_only: bool,
    /// Emit the write fence (admission policy + binding) with the RBAC.
    pub fence: bool,
    /// Emit the replica guard (admission policy + binding) with the RBAC, on clusters that
    /// serve it (see `guard::left_out`).
    pub guard: bool,
    /// Elector container resources; `None` for the built-in requests and limits.
    pub sidecar_resources: Option<ResourceRequirements>,
    /// Sidecar securityContext; `None` for the restricted profile (as the app's UID).
    pub sidecar_security_context: Option<SecurityContext>,
    /// Which election decides who runs Passmower's operators (see `native_election`).
    pub passmower_election: PassmowerElection,
}

impl InjectOptions {
    /// The mode change in force: the explicit one, else `LeaderInstance` for Passmower's
    /// container (whose HTTP side runs fine beside a second instance) and `Restart` for any
    /// other app, which may not.
    pub fn app_on_change(&self) -> AppOnChange {
        self.on_change
            .unwrap_or(if self.container == DEFAULT_CONTAINER {
                AppOnChange::LeaderInstance
            } else {
                AppOnChange::Restart
            })
    }

    /// The CLI defaults with `image` as the sidecar image.
    pub fn new(image: impl Into<String>) -> Self {
        InjectOptions {
            container: DEFAULT_CONTAINER.into(),
            image: image.into(),
            image_pull_secrets: Vec::new(),
            app_command: None,
            on_change: None,
            leader_standby: true,
            classic_sidecar: false,
            kube_version: None,
            kinds: vec![WorkloadKind::Deployment],
            lease_name: None,
            namespace: None,
            timing: Timing::default(),
            probe_port: 8081,
            toggle_port: 8082,
            idle_namespace: DEFAULT_IDLE_NAMESPACE.into(),
            namespace_selector: None,
            deny_idle_namespace: false,
            keep_strategy: false,
            allow_none: false,
            workload_only: false,
            fence: true,
            guard: true,
            sidecar_resources: None,
            sidecar_security_context: None,
            passmower_election: PassmowerElection::Auto,
        }
    }
}

/// Parses `--app-command`: a JSON array of strings, or words separated by whitespace.
pub fn parse_app_command(s: &str) -> Result<Vec<String>, ConfigError> {
    let bad = |reason: &str| ConfigError::new("--app-command", s, reason);
    let words: Vec<String> = if s.trim_start().starts_with('[') {
        serde_json::from_str(s).map_err(|e| bad(&format!("not a JSON array of strings: {e}")))?
    } else {
        s.split_whitespace().map(str::to_owned).collect()
    };
    if words.is_empty() || words[0].is_empty() {
        return Err(bad("must name a program, e.g. 'node --no-warnings src/app.js' or '[\"node\", \"src/app.js\"]'"));
    }
    Ok(words)
}

/// Longest idle namespace accepted: a URL path segment's worth, as long as an object name.
const IDLE_NAMESPACE_MAX: usize = 253;

/// Refuses a leader `NAMESPACE_SELECTOR` (`--namespace-selector`, the webhook's annotation)
/// of blanks only: Passmower would watch a namespace named by them, which cannot exist, so the
/// leader would reconcile nothing. Empty is allowed: Passmower's own namespace.
pub fn check_leader_selector(selector: &str) -> Result<(), String> {
    if !selector.is_empty() && selector.trim().is_empty() {
        return Err(
            "is blank; allowed: empty for the pod's own namespace, one namespace name, \
                    `*` for every namespace, or comma-separated patterns"
                .to_owned(),
        );
    }
    Ok(())
}

/// Refuses a follower `NAMESPACE_SELECTOR` that could ever select something.
///
/// Passmower's `NamespaceFilter` turns one name without `*` or `,` into a namespaced watch and
/// list (`/apis/.../namespaces/NAME/...`) and a micromatch pattern for every event. A name that is
/// not a DNS-1123 label can never be a namespace: the apiserver refuses to create it and lists
/// and watches resources under it as an empty, quiet collection, so the followers' idleness
/// needs nothing else. A name that is a valid label idles them only while nobody creates that
/// namespace, so it needs the deny policy (`deny`). Either way the name must be literal for
/// micromatch and one plain URL path segment: letters, digits, '-', '.' and '_', not only dots.
pub fn check_idle_namespace(name: &str, deny: bool) -> Result<(), ConfigError> {
    let bad = |reason: String| Err(ConfigError::new("--idle-namespace", name, reason));
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    if name.is_empty()
        || name.len() > IDLE_NAMESPACE_MAX
        || !name.chars().all(allowed)
        || name.chars().all(|c| c == '.')
    {
        return bad(format!(
            "must be one literal name of 1 to {IDLE_NAMESPACE_MAX} letters, digits, '-', '.' and \
             '_' (not only dots): Passmower reads '*' and ',' as a selector of several \
             namespaces, micromatch reads ?[]{{}}()!+@ as a pattern, and the name is a URL path \
             segment; the default is {DEFAULT_IDLE_NAMESPACE}"
        ));
    }
    if is_dns1123_label(name) && !deny {
        return bad(format!(
            "is a name a namespace can have: anyone who creates that namespace makes every \
             follower reconcile what is put in it. Use a name no namespace can have (with '_', \
             '.' or an upper-case letter, or longer than 63, e.g. the default \
             {DEFAULT_IDLE_NAMESPACE}), or pass --deny-idle-namespace to forbid creating it"
        ));
    }
    Ok(())
}

/// How to get a sidecar image, for the error that asks for one.
pub fn image_howto() -> String {
    format!(
        "a development build has no default sidecar image. A released binary defaults to the \
         image released with it ({PROJECT_IMAGE_REPOSITORY}:VERSION@DIGEST); or build the image \
         from this repository, push it to a registry your nodes pull from, and pass it as \
         --image (or ELECTOR_IMAGE). With Docker: `docker build -f Dockerfile.sidecar -t \
         REGISTRY/passmower-elector:{VERSION} . && docker push \
         REGISTRY/passmower-elector:{VERSION}`. Without Docker: \
         `scripts/build-sidecar-image.sh` builds an OCI archive, then `skopeo copy \
         oci-archive:ARCHIVE docker://REGISTRY/passmower-elector:{VERSION}`"
    )
}

/// The repository, tag and digest of an image reference (`name[:tag][@digest]`; a ':' before
/// the last '/' is a registry port).
fn split_image(image: &str) -> (&str, Option<&str>, Option<&str>) {
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    let last_segment = name.rfind('/').map_or(0, |i| i + 1);
    match name[last_segment..].rfind(':') {
        Some(i) => (
            &name[..last_segment + i],
            Some(&name[last_segment + i + 1..]),
            digest,
        ),
        None => (name, None, digest),
    }
}

/// Refuses a reference to a repository releases publish to, without a version tag or digest:
/// nothing is published as `latest`.
fn check_published_reference(image: &str) -> Result<(), ConfigError> {
    let (repository, tag, digest) = split_image(image);
    let published = repository == PROJECT_IMAGE_REPOSITORY
        || published::release_repository() == Some(repository);
    if published && digest.is_none() && tag.is_none_or(|t| t == "latest") {
        return Err(ConfigError::new(
            "--image",
            image,
            format!(
                "releases publish {repository} with version tags only, never `latest`: name a \
                 version, e.g. {repository}:{VERSION}, best pinned by digest as a released \
                 binary and chart do ({repository}:{VERSION}@sha256:...)"
            ),
        ));
    }
    Ok(())
}

impl InjectOptions {
    /// Refuses options that would produce manifests the roles refuse at start, pods that can
    /// never start (no pullable image), or that break the follower's idleness.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.app_on_change() == AppOnChange::LeaseBridge
            && self.timing.kill_grace < LEASE_BRIDGE_MIN_KILL_GRACE
        {
            return Err(ConfigError::new(
                "--kill-grace",
                crate::config::human(self.timing.kill_grace),
                format!(
                    "must be at least {} with --on-change=lease-bridge: the app's own election \
                     takes a demotion in up to two of its 1s ticks after it, and a shorter grace \
                     would kill it on every demotion",
                    crate::config::human(LEASE_BRIDGE_MIN_KILL_GRACE)
                ),
            ));
        }
        let image = self.image.trim();
        // fence-only adds no container: there is no image to name.
        let needs_image = self.passmower_election != PassmowerElection::FenceOnly;
        if image.is_empty() && needs_image {
            return Err(ConfigError::new(
                "--image",
                "",
                format!("the sidecar image is required; {}", image_howto()),
            ));
        }
        if image.contains(char::is_whitespace) {
            return Err(ConfigError::new(
                "--image",
                image,
                "must be an image reference without spaces, e.g. registry.example.com/passmower-elector:0.1.0",
            ));
        }
        if !image.is_empty() {
            check_published_reference(image)?;
        }
        for name in &self.image_pull_secrets {
            if !is_dns1123_subdomain(name) {
                return Err(ConfigError::new(
                    "--image-pull-secret",
                    name,
                    "must be the name of a Secret in the pod's namespace (a DNS-1123 \
                     subdomain: lowercase letters, digits, '-' and '.')",
                ));
            }
        }
        check_idle_namespace(&self.idle_namespace, self.deny_idle_namespace)?;
        if let Some(namespace) = &self.namespace {
            if !is_dns1123_label(namespace) {
                return Err(ConfigError::new(
                    "--namespace",
                    namespace,
                    "must be a namespace name (DNS-1123 label)",
                ));
            }
        }
        if self.container.is_empty() {
            return Err(ConfigError::new("--container", "", "must not be empty"));
        }
        if self.kinds.is_empty() {
            return Err(ConfigError::new("--kind", "", "name at least one kind"));
        }
        if let Some(name) = &self.lease_name {
            if !is_dns1123_subdomain(name) {
                return Err(ConfigError::new(
                    "--lease-name",
                    name,
                    "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')",
                ));
            }
        }
        if let Some(selector) = &self.namespace_selector {
            check_leader_selector(selector)
                .map_err(|reason| ConfigError::new("--namespace-selector", selector, reason))?;
        }
        if self.probe_port == 0 || self.toggle_port == 0 || self.probe_port == self.toggle_port {
            return Err(ConfigError::new(
                "--toggle-port",
                self.toggle_port.to_string(),
                format!(
                    "the probe port ({}) and the toggle port must be distinct and non-zero",
                    self.probe_port
                ),
            ));
        }
        if let Some(cluster) = self.kube_version {
            if !self.classic_sidecar && !KubeVersion::NATIVE_SIDECAR.served_by(Some(cluster)) {
                return Err(ConfigError::new(
                    "--kube-version",
                    cluster.to_string(),
                    format!(
                        "the elector runs as a native sidecar, which needs Kubernetes {} or \
                         later; pass --classic-sidecar for this cluster",
                        KubeVersion::NATIVE_SIDECAR
                    ),
                ));
            }
        }
        if self.passmower_election == PassmowerElection::FenceOnly {
            let refuse = |why: &str| {
                Err(ConfigError::new(
                    "--passmower-election",
                    "fence-only",
                    format!(
                        "keeps Passmower's own election and adds only its Lease RBAC and the \
                         write fence keyed on its Lease, {why}; use --passmower-election=auto"
                    ),
                ))
            };
            if self.workload_only {
                return refuse(
                    "which --workload-only leaves out (the passmower-elector chart's fence \
                     follows the elector's Lease and would refuse every write of upstream's \
                     leader)",
                );
            }
            if !self.fence {
                return refuse("so with --no-fence nothing would be added");
            }
        }
        // The rules `elect` enforces at start, so no injected pod is refused there: the old
        // leader's app has stopped (grant lapsed at R, killed by R + K) before a candidate may
        // take over at D, and no duration is below its floor.
        self.timing.validate()?;
        Ok(())
    }
}

impl InjectOptions {
    /// Refuses, for a cluster older than 1.30 (`--kube-version`), the objects `inject` would
    /// add that it does not serve: the write fence and the idle-namespace guard are
    /// ValidatingAdmissionPolicies (`admissionregistration.k8s.io/v1`, GA in 1.30). Left out
    /// on request only, since the fence is a safety layer. Only for `inject`'s stream: the
    /// webhook adds no objects.
    pub fn check_cluster_objects(&self) -> Result<(), ConfigError> {
        let Some(cluster) = self.kube_version else {
            return Ok(());
        };
        let needed = KubeVersion::SLEEP_ACTION_AND_POLICY;
        if needed.served_by(Some(cluster)) || self.workload_only {
            return Ok(());
        }
        let refuse = |what: &str, how: &str| {
            ConfigError::new(
                "--kube-version",
                cluster.to_string(),
                format!(
                    "{what} is a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1), \
                     served from Kubernetes {needed}; {how}"
                ),
            )
        };
        if self.fence {
            return Err(refuse(
                "the write fence",
                "pass --no-fence for this cluster (a pod frozen past the lease duration can \
                 then write once more)",
            ));
        }
        if self.deny_idle_namespace {
            return Err(refuse(
                "--deny-idle-namespace",
                "leave it out for this cluster",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_before_1_29_needs_the_classic_sidecar_and_before_1_30_no_policies() {
        let at = |minor| InjectOptions {
            kube_version: Some(KubeVersion::new(1, minor)),
            ..opts()
        };
        let err = at(28).validate().unwrap_err();
        assert_eq!(err.flag, "--kube-version");
        assert!(err.reason.contains("--classic-sidecar"), "{err}");
        let classic = InjectOptions {
            classic_sidecar: true,
            fence: false,
            ..at(28)
        };
        assert!(classic.validate().is_ok());
        assert!(classic.check_cluster_objects().is_ok());
        assert!(at(29).validate().is_ok());
        let err = at(29).check_cluster_objects().unwrap_err();
        assert!(err.reason.contains("--no-fence"), "{err}");
        assert!(err.reason.contains("1.30"), "{err}");
        let deny = InjectOptions {
            fence: false,
            deny_idle_namespace: true,
            ..at(29)
        };
        assert!(deny
            .check_cluster_objects()
            .unwrap_err()
            .reason
            .contains("--deny-idle-namespace"));
        let no_fence = InjectOptions {
            fence: false,
            ..at(29)
        };
        assert!(no_fence.check_cluster_objects().is_ok());
        // The chart brings the objects with --workload-only; and 1.30 serves them all.
        let chart = InjectOptions {
            workload_only: true,
            ..at(29)
        };
        assert!(chart.check_cluster_objects().is_ok());
        assert!(at(30).check_cluster_objects().is_ok());
        assert!(opts().check_cluster_objects().is_ok());
    }

    fn opts() -> InjectOptions {
        InjectOptions::new("registry.example.com/passmower-elector:0.1.0")
    }

    #[test]
    fn idle_namespace_is_validated_naming_the_flag() {
        let opts = InjectOptions {
            idle_namespace: "idle,*".into(),
            ..opts()
        };
        let err = opts.validate().unwrap_err();
        assert_eq!(err.flag, "--idle-namespace");
    }

    #[test]
    fn the_default_idle_namespace_can_never_be_a_namespace() {
        assert!(!is_dns1123_label(DEFAULT_IDLE_NAMESPACE));
        assert!(!is_dns1123_subdomain(DEFAULT_IDLE_NAMESPACE));
        assert!(check_idle_namespace(DEFAULT_IDLE_NAMESPACE, false).is_ok());
        assert!(opts().validate().is_ok());
    }

    #[test]
    fn an_idle_namespace_a_namespace_could_have_needs_the_deny_policy() {
        for name in [
            "passmower-elector-idle",
            "idle",
            "passmower-elector-idle-never-create",
        ] {
            let err = check_idle_namespace(name, false).unwrap_err();
            assert_eq!(err.flag, "--idle-namespace");
            assert!(err.reason.contains("--deny-idle-namespace"), "{err}");
            assert!(check_idle_namespace(name, true).is_ok(), "{name}");
        }
        let long = "a".repeat(64);
        for name in [
            "Idle",
            "pm.idle",
            "pm_idle",
            "-idle",
            "idle-",
            long.as_str(),
        ] {
            assert!(check_idle_namespace(name, false).is_ok(), "{name}");
            assert!(check_idle_namespace(name, true).is_ok(), "{name}");
        }
    }

    #[test]
    fn an_idle_namespace_must_be_literal_for_micromatch_and_one_path_segment() {
        let long = "a".repeat(254);
        for name in [
            "",
            "*",
            "a,b",
            "!idle",
            "a?",
            "a[b]",
            "{a,b}",
            "a(b)",
            "+(a)",
            "@(a)",
            "a b",
            " a",
            "a\tb",
            "a/b",
            "a\\b",
            "a%2Fb",
            "a~b",
            "a#b",
            ".",
            "..",
            long.as_str(),
        ] {
            for deny in [false, true] {
                let err = check_idle_namespace(name, deny).unwrap_err();
                assert_eq!(err.flag, "--idle-namespace", "{name:?}");
            }
        }
    }

    #[test]
    fn unsafe_timings_are_refused() {
        let bad = InjectOptions {
            timing: Timing {
                renew_deadline: Duration::from_secs(12),
                ..Timing::default()
            },
            ..opts()
        };
        let err = bad.validate().unwrap_err();
        assert_eq!(err.flag, "--lease-duration");
        assert!(
            err.reason.contains("--renew-deadline + --kill-grace"),
            "{err}"
        );
        assert!(opts().validate().is_ok());
        // The floors `elect` enforces: a 1ns retry period would be refused by every sidecar.
        let nano = InjectOptions {
            timing: Timing {
                retry_period: Duration::from_nanos(1),
                ..Timing::default()
            },
            ..opts()
        };
        assert_eq!(nano.validate().unwrap_err().flag, "--retry-period");
    }

    #[test]
    fn the_image_is_required_and_the_published_repository_needs_a_version() {
        for image in ["", "  "] {
            let err = InjectOptions::new(image).validate().unwrap_err();
            assert_eq!(err.flag, "--image");
            assert!(err.reason.contains("Dockerfile.sidecar"), "{err}");
            assert!(err.reason.contains("skopeo copy"), "{err}");
        }
        for image in [
            "ghcr.io/passmower/passmower-elector",
            "ghcr.io/passmower/passmower-elector:latest",
        ] {
            let err = InjectOptions::new(image).validate().unwrap_err();
            assert_eq!(err.flag, "--image");
            assert!(err.reason.contains("version tags only"), "{image}: {err}");
        }
        for image in [
            "ghcr.io/passmower/passmower-elector:0.1.0",
            "ghcr.io/passmower/passmower-elector@sha256:00",
            "ghcr.io/passmower/passmower-elector:0.1.0@sha256:00",
            "ghcr.io/passmower/passmower-elector-fork",
            "registry.example.com:5000/passmower-elector",
        ] {
            assert!(InjectOptions::new(image).validate().is_ok(), "{image}");
        }
    }

    #[test]
    fn fence_only_adds_no_container_so_it_needs_no_image() {
        let fence_only = InjectOptions {
            passmower_election: PassmowerElection::FenceOnly,
            ..InjectOptions::new("")
        };
        assert!(fence_only.validate().is_ok(), "{:?}", fence_only.validate());
        let ours = InjectOptions {
            passmower_election: PassmowerElection::Ours,
            ..InjectOptions::new("")
        };
        assert_eq!(ours.validate().unwrap_err().flag, "--image");
    }

    #[test]
    fn image_references_split_into_repository_tag_and_digest() {
        assert_eq!(split_image("a/b"), ("a/b", None, None));
        assert_eq!(split_image("a/b:1"), ("a/b", Some("1"), None));
        assert_eq!(
            split_image("r.io:5000/b:1@sha256:00"),
            ("r.io:5000/b", Some("1"), Some("sha256:00"))
        );
        assert_eq!(split_image("r.io:5000/b"), ("r.io:5000/b", None, None));
        assert_eq!(split_image("b@sha256:00"), ("b", None, Some("sha256:00")));
    }

    #[test]
    fn image_pull_secrets_must_be_secret_names() {
        let with = |names: &[&str]| InjectOptions {
            image_pull_secrets: names.iter().map(|n| n.to_string()).collect(),
            ..opts()
        };
        assert!(with(&["regcred", "registry.example.com-pull"])
            .validate()
            .is_ok());
        for bad in ["", "Regcred", "reg_cred", "-regcred", "a..b"] {
            let err = with(&["regcred", bad]).validate().unwrap_err();
            assert_eq!(err.flag, "--image-pull-secret", "{bad:?}");
            assert_eq!(err.value, bad);
            assert!(err.reason.contains("DNS-1123 subdomain"), "{err}");
        }
    }

    #[test]
    fn app_command_forms() {
        assert_eq!(
            parse_app_command("node --no-warnings src/app.js").unwrap(),
            crate::inject::names::PASSMOWER_APP_COMMAND
        );
        assert_eq!(
            parse_app_command(r#"["sh", "-c", "exec a b"]"#).unwrap(),
            ["sh", "-c", "exec a b"]
        );
        assert!(parse_app_command("  ").is_err());
        assert!(parse_app_command("[1]").is_err());
        assert!(parse_app_command("[]").is_err());
    }
}
