//! The grant-obedience state: the last object obeyed, a local demotion, the ack file, the newest
//! leader grant's expiry and the elector's K; and from them, what mode is owed now.
//!
//! It stands apart from the loop because the safety argument rests on it alone and it knows
//! nothing of processes: which objects are obeyed, when a leader grant stops counting, what is
//! acked and how late a leader may be killed are decided here; how the child gets there (starts,
//! stops, signals, restarts) is the loop's, in `supervise/supervisor.rs`.

use std::path::PathBuf;
use std::time::Duration;

use crate::clock::BootInstant;
use crate::grant::{self, Grant, GrantError, Mode, Order};
use crate::supervise::grant::trust::{LogThrottle, Refusal, Trust};
use crate::supervise::mode::{self, OnChange, SignalDemotion, Verdict};
use crate::supervise::settings::Settings;

/// The channel an object arrived by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// Read from the flag file.
    FlagFile,
    /// Pushed to the toggle, and owed an answer.
    Toggle,
}

impl Channel {
    fn as_str(self) -> &'static str {
        match self {
            Channel::FlagFile => "flag file",
            Channel::Toggle => "toggle",
        }
    }
}

/// What became of an object offered to [`Obedience::offer`].
#[derive(Debug)]
pub enum Offer {
    /// It cannot be tied to the elector: never obeyed. Read from the flag file, it has demoted
    /// locally.
    Refused(Refusal),
    /// Older than (or conflicting with) the last object obeyed, whose order is `last`: ignored.
    Stale { last: Order },
    /// Obeyed now, or a repeat of the last object obeyed. It asks for `requested` (an expired
    /// leader grant asks for follower).
    Obeyed { requested: Mode },
}

/// What the supervisor reports of its leader app in every ack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaderCounts {
    /// Leader runs in a row that ended on their own before `--restart-backoff-reset`.
    pub failures_in_a_row: u64,
    /// Leader-mode starts since the supervisor started.
    pub starts: u64,
    /// Leader runs that ended on their own, or could not start, since the supervisor started.
    pub crashes: u64,
    /// Leader instances restarted because `--leader-health-url` failed too often in a row.
    pub unhealthy: u64,
    /// Failed probes of `--leader-health-url`.
    pub probe_failures: u64,
}

/// What the supervisor has obeyed and acked, and what it knows from that of its elector.
pub struct Obedience {
    obeyed: Option<Grant>,
    /// The flag file went missing or unreadable after the last object: follower until a newer one.
    demoted_locally: bool,
    last_ack: Option<Grant>,
    /// Whether this supervisor has replaced the ack file left by a previous one (whose `stopped`
    /// would ack any demotion); until then the app does not run in leader mode.
    ack_ready: bool,
    /// Expiry of the newest leader grant obeyed: a leader child's right to run ends there at the
    /// latest, whatever else happens, so its SIGKILL is due no later than K after it.
    leader_expiry: Option<BootInstant>,
    /// The elector's kill grace, from the newest object obeyed; ours is never longer.
    elector_kill_grace: Option<Duration>,
    /// The elector's token: what ties an object to the elector, and the key acks are signed with.
    trust: Trust,
    /// Refused objects are logged at most once a second, so a flood cannot flood the log.
    refusals: LogThrottle,
    /// The flag file's `.ack` companion.
    ack_file: PathBuf,
    /// How often a failed start-up write of the ack file is retried (for its log line).
    ack_retry: Duration,
    /// `--kill-grace`, before the elector's K caps it.
    own_kill_grace: Duration,
    /// `--on-change`, which decides when grants are judged (see [`mode::judged_at`]).
    on_change: OnChange,
}

impl Obedience {
    /// Nothing obeyed yet, and the ack file not yet replaced (see [`Obedience::write_startup_ack`]).
    pub fn new(settings: &Settings, trust: Trust) -> Self {
        Obedience {
            obeyed: None,
            demoted_locally: false,
            last_ack: None,
            ack_ready: false,
            leader_expiry: None,
            elector_kill_grace: None,
            trust,
            refusals: LogThrottle::default(),
            ack_file: settings.ack_file.clone(),
            ack_retry: settings.ack_retry,
            own_kill_grace: settings.kill_grace,
            on_change: settings.on_change,
        }
    }

    /// Takes the flag file's object as read at start-up (after the ack file was reset), if it can
    /// be tied to the elector.
    pub fn adopt(&mut self, g: Grant) {
        match self.trust.check(&g, BootInstant::now()) {
            Ok(()) => {
                self.note_obeyed(&g);
                self.obeyed = Some(g);
            }
            Err(refusal) => {
                tracing::warn!(
                    reason = refusal.reason(),
                    incarnation = g.incarnation,
                    seq = g.seq,
                    "flag file holds an object that cannot be tied to the elector; ignoring it"
                );
            }
        }
    }

    /// Records what an obeyed object tells about its elector: the leader expiry, and its K.
    fn note_obeyed(&mut self, g: &Grant) {
        if g.mode == Mode::Leader {
            self.leader_expiry = Some(g.expiry());
        }
        let k = g.kill_grace();
        if self.elector_kill_grace != Some(k) {
            self.elector_kill_grace = Some(k);
            if k < self.own_kill_grace {
                tracing::error!(
                    supervisor_kill_grace = %crate::config::human(self.own_kill_grace),
                    elector_kill_grace = %crate::config::human(k),
                    "--kill-grace is longer than the elector's, which releases the Lease on the \
                     assumption that the app stopped within its own; using the elector's. Set both \
                     to the same value"
                );
            }
        }
    }

    /// The last object obeyed.
    pub fn obeyed(&self) -> Option<&Grant> {
        self.obeyed.as_ref()
    }

    /// The order of the last object obeyed (0/0 before any).
    pub fn last_order(&self) -> Order {
        self.obeyed.as_ref().map(Grant::order).unwrap_or_default()
    }

    /// Whether the ack file a previous supervisor left has been replaced.
    pub fn ack_ready(&self) -> bool {
        self.ack_ready
    }

    /// The kill grace in force: ours, never longer than the elector's.
    pub fn kill_grace(&self) -> Duration {
        mode::effective_kill_grace(self.own_kill_grace, self.elector_kill_grace)
    }

    /// The instant grants are judged at `now` (ahead by the signal lead in signal mode).
    fn judged_at(&self, now: BootInstant) -> BootInstant {
        mode::judged_at(now, self.on_change)
    }

    /// The mode owed now (ignoring shutdown).
    pub fn target(&self, now: BootInstant) -> Mode {
        mode::target_mode(
            self.obeyed.as_ref(),
            self.demoted_locally || !self.ack_ready,
            self.judged_at(now),
        )
    }

    /// While leader is owed, the instant to demote at: the dead man's switch.
    pub fn leader_deadline(&self, now: BootInstant) -> Option<BootInstant> {
        match (&self.obeyed, self.target(now)) {
            // Judged ahead in signal mode, so the lapse is acted on that much earlier.
            (Some(g), Mode::Leader) => Some(
                g.expiry()
                    .saturating_sub(self.judged_at(now).saturating_since(now)),
            ),
            _ => None,
        }
    }

    /// When SIGKILL is due for a child in a mode whose stop begins at `now`: the kill grace from
    /// now, but for a leader never later than the kill grace after its grant's expiry.
    pub fn kill_deadline(&self, now: BootInstant) -> impl Fn(Mode) -> BootInstant {
        let (grace, expiry) = (self.kill_grace(), self.leader_expiry);
        move |mode| {
            let lapsed = match mode {
                Mode::Leader => expiry,
                _ => None,
            };
            mode::kill_deadline(now, grace, lapsed)
        }
    }

    /// How a leader child is demoted by signal at `now` (see [`mode::signal_demotion`]).
    pub fn signal_demotion(&self, now: BootInstant) -> SignalDemotion {
        mode::signal_demotion(now, self.kill_grace(), self.leader_expiry)
    }

    /// Follower until a newer object arrives.
    pub fn demote_locally(&mut self) {
        self.demoted_locally = true;
    }

    /// Applies the trust check and the ordering rule to an object from either channel.
    pub fn offer(&mut self, g: &Grant, via: Channel, now: BootInstant) -> Offer {
        if let Err(refusal) = self.trust.check(g, now) {
            let via_name = via.as_str();
            if let Some(suppressed) = self.refusals.admit(now) {
                tracing::warn!(via = via_name, incarnation = g.incarnation, seq = g.seq, mode = %g.mode,
                    suppressed, "refusing a grant object that cannot be tied to the elector: {}",
                    refusal.reason());
            }
            if via == Channel::FlagFile {
                // Never obeyed; and since the file no longer holds what the elector last wrote
                // there (a demotion may have been overwritten), the grant obeyed before is no
                // longer known to be current: fail closed until a verified object arrives.
                self.demote_locally();
            }
            return Offer::Refused(refusal);
        }
        let verdict = mode::judge(self.obeyed.as_ref(), g);
        let requested = mode::target_mode(Some(g), false, self.judged_at(now));
        match verdict {
            Verdict::Stale => {
                tracing::debug!(
                    incarnation = g.incarnation,
                    seq = g.seq,
                    "ignoring a stale grant object"
                );
                return Offer::Stale {
                    last: self.last_order(),
                };
            }
            Verdict::Repeat => {}
            Verdict::Obey => {
                let before = self.target(now);
                let after = requested;
                let new_elector = self
                    .obeyed
                    .as_ref()
                    .is_some_and(|o| o.incarnation != g.incarnation);
                if before != after || self.obeyed.as_ref().map(|o| o.epoch) != Some(g.epoch) {
                    tracing::info!(from = %before, to = %after, holder = %g.holder, epoch = g.epoch,
                        incarnation = g.incarnation, seq = g.seq, "grant changed");
                } else if new_elector {
                    // A restarted elector that adopted the Lease: same mode, so the running
                    // child is kept (see `Supervisor::reconcile`); only the grant's issuer
                    // changed.
                    tracing::info!(mode = %after, holder = %g.holder, epoch = g.epoch,
                        incarnation = g.incarnation, seq = g.seq,
                        "a new elector incarnation continues the grant; the app keeps running");
                } else {
                    tracing::debug!(mode = %after, seq = g.seq, expires_boottime_ns = g.expires_boottime_ns, "grant renewed");
                }
                self.note_obeyed(g);
                self.obeyed = Some(g.clone());
                self.demoted_locally = false;
            }
        }
        Offer::Obeyed { requested }
    }

    /// Replaces whatever ack file a previous supervisor left with "follower, nothing obeyed yet"
    /// (order 0/0, which acks no object). Called before the flag file is first read, so an old
    /// `stopped` cannot ack a demotion written after that reading.
    pub fn write_startup_ack(&mut self) {
        let mut ack = Grant::follower("", 0, Order::default(), "");
        self.trust.sign_ack(&mut ack);
        match grant::write_file(&self.ack_file, &ack) {
            Ok(()) => {
                if !self.ack_ready {
                    tracing::info!(path = %self.ack_file.display(), "ack file reset to follower");
                }
                self.ack_ready = true;
                self.last_ack = Some(ack);
            }
            Err(e) => tracing::error!(error = %e,
                retry_in = %crate::config::human(self.ack_retry),
                "cannot write the ack file; a stale one could ack a demotion that has not happened, \
                 so the app runs only as follower until it is written"),
        }
    }

    /// The ack for the current state: the last object obeyed, with the mode actually in effect
    /// (a leader grant that lapsed is acked as follower, with its order), the failed leader
    /// starts in a row and the leader-app totals, signed with the elector's key.
    pub fn ack_object(&self, in_effect: Mode, counts: LeaderCounts) -> Grant {
        let mut ack = self
            .obeyed
            .clone()
            .unwrap_or_else(|| Grant::follower("", 0, Order::default(), ""));
        if ack.mode != in_effect {
            ack.mode = in_effect;
            ack.expires_boottime_ns = 0;
            ack.expires_at = None;
        }
        ack.leader_start_failures = counts.failures_in_a_row;
        ack.leader_starts = counts.starts;
        ack.leader_crashes = counts.crashes;
        ack.leader_unhealthy = counts.unhealthy;
        ack.leader_probe_failures = counts.probe_failures;
        self.trust.sign_ack(&mut ack);
        ack
    }

    /// Writes `ack` to the ack file, unless it is the ack last written there.
    pub fn write_ack(&mut self, ack: &Grant) -> Result<(), GrantError> {
        if self.last_ack.as_ref() == Some(ack) {
            return Ok(());
        }
        grant::write_file(&self.ack_file, ack)?;
        self.last_ack = Some(ack.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::auth::{self, Key, Token};
    use crate::supervise::mode::{Backoff, OnFollower};

    const K: Duration = Duration::from_secs(3);

    /// An obedience state whose elector (incarnation 1) signs with the returned key; the ack
    /// file lies in `dir`.
    fn obedience(dir: &std::path::Path, own_kill_grace: Duration) -> (Obedience, Key) {
        let flag = dir.join("grant.json");
        let key = Key::generate().unwrap();
        auth::write_token(
            &auth::token_path(&flag),
            &Token {
                incarnation: 1,
                key: key.clone(),
            },
        )
        .unwrap();
        let mut trust = Trust::new(&flag, nix::unistd::geteuid().as_raw());
        trust.reload();
        let settings = Settings {
            command: vec!["true".into()],
            leader_env: Vec::new(),
            follower_env: Vec::new(),
            leader_args: Vec::new(),
            follower_args: Vec::new(),
            kill_grace: own_kill_grace,
            on_follower: OnFollower::Run,
            on_change: OnChange::Restart,
            ack_file: dir.join("grant.json.ack"),
            ack_retry: Duration::from_secs(1),
            exit_with_child: false,
            serving_head_start: Duration::ZERO,
            leader_says_listening: false,
            backoff: Backoff::new(
                Duration::from_secs(1),
                Duration::from_secs(30),
                Duration::from_secs(60),
            ),
            converge: None,
            standby: None,
            health: None,
            bridge: None,
        };
        (Obedience::new(&settings, trust), key)
    }

    fn leader(key: &Key, seq: u64, expires: BootInstant, k: Duration) -> Grant {
        let mut g = Grant::leader(
            "pod",
            1,
            Order {
                incarnation: 1,
                seq,
            },
            "ns/l",
            expires,
        )
        .with_limits(Duration::from_secs(10), k);
        key.sign_grant(&mut g);
        g
    }

    fn follower(key: &Key, seq: u64) -> Grant {
        let mut g = Grant::follower(
            "other",
            1,
            Order {
                incarnation: 1,
                seq,
            },
            "ns/l",
        )
        .with_limits(Duration::from_secs(10), K);
        key.sign_grant(&mut g);
        g
    }

    #[test]
    fn no_leader_is_owed_until_the_previous_ack_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let (mut ob, key) = obedience(dir.path(), K);
        let now = BootInstant::now();
        ob.adopt(leader(
            &key,
            1,
            now.saturating_add(Duration::from_secs(5)),
            K,
        ));
        assert_eq!(ob.target(now), Mode::Follower);
        assert_eq!(ob.leader_deadline(now), None);
        ob.write_startup_ack();
        assert!(ob.ack_ready());
        assert_eq!(ob.target(now), Mode::Leader);
    }

    #[test]
    fn a_refused_flag_file_object_demotes_until_a_newer_one_is_obeyed() {
        let dir = tempfile::tempdir().unwrap();
        let (mut ob, key) = obedience(dir.path(), K);
        ob.write_startup_ack();
        let now = BootInstant::now();
        let expires = now.saturating_add(Duration::from_secs(5));
        let g = leader(&key, 1, expires, K);
        assert!(matches!(
            ob.offer(&g, Channel::Toggle, now),
            Offer::Obeyed {
                requested: Mode::Leader
            }
        ));
        let mut forged = leader(&key, 2, expires, K);
        forged.mac = None;
        // Pushed, a forgery is only refused: the flag file may still hold the grant obeyed.
        assert!(matches!(
            ob.offer(&forged, Channel::Toggle, now),
            Offer::Refused(_)
        ));
        assert_eq!(ob.target(now), Mode::Leader);
        // Read from the flag file, it means the file no longer says what the elector wrote.
        assert!(matches!(
            ob.offer(&forged, Channel::FlagFile, now),
            Offer::Refused(_)
        ));
        assert_eq!(ob.target(now), Mode::Follower);
        // The last object again is no newer: still follower.
        assert!(matches!(
            ob.offer(&g, Channel::FlagFile, now),
            Offer::Obeyed { .. }
        ));
        assert_eq!(ob.target(now), Mode::Follower);
        ob.offer(&leader(&key, 3, expires, K), Channel::FlagFile, now);
        assert_eq!(ob.target(now), Mode::Leader);
        assert!(matches!(
            ob.offer(&follower(&key, 2), Channel::Toggle, now),
            Offer::Stale {
                last: Order {
                    incarnation: 1,
                    seq: 3
                }
            }
        ));
    }

    #[test]
    fn a_leader_is_killed_within_the_electors_k_of_the_newest_leader_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let (mut ob, key) = obedience(dir.path(), Duration::from_secs(10));
        ob.write_startup_ack();
        let now = BootInstant::now();
        let expires = now.saturating_add(Duration::from_secs(1));
        ob.offer(&leader(&key, 1, expires, K), Channel::Toggle, now);
        // Ours is 10s; the elector's 3s wins.
        assert_eq!(ob.kill_grace(), K);
        // A follower object does not move the leader expiry the kill is capped by.
        ob.offer(&follower(&key, 2), Channel::Toggle, now);
        let late = expires.saturating_add(Duration::from_secs(2));
        let kill_at = ob.kill_deadline(late);
        assert_eq!(kill_at(Mode::Leader), expires.saturating_add(K));
        assert_eq!(kill_at(Mode::Follower), late.saturating_add(K));
        assert_eq!(ob.signal_demotion(late), SignalDemotion::Stop);
    }

    #[test]
    fn a_lapsed_leader_grant_is_acked_as_follower_with_its_order() {
        let dir = tempfile::tempdir().unwrap();
        let (mut ob, key) = obedience(dir.path(), K);
        ob.write_startup_ack();
        let now = BootInstant::now();
        ob.offer(
            &leader(&key, 4, now.saturating_add(Duration::from_secs(1)), K),
            Channel::Toggle,
            now,
        );
        let counts = LeaderCounts {
            failures_in_a_row: 2,
            starts: 5,
            crashes: 3,
            unhealthy: 1,
            probe_failures: 4,
        };
        let ack = ob.ack_object(Mode::Follower, counts);
        assert_eq!((ack.mode, ack.order()), (Mode::Follower, ob.last_order()));
        assert_eq!((ack.expires_boottime_ns, &ack.expires_at), (0, &None));
        assert_eq!(
            (
                ack.leader_start_failures,
                ack.leader_starts,
                ack.leader_crashes,
                ack.leader_unhealthy,
                ack.leader_probe_failures
            ),
            (2, 5, 3, 1, 4)
        );
        assert!(key.verify_ack(&ack));
        ob.write_ack(&ack).unwrap();
        assert_eq!(grant::read_file(&ob.ack_file).unwrap(), Some(ack));
    }
}
