//! Structured logs with tracing: text for people, JSON for log pipelines.

use clap::ValueEnum;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Logging (every command)")]
pub struct LogArgs {
    /// Log format: `text` or `json` (one object per line).
    #[arg(
        long,
        global = true,
        env = "ELECTOR_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Log filter: a level (`info`, `debug`) or per-target levels (`info,kube=warn`).
    #[arg(long, global = true, env = "ELECTOR_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

/// Installs the global subscriber; logs go to stderr so stdout stays free for `inject`.
pub fn init(args: &LogArgs) -> Result<(), crate::config::ConfigError> {
    let filter: Targets = args.log_level.parse().map_err(|e| {
        crate::config::ConfigError::new(
            "--log-level",
            &args.log_level,
            format!("{e}; allowed: error, warn, info, debug, trace, optionally per target (info,kube=warn)"),
        )
    })?;
    let registry = tracing_subscriber::registry().with(filter);
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let result = match args.log_format {
        LogFormat::Text => registry.with(layer.with_ansi(false)).try_init(),
        LogFormat::Json => registry.with(layer.json().flatten_event(true)).try_init(),
    };
    // A second init (tests driving several roles in one process) keeps the first subscriber.
    let _ = result;
    Ok(())
}
