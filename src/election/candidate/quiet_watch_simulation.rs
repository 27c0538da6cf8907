//! Long lease durations against watches that stay quiet: a server that sends no bookmarks
//! (no watch cache) says nothing at all about an absent Lease, so each follower's watch task
//! replaces its stream after [`WATCH_IDLE_LIMIT`] with a resync read. With a lease duration
//! longer than that limit the absence must still be counted to its end — the Lease gets
//! created — and a resync that finds a *changed* record must restart the wait as any read
//! does, or a follower whose stream is dead would take the Lease from a live holder.
//!
//! Two candidates share one simulated store (see [`super::simulation`]); the Lease is absent
//! at the start. At every tick no two candidates' consumers may run at once.

use std::time::Duration;

use super::simulation::{instant, Driver, Store, TICK_MS};
use super::*;
use crate::elect::lease_api::WATCH_IDLE_LIMIT;

/// D = 120s: longer than the watch's idle limit (90s).
fn long_timing() -> Timing {
    Timing {
        lease_duration: Duration::from_secs(120),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
        kill_grace: Duration::from_secs(3),
    }
}

/// What a candidate's watch delivers on a server that sends no bookmarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    /// Alive: every write arrives at once; only while nothing happens is it quiet.
    Quiet,
    /// Dead although it looks open: it delivers nothing, and so does every stream that
    /// replaces it. Only the resync reads (and the re-reads after a failed write) tell the
    /// candidate anything.
    Dead,
}

/// A candidate with its watch task around it.
struct Watcher {
    d: Driver,
    stream: Stream,
    /// When the current stream last delivered something (or was started).
    heard_ms: u64,
}

impl Watcher {
    fn new(id: &str, stream: Stream, start_ms: u64, store: &Store) -> Watcher {
        let mut d = Driver::new(id, long_timing());
        let now = instant(start_ms);
        let _ =
            d.c.observe(now, store.latest().clone(), Source::Read { sent_at: now });
        d.watched = store.history.len() - 1;
        Watcher {
            d,
            stream,
            heard_ms: start_ms,
        }
    }

    /// One tick of the watch task: deliver what the stream has, and replace a stream that has
    /// been quiet for the idle limit with a resync read.
    fn watch(&mut self, ms: u64, store: &Store) {
        if self.stream == Stream::Quiet {
            let before = self.d.watched;
            self.d.watch(ms, 0, store, None);
            if self.d.watched != before {
                self.heard_ms = ms;
            }
        }
        if ms - self.heard_ms >= WATCH_IDLE_LIMIT.as_millis() as u64 {
            let now = instant(ms);
            let t = self
                .d
                .c
                .observe(now, store.latest().clone(), Source::Resync { sent_at: now })
                .transition();
            self.d.apply(now, t);
            self.d.watched = store.history.len() - 1;
            self.heard_ms = ms;
        }
    }
}

#[derive(Debug)]
struct Outcome {
    /// When each candidate first led.
    first_led_ms: [Option<u64>; 2],
    /// When `a` last wrote the Lease.
    a_last_write_ms: Option<u64>,
}

/// `a` and `b` start at `starts_ms` with the Lease absent; `a` stops doing anything at
/// `a_crash_ms`. Runs until `end_ms` and panics at the first tick where both consumers may run.
fn simulate(streams: [Stream; 2], starts_ms: [u64; 2], a_crash_ms: u64, end_ms: u64) -> Outcome {
    let mut store = Store::absent();
    let mut w: [Option<Watcher>; 2] = [None, None];
    let mut first_led_ms = [None, None];
    let mut a_last_write_ms = None;
    let retry = long_timing().retry_period.as_millis() as u64;
    let mut ms = 0;
    while ms < end_ms {
        let now = instant(ms);
        for i in 0..2 {
            if ms == starts_ms[i] {
                let id = ["a_1", "b_1"][i];
                w[i] = Some(Watcher::new(id, streams[i], ms, &store));
            }
            let crashed = i == 0 && ms >= a_crash_ms;
            let Some(x) = w[i].as_mut().filter(|_| !crashed) else {
                continue;
            };
            let t = x.d.c.tick(now);
            x.d.apply(now, t);
            x.watch(ms, &store);
            // The leader renews every retry period; a follower tries whenever the Lease is free.
            if x.d.c.is_leader() && !(ms - starts_ms[i]).is_multiple_of(retry) {
                continue;
            }
            let before = store.history.len();
            x.d.attempt(ms, &mut store);
            if store.history.len() > before && i == 0 {
                a_last_write_ms = Some(ms);
            }
            if x.d.c.is_leader() && first_led_ms[i].is_none() {
                first_led_ms[i] = Some(ms);
            }
        }
        let running: Vec<&str> = w
            .iter()
            .flatten()
            .filter(|x| x.d.consumer_until() > now)
            .map(|x| x.d.c.holder_id())
            .collect();
        assert!(
            running.len() < 2,
            "two leaders at {ms}ms: {running:?} ({streams:?}, starts {starts_ms:?}, a crashes \
             at {a_crash_ms}ms)"
        );
        ms += TICK_MS;
    }
    Outcome {
        first_led_ms,
        a_last_write_ms,
    }
}

/// Both streams stay quiet (nothing happens to an absent Lease): each is replaced every 90s,
/// and the Lease must still be created one lease duration after the candidates first saw it
/// absent, not never.
#[test]
fn an_absent_lease_is_created_although_quiet_streams_are_resynced_before_the_lease_duration() {
    let d_ms = long_timing().lease_duration.as_millis() as u64;
    for streams in [[Stream::Quiet; 2], [Stream::Dead; 2]] {
        for b_start_ms in [0, 30_000, 89_900] {
            let out = simulate(streams, [0, b_start_ms], u64::MAX, 600_000);
            let created = out
                .first_led_ms
                .iter()
                .flatten()
                .min()
                .copied()
                .unwrap_or_else(|| {
                    panic!("no Lease within 10 minutes ({streams:?}, b from {b_start_ms}ms)")
                });
            assert!(created >= d_ms, "created at {created}ms, before D");
            assert!(
                created <= d_ms + TICK_MS,
                "created at {created}ms, not at D"
            );
        }
    }
}

/// `a` creates the Lease and renews it every retry period, then crashes at a point of the
/// sweep; `b`'s stream is quiet (it sees every renewal) or dead (it sees only its resyncs,
/// every 90s, each finding a newer renewal). `b` never leads while `a`'s consumer may run —
/// a resync that finds a changed record restarts the wait — and takes over once `a` is gone.
#[test]
fn a_resync_that_finds_a_changed_record_restarts_the_wait() {
    let timing = long_timing();
    let d_ms = timing.lease_duration.as_millis() as u64;
    let idle_ms = WATCH_IDLE_LIMIT.as_millis() as u64;
    let mut runs = 0;
    for stream in [Stream::Quiet, Stream::Dead] {
        for b_start_ms in [0, 1_000, 45_000, 89_900] {
            for a_crash_ms in (d_ms + 1_000..d_ms + 400_000).step_by(13_700) {
                let end_ms = a_crash_ms + idle_ms + d_ms + 20_000;
                let out = simulate([Stream::Quiet, stream], [0, b_start_ms], a_crash_ms, end_ms);
                let sc = format!("{stream:?}, b from {b_start_ms}ms, a crashes at {a_crash_ms}ms");
                let a_led = out.first_led_ms[0].unwrap_or_else(|| panic!("a never led: {sc}"));
                let b_led =
                    out.first_led_ms[1].unwrap_or_else(|| panic!("b never took over: {sc}"));
                assert!(a_led < b_led, "{sc}");
                // b sees a's last record at once (quiet) or by its next resync (dead), then waits
                // one lease duration.
                let last = out.a_last_write_ms.expect("a wrote");
                let seen_by = if stream == Stream::Quiet {
                    last
                } else {
                    last + idle_ms
                };
                assert!(
                    b_led <= seen_by + d_ms + TICK_MS,
                    "b took over at {b_led}ms, later than {}ms: {sc}",
                    seen_by + d_ms
                );
                runs += 1;
            }
        }
    }
    assert!(runs > 200);
}
