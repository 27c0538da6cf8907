//! `status`: one screen (or one JSON object) that says whether a working leader runs operators
//! for a Deployment or a Lease, from what the electors publish through the API — the Lease and
//! its holder's report, the pods, the electors' Events, the write fence. Reads only (`get`,
//! `list`); the exit code is for scripts: 0 a working leader, 1 none, 2 usage, 3 the state
//! could not be read.
//!
//! `gather` reads the API, `report` judges what was read (pure: objects and a clock in, a
//! report out), `render` prints the human screen.

mod gather;
mod render;
pub mod report;

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::ConfigError;
use crate::runtime::{self, RoleError};

/// The exit code when the state could not be read (no Lease readable, no API).
pub const UNKNOWN_EXIT_CODE: u8 = 3;

/// The name under which the binary runs as a kubectl plugin (`kubectl passmower-elector`).
pub const KUBECTL_PLUGIN_NAME: &str = "kubectl-passmower_elector";

/// How the report is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// One screen for people.
    Text,
    /// One JSON object with stable field names, for scripts.
    Json,
}

#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).multiple(true).args(["deployment", "lease"])))]
pub struct StatusArgs {
    /// The Deployment whose pods run the elector (its Lease is found from the pods' elector
    /// container, else it is the Deployment's name).
    #[arg(long, env = "ELECTOR_DEPLOYMENT", value_name = "NAME")]
    pub deployment: Option<String>,
    /// The Lease the electors hold [default with --deployment: the Lease its pods' electors
    /// name].
    #[arg(long, env = "ELECTOR_LEASE", value_name = "NAME")]
    pub lease: Option<String>,
    /// The namespace [default: the kubeconfig context's, else `default`].
    #[arg(short = 'n', long, env = "ELECTOR_NAMESPACE")]
    pub namespace: Option<String>,
    /// The kubeconfig file [default: $KUBECONFIG, then ~/.kube/config, then in-cluster].
    #[arg(long, env = "ELECTOR_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use [default: its current context].
    #[arg(long, env = "ELECTOR_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
    /// `text` (one screen) or `json` (stable field names, for scripts).
    #[arg(
        short = 'o',
        long,
        env = "ELECTOR_OUTPUT",
        value_enum,
        default_value = "text"
    )]
    pub output: Output,
}

/// The validated request.
#[derive(Debug, Clone)]
pub struct StatusConfig {
    pub deployment: Option<String>,
    pub lease: Option<String>,
    pub namespace: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub output: Output,
}

impl StatusArgs {
    fn into_config(self) -> Result<StatusConfig, ConfigError> {
        let subdomain = |flag: &'static str, value: &Option<String>| match value {
            Some(v) if !crate::config::is_dns1123_subdomain(v) => Err(ConfigError::new(
                flag,
                v,
                "must be a DNS-1123 subdomain: lowercase a-z, 0-9, '-' and '.', at most 253 \
                 characters",
            )),
            _ => Ok(()),
        };
        subdomain("--deployment", &self.deployment)?;
        subdomain("--lease", &self.lease)?;
        if let Some(ns) = &self.namespace {
            if !crate::config::is_dns1123_label(ns) {
                return Err(ConfigError::new(
                    "--namespace",
                    ns,
                    "must be a DNS-1123 label: 1-63 of a-z, 0-9 and '-', alphanumeric at both ends",
                ));
            }
        }
        Ok(StatusConfig {
            deployment: self.deployment,
            lease: self.lease,
            namespace: self.namespace,
            kubeconfig: self.kubeconfig,
            context: self.context,
            output: self.output,
        })
    }
}

/// Entry point of `passmower-elector status`.
pub fn main(args: StatusArgs) -> ExitCode {
    runtime::run("status", args.into_config(), run)
}

async fn run(config: StatusConfig) -> Result<ExitCode, RoleError> {
    // Without an API nothing can be told: that is exit 3, not "no leader".
    let (client, default_namespace) = match client(&config).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("passmower-elector status: {e}");
            return Ok(ExitCode::from(UNKNOWN_EXIT_CODE));
        }
    };
    let namespace = config
        .namespace
        .clone()
        .unwrap_or_else(|| default_namespace.clone());
    let gathered = gather::gather(&client, &namespace, &config).await;
    let report = report::build(&gathered, k8s_openapi::jiff::Timestamp::now());
    match config.output {
        Output::Text => print!("{}", render::text(&report)),
        Output::Json => {
            let json = serde_json::to_string_pretty(&report).unwrap_or_default();
            println!("{json}");
        }
    }
    Ok(ExitCode::from(report.exit_code()))
}

/// The API client and the namespace of the kubeconfig's context: `--kubeconfig` and
/// `--context` when given, else the usual way (`KUBECONFIG`, ~/.kube/config, in-cluster).
async fn client(config: &StatusConfig) -> Result<(kube::Client, String), RoleError> {
    let options = kube::config::KubeConfigOptions {
        context: config.context.clone(),
        ..Default::default()
    };
    let kube_config = match &config.kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                RoleError::start(
                    "cannot read the kubeconfig (--kubeconfig)",
                    format!("{}: {e}", path.display()),
                )
            })?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| RoleError::start("cannot use the kubeconfig (--kubeconfig)", e))?
        }
        None if config.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| RoleError::start("cannot use the kubeconfig context (--context)", e))?,
        None => kube::Config::infer()
            .await
            .map_err(|source| RoleError::KubeConfig {
                kubeconfig: std::env::var_os("KUBECONFIG").filter(|k| !k.is_empty()),
                source,
            })?,
    };
    let namespace = kube_config.default_namespace.clone();
    let mut kube_config = kube_config;
    kube_config.headers.push((
        hyper::header::USER_AGENT,
        hyper::header::HeaderValue::from_static(USER_AGENT),
    ));
    let client = kube::Client::try_from(kube_config).map_err(RoleError::KubeClient)?;
    Ok((client, namespace))
}

/// The User-Agent of `status`'s requests.
pub const USER_AGENT: &str = concat!("passmower-elector/", env!("CARGO_PKG_VERSION"), " (status)");

/// The command line as `status` should see it when the binary runs as the kubectl plugin
/// (`kubectl passmower-elector ...` runs `kubectl-passmower_elector ...`): `status` is put in
/// front unless a subcommand (or `--help`, `--version`) is named. Any other name: unchanged.
pub fn plugin_args(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let invoked_as_plugin = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|name| name == KUBECTL_PLUGIN_NAME);
    if !invoked_as_plugin {
        return args;
    }
    let first = args.get(1).and_then(|a| a.to_str()).unwrap_or("");
    let named = [
        "status",
        "elect",
        "supervise",
        "inject",
        "webhook",
        "copy-self",
        "help",
        "--help",
        "-h",
        "--version",
        "-V",
    ]
    .contains(&first);
    if named {
        return args;
    }
    let mut out = Vec::with_capacity(args.len() + 1);
    out.push(args[0].clone());
    out.push("status".into());
    out.extend(args.into_iter().skip(1));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<std::ffi::OsString> {
        v.iter().map(|s| s.into()).collect()
    }

    #[test]
    fn as_a_kubectl_plugin_status_is_the_default_subcommand() {
        assert_eq!(
            plugin_args(strings(&[
                "/usr/local/bin/kubectl-passmower_elector",
                "-n",
                "pm"
            ])),
            strings(&[
                "/usr/local/bin/kubectl-passmower_elector",
                "status",
                "-n",
                "pm"
            ])
        );
        assert_eq!(
            plugin_args(strings(&[
                "kubectl-passmower_elector",
                "status",
                "-n",
                "pm"
            ])),
            strings(&["kubectl-passmower_elector", "status", "-n", "pm"])
        );
        assert_eq!(
            plugin_args(strings(&["kubectl-passmower_elector", "--help"])),
            strings(&["kubectl-passmower_elector", "--help"])
        );
        assert_eq!(
            plugin_args(strings(&["kubectl-passmower_elector"])),
            strings(&["kubectl-passmower_elector", "status"])
        );
        // Under its own name nothing changes.
        assert_eq!(
            plugin_args(strings(&["passmower-elector", "-n", "pm"])),
            strings(&["passmower-elector", "-n", "pm"])
        );
    }
}
