//! The supervisor's pure decisions: which objects to obey, which child should run, how to get
//! there from what runs now, and how long to wait before restarting a crashed child.
//!
//! Nothing here reads a clock or touches a process; callers pass `now` in, so every rule can be
//! tested with made-up [`BootInstant`]s.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::clock::BootInstant;
use crate::grant::{Grant, Mode};

/// What to do with an incoming grant object, given the last one obeyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Newer than anything obeyed: obey it.
    Obey,
    /// Exactly the last object obeyed (a retried push, or the file re-read): nothing changes, but
    /// a push of it is acked like the original once that object has taken effect.
    Repeat,
    /// Older than (or conflicting with) the last object obeyed: ignore it; a push gets 409.
    Stale,
}

/// The ordering rule of the protocol: obey only objects whose `(incarnation, seq)` is greater
/// than the last one obeyed, so a late push never undoes a newer decision.
pub fn judge(last: Option<&Grant>, incoming: &Grant) -> Verdict {
    match last {
        None => Verdict::Obey,
        Some(last) if incoming.order() > last.order() => Verdict::Obey,
        // Same order with other content is a broken elector; refusing it keeps the older truth.
        Some(last) if incoming == last => Verdict::Repeat,
        Some(_) => Verdict::Stale,
    }
}

/// The mode the supervisor must be in at `now`, before shutdown is considered.
///
/// No object yet, a follower object, an expired leader grant, or a flag file that went missing
/// or unreadable after the last object (`demoted_locally`) all mean follower: every doubt fails
/// closed, because a spurious demotion costs a restart while a spurious leader costs safety.
pub fn target_mode(obeyed: Option<&Grant>, demoted_locally: bool, now: BootInstant) -> Mode {
    if demoted_locally {
        return Mode::Follower;
    }
    match obeyed.map(|g| g.effective_mode(now)) {
        Some(Mode::Leader) => Mode::Leader,
        _ => Mode::Follower,
    }
}

/// Whether `g` claims an elector incarnation that has not started yet. An incarnation is its
/// elector's start time on CLOCK_BOOTTIME, so one later than `now` cannot be legitimate; obeyed,
/// it would make every real object look stale until the clock caught up.
pub fn from_the_future(g: &Grant, now: BootInstant) -> bool {
    g.incarnation > now.as_nanos()
}

/// When SIGKILL goes to a group whose stop begins at `now`: the kill grace after `now`, but never
/// later than the kill grace after `lapsed`, the expiry of the leader grant the child ran under.
///
/// A supervisor that notices an expiry late (CPU throttling, a frozen container) must not give
/// the app a further full grace while another pod may already lead; one found past `lapsed` + K
/// is killed at once. A `lapsed` still in the future never shortens the grace.
pub fn kill_deadline(
    now: BootInstant,
    kill_grace: Duration,
    lapsed: Option<BootInstant>,
) -> BootInstant {
    let from_now = now.saturating_add(kill_grace);
    match lapsed {
        Some(expiry) => from_now.min(expiry.saturating_add(kill_grace)),
        None => from_now,
    }
}

/// What runs while follower.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnFollower {
    /// Run the app with the follower environment (it serves HTTP, runs no operators).
    Run,
    /// Run nothing until promoted.
    Stop,
}

/// How a running child learns of a mode change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnChange {
    /// Stop the child's whole process group and start it again with the new mode's environment.
    Restart,
    /// Send this signal to the child, which toggles by itself; its environment stays as started.
    Signal(Signal),
}

/// Parses `--on-change`: `restart` or `signal:SIGNAME` (`signal:SIGUSR2`, `signal:USR2`).
pub fn parse_on_change(s: &str) -> Result<OnChange, String> {
    const ALLOWED: &str = "allowed: restart, signal:SIGNAME (e.g. signal:SIGUSR2)";
    if s == "restart" {
        return Ok(OnChange::Restart);
    }
    let name = s
        .strip_prefix("signal:")
        .ok_or_else(|| format!("unknown policy; {ALLOWED}"))?;
    let full = if name.starts_with("SIG") {
        name.to_owned()
    } else {
        format!("SIG{name}")
    };
    let sig: Signal = full
        .parse()
        .map_err(|_| format!("unknown signal {name:?}; {ALLOWED}"))?;
    if matches!(sig, Signal::SIGKILL | Signal::SIGSTOP) {
        return Err(format!("{sig} cannot be used to toggle an app; {ALLOWED}"));
    }
    Ok(OnChange::Signal(sig))
}

/// The child that should run in `target` mode (`None`: nothing should run).
pub fn desired_child(target: Mode, on_follower: OnFollower) -> Option<Mode> {
    match (target, on_follower) {
        (Mode::Leader, _) => Some(Mode::Leader),
        (Mode::Follower, OnFollower::Run) => Some(Mode::Follower),
        (Mode::Follower, OnFollower::Stop) | (Mode::Stopped, _) => None,
    }
}

/// The step from the running child's mode to the desired one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The running child (or the absence of one) is already right; renewals land here.
    Keep,
    /// Nothing runs; start a child in this mode.
    Start(Mode),
    /// Stop the running child's process group (and start the desired one, if any, after).
    Stop,
    /// Tell the running child to switch to this mode with a signal.
    Signal(Signal, Mode),
}

pub fn step(running: Option<Mode>, desired: Option<Mode>, on_change: OnChange) -> Step {
    match (running, desired) {
        (None, None) => Step::Keep,
        (None, Some(m)) => Step::Start(m),
        (Some(_), None) => Step::Stop,
        (Some(a), Some(b)) if a == b => Step::Keep,
        (Some(_), Some(b)) => match on_change {
            OnChange::Restart => Step::Stop,
            OnChange::Signal(sig) => Step::Signal(sig, b),
        },
    }
}

/// Restart delays for a child that keeps exiting on its own: doubling from `initial` up to
/// `max`, forgiven once a child has run for `reset_after`.
#[derive(Clone, Debug)]
pub struct Backoff {
    /// Delay before the first restart after a stable run.
    pub initial: Duration,
    /// Cap on the delay.
    pub max: Duration,
    /// A child that ran at least this long counts as stable and resets the delay.
    pub reset_after: Duration,
    /// Exits in a row without a stable run.
    failures: u32,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration, reset_after: Duration) -> Self {
        Backoff {
            initial,
            max,
            reset_after,
            failures: 0,
        }
    }

    /// Records an exit after the child ran for `ran_for`; returns the delay before restarting.
    pub fn on_exit(&mut self, ran_for: Duration) -> Duration {
        if ran_for >= self.reset_after {
            self.failures = 0;
        }
        let factor = 1u32.checked_shl(self.failures.min(31)).unwrap_or(u32::MAX);
        let delay = self.initial.saturating_mul(factor).min(self.max);
        self.failures = self.failures.saturating_add(1);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::Order;

    fn leader(incarnation: u64, seq: u64, expires: u64) -> Grant {
        Grant::leader(
            "pod",
            1,
            Order { incarnation, seq },
            "ns/l",
            BootInstant::from_nanos(expires),
        )
    }

    fn follower(incarnation: u64, seq: u64) -> Grant {
        Grant::follower("other", 1, Order { incarnation, seq }, "ns/l")
    }

    #[test]
    fn first_object_is_always_obeyed() {
        assert_eq!(judge(None, &follower(0, 0)), Verdict::Obey);
    }

    #[test]
    fn older_seq_or_incarnation_is_stale_and_newer_is_obeyed() {
        let last = leader(5, 10, 100);
        assert_eq!(judge(Some(&last), &follower(5, 9)), Verdict::Stale);
        assert_eq!(judge(Some(&last), &follower(4, 99)), Verdict::Stale);
        assert_eq!(judge(Some(&last), &follower(5, 11)), Verdict::Obey);
        assert_eq!(judge(Some(&last), &follower(6, 1)), Verdict::Obey);
    }

    #[test]
    fn the_same_object_again_is_a_repeat_but_a_different_one_with_its_order_is_stale() {
        let last = leader(5, 10, 100);
        assert_eq!(judge(Some(&last), &last.clone()), Verdict::Repeat);
        assert_eq!(judge(Some(&last), &follower(5, 10)), Verdict::Stale);
    }

    #[test]
    fn leader_only_until_expiry_and_every_doubt_is_follower() {
        let g = leader(1, 1, 1_000);
        let before = BootInstant::from_nanos(999);
        let at = BootInstant::from_nanos(1_000);
        assert_eq!(target_mode(Some(&g), false, before), Mode::Leader);
        assert_eq!(target_mode(Some(&g), false, at), Mode::Follower);
        assert_eq!(target_mode(Some(&g), true, before), Mode::Follower);
        assert_eq!(target_mode(None, false, before), Mode::Follower);
        assert_eq!(
            target_mode(Some(&follower(1, 2)), false, before),
            Mode::Follower
        );
    }

    #[test]
    fn renewal_keeps_the_child_and_a_change_restarts_or_signals_it() {
        let restart = OnChange::Restart;
        let usr2 = OnChange::Signal(Signal::SIGUSR2);
        let (l, f) = (Some(Mode::Leader), Some(Mode::Follower));
        assert_eq!(step(l, l, restart), Step::Keep);
        assert_eq!(step(f, l, restart), Step::Stop);
        assert_eq!(
            step(f, l, usr2),
            Step::Signal(Signal::SIGUSR2, Mode::Leader)
        );
        assert_eq!(step(None, f, usr2), Step::Start(Mode::Follower));
        assert_eq!(step(l, None, usr2), Step::Stop);
        assert_eq!(step(None, None, restart), Step::Keep);
    }

    #[test]
    fn an_incarnation_later_than_the_boot_clock_is_from_the_future() {
        let now = BootInstant::from_nanos(1_000);
        assert!(!from_the_future(&follower(999, 1), now));
        assert!(!from_the_future(&follower(1_000, 1), now));
        assert!(from_the_future(&follower(1_001, 1), now));
        assert!(from_the_future(&leader(u64::MAX, 1, 2_000), now));
    }

    #[test]
    fn a_late_noticed_expiry_does_not_earn_a_further_full_grace() {
        let k = Duration::from_nanos(300);
        let at = BootInstant::from_nanos;
        // No lapsed grant (a follower restart, a shutdown): the full grace from now.
        assert_eq!(kill_deadline(at(1_000), k, None), at(1_300));
        // Noticed on time, or the grant still runs: the full grace from now.
        assert_eq!(kill_deadline(at(1_000), k, Some(at(1_000))), at(1_300));
        assert_eq!(kill_deadline(at(1_000), k, Some(at(5_000))), at(1_300));
        // Noticed 200 late: only what is left of the grace after the expiry.
        assert_eq!(kill_deadline(at(1_200), k, Some(at(1_000))), at(1_300));
        // Noticed past expiry + K: the deadline has passed, so SIGKILL goes at once.
        assert!(kill_deadline(at(2_000), k, Some(at(1_000))) <= at(2_000));
    }

    #[test]
    fn follower_runs_nothing_with_on_follower_stop() {
        assert_eq!(desired_child(Mode::Follower, OnFollower::Stop), None);
        assert_eq!(
            desired_child(Mode::Follower, OnFollower::Run),
            Some(Mode::Follower)
        );
        assert_eq!(
            desired_child(Mode::Leader, OnFollower::Stop),
            Some(Mode::Leader)
        );
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_resets_after_a_stable_run() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(200), ms(1_000), Duration::from_secs(10));
        let quick = ms(5);
        assert_eq!(b.on_exit(quick), ms(200));
        assert_eq!(b.on_exit(quick), ms(400));
        assert_eq!(b.on_exit(quick), ms(800));
        assert_eq!(b.on_exit(quick), ms(1_000));
        assert_eq!(b.on_exit(quick), ms(1_000));
        assert_eq!(b.on_exit(Duration::from_secs(11)), ms(200));
        // Many failures in a row must not overflow the doubling.
        for _ in 0..100 {
            b.on_exit(quick);
        }
        assert_eq!(b.on_exit(quick), ms(1_000));
    }

    #[test]
    fn on_change_policies_parse() {
        assert_eq!(parse_on_change("restart"), Ok(OnChange::Restart));
        assert_eq!(
            parse_on_change("signal:SIGUSR2"),
            Ok(OnChange::Signal(Signal::SIGUSR2))
        );
        assert_eq!(
            parse_on_change("signal:HUP"),
            Ok(OnChange::Signal(Signal::SIGHUP))
        );
        assert!(parse_on_change("signal:KILL").is_err());
        assert!(parse_on_change("signal:NOPE").is_err());
        assert!(parse_on_change("reload").unwrap_err().contains("allowed"));
    }
}
