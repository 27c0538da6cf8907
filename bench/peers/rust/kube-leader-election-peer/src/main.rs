//! A benchmark candidate built on `kube-leader-election`, configured as its `shared-lease`
//! example recommends: a background loop calls `try_acquire_or_renew` on a fixed period and
//! keeps the last answer as "am I leader" (an error leaves it as it was, as in the example);
//! graceful shutdown calls `step_down`, which clears the holder so others can race for it.
//!
//! Timings: `lease_ttl` is the lease duration (15 s); the loop runs every retry period (2 s),
//! well inside the documented "renew before `lease_ttl` runs out". The crate has no renew
//! deadline.

#[path = "../../common.rs"]
mod common;

use kube_leader_election::{LeaseLock, LeaseLockParams, LeaseLockResult};
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() {
    let args = common::Args::parse();
    let rec = common::Recorder::new(&args);
    let mut sigterm = signal(SignalKind::terminate()).expect("SIGTERM handler");

    let client = kube::Client::try_default().await.expect("kube client");
    let leadership = LeaseLock::new(
        client,
        &args.namespace,
        LeaseLockParams {
            holder_id: args.identity.clone(),
            lease_name: args.lease_name.clone(),
            lease_ttl: args.lease_duration,
        },
    );
    let mut leading = false;
    loop {
        match leadership.try_acquire_or_renew().await {
            Ok(result) => {
                leading = matches!(result, LeaseLockResult::Acquired(_));
                rec.set(leading);
            }
            Err(err) => eprintln!("try_acquire_or_renew: {err:?}"),
        }
        tokio::select! {
            _ = tokio::time::sleep(args.retry_period) => {}
            _ = sigterm.recv() => break,
        }
    }
    rec.set(false);
    if leading {
        if let Err(err) = leadership.step_down().await {
            eprintln!("step_down: {err:?}");
        }
    }
}
