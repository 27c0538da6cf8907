//! Publishing transitions: flag file and toggle first, then logs, metrics, status and Events.

use std::time::{Duration, SystemTime};

use super::Elector;
use crate::clock::BootInstant;
use crate::elect::consumer::ConsumerState;
use crate::elect::events::{Details, Kind};
use crate::elect::own_pod::PodState;
use crate::election::report::{HolderReport, TermStart};
use crate::election::{HandoverCause, StopReason, Transition};
use crate::grant::Order;

impl Elector {
    /// Publishes a transition to every output, the log, the metrics and Events.
    pub(super) fn apply(&mut self, transition: Transition, now: BootInstant) {
        let holder = self.candidate.holder_id().to_owned();
        match transition {
            Transition::BecameLeader {
                epoch,
                expiry,
                cause,
                leaderless,
            } => {
                if self.publish_leader(epoch, expiry).is_err() {
                    return;
                }
                self.native_keep_held();
                tracing::info!(identity = %holder, epoch, grant_for = ?expiry.saturating_since(now),
                    cause = cause.as_str(), leaderless = ?leaderless, "became leader");
                self.record_leading("became", epoch, now);
                self.begin_term(cause, leaderless);
                self.event_with(
                    Kind::Normal,
                    "BecameLeader",
                    format!(
                        "{holder} became leader (epoch {epoch}, cause {cause}): {}; no pod led for \
                         {} before",
                        cause_in_words(cause),
                        human_millis(leaderless)
                    ),
                    Details {
                        epoch: Some(epoch),
                        cause: Some(cause.as_str()),
                        leaderless: Some(leaderless),
                    },
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
                self.native_keep_held();
                tracing::info!(identity = %holder, %from, epoch, grant_for = ?expiry.saturating_since(now),
                    "adopted the Lease from this pod's previous elector: the term goes on and the app keeps running");
                self.record_leading("adopted", epoch, now);
                self.begin_term(HandoverCause::Adopted, Duration::ZERO);
                self.event_with(
                    Kind::Normal,
                    "Adopted",
                    format!(
                        "{holder} adopted the Lease from {from}, the same pod's previous elector \
                         (epoch {epoch}, cause adopted): the term goes on and the app keeps running"
                    ),
                    Details {
                        epoch: Some(epoch),
                        cause: Some(HandoverCause::Adopted.as_str()),
                        leaderless: Some(Duration::ZERO),
                    },
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
                // Upstream's Lease still names this pod: clear it once the app has stopped for
                // sure, as a hand-over does without an ack (a hand-over clears it sooner).
                self.bound_native_clear(now);
                tracing::info!(identity = %holder, %reason, "stopped leading");
                self.metrics.transition("stopped");
                self.status.update(|s| {
                    s.grant_expiry = None;
                    s.since = Some(SystemTime::now());
                });
                // A handover at shutdown is routine — also when, in a pod being deleted, the app
                // container stopped first (a native sidecar stops last) and the elector steps
                // down for it; every other end of a term is worth a look.
                let kind = match reason {
                    StopReason::Shutdown => Kind::Normal,
                    StopReason::ConsumerGone { .. }
                        if matches!(self.pod_state, PodState::Terminating { .. }) =>
                    {
                        Kind::Normal
                    }
                    _ => Kind::Warning,
                };
                let epoch = self.status.get().epoch;
                self.event_with(
                    kind,
                    "StoppedLeading",
                    format!("{holder} stopped leading (epoch {epoch}): {reason}"),
                    Details {
                        epoch: Some(epoch),
                        ..Details::default()
                    },
                );
                if reason == StopReason::OutputFailed {
                    self.release_pending = true;
                }
            }
        }
    }

    /// Metrics and status of a term that begins here, taken over or adopted.
    fn record_leading(&mut self, how: &'static str, epoch: u64, now: BootInstant) {
        // The consumer's timeout counts from the term's start at the earliest (an adopted term
        // may begin before the consumer has answered this incarnation).
        self.consumer_live_at = now;
        self.metrics.transition(how);
        self.status.update(|s| {
            s.epoch = epoch;
            s.since = Some(SystemTime::now());
            s.last_renew_ok = Some(now);
        });
    }

    /// A new term's cause and leaderless time: counted, and written into the Lease with every
    /// renewal of the term.
    fn begin_term(&mut self, cause: HandoverCause, leaderless: Duration) {
        self.metrics.handover(cause, leaderless);
        self.term_start = Some(TermStart { cause, leaderless });
    }

    /// Writes and pushes a leader grant; on failure demotes (fail closed) and returns Err.
    pub(super) fn publish_leader(&mut self, epoch: u64, expiry: BootInstant) -> Result<(), ()> {
        let holder = self.candidate.holder_id().to_owned();
        match self.outputs.leader(&holder, epoch, expiry) {
            Ok(_) => {
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
        let leader_before = self.outputs.leader_grant_on_disk();
        let (order, written) = self.outputs.follower(&status.holder, status.epoch);
        if leader_before.is_some() {
            // This demotes a leader grant (one inherited from the pod's previous elector, say):
            // upstream's Lease may be cleared only once its app has stopped for sure.
            self.bound_native_clear(BootInstant::now());
        }
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

    /// A demotion was just written (or tried) at `now`: upstream's Lease is cleared no earlier
    /// than the app has stopped for sure, as a hand-over without an ack counts it, unless an
    /// ack proves it sooner.
    fn bound_native_clear(&mut self, now: BootInstant) {
        self.native_release_after(self.stopped_for_sure(now));
    }

    pub(super) fn event(&self, kind: Kind, reason: &'static str, message: String) {
        self.event_with(kind, reason, message, Details::default());
    }

    /// An Event with its figures also in annotations (see [`Details`]).
    pub(super) fn event_with(
        &self,
        kind: Kind,
        reason: &'static str,
        message: String,
        details: Details,
    ) {
        if let Some(events) = &self.events {
            events.record(kind, reason, message, details);
        }
    }

    /// What this holder says about its term in the Lease, written with each of its writes:
    /// operators run (a live grant, and the consumer says so, signed), the consumer's state,
    /// and how the term began (`term`; `None` keeps what the Lease has).
    pub(super) fn holder_report(&self, term: Option<TermStart>) -> HolderReport {
        let running = self.candidate.is_leader() && self.status.get().operators_running;
        HolderReport {
            operators_running: running,
            consumer: self.consumer.map_or("unknown", ConsumerState::name),
            consumer_reason: self
                .consumer
                .map_or_else(|| "not judged yet".to_owned(), |c| c.to_string()),
            term,
        }
    }
}

/// How the previous term ended, for the `BecameLeader` Event.
fn cause_in_words(cause: HandoverCause) -> &'static str {
    match cause {
        HandoverCause::Released => "the previous holder released the Lease",
        HandoverCause::Expired => {
            "the previous holder stopped renewing (crashed, cut off or paused) and its record \
             stayed unchanged for the lease duration"
        }
        HandoverCause::Adopted => "the same pod's previous elector held it",
        HandoverCause::Created => "the Lease did not exist",
    }
}

/// A duration in milliseconds precision, as humans read it (`1.234s`, `15s`, `0s`).
pub(super) fn human_millis(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{}.{:03}s", ms / 1000, ms % 1000)
    }
}
