//! Publishing transitions: flag file and toggle first, then logs, metrics, status and Events.

use std::time::SystemTime;

use super::Elector;
use crate::clock::{self, BootInstant};
use crate::election::{StopReason, Transition};
use crate::grant::Order;

impl Elector {
    /// Publishes a transition to every output, the log, the metrics and Events.
    pub(super) fn apply(&mut self, transition: Transition, now: BootInstant) {
        let holder = self.candidate.holder_id().to_owned();
        match transition {
            Transition::BecameLeader { epoch, expiry } => {
                if self.publish_leader(epoch, expiry).is_err() {
                    return;
                }
                tracing::info!(identity = %holder, epoch, grant_for = ?expiry.saturating_since(now), "became leader");
                self.record_leading("became", epoch, now);
                self.event(
                    "BecameLeader",
                    format!("{holder} became leader (epoch {epoch})"),
                );
            }
            Transition::Adopted {
                epoch,
                expiry,
                from,
            } => {
                if self.publish_leader(epoch, expiry).is_err() {
                    return;
                }
                tracing::info!(identity = %holder, %from, epoch, grant_for = ?expiry.saturating_since(now),
                    "adopted the Lease from this pod's previous elector: the term goes on and the app keeps running");
                self.record_leading("adopted", epoch, now);
                self.event(
                    "BecameLeader",
                    format!(
                        "{holder} adopted the Lease from {from}, the same pod's previous elector (epoch {epoch})"
                    ),
                );
            }
            Transition::Renewed { epoch, expiry } => {
                if self.publish_leader(epoch, expiry).is_ok() {
                    self.status.update(|s| s.last_renew_ok = Some(now));
                }
            }
            Transition::StoppedLeading { reason } => {
                let lease_holder = self.status.get().holder;
                let (_, written) = self
                    .outputs
                    .follower(&lease_holder, self.status.get().epoch);
                if let Err(e) = &written {
                    tracing::error!(error = %e, "cannot write the follower flag file; the grant's own expiry still stops the consumer");
                }
                tracing::info!(identity = %holder, %reason, "stopped leading");
                self.metrics.is_leader.set(0);
                self.metrics.grant_expiry.set(0.0);
                self.metrics.transition("stopped");
                self.status.update(|s| {
                    s.grant_expiry = None;
                    s.since = Some(SystemTime::now());
                });
                self.event(
                    "StoppedLeading",
                    format!("{holder} stopped leading: {reason}"),
                );
                if reason == StopReason::OutputFailed {
                    self.release_pending = true;
                }
            }
        }
    }

    /// Writes and pushes a leader grant; on failure demotes (fail closed) and returns Err.
    /// Metrics and status of a term that begins here, taken over or adopted.
    fn record_leading(&mut self, how: &'static str, epoch: u64, now: BootInstant) {
        // The consumer's timeout counts from the term's start at the earliest (an adopted term
        // may begin before the consumer has answered this incarnation).
        self.consumer_live_at = now;
        self.metrics.is_leader.set(1);
        self.metrics.transition(how);
        self.status.update(|s| {
            s.epoch = epoch;
            s.since = Some(SystemTime::now());
            s.last_renew_ok = Some(now);
        });
    }

    pub(super) fn publish_leader(&mut self, epoch: u64, expiry: BootInstant) -> Result<(), ()> {
        let holder = self.candidate.holder_id().to_owned();
        match self.outputs.leader(&holder, epoch, expiry) {
            Ok(_) => {
                self.metrics.grant_expiry.set(
                    clock::wall_clock_of(expiry)
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64()),
                );
                self.status.update(|s| s.grant_expiry = Some(expiry));
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot write the leader flag file; failing closed");
                self.outputs_healthy = false;
                if let Some(t) = self.candidate.demote(StopReason::OutputFailed) {
                    self.apply(t, BootInstant::now());
                }
                Err(())
            }
        }
    }

    /// Publishes follower mode (start-up, and the fail-closed retry).
    pub(super) fn publish_follower(&mut self) -> Order {
        let status = self.status.get();
        let (order, written) = self.outputs.follower(&status.holder, status.epoch);
        match written {
            Ok(()) => {
                if !self.outputs_healthy {
                    tracing::info!("the flag file is writable again; contending for the Lease");
                }
                self.outputs_healthy = true;
            }
            Err(e) => {
                if self.outputs_healthy {
                    tracing::error!(error = %e, "cannot write the flag file; not contending until it can be written");
                }
                self.outputs_healthy = false;
            }
        }
        order
    }

    pub(super) fn event(&self, reason: &'static str, message: String) {
        if let Some(events) = &self.events {
            events.record(reason, message);
        }
    }
}
