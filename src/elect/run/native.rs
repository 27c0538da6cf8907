//! Passmower's own Lease held beside ours (`--native-lease`; the rule and why are in
//! [`crate::elect::native_lease`]): a follower's reads, the take before an acquisition of ours,
//! the leader's renewal before each of ours and its bound, the clear after a hand-over, and the
//! clear once the app has stopped after a term that ended without one (a lapsed grant, a lost
//! Lease), or after a take that did not lead.

use super::Elector;
use crate::clock::BootInstant;
use crate::elect::lease_api::{LeaseApi, LeaseApiError};
use crate::elect::native_lease::{NativeLease, Verdict};
use crate::election::StopReason;

/// Upstream's Lease and what this elector knows of it.
pub(super) struct Native {
    pub(super) api: LeaseApi,
    pub(super) lease: NativeLease,
    /// When it was last read: a follower reads it once a retry period.
    read_at: Option<BootInstant>,
    /// The holder last said to keep this pod from leading, so the log says it once.
    waiting_for: Option<String>,
    /// Set when the API forbade a call on it (the RBAC lacks get or update on that Lease):
    /// from then on this elector elects as without `--native-lease`, as it did before the
    /// flag existed, and says so, rather than never leading at all.
    forbidden: bool,
    /// When to clear it after a term of ours that ended without a hand-over: once the app has
    /// stopped for sure. Left alone, upstream's election would wait for it to go unrenewed for
    /// its whole duration.
    release_at: Option<BootInstant>,
    /// The earliest instant at which a clear without an ack is safe: the end of the last term
    /// of ours (the leader grant still on disk, else the demotion) plus the kill grace and the
    /// margin, the dead man's switch's bound. Only ever moves later; every clear but a
    /// hand-over's (which waited for the ack or this very bound) waits for it.
    not_before: Option<BootInstant>,
}

impl Native {
    pub(super) fn new(api: LeaseApi, identity: &str) -> Native {
        Native {
            api,
            lease: NativeLease::new(identity),
            read_at: None,
            waiting_for: None,
            forbidden: false,
            release_at: None,
            not_before: None,
        }
    }

    /// Whether `e` is the API forbidding calls on it: then the guard is off (see `forbidden`).
    fn forbids(&mut self, e: &LeaseApiError) -> bool {
        if let LeaseApiError::Forbidden(why) = e {
            if !self.forbidden {
                tracing::error!(lease = %self.api.reference(), %why,
                    "not allowed to read or write Passmower's own Lease: electing without \
                     holding it, so pods running Passmower's own election are not kept from \
                     running operators beside ours; grant get and update on it (inject's Role \
                     does)");
            }
            self.forbidden = true;
        }
        self.forbidden
    }

    /// Writes it naming this pod through `api` (a create when it was absent, else a replace
    /// conditional on the last answer), and records the write.
    async fn write_ours(&mut self, api: &LeaseApi, duration: i32) -> Result<(), LeaseApiError> {
        let desired = self.lease.held_by_us(api.namespace(), api.name(), duration);
        let sent_at = BootInstant::now();
        let written = if self.lease.current().is_none() {
            api.create(&desired).await?
        } else {
            api.replace(&desired).await?
        };
        self.lease.wrote(written, sent_at, BootInstant::now());
        Ok(())
    }

    /// Until when, seen at `now`, a clear without an ack is not yet safe ([`Native::not_before`]).
    fn unsafe_until(&self, now: BootInstant) -> Option<BootInstant> {
        self.not_before.filter(|b| now < *b)
    }

    /// A fresh read; false when it failed (nothing is concluded from an old answer).
    async fn read(&mut self) -> bool {
        let sent_at = BootInstant::now();
        match self.api.get().await {
            Ok(lease) => {
                self.lease.observe(lease, BootInstant::now());
                self.read_at = Some(sent_at);
                true
            }
            Err(e) => {
                if !self.forbids(&e) {
                    tracing::warn!(lease = %self.api.reference(), error = %e,
                        "cannot read Passmower's own Lease");
                }
                false
            }
        }
    }
}

/// What the leader's renewal of upstream's Lease found.
pub(super) enum Renewal {
    /// Written, or not this time for a reason the bound covers (an error, a stale copy).
    Kept,
    /// Another holder has it: step down now.
    Taken(String),
}

impl Elector {
    /// A follower keeps its sight of upstream's Lease current, at most once a retry period: the
    /// wait for another holder runs from the first sight of its current version.
    pub(super) async fn native_observe(&mut self, now: BootInstant) {
        let retry = self.candidate.timing().retry_period;
        let Some(native) = self.native.as_mut().filter(|n| !n.forbidden) else {
            return;
        };
        if native
            .read_at
            .is_some_and(|at| now.saturating_since(at) < retry)
        {
            return;
        }
        native.read().await;
    }

    /// Before an acquisition of ours: a fresh read of upstream's Lease and, when it is free
    /// (or ours), a write naming this pod. False keeps this pod from trying ours now.
    pub(super) async fn native_take(&mut self) -> bool {
        let duration = self.candidate.timing().lease_duration_seconds();
        let Some(native) = self.native.as_mut().filter(|n| !n.forbidden) else {
            return true;
        };
        if !native.read().await {
            return native.forbidden;
        }
        match native.lease.verdict(BootInstant::now()) {
            None => return false,
            Some(Verdict::Held { holder, free_at }) => {
                if native.waiting_for.as_deref() != Some(holder.as_str()) {
                    tracing::info!(lease = %native.api.reference(), %holder,
                        free_in = ?free_at.saturating_since(BootInstant::now()),
                        "Passmower's own election holds its Lease: not taking ours until it is \
                         released or has not changed for its lease duration");
                    native.waiting_for = Some(holder);
                }
                return false;
            }
            Some(Verdict::Absent | Verdict::Free | Verdict::Ours) => {}
        }
        native.waiting_for = None;
        let api = native.api.clone();
        let result = native.write_ours(&api, duration).await;
        match result {
            Ok(()) => true,
            Err(e) => {
                if native.forbids(&e) {
                    return true;
                }
                // A conflict: another writer came first; the next attempt reads it again.
                tracing::info!(lease = %native.api.reference(), error = %e,
                    "could not take Passmower's own Lease; not taking ours this time");
                false
            }
        }
    }

    /// The leader's renewal of upstream's Lease, sent before each renewal of ours and bounded
    /// by what is left of the grant.
    pub(super) async fn native_renew(&mut self) -> Renewal {
        let duration = self.candidate.timing().lease_duration_seconds();
        let remaining = self
            .candidate
            .term()
            .map(|t| t.expiry.saturating_since(BootInstant::now()));
        let timing = *self.candidate.timing();
        let Some(native) = self.native.as_mut().filter(|n| !n.forbidden) else {
            return Renewal::Kept;
        };
        let api = match remaining {
            Some(left) => native.api.with_timeout(timing.renew_timeout(left)),
            None => native.api.clone(),
        };
        if native.lease.current().is_none() && !native.read().await {
            return Renewal::Kept;
        }
        match native.lease.verdict(BootInstant::now()) {
            Some(Verdict::Held { holder, .. }) => return Renewal::Taken(holder),
            None => return Renewal::Kept,
            Some(_) => {}
        }
        let result = native.write_ours(&api, duration).await;
        match result {
            Ok(()) => Renewal::Kept,
            Err(LeaseApiError::Conflict | LeaseApiError::NotFound) => {
                // Changed under us: read it; another holder means it was taken.
                if native.read().await {
                    if let Some(Verdict::Held { holder, .. }) =
                        native.lease.verdict(BootInstant::now())
                    {
                        return Renewal::Taken(holder);
                    }
                }
                Renewal::Kept
            }
            Err(e) => {
                if !native.forbids(&e) {
                    tracing::warn!(lease = %api.reference(), error = %e,
                        "could not renew Passmower's own Lease");
                }
                Renewal::Kept
            }
        }
    }

    /// While leading: renews upstream's Lease and steps down when another holder has it or
    /// when no renewal of it has succeeded for the renew deadline. True when this pod still
    /// leads.
    pub(super) async fn native_keep(&mut self) -> bool {
        if self.native.as_ref().is_none_or(|n| n.forbidden) || !self.candidate.is_leader() {
            return true;
        }
        let reason = match self.native_renew().await {
            Renewal::Taken(holder) => Some(StopReason::NativeLeaseTaken { holder }),
            Renewal::Kept => {
                let deadline = self.candidate.timing().renew_deadline;
                let overdue = self
                    .native
                    .as_ref()
                    .is_some_and(|n| !n.forbidden && n.lease.overdue(BootInstant::now(), deadline));
                overdue.then_some(StopReason::NativeLeaseLost)
            }
        };
        let Some(reason) = reason else {
            return true;
        };
        tracing::warn!(%reason, "stepping down");
        if let Some(n) = self.native.as_mut() {
            n.lease.forget_write();
        }
        self.step_down(reason, BootInstant::now()).await;
        false
    }

    /// After a hand-over (the demotion acked or its kill grace over): clears upstream's Lease if
    /// it names this pod, as upstream's own `stop()` does, so its election may take it at its
    /// next tick. The hand-over's own wait is the proof that the app has stopped.
    pub(super) async fn native_release_handed_over(&mut self) {
        self.clear_native().await;
    }

    /// Clears upstream's Lease if it names this pod, once a clear without an ack is safe (see
    /// [`Native::not_before`]): at once when it is, else it is scheduled for then. After a take
    /// that did not lead, and when a pending clear is due.
    pub(super) async fn native_release(&mut self) {
        let Some(native) = self.native.as_mut() else {
            return;
        };
        if let Some(bound) = native.unsafe_until(BootInstant::now()) {
            native.release_at = Some(native.release_at.map_or(bound, |at| at.max(bound)));
            return;
        }
        self.clear_native().await;
    }

    /// At shutdown, not leading: clears it only when that is safe now; otherwise it is left to
    /// expire (a process that is going away cannot wait for the bound).
    pub(super) async fn native_release_at_shutdown(&mut self) {
        let safe = self
            .native
            .as_ref()
            .is_some_and(|n| n.unsafe_until(BootInstant::now()).is_none());
        if safe {
            self.clear_native().await;
        }
    }

    async fn clear_native(&mut self) {
        let Some(native) = self.native.as_mut() else {
            return;
        };
        native.release_at = None;
        native.lease.forget_write();
        let Some(desired) = native.lease.released() else {
            return;
        };
        match native.api.replace(&desired).await {
            Ok(lease) => {
                tracing::info!(lease = %native.api.reference(), "released Passmower's own Lease");
                native.lease.observe(Some(lease), BootInstant::now());
            }
            // Someone wrote it since our last answer. Still naming this pod, it can only be
            // another process under the same pod name (a recreated StatefulSet pod, an old one
            // cut off): that hold is not ours to clear. Read it again and let it expire.
            Err(LeaseApiError::Conflict) => {
                native.read().await;
                tracing::warn!(lease = %native.api.reference(),
                    "Passmower's own Lease changed since this elector last wrote it; not \
                     clearing it, it expires on its own");
            }
            Err(e) => {
                tracing::warn!(lease = %native.api.reference(), error = %e,
                    "could not release Passmower's own Lease; it expires on its own");
            }
        }
    }

    /// A term of ours ended (a hand-over clears upstream's Lease itself once the app has
    /// acked): the app has stopped for sure at `at`; clear it then unless this pod leads again
    /// by then. Both instants only move later.
    pub(super) fn native_release_after(&mut self, at: BootInstant) {
        if let Some(native) = self.native.as_mut() {
            native.not_before = Some(native.not_before.map_or(at, |b| b.max(at)));
            native.release_at = Some(native.release_at.map_or(at, |r| r.max(at)));
        }
    }

    /// A new term: nothing to clear.
    pub(super) fn native_keep_held(&mut self) {
        if let Some(native) = self.native.as_mut() {
            native.release_at = None;
        }
    }

    /// When a pending clear is due (see [`Native::release_at`]).
    pub(super) fn native_release_at(&self) -> Option<BootInstant> {
        self.native.as_ref()?.release_at
    }
}
