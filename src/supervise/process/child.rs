//! The app process: spawning it in its own process group, signalling it or its group, reaping
//! every child that ends (ours and reparented orphans), and telling when a group is gone.
//!
//! The main child is tracked by PID and reaped with `waitpid(-1)` like every other process, never
//! with `std::process::Child::wait`: two waiters on one PID race, and the loser loses the status.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(Signal),
}

impl Exit {
    /// The shell convention the supervisor exits with: the code, or 128 + the signal number.
    pub fn code(self) -> u8 {
        match self {
            Exit::Code(c) => (c & 0xff) as u8,
            Exit::Signal(s) => 128u8.saturating_add(s as i32 as u8),
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit code {c}"),
            Exit::Signal(s) => write!(f, "killed by {s}"),
        }
    }
}

/// Starts `command` plus `extra_args` as the leader of a new process group, with the
/// supervisor's environment overridden by `env`. Returns its PID, which is also its group ID.
pub fn spawn(
    command: &[String],
    extra_args: &[String],
    env: &[(String, String)],
) -> io::Result<Pid> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let child = Command::new(program)
        .args(args)
        .args(extra_args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        // Its own group, so a stop reaches every process the app started and nothing else.
        .process_group(0)
        .spawn()?;
    let pid = Pid::from_raw(child.id() as i32);
    // Dropping `Child` neither waits nor kills; the reaper collects the status by PID.
    drop(child);
    Ok(pid)
}

/// Sends `sig` to one process; a process already gone is not an error.
pub fn signal(pid: Pid, sig: Signal) {
    match kill(pid, sig) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => {
            tracing::warn!(pid = pid.as_raw(), signal = %sig, error = %e, "cannot signal child")
        }
    }
}

/// Sends `sig` to every process of group `pgid`; a group already gone is not an error.
pub fn signal_group(pgid: Pid, sig: Signal) {
    match killpg(pgid, sig) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => {
            tracing::warn!(pgid = pgid.as_raw(), signal = %sig, error = %e, "cannot signal process group")
        }
    }
}

/// Whether any process (zombies included, until reaped) is still in group `pgid`.
/// A process that moved itself to another group escapes this check; see docs/design/safety.md.
pub fn group_exists(pgid: Pid) -> bool {
    // EPERM means a member exists that we may not signal: it exists.
    !matches!(killpg(pgid, None), Err(Errno::ESRCH))
}

/// Reaps every child that has ended, without blocking: our main child and any orphan that was
/// reparented to us (we are PID 1 or a child subreaper).
pub fn reap_all() -> Vec<(Pid, Exit)> {
    let mut reaped = Vec::new();
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => reaped.push((pid, Exit::Code(code))),
            Ok(WaitStatus::Signaled(pid, sig, _core)) => reaped.push((pid, Exit::Signal(sig))),
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
            Err(Errno::EINTR) => continue,
            // Stops and continues are not asked for (no WUNTRACED); skip anything else.
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "waitpid failed");
                break;
            }
        }
    }
    reaped
}

/// Makes orphans of our descendants ours to reap when we are not PID 1.
pub fn become_subreaper() {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!(error = %e, "cannot become a child subreaper; orphans may stay zombies");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(Exit::Code(0).code(), 0);
        assert_eq!(Exit::Code(3).code(), 3);
        assert_eq!(Exit::Signal(Signal::SIGKILL).code(), 137);
        assert_eq!(Exit::Signal(Signal::SIGTERM).code(), 143);
    }
}
