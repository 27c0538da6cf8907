//! What `webhook` is told: its command line (`WebhookArgs`: the injection flags it shares with
//! `inject`, its TLS, certificate and connection settings) and the `WebhookConfig` it turns
//! into; every refusal a `ConfigError`, which exits 2 before it serves.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::{self, ConfigError};
use crate::inject::{InjectOptions, SidecarArgs};
use crate::webhook::server;

/// The Service name the chart gives the webhook; the certificate's default names derive from it.
pub const DEFAULT_SERVICE: &str = "passmower-elector-webhook";

#[derive(Debug, clap::Args)]
pub struct WebhookArgs {
    #[command(flatten)]
    pub sidecar: SidecarArgs,
    /// The --idle-namespace is a valid namespace name that a ValidatingAdmissionPolicy forbids
    /// creating (the chart's injection.denyIdleNamespace installs one); such a name is refused
    /// without it. Not needed for the default, which no namespace can have.
    #[arg(long, env = "ELECTOR_DENY_IDLE_NAMESPACE")]
    pub deny_idle_namespace: bool,
    /// Address of the HTTPS admission endpoint (POST /mutate).
    #[arg(long, env = "ELECTOR_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Address of the webhook's own /healthz, /readyz and /metrics (plain HTTP).
    #[arg(long, env = "ELECTOR_HEALTH_ADDR", default_value = "0.0.0.0:8080")]
    pub health_addr: SocketAddr,
    /// Serve this PEM certificate (chain) instead of making one, e.g. cert-manager's tls.crt;
    /// re-read when it changes. Needs --tls-key-file. The caBundle is then yours to keep
    /// (cert-manager's CA injector does it).
    #[arg(
        long,
        env = "ELECTOR_TLS_CERT_FILE",
        value_name = "FILE",
        requires = "tls_key_file"
    )]
    pub tls_cert_file: Option<PathBuf>,
    /// The PEM private key of --tls-cert-file.
    #[arg(
        long,
        env = "ELECTOR_TLS_KEY_FILE",
        value_name = "FILE",
        requires = "tls_cert_file"
    )]
    pub tls_key_file: Option<PathBuf>,
    /// How often the certificate files are checked for a change.
    #[arg(long, env = "ELECTOR_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = config::parse_positive_duration)]
    pub tls_reload_interval: Duration,
    /// The MutatingWebhookConfiguration whose caBundle this webhook keeps, when it makes its
    /// own certificate (without --tls-cert-file): each replica adds its CA and removes the CAs
    /// it replaced or that expired.
    #[arg(long, env = "ELECTOR_WEBHOOK_CONFIGURATION", value_name = "NAME")]
    pub webhook_configuration: Option<String>,
    /// The webhook's Service, for the certificate's names (NAME, NAME.NAMESPACE,
    /// NAME.NAMESPACE.svc, NAME.NAMESPACE.svc.cluster.local).
    #[arg(long, env = "ELECTOR_SERVICE_NAME", default_value = DEFAULT_SERVICE)]
    pub service_name: String,
    /// This replica's name, written into the CA it makes, so that a restarted replica replaces
    /// the CAs of its earlier runs in the caBundle instead of adding one per start; default:
    /// $POD_NAME (the downward API's metadata.name). Each replica needs its own.
    #[arg(long, env = "ELECTOR_REPLICA_NAME", value_name = "NAME")]
    pub replica_name: Option<String>,
    /// The webhook's namespace; default: $POD_NAMESPACE, then the service-account namespace.
    #[arg(long, env = "ELECTOR_NAMESPACE")]
    pub namespace: Option<String>,
    /// Another DNS name or IP address for the certificate (repeatable), e.g. 127.0.0.1 when the
    /// configuration calls a URL.
    #[arg(long = "tls-name", env = "ELECTOR_TLS_NAME", value_delimiter = ',')]
    pub tls_names: Vec<String>,
    /// Validity of the certificate made in memory; it is renewed once two thirds have passed.
    #[arg(long, env = "ELECTOR_CERT_VALIDITY", default_value = "24h", value_parser = config::parse_positive_duration)]
    pub cert_validity: Duration,
    /// Time the API server gets to see a caBundle change before the certificate it trusts is
    /// served (at start and at each rotation).
    #[arg(long, env = "ELECTOR_CA_PROPAGATION_DELAY", default_value = "5s", value_parser = config::parse_positive_duration)]
    pub ca_propagation_delay: Duration,
    /// How often the caBundle is checked for this replica's CA (it is put back if a reinstall
    /// replaced the configuration).
    #[arg(long, env = "ELECTOR_CA_BUNDLE_RESYNC", default_value = "30s", value_parser = config::parse_positive_duration)]
    pub ca_bundle_resync: Duration,
    /// Do not ask the API server (SubjectAccessReview) whether a pod's ServiceAccount may
    /// update its Lease before injecting it.
    #[arg(long, env = "ELECTOR_NO_RBAC_CHECK")]
    pub no_rbac_check: bool,
    /// Longest wait for that answer; without one the pod is admitted with a warning.
    #[arg(long, env = "ELECTOR_RBAC_CHECK_TIMEOUT", default_value = "2s", value_parser = config::parse_positive_duration)]
    pub rbac_check_timeout: Duration,
    /// Connections older than this are closed after their next response (which says
    /// `Connection: close`), so the API server spreads over new replicas after a scale-up.
    #[arg(long, env = "ELECTOR_MAX_CONNECTION_AGE", default_value = "5m", value_parser = config::parse_positive_duration)]
    pub max_connection_age: Duration,
    /// Most connections served at once; more wait in the listen backlog.
    #[arg(long, env = "ELECTOR_MAX_CONNECTIONS", default_value_t = 256)]
    pub max_connections: usize,
    /// At SIGTERM, time /readyz fails while admissions are still served, so the Service stops
    /// routing here before the server stops.
    #[arg(long, env = "ELECTOR_SHUTDOWN_DELAY", default_value = "5s", value_parser = crate::config::parse_duration)]
    pub shutdown_delay: Duration,
}

/// Where the serving certificate comes from.
#[derive(Debug, Clone)]
pub enum CertSource {
    /// Made in memory; the caBundle of `configuration` is kept.
    SelfSigned {
        configuration: String,
        names: Vec<String>,
        replica: Option<String>,
        validity: Duration,
        propagation: Duration,
        resync: Duration,
    },
    /// Read from files and reloaded.
    Files {
        cert: PathBuf,
        key: PathBuf,
        interval: Duration,
    },
}

/// The validated configuration of the `webhook` role.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub inject: InjectOptions,
    pub listen: SocketAddr,
    pub health_addr: SocketAddr,
    pub certs: CertSource,
    pub rbac_check: Option<Duration>,
    pub limits: server::Limits,
    pub shutdown_delay: Duration,
}

impl WebhookArgs {
    pub fn into_config(self) -> Result<WebhookConfig, ConfigError> {
        let inject = InjectOptions {
            deny_idle_namespace: self.deny_idle_namespace,
            ..self.sidecar.options()?
        };
        if inject.passmower_election == crate::inject::PassmowerElection::FenceOnly {
            // The webhook only rewrites pods; fence-only adds nothing to a pod but the objects
            // beside it (the Lease RBAC and a fence keyed on upstream's Lease), which `inject`
            // emits.
            return Err(ConfigError::new(
                "--passmower-election",
                "fence-only",
                "adds no container to the pod, only objects beside it, which the webhook does \
                 not make: leave the namespace unlabelled and install them with `passmower-elector \
                 inject --passmower-election=fence-only`; the webhook takes auto or ours",
            ));
        }
        inject.validate()?;
        let certs = match (self.tls_cert_file, self.tls_key_file) {
            (Some(cert), Some(key)) => CertSource::Files {
                cert,
                key,
                interval: self.tls_reload_interval,
            },
            _ => {
                let configuration = self.webhook_configuration.ok_or_else(|| {
                    ConfigError::new(
                        "--webhook-configuration",
                        "",
                        "name the MutatingWebhookConfiguration whose caBundle this webhook keeps \
                         (or serve your own certificate with --tls-cert-file and --tls-key-file)",
                    )
                })?;
                // Renewal starts at two thirds of the validity and needs the propagation delay
                // to finish while the old certificate is still valid.
                if self.cert_validity < self.ca_propagation_delay * 3 + Duration::from_secs(3) {
                    return Err(ConfigError::new(
                        "--cert-validity",
                        config::human(self.cert_validity),
                        format!(
                            "must be at least three times --ca-propagation-delay ({}) plus 3s, so a \
                             rotation completes before the old certificate expires",
                            config::human(self.ca_propagation_delay)
                        ),
                    ));
                }
                let mut names = self.tls_names.clone();
                let namespace = self.namespace.clone().or_else(own_namespace);
                match namespace {
                    Some(ns) => {
                        let svc = &self.service_name;
                        for name in [
                            format!("{svc}.{ns}.svc"),
                            format!("{svc}.{ns}.svc.cluster.local"),
                            format!("{svc}.{ns}"),
                            svc.clone(),
                        ] {
                            if !names.contains(&name) {
                                names.push(name);
                            }
                        }
                    }
                    None if names.is_empty() => return Err(ConfigError::new(
                        "--namespace",
                        "",
                        "the webhook's namespace is unknown (no $POD_NAMESPACE, not in a pod): \
                             pass --namespace, or the certificate's names with --tls-name",
                    )),
                    None => {}
                }
                for name in &names {
                    let ip = name.parse::<std::net::IpAddr>().is_ok();
                    if !ip && !config::is_dns1123_subdomain(name) {
                        return Err(ConfigError::new(
                            "--tls-name",
                            name,
                            "must be a DNS name (DNS-1123 subdomain) or an IP address",
                        ));
                    }
                }
                let replica = self
                    .replica_name
                    .clone()
                    .or_else(|| std::env::var("POD_NAME").ok())
                    .filter(|s| !s.is_empty());
                if let Some(replica) = &replica {
                    if !config::is_dns1123_subdomain(replica) || replica.len() > 64 {
                        return Err(ConfigError::new(
                            "--replica-name",
                            replica,
                            "must be a pod name (DNS-1123 subdomain) of at most 64 characters",
                        ));
                    }
                }
                CertSource::SelfSigned {
                    configuration,
                    names,
                    replica,
                    validity: self.cert_validity,
                    propagation: self.ca_propagation_delay,
                    resync: self.ca_bundle_resync,
                }
            }
        };
        if self.max_connections == 0 {
            return Err(ConfigError::new(
                "--max-connections",
                "0",
                "must be at least 1",
            ));
        }
        Ok(WebhookConfig {
            inject,
            listen: self.listen,
            health_addr: self.health_addr,
            certs,
            rbac_check: (!self.no_rbac_check).then_some(self.rbac_check_timeout),
            limits: server::Limits {
                max_connections: self.max_connections,
                max_connection_age: self.max_connection_age,
                ..server::Limits::default()
            },
            shutdown_delay: self.shutdown_delay,
        })
    }
}

fn own_namespace() -> Option<String> {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
}
