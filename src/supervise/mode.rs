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

/// Whether an authentic object is one a consumer may act on at `now`. The MAC says the elector
/// wrote it; these say it is something an elector can mean: no `stopped` (acks only), no
/// incarnation later than the boot clock, the limits announced, and no leader grant that
/// expires further ahead than the elector's own renew deadline from now (the elector grants
/// until send time + R, and sent it before we read it).
pub fn admissible(g: &Grant, now: BootInstant) -> Result<(), String> {
    if g.mode == Mode::Stopped {
        return Err("mode \"stopped\" belongs in acks, never in a grant".into());
    }
    if from_the_future(g, now) {
        return Err(format!(
            "incarnation {} is later than the boot clock ({}): no elector started then",
            g.incarnation,
            now.as_nanos()
        ));
    }
    if g.kill_grace_ns == 0 {
        return Err("kill_grace_ns is missing or 0".into());
    }
    g.check_leader_bound(now).map_err(|e| e.to_string())
}

/// The kill grace to use: ours, but never longer than the elector's (`elector`, from the
/// newest grant), which is what the elector counts on when it releases without an ack.
pub fn effective_kill_grace(own: Duration, elector: Option<Duration>) -> Duration {
    match elector {
        Some(k) if !k.is_zero() => own.min(k),
        _ => own,
    }
}

/// With `--on-change=signal:`, a leader grant stops counting this long before its expiry: the
/// app has the kill grace from the signal, so a signal sent at the expiry would let it run past
/// expiry + K by however late the supervisor woke. The lead absorbs ordinary wake-up latency.
pub const SIGNAL_LEAD: Duration = Duration::from_millis(250);

/// The instant at which grants are judged at `now`: `SIGNAL_LEAD` ahead when demotions go by
/// signal, so lapsing grants are demoted early enough (see [`SIGNAL_LEAD`]).
pub fn judged_at(now: BootInstant, on_change: OnChange) -> BootInstant {
    match on_change {
        OnChange::Restart | OnChange::LeaderInstance | OnChange::LeaseBridge => now,
        OnChange::Signal(_) => now.saturating_add(SIGNAL_LEAD),
    }
}

/// How a leader child is demoted under `--on-change=signal:`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalDemotion {
    /// Signal it; the demotion counts as done (and is acked) at `acked_at`, the kill grace later.
    Signal { acked_at: BootInstant },
    /// Stop its group instead: the app's grace from a signal sent now would run past the kill
    /// grace after the expiry of the grant it ran under, so only a kill can keep that bound.
    Stop,
}

/// The demotion of a leader child at `now`, when the newest leader grant it ran under expires at
/// `expiry`: a signal while that expiry has not passed (the app then stops by now + K, before
/// expiry + K), otherwise a stop whose SIGKILL [`kill_deadline`] caps at expiry + K.
pub fn signal_demotion(
    now: BootInstant,
    kill_grace: Duration,
    expiry: Option<BootInstant>,
) -> SignalDemotion {
    match expiry {
        Some(e) if now > e => SignalDemotion::Stop,
        _ => SignalDemotion::Signal {
            acked_at: now.saturating_add(kill_grace),
        },
    }
}

/// Failed leader starts in a row after a leader child that ran for `ran` exited on its own:
/// one more, unless it ran long enough to count as stable (`reset_after`).
pub fn leader_failures_after_exit(failures: u64, ran: Duration, reset_after: Duration) -> u64 {
    if ran >= reset_after {
        0
    } else {
        failures.saturating_add(1)
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
    /// Keep one instance with the follower environment running (and serving) the whole time,
    /// and run a second, leader-only instance beside it while leader. The leader instance is
    /// the grant-following child, run as with `Restart` and `--on-follower=stop`; the serving
    /// instance is never restarted because of the grant (see `leader_instance/serving.rs`).
    LeaderInstance,
    /// One process for both modes, a self-electing Passmower with its own election on: the lease
    /// bridge answers that election's Lease from the grant, and the mode changes when the app's
    /// election has taken the new answer in (see `lease_bridge.rs`).
    LeaseBridge,
}

impl std::fmt::Display for OnChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OnChange::Restart => f.write_str("restart"),
            OnChange::Signal(sig) => write!(f, "signal:{sig}"),
            OnChange::LeaderInstance => f.write_str("leader-instance"),
            OnChange::LeaseBridge => f.write_str("lease-bridge"),
        }
    }
}

/// The signals `--on-change=signal:` may use: ones whose only meaning is the one the app gives
/// them. The signal goes to the app's main process on every mode change (and means "re-read
/// your mode"), so it must be one the kernel, the app's runtime and this supervisor give no
/// meaning of their own; each other signal is refused with the reason [`toggle_refusal`] gives.
pub const TOGGLE_SIGNALS: [Signal; 4] = [
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// Why `sig` cannot mean "switch mode" (`None`: it can, it is one of [`TOGGLE_SIGNALS`]).
fn toggle_refusal(sig: Signal) -> Option<&'static str> {
    use Signal::*;
    Some(match sig {
        SIGHUP | SIGUSR1 | SIGUSR2 | SIGWINCH => return None,
        SIGKILL | SIGSTOP => "it cannot be caught, so the app could never toggle on it",
        SIGTERM | SIGINT | SIGQUIT => {
            "it means \"shut down\": the supervisor itself stops on it, and so would the app"
        }
        SIGCHLD => {
            "it reports a child's exit: the app (or its runtime) would reap or ignore it, and a \
             real child exit would then look like a mode change"
        }
        SIGCONT | SIGTSTP | SIGTTIN | SIGTTOU => {
            "it is job control: it stops or resumes the app instead of toggling it"
        }
        SIGPIPE => "it reports a broken pipe: runtimes ignore it or die of it",
        SIGALRM | SIGVTALRM | SIGPROF => "it is a timer signal the app's own timers use",
        SIGSEGV | SIGBUS | SIGFPE | SIGILL | SIGTRAP | SIGABRT | SIGSYS => {
            "it reports a fault: runtimes abort or dump core on it"
        }
        SIGURG => "it reports out-of-band data, and the Go runtime preempts goroutines with it",
        _ => "its default action ends the app, and no runtime reserves it for this",
    })
}

/// Parses `--on-change`: `restart`, `leader-instance` or `signal:SIGNAME` (`signal:SIGUSR2`,
/// `signal:USR2`), SIGNAME one of [`TOGGLE_SIGNALS`].
pub fn parse_on_change(s: &str) -> Result<OnChange, String> {
    const ALLOWED: &str = "allowed: restart, leader-instance, lease-bridge, signal:SIGNAME with \
                           SIGNAME one of SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH (e.g. signal:SIGUSR2)";
    match s {
        "restart" => return Ok(OnChange::Restart),
        "leader-instance" => return Ok(OnChange::LeaderInstance),
        "lease-bridge" => return Ok(OnChange::LeaseBridge),
        _ => {}
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
    if let Some(why) = toggle_refusal(sig) {
        return Err(format!(
            "{sig} cannot mean \"switch mode\": {why}; {ALLOWED}"
        ));
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
    /// Tell the running follower's lease bridge it leads now; its own election takes it in. (A
    /// demotion with the lease bridge is a [`Step::Stop`].)
    BridgePromote,
}

pub fn step(running: Option<Mode>, desired: Option<Mode>, on_change: OnChange) -> Step {
    match (running, desired) {
        (None, None) => Step::Keep,
        (None, Some(m)) => Step::Start(m),
        (Some(_), None) => Step::Stop,
        (Some(a), Some(b)) if a == b => Step::Keep,
        (Some(_), Some(b)) => match on_change {
            OnChange::Restart | OnChange::LeaderInstance => Step::Stop,
            OnChange::Signal(sig) => Step::Signal(sig, b),
            // A promotion is taken in by the one process; a demotion ends it: a stand-down in
            // the process leaves callbacks already in flight, which wrote to Redis after the
            // stand-down had been acked (tests/api/lease_bridge.rs), and nothing fences Redis.
            OnChange::LeaseBridge if b == Mode::Leader => Step::BridgePromote,
            OnChange::LeaseBridge => Step::Stop,
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
        let bridge = OnChange::LeaseBridge;
        assert_eq!(step(f, l, bridge), Step::BridgePromote);
        assert_eq!(
            step(l, f, bridge),
            Step::Stop,
            "a demotion ends the process"
        );
        assert_eq!(step(l, l, bridge), Step::Keep);
        assert_eq!(step(l, None, bridge), Step::Stop);
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

    fn limited(mut g: Grant, r_ns: u64) -> Grant {
        g.renew_deadline_ns = r_ns;
        g.kill_grace_ns = 300;
        g
    }

    /// Before the bound, `incarnation=now, seq=u64::MAX, expires=u64::MAX` made a pod leader for
    /// ever; an authentic grant can never expire further ahead than R from its reading.
    #[test]
    fn a_leader_grant_expiring_beyond_the_renew_deadline_is_not_admissible() {
        let now = BootInstant::from_nanos(1_000);
        assert_eq!(
            admissible(&limited(leader(1, 1, 2_000), 1_000), now),
            Ok(())
        );
        assert!(admissible(&limited(leader(1, 1, 2_001), 1_000), now).is_err());
        assert!(admissible(&limited(leader(1, 1, u64::MAX), 1_000), now).is_err());
        assert!(admissible(&limited(leader(1, 1, 2_000), 0), now).is_err());
        let mut no_k = limited(leader(1, 1, 1_500), 1_000);
        no_k.kill_grace_ns = 0;
        assert!(admissible(&no_k, now).is_err());
        assert!(admissible(&limited(leader(1_001, 1, 1_500), 1_000), now).is_err());
        let mut stopped = limited(follower(1, 1), 0);
        assert_eq!(admissible(&stopped, now), Ok(()));
        stopped.mode = Mode::Stopped;
        assert!(admissible(&stopped, now).is_err());
    }

    #[test]
    fn the_supervisor_never_uses_a_longer_kill_grace_than_the_elector() {
        let s = Duration::from_secs;
        assert_eq!(effective_kill_grace(s(5), Some(s(3))), s(3));
        assert_eq!(effective_kill_grace(s(2), Some(s(3))), s(2));
        assert_eq!(effective_kill_grace(s(5), None), s(5));
        assert_eq!(effective_kill_grace(s(5), Some(Duration::ZERO)), s(5));
    }

    /// In signal mode an expiry noticed late used to earn a full kill grace from the signal.
    #[test]
    fn a_signal_demotion_past_the_expiry_becomes_a_stop_capped_at_expiry_plus_k() {
        let k = Duration::from_nanos(300);
        let at = BootInstant::from_nanos;
        assert_eq!(
            signal_demotion(at(1_000), k, Some(at(5_000))),
            SignalDemotion::Signal {
                acked_at: at(1_300)
            }
        );
        assert_eq!(
            signal_demotion(at(1_000), k, None),
            SignalDemotion::Signal {
                acked_at: at(1_300)
            }
        );
        assert_eq!(
            signal_demotion(at(1_000), k, Some(at(1_000))),
            SignalDemotion::Signal {
                acked_at: at(1_300)
            }
        );
        assert_eq!(
            signal_demotion(at(1_001), k, Some(at(1_000))),
            SignalDemotion::Stop
        );
        // The stop's SIGKILL is then due no later than expiry + K.
        assert_eq!(kill_deadline(at(1_200), k, Some(at(1_000))), at(1_300));
        // Judged SIGNAL_LEAD early, a lapse normally signals before the expiry.
        let sig = OnChange::Signal(Signal::SIGUSR2);
        assert_eq!(judged_at(at(0), OnChange::Restart), at(0));
        assert_eq!(judged_at(at(0), sig), at(0).saturating_add(SIGNAL_LEAD));
    }

    #[test]
    fn failed_leader_starts_count_until_a_stable_run() {
        let reset = Duration::from_secs(10);
        let quick = Duration::from_millis(300);
        assert_eq!(leader_failures_after_exit(0, quick, reset), 1);
        assert_eq!(leader_failures_after_exit(2, quick, reset), 3);
        assert_eq!(leader_failures_after_exit(2, reset, reset), 0);
        assert_eq!(leader_failures_after_exit(u64::MAX, quick, reset), u64::MAX);
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
            parse_on_change("leader-instance"),
            Ok(OnChange::LeaderInstance)
        );
        assert_eq!(parse_on_change("lease-bridge"), Ok(OnChange::LeaseBridge));
        for policy in [
            "restart",
            "leader-instance",
            "lease-bridge",
            "signal:SIGUSR2",
        ] {
            assert_eq!(parse_on_change(policy).unwrap().to_string(), policy);
        }
        assert_eq!(
            parse_on_change("signal:SIGUSR2"),
            Ok(OnChange::Signal(Signal::SIGUSR2))
        );
        assert_eq!(
            parse_on_change("signal:HUP"),
            Ok(OnChange::Signal(Signal::SIGHUP))
        );
        assert!(parse_on_change("signal:KILL").is_err());
        for sig in TOGGLE_SIGNALS {
            assert_eq!(
                parse_on_change(&format!("signal:{sig}")),
                Ok(OnChange::Signal(sig))
            );
        }
    }

    /// SIGCHLD, SIGTERM and the like were accepted as the toggle signal: the app then took a
    /// mode change for a child exit or a shutdown (or was stopped by SIGTSTP).
    #[test]
    fn signals_with_a_meaning_of_their_own_cannot_toggle() {
        for (name, why) in [
            ("SIGCHLD", "child's exit"),
            ("SIGTERM", "shut down"),
            ("INT", "shut down"),
            ("SIGQUIT", "shut down"),
            ("SIGKILL", "cannot be caught"),
            ("SIGSTOP", "cannot be caught"),
            ("SIGCONT", "job control"),
            ("SIGTSTP", "job control"),
            ("SIGPIPE", "broken pipe"),
            ("SIGALRM", "timer"),
            ("SIGSEGV", "fault"),
            ("SIGURG", "Go runtime"),
            ("SIGPWR", "default action"),
        ] {
            let e = parse_on_change(&format!("signal:{name}")).unwrap_err();
            assert!(e.contains("cannot mean") && e.contains(why), "{name}: {e}");
            assert!(
                e.contains("SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH"),
                "{name}: {e}"
            );
        }
        // Every signal the platform knows is either allowed or refused with a reason.
        for sig in Signal::iterator() {
            assert_eq!(
                parse_on_change(&format!("signal:{sig}")).is_ok(),
                TOGGLE_SIGNALS.contains(&sig),
                "{sig}"
            );
        }
        assert!(parse_on_change("signal:NOPE").is_err());
        assert!(parse_on_change("reload").unwrap_err().contains("allowed"));
    }
}
