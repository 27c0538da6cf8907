//! `Instance`: the lifecycle of one process group the supervisor runs, Idle / Running /
//! Stopping, written once for the grant-following child and for the serving instance.
//!
//! It owns starting the main process in a new group, taking that process's exit, and stopping
//! the group until no member is left. Its owner decides when to start and stop it, what a start
//! that failed or an exit on its own leads to (a restart after a backoff, a shutdown), and logs
//! in its own words; nothing starts again while the old group is stopping.

use std::io;
use std::time::Duration;

use nix::unistd::Pid;

use crate::clock::BootInstant;
use crate::grant::Mode;
use crate::supervise::process::child::{self, Exit};
use crate::supervise::process::stop::GroupStop;

/// How often a stop checks whether the process group is gone. Short, because a restart waits on
/// it; SIGCHLD usually finishes the stop before the first tick.
pub const STOP_POLL: Duration = Duration::from_millis(5);

/// A running main process.
#[derive(Debug)]
pub struct Running {
    /// Its PID, which is also its process group's ID.
    pub pid: Pid,
    /// The mode it was started in (or, by the grant-following child, switched to by signal);
    /// always follower for the serving instance.
    pub mode: Mode,
    pub started: BootInstant,
    /// With `--on-change=signal:`, after a demotion signal: the app has until then (the kill
    /// grace after the signal) to stop operator work, so the demotion is not acked before.
    pub demoting_until: Option<BootInstant>,
}

#[derive(Debug)]
enum State {
    /// Nothing runs.
    Idle,
    Running(Running),
    /// The process group is being stopped; nothing new starts until it is gone.
    Stopping(GroupStop),
}

/// One process group's lifecycle.
#[derive(Debug)]
pub struct Instance {
    state: State,
}

/// What became of an instance whose main process exited.
#[derive(Debug)]
pub enum Ended {
    /// It exited on its own while running; what it left in its group is being stopped now.
    OnItsOwn(Running),
    /// It exited while its group was being stopped (as asked); `pgid` names the group.
    Stopped { pgid: Pid },
}

/// A stop that has finished: no member of the group is left.
#[derive(Debug)]
pub struct Gone {
    pub pgid: Pid,
    /// How the main process ended, if it was reaped during the stop.
    pub exit: Option<Exit>,
}

impl Instance {
    pub fn idle() -> Self {
        Instance { state: State::Idle }
    }

    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Idle)
    }

    pub fn is_stopping(&self) -> bool {
        matches!(self.state, State::Stopping(_))
    }

    pub fn running(&self) -> Option<&Running> {
        match &self.state {
            State::Running(r) => Some(r),
            _ => None,
        }
    }

    pub fn running_mut(&mut self) -> Option<&mut Running> {
        match &mut self.state {
            State::Running(r) => Some(r),
            _ => None,
        }
    }

    /// The main process, while it may be signalled (running, or stopping and not yet reaped).
    pub fn main_pid(&self) -> Option<Pid> {
        match &self.state {
            State::Running(r) => Some(r.pid),
            State::Stopping(s) if s.main_alive => Some(s.pgid),
            _ => None,
        }
    }

    /// Starts `command` plus `args` with `env` in a new process group, in `mode`; only from
    /// Idle (the caller checks). On an error it stays Idle.
    pub fn spawn(
        &mut self,
        command: &[String],
        args: &[String],
        env: &[(String, String)],
        mode: Mode,
        now: BootInstant,
    ) -> io::Result<Pid> {
        let pid = child::spawn(command, args, env)?;
        self.state = State::Running(Running {
            pid,
            mode,
            started: now,
            demoting_until: None,
        });
        Ok(pid)
    }

    /// Takes the exit of `pid` if it is this instance's main process (`None` if it is not).
    /// A running one goes to Stopping, with SIGKILL for its leftovers at `kill_at(mode)`.
    pub fn main_exited(
        &mut self,
        pid: Pid,
        exit: Exit,
        kill_at: impl FnOnce(Mode) -> BootInstant,
    ) -> Option<Ended> {
        if self.main_pid() != Some(pid) {
            return None;
        }
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Running(r) => {
                self.state = State::Stopping(GroupStop::exited(r.pid, exit, kill_at(r.mode)));
                Some(Ended::OnItsOwn(r))
            }
            State::Stopping(mut s) => {
                s.main_exited(exit);
                let pgid = s.pgid;
                self.state = State::Stopping(s);
                Some(Ended::Stopped { pgid })
            }
            State::Idle => None,
        }
    }

    /// Begins stopping a running instance: SIGTERM to its group now, SIGKILL at `kill_at(mode)`
    /// (at once when that has passed). Returns what ran; nothing when it was not running.
    pub fn stop(
        &mut self,
        now: BootInstant,
        kill_at: impl FnOnce(Mode) -> BootInstant,
    ) -> Option<(Pid, Mode)> {
        let r = self.take_running()?;
        self.state = State::Stopping(GroupStop::begin(r.pid, kill_at(r.mode), now));
        Some((r.pid, r.mode))
    }

    /// Kills a running instance's whole group at once, without a grace (see
    /// [`GroupStop::kill_now`]); the stop ends once the group is gone. Returns its PID.
    pub fn kill(&mut self) -> Option<Pid> {
        let r = self.take_running()?;
        self.state = State::Stopping(GroupStop::kill_now(r.pid));
        Some(r.pid)
    }

    /// A running instance's main process was sent a (forwarded shutdown) signal: the rest of its
    /// group gets SIGTERM once it exits, and everything SIGKILL at `kill_at(mode)`.
    pub fn signalled(&mut self, kill_at: impl FnOnce(Mode) -> BootInstant) {
        if let Some(r) = self.take_running() {
            self.state = State::Stopping(GroupStop::signalled(r.pid, kill_at(r.mode)));
        }
    }

    fn take_running(&mut self) -> Option<Running> {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Running(r) => Some(r),
            other => {
                self.state = other;
                None
            }
        }
    }

    /// Advances a stop (sends what is due at `now`); once the group is gone the instance is Idle
    /// and the finished stop is returned.
    pub fn progress(&mut self, now: BootInstant) -> Option<Gone> {
        let State::Stopping(s) = &mut self.state else {
            return None;
        };
        if !s.progress(now) {
            return None;
        }
        let gone = Gone {
            pgid: s.pgid,
            exit: s.exit,
        };
        self.state = State::Idle;
        Some(gone)
    }

    /// When a stop in progress should be advanced next.
    pub fn wake_at(&self, now: BootInstant) -> Option<BootInstant> {
        self.is_stopping().then(|| now.saturating_add(STOP_POLL))
    }
}
