//! What the election loop knows, shared with the probe server: written by the loop only.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::consumer::ConsumerState;
use super::own_pod::PodState;
use crate::clock::{self, BootInstant};

/// A snapshot of the election as seen by this pod.
#[derive(Clone, Debug, Default)]
pub struct Status {
    /// The holder named by the last observed Lease (empty when released or absent).
    pub holder: String,
    /// This process's holder identity.
    pub identity: String,
    /// The epoch of our term (or the last observed `leaseTransitions` when following).
    pub epoch: u64,
    /// Our grant's expiry, when leading.
    pub grant_expiry: Option<BootInstant>,
    /// When the current role (leader or follower) began, wall clock.
    pub since: Option<SystemTime>,
    /// The Lease (or its absence) has been observed at least once.
    pub lease_observed: bool,
    /// The last API call (or watch) succeeded.
    pub api_ok: bool,
    /// Last time the loop ran an iteration.
    pub loop_heartbeat: BootInstant,
    /// Last successful renew (or acquire), when leading.
    pub last_renew_ok: Option<BootInstant>,
    /// The consumer as last judged (None before the first judgement).
    pub consumer: Option<ConsumerState>,
    /// Leading, and the consumer says the leader app runs.
    pub operators_running: bool,
    /// This pod's own Pod: a terminating one does not take the Lease.
    pub pod: PodState,
}

/// Shared, cheaply cloned handle to the status.
#[derive(Clone, Default)]
pub struct SharedStatus(Arc<Mutex<Status>>);

impl SharedStatus {
    pub fn update(&self, f: impl FnOnce(&mut Status)) {
        let mut guard = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut guard);
    }

    pub fn get(&self) -> Status {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// The body of `GET /leader`.
#[derive(Debug, Serialize)]
pub struct LeaderView {
    pub holder: String,
    pub identity: String,
    pub epoch: u64,
    pub is_leader: bool,
    pub since: Option<String>,
    pub grant_expires_at: Option<String>,
    pub grant_expires_boottime_ns: u64,
    /// Leading, and the app's supervisor says (signed) that the leader app runs: what a user
    /// alerts on. `is_leader` alone says only what the elector holds.
    pub operators_running: bool,
    /// Whether this pod may take the Lease: its consumer has shown that it runs and obeys, and
    /// the pod is not terminating.
    pub contending: bool,
    /// The consumer as the elector sees it: `live`, `unproven`, `silent`, `stopped` or
    /// `unchecked`, with the reason in words.
    pub consumer: String,
    pub consumer_reason: String,
    /// This pod as the elector sees it: `staying`, `terminating` (it does not take the Lease),
    /// `unknown` (it cannot tell, and contends as if the pod stayed) or `pending` (not read
    /// yet), with the reason in words.
    pub pod: String,
    pub pod_reason: String,
}

impl Status {
    pub fn is_leader_at(&self, now: BootInstant) -> bool {
        self.grant_expiry.is_some_and(|e| now < e)
    }

    pub fn leader_view(&self, now: BootInstant) -> LeaderView {
        let is_leader = self.is_leader_at(now);
        LeaderView {
            holder: self.holder.clone(),
            identity: self.identity.clone(),
            epoch: self.epoch,
            is_leader,
            since: self
                .since
                .map(|t| humantime::format_rfc3339_millis(t).to_string()),
            grant_expires_at: self
                .grant_expiry
                .filter(|_| is_leader)
                .map(clock::rfc3339_of),
            grant_expires_boottime_ns: self
                .grant_expiry
                .filter(|_| is_leader)
                .map_or(0, |e| e.as_nanos()),
            operators_running: is_leader && self.operators_running,
            contending: self.consumer.is_some_and(ConsumerState::may_contend)
                && self.pod.may_contend(),
            consumer: self
                .consumer
                .map_or("unknown", ConsumerState::name)
                .to_owned(),
            consumer_reason: self
                .consumer
                .map_or_else(|| "not judged yet".to_owned(), |c| c.to_string()),
            pod: self.pod.name().to_owned(),
            pod_reason: self.pod.to_string(),
        }
    }

    /// `/healthz`: the loop is alive, and a leader is not stuck without renewing.
    pub fn healthy(
        &self,
        now: BootInstant,
        lease_duration: Duration,
        retry_period: Duration,
    ) -> Result<(), String> {
        let quiet = now.saturating_since(self.loop_heartbeat);
        // The loop wakes at least every retry period; a few missed beats mean it is wedged.
        let allowed = (retry_period * 3).max(lease_duration);
        if quiet > allowed {
            return Err(format!(
                "election loop silent for {quiet:?} (allowed {allowed:?})"
            ));
        }
        if self.grant_expiry.is_some() {
            if let Some(last) = self.last_renew_ok {
                let since = now.saturating_since(last);
                if since > lease_duration {
                    return Err(format!(
                        "holding the grant but no renew succeeded for {since:?}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// `/readyz`: the Lease has been observed and the API answers.
    pub fn ready(&self) -> Result<(), String> {
        match (self.lease_observed, self.api_ok) {
            (true, true) => Ok(()),
            (false, _) => Err("the Lease has not been observed yet".into()),
            (true, false) => Err("the last API call failed".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn healthz_fails_when_the_loop_is_wedged() {
        let st = Status {
            loop_heartbeat: BootInstant::from_nanos(0),
            ..Status::default()
        };
        let (d, p) = (Duration::from_secs(15), Duration::from_secs(2));
        assert!(st.healthy(BootInstant::from_nanos(10 * S), d, p).is_ok());
        assert!(st.healthy(BootInstant::from_nanos(16 * S), d, p).is_err());
    }

    #[test]
    fn healthz_fails_when_a_leader_has_not_renewed_for_a_lease_duration() {
        let st = Status {
            loop_heartbeat: BootInstant::from_nanos(20 * S),
            grant_expiry: Some(BootInstant::from_nanos(25 * S)),
            last_renew_ok: Some(BootInstant::from_nanos(4 * S)),
            ..Status::default()
        };
        let err = st.healthy(
            BootInstant::from_nanos(20 * S),
            Duration::from_secs(15),
            Duration::from_secs(2),
        );
        assert!(err.unwrap_err().contains("no renew"));
    }

    /// `/healthz` is the sidecar's liveness probe: an unreachable API server must never fail
    /// it, or the kubelet would restart every elector during an outage. A follower that has
    /// never seen the Lease, and a leader whose renewals fail (its grant lapses after R, before
    /// the D threshold), are both healthy while the loop runs.
    #[test]
    fn healthz_never_fails_because_the_api_is_down() {
        let (d, p) = (Duration::from_secs(15), Duration::from_secs(2));
        let follower = Status {
            loop_heartbeat: BootInstant::from_nanos(100 * S),
            lease_observed: false,
            api_ok: false,
            ..Status::default()
        };
        assert!(follower.ready().is_err());
        assert!(follower
            .healthy(BootInstant::from_nanos(101 * S), d, p)
            .is_ok());
        // A leader whose last renew succeeded at 90s, grant until 100s (R = 10s): at 104.9s the
        // loop has demoted it already (grant_expiry cleared) or is about to; either way healthy.
        let leader = Status {
            loop_heartbeat: BootInstant::from_nanos(104 * S),
            grant_expiry: Some(BootInstant::from_nanos(100 * S)),
            last_renew_ok: Some(BootInstant::from_nanos(90 * S)),
            api_ok: false,
            lease_observed: true,
            ..Status::default()
        };
        assert!(leader
            .healthy(BootInstant::from_nanos(104 * S), d, p)
            .is_ok());
    }

    #[test]
    fn readyz_needs_an_observation_and_a_working_api() {
        let mut st = Status::default();
        assert!(st.ready().is_err());
        st.lease_observed = true;
        assert!(st.ready().is_err());
        st.api_ok = true;
        assert!(st.ready().is_ok());
    }
}
