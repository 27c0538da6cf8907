//! A benchmark candidate built on `kube-lease-manager`, configured as its documentation
//! recommends for controllers: the fully automated `LeaseManager::watch()` mode, the Lease in
//! the candidate's namespace, the lock state followed through the watch channel. Graceful
//! shutdown closes the channel, which makes the manager release the lock, and waits for it.
//!
//! Timings: the crate has no renew deadline or retry period. `duration` is the lease duration
//! (15 s); `grace` (renew that long before expiry; 5 s, the crate's default) makes the holder
//! renew 10 s after each renewal — the same point as a 10 s renew deadline.

#[path = "../../common.rs"]
mod common;

use kube_lease_manager::LeaseManagerBuilder;
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() {
    let args = common::Args::parse();
    let rec = common::Recorder::new(&args);
    let mut sigterm = signal(SignalKind::terminate()).expect("SIGTERM handler");

    let client = kube::Client::try_default().await.expect("kube client");
    let duration = args.lease_duration.as_secs();
    let grace = duration - args.renew_deadline.as_secs();
    let manager = LeaseManagerBuilder::new(client, &args.lease_name)
        .with_namespace(&args.namespace)
        .with_identity(&args.identity)
        .with_duration(duration)
        .with_grace(grace)
        .build()
        .await
        .expect("build LeaseManager");
    let (mut channel, task) = manager.watch().await;
    loop {
        tokio::select! {
            changed = channel.changed() => {
                if changed.is_err() {
                    break;
                }
                let leader = *channel.borrow_and_update();
                rec.set(leader);
            }
            _ = sigterm.recv() => break,
        }
    }
    // Work first, then the lock: stop being leader, then close the channel (release).
    rec.set(false);
    drop(channel);
    let _ = task.await;
}
