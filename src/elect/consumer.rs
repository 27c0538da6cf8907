//! The pod's consumer as the elector sees it: whether the app's supervisor (or a native app) has
//! shown, in acks signed with this elector's key, that it runs and obeys our objects.
//!
//! Why the elector needs this: holding the Lease is only useful while something in the pod
//! reconciles. An app container that never started (an image that cannot be pulled, a
//! `CreateContainerConfigError`), a container that was OOM-killed as a whole, or a supervisor that
//! cannot read the token all leave the elector running alone; if it took or kept the Lease then,
//! no operator would run anywhere while every probe said "leader". So a pod contends only while
//! its consumer is [`ConsumerState::Live`], and a leader whose consumer goes quiet for longer than
//! the timeout steps down.
//!
//! The rules here are pure (evidence and `now` in, a state out); the loop gathers the evidence
//! from the outputs (the toggle's answers, the ack file) and acts on the state.

use std::time::Duration;

use crate::clock::BootInstant;
use crate::grant::Mode;

/// How the elector learns that its consumer is alive (`--consumer-check`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckMode {
    /// Every object is pushed to the toggle, and followers' last object is pushed again every
    /// retry period: the consumer is live while a signed answer came within the timeout.
    Toggle,
    /// No toggle: the consumer is live while its ack file (signed) covers our newest object, or
    /// the oldest object it has not acked yet is younger than the timeout. A follower publishes
    /// no new objects, so this proves the consumer was there once, not that it still is.
    AckFile,
    /// Contend whatever the consumer does: for an elector without any consumer (tests, or an
    /// app that only reads the flag file and writes no acks).
    Off,
}

impl CheckMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckMode::Toggle => "toggle",
            CheckMode::AckFile => "ack-file",
            CheckMode::Off => "none",
        }
    }
}

/// The consumer check's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsumerCheck {
    pub mode: CheckMode,
    /// How long the consumer may stay without a signed answer (or with an object unacked)
    /// before a follower stops contending and a leader steps down.
    pub timeout: Duration,
}

/// What the elector has seen of its consumer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Evidence {
    /// The mode of the newest signed ack of this elector incarnation (either channel).
    pub acked_mode: Option<Mode>,
    /// When the toggle last answered a push with a signed ack (local boot clock).
    pub last_answer: Option<BootInstant>,
    /// When the oldest object not covered by the newest ack was published; None when every
    /// object published is covered.
    pub oldest_unacked: Option<BootInstant>,
}

/// What the consumer is, as far as contending goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsumerState {
    /// The check is off: contend regardless.
    Unchecked,
    /// It answered within the timeout; `mode` is what its newest ack says is in effect.
    Live { mode: Mode },
    /// No signed ack from it yet: not started, not listening, or unable to read the token.
    Unproven,
    /// It answered once, but nothing for longer than the timeout.
    Silent { quiet_for: Duration },
    /// Its newest signed ack says it has exited.
    Stopped,
}

impl ConsumerState {
    /// Whether a pod with this consumer may take (or keep) the Lease.
    pub fn may_contend(self) -> bool {
        matches!(self, ConsumerState::Unchecked | ConsumerState::Live { .. })
    }

    /// Whether the consumer says operator work runs (leader mode in effect).
    pub fn runs_leader(self) -> bool {
        matches!(self, ConsumerState::Live { mode: Mode::Leader })
    }

    /// A short name for probes, metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            ConsumerState::Unchecked => "unchecked",
            ConsumerState::Live { .. } => "live",
            ConsumerState::Unproven => "unproven",
            ConsumerState::Silent { .. } => "silent",
            ConsumerState::Stopped => "stopped",
        }
    }
}

impl std::fmt::Display for ConsumerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConsumerState::Unchecked => f.write_str("consumer check off"),
            ConsumerState::Live { mode } => write!(f, "the consumer answers ({mode} in effect)"),
            ConsumerState::Unproven => f.write_str(
                "no signed ack from the app's supervisor yet (app container not running, toggle \
                 not listening, or the supervisor cannot read the token)",
            ),
            ConsumerState::Silent { quiet_for } => write!(
                f,
                "the app's supervisor has not answered for {}",
                crate::config::human(*quiet_for)
            ),
            ConsumerState::Stopped => f.write_str("the app's supervisor says it has exited"),
        }
    }
}

/// The consumer's state at `now` from what the elector has seen of it.
pub fn judge(check: ConsumerCheck, evidence: Evidence, now: BootInstant) -> ConsumerState {
    if check.mode == CheckMode::Off {
        return ConsumerState::Unchecked;
    }
    let mode = match evidence.acked_mode {
        None => return ConsumerState::Unproven,
        Some(Mode::Stopped) => return ConsumerState::Stopped,
        Some(mode) => mode,
    };
    let quiet_for = match check.mode {
        CheckMode::Toggle => match evidence.last_answer {
            // Acked through the file only (the toggle never answered): not proven to listen.
            None => return ConsumerState::Unproven,
            Some(at) => now.saturating_since(at),
        },
        _ => evidence
            .oldest_unacked
            .map_or(Duration::ZERO, |at| now.saturating_since(at)),
    };
    if quiet_for > check.timeout {
        ConsumerState::Silent { quiet_for }
    } else {
        ConsumerState::Live { mode }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn at(secs: u64) -> BootInstant {
        BootInstant::from_nanos(secs * S)
    }

    fn check(mode: CheckMode) -> ConsumerCheck {
        ConsumerCheck {
            mode,
            timeout: Duration::from_secs(10),
        }
    }

    #[test]
    fn no_signed_ack_is_no_proof_on_either_channel() {
        for mode in [CheckMode::Toggle, CheckMode::AckFile] {
            let state = judge(check(mode), Evidence::default(), at(100));
            assert_eq!(state, ConsumerState::Unproven);
            assert!(!state.may_contend());
        }
        assert!(judge(check(CheckMode::Off), Evidence::default(), at(1)).may_contend());
    }

    #[test]
    fn the_toggle_must_have_answered_within_the_timeout() {
        let c = check(CheckMode::Toggle);
        let mut ev = Evidence {
            acked_mode: Some(Mode::Follower),
            ..Evidence::default()
        };
        assert_eq!(
            judge(c, ev, at(5)),
            ConsumerState::Unproven,
            "file-only ack"
        );
        ev.last_answer = Some(at(100));
        assert_eq!(
            judge(c, ev, at(110)),
            ConsumerState::Live {
                mode: Mode::Follower
            }
        );
        let late = judge(c, ev, at(111));
        assert_eq!(
            late,
            ConsumerState::Silent {
                quiet_for: Duration::from_secs(11)
            }
        );
        assert!(!late.may_contend());
    }

    #[test]
    fn a_stopped_consumer_never_contends_however_fresh() {
        let ev = Evidence {
            acked_mode: Some(Mode::Stopped),
            last_answer: Some(at(100)),
            oldest_unacked: None,
        };
        assert_eq!(
            judge(check(CheckMode::Toggle), ev, at(100)),
            ConsumerState::Stopped
        );
        assert_eq!(
            judge(check(CheckMode::AckFile), ev, at(100)),
            ConsumerState::Stopped
        );
    }

    #[test]
    fn the_ack_file_must_catch_up_with_our_objects_within_the_timeout() {
        let c = check(CheckMode::AckFile);
        let mut ev = Evidence {
            acked_mode: Some(Mode::Leader),
            ..Evidence::default()
        };
        let live = judge(c, ev, at(1000));
        assert!(live.runs_leader());
        ev.oldest_unacked = Some(at(990));
        assert!(judge(c, ev, at(1000)).runs_leader());
        assert_eq!(
            judge(c, ev, at(1001)),
            ConsumerState::Silent {
                quiet_for: Duration::from_secs(11)
            }
        );
    }
}
