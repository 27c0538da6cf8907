//! What this pod says about whether it can take the Lease: the `may_contend` and `contending`
//! gauges, a log line when it changes, and one Event per change — `FollowerReady` once it can
//! take a free Lease, `NotContending` with the reason once it cannot (its app's consumer does not
//! answer, or its Pod is terminating).
//!
//! A pod's start is a spell of not contending too, but an expected one (the app container
//! starts after the sidecar, and the Pod is read once): it is reported only once it has lasted
//! the consumer timeout, so a healthy rollout records `FollowerReady` and no warning.

use super::Elector;
use crate::clock::BootInstant;
use crate::elect::consumer::ConsumerState;
use crate::elect::events::Kind;
use crate::elect::own_pod::PodState;

/// What this pod last said about contending.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Said {
    /// Nothing yet (the start).
    #[default]
    Nothing,
    /// `FollowerReady`: it takes a free Lease.
    Ready,
    /// `NotContending`, with a warning in the log.
    NotContending,
}

impl Elector {
    /// Publishes whether this pod would take a free Lease now, after a new judgement of its
    /// consumer (`before` is the previous one) or a change of its Pod.
    pub(super) fn report_contention(&mut self, before: Option<ConsumerState>, now: BootInstant) {
        let leading = self.candidate.is_leader();
        let able = self.may_contend();
        self.metrics.may_contend.set(i64::from(able));
        let contending =
            able && !leading && self.outputs_healthy && !self.step_down.sitting_out(now);
        self.metrics.contending.set(i64::from(contending));
        let Some(state) = self.consumer else {
            return;
        };
        let changed = before.map(ConsumerState::name) != Some(state.name());
        if able {
            if changed {
                tracing::info!(consumer = state.name(), "{state}: contending for the Lease");
            }
            if self.said != Said::Ready && !leading {
                self.said = Said::Ready;
                self.event(
                    Kind::Normal,
                    "FollowerReady",
                    format!("ready to take the Lease: {state}"),
                );
            }
            return;
        }
        if leading {
            // A leader's consumer trouble is the step-down's to report; a terminating leader
            // keeps its term until it is stopped.
            return;
        }
        let terminating = matches!(self.pod_state, PodState::Terminating { .. });
        let why = match &self.pod_state {
            PodState::Terminating { .. } => self.pod_state.to_string(),
            // Not read yet: a moment of every start, not worth a word.
            PodState::Pending => return,
            // What the toggle answered tells an app container that is not running (no
            // connection) from a supervisor that refuses our objects (no readable token).
            _ => match (state, self.outputs.toggle_failure()) {
                (ConsumerState::Unproven | ConsumerState::Silent { .. }, Some(push)) => {
                    format!("{state}; the last push to the toggle: {push}")
                }
                _ => state.to_string(),
            },
        };
        let was_able = before.is_some_and(ConsumerState::may_contend) || terminating;
        let overdue = now.saturating_since(self.consumer_live_at) > self.consumer_check.timeout;
        if self.said != Said::NotContending && (was_able || overdue) {
            self.said = Said::NotContending;
            // A terminating pod is expected (a rollout, a scale-down); a consumer that does not
            // answer is not.
            let kind = if terminating {
                tracing::info!(
                    pod = self.pod_state.name(),
                    "not contending for the Lease: {why}"
                );
                Kind::Normal
            } else {
                tracing::warn!(
                    consumer = state.name(),
                    "not contending for the Lease: {why}"
                );
                Kind::Warning
            };
            self.event(
                kind,
                "NotContending",
                format!("not contending for the Lease: {why}"),
            );
        } else if changed {
            tracing::info!(
                consumer = state.name(),
                "not contending for the Lease yet: {state}"
            );
        }
    }
}
