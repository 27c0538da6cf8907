//! The fault campaign: five pods — elector, supervisor, recording child — against a
//! private etcd + kube-apiserver, with process kills and freezes, per-pod partitions, control
//! plane restarts and hand edits of the Lease drawn from a seeded schedule. Two leaders in
//! operator mode at once is a failure however rare; so is a leaderless gap longer than the
//! bound of the fault that caused it (see `schedule::FaultKind::bound`).
//!
//! CI runs about a minute. A longer run, with any seed:
//!
//! ```sh
//! PME_CAMPAIGN_DURATION=10m PME_CAMPAIGN_SEED=42 \
//!   cargo test --release --test bench fault_campaign -- --ignored --nocapture
//! ```
//! or `scripts/campaign.sh --duration 10m --seed 42`.

mod campaign;
mod schedule;

use std::time::Duration;

use campaign::{run, summary, Config};

fn campaign(default_duration: Duration) {
    let config = Config::from_env(default_duration);
    let report = run(&config);
    eprintln!("{report}");
    // scripts/campaign.sh writes this into docs/results/campaign.md.
    if let Some(path) = std::env::var_os("PME_CAMPAIGN_REPORT") {
        if let Err(e) = std::fs::write(&path, report.to_string()) {
            eprintln!(
                "cannot write PME_CAMPAIGN_REPORT {}: {e}",
                path.to_string_lossy()
            );
        }
    }
    assert!(
        report.safe(),
        "SAFETY: two leaders or a broken record — {}\n(report above; rerun with PME_CAMPAIGN_SEED={})",
        summary(&report),
        config.seed
    );
    assert!(
        report.live(),
        "LIVENESS: a leaderless gap exceeded its bound — {}\n(report above; rerun with PME_CAMPAIGN_SEED={})",
        summary(&report),
        config.seed
    );
}

/// About a minute of faults; the seed differs per run unless PME_CAMPAIGN_SEED is set.
#[test]
fn short_fault_campaign_never_has_two_leaders() {
    campaign(Duration::from_secs(60));
}

/// Opt-in: ten minutes by default, PME_CAMPAIGN_DURATION / PME_CAMPAIGN_SEED to choose.
#[test]
#[ignore = "long; run with --ignored (see the module docs)"]
fn long_fault_campaign_never_has_two_leaders() {
    campaign(Duration::from_secs(600));
}
