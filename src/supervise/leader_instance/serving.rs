//! The serving instance of `--on-change=leader-instance`: the app with the follower environment,
//! running from start to shutdown whatever the grant says, restarted only when it exits on its
//! own (with backoff).
//!
//! It is what every follower pod runs anyway, so on the leader pod it makes no Kubernetes writes
//! either; the grant-following child beside it (the leader instance) carries the operators and
//! every rule of the grant. Keeping this one out of the grant is the point: a handover never
//! takes the pod's HTTP down.

use std::time::Duration;

use nix::unistd::Pid;

use crate::clock::BootInstant;
use crate::grant::Mode;
use crate::supervise::mode::Backoff;
use crate::supervise::process::child::Exit;
use crate::supervise::process::instance::{Ended, Instance};
use crate::supervise::settings::Settings;
use crate::supervise::status::ServingStatus;

#[derive(Debug)]
pub struct Serving {
    instance: Instance,
    /// When it is restarted after it exited on its own or failed to start; kept while its group
    /// stops and while the backoff runs.
    restart_at: Option<BootInstant>,
    backoff: Backoff,
    restarts: u64,
    /// Set at shutdown: nothing starts again.
    shutting_down: bool,
    /// How it last ended; the supervisor exits with this at shutdown.
    last_exit: Option<Exit>,
    /// Its first start, held back by `--serving-head-start` (see [`Serving::start_after`]).
    first_start_at: Option<BootInstant>,
}

impl Serving {
    pub fn new(backoff: Backoff) -> Self {
        Serving {
            instance: Instance::idle(),
            restart_at: None,
            backoff,
            restarts: 0,
            shutting_down: false,
            last_exit: None,
            first_start_at: None,
        }
    }

    /// Its first start, at `at` instead of now: a supervisor that starts while its pod leads
    /// gives the leader instance's boot the CPU first. [`Serving::start_now_if_held`] ends the
    /// wait early.
    pub fn start_after(&mut self, at: BootInstant) {
        if self.instance.is_idle() && !self.shutting_down {
            self.first_start_at = Some(at);
        }
    }

    /// Whether its first start is held back (see [`Serving::start_after`]).
    pub fn first_start_held(&self) -> bool {
        self.first_start_at.is_some()
    }

    /// Starts it now if its first start is held back (the leader instance it waited for has
    /// booted or is gone); true if it was held.
    pub fn start_now_if_held(&mut self, settings: &Settings, now: BootInstant) -> bool {
        let held = self.first_start_at.take().is_some();
        if held {
            self.start(settings, now);
        }
        held
    }

    /// Starts it with the follower environment and arguments, unless it runs or is stopping.
    pub fn start(&mut self, settings: &Settings, now: BootInstant) {
        self.first_start_at = None;
        if self.shutting_down || !self.instance.is_idle() {
            return;
        }
        let after_crash = self.restart_at.is_some();
        match self.instance.spawn(
            &settings.command,
            &settings.follower_args,
            &settings.follower_env,
            Mode::Follower,
            now,
        ) {
            Ok(pid) => {
                if after_crash {
                    self.restarts += 1;
                }
                tracing::info!(pid = pid.as_raw(), restarts = self.restarts,
                    "serving instance started (follower environment; it runs whatever the grant says)");
                self.restart_at = None;
            }
            Err(e) => {
                let delay = self.backoff.on_exit(Duration::ZERO);
                tracing::error!(command = ?settings.command, error = %e,
                    retry_in = %crate::config::human(delay), "cannot start the serving instance");
                self.restart_at = Some(now.saturating_add(delay));
            }
        }
    }

    /// The main process, while it may be signalled.
    pub fn main_pid(&self) -> Option<Pid> {
        self.instance.main_pid()
    }

    /// Takes the exit of `pid` if it is this instance's main process. Returns `Some(exit)` when
    /// it ended on its own while running (not asked to stop), for `--exit-with-child`.
    pub fn on_exit(
        &mut self,
        pid: Pid,
        exit: Exit,
        now: BootInstant,
        kill_grace: Duration,
    ) -> Option<Option<Exit>> {
        let ended = self
            .instance
            .main_exited(pid, exit, |_| now.saturating_add(kill_grace))?;
        self.last_exit = Some(exit);
        match ended {
            Ended::OnItsOwn(r) => {
                let ran = now.saturating_since(r.started);
                let delay = self.backoff.on_exit(ran);
                tracing::warn!(pid = pid.as_raw(), %exit, ran_for = %crate::config::human(ran),
                    restart_in = %crate::config::human(delay),
                    "serving instance exited on its own; restarting");
                self.restart_at = Some(now.saturating_add(delay));
                Some(Some(exit))
            }
            Ended::Stopped { .. } => {
                tracing::info!(pid = pid.as_raw(), %exit, "serving instance stopped");
                Some(None)
            }
        }
    }

    /// When the loop must call [`Serving::tick`] next.
    pub fn wake_at(&self, now: BootInstant) -> Option<BootInstant> {
        if self.instance.is_stopping() {
            self.instance.wake_at(now)
        } else if self.instance.is_idle() && !self.shutting_down {
            self.start_due_at()
        } else {
            None
        }
    }

    /// When a start is due: a restart, or the first start held back by the head start.
    fn start_due_at(&self) -> Option<BootInstant> {
        self.restart_at.or(self.first_start_at)
    }

    /// Advances a stop and starts a restart that is due.
    pub fn tick(&mut self, settings: &Settings, now: BootInstant) {
        if self.instance.is_stopping() {
            let Some(gone) = self.instance.progress(now) else {
                return;
            };
            tracing::debug!(
                pgid = gone.pgid.as_raw(),
                "serving instance's process group gone"
            );
            if self.shutting_down {
                self.restart_at = None;
            }
        }
        if let (true, Some(at)) = (self.instance.is_idle(), self.start_due_at()) {
            if now >= at {
                self.start(settings, now);
            }
        }
    }

    /// Stops it for good: `signalled` when the shutdown signal was already forwarded to its main
    /// process (the rest of its group follows once that exits), else SIGTERM to the group.
    pub fn shutdown(&mut self, signalled: bool, now: BootInstant, kill_grace: Duration) {
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        self.restart_at = None;
        self.first_start_at = None;
        let kill_at = |_| now.saturating_add(kill_grace);
        if signalled {
            self.instance.signalled(kill_at);
        } else if let Some(pid) = self.instance.running().map(|r| r.pid) {
            tracing::info!(
                pid = pid.as_raw(),
                "stopping the serving instance's process group"
            );
            self.instance.stop(now, kill_at);
        }
        self.instance.progress(now);
    }

    /// Whether it is down for good (shut down and its group gone).
    pub fn gone(&self) -> bool {
        self.shutting_down && self.instance.is_idle()
    }

    /// How it last ended.
    pub fn last_exit(&self) -> Option<Exit> {
        self.last_exit
    }

    pub fn status(&self) -> ServingStatus {
        ServingStatus {
            mode: "follower".to_owned(),
            pid: self.instance.running().map(|r| r.pid.as_raw()),
            restarts: self.restarts,
        }
    }
}
