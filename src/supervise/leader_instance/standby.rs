//! The warm standby of `--leader-standby`: a leader instance started ahead of a promotion, with
//! the follower environment, that imports the app's dependencies and then waits, running no app
//! code, until the supervisor sends it the go on a pipe only the supervisor holds.
//!
//! Why: a promotion with `--on-change=leader-instance` otherwise starts a new Node.js process,
//! and most of that process's boot is importing its `node_modules` (Passmower 2.4: about 88 % of
//! importing its app module), which then sits in every handover's leaderless gap. The standby
//! does that work while the pod follows; the go only sets the leader environment and lets the
//! app's main module run.
//!
//! Why it is safe (docs/design/handover.md has the whole argument):
//! - No app code before the go. The standby's preload (`standby/preload.mjs`, the last
//!   `--import` in its `NODE_OPTIONS`) does not return, so the app's main module does not start,
//!   until it has read the go; while it waits, it blocks its thread in a `read(2)` of the pipe,
//!   so no timer or callback of an imported dependency runs either. It starts with the follower
//!   environment, so even code that ran early would find the idle selector.
//! - The go is sent from one place only: where a fresh leader instance would be started
//!   ([`crate::supervise::supervisor`]'s leader start), after the same checks (the grant, the promotion
//!   check of `--converge-oidc-clients`). From the go on, the standby is the leader instance,
//!   with every rule of one: acked once the go is written, killed by expiry + K, its exits
//!   counted as failed leader starts.
//! - The pipe's write end is the supervisor's alone (close-on-exec, never inherited), so the
//!   standby sees EOF when the supervisor dies or withdraws it, and exits without running the
//!   app. Nobody else can send a go.
//! - It belongs to its own process group, and is killed with it, without grace, at shutdown.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::unistd::Pid;

pub mod spec;

use crate::clock::BootInstant;
use crate::grant::Mode;
use crate::supervise::mode::Backoff;
use crate::supervise::process::child::Exit;
use crate::supervise::process::instance::{Ended, Instance};
use crate::supervise::settings::Settings;
use crate::supervise::status::StandbyStatus;
use spec::{StandbySpec, FD_VAR};

/// What became of a go.
#[derive(Debug)]
pub enum Go {
    /// Sent: the standby is the leader instance now (running in leader mode since `now`).
    Given(Instance),
    /// No standby waits (none started yet, or it exited): start the leader instance afresh.
    NotReady,
    /// The go could not be written whole; the standby is being killed: start afresh.
    Failed(String),
}

/// The standby's lifecycle: started while the supervisor wants one, restarted with backoff when
/// it exits on its own, handed over on the go, killed without grace when withdrawn.
#[derive(Debug)]
pub struct Standby {
    instance: Instance,
    /// The pipe's write end while the standby waits: the one way to send it the go. Closing it
    /// (without a go) is what the standby reads as EOF.
    go: Option<OwnedFd>,
    /// When another may start after one exited on its own or could not be started.
    restart_at: Option<BootInstant>,
    backoff: Backoff,
    spawned: u64,
    used: u64,
    missed: u64,
}

impl Standby {
    pub fn new(backoff: Backoff) -> Self {
        Standby {
            instance: Instance::idle(),
            go: None,
            restart_at: None,
            backoff,
            spawned: 0,
            used: 0,
            missed: 0,
        }
    }

    /// Whether one waits for the go.
    pub fn ready(&self) -> bool {
        self.go.is_some() && self.instance.running().is_some()
    }

    /// Whether nothing of it is left (no process, no stop in progress).
    pub fn gone(&self) -> bool {
        self.instance.is_idle()
    }

    /// Advances a stop; then, when `wanted` and nothing of one is left, starts one unless a
    /// backoff holds it back.
    pub fn tick(
        &mut self,
        wanted: bool,
        settings: &Settings,
        spec: &StandbySpec,
        now: BootInstant,
    ) {
        if self.instance.is_stopping() {
            if let Some(gone) = self.instance.progress(now) {
                tracing::debug!(pgid = gone.pgid.as_raw(), "standby's process group gone");
            }
        }
        if !wanted || !self.instance.is_idle() || self.restart_at.is_some_and(|at| now < at) {
            return;
        }
        self.restart_at = None;
        match self.spawn(settings, spec, now) {
            Ok(pid) => {
                self.spawned += 1;
                tracing::info!(
                    pid = pid.as_raw(),
                    "standby leader instance started (follower environment): it imports the \
                     app's dependencies and waits for the go, running no app code"
                );
            }
            Err(e) => {
                let delay = self.backoff.on_exit(Duration::ZERO);
                tracing::error!(command = ?settings.command, error = %e,
                    retry_in = %crate::config::human(delay), "cannot start the standby");
                self.restart_at = Some(now.saturating_add(delay));
            }
        }
    }

    fn spawn(
        &mut self,
        settings: &Settings,
        spec: &StandbySpec,
        now: BootInstant,
    ) -> std::io::Result<Pid> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        // The read end is inherited by the standby alone: close-on-exec is cleared only for this
        // spawn, and the end is closed here right after it. The supervisor starts processes from
        // its one loop thread, so no other start can happen in between. The write end keeps
        // close-on-exec (no child ever holds it: EOF means the supervisor is gone) and does not
        // block the loop (a go that does not fit is a failed go, not a hang).
        fcntl(&read, FcntlArg::F_SETFD(FdFlag::empty()))?;
        fcntl(&write, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
        let mut env = spec.env.clone();
        env.push((FD_VAR.to_owned(), read.as_raw_fd().to_string()));
        let pid = self.instance.spawn(
            &settings.command,
            &settings.leader_args,
            &env,
            Mode::Follower,
            now,
        )?;
        drop(read);
        self.go = Some(write);
        Ok(pid)
    }

    /// Sends the go: the standby becomes the leader instance, counted as started `now`. When
    /// none waits, or the go cannot be written whole (the standby is then killed), the caller
    /// starts the leader instance afresh.
    pub fn go(&mut self, spec: &StandbySpec, now: BootInstant) -> Go {
        if !self.ready() {
            self.missed += 1;
            return Go::NotReady;
        }
        let Some(pipe) = self.go.take() else {
            return Go::NotReady;
        };
        let written = nix::unistd::write(&pipe, &spec.go);
        // Closing the write end ends the message: the standby reads up to EOF.
        drop(pipe);
        match written {
            Ok(n) if n == spec.go.len() => {
                let mut leader = std::mem::replace(&mut self.instance, Instance::idle());
                if let Some(r) = leader.running_mut() {
                    r.mode = Mode::Leader;
                    r.started = now;
                }
                self.used += 1;
                Go::Given(leader)
            }
            other => {
                self.missed += 1;
                let why = match other {
                    Ok(n) => format!("only {n} of {} bytes went into the pipe", spec.go.len()),
                    Err(e) => e.to_string(),
                };
                self.withdraw("its go could not be sent");
                Go::Failed(why)
            }
        }
    }

    /// Kills a waiting standby's group now, without grace (it runs no app code), closing the
    /// pipe first so that it reads EOF should it outlive the kill.
    pub fn withdraw(&mut self, why: &str) {
        self.restart_at = None;
        let had_pipe = self.go.take().is_some();
        if let Some(pid) = self.instance.kill() {
            tracing::info!(pid = pid.as_raw(), "standby killed: {why}");
        } else if had_pipe {
            tracing::debug!("standby pipe closed: {why}");
        }
    }

    /// Takes the exit of `pid` if it is the standby's main process; false if it is not.
    pub fn on_exit(&mut self, pid: Pid, exit: Exit, now: BootInstant) -> bool {
        // Whatever it left in its group runs no app code either: killed at once.
        let Some(ended) = self.instance.main_exited(pid, exit, |_| now) else {
            return false;
        };
        self.go = None;
        match ended {
            Ended::OnItsOwn(r) => {
                let ran = now.saturating_since(r.started);
                let delay = self.backoff.on_exit(ran);
                tracing::warn!(pid = pid.as_raw(), %exit, ran_for = %crate::config::human(ran),
                    restart_in = %crate::config::human(delay),
                    "standby exited on its own; promotions start the leader instance afresh until \
                     another one waits");
                self.restart_at = Some(now.saturating_add(delay));
            }
            Ended::Stopped { .. } => {
                tracing::debug!(pid = pid.as_raw(), %exit, "standby stopped");
            }
        }
        true
    }

    /// When the loop must call [`Standby::tick`] next.
    pub fn wake_at(&self, now: BootInstant) -> Option<BootInstant> {
        if self.instance.is_stopping() {
            self.instance.wake_at(now)
        } else if self.instance.is_idle() {
            self.restart_at
        } else {
            None
        }
    }

    pub fn status(&self) -> StandbyStatus {
        StandbyStatus {
            ready: self.ready(),
            pid: self
                .ready()
                .then(|| self.instance.main_pid())
                .flatten()
                .map(Pid::as_raw),
            spawned: self.spawned,
            used: self.used,
            missed: self.missed,
        }
    }
}
