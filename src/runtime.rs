//! Runs a role: the one place the tokio runtime is built, and where what a role ends with
//! becomes the process's exit code — 2 for bad configuration (naming the flag), 1 for a role
//! that could not start or go on (no runtime, a port it cannot bind, no API client), else the
//! role's own code. The Kubernetes client every role needs is built here too, so a kubeconfig
//! that cannot be read is reported alike, naming the file, by each.
//!
//! Every role runs on one thread: each is I/O-bound and small, one thread keeps the RSS small,
//! and `supervise` relies on it (its `waitpid(-1)` is the only reaper, without locking). The
//! probe servers that must not wait behind a role's work run on threads of their own
//! (`probe_server`).

use std::ffi::OsString;
use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;

use crate::config::ConfigError;

/// Exit code of a role that could not start or go on.
pub const FAILURE_EXIT_CODE: u8 = 1;

/// Why a role ended early; the kind decides the exit code.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    /// A flag (or its variable) has a value that cannot be used: exit 2.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The tokio runtime could not be built.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A listening address is valid but cannot be bound now (in use, not on this host).
    #[error("cannot listen on {addr} ({flag}): {source}")]
    Listen {
        flag: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// No Kubernetes client configuration: the kubeconfig named by `KUBECONFIG` (or the
    /// default one) is missing or unreadable, and this is not a pod either.
    #[error("no usable Kubernetes client configuration ({}): {source}", kubeconfig_source(.kubeconfig))]
    KubeConfig {
        /// `KUBECONFIG` as set, if set: the file (or list of files) that was tried.
        kubeconfig: Option<OsString>,
        source: kube::config::InferConfigError,
    },
    /// The configuration was found but no client can be built from it.
    #[error("cannot build the Kubernetes client: {0}")]
    KubeClient(#[source] kube::Error),
    /// Any other part of the role's machinery that could not be set up.
    #[error("{what}: {source}")]
    Start {
        what: &'static str,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl RoleError {
    /// A failure to set up `what`, with its cause.
    pub fn start(
        what: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        RoleError::Start {
            what,
            source: source.into(),
        }
    }

    /// The exit code this error ends the process with.
    pub fn exit_code(&self) -> u8 {
        match self {
            RoleError::Config(_) => crate::config::CONFIG_EXIT_CODE,
            _ => FAILURE_EXIT_CODE,
        }
    }

    /// Prints the error on stderr and returns its exit code. A configuration error is printed
    /// the way every role reports one; anything else names the role.
    pub fn report(&self, role: &str) -> ExitCode {
        match self {
            RoleError::Config(e) => e.report(),
            other => {
                eprintln!("passmower-elector {role}: {other}");
                ExitCode::from(other.exit_code())
            }
        }
    }
}

fn kubeconfig_source(kubeconfig: &Option<OsString>) -> String {
    match kubeconfig {
        Some(files) => format!(
            "KUBECONFIG={}, then in-cluster",
            std::path::Path::new(files).display()
        ),
        None => "~/.kube/config, then in-cluster".to_owned(),
    }
}

/// Runs the role `role` (its name, for messages): validates its configuration, builds the
/// runtime, runs `start` on it to the end and returns the exit code.
pub fn run<C, F>(role: &str, config: Result<C, ConfigError>, start: impl FnOnce(C) -> F) -> ExitCode
where
    F: Future<Output = Result<ExitCode, RoleError>>,
{
    let config = match config {
        Ok(c) => c,
        Err(e) => return e.report(),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return RoleError::Runtime(e).report(role),
    };
    match runtime.block_on(start(config)) {
        Ok(code) => code,
        Err(e) => e.report(role),
    }
}

/// The Kubernetes API client, configured the usual way (`KUBECONFIG`, else `~/.kube/config`,
/// then in-cluster), with `user_agent` on every request when given.
pub async fn kube_client(user_agent: Option<&'static str>) -> Result<kube::Client, RoleError> {
    let mut config = kube::Config::infer()
        .await
        .map_err(|source| RoleError::KubeConfig {
            kubeconfig: std::env::var_os("KUBECONFIG").filter(|k| !k.is_empty()),
            source,
        })?;
    if let Some(agent) = user_agent {
        config.headers.push((
            hyper::header::USER_AGENT,
            hyper::header::HeaderValue::from_static(agent),
        ));
    }
    kube::Client::try_from(config).map_err(RoleError::KubeClient)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_errors_exit_2_and_failures_to_start_exit_1() {
        let config = RoleError::from(ConfigError::new("--flag", "x", "no"));
        assert_eq!(config.exit_code(), 2);
        let listen = RoleError::Listen {
            flag: "--probe-addr",
            addr: "127.0.0.1:1".parse().expect("address"),
            source: std::io::Error::from(std::io::ErrorKind::AddrInUse),
        };
        assert_eq!(listen.exit_code(), 1);
        assert!(listen.to_string().contains("--probe-addr"), "{listen}");
        assert!(std::error::Error::source(&listen).is_some());
        assert_eq!(RoleError::start("cannot x", "because").exit_code(), 1);
    }

    #[test]
    fn the_kubeconfig_error_names_the_files_tried() {
        assert_eq!(
            kubeconfig_source(&Some("/no/such/kubeconfig".into())),
            "KUBECONFIG=/no/such/kubeconfig, then in-cluster"
        );
        assert_eq!(kubeconfig_source(&None), "~/.kube/config, then in-cluster");
    }
}
