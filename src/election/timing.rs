//! The four durations of an election and the start-up check that makes them safe together.

use std::time::Duration;

use crate::config::{human, parse_positive_duration, ConfigError};

/// Slack every safe configuration must leave between the old leader's latest possible stop
/// (renew deadline + kill grace) and the earliest takeover (lease duration). It absorbs clock
/// rate differences between nodes and scheduling delays.
pub const MIN_MARGIN: Duration = Duration::from_secs(1);

/// The shortest retry period P: the leader writes the Lease every P, and followers whose watch
/// is quiet read it every P. Safety rests on D, R and K alone, so a shorter P buys nothing but
/// load: at 1ns the leader would update the Lease as fast as the apiserver answers. 100ms
/// (ten writes a second) is already far below any leader election in Kubernetes (2s).
pub const MIN_RETRY_PERIOD: Duration = Duration::from_millis(100);

/// The shortest renew deadline R: every API call gets at most R/2 (see
/// [`Timing::api_timeout`]), and below 1s that is less than the 500ms a slow but healthy
/// apiserver needs, so the leader would lose its grant again and again for nothing.
pub const MIN_RENEW_DEADLINE: Duration = Duration::from_secs(1);

/// The shortest timeout of an API call: less than this makes a slow but healthy apiserver
/// fail calls for nothing.
pub const MIN_API_TIMEOUT: Duration = Duration::from_millis(500);

/// The longest foreign `leaseDurationSeconds` a follower honours (when it is longer than its own
/// lease duration). A holder may promise a longer duration than ours (a peer configured
/// differently, client-go with a long lease), and we wait for it; but the field is written by
/// anyone who may update the Lease, and up to 2^31 s would postpone every takeover for decades
/// after a typo or a stale hand edit. Five minutes is twenty times the default lease duration
/// and longer than any leader-election default in Kubernetes components (15 s to 60 s), so every
/// sane peer is honoured in full; a peer configured with more is only safe if its own renew
/// deadline and grace end within this cap.
pub const MAX_HONOURED_LEASE_DURATION: Duration = Duration::from_secs(300);

/// Election timing. All of it is measured on the local CLOCK_BOOTTIME only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// D: how long a held Lease record must stay unchanged, on a candidate's own clock, before
    /// that candidate may take it.
    pub lease_duration: Duration,
    /// R: a renew sent at local time t keeps the grant until t + R.
    pub renew_deadline: Duration,
    /// P: the leader renews this often; followers re-check this often when their watch is quiet.
    pub retry_period: Duration,
    /// K: the consumer stops operator work within K of a demotion or of the grant's expiry.
    pub kill_grace: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            kill_grace: Duration::from_secs(3),
        }
    }
}

/// The four durations as flags, declared once for every role that takes them: `elect` runs by
/// them, `inject` and the webhook pass them to the `elect` and `supervise` they write into the
/// pod. The defaults are [`Timing::default`]'s (a unit test holds them equal).
#[derive(Debug, Clone, clap::Args)]
pub struct TimingArgs {
    /// D: how long a held Lease must stay unchanged before another pod may take it.
    #[arg(long, env = "ELECTOR_LEASE_DURATION", value_name = "DURATION", default_value = "15s",
        value_parser = parse_positive_duration)]
    pub lease_duration: Duration,
    /// R: a renew sent at time t keeps the grant until t + R. R + kill grace + 1s must be < D.
    #[arg(long, env = "ELECTOR_RENEW_DEADLINE", value_name = "DURATION", default_value = "10s",
        value_parser = parse_positive_duration)]
    pub renew_deadline: Duration,
    /// P: the leader renews this often; must be < the renew deadline.
    #[arg(long, env = "ELECTOR_RETRY_PERIOD", value_name = "DURATION", default_value = "2s",
        value_parser = parse_positive_duration)]
    pub retry_period: Duration,
    /// K: the app stops operator work within K of a demotion or of the grant's expiry (the
    /// elector's and the supervisor's `--kill-grace`).
    #[arg(long, env = "ELECTOR_KILL_GRACE", value_name = "DURATION", default_value = "3s",
        value_parser = parse_positive_duration)]
    pub kill_grace: Duration,
}

impl TimingArgs {
    /// The durations given, not yet checked ([`Timing::validate`]).
    pub fn timing(&self) -> Timing {
        Timing {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            kill_grace: self.kill_grace,
        }
    }
}

impl Timing {
    /// Refuses timings under which an old leader could still run when a new one starts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (flag, d) in [
            ("--lease-duration", self.lease_duration),
            ("--renew-deadline", self.renew_deadline),
            ("--retry-period", self.retry_period),
            ("--kill-grace", self.kill_grace),
        ] {
            if d.is_zero() {
                return Err(ConfigError::new(
                    flag,
                    human(d),
                    "must be greater than zero",
                ));
            }
        }
        if self.retry_period < MIN_RETRY_PERIOD {
            return Err(ConfigError::new(
                "--retry-period",
                human(self.retry_period),
                format!(
                    "must be at least {} (and shorter than --renew-deadline): the leader writes \
                     the Lease every retry period, and a shorter one only loads the apiserver",
                    human(MIN_RETRY_PERIOD)
                ),
            ));
        }
        if self.renew_deadline < MIN_RENEW_DEADLINE {
            return Err(ConfigError::new(
                "--renew-deadline",
                human(self.renew_deadline),
                format!(
                    "must be at least {}: every API call gets half the renew deadline, and less \
                     than 500ms makes a slow but healthy apiserver cost the leader its grant",
                    human(MIN_RENEW_DEADLINE)
                ),
            ));
        }
        if self.retry_period >= self.renew_deadline {
            return Err(ConfigError::new(
                "--retry-period",
                human(self.retry_period),
                format!(
                    "must be shorter than --renew-deadline ({}), so a leader gets more than one renew attempt per deadline",
                    human(self.renew_deadline)
                ),
            ));
        }
        let needed = self.renew_deadline + self.kill_grace + MIN_MARGIN;
        if needed >= self.lease_duration {
            return Err(ConfigError::new(
                "--lease-duration",
                human(self.lease_duration),
                format!(
                    "must be greater than --renew-deadline + --kill-grace + {} = {} ({} + {} + {}), \
                     or a new leader could start before the old one has stopped",
                    human(MIN_MARGIN),
                    human(needed),
                    human(self.renew_deadline),
                    human(self.kill_grace),
                    human(MIN_MARGIN)
                ),
            ));
        }
        if self.lease_duration > Duration::from_secs(i32::MAX as u64) {
            return Err(ConfigError::new(
                "--lease-duration",
                human(self.lease_duration),
                "must fit leaseDurationSeconds (at most 2147483647s)",
            ));
        }
        Ok(())
    }

    /// `leaseDurationSeconds` to write: D rounded up to whole seconds, so peers that read the
    /// field never wait less than we promise.
    pub fn lease_duration_seconds(&self) -> i32 {
        let d = self.lease_duration;
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        i32::try_from(secs).unwrap_or(i32::MAX)
    }

    /// How long a record held by someone else must stay unchanged before we may take it, given
    /// the `leaseDurationSeconds` it carries: never less than our own lease duration, a longer
    /// promise honoured up to [`MAX_HONOURED_LEASE_DURATION`] (or our own, if that is longer).
    pub fn takeover_wait(&self, foreign: Option<Duration>) -> Duration {
        let cap = MAX_HONOURED_LEASE_DURATION.max(self.lease_duration);
        foreign
            .unwrap_or(Duration::ZERO)
            .clamp(self.lease_duration, cap)
    }

    /// Timeout of an API call: half the renew deadline (at least 500 ms, see
    /// [`MIN_RENEW_DEADLINE`]). A write sent at t grants until t + R however late its answer
    /// comes, so an apiserver slower than the retry period but within this still elects and
    /// renews; and a hung call is given up with time to spare. A leader's renews get less as
    /// their grant runs out (see [`Timing::renew_timeout`]).
    pub fn api_timeout(&self) -> Duration {
        (self.renew_deadline / 2).max(MIN_API_TIMEOUT)
    }

    /// Timeout of a leader's renew sent while its grant has `remaining` to run: half of it, so
    /// a renew that stalls for its whole timeout leaves as long again for a retry on a fresh
    /// connection before the grant lapses, and each answer may take up to half of what is
    /// left; at least 500 ms (near the expiry the race with the grant decides, not the
    /// timeout), at most [`Timing::api_timeout`].
    pub fn renew_timeout(&self, remaining: Duration) -> Duration {
        (remaining / 2).min(self.api_timeout()).max(MIN_API_TIMEOUT)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_flags_default_to_the_default_timing() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            timing: TimingArgs,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(["x"]).expect("no flags parse");
        assert_eq!(cli.timing.timing(), Timing::default());
    }

    use super::*;

    fn t(d: u64, r: u64, p: u64, k: u64) -> Timing {
        Timing {
            lease_duration: Duration::from_millis(d),
            renew_deadline: Duration::from_millis(r),
            retry_period: Duration::from_millis(p),
            kill_grace: Duration::from_millis(k),
        }
    }

    #[test]
    fn defaults_are_safe() {
        Timing::default().validate().unwrap();
        assert_eq!(Timing::default().lease_duration_seconds(), 15);
    }

    #[test]
    fn lease_must_outlast_deadline_grace_and_margin() {
        // 10 + 3 + 1 = 14 < 15 is fine; 10 + 4 + 1 = 15 is not.
        t(15_000, 10_000, 2_000, 3_000).validate().unwrap();
        let err = t(15_000, 10_000, 2_000, 4_000).validate().unwrap_err();
        assert_eq!(err.flag, "--lease-duration");
        assert!(
            err.reason.contains("--renew-deadline + --kill-grace"),
            "{err}"
        );
    }

    #[test]
    fn retry_must_be_shorter_than_deadline() {
        let err = t(15_000, 2_000, 2_000, 1_000).validate().unwrap_err();
        assert_eq!(err.flag, "--retry-period");
    }

    #[test]
    fn zero_is_refused() {
        assert_eq!(
            t(15_000, 10_000, 2_000, 0).validate().unwrap_err().flag,
            "--kill-grace"
        );
    }

    /// A 1ns retry period passed (it is shorter than any renew deadline): the leader then
    /// updated the Lease as fast as the apiserver answered.
    #[test]
    fn a_retry_period_or_renew_deadline_below_its_floor_is_refused() {
        let err = t(15_000, 10_000, 0, 3_000).validate().unwrap_err();
        assert_eq!(err.flag, "--retry-period");
        let nano = Timing {
            retry_period: Duration::from_nanos(1),
            ..Timing::default()
        };
        let err = nano.validate().unwrap_err();
        assert_eq!(err.flag, "--retry-period");
        assert!(err.reason.contains("at least 100ms"), "{err}");
        t(15_000, 10_000, 100, 3_000).validate().unwrap();
        let err = t(3_000, 999, 100, 500).validate().unwrap_err();
        assert_eq!(err.flag, "--renew-deadline");
        assert!(err.reason.contains("at least 1s"), "{err}");
        t(3_000, 1_000, 100, 500).validate().unwrap();
        // At the floors every API call still gets 500ms.
        assert!(t(3_000, 1_000, 100, 500).api_timeout() >= Duration::from_millis(500));
    }

    #[test]
    fn fractional_lease_duration_rounds_up() {
        assert_eq!(t(4_500, 2_000, 500, 1_000).lease_duration_seconds(), 5);
    }

    #[test]
    fn a_foreign_duration_is_honoured_up_to_the_cap_and_never_below_ours() {
        let timing = Timing::default();
        let s = Duration::from_secs;
        assert_eq!(timing.takeover_wait(None), s(15));
        assert_eq!(timing.takeover_wait(Some(s(2))), s(15));
        assert_eq!(timing.takeover_wait(Some(s(60))), s(60));
        assert_eq!(timing.takeover_wait(Some(s(300))), s(300));
        assert_eq!(timing.takeover_wait(Some(s(i32::MAX as u64))), s(300));
        // Our own lease duration beyond the cap wins over the cap.
        let long = t(600_000, 10_000, 2_000, 3_000);
        assert_eq!(long.takeover_wait(Some(s(i32::MAX as u64))), s(600));
    }

    #[test]
    fn a_stalled_renew_leaves_as_long_again_for_its_retry() {
        let timing = Timing::default();
        let s = Duration::from_secs;
        // The renew one retry period after the last success gets 4s; stalled that long, the
        // retry (a quarter retry period later) still gets 1.75s before the 10s grant lapses.
        let first = timing.renew_timeout(s(8));
        assert_eq!(first, s(4));
        let left = s(8) - first - timing.retry_period / 4;
        assert_eq!(timing.renew_timeout(left), Duration::from_millis(1_750));
        // Slower than the retry period is fine while it is within half of what is left.
        assert!(first > timing.retry_period);
        // Never above half the deadline, never below the floor.
        assert_eq!(timing.renew_timeout(s(60)), s(5));
        assert_eq!(timing.renew_timeout(Duration::ZERO), MIN_API_TIMEOUT);
    }

    #[test]
    fn api_timeout_is_below_the_renew_deadline() {
        for timing in [
            Timing::default(),
            t(4_000, 1_500, 100, 1_000),
            t(60_000, 40_000, 30_000, 5_000),
        ] {
            assert!(timing.api_timeout() < timing.renew_deadline);
        }
    }
}
