//! Start-up: adopt the Lease from the pod's previous elector process when the rules of
//! [`crate::election::adoption`] allow it, so the app keeps running in leader mode without a
//! restart; otherwise start as a follower.
//!
//! The order matters. A restarted elector used to publish `follower` first, which demoted (and,
//! with the retrofit, restarted) an app that was running under its predecessor's still valid
//! grant — and then waited a lease duration like everyone else. Now, while an adoption may still
//! happen, it publishes nothing: the predecessor's grant stays on disk and bounds the wait, since
//! it runs out on its own (the supervisor demotes at its expiry whatever we do). Follower is
//! published as soon as adoption is impossible: the first fresh view of the Lease that does not
//! qualify (another pod's, released, absent), a failed or conflicting adoption write, or the
//! inherited grant's expiry, whichever comes first.
//!
//! An app that kept failing as leader under the predecessor is not adopted: this process
//! finishes the step-down the predecessor was due to make — demote, wait for the ack, release
//! the predecessor's record — and sits out a lease duration.

use std::time::Duration;

use futures_util::StreamExt;
use signal_hook_tokio::Signals;

use super::Elector;
use crate::clock::{self, BootInstant};
use crate::elect::events::Kind;
use crate::elect::lease_api::{LeaseApiError, Watch, WatchItem};
use crate::election::adoption::{self, Decision};
use crate::election::candidate::Source;
use crate::election::identity::HolderIdentity;
use crate::election::record::{self, Observed};
use crate::election::report::{self, TermStart};
use crate::election::HandoverCause;

/// How the start-up ended.
pub(super) enum StartUp {
    /// Go on with the election loop (as leader after an adoption, else as follower).
    Running,
    /// A shutdown signal arrived while an adoption was pending; nothing was adopted.
    Shutdown,
}

impl Elector {
    /// Adopts the Lease or publishes follower; see the module documentation.
    pub(super) async fn start_up(&mut self, watch: &mut Watch, signals: &mut Signals) -> StartUp {
        let now = BootInstant::now();
        let inheritance = self.inheritance.take();
        let window = inheritance.as_ref().and_then(|i| i.window(now));
        let has_uid = HolderIdentity::parse(self.candidate.holder_id()).is_some();
        let (Some(inherited), Some(until), true) = (inheritance, window, has_uid) else {
            if window.is_some() {
                tracing::info!(
                    "the previous elector of this pod left a live leader grant, but this elector \
                     knows no pod UID (--pod-uid, POD_UID): it cannot prove it is the same pod, so \
                     it does not adopt; starting as follower"
                );
                self.adoption_declined(
                    "this elector knows no pod UID (POD_UID), so it cannot prove the Lease's \
                     holder was this pod",
                );
            }
            self.publish_follower();
            return StartUp::Running;
        };
        self.adopting = true;
        tracing::info!(
            predecessor = %inherited.holder,
            window = ?until.saturating_since(now),
            "the previous elector of this pod left a live leader grant: reading the Lease before \
             publishing anything"
        );
        let retry = self.candidate.timing().retry_period;
        // The first fresh view of the Lease, within the window.
        let viewed = loop {
            tokio::select! {
                biased;
                _ = clock::sleep_until(until) => break false,
                _ = signals.next() => {
                    tracing::info!("shutdown requested during start-up; not adopting");
                    self.adopting = false;
                    return StartUp::Shutdown;
                }
                item = watch.recv() => match item {
                    Some(item) => {
                        let view = !matches!(item, WatchItem::Error(_));
                        self.on_watch(item);
                        if view && self.candidate.observed().is_some() {
                            break true;
                        }
                    }
                    None => *watch = self.api.spawn_watch(retry),
                },
                _ = clock::sleep(Duration::from_millis(500)) => {
                    self.status.update(|s| s.loop_heartbeat = BootInstant::now());
                }
            }
        };
        if viewed {
            let observed = self
                .candidate
                .observed()
                .cloned()
                .unwrap_or(Observed::Absent);
            let decision = adoption::decide(
                self.candidate.holder_id(),
                &observed,
                Some(&inherited),
                BootInstant::now(),
                self.step_down.max_failures(),
            );
            match decision {
                Decision::Adopt { from } => self.adopt(&from, until).await,
                Decision::Release { from, failures } => {
                    self.adoption_declined(&format!(
                        "the app exited on its own {failures} times in a row as leader under the \
                         previous elector: finishing its step-down"
                    ));
                    self.finish_step_down(from, failures).await
                }
                Decision::Decline(why) => {
                    tracing::info!(reason = %why, "not adopting the Lease; starting as follower");
                    self.adoption_declined(&why.to_string());
                }
            }
        } else {
            tracing::info!(
                "the inherited grant expired before the Lease could be read; starting as follower"
            );
            self.adoption_declined(
                "the previous elector's grant expired before the Lease could be read",
            );
        }
        self.adopting = false;
        if !self.candidate.is_leader() {
            self.publish_follower();
        }
        StartUp::Running
    }

    /// The one adoption write: the record as we read it, under our identity, conditional on its
    /// resourceVersion. The inherited grant's expiry still bounds the wait for the answer: at
    /// that instant follower is published (the supervisor has demoted by itself anyway); an
    /// answer that comes later and says we hold the Lease still grants, from the write's send
    /// time like any acquisition.
    async fn adopt(&mut self, from: &str, until: BootInstant) {
        let Some(current) = self.current.clone() else {
            return;
        };
        let timing = *self.candidate.timing();
        let mut desired = record::adopted(
            &current,
            self.candidate.holder_id(),
            timing.lease_duration_seconds(),
        );
        let term = TermStart {
            cause: HandoverCause::Adopted,
            leaderless: Duration::ZERO,
        };
        report::annotate(&mut desired, &self.holder_report(Some(term)));
        let sent_at = BootInstant::now();
        self.next_attempt = sent_at.saturating_add(timing.retry_period);
        let api = self.api.clone();
        let mut call = std::pin::pin!(async move { api.replace(&desired).await });
        let mut lapsed = false;
        let result = loop {
            tokio::select! {
                biased;
                out = &mut call => break out,
                _ = clock::sleep_until(until), if !lapsed => {
                    lapsed = true;
                    self.adopting = false;
                    tracing::warn!("the inherited grant expired while the adoption was being \
                        written; follower until the answer");
                    self.publish_follower();
                }
            }
        };
        match result {
            Ok(lease) => {
                let from = from.to_owned();
                self.wrote(lease, move |c, now, seen| {
                    c.adopted(sent_at, now, seen, &from)
                });
            }
            Err(LeaseApiError::Conflict) => {
                self.metrics.api_error("conflict");
                tracing::info!(
                    "the Lease changed before the adoption could be written (another pod took \
                     it, or the previous elector still renews): not adopting"
                );
                self.adoption_declined(
                    "the Lease changed before the adoption could be written (another pod took \
                     it, or the previous elector still renews)",
                );
                self.refresh().await;
                self.attempt_failed();
            }
            Err(LeaseApiError::NotFound) => {
                self.metrics.api_error("not_found");
                self.observe(BootInstant::now(), None, Source::Read { sent_at });
                self.attempt_failed();
            }
            Err(e) => {
                self.api_failed("adopt", &e);
                self.attempt_failed();
            }
        }
    }

    /// Says why the Lease the previous elector of this pod held is not adopted (an Event).
    fn adoption_declined(&self, why: &str) {
        self.event(
            Kind::Normal,
            "AdoptionDeclined",
            format!("not adopting the Lease from this pod's previous elector: {why}; starting as follower"),
        );
    }

    /// The app kept exiting as leader under the predecessor: demote it with our own objects,
    /// wait for its ack (or the inherited grant's expiry, kill grace and margin), release the
    /// predecessor's record, and sit out a lease duration so another pod can try.
    async fn finish_step_down(&mut self, from: String, failures: u64) {
        let sit_out = self.candidate.timing().lease_duration;
        tracing::warn!(failures, predecessor = %from, sit_out = ?sit_out,
            "the app kept exiting as leader under the previous elector of this pod: finishing its \
             step-down (demote, ack, release) instead of adopting");
        self.adopting = false;
        self.predecessor = Some(from);
        self.hand_over(None).await;
        self.predecessor = None;
        self.step_down
            .sit_out(BootInstant::now().saturating_add(sit_out));
    }
}
