//! The seeded fault schedule: a PRNG, the fault kinds, and the recovery bound each one is
//! allowed, derived from the election timings.

use std::fmt;
use std::time::Duration;

use passmower_elector::election::timing::MIN_MARGIN;

/// The timings every pod runs with. They pass the elector's safety check:
/// R + K + 1s = 3.5s < D = 4s.
pub const LEASE_DURATION: Duration = Duration::from_secs(4);
pub const RENEW_DEADLINE: Duration = Duration::from_millis(1500);
pub const RETRY_PERIOD: Duration = Duration::from_millis(300);
pub const KILL_GRACE: Duration = Duration::from_secs(1);
/// `supervise --restart-backoff-max`: the longest a crashed child waits to be restarted (the
/// default 30s would let repeated child kills stretch a gap far beyond any useful bound).
pub const CHILD_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How long the harness waits before restarting an exited elector or supervisor (the
/// kubelet's restart delay), at most.
pub const RESTART_DELAY_MAX: Duration = Duration::from_millis(1000);
pub const RESTART_DELAY_MIN: Duration = Duration::from_millis(200);

/// Honest slack added to every liveness bound for work the timings do not describe: process
/// start (elector: kube client and TLS handshake; supervisor; the child shell), the watch
/// re-establishing itself, a few API round trips through a fault proxy, and the scheduler of a
/// loaded two-core machine that also compiles other projects. Measured handovers take well under
/// a second when the machine is idle; three seconds leaves room for load without hiding a missed
/// timer (which would cost at least a lease duration).
pub const SLACK: Duration = Duration::from_secs(3);

/// splitmix64: a few lines, good enough statistically for a fault schedule, and the same
/// sequence on every platform for a given seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is irrelevant at these sizes.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// Uniform in `[lo, hi]`, millisecond resolution.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let lo_ms = lo.as_millis() as u64;
        let hi_ms = hi.as_millis() as u64;
        Duration::from_millis(lo_ms + self.next_u64() % (hi_ms - lo_ms + 1))
    }
}

/// Every fault the campaign injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    ElectorKill,
    /// SIGKILL of an elector, started again at once with the same pod UID and volume (the
    /// kubelet's first restart of a crashed container): it adopts the Lease when the rules of
    /// `election::adoption` allow. The report records its gaps and the leader app
    /// restarts that followed it.
    ElectorRestart,
    ElectorTerm,
    ElectorStop,
    ChildKill,
    ChildTerm,
    ChildStop,
    /// SIGKILL of the supervisor; the harness then kills what was left in its session, as the
    /// container runtime tears a crashed container down, and restarts it.
    SupervisorKill,
    SupervisorTerm,
    ProxyBlackhole,
    ProxyReset,
    ProxyDelay,
    ApiserverRestart,
    EtcdRestart,
    /// etcd restored from an older snapshot without `--bump-revision`: a cold copy of its data
    /// dir is taken (etcd stopped briefly), the pods run on for a while — in half the draws the
    /// leader is deposed meanwhile by a partition, so that the snapshot names a pod that no
    /// longer leads but still runs — then kube-apiserver and etcd are stopped, the copy is put
    /// back and both start again. Resource versions go back in time.
    EtcdRestore,
    LeaseDelete,
    /// The Lease rewritten by hand to name another holder.
    LeaseSteal,
    /// The Lease edited by hand without changing the holder (an annotation added).
    LeaseTouch,
    /// The Lease released by hand (holder ""). Not in the default mix: a release means "free at
    /// once" by design, so one written under a running leader lets a follower start while the
    /// old leader's app is still stopping. Select it with `PME_CAMPAIGN_FAULTS=lease-release`
    /// to see that window.
    LeaseRelease,
    /// A graceful SIGTERM of an elector while its supervisor stalls for 100–500ms (SIGSTOP and
    /// SIGCONT; a CPU-throttled container stalls this long), so the supervisor starts its kill
    /// grace late and may not ack in time. Before the elector's no-ack wait included the margin,
    /// this let the next leader start while the old app still ran.
    HandoverStall,
}

impl FaultKind {
    /// The default mix: every kind the design promises to survive.
    pub const DEFAULT: [FaultKind; 19] = [
        FaultKind::ElectorKill,
        FaultKind::ElectorRestart,
        FaultKind::ElectorTerm,
        FaultKind::ElectorStop,
        FaultKind::ChildKill,
        FaultKind::ChildTerm,
        FaultKind::ChildStop,
        FaultKind::SupervisorKill,
        FaultKind::SupervisorTerm,
        FaultKind::ProxyBlackhole,
        FaultKind::ProxyReset,
        FaultKind::ProxyDelay,
        FaultKind::ApiserverRestart,
        FaultKind::EtcdRestart,
        FaultKind::EtcdRestore,
        FaultKind::LeaseDelete,
        FaultKind::LeaseSteal,
        FaultKind::LeaseTouch,
        FaultKind::HandoverStall,
    ];

    /// Every kind, the opt-in ones included.
    pub const ALL: [FaultKind; 20] = [
        FaultKind::ElectorKill,
        FaultKind::ElectorRestart,
        FaultKind::ElectorTerm,
        FaultKind::ElectorStop,
        FaultKind::ChildKill,
        FaultKind::ChildTerm,
        FaultKind::ChildStop,
        FaultKind::SupervisorKill,
        FaultKind::SupervisorTerm,
        FaultKind::ProxyBlackhole,
        FaultKind::ProxyReset,
        FaultKind::ProxyDelay,
        FaultKind::ApiserverRestart,
        FaultKind::EtcdRestart,
        FaultKind::EtcdRestore,
        FaultKind::LeaseDelete,
        FaultKind::LeaseSteal,
        FaultKind::LeaseTouch,
        FaultKind::LeaseRelease,
        FaultKind::HandoverStall,
    ];

    /// The name used in `PME_CAMPAIGN_FAULTS`.
    pub fn id(self) -> &'static str {
        match self {
            FaultKind::ElectorKill => "elector-kill",
            FaultKind::ElectorRestart => "elector-restart",
            FaultKind::ElectorTerm => "elector-term",
            FaultKind::ElectorStop => "elector-stop",
            FaultKind::ChildKill => "child-kill",
            FaultKind::ChildTerm => "child-term",
            FaultKind::ChildStop => "child-stop",
            FaultKind::SupervisorKill => "supervisor-kill",
            FaultKind::SupervisorTerm => "supervisor-term",
            FaultKind::ProxyBlackhole => "blackhole",
            FaultKind::ProxyReset => "reset",
            FaultKind::ProxyDelay => "delay",
            FaultKind::ApiserverRestart => "apiserver-restart",
            FaultKind::EtcdRestart => "etcd-restart",
            FaultKind::EtcdRestore => "etcd-restore",
            FaultKind::LeaseDelete => "lease-delete",
            FaultKind::LeaseSteal => "lease-steal",
            FaultKind::LeaseTouch => "lease-touch",
            FaultKind::LeaseRelease => "lease-release",
            FaultKind::HandoverStall => "handover-stall",
        }
    }

    /// Parses a comma-separated list of [`FaultKind::id`]s.
    pub fn parse_list(list: &str) -> Result<Vec<FaultKind>, String> {
        list.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|id| {
                FaultKind::ALL
                    .into_iter()
                    .find(|k| k.id() == id)
                    .ok_or_else(|| {
                        let known: Vec<&str> = FaultKind::ALL.iter().map(|k| k.id()).collect();
                        format!("unknown fault {id:?}; known: {}", known.join(", "))
                    })
            })
            .collect()
    }

    /// Whether the fault hits one pod (and so needs a target).
    pub fn targets_a_pod(self) -> bool {
        !matches!(
            self,
            FaultKind::ApiserverRestart
                | FaultKind::EtcdRestart
                | FaultKind::EtcdRestore
                | FaultKind::LeaseDelete
                | FaultKind::LeaseSteal
                | FaultKind::LeaseTouch
                | FaultKind::LeaseRelease
        )
    }

    /// How long after the fault has healed (for instant faults: after it was injected) a
    /// leader must run again. The worst case of each kind, from the timings:
    ///
    /// - The takeover path: a dead, frozen or partitioned leader stops renewing at some t ≤ the
    ///   injection; every follower first saw that last record no later than t (plus watch
    ///   latency, in the slack), so one may take the Lease at t + D and tries within P of it.
    ///   Control-plane restarts and partitions count from the heal: the record the electors
    ///   last saw then is at least D old or is renewed by its own holder at its next attempt.
    ///   Hand edits count from the edit: a stolen record must age D before anyone takes it.
    /// - An elector restarted in place adopts the Lease (no gap) or, when it may not, is a
    ///   follower like any other: the takeover path.
    /// - A graceful SIGTERM of an elector demotes, waits for the ack (without one, at most K +
    ///   the elector's margin), releases, and the watchers take the released Lease at once:
    ///   K + margin + P.
    /// - A killed or terminated child is restarted by its supervisor after at most the backoff
    ///   cap; a terminated one first exits within its TERM handler, a killed supervisor is
    ///   restarted by the harness after at most the restart delay, a terminated one first
    ///   stops its child (within K).
    /// - A frozen child still counts as running; its leadership is not in question.
    /// - An etcd restore: once the control plane is back, every elector re-reads the restored
    ///   record within a retry period (its watch re-lists); the one that led before may keep
    ///   its own record only after a lease duration, like everyone else (the restored record
    ///   may be a past that a later leader overwrote): D + 2P.
    ///
    /// [`SLACK`] is added to every bound.
    pub fn bound(self) -> Duration {
        let takeover = LEASE_DURATION + RETRY_PERIOD;
        let b = match self {
            // An adoption leaves no gap at all; the bound is that of the fallback (the
            // restarted elector declines — the inherited grant ran out before it could read
            // the Lease on a loaded machine, another pod wrote first — and the Lease is taken
            // over after D like after any kill).
            FaultKind::ElectorKill | FaultKind::ElectorRestart | FaultKind::ElectorStop => takeover,
            FaultKind::ElectorTerm | FaultKind::HandoverStall => {
                KILL_GRACE + MIN_MARGIN + RETRY_PERIOD
            }
            FaultKind::ChildKill | FaultKind::ChildTerm => CHILD_BACKOFF_MAX,
            FaultKind::ChildStop => Duration::ZERO,
            FaultKind::SupervisorKill => RESTART_DELAY_MAX,
            FaultKind::SupervisorTerm => KILL_GRACE + RESTART_DELAY_MAX,
            FaultKind::ProxyBlackhole | FaultKind::ProxyReset | FaultKind::ProxyDelay => takeover,
            FaultKind::ApiserverRestart | FaultKind::EtcdRestart => takeover,
            FaultKind::EtcdRestore => takeover + RETRY_PERIOD,
            FaultKind::LeaseDelete | FaultKind::LeaseSteal | FaultKind::LeaseTouch => takeover,
            // Followers take a released Lease at once.
            FaultKind::LeaseRelease => RETRY_PERIOD,
        };
        b + SLACK
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            FaultKind::ElectorKill => "elector SIGKILL",
            FaultKind::ElectorRestart => "elector restart in place",
            FaultKind::ElectorTerm => "elector SIGTERM",
            FaultKind::ElectorStop => "elector SIGSTOP+SIGCONT",
            FaultKind::ChildKill => "child SIGKILL",
            FaultKind::ChildTerm => "child SIGTERM",
            FaultKind::ChildStop => "child SIGSTOP+SIGCONT",
            FaultKind::SupervisorKill => "supervisor SIGKILL (container crash)",
            FaultKind::SupervisorTerm => "supervisor SIGTERM",
            FaultKind::ProxyBlackhole => "partition: blackhole",
            FaultKind::ProxyReset => "partition: connection resets",
            FaultKind::ProxyDelay => "network delay",
            FaultKind::ApiserverRestart => "kube-apiserver restart",
            FaultKind::EtcdRestart => "etcd restart",
            FaultKind::EtcdRestore => "etcd restored from an older snapshot",
            FaultKind::LeaseDelete => "Lease deleted by hand",
            FaultKind::LeaseSteal => "Lease stolen by hand",
            FaultKind::LeaseTouch => "Lease edited by hand",
            FaultKind::LeaseRelease => "Lease released by hand (unsafe)",
            FaultKind::HandoverStall => "elector SIGTERM, supervisor stalls",
        };
        f.write_str(name)
    }
}

/// Which pod a per-pod fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Whoever leads when the fault is injected (the interesting case).
    Leader,
    Pod(usize),
}

/// One fault as drawn from the schedule, before it is resolved against the running pods.
#[derive(Clone, Debug)]
pub struct Plan {
    pub kind: FaultKind,
    pub target: Target,
    /// How long a lasting fault (freeze, partition, delay, control plane down) is held.
    pub hold: Duration,
    /// The per-chunk latency of a delay fault.
    pub delay: Duration,
    /// SIGKILL rather than SIGTERM for a control-plane process.
    pub hard: bool,
    /// For an etcd restore: depose the leader (a partition longer than the lease duration)
    /// between the snapshot and the restore.
    pub depose: bool,
    /// Quiet time after recovery before the next fault.
    pub idle: Duration,
}

/// Draws faults from a shuffled deck of every kind, reshuffled when empty, so that even a
/// short campaign covers many kinds and a long one covers all of them evenly.
pub struct Schedule {
    rng: Rng,
    pods: usize,
    kinds: Vec<FaultKind>,
    deck: Vec<FaultKind>,
}

impl Schedule {
    /// A schedule over `kinds` (at least one).
    pub fn new(seed: u64, pods: usize, kinds: &[FaultKind]) -> Schedule {
        assert!(
            !kinds.is_empty(),
            "a schedule needs at least one fault kind"
        );
        Schedule {
            rng: Rng::new(seed),
            pods,
            kinds: kinds.to_vec(),
            deck: Vec::new(),
        }
    }

    pub fn next_plan(&mut self) -> Plan {
        if self.deck.is_empty() {
            self.deck = self.kinds.clone();
            // Fisher–Yates.
            for i in (1..self.deck.len()).rev() {
                let j = self.rng.below(i + 1);
                self.deck.swap(i, j);
            }
        }
        let kind = self.deck.pop().expect("refilled above");
        let rng = &mut self.rng;
        let target = if rng.chance(0.65) {
            Target::Leader
        } else {
            Target::Pod(rng.below(self.pods))
        };
        let ms = Duration::from_millis;
        let hold = match kind {
            FaultKind::ElectorStop => rng.between(ms(500), ms(6000)),
            FaultKind::ChildStop => rng.between(ms(300), ms(3000)),
            FaultKind::HandoverStall => rng.between(ms(100), ms(500)),
            FaultKind::ProxyBlackhole | FaultKind::ProxyReset => rng.between(ms(500), ms(8000)),
            FaultKind::ProxyDelay => rng.between(ms(1000), ms(6000)),
            FaultKind::ApiserverRestart | FaultKind::EtcdRestart => rng.between(ms(0), ms(3000)),
            FaultKind::EtcdRestore => rng.between(ms(2000), ms(8000)),
            _ => Duration::ZERO,
        };
        let delay = rng.between(ms(20), ms(600));
        let hard = rng.chance(0.5);
        let idle = rng.between(ms(200), ms(1500));
        let depose = kind == FaultKind::EtcdRestore && rng.chance(0.5);
        Plan {
            kind,
            target,
            hold,
            delay,
            hard,
            depose,
            idle,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_schedule() {
        let draw = |seed| {
            let mut s = Schedule::new(seed, 5, &FaultKind::DEFAULT);
            (0..40)
                .map(|_| format!("{:?}", s.next_plan()))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
    }
}
