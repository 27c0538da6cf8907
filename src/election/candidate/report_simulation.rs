//! The holder's report on the Lease (annotations written with every acquisition and renewal,
//! see [`crate::election::report`]) against the election: two candidates on a store of real
//! `Lease` objects, written with the record and report functions the elector uses and judged
//! through `Observed::from_lease` as the elector judges what it reads. The holder's report
//! changes with every write, and a third party rewrites the report's annotations at any time —
//! a hand edit, a GitOps tool, a stale copy of an old holder's report — also after the holder
//! died. b must never start while a's consumer may still run, and must take over within a lease
//! duration of seeing a's last write: annotations neither end a wait early nor postpone it.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::simulation::{instant, Driver, TICK_MS};
use super::*;
use crate::election::record::{self, Observed};
use crate::election::report::{self, HolderReport, TermStart};

/// Every value the Lease had, with when it was written.
struct LeaseStore {
    history: Vec<(u64, Lease)>,
    revision: u64,
}

impl LeaseStore {
    fn new() -> Self {
        let released = Lease {
            metadata: ObjectMeta {
                name: Some("l".into()),
                resource_version: Some("1".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(String::new()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        LeaseStore {
            history: vec![(0, released)],
            revision: 1,
        }
    }

    fn latest(&self) -> &Lease {
        &self.history.last().expect("never empty").1
    }

    /// A replace conditional on `lease`'s resourceVersion, as the apiserver does it.
    fn replace(&mut self, ms: u64, mut lease: Lease) -> Option<Lease> {
        if lease.metadata.resource_version != self.latest().metadata.resource_version {
            return None;
        }
        self.revision += 1;
        lease.metadata.resource_version = Some(self.revision.to_string());
        self.history.push((ms, lease.clone()));
        Some(lease)
    }

    /// A third party rewrites the report's annotations (and nothing else) of the latest value.
    fn edit_report(&mut self, ms: u64, n: u64) {
        let mut lease = self.latest().clone();
        report::annotate(&mut lease, &some_report(n, true));
        let _ = self.replace(ms, lease);
    }
}

/// A report that differs with `n`: running or not, any consumer, any cause.
fn some_report(n: u64, with_term: bool) -> HolderReport {
    HolderReport {
        operators_running: n.is_multiple_of(2),
        consumer: ["live", "unproven", "silent", "stopped"][(n % 4) as usize],
        consumer_reason: format!("report {n}"),
        term: with_term.then(|| TermStart {
            cause: HandoverCause::ALL[(n % 4) as usize],
            leaderless: Duration::from_millis(n),
        }),
    }
}

/// A candidate, the Lease it last accepted (the base of its next write) and its writes.
struct Contender {
    d: Driver,
    current: Lease,
    /// Write attempts so far (each carries another report).
    writes: u64,
    /// When its last write succeeded.
    wrote_at_ms: u64,
}

impl Contender {
    fn new(id: &str, store: &LeaseStore) -> Self {
        let mut d = Driver::new(id, Timing::default());
        let first = Source::Read {
            sent_at: instant(0),
        };
        let _ =
            d.c.observe(instant(0), Observed::from_lease(store.latest()), first);
        Contender {
            d,
            current: store.latest().clone(),
            writes: 0,
            wrote_at_ms: 0,
        }
    }

    /// Feeds `lease` (read or delivered at `ms`) to the candidate; it becomes the base of the
    /// next write when accepted.
    fn see(&mut self, ms: u64, lease: &Lease, source: Source) {
        let now = instant(ms);
        let seen = self.d.c.observe(now, Observed::from_lease(lease), source);
        if seen.accepted() {
            self.current = lease.clone();
        }
        self.d.apply(now, seen.transition());
    }

    /// What the watch has delivered by `ms`, each value once, in order.
    fn watch(&mut self, ms: u64, delay: u64, store: &LeaseStore) {
        while self.d.watched + 1 < store.history.len() {
            let next = self.d.watched + 1;
            let (written, lease) = &store.history[next];
            if written + delay > ms {
                return;
            }
            self.d.watched = next;
            let lease = lease.clone();
            self.see(ms, &lease, Source::Event);
        }
    }

    /// A renewal or an acquisition with the holder's report, as the elector writes them; on a
    /// 409 a re-read and one more try. Returns whether a term began.
    fn attempt(&mut self, ms: u64, store: &mut LeaseStore) -> bool {
        let now = instant(ms);
        for _ in 0..2 {
            let leading = self.d.c.is_leader();
            if !leading && !self.d.c.may_acquire(now) {
                return false;
            }
            let id = self.d.c.holder_id().to_owned();
            let mut desired = if leading {
                record::renewed(&self.current, &id, 15)
            } else {
                record::acquired(&self.current, &id, 15)
            };
            self.writes += 1;
            report::annotate(&mut desired, &some_report(self.writes, !leading));
            match store.replace(ms, desired) {
                Some(answer) => {
                    self.wrote_at_ms = ms;
                    self.current = answer.clone();
                    let seen = Observed::from_lease(&answer);
                    let t = if leading {
                        self.d.c.renewed(now, now, seen)
                    } else {
                        self.d.c.acquired(now, now, seen)
                    };
                    let became = matches!(t, Some(Transition::BecameLeader { .. }));
                    self.d.apply(now, t);
                    return became;
                }
                None => {
                    let latest = store.latest().clone();
                    self.see(ms, &latest, Source::Read { sent_at: now });
                }
            }
        }
        false
    }
}

#[derive(Clone, Copy, Debug)]
struct Scenario {
    crash_at_ms: u64,
    watch_delay_ms: u64,
    /// The third party's edits of the report: this often, from the start (and on after a's
    /// crash, so a dead holder's report keeps changing).
    edit_every_ms: Option<u64>,
}

fn run(sc: Scenario) {
    let mut store = LeaseStore::new();
    let mut a = Contender::new("a_1", &store);
    let mut b = Contender::new("b_1", &store);
    let retry = Timing::default().retry_period.as_millis() as u64;
    let (mut a_led, mut edits) = (false, 0);
    let end_ms = sc.crash_at_ms + 60_000;
    let mut ms = 0;
    while ms < end_ms {
        let now = instant(ms);
        if sc.edit_every_ms.is_some_and(|e| ms > 0 && ms % e == 0) {
            edits += 1;
            store.edit_report(ms, edits);
        }
        if ms < sc.crash_at_ms {
            let t = a.d.c.tick(now);
            a.d.apply(now, t);
            a.watch(ms, sc.watch_delay_ms, &store);
            if ms % retry == 0 {
                a.attempt(ms, &mut store);
                a_led |= a.d.c.is_leader();
            }
        }
        let t = b.d.c.tick(now);
        b.d.apply(now, t);
        b.watch(ms, sc.watch_delay_ms, &store);
        if b.attempt(ms, &mut store) {
            let a_until = a.d.consumer_until();
            assert!(
                now > a_until,
                "overlap: b led from {now:?} while a's consumer may run until {a_until:?}: {sc:?}"
            );
            assert!(a_led, "a must have led before crashing: {sc:?}");
            let latest = instant(a.wrote_at_ms + sc.watch_delay_ms)
                .saturating_add(Timing::default().lease_duration)
                .saturating_add(Duration::from_millis(TICK_MS));
            assert!(
                now <= latest,
                "the report's annotations postponed the takeover to {now:?}, later than \
                 {latest:?}: {sc:?}"
            );
            return;
        }
        ms += TICK_MS;
    }
    panic!("b never took over after a stopped: {sc:?}");
}

#[test]
fn the_holders_report_on_the_lease_never_lets_two_lead_nor_delays_a_takeover() {
    let mut runs = 0;
    for crash_at_ms in (100..20_000u64).step_by(900) {
        for watch_delay_ms in [0u64, 300, 1_900] {
            for edit_every_ms in [None, Some(100), Some(700), Some(2_000)] {
                run(Scenario {
                    crash_at_ms,
                    watch_delay_ms,
                    edit_every_ms,
                });
                runs += 1;
            }
        }
    }
    assert!(runs > 200);
}
