//! `inject`: rewrites Kubernetes manifests to add the elector sidecar, the supervisor and RBAC.
//!
//! The whole output is built in memory and printed only on success, so a Helm post-renderer or
//! a `kubectl apply` pipe never sees half a rewrite. Documents that are not targets are written
//! back byte for byte; targets are re-serialized (their comments are lost, their fields kept).

mod rbac;
mod workload;
pub mod yaml;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ResourceRequirements, SecurityContext};
use serde_norway::Value;

use crate::config::{self, ConfigError};
pub use rbac::elector_lease_rules;
pub use workload::WorkloadKind;
pub use yaml::YamlError;

/// This crate's version: written into the marker annotation and the default image tag.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Annotation on an injected workload; its value is the version of `inject` that wrote it.
pub const INJECTED_ANNOTATION: &str = "passmower-elector.io/injected";
/// Annotation on an injected workload naming its Lease, so companions can be re-derived.
pub const LEASE_ANNOTATION: &str = "passmower-elector.io/lease";
/// Annotation on every object `inject` generates: `Kind/name` of the workload it serves.
pub const GENERATED_FOR_ANNOTATION: &str = "passmower-elector.io/generated-for";
/// The follower's namespace selector: a namespace name that must never exist.
pub const DEFAULT_IDLE_NAMESPACE: &str = "passmower-elector-idle-never-create";
/// The target container's name in Passmower's chart.
pub const DEFAULT_CONTAINER: &str = "passmower";
/// What Passmower's image runs when the container sets no command.
pub const PASSMOWER_APP_COMMAND: &[&str] = &["node", "--no-warnings", "src/app.js"];

/// The default sidecar image: this version's release.
pub fn default_image() -> String {
    format!("ghcr.io/passmower/passmower-elector:{VERSION}")
}

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Reads Kubernetes manifests (multi-document YAML, e.g. `helm template` output) and \
    writes them to stdout with the elector sidecar, the supervisor entrypoint, shared volumes, \
    a Role + RoleBinding for the Lease and a PodDisruptionBudget added to each targeted workload. \
    Other documents pass through unchanged; running it twice equals running it once. \
    Works as a Helm 3 post-renderer: `helm install --post-renderer passmower-elector-inject ...` \
    with a wrapper script that runs `passmower-elector inject \"$@\"`.\n\n\
    Errors (invalid YAML, no target, bad flags) print nothing on stdout and exit 2."
)]
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
    /// The container to wrap with `supervise`; workloads without it are not targets.
    #[arg(long, env = "ELECTOR_CONTAINER", default_value = DEFAULT_CONTAINER)]
    pub container: String,
    /// Sidecar image (runs `elect` and the `copy-self` initContainer).
    #[arg(long, env = "ELECTOR_IMAGE", default_value_t = default_image())]
    pub image: String,
    /// The app's command when the container sets none (what the image's entrypoint runs):
    /// words split on spaces, or a JSON array. Overrides the container's own `command`; its
    /// `args` are appended. Default for container `passmower`: `node --no-warnings src/app.js`.
    #[arg(long, env = "ELECTOR_APP_COMMAND", value_name = "COMMAND")]
    pub app_command: Option<String>,
    /// Run the elector as a plain container instead of a native sidecar (initContainer with
    /// restartPolicy: Always), for clusters older than Kubernetes 1.29.
    #[arg(long, env = "ELECTOR_CLASSIC_SIDECAR")]
    pub classic_sidecar: bool,
    /// Workload kinds to target (repeatable or comma-separated): Deployment, StatefulSet.
    #[arg(
        long = "kind",
        env = "ELECTOR_KIND",
        value_delimiter = ',',
        default_value = "Deployment"
    )]
    pub kinds: Vec<WorkloadKind>,
    /// Lease name; default: the workload's name.
    #[arg(long, env = "ELECTOR_LEASE_NAME")]
    pub lease_name: Option<String>,
    /// How long a Lease stays taken without renewal (passed to `elect`).
    #[arg(long, env = "ELECTOR_LEASE_DURATION", default_value = "15s", value_parser = config::parse_positive_duration)]
    pub lease_duration: Duration,
    /// How long a grant lasts after the last successful renewal (passed to `elect`).
    #[arg(long, env = "ELECTOR_RENEW_DEADLINE", default_value = "10s", value_parser = config::parse_positive_duration)]
    pub renew_deadline: Duration,
    /// Interval between renewals and retries (passed to `elect`).
    #[arg(long, env = "ELECTOR_RETRY_PERIOD", default_value = "2s", value_parser = config::parse_positive_duration)]
    pub retry_period: Duration,
    /// Time the app gets to stop operator work after a demotion (passed to both roles).
    #[arg(long, env = "ELECTOR_KILL_GRACE", default_value = "3s", value_parser = config::parse_positive_duration)]
    pub kill_grace: Duration,
    /// Port of the elector's /healthz, /readyz, /leader and /metrics (on the pod IP).
    #[arg(long, env = "ELECTOR_PROBE_PORT", default_value_t = 8081)]
    pub probe_port: u16,
    /// Loopback port on which `supervise` serves the toggle (POST /grant).
    #[arg(long, env = "ELECTOR_TOGGLE_PORT", default_value_t = 8082)]
    pub toggle_port: u16,
    /// NAMESPACE_SELECTOR given to followers: one namespace name (DNS-1123 label) that must
    /// never exist, or followers would reconcile what is put in it. See --deny-idle-namespace.
    #[arg(long, env = "ELECTOR_IDLE_NAMESPACE", default_value = DEFAULT_IDLE_NAMESPACE)]
    pub idle_namespace: String,
    /// NAMESPACE_SELECTOR given to the leader; default: the container's own value, or `*`.
    #[arg(long, env = "ELECTOR_NAMESPACE_SELECTOR")]
    pub namespace_selector: Option<String>,
    /// Also emit a ValidatingAdmissionPolicy + binding that forbids creating the idle namespace.
    #[arg(long, env = "ELECTOR_DENY_IDLE_NAMESPACE")]
    pub deny_idle_namespace: bool,
    /// Succeed (passing the stream through) when no workload is a target.
    #[arg(long, env = "ELECTOR_ALLOW_NONE")]
    pub allow_none: bool,
    /// Rewrite workloads only: add no Role, RoleBinding or PodDisruptionBudget, because they
    /// come from elsewhere (the passmower-elector Helm chart, installed as its own release).
    #[arg(long, env = "ELECTOR_WORKLOAD_ONLY")]
    pub workload_only: bool,
    /// The elector container's resources as JSON (a Kubernetes ResourceRequirements), e.g.
    /// '{"requests":{"cpu":"10m","memory":"32Mi"},"limits":{"memory":"128Mi"}}'.
    #[arg(long, env = "ELECTOR_SIDECAR_RESOURCES", value_name = "JSON")]
    pub sidecar_resources: Option<String>,
    /// The elector and install containers' securityContext as JSON (a Kubernetes
    /// SecurityContext); default: the "restricted" profile as UID 65532.
    #[arg(long, env = "ELECTOR_SIDECAR_SECURITY_CONTEXT", value_name = "JSON")]
    pub sidecar_security_context: Option<String>,
}

/// Everything `inject` needs to know; [`InjectOptions::default`] matches the CLI defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct InjectOptions {
    /// Name of the container to wrap with `supervise`.
    pub container: String,
    /// Sidecar image reference.
    pub image: String,
    /// The app command when set explicitly (replaces the container's `command`).
    pub app_command: Option<Vec<String>>,
    /// Elector as a plain container rather than a native sidecar.
    pub classic_sidecar: bool,
    /// Kinds of workload to target.
    pub kinds: Vec<WorkloadKind>,
    /// Lease name for every target; `None` names each Lease after its workload.
    pub lease_name: Option<String>,
    /// `elect --lease-duration`.
    pub lease_duration: Duration,
    /// `elect --renew-deadline`.
    pub renew_deadline: Duration,
    /// `elect --retry-period`.
    pub retry_period: Duration,
    /// `--kill-grace` of both roles.
    pub kill_grace: Duration,
    /// Elector probe port.
    pub probe_port: u16,
    /// Loopback toggle port of `supervise`.
    pub toggle_port: u16,
    /// Follower NAMESPACE_SELECTOR: a namespace that never exists.
    pub idle_namespace: String,
    /// Leader NAMESPACE_SELECTOR override.
    pub namespace_selector: Option<String>,
    /// Emit the admission policy that forbids creating `idle_namespace`.
    pub deny_idle_namespace: bool,
    /// No target is not an error.
    pub allow_none: bool,
    /// Add no RBAC or PodDisruptionBudget (they come from the chart).
    pub workload_only: bool,
    /// Elector container resources; `None` for the built-in requests and limits.
    pub sidecar_resources: Option<ResourceRequirements>,
    /// Sidecar securityContext; `None` for the restricted profile.
    pub sidecar_security_context: Option<SecurityContext>,
}

impl Default for InjectOptions {
    fn default() -> Self {
        InjectOptions {
            container: DEFAULT_CONTAINER.into(),
            image: default_image(),
            app_command: None,
            classic_sidecar: false,
            kinds: vec![WorkloadKind::Deployment],
            lease_name: None,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            kill_grace: Duration::from_secs(3),
            probe_port: 8081,
            toggle_port: 8082,
            idle_namespace: DEFAULT_IDLE_NAMESPACE.into(),
            namespace_selector: None,
            deny_idle_namespace: false,
            allow_none: false,
            workload_only: false,
            sidecar_resources: None,
            sidecar_security_context: None,
        }
    }
}

impl TryFrom<&InjectArgs> for InjectOptions {
    type Error = ConfigError;

    fn try_from(args: &InjectArgs) -> Result<Self, ConfigError> {
        let app_command = args
            .app_command
            .as_deref()
            .map(parse_app_command)
            .transpose()?;
        let options = InjectOptions {
            container: args.container.clone(),
            image: args.image.clone(),
            app_command,
            classic_sidecar: args.classic_sidecar,
            kinds: args.kinds.clone(),
            lease_name: args.lease_name.clone(),
            lease_duration: args.lease_duration,
            renew_deadline: args.renew_deadline,
            retry_period: args.retry_period,
            kill_grace: args.kill_grace,
            probe_port: args.probe_port,
            toggle_port: args.toggle_port,
            idle_namespace: args.idle_namespace.clone(),
            namespace_selector: args.namespace_selector.clone(),
            deny_idle_namespace: args.deny_idle_namespace,
            allow_none: args.allow_none,
            workload_only: args.workload_only,
            sidecar_resources: parse_json_flag(
                "--sidecar-resources",
                args.sidecar_resources.as_deref(),
            )?,
            sidecar_security_context: parse_json_flag(
                "--sidecar-security-context",
                args.sidecar_security_context.as_deref(),
            )?,
        };
        options.validate()?;
        Ok(options)
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

/// Whether `s` is a DNS-1123 label: what a namespace name must be.
pub fn is_dns1123_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

impl InjectOptions {
    /// Refuses options that would produce manifests the roles refuse at start, or that break
    /// the follower's idleness.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !is_dns1123_label(&self.idle_namespace) {
            return Err(ConfigError::new(
                "--idle-namespace",
                &self.idle_namespace,
                "must be one namespace name (DNS-1123 label: lowercase letters, digits and '-', \
                 at most 63, no wildcard or comma) that never exists",
            ));
        }
        if self.container.is_empty() {
            return Err(ConfigError::new("--container", "", "must not be empty"));
        }
        if self.image.trim().is_empty() {
            return Err(ConfigError::new(
                "--image",
                &self.image,
                "must not be empty",
            ));
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
            if selector.trim().is_empty() {
                return Err(ConfigError::new(
                    "--namespace-selector",
                    selector,
                    "must not be empty (use `*` for all namespaces)",
                ));
            }
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
        // The same safety rule `elect` enforces at start: the old leader's app has stopped
        // (grant lapsed at R, killed by R + K) before a candidate may take over at D.
        let margin = Duration::from_secs(1);
        let (d, r, p, k) = (
            self.lease_duration,
            self.renew_deadline,
            self.retry_period,
            self.kill_grace,
        );
        if r + k + margin >= d {
            return Err(ConfigError::new(
                "--renew-deadline",
                config::human(r),
                format!(
                    "renew deadline + kill grace + 1s margin must be less than the lease duration \
                     ({} + {} + 1s >= {})",
                    config::human(r),
                    config::human(k),
                    config::human(d)
                ),
            ));
        }
        if p >= r {
            return Err(ConfigError::new(
                "--retry-period",
                config::human(p),
                format!(
                    "must be less than the renew deadline ({})",
                    config::human(r)
                ),
            ));
        }
        Ok(())
    }
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// Why a stream cannot be injected. Every variant ends `inject` with exit code 2 and no output.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error("invalid YAML in {0}")]
    Yaml(#[from] YamlError),
    #[error(
        "no target found: no {kinds} with a container named {container:?}; \
         use --container / --kind to aim elsewhere, or --allow-none to pass the stream through"
    )]
    NoTarget { kinds: String, container: String },
    #[error(
        "{workload} (document {document}) was injected by passmower-elector {found}, which this \
         version ({ours}) cannot re-inject; run inject on the original manifests"
    )]
    IncompatibleVersion {
        document: usize,
        workload: String,
        found: String,
        ours: String,
    },
    #[error(
        "{workload} (document {document}): container {container:?} sets no command, so the app \
         command is unknown; pass --app-command (e.g. --app-command 'node server.js')"
    )]
    NoCommand {
        document: usize,
        workload: String,
        container: String,
    },
    #[error("{workload} (document {document}): {reason}")]
    Manifest {
        document: usize,
        workload: String,
        reason: String,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// The result of a successful injection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    /// The rewritten stream.
    pub output: String,
    /// `Kind/name` of each targeted workload, in stream order.
    pub targets: Vec<String>,
    /// Things the operator should know that do not stop the injection.
    pub warnings: Vec<String>,
}

/// Injects the elector into every target of `input`; see [`inject`].
pub fn inject_str(input: &str, opts: &InjectOptions) -> Result<String, InjectError> {
    inject(input, opts).map(|i| i.output)
}

/// Injects the elector into every target of `input`, returning the whole new stream.
pub fn inject(input: &str, opts: &InjectOptions) -> Result<Injected, InjectError> {
    opts.validate()?;
    let documents = yaml::parse_stream(input)?;

    // What the stream already holds, so companions are added once (idempotence) and never
    // shadow a same-named object someone else wrote.
    let mut existing: HashMap<rbac::ObjectKey, bool> = HashMap::new();
    let mut existing_pdbs: Vec<(Option<String>, Value)> = Vec::new();
    for doc in &documents {
        if let Some(key) = rbac::ObjectKey::of(&doc.value) {
            existing.insert(key, rbac::is_generated(&doc.value));
        }
        if let Some(pdb) = rbac::pdb_selector(&doc.value) {
            existing_pdbs.push(pdb);
        }
    }

    let mut out = String::with_capacity(input.len() * 2);
    let mut targets = Vec::new();
    let mut warnings = Vec::new();
    let mut emitted: HashSet<rbac::ObjectKey> = HashSet::new();
    for doc in &documents {
        let Some(target) = workload::Target::find(doc, opts)? else {
            out.push_str(&doc.text);
            continue;
        };
        let workload = target.describe();
        let info = match &target.injected_by {
            Some(found) if compatible(found, VERSION) => {
                out.push_str(&doc.text);
                target.info(opts)
            }
            Some(found) => {
                return Err(InjectError::IncompatibleVersion {
                    document: doc.number,
                    workload,
                    found: found.clone(),
                    ours: VERSION.into(),
                })
            }
            None => {
                let mut value = doc.value.clone();
                let info = workload::rewrite(&mut value, &target, opts, &mut warnings)?;
                out.push_str(&doc.preamble());
                out.push_str(&yaml::to_yaml(&value));
                info
            }
        };
        targets.push(workload.clone());

        if opts.workload_only {
            continue;
        }
        let has_own_pdb = existing_pdbs
            .iter()
            .any(|(ns, sel)| *ns == info.namespace && *sel == info.selector);
        for companion in rbac::companions(&info, opts, !has_own_pdb, &mut warnings) {
            let key = rbac::ObjectKey::of(&companion).ok_or_else(|| InjectError::Manifest {
                document: doc.number,
                workload: workload.clone(),
                reason: "internal: generated object without kind or name".into(),
            })?;
            match existing.get(&key) {
                Some(true) => continue,
                Some(false) => {
                    return Err(InjectError::Manifest {
                        document: doc.number,
                        workload,
                        reason: format!(
                            "the stream already has {key} not generated by passmower-elector; \
                             rename or remove it"
                        ),
                    })
                }
                None => {}
            }
            if emitted.insert(key) {
                push_document(&mut out, &companion);
            }
        }
    }

    if targets.is_empty() && !opts.allow_none {
        return Err(InjectError::NoTarget {
            kinds: opts
                .kinds
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(" or "),
            container: opts.container.clone(),
        });
    }
    if opts.deny_idle_namespace {
        for policy in rbac::deny_idle_namespace(&opts.idle_namespace) {
            match rbac::ObjectKey::of(&policy) {
                Some(key) if existing.contains_key(&key) || !emitted.insert(key.clone()) => {}
                _ => push_document(&mut out, &policy),
            }
        }
    }
    Ok(Injected {
        output: out,
        targets,
        warnings,
    })
}

/// Appends a generated document, making sure the previous one ended its last line.
fn push_document(out: &mut String, value: &Value) {
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("---\n");
    out.push_str(&yaml::to_yaml(value));
}

/// Whether a workload injected by version `found` can be left as it is by version `ours`: the
/// injected shape (flags, volumes, paths) only changes with the minor version before 1.0 and
/// with the major version after.
pub fn compatible(found: &str, ours: &str) -> bool {
    fn line(v: &str) -> Option<(u64, u64)> {
        let mut parts = v.trim().trim_start_matches('v').split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(if major == 0 { (0, minor) } else { (major, 0) })
    }
    matches!((line(found), line(ours)), (Some(a), Some(b)) if a == b)
}

/// The `inject` role: read, inject, print only on success.
pub fn main(args: InjectArgs) -> ExitCode {
    let opts = match InjectOptions::try_from(&args) {
        Ok(opts) => opts,
        Err(e) => return e.report(),
    };
    let input = match read_input(&args.file) {
        Ok(input) => input,
        Err(e) => return e.report(),
    };
    match inject(&input, &opts) {
        Ok(injected) => {
            for warning in &injected.warnings {
                eprintln!("passmower-elector inject: warning: {warning}");
            }
            let mut stdout = std::io::stdout().lock();
            if let Err(e) = stdout
                .write_all(injected.output.as_bytes())
                .and_then(|()| stdout.flush())
            {
                eprintln!("passmower-elector inject: cannot write the output: {e}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("passmower-elector inject: {e}");
            ExitCode::from(config::CONFIG_EXIT_CODE)
        }
    }
}

fn read_input(file: &std::path::Path) -> Result<String, ConfigError> {
    let mut bytes = Vec::new();
    let result = if file.as_os_str() == "-" {
        std::io::stdin().lock().read_to_end(&mut bytes)
    } else {
        std::fs::File::open(file).and_then(|mut f| f.read_to_end(&mut bytes))
    };
    let shown = file.display().to_string();
    result.map_err(|e| ConfigError::new("-f", &shown, format!("cannot read: {e}")))?;
    String::from_utf8(bytes)
        .map_err(|e| ConfigError::new("-f", &shown, format!("not UTF-8 text: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_labels() {
        assert!(is_dns1123_label(DEFAULT_IDLE_NAMESPACE));
        assert!(is_dns1123_label("a"));
        assert!(is_dns1123_label("a-1"));
        for bad in ["", "*", "a,b", "-a", "a-", "A", "a.b", &"a".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad:?}");
        }
    }

    #[test]
    fn idle_namespace_is_validated_naming_the_flag() {
        let opts = InjectOptions {
            idle_namespace: "idle,*".into(),
            ..Default::default()
        };
        let err = opts.validate().unwrap_err();
        assert_eq!(err.flag, "--idle-namespace");
    }

    #[test]
    fn unsafe_timings_are_refused() {
        let opts = InjectOptions {
            renew_deadline: Duration::from_secs(12),
            ..Default::default()
        };
        assert_eq!(opts.validate().unwrap_err().flag, "--renew-deadline");
        assert!(InjectOptions::default().validate().is_ok());
    }

    #[test]
    fn app_command_forms() {
        assert_eq!(
            parse_app_command("node --no-warnings src/app.js").unwrap(),
            PASSMOWER_APP_COMMAND
        );
        assert_eq!(
            parse_app_command(r#"["sh", "-c", "exec a b"]"#).unwrap(),
            ["sh", "-c", "exec a b"]
        );
        assert!(parse_app_command("  ").is_err());
        assert!(parse_app_command("[1]").is_err());
        assert!(parse_app_command("[]").is_err());
    }

    #[test]
    fn version_compatibility_follows_semver_lines() {
        assert!(compatible("0.1.0", "0.1.7"));
        assert!(!compatible("0.2.0", "0.1.0"));
        assert!(compatible("1.2.0", "1.9.1"));
        assert!(!compatible("2.0.0", "1.0.0"));
        assert!(!compatible("garbage", "0.1.0"));
    }
}
