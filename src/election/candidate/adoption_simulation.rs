//! An elector restarted in its own pod, racing another pod's takeover, on the simulated store of
//! `simulation` with a fake clock: a1 (pod A) leads and crashes; a2 starts after a restart delay
//! with what a1 left on the volume — in pod A, or in a pod of the same name with another UID —
//! reads the Lease, applies the adoption rule and, when it adopts, sends its one conditional
//! write after a write delay; b (pod B) contends all along, and so does a2 afterwards. Swept over
//! crash times, restart delays below and above the renew deadline and the lease duration, write
//! delays (so that b's takeover can land between a2's read and its write), watch delays, and a2
//! crashing again or not.
//!
//! At no tick may two pods' consumers run (each driver's terms, plus the kill grace after a
//! grant's expiry or demotion). And when the rule says adopt and nobody wrote in between, a2
//! adopts before a1's grant runs out: pod A's app is never demoted.

use super::simulation::{instant, Driver, Store, TICK_MS};
use super::*;
use crate::election::adoption::{self, Decision, Inheritance, InheritedAck};

const UID_A: &str = "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f40";
const UID_A2: &str = "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f41";
const UID_B: &str = "7e1d2c3b-0000-4d0a-9a57-3c2e1d7b8f40";

#[derive(Clone, Copy, Debug)]
struct Scenario {
    crash_at_ms: u64,
    /// a1's crash → a2's start (the kubelet's restart, plus the elector's own start-up).
    restart_ms: u64,
    /// a2's read → its adoption write reaching the store.
    write_delay_ms: u64,
    watch_delay_ms: u64,
    /// a2 runs in pod A (true), or in another pod named like it (false).
    same_uid: bool,
    /// a2 crashes this long after it started; `None`: it runs to the end.
    a2_lives_ms: Option<u64>,
}

struct Outcome {
    decision: Option<Decision>,
    adopted_at_ms: Option<u64>,
    /// a1's last grant's expiry, if it led when it crashed.
    a1_expiry: Option<BootInstant>,
    b_led: bool,
}

/// One driver and the pod it belongs to; a driver that has crashed still counts for its pod's
/// consumer until its last grant's expiry + kill grace.
struct Member {
    pod: usize,
    driver: Driver,
    led: bool,
}

fn simulate(sc: Scenario) -> Outcome {
    let timing = Timing::default();
    let d_ms = timing.lease_duration.as_millis() as u64;
    let retry_ms = timing.retry_period.as_millis() as u64;
    let mut store = Store::new();
    let a1_id = format!("pod-a_{UID_A}_00000001");
    let a2_uid = if sc.same_uid { UID_A } else { UID_A2 };
    let a2_id = format!("pod-a_{a2_uid}_00000002");
    // Pods: 0 = A, 1 = B, 2 = the other pod named like A.
    let mut members = vec![
        Member {
            pod: 0,
            driver: Driver::new(&a1_id, timing),
            led: false,
        },
        Member {
            pod: 1,
            driver: Driver::new(&format!("pod-b_{UID_B}_0000000b"), timing),
            led: false,
        },
    ];
    for m in &mut members {
        let first = Source::Read {
            sent_at: instant(0),
        };
        let _ = m
            .driver
            .c
            .observe(instant(0), store.latest().clone(), first);
    }
    let start_ms = sc.crash_at_ms + sc.restart_ms;
    let end_ms = start_ms + sc.a2_lives_ms.unwrap_or(0) + 3 * d_ms + 10_000;
    let mut out = Outcome {
        decision: None,
        adopted_at_ms: None,
        a1_expiry: None,
        b_led: false,
    };
    // (when it reaches the store, sent at, the resourceVersion it is conditional on, from)
    let mut pending: Option<(u64, BootInstant, Option<String>, String)> = None;
    let a2_index = 2;
    let mut ms = 0;
    while ms < end_ms {
        let now = instant(ms);
        if ms == sc.crash_at_ms {
            out.a1_expiry = members[0].driver.term_expiry;
        }
        if ms == start_ms {
            let mut a2 = Driver::new(&a2_id, timing);
            let read = Source::Read { sent_at: now };
            let _ = a2.c.observe(now, store.latest().clone(), read);
            a2.watched = store.history.len() - 1;
            // What a1 left on the volume: its last grant, and the supervisor's ack of it.
            let inheritance = Inheritance {
                holder: a1_id.clone(),
                leader_until: out.a1_expiry,
                epoch: 0,
                consumer: match out.a1_expiry {
                    Some(_) => InheritedAck::Leader { failures: 0 },
                    None => InheritedAck::Follower,
                },
            };
            let observed = a2.c.observed().cloned().expect("just read");
            let decision = adoption::decide(&a2_id, &observed, Some(&inheritance), now, 3);
            if let Decision::Adopt { from } = &decision {
                let rv = observed.resource_version().map(str::to_owned);
                pending = Some((ms + sc.write_delay_ms, now, rv, from.clone()));
            }
            out.decision = Some(decision);
            members.push(Member {
                pod: if sc.same_uid { 0 } else { 2 },
                driver: a2,
                led: false,
            });
        }
        if let Some((at, sent_at, rv, from)) = pending.clone() {
            if ms == at {
                pending = None;
                let a2 = &mut members[a2_index].driver;
                let duration = timing.lease_duration;
                let id = a2.c.holder_id().to_owned();
                match store.adopt(ms, rv.as_deref(), &id, duration) {
                    Some(answer) => {
                        let t = a2.c.adopted(sent_at, now, answer, &from);
                        if t.is_some() {
                            out.adopted_at_ms = Some(ms);
                        }
                        a2.apply(now, t);
                    }
                    None => {
                        let read = Source::Read { sent_at: now };
                        let t = a2.c.observe(now, store.latest().clone(), read).transition();
                        a2.apply(now, t);
                    }
                }
            }
        }
        for (i, m) in members.iter_mut().enumerate() {
            let alive = match i {
                0 => ms < sc.crash_at_ms,
                1 => true,
                _ => pending.is_none() && sc.a2_lives_ms.is_none_or(|l| ms < start_ms + l),
            };
            if !alive {
                continue;
            }
            let t = m.driver.c.tick(now);
            m.driver.apply(now, t);
            m.driver.watch(ms, sc.watch_delay_ms, &store, None);
            // a1 and a2 act every retry period, b at every tick (it races them).
            if i == 1 || ms % retry_ms == 0 {
                m.driver.attempt(ms, &mut store);
            }
            m.led |= m.driver.c.is_leader();
        }
        out.b_led |= members[1].led;
        // Which pods' consumers may run now.
        let mut running = [false; 3];
        for m in &members {
            if m.led && now <= m.driver.consumer_until() {
                running[m.pod] = true;
            }
        }
        assert!(
            running.iter().filter(|r| **r).count() <= 1,
            "two pods' consumers may run at {ms} ms ({running:?}): {sc:?}"
        );
        ms += TICK_MS;
    }
    out
}

#[test]
fn an_adoption_racing_another_pod_s_takeover_never_makes_two_leaders() {
    let mut runs = 0;
    let mut adopted = 0;
    for crash_at_ms in [3_000u64, 4_100, 5_900, 9_900] {
        for restart_ms in [200u64, 1_000, 7_900, 9_000, 10_100, 14_900, 15_000, 16_000] {
            // Beyond the API timeout too: a request the client gave up on may still be applied.
            for write_delay_ms in [0u64, 100, 2_000, 7_000, 10_000] {
                for watch_delay_ms in [0u64, 300] {
                    for same_uid in [true, false] {
                        for a2_lives_ms in [None, Some(3_000)] {
                            let sc = Scenario {
                                crash_at_ms,
                                restart_ms,
                                write_delay_ms,
                                watch_delay_ms,
                                same_uid,
                                a2_lives_ms,
                            };
                            let out = simulate(sc);
                            check(sc, &out);
                            adopted += usize::from(out.adopted_at_ms.is_some());
                            runs += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(
        runs > 1_000 && adopted > 100,
        "{runs} runs, {adopted} adoptions"
    );
}

fn check(sc: Scenario, out: &Outcome) {
    let a1_expiry = out
        .a1_expiry
        .expect("a1 leads from the start and renews until it crashes");
    let start = instant(sc.crash_at_ms + sc.restart_ms);
    if !sc.same_uid {
        assert!(
            matches!(out.decision, Some(Decision::Decline(_))),
            "a pod named like A with another UID adopted: {sc:?}"
        );
        return;
    }
    // Restarted within a1's grant, written at once: adopted before the grant ran out, so the
    // app is never demoted. (b cannot have written: a1's record is younger than D.)
    let quick = sc.write_delay_ms <= 100
        && instant(sc.crash_at_ms + sc.restart_ms + sc.write_delay_ms) < a1_expiry;
    if quick {
        let at = out
            .adopted_at_ms
            .unwrap_or_else(|| panic!("no adoption although nobody else wrote: {sc:?}"));
        assert!(
            instant(at) < a1_expiry,
            "adopted after the grant lapsed: {sc:?}"
        );
        assert!(
            matches!(out.decision, Some(Decision::Adopt { .. })),
            "{sc:?}"
        );
    }
    // Started after a1's grant ran out: never adopted.
    if start >= a1_expiry {
        assert_eq!(out.adopted_at_ms, None, "adopted an expired grant: {sc:?}");
    }
    // Liveness: when a2 lives on after adopting, b never leads.
    if out.adopted_at_ms.is_some() && sc.a2_lives_ms.is_none() {
        assert!(!out.b_led, "b led while a2 held the adopted Lease: {sc:?}");
    }
}
