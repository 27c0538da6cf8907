//! The command line: one subcommand per role, every flag also readable from `ELECTOR_*`.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::{copy_self, elect, inject, logging, status, supervise, webhook};

#[derive(Debug, Parser)]
#[command(
    name = "passmower-elector",
    version,
    about = "Lease-based leader election that makes multi-replica Passmower safe",
    long_about = "Lease-based leader election that makes multi-replica Passmower safe.\n\n\
        Run `elect` as a sidecar in every pod and `supervise -- CMD` as the app's entrypoint; \
        `inject` adds both to existing manifests. Every flag --foo-bar can also be set as \
        ELECTOR_FOO_BAR; a flag wins over its variable."
)]
pub struct Cli {
    #[command(flatten)]
    pub log: logging::LogArgs,
    #[command(subcommand)]
    pub role: Role,
}

// Parsed once per process and never moved in a hot path: boxing the larger roles' flags would
// only add noise to every match arm.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Role {
    /// Hold or contend for the Lease; grant operator mode to this pod while it is held.
    Elect(elect::ElectArgs),
    /// Run the app as PID 1 and switch it between leader and follower mode with the grant.
    Supervise(supervise::SuperviseArgs),
    /// Add the elector, the supervisor and RBAC to Kubernetes manifests (Helm post-renderer).
    #[command(long_about = inject::LONG_ABOUT)]
    Inject(inject::InjectArgs),
    /// Mutating admission webhook: inject the elector into the pods that opt in by label.
    Webhook(webhook::WebhookArgs),
    /// Copy this binary to DEST (mode 0755, atomic), for an initContainer without a shell.
    CopySelf(copy_self::CopySelfArgs),
    /// Show who leads and whether its operators run (exit 0), or why none does (exit 1).
    /// Also `kubectl passmower-elector` when installed as `kubectl-passmower_elector`.
    Status(status::StatusArgs),
}

/// Parses the command line and runs the chosen role. Usage errors exit 2 (clap's convention,
/// shared with every configuration error the roles find themselves).
pub fn run() -> ExitCode {
    // As the kubectl plugin, `status` is what `kubectl passmower-elector` means.
    let args = status::plugin_args(std::env::args_os().collect());
    // `--version` also names the sidecar image this build defaults to (a release's own).
    let parsed = Cli::command()
        .long_version(long_version())
        .try_get_matches_from(&args)
        .and_then(|mut matches| Cli::from_arg_matches_mut(&mut matches));
    let cli = match parsed {
        Ok(cli) => cli,
        // Helm 4 hides a post-renderer's stderr: `inject --on-error=manifest` reports even a
        // mistyped flag where Helm shows it.
        Err(e) => match inject::usage_error(&e, args.iter().cloned()) {
            Some(code) => return code,
            None => e.exit(),
        },
    };
    if let Err(e) = logging::init(&cli.log) {
        return e.report();
    }
    match cli.role {
        Role::Elect(args) => elect::main(args),
        Role::Supervise(args) => supervise::main(args),
        Role::Inject(args) => inject::main(args),
        Role::Webhook(args) => webhook::main(args),
        Role::CopySelf(args) => copy_self::main(args),
        Role::Status(args) => status::main(args),
    }
}

/// The text of `--version`: the version, then the default sidecar image. Made once per process;
/// clap keeps it for the process's life.
fn long_version() -> &'static str {
    let text = format!("{}\n{}", inject::VERSION, inject::published::describe());
    Box::leak(text.into_boxed_str())
}
