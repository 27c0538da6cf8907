//! `inject`: rewrites Kubernetes manifests to add the elector sidecar, the supervisor and RBAC.
//!
//! The whole output is built in memory and printed only on success, so a Helm post-renderer or
//! a `kubectl apply` pipe never sees half a rewrite. Documents that are not targets are written
//! back byte for byte; targets are re-serialized (their comments are lost, their fields kept),
//! headed by comments that repeat the warnings of their rewrite, because Helm shows neither a
//! post-renderer's stderr nor anything but the manifests.

mod args;
mod companions;
mod error;
mod failure;
mod kube_version;
mod kustomize;
mod names;
pub mod native_election;
mod options;
mod pod_spec;
pub mod published;
mod run;
mod target;
mod value;
pub mod yaml;

pub use companions::{fence, guard};

use std::io::{Read, Write};
use std::process::ExitCode;

use crate::config::{self, ConfigError};
pub use crate::config::{is_dns1123_label, is_dns1123_subdomain};
pub use args::{InjectArgs, SidecarArgs, LONG_ABOUT};
pub use companions::rbac::{
    deny_policy_name, elector_lease_rules, elector_rules, native_lease_rules,
};
pub use error::InjectError;
pub use failure::failure_manifest;
pub use kube_version::KubeVersion;
pub use kustomize::{strategic_patch, Component};
pub use names::{
    WorkloadKind, DEFAULT_CONTAINER, DEFAULT_IDLE_NAMESPACE, ELECTOR_CONTAINER,
    GENERATED_FOR_ANNOTATION, INJECTED_ANNOTATION, INSTALL_CONTAINER, LEASE_ANNOTATION,
    PASSMOWER_APP_COMMAND, PROBE_PORT_NAME, VERSION, WARNINGS_ANNOTATION,
};
pub use native_election::PassmowerElection;
pub use options::{
    check_idle_namespace, check_leader_selector, image_howto, parse_app_command, AppOnChange,
    InjectOptions, OnError, LEASE_BRIDGE_MIN_KILL_GRACE, PROJECT_IMAGE_REPOSITORY,
};
pub use pod_spec::pod::{describe_pod, inject_pod, not_a_target, PodOutcome};
pub use run::{compatible, inject, inject_str, Injected, Rewrite};
pub use yaml::YamlError;

/// The `inject` role: read, inject, print (or write the kustomize Component) only on success.
pub fn main(args: InjectArgs) -> ExitCode {
    let on_error = args.on_error;
    let fail = |message: String| -> ExitCode {
        eprintln!("passmower-elector inject: {message}");
        match on_error {
            OnError::Exit => ExitCode::from(config::CONFIG_EXIT_CODE),
            OnError::Manifest => {
                print!("{}", failure_manifest(&message));
                ExitCode::SUCCESS
            }
        }
    };
    let opts = match InjectOptions::try_from(&args) {
        Ok(opts) => opts,
        Err(e) => return fail(format!("configuration error: {e}")),
    };
    let input = match read_input(&args.file) {
        Ok(input) => input,
        Err(e) => return fail(format!("configuration error: {e}")),
    };
    let injected = match inject(&input, &opts) {
        Ok(injected) => injected,
        Err(e) => return fail(e.to_string()),
    };
    for warning in &injected.warnings {
        eprintln!("passmower-elector inject: warning: {warning}");
    }
    if let Some(dir) = &args.kustomize {
        let component = match Component::build(&injected) {
            Ok(component) => component,
            Err(e) => return fail(e.to_string()),
        };
        return match component.write_to(dir) {
            Ok(files) => {
                for file in files {
                    eprintln!("passmower-elector inject: wrote {}", file.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(format!(
                "configuration error: invalid --kustomize {:?}: cannot write: {e}",
                dir.display().to_string()
            )),
        };
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

/// A command-line error of `inject --on-error=manifest ...`: printed as the failure manifest
/// (and on stderr), exit 0, like every other `inject` failure in that mode. `None` for any
/// other command line, which clap reports as usual.
pub fn usage_error(
    error: &clap::Error,
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Option<ExitCode> {
    let args: Vec<String> = args
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let inject_at = args.iter().position(|a| a == "inject")?;
    let rest = &args[inject_at + 1..];
    let manifest = rest.iter().enumerate().any(|(i, a)| {
        a == "--on-error=manifest"
            || (a == "--on-error" && rest.get(i + 1).map(String::as_str) == Some("manifest"))
    }) || (std::env::var("ELECTOR_ON_ERROR").as_deref() == Ok("manifest"));
    if !manifest
        || matches!(
            error.kind(),
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
        )
    {
        return None;
    }
    let rendered = error.render().to_string();
    let message = rendered
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .collect::<Vec<_>>()
        .join(" ");
    eprint!("{rendered}");
    print!("{}", failure_manifest(&format!("command line: {message}")));
    Some(ExitCode::SUCCESS)
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
