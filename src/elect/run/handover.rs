//! Handing the Lease over: on SIGTERM/SIGINT, and after failing closed. Demote, wait for the
//! consumer's ack (toggle 2xx or ack file) or kill grace, then release.
//!
//! An ack ends the wait only if the demotion reached the flag file. While a leader grant may
//! still be on disk (the follower object could not be written), an ack proves nothing about the
//! next consumer: a supervisor restarted before that grant's expiry reads it and starts a
//! leader. The release then waits for the grant's expiry + kill grace + margin, acks or not.

use std::process::ExitCode;

use std::future::Future;

use futures_util::StreamExt;
use signal_hook_tokio::Signals;

use super::Elector;
use crate::clock::{self, BootInstant};
use crate::elect::events::{Details, Kind};
use crate::elect::lease_api::LeaseApiError;
use crate::elect::outputs::AckSource;
use crate::election::candidate::Source;
use crate::election::record::{self, Observed};
use crate::election::report;
use crate::election::timing::MIN_MARGIN;
use crate::election::StopReason;

impl Elector {
    /// Whether the Lease, as we last saw it, names us.
    pub(super) fn named_in_lease(&self) -> bool {
        self.candidate.observed().and_then(Observed::holder) == Some(self.candidate.holder_id())
    }

    /// SIGTERM/SIGINT: demote, wait for the consumer's ack (or kill grace + margin), release,
    /// exit 0.
    pub(super) async fn shutdown(mut self, signals: &mut Signals) -> ExitCode {
        if self.candidate.is_leader() || self.named_in_lease() {
            if !self.hand_over(Some(signals)).await {
                return ExitCode::FAILURE;
            }
        } else {
            self.publish_follower();
            // A take of upstream's Lease that did not lead, or a clear still pending: it must
            // not keep naming this pod, once nothing can run here any more.
            self.native_release_at_shutdown().await;
        }
        // The pod's last word, so `status` does not show a stopped elector as ready. Bounded:
        // the Lease is released already, and nothing else waits for this.
        if let Some(events) = &self.events {
            let said = events.record_now(
                Kind::Normal,
                "NotContending",
                "not contending for the Lease: the elector is stopping".to_owned(),
                Details::default(),
            );
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), said).await;
        }
        tracing::info!("elector stopped");
        ExitCode::SUCCESS
    }

    /// Demotes, waits for the ack, then releases the Lease. Returns false when a second signal
    /// cut the wait short (the Lease is then left to expire).
    pub(super) async fn hand_over(&mut self, signals: Option<&mut Signals>) -> bool {
        let now = BootInstant::now();
        if let Some(t) = self.candidate.demote(StopReason::Shutdown) {
            self.apply(t, now);
        }
        // A fresh demotion stamp, so the ack we wait for is for this very object.
        let order = self.publish_follower();
        let demoted_at = BootInstant::now();
        // Without an ack, give the consumer its kill grace *plus the margin*: its grace starts
        // when it reads the demotion, which is later than when we wrote it (push delivery, a
        // busy or CPU-throttled container). Releasing at exactly K let the next leader start
        // while a late consumer's app was still running (fault campaign, handover-stall). The
        // margin is the one the takeover path reserves (R + K + margin < D).
        // If the demotion could not be written to the flag file, a consumer that reads only the
        // file obeys the last leader grant there until it expires: count from that expiry, and
        // let no ack cut the wait short (see the module docs).
        let on_disk = self.outputs.leader_grant_on_disk();
        let deadline = self.stopped_for_sure(demoted_at);
        if on_disk.is_some() {
            tracing::warn!(
                wait = ?deadline.saturating_since(demoted_at),
                "the demotion could not be written to the flag file; releasing only once the \
                 leader grant still there has expired and the kill grace has passed, acks or not"
            );
        }
        let wait = async {
            match on_disk {
                Some(_) => {
                    clock::sleep_until(deadline).await;
                    AckSource::KillGrace
                }
                None => self.outputs.wait_for_demotion_ack(order, deadline).await,
            }
        };
        let ack = match signals {
            Some(signals) => tokio::select! {
                ack = beating(&self.status, wait) => ack,
                _ = signals.next() => {
                    tracing::warn!("second signal: exiting at once without releasing the Lease");
                    return false;
                }
            },
            None => beating(&self.status, wait).await,
        };
        let waited = BootInstant::now().saturating_since(demoted_at);
        match ack {
            AckSource::KillGrace => {
                tracing::info!(
                    ?waited,
                    "no ack taken from the consumer; kill grace and margin have passed"
                )
            }
            source => tracing::info!(?source, ?waited, "consumer acknowledged the demotion"),
        }
        self.release().await;
        self.native_release_handed_over().await;
        true
    }

    /// When the app has stopped for sure after a demotion written (or tried) at `demoted_at`,
    /// with no ack: the leader grant still on disk (the follower object could not be written),
    /// else the demotion, plus the kill grace and the margin (see `hand_over`).
    pub(super) fn stopped_for_sure(&self, demoted_at: BootInstant) -> BootInstant {
        self.outputs
            .leader_grant_on_disk()
            .map_or(demoted_at, |expiry| expiry.max(demoted_at))
            .saturating_add(self.candidate.timing().kill_grace)
            .saturating_add(MIN_MARGIN)
    }

    /// Whether a hand-over may release the Lease as we last saw it: it names us, or the
    /// previous elector process of our pod whose step-down we finish (see `adopt`).
    fn releasable(&self) -> bool {
        let holder = self.candidate.observed().and_then(Observed::holder);
        self.named_in_lease() || (holder.is_some() && holder == self.predecessor.as_deref())
    }

    /// Releases the Lease if it still names us (or the predecessor we hand over for): holder ""
    /// and a one-second duration.
    pub(super) async fn release(&mut self) {
        for _ in 0..3 {
            if !self.releasable() {
                return;
            }
            let Some(current) = self.current.clone() else {
                return;
            };
            self.status
                .update(|s| s.loop_heartbeat = BootInstant::now());
            let sent_at = BootInstant::now();
            let mut desired = record::released(&current);
            report::annotate(&mut desired, &self.holder_report(None));
            match self.api.replace(&desired).await {
                Ok(lease) => {
                    tracing::info!(lease = %self.api.reference(), "released the Lease");
                    self.observe(BootInstant::now(), Some(lease), Source::Read { sent_at });
                    return;
                }
                Err(LeaseApiError::Conflict) => {
                    self.refresh().await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not release the Lease; it expires on its own");
                    return;
                }
            }
        }
    }
}

/// Runs `wait` while keeping the loop's heartbeat: a handover is bounded work (at most the
/// renew deadline, kill grace and margin), not a wedged loop, and `/healthz` must not fail
/// because of it.
async fn beating<T>(
    status: &crate::elect::status::SharedStatus,
    wait: impl Future<Output = T>,
) -> T {
    let mut wait = std::pin::pin!(wait);
    loop {
        status.update(|s| s.loop_heartbeat = BootInstant::now());
        tokio::select! {
            out = &mut wait => return out,
            _ = clock::sleep(std::time::Duration::from_millis(500)) => {}
        }
    }
}
