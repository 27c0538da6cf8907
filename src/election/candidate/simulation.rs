//! Two candidates sharing one simulated Lease store, driven by a fake clock through a sweep of
//! schedules: crashes at every point of a term, watch delays, a third party editing the Lease's
//! metadata, a holder that promises a longer duration, and the store restored to an older
//! snapshot (resourceVersions going back). At no instant may b start while a's consumer may
//! still run (its grant's expiry, or its demotion, plus kill grace), and b must take over once
//! a is gone.
//!
//! The store behaves like the apiserver on etcd: every write gets the next revision, writes are
//! conditional on the writer's resourceVersion (a 409 is answered by a re-read, and one retry at
//! once, as the driver does), and a restore puts an old record back *and* the revision counter,
//! so later writes reuse versions the candidates have already seen. Watch events reach a
//! candidate after its watch delay; a restore breaks the watch, which re-lists with a read.

use std::time::Duration;

use super::super::record::LeaseRecord;
use super::*;

pub(super) const TICK_MS: u64 = 100;

pub(super) fn instant(ms: u64) -> BootInstant {
    BootInstant::from_nanos(ms * 1_000_000)
}

#[derive(Clone, Copy, Debug)]
struct Scenario {
    /// a stops doing anything (crash, or a partition that never heals) at this time.
    crash_at_ms: u64,
    /// How late each candidate's watch delivers a write.
    watch_delay_ms: u64,
    /// A metadata edit (new resourceVersion, same spec) this often, by a third party.
    edit_every_ms: Option<u64>,
    /// a's own timing; it writes its lease duration. b runs with the defaults.
    a_timing: Timing,
    /// At `.0` (ms) the store goes back to its `.1`-th value (0: the released Lease of the
    /// start; clamped to the values it has had).
    restore: Option<(u64, usize)>,
}

pub(super) struct Store {
    /// Every value the Lease had, with the time it was written.
    pub(super) history: Vec<(u64, Observed)>,
    revision: u64,
    /// Stands in for the wall clock of renewTime: never goes back, even across a restore.
    writes: u64,
}

impl Store {
    pub(super) fn new() -> Store {
        let released = Observed::Present(LeaseRecord {
            holder: None,
            duration: None,
            transitions: 0,
            renew_time: None,
            acquire_time: None,
            resource_version: "1".into(),
        });
        Store {
            history: vec![(0, released)],
            revision: 1,
            writes: 0,
        }
    }

    /// A store without the Lease (a fresh install): the first write creates it.
    pub(super) fn absent() -> Store {
        Store {
            history: vec![(0, Observed::Absent)],
            revision: 1,
            writes: 0,
        }
    }

    pub(super) fn latest(&self) -> &Observed {
        &self.history.last().expect("never empty").1
    }

    fn record(&self) -> LeaseRecord {
        match self.latest() {
            Observed::Present(r) => r.clone(),
            Observed::Absent => unreachable!("the simulated Lease is only edited while it exists"),
        }
    }

    fn put(&mut self, ms: u64, mut record: LeaseRecord) -> Observed {
        self.revision += 1;
        record.resource_version = self.revision.to_string();
        let observed = Observed::Present(record);
        self.history.push((ms, observed.clone()));
        observed
    }

    fn edit_metadata(&mut self, ms: u64) {
        let record = self.record();
        self.put(ms, record);
    }

    fn restore(&mut self, ms: u64, snapshot: usize) {
        let (_, old) = self.history[snapshot.min(self.history.len() - 1)].clone();
        self.revision = old
            .resource_version()
            .and_then(numeric_resource_version)
            .expect("numeric");
        self.history.push((ms, old));
    }

    /// The holder's write (an acquisition or a renewal), conditional on `expected` being the
    /// current resourceVersion.
    pub(super) fn write(
        &mut self,
        ms: u64,
        expected: Option<&str>,
        holder: &str,
        duration: Duration,
    ) -> Option<Observed> {
        let acquisition = self.latest().holder() != Some(holder);
        self.write_term(ms, expected, holder, duration, acquisition)
    }

    /// An adoption (`record::adopted`): the holder changes, the term does not.
    pub(super) fn adopt(
        &mut self,
        ms: u64,
        expected: Option<&str>,
        holder: &str,
        duration: Duration,
    ) -> Option<Observed> {
        self.write_term(ms, expected, holder, duration, false)
    }

    fn write_term(
        &mut self,
        ms: u64,
        expected: Option<&str>,
        holder: &str,
        duration: Duration,
        new_term: bool,
    ) -> Option<Observed> {
        if expected != self.latest().resource_version() {
            return None;
        }
        if *self.latest() == Observed::Absent {
            // A create: the Lease's first term.
            self.writes += 1;
            let stamp = format!("w{}", self.writes);
            return Some(self.put(
                ms,
                LeaseRecord {
                    holder: Some(holder.to_owned()),
                    duration: Some(duration),
                    transitions: 0,
                    renew_time: Some(stamp.clone()),
                    acquire_time: Some(stamp),
                    resource_version: String::new(),
                },
            ));
        }
        let current = self.record();
        self.writes += 1;
        let stamp = format!("w{}", self.writes);
        Some(self.put(
            ms,
            LeaseRecord {
                holder: Some(holder.to_owned()),
                duration: Some(duration),
                transitions: current.transitions + u64::from(new_term),
                renew_time: Some(stamp.clone()),
                acquire_time: if new_term {
                    Some(stamp)
                } else {
                    current.acquire_time
                },
                resource_version: String::new(),
            },
        ))
    }
}

/// A candidate with the driver's habits around it.
pub(super) struct Driver {
    pub(super) c: Candidate,
    /// Index of the last history entry delivered by the watch.
    pub(super) watched: usize,
    /// Until when the consumer may run because of earlier terms (demotion or expiry + K).
    finished_terms_until: BootInstant,
    pub(super) term_expiry: Option<BootInstant>,
}

impl Driver {
    pub(super) fn new(id: &str, timing: Timing) -> Driver {
        Driver {
            c: Candidate::new(id, timing),
            watched: 0,
            finished_terms_until: BootInstant::default(),
            term_expiry: None,
        }
    }

    /// Until when this candidate's consumer may be in operator mode, as far as is known now.
    pub(super) fn consumer_until(&self) -> BootInstant {
        let kill_grace = self.c.timing().kill_grace;
        self.term_expiry.map_or(self.finished_terms_until, |e| {
            self.finished_terms_until.max(e.saturating_add(kill_grace))
        })
    }

    pub(super) fn apply(&mut self, now: BootInstant, t: Option<Transition>) {
        match t {
            Some(
                Transition::BecameLeader { expiry, .. }
                | Transition::Adopted { expiry, .. }
                | Transition::Renewed { expiry, .. },
            ) => self.term_expiry = Some(expiry),
            Some(Transition::StoppedLeading { .. }) => {
                if let Some(expiry) = self.term_expiry.take() {
                    let stop = expiry.min(now).saturating_add(self.c.timing().kill_grace);
                    self.finished_terms_until = self.finished_terms_until.max(stop);
                }
            }
            None => {}
        }
    }

    /// Delivers what the watch has for us at `ms`: each entry once, in order; an entry written
    /// by a restore ends the stream, and the watch re-lists with a fresh read of the store.
    pub(super) fn watch(
        &mut self,
        ms: u64,
        delay: u64,
        store: &Store,
        restore_index: Option<usize>,
    ) {
        let now = instant(ms);
        while self.watched + 1 < store.history.len() {
            let next = self.watched + 1;
            let (w, observed) = &store.history[next];
            if w + delay > ms {
                return;
            }
            self.watched = next;
            let t = if Some(next) == restore_index {
                self.watched = store.history.len() - 1;
                self.c
                    .observe(now, store.latest().clone(), Source::Read { sent_at: now })
                    .transition()
            } else {
                self.c
                    .observe(now, observed.clone(), Source::Event)
                    .transition()
            };
            self.apply(now, t);
        }
    }

    /// A renew or acquisition attempt: on a 409, re-read and retry once at once.
    pub(super) fn attempt(&mut self, ms: u64, store: &mut Store) -> bool {
        let now = instant(ms);
        let duration = self.c.timing().lease_duration;
        for _ in 0..2 {
            let leading = self.c.is_leader();
            if !leading && !self.c.may_acquire(now) {
                return false;
            }
            let expected = self
                .c
                .observed()
                .and_then(Observed::resource_version)
                .map(str::to_owned);
            let id = self.c.holder_id().to_owned();
            match store.write(ms, expected.as_deref(), &id, duration) {
                Some(answer) => {
                    let t = if leading {
                        self.c.renewed(now, now, answer)
                    } else {
                        self.c.acquired(now, now, answer)
                    };
                    let became = matches!(t, Some(Transition::BecameLeader { .. }));
                    self.apply(now, t);
                    return became;
                }
                None => {
                    let t = self
                        .c
                        .observe(now, store.latest().clone(), Source::Read { sent_at: now })
                        .transition();
                    self.apply(now, t);
                }
            }
        }
        false
    }
}

struct Outcome {
    /// When b's first grant began.
    b_from: Option<BootInstant>,
    /// Until when a's consumer could run, as known when b began (or at the end).
    a_until: BootInstant,
    /// When a last wrote the Lease.
    a_last_write_ms: u64,
    a_led: bool,
}

fn simulate(sc: Scenario) -> Outcome {
    let b_timing = Timing::default();
    let mut store = Store::new();
    let mut a = Driver::new("a_1", sc.a_timing);
    let mut b = Driver::new("b_1", b_timing);
    // Both start with a read of the released Lease.
    for d in [&mut a, &mut b] {
        let first = Source::Read {
            sent_at: instant(0),
        };
        let _ = d.c.observe(instant(0), store.latest().clone(), first);
    }
    let mut restore_index = None;
    let mut a_last_write_ms = 0;
    let mut a_led = false;
    let end_ms = 2 * sc.crash_at_ms + 4 * sc.a_timing.lease_duration.as_millis() as u64 + 20_000;
    let mut ms = 0;
    while ms < end_ms {
        let now = instant(ms);
        if sc
            .edit_every_ms
            .is_some_and(|every| ms > 0 && ms % every == 0)
        {
            store.edit_metadata(ms);
        }
        if let Some((at, snapshot)) = sc.restore {
            if ms == at {
                store.restore(ms, snapshot);
                restore_index = Some(store.history.len() - 1);
            }
        }
        if ms < sc.crash_at_ms {
            let t = a.c.tick(now);
            a.apply(now, t);
            a.watch(ms, sc.watch_delay_ms, &store, restore_index);
            let retry = sc.a_timing.retry_period.as_millis() as u64;
            if ms % retry == 0 {
                let before = store.history.len();
                a.attempt(ms, &mut store);
                if store.history.len() > before {
                    a_last_write_ms = ms;
                }
                a_led |= a.c.is_leader();
            }
        }
        let t = b.c.tick(now);
        b.apply(now, t);
        b.watch(ms, sc.watch_delay_ms, &store, restore_index);
        if b.attempt(ms, &mut store) {
            return Outcome {
                b_from: Some(now),
                a_until: a.consumer_until(),
                a_last_write_ms,
                a_led,
            };
        }
        ms += TICK_MS;
    }
    Outcome {
        b_from: None,
        a_until: a.consumer_until(),
        a_last_write_ms,
        a_led,
    }
}

/// A peer configured with a longer lease: D 60s, R 40s. b (15s) must honour its 60s.
fn long_timing() -> Timing {
    Timing {
        lease_duration: Duration::from_secs(60),
        renew_deadline: Duration::from_secs(40),
        retry_period: Duration::from_secs(2),
        kill_grace: Duration::from_secs(3),
    }
}

#[test]
fn simulated_takeover_never_overlaps_grants() {
    let mut runs = 0;
    for a_timing in [Timing::default(), long_timing()] {
        for crash_at_ms in (100..20_000u64).step_by(1_300) {
            for watch_delay_ms in [0u64, 300, 1_900] {
                for edit_every_ms in [None, Some(100), Some(1_300)] {
                    let restores = [
                        None,
                        // Back to the released Lease of the start, mid-term.
                        Some((crash_at_ms.saturating_sub(1_000).max(100), 0)),
                        // Back to an early renewal of a's term.
                        Some((crash_at_ms.saturating_sub(500).max(100), 2)),
                    ];
                    for restore in restores {
                        let sc = Scenario {
                            crash_at_ms,
                            watch_delay_ms,
                            edit_every_ms,
                            a_timing,
                            restore,
                        };
                        check(sc, &simulate(sc));
                        runs += 1;
                    }
                }
            }
        }
    }
    assert!(runs > 500);
}

fn check(sc: Scenario, out: &Outcome) {
    let from = out
        .b_from
        .unwrap_or_else(|| panic!("b never took over after a stopped: {sc:?}"));
    assert!(
        from > out.a_until,
        "overlap: b led from {from:?} while a's consumer may run until {:?}: {sc:?}",
        out.a_until
    );
    if sc.restore.is_none() {
        assert!(out.a_led, "a must have led before crashing: {sc:?}");
        // Liveness: metadata edits never postpone the takeover; a's promised duration does,
        // within the cap. b may have to wait out a's last record from when it saw it.
        let wait = Timing::default().takeover_wait(Some(sc.a_timing.lease_duration));
        let latest = instant(out.a_last_write_ms + sc.watch_delay_ms)
            .saturating_add(wait)
            .saturating_add(Duration::from_millis(TICK_MS));
        assert!(
            from <= latest,
            "takeover at {from:?}, later than {latest:?}: {sc:?}"
        );
    }
}
