//! Stepping down for a leader whose app cannot run: when the supervisor reports that the app
//! exited on its own too many times in a row in leader mode, or when the consumer stops
//! answering (see [`crate::elect::consumer`]), hand the Lease over like a shutdown would, then
//! stay out of contention for one lease duration so another pod can try. If nobody else takes
//! it, this pod may lead again afterwards.

use super::Elector;
use crate::clock::BootInstant;
use crate::elect::consumer::{self, ConsumerState};
use crate::election::StopReason;

/// The step-down rule's settings and state.
#[derive(Debug)]
pub(super) struct StepDown {
    /// Failed leader starts in a row that make this pod step down; 0 never does.
    max_failures: u64,
    /// Until then this pod does not try to take the Lease.
    sit_out_until: Option<BootInstant>,
}

impl StepDown {
    pub(super) fn new(max_failures: u64) -> Self {
        StepDown {
            max_failures,
            sit_out_until: None,
        }
    }

    pub(super) fn sitting_out(&self, now: BootInstant) -> bool {
        self.sit_out_until.is_some_and(|until| now < until)
    }

    /// When the sit-out ends (the distant past when there is none): a follower's next attempt
    /// waits for it, so a free Lease does not wake the loop over and over meanwhile.
    pub(super) fn sit_out_end(&self) -> BootInstant {
        self.sit_out_until.unwrap_or_default()
    }

    /// The step-down limit (0: never).
    pub(super) fn max_failures(&self) -> u64 {
        self.max_failures
    }

    /// Stays out of contention until `until`.
    pub(super) fn sit_out(&mut self, until: BootInstant) {
        self.sit_out_until = Some(until);
    }

    /// Whether `failures`, reported for the current term, call for a step-down.
    fn due(&self, failures: u64) -> bool {
        self.max_failures > 0 && failures >= self.max_failures
    }
}

impl Elector {
    /// While leading: reads the consumer's latest verified report and steps down when its app
    /// keeps failing to start as leader. Only reports of this term count (order at least the
    /// term's first grant): the supervisor starts counting again at every demotion.
    pub(super) async fn step_down_if_app_failing(&mut self, now: BootInstant) {
        if !self.candidate.is_leader() {
            return;
        }
        let Some(report) = self.outputs.consumer_report() else {
            return;
        };
        let failures = report.leader_start_failures;
        if report.order() < self.outputs.term_start() || !self.step_down.due(failures) {
            return;
        }
        tracing::warn!(failures, sit_out = ?self.candidate.timing().lease_duration,
            "the app keeps exiting (or failing its health probe) as leader; stepping down so another pod can try");
        self.step_down(StopReason::AppFailing { failures }, now)
            .await;
    }

    /// Hands the Lease over like a shutdown would (demote, ack, release), then sits out one
    /// lease duration so another pod can try.
    pub(super) async fn step_down(&mut self, reason: StopReason, now: BootInstant) {
        let sit_out = self.candidate.timing().lease_duration;
        if let Some(t) = self.candidate.demote(reason) {
            self.apply(t, now);
        }
        self.hand_over(None).await;
        self.step_down.sit_out_until = Some(BootInstant::now().saturating_add(sit_out));
    }

    /// Judges the consumer from its latest signed answers and acks: publishes the state
    /// (status, metrics, and through `contention` a log line and an Event when it changes)
    /// and, while leading, steps
    /// down when the consumer has exited, has been silent for the consumer timeout, or has not
    /// answered at all for that long since this term began.
    pub(super) async fn check_consumer(&mut self, now: BootInstant) {
        let evidence = self.outputs.consumer_evidence();
        let state = consumer::judge(self.consumer_check, evidence, now);
        let before = self.consumer.replace(state);
        if state.may_contend() {
            self.consumer_live_at = now;
        }
        let leading = self.candidate.is_leader();
        let running = leading && (state.runs_leader() || state == ConsumerState::Unchecked);
        if let Some(report) = self.outputs.consumer_report() {
            self.metrics.leader_app_totals(&report);
        }
        self.status.update(|s| {
            s.consumer = Some(state);
            s.operators_running = running;
        });
        self.report_contention(before, now);
        if !leading || state.may_contend() {
            return;
        }
        let timeout = self.consumer_check.timeout;
        let due = match state {
            ConsumerState::Stopped | ConsumerState::Silent { .. } => true,
            _ => now.saturating_since(self.consumer_live_at) > timeout,
        };
        if !due {
            return;
        }
        tracing::warn!(consumer = state.name(), sit_out = ?self.candidate.timing().lease_duration,
            "{state}: stepping down so a pod whose app runs can lead");
        let reason = StopReason::ConsumerGone {
            state: state.to_string(),
        };
        self.step_down(reason, now).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn steps_down_at_the_limit_and_zero_disables() {
        assert!(!StepDown::new(3).due(2));
        assert!(StepDown::new(3).due(3));
        assert!(!StepDown::new(0).due(u64::MAX));
        let mut s = StepDown::new(3);
        let t = BootInstant::from_nanos(1_000);
        assert!(!s.sitting_out(t));
        s.sit_out_until = Some(t.saturating_add(Duration::from_nanos(10)));
        assert!(s.sitting_out(t));
        assert!(!s.sitting_out(t.saturating_add(Duration::from_nanos(10))));
        assert_eq!(s.sit_out_end(), t.saturating_add(Duration::from_nanos(10)));
        assert_eq!(StepDown::new(3).sit_out_end(), BootInstant::default());
    }
}
