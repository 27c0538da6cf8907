//! The loop's part for `--on-change=lease-bridge`: telling the one process's lease bridge the
//! grant, holding acks until the app's election has taken it in, and refusing an app whose
//! election never reads its Lease through the bridge. Methods of the one [`Supervisor`], so the
//! loop stays the only writer.

use nix::unistd::Pid;

use super::{Shutdown, Supervisor};
use crate::clock::BootInstant;
use crate::grant::Mode;
use crate::supervise::lease_bridge::{self, Said, Tracker};

/// The lease bridge of the process that runs now (see `lease_bridge.rs`).
#[derive(Debug)]
pub(super) struct Bridged {
    /// Its start's number: what its preload says is tagged with it.
    pub(super) start: u64,
    pub(super) tracker: Tracker,
    pub(super) link: Option<lease_bridge::Link>,
}

impl Bridged {
    fn tell(&mut self, mode: Mode) {
        let line = self.tracker.tell(mode);
        if let Some(Err(e)) = self.link.as_ref().map(|l| l.send(&line)) {
            tracing::warn!(error = %e, %mode, "cannot tell the lease bridge the grant; \
                nothing is acked until the app's election has taken it in");
        }
    }
}

impl Supervisor {
    /// Tells the running follower's lease bridge that it leads now; the promotion counts as a
    /// leader start. Only promotions come here: a demotion ends the process (`mode::step`), so no
    /// running process is ever told to stand down.
    pub(super) fn bridge_promote(&mut self) {
        let Some(r) = self.child.running_mut() else {
            return;
        };
        tracing::info!(pid = r.pid.as_raw(), from = %r.mode, to = %Mode::Leader,
            "telling the app's election the grant through the lease bridge");
        r.mode = Mode::Leader;
        if let Some(b) = &mut self.bridge {
            b.tell(Mode::Leader);
        }
        self.leader_starts = self.leader_starts.saturating_add(1);
    }

    /// Whether acks must wait, with `--on-change=lease-bridge`: the running process has not yet
    /// shown that its election follows the bridge, or has not taken the last grant in. Never at
    /// shutdown. With no process running (a crash's backoff) acks go as in the other modes, with
    /// the failed leader starts the elector steps down on.
    pub(super) fn bridge_holds_acks(&self) -> bool {
        if self.shutdown.is_some() || self.child.running().is_none() {
            return false;
        }
        self.bridge.as_ref().is_some_and(|b| b.tracker.waiting())
    }

    /// When the running process's bridge must be looked at again (see [`Tracker::wake_at`]).
    pub(super) fn bridge_wake_at(&self) -> Option<BootInstant> {
        self.child.running()?;
        self.bridge.as_ref()?.tracker.wake_at()
    }

    pub(super) fn on_bridge(&mut self, (start, said): (u64, Said)) {
        let Some(b) = self.bridge.as_mut().filter(|b| b.start == start) else {
            return; // an earlier process's
        };
        match said {
            Said::Ready => tracing::debug!(start, "lease bridge in place"),
            Said::Broken(why) => self.refuse_bridge(&format!("its preload says: {why}")),
            Said::Read { n, us } => {
                let first = !b.tracker.proven();
                let taken = b.tracker.on_read(n, us);
                if first {
                    tracing::info!(
                        start,
                        "the app's election reads its Lease through the lease bridge"
                    );
                }
                if let Some(mode) = taken {
                    tracing::info!(%mode, "the app's election has taken the grant in");
                }
                if first || taken.is_some() {
                    self.reconcile();
                }
            }
            Said::Closed => tracing::debug!(start, "lease bridge socket closed"),
        }
    }

    pub(super) fn on_bridge_due(&mut self) {
        let now = BootInstant::now();
        let Some(b) = &self.bridge else {
            return;
        };
        if b.tracker.unproven_at(now) {
            self.refuse_bridge(&format!(
                "no read of its Lease came through the bridge within {} of its start",
                crate::config::human(lease_bridge::PROOF_WITHIN)
            ));
        }
    }

    /// The app's election does not go through the lease bridge: it would elect on its own beside
    /// ours. Stop it and exit 2; nothing was acked for it, so the pod never contended.
    pub(super) fn refuse_bridge(&mut self, why: &str) {
        if self.shutdown.is_some() {
            return;
        }
        tracing::error!(%why,
            "the app's leader election does not go through the lease bridge, so it would elect on \
             its own beside the elector; refusing to run it. Use --on-change=leader-instance (the \
             two-instance mode, with LEADER_ELECTION_ENABLED=false) for this Passmower");
        self.shutdown = Some(Shutdown { exit_code: Some(2) });
        self.crash_hold = None;
        self.reconcile();
    }

    /// Starts the one process of `--on-change=lease-bridge` with a fresh bridge socket, and
    /// tells its bridge the mode at once (the preload answers "held by another" until then).
    pub(super) fn spawn_bridged(&mut self, m: Mode, now: BootInstant) -> std::io::Result<Pid> {
        let pair = lease_bridge::Pair::open()?;
        let mut env = self.settings.bridge.clone().unwrap_or_default();
        env.push(pair.env());
        let pid = self.child.spawn(
            &self.settings.command,
            &self.settings.follower_args,
            &env,
            m,
            now,
        )?;
        self.bridge_starts += 1;
        let start = self.bridge_starts;
        let link = pair
            .link(start, self.bridge_tx.clone())
            .inspect_err(|e| {
                tracing::error!(error = %e, "cannot read the lease bridge's socket; the process \
                    cannot show that its election follows the grant, and is refused");
            })
            .ok();
        let mut bridged = Bridged {
            start,
            tracker: Tracker::started(now),
            link,
        };
        bridged.tell(m);
        self.bridge = Some(bridged);
        Ok(pid)
    }
}
