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

use super::child::{self, Exit};
use super::mode::Backoff;
use super::settings::Settings;
use super::status::ServingStatus;
use super::stop::GroupStop;
use crate::clock::BootInstant;

/// How often a stop checks whether the group is gone (as for the grant-following child).
const STOP_POLL: Duration = Duration::from_millis(5);

#[derive(Debug)]
enum State {
    /// Not running: before the first start, waiting out a restart backoff (`restart_at`), or
    /// done at shutdown.
    Idle {
        restart_at: Option<BootInstant>,
    },
    Running {
        pid: Pid,
        started: BootInstant,
    },
    /// Its group is going: after it exited on its own (then `restart_at` follows), or at
    /// shutdown.
    Stopping {
        stop: GroupStop,
        restart_at: Option<BootInstant>,
    },
}

#[derive(Debug)]
pub struct Serving {
    state: State,
    backoff: Backoff,
    restarts: u64,
    /// Set at shutdown: nothing starts again.
    shutting_down: bool,
    /// How it last ended; the supervisor exits with this at shutdown.
    last_exit: Option<Exit>,
}

impl Serving {
    pub fn new(backoff: Backoff) -> Self {
        Serving {
            state: State::Idle { restart_at: None },
            backoff,
            restarts: 0,
            shutting_down: false,
            last_exit: None,
        }
    }

    /// Starts it with the follower environment and arguments, unless it runs or is stopping.
    pub fn start(&mut self, settings: &Settings, now: BootInstant) {
        if self.shutting_down || !matches!(self.state, State::Idle { .. }) {
            return;
        }
        let after_crash = matches!(
            self.state,
            State::Idle {
                restart_at: Some(_)
            }
        );
        match child::spawn(
            &settings.command,
            &settings.follower_args,
            &settings.follower_env,
        ) {
            Ok(pid) => {
                if after_crash {
                    self.restarts += 1;
                }
                tracing::info!(pid = pid.as_raw(), restarts = self.restarts,
                    "serving instance started (follower environment; it runs whatever the grant says)");
                self.state = State::Running { pid, started: now };
            }
            Err(e) => {
                let delay = self.backoff.on_exit(Duration::ZERO);
                tracing::error!(command = ?settings.command, error = %e,
                    retry_in = %crate::config::human(delay), "cannot start the serving instance");
                self.state = State::Idle {
                    restart_at: Some(now.saturating_add(delay)),
                };
            }
        }
    }

    /// The main process, while it may be signalled.
    pub fn main_pid(&self) -> Option<Pid> {
        match &self.state {
            State::Running { pid, .. } => Some(*pid),
            State::Stopping { stop, .. } if stop.main_alive => Some(stop.pgid),
            _ => None,
        }
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
        if self.main_pid() != Some(pid) {
            return None;
        }
        self.last_exit = Some(exit);
        match &mut self.state {
            State::Running { started, .. } => {
                let ran = now.saturating_since(*started);
                let delay = self.backoff.on_exit(ran);
                tracing::warn!(pid = pid.as_raw(), %exit, ran_for = %crate::config::human(ran),
                    restart_in = %crate::config::human(delay),
                    "serving instance exited on its own; restarting");
                self.state = State::Stopping {
                    stop: GroupStop::exited(pid, exit, now.saturating_add(kill_grace)),
                    restart_at: Some(now.saturating_add(delay)),
                };
                Some(Some(exit))
            }
            State::Stopping { stop, .. } => {
                tracing::info!(pid = pid.as_raw(), %exit, "serving instance stopped");
                stop.main_exited(exit);
                Some(None)
            }
            State::Idle { .. } => Some(None),
        }
    }

    /// When the loop must call [`Serving::tick`] next.
    pub fn wake_at(&self, now: BootInstant) -> Option<BootInstant> {
        match &self.state {
            State::Idle { restart_at } if !self.shutting_down => *restart_at,
            State::Stopping { .. } => Some(now.saturating_add(STOP_POLL)),
            _ => None,
        }
    }

    /// Advances a stop and starts a restart that is due.
    pub fn tick(&mut self, settings: &Settings, now: BootInstant) {
        if let State::Stopping { stop, restart_at } = &mut self.state {
            if !stop.progress(now) {
                return;
            }
            tracing::debug!(
                pgid = stop.pgid.as_raw(),
                "serving instance's process group gone"
            );
            let restart_at = if self.shutting_down {
                None
            } else {
                *restart_at
            };
            self.state = State::Idle { restart_at };
        }
        if let State::Idle {
            restart_at: Some(at),
        } = self.state
        {
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
        let kill_at = now.saturating_add(kill_grace);
        self.state = match std::mem::replace(&mut self.state, State::Idle { restart_at: None }) {
            State::Running { pid, .. } if signalled => State::Stopping {
                stop: GroupStop::signalled(pid, kill_at),
                restart_at: None,
            },
            State::Running { pid, .. } => {
                tracing::info!(
                    pid = pid.as_raw(),
                    "stopping the serving instance's process group"
                );
                State::Stopping {
                    stop: GroupStop::begin(pid, kill_at, now),
                    restart_at: None,
                }
            }
            State::Stopping { stop, .. } => State::Stopping {
                stop,
                restart_at: None,
            },
            State::Idle { .. } => State::Idle { restart_at: None },
        };
        self.tick_after_shutdown(now);
    }

    fn tick_after_shutdown(&mut self, now: BootInstant) {
        if let State::Stopping { stop, .. } = &mut self.state {
            if stop.progress(now) {
                self.state = State::Idle { restart_at: None };
            }
        }
    }

    /// Whether it is down for good (shut down and its group gone).
    pub fn gone(&self) -> bool {
        self.shutting_down && matches!(self.state, State::Idle { .. })
    }

    /// How it last ended.
    pub fn last_exit(&self) -> Option<Exit> {
        self.last_exit
    }

    pub fn status(&self) -> ServingStatus {
        let pid = match &self.state {
            State::Running { pid, .. } => Some(pid.as_raw()),
            _ => None,
        };
        ServingStatus {
            mode: "follower".to_owned(),
            pid,
            restarts: self.restarts,
        }
    }
}
