//! Stopping one process group: SIGTERM, SIGKILL at a deadline, and "gone" only once no member
//! of the group is left, zombies included.

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::clock::BootInstant;
use crate::supervise::process::child::{self, Exit};

/// A process group on its way out. Shared by the grant-following child and the serving
/// instance, so both keep the same promise: nothing of the group outlives `kill_at`.
#[derive(Debug)]
pub struct GroupStop {
    /// The group (= the main child's PID).
    pub pgid: Pid,
    /// Whether the main child is still unreaped.
    pub main_alive: bool,
    /// Whether SIGTERM has gone to the whole group.
    group_termed: bool,
    /// When SIGKILL goes to the whole group.
    kill_at: BootInstant,
    killed: bool,
    /// How the main child ended, once reaped.
    pub exit: Option<Exit>,
}

impl GroupStop {
    /// The main child alone was sent a (forwarded shutdown) signal, as an app expects; the rest
    /// of its group gets SIGTERM once it exits, and everything SIGKILL at `kill_at`.
    pub fn signalled(pgid: Pid, kill_at: BootInstant) -> Self {
        GroupStop {
            pgid,
            main_alive: true,
            group_termed: false,
            kill_at,
            killed: false,
            exit: None,
        }
    }

    /// The main child exited on its own: what it left in its group goes, SIGKILL at `kill_at`.
    pub fn exited(pgid: Pid, exit: Exit, kill_at: BootInstant) -> Self {
        GroupStop {
            pgid,
            main_alive: false,
            group_termed: false,
            kill_at,
            killed: false,
            exit: Some(exit),
        }
    }

    /// SIGTERM to the whole group now, and SIGKILL at once when `kill_at` has already passed
    /// (a leader found past its grant's expiry + the kill grace).
    pub fn begin(pgid: Pid, kill_at: BootInstant, now: BootInstant) -> Self {
        child::signal_group(pgid, Signal::SIGTERM);
        let killed = now >= kill_at;
        if killed {
            tracing::error!(
                pgid = pgid.as_raw(),
                "leader grant expired more than the kill grace ago; sending SIGKILL at once"
            );
            child::signal_group(pgid, Signal::SIGKILL);
        }
        GroupStop {
            pgid,
            main_alive: true,
            group_termed: true,
            kill_at,
            killed,
            exit: None,
        }
    }

    /// SIGKILL to the whole group now, with no grace: for a process that runs no app code (the
    /// standby of `--leader-standby`), which has nothing to wind down.
    pub fn kill_now(pgid: Pid) -> Self {
        child::signal_group(pgid, Signal::SIGKILL);
        GroupStop {
            pgid,
            main_alive: true,
            group_termed: true,
            kill_at: BootInstant::from_nanos(0),
            killed: true,
            exit: None,
        }
    }

    pub fn main_exited(&mut self, exit: Exit) {
        self.main_alive = false;
        self.exit = Some(exit);
    }

    /// Sends what is due at `now`; true once the group is gone.
    pub fn progress(&mut self, now: BootInstant) -> bool {
        if !self.main_alive && !self.group_termed {
            self.group_termed = true;
            child::signal_group(self.pgid, Signal::SIGTERM);
        }
        if !self.killed && now >= self.kill_at {
            self.killed = true;
            tracing::warn!(
                pgid = self.pgid.as_raw(),
                "process group still alive after the kill grace; sending SIGKILL"
            );
            child::signal_group(self.pgid, Signal::SIGKILL);
        }
        // The group exists while any member, zombies included, is unreaped.
        !self.main_alive && !child::group_exists(self.pgid)
    }
}
