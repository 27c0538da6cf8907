//! The Lease calls of the loop: renew, acquire, recreate, re-read. Each one races the grant's
//! expiry while leading, and every success goes through [`Elector::wrote`].

use std::future::Future;

use k8s_openapi::api::coordination::v1::Lease;

use super::Elector;
use crate::clock::{self, BootInstant};
use crate::election::lease_api::{observe, LeaseApiError};
use crate::election::record::{self, Observed};
use crate::election::{Candidate, Transition};

impl Elector {
    /// One of our writes succeeded: keep the returned object (the base and precondition of the
    /// next write) and let the candidate judge it.
    fn wrote(
        &mut self,
        lease: Lease,
        judge: impl FnOnce(&mut Candidate, BootInstant, Observed) -> Option<Transition>,
    ) {
        let now = BootInstant::now();
        self.api_ok(true);
        let observed = Observed::from_lease(&lease);
        self.current = Some(lease);
        if let Some(t) = judge(&mut self.candidate, now, observed) {
            self.apply(t, now);
        }
    }

    pub(super) async fn renew(&mut self) {
        let retry = self.candidate.timing().retry_period;
        let Some(current) = self.current.clone() else {
            // The watch saw the Lease deleted under us.
            self.recreate().await;
            return;
        };
        let desired = record::renewed(
            &current,
            self.candidate.holder_id(),
            self.candidate.timing().lease_duration_seconds(),
        );
        let sent_at = BootInstant::now();
        self.next_attempt = sent_at.saturating_add(retry);
        let api = self.api.clone();
        let result = self
            .race_expiry(async move { api.replace(&desired).await })
            .await;
        let now = BootInstant::now();
        match result {
            Ok(lease) => {
                self.metrics
                    .renew_latency
                    .observe(now.saturating_since(sent_at).as_secs_f64());
                self.wrote(lease, |c, now, seen| c.renewed(sent_at, now, seen));
            }
            Err(LeaseApiError::Conflict) => {
                self.metrics.api_error("conflict");
                // Someone else wrote the Lease: re-read; if it still names us, renew again at once.
                // A failed re-read waits the retry period: retrying a stale copy at once would
                // only hammer the API with more conflicts.
                if self.refresh().await && self.candidate.is_leader() {
                    self.next_attempt = BootInstant::now();
                }
            }
            Err(LeaseApiError::NotFound) => {
                self.metrics.api_error("not_found");
                tracing::warn!("the Lease was deleted while we held it; recreating it");
                self.recreate().await;
            }
            Err(e) => self.api_failed("renew", &e),
        }
    }

    /// Recreates a deleted Lease while leading. Followers wait a full lease duration after
    /// seeing it absent, so our grant lapses before any of them may create it.
    pub(super) async fn recreate(&mut self) {
        let desired = record::new_lease(
            self.api.name(),
            self.api.namespace(),
            self.candidate.holder_id(),
            self.candidate.timing().lease_duration_seconds(),
        );
        let sent_at = BootInstant::now();
        let api = self.api.clone();
        let result = self
            .race_expiry(async move { api.create(&desired).await })
            .await;
        match result {
            Ok(lease) => self.wrote(lease, |c, now, seen| c.renewed(sent_at, now, seen)),
            Err(LeaseApiError::Conflict) => {
                self.refresh().await;
            }
            Err(e) => self.api_failed("recreate", &e),
        }
    }

    pub(super) async fn acquire(&mut self) {
        let timing = *self.candidate.timing();
        let holder = self.candidate.holder_id().to_owned();
        let absent = matches!(self.candidate.observed(), Some(Observed::Absent));
        let sent_at = BootInstant::now();
        self.next_attempt = sent_at.saturating_add(timing.retry_period);
        let api = self.api.clone();
        let result = if absent {
            let desired = record::new_lease(
                api.name(),
                api.namespace(),
                &holder,
                timing.lease_duration_seconds(),
            );
            api.create(&desired).await
        } else {
            let Some(current) = self.current.clone() else {
                self.refresh().await;
                return;
            };
            api.replace(&record::acquired(
                &current,
                &holder,
                timing.lease_duration_seconds(),
            ))
            .await
        };
        let now = BootInstant::now();
        match result {
            Ok(lease) => {
                self.status.update(|s| s.holder = holder.clone());
                self.wrote(lease, |c, now, seen| c.acquired(sent_at, now, seen));
            }
            Err(LeaseApiError::Conflict) => {
                // Lost the race (or our copy was stale): re-read and keep following.
                self.metrics.api_error("conflict");
                self.refresh().await;
            }
            Err(LeaseApiError::NotFound) => {
                self.metrics.api_error("not_found");
                self.remember(None);
                self.observe(now, Observed::Absent, true);
            }
            Err(e) => self.api_failed("acquire", &e),
        }
    }

    /// Re-reads the Lease (after a conflict, or when we have no copy).
    /// Returns whether the read succeeded.
    pub(super) async fn refresh(&mut self) -> bool {
        let api = self.api.clone();
        let result = self.race_expiry(async move { api.get().await }).await;
        match result {
            Ok(lease) => {
                self.api_ok(true);
                self.status.update(|s| s.lease_observed = true);
                self.current = lease.clone();
                self.observe(BootInstant::now(), observe(lease.as_ref()), true);
                true
            }
            Err(e) => {
                self.api_failed("get", &e);
                false
            }
        }
    }

    /// Runs an API call while keeping the dead man's switch: if the grant lapses before the
    /// call returns, the demotion is published at the expiry instant, then the call finishes.
    pub(super) async fn race_expiry<T>(&mut self, call: impl Future<Output = T>) -> T {
        let mut call = std::pin::pin!(call);
        loop {
            let Some(expiry) = self.candidate.term().map(|t| t.expiry) else {
                return call.await;
            };
            tokio::select! {
                biased;
                out = &mut call => return out,
                _ = clock::sleep_until(expiry) => {
                    let now = BootInstant::now();
                    if let Some(t) = self.candidate.tick(now) {
                        self.apply(t, now);
                    }
                }
            }
        }
    }

    pub(super) fn api_ok(&self, ok: bool) {
        self.status.update(|s| s.api_ok = ok);
    }

    pub(super) fn api_failed(&mut self, what: &'static str, e: &LeaseApiError) {
        self.metrics.api_error(e.kind());
        self.api_ok(false);
        if self.candidate.is_leader() {
            tracing::warn!(call = what, error = %e, "Lease call failed; the grant lapses unless a renew succeeds in time");
        } else {
            tracing::debug!(call = what, error = %e, "Lease call failed");
        }
    }
}
