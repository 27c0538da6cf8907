//! The Lease calls of the loop: renew, acquire, recreate, re-read, re-check. Each one races the
//! grant's expiry while leading, and every success goes through [`Elector::wrote`].
//!
//! Every attempt moves the next one forward: by the retry period after it was sent, and after a
//! failure (an error, or a conflict) by a backoff that starts at a quarter of the retry period
//! and doubles up to it. A call that fails fast — a forbidden create, a terminating namespace,
//! a webhook that refuses — therefore never turns into a tight loop.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;

use super::Elector;
use crate::clock::{self, BootInstant};
use crate::elect::lease_api::{observe, LeaseApi, LeaseApiError};
use crate::election::candidate::Source;
use crate::election::record::{self, Observed};
use crate::election::report::{self, TermStart};
use crate::election::{Candidate, Transition};

/// The first retry after a failure is never sooner than this, whatever the retry period.
const MIN_BACKOFF: Duration = Duration::from_millis(25);

impl Elector {
    /// One of our writes succeeded: keep the returned object (the base and precondition of the
    /// next write) and let the candidate judge it. Our own write's answer is authoritative.
    pub(super) fn wrote(
        &mut self,
        lease: Lease,
        judge: impl FnOnce(&mut Candidate, BootInstant, Observed) -> Option<Transition>,
    ) {
        let now = BootInstant::now();
        self.api_ok(true);
        self.failures = 0;
        self.last_heard = now;
        let observed = Observed::from_lease(&lease);
        self.current = Some(lease);
        let transition = judge(&mut self.candidate, now, observed);
        self.report_history_breaks();
        if let Some(t) = transition {
            self.apply(t, now);
        }
    }

    /// The Lease API for a call sent at `sent_at`: while leading, bounded by half of what is
    /// left of the grant (see [`crate::election::Timing::renew_timeout`]), so a call that stalls
    /// leaves as long again for the next attempt; otherwise by the API timeout.
    fn api_for(&self, sent_at: BootInstant) -> LeaseApi {
        match self.candidate.term() {
            Some(term) => {
                let remaining = term.expiry.saturating_since(sent_at);
                let timing = self.candidate.timing();
                self.api.with_timeout(timing.renew_timeout(remaining))
            }
            None => self.api.clone(),
        }
    }

    /// The backoff after the current streak of failures: a quarter of the retry period,
    /// doubling, at most the retry period.
    fn failure_backoff(&self) -> Duration {
        let retry = self.candidate.timing().retry_period;
        let first = (retry / 4).max(MIN_BACKOFF);
        first
            .saturating_mul(1 << self.failures.saturating_sub(1).min(16))
            .min(retry)
    }

    /// An attempt failed: count it and space the next one out.
    pub(super) fn attempt_failed(&mut self) {
        self.failures = self.failures.saturating_add(1);
        let next = BootInstant::now().saturating_add(self.failure_backoff());
        self.next_attempt = next;
    }

    /// After a conflict and a successful re-read: the first conflict of a streak is retried at
    /// once (our copy was merely stale), later ones wait their backoff.
    fn retry_after_conflict(&mut self) {
        self.failures = self.failures.saturating_add(1);
        self.next_attempt = if self.failures <= 1 {
            BootInstant::now()
        } else {
            BootInstant::now().saturating_add(self.failure_backoff())
        };
    }

    pub(super) async fn renew(&mut self) {
        let retry = self.candidate.timing().retry_period;
        let Some(current) = self.current.clone() else {
            // The watch saw the Lease deleted under us.
            self.recreate().await;
            return;
        };
        let mut desired = record::renewed(
            &current,
            self.candidate.holder_id(),
            self.candidate.timing().lease_duration_seconds(),
        );
        report::annotate(&mut desired, &self.holder_report(self.term_start));
        let sent_at = BootInstant::now();
        self.next_attempt = sent_at.saturating_add(retry);
        let api = self.api_for(sent_at);
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
                // Someone else wrote the Lease: re-read; if it still names us, renew again.
                // A failed re-read waits its backoff: retrying a stale copy at once would only
                // hammer the API with more conflicts.
                if self.refresh().await && self.candidate.is_leader() {
                    self.retry_after_conflict();
                } else {
                    self.attempt_failed();
                }
            }
            Err(LeaseApiError::NotFound) => {
                self.metrics.api_error("not_found");
                tracing::warn!("the Lease was deleted while we held it; recreating it");
                // What the API says now: a recreated Lease starts its transitions at 0 again,
                // which is no history break once its absence has been seen.
                self.observe(now, None, Source::Read { sent_at });
                self.recreate().await;
            }
            Err(e) => {
                self.api_failed("renew", &e);
                self.attempt_failed();
            }
        }
    }

    /// Recreates a deleted Lease while leading. Followers wait a full lease duration after
    /// seeing it absent, so our grant lapses before any of them may create it.
    pub(super) async fn recreate(&mut self) {
        let mut desired = record::new_lease(
            self.api.name(),
            self.api.namespace(),
            self.candidate.holder_id(),
            self.candidate.timing().lease_duration_seconds(),
        );
        report::annotate(&mut desired, &self.holder_report(self.term_start));
        let sent_at = BootInstant::now();
        self.next_attempt = sent_at.saturating_add(self.candidate.timing().retry_period);
        let api = self.api_for(sent_at);
        let result = self
            .race_expiry(async move { api.create(&desired).await })
            .await;
        match result {
            Ok(lease) => self.wrote(lease, |c, now, seen| c.renewed(sent_at, now, seen)),
            Err(LeaseApiError::Conflict) => {
                self.metrics.api_error("conflict");
                if self.refresh().await && self.candidate.is_leader() {
                    self.retry_after_conflict();
                } else {
                    self.attempt_failed();
                }
            }
            Err(e) => {
                self.api_failed("recreate", &e);
                self.attempt_failed();
            }
        }
    }

    pub(super) async fn acquire(&mut self) {
        let timing = *self.candidate.timing();
        let holder = self.candidate.holder_id().to_owned();
        let absent = matches!(self.candidate.observed(), Some(Observed::Absent));
        let vacancy = self.candidate.vacancy();
        let sent_at = BootInstant::now();
        self.next_attempt = sent_at.saturating_add(timing.retry_period);
        // The term this write begins, as the candidate will count it (see `Candidate::acquired`).
        let report = self.holder_report(vacancy.map(|v| TermStart {
            cause: v.cause,
            leaderless: sent_at.saturating_since(v.since),
        }));
        let api = self.api.clone();
        let result = if absent {
            let mut desired = record::new_lease(
                api.name(),
                api.namespace(),
                &holder,
                timing.lease_duration_seconds(),
            );
            report::annotate(&mut desired, &report);
            api.create(&desired).await
        } else {
            let Some(current) = self.current.clone() else {
                self.refresh().await;
                return;
            };
            let mut desired = record::acquired(&current, &holder, timing.lease_duration_seconds());
            report::annotate(&mut desired, &report);
            api.replace(&desired).await
        };
        let now = BootInstant::now();
        match result {
            Ok(lease) => {
                self.status.update(|s| s.holder = holder.clone());
                self.wrote(lease, |c, now, seen| c.acquired(sent_at, now, seen));
            }
            Err(LeaseApiError::Conflict) => {
                // Lost the race, or our copy was stale (a metadata edit): re-read; if the Lease
                // is still ours to take, try again.
                self.metrics.api_error("conflict");
                if self.refresh().await && self.candidate.may_acquire(BootInstant::now()) {
                    self.retry_after_conflict();
                } else {
                    self.attempt_failed();
                }
            }
            Err(LeaseApiError::NotFound) => {
                self.metrics.api_error("not_found");
                self.observe(now, None, Source::Read { sent_at });
                self.attempt_failed();
            }
            Err(e) => {
                self.api_failed("acquire", &e);
                self.attempt_failed();
            }
        }
    }

    /// Re-reads the Lease (after a conflict, or when we have no copy): what the API says now
    /// replaces the view. Returns whether the read succeeded.
    pub(super) async fn refresh(&mut self) -> bool {
        let sent_at = BootInstant::now();
        let api = self.api_for(sent_at);
        let result = self.race_expiry(async move { api.get().await }).await;
        match result {
            Ok(lease) => {
                self.api_ok(true);
                self.status.update(|s| s.lease_observed = true);
                self.observe(BootInstant::now(), lease, Source::Read { sent_at });
                true
            }
            Err(e) => {
                self.api_failed("get", &e);
                false
            }
        }
    }

    /// A follower's periodic re-read of a quiet Lease. If the Lease changed without the watch
    /// telling us, the watch is dead although it looks alive: restart it.
    pub(super) async fn recheck(&mut self) {
        let before = self
            .candidate
            .observed()
            .map(|o| o.resource_version().map(str::to_owned));
        let api = self.api.clone();
        let sent_at = BootInstant::now();
        match api.get().await {
            Ok(lease) => {
                self.api_ok(true);
                let now = BootInstant::now();
                let after = Some(
                    observe(lease.as_ref())
                        .resource_version()
                        .map(str::to_owned),
                );
                self.observe(now, lease, Source::Read { sent_at });
                if before.is_some() && before != after {
                    tracing::info!(
                        seen = ?before.flatten(),
                        now = ?after.flatten(),
                        "the Lease changed without a watch event; restarting the watch"
                    );
                    self.quiet_rechecks = 0;
                    self.restart_watch = true;
                } else {
                    self.quiet_rechecks = self.quiet_rechecks.saturating_add(1);
                }
                if self.candidate.may_acquire(now) && self.failures == 0 {
                    self.next_attempt = self.next_attempt.min(now);
                }
            }
            Err(e) => {
                self.api_failed("get", &e);
                self.last_heard = BootInstant::now();
                self.quiet_rechecks = self.quiet_rechecks.saturating_add(1);
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
