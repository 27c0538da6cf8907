//! Why a stream cannot be injected.

use crate::config::ConfigError;
use crate::inject::yaml::YamlError;

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
