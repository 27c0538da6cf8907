//! Unit tests of the candidate's rules, with a fake clock.

use std::time::Duration;

use super::super::record::LeaseRecord;
use super::*;

const S: u64 = 1_000_000_000;

fn at(secs: f64) -> BootInstant {
    BootInstant::from_nanos((secs * S as f64) as u64)
}

fn held(holder: Option<&str>, rv: u64, duration: Option<u64>, transitions: u64) -> Observed {
    Observed::Present(LeaseRecord {
        holder: holder.map(str::to_owned),
        duration: duration.map(Duration::from_secs),
        transitions,
        renew_time: Some(format!("t{rv}")),
        acquire_time: None,
        resource_version: rv.to_string(),
    })
}

/// `record` with another resourceVersion and nothing else changed: a metadata edit, or the
/// same record in a store restored from a snapshot.
fn with_rv(record: &Observed, rv: u64) -> Observed {
    match record {
        Observed::Present(r) => Observed::Present(LeaseRecord {
            resource_version: rv.to_string(),
            ..r.clone()
        }),
        Observed::Absent => Observed::Absent,
    }
}

fn candidate() -> Candidate {
    Candidate::new("me_1", Timing::default())
}

/// A watch event at `now`.
fn event(c: &mut Candidate, now: BootInstant, observed: Observed) -> Option<Transition> {
    c.observe(now, observed, Source::Event).transition()
}

/// The answer to a GET sent just before `now`.
fn read(c: &mut Candidate, now: BootInstant, observed: Observed) -> Option<Transition> {
    c.observe(now, observed, Source::Read { sent_at: now })
        .transition()
}

#[test]
fn nothing_is_free_before_the_first_look() {
    let c = candidate();
    assert_eq!(c.free_at(), None);
    assert!(!c.may_acquire(at(100.0)));
}

#[test]
fn released_lease_is_free_at_once() {
    let mut c = candidate();
    event(&mut c, at(5.0), held(None, 10, Some(1), 3));
    assert!(c.may_acquire(at(5.0)));
}

#[test]
fn held_lease_is_free_only_after_it_stayed_unchanged_for_the_lease_duration() {
    let mut c = candidate();
    event(&mut c, at(0.0), held(Some("other"), 10, Some(15), 1));
    assert!(!c.may_acquire(at(14.9)));
    // The same record again (a re-read) does not restart the wait.
    event(&mut c, at(10.0), held(Some("other"), 10, Some(15), 1));
    assert!(c.may_acquire(at(15.0)));
}

#[test]
fn a_renewal_restarts_the_wait() {
    let mut c = candidate();
    event(&mut c, at(0.0), held(Some("other"), 10, Some(15), 1));
    event(&mut c, at(12.0), held(Some("other"), 11, Some(15), 1));
    assert!(!c.may_acquire(at(26.9)));
    assert!(c.may_acquire(at(27.0)));
}

#[test]
fn late_duplicate_events_do_not_rewind_the_record() {
    let mut c = candidate();
    event(&mut c, at(0.0), held(Some("other"), 11, Some(15), 1));
    event(&mut c, at(1.0), held(Some("other"), 10, Some(15), 1));
    assert_eq!(c.free_at(), Some(at(15.0)));
}

#[test]
fn absent_lease_waits_a_full_lease_duration() {
    let mut c = candidate();
    event(&mut c, at(3.0), Observed::Absent);
    assert!(!c.may_acquire(at(17.9)));
    assert!(c.may_acquire(at(18.0)));
}

#[test]
fn a_lease_found_absent_again_by_a_new_read_restarts_the_wait() {
    // Deleted at 100; our watch breaks; meanwhile it is recreated, renewed, deleted again.
    let mut c = candidate();
    event(&mut c, at(100.0), Observed::Absent);
    read(&mut c, at(119.0), Observed::Absent);
    assert!(
        !c.may_acquire(at(119.0)),
        "an unseen recreation may have happened"
    );
    assert!(c.may_acquire(at(134.0)));
    // Watch events of an absence (no new read) keep counting from the first look.
    let mut c = candidate();
    event(&mut c, at(100.0), Observed::Absent);
    event(&mut c, at(110.0), Observed::Absent);
    assert!(c.may_acquire(at(115.0)));
}

/// The read that replaces a stream on a server that sends no bookmarks (see [`Source::Resync`]).
fn resync(c: &mut Candidate, now: BootInstant, observed: Observed) -> Option<Transition> {
    c.observe(now, observed, Source::Resync { sent_at: now })
        .transition()
}

#[test]
fn a_resync_that_finds_the_lease_still_absent_keeps_counting_from_the_first_look() {
    let d = Timing {
        lease_duration: Duration::from_secs(120),
        ..Timing::default()
    };
    let mut c = Candidate::new("me_1", d);
    read(&mut c, at(0.0), Observed::Absent);
    resync(&mut c, at(90.0), Observed::Absent);
    assert!(!c.may_acquire(at(119.9)));
    assert!(c.may_acquire(at(120.0)));
    // A resync that finds a record, then the Lease absent again: counted from then.
    resync(&mut c, at(180.0), held(Some("other"), 10, Some(120), 0));
    resync(&mut c, at(270.0), Observed::Absent);
    assert_eq!(c.free_at(), Some(at(390.0)));
}

/// The stream a resync replaces may have been dead: a holder may have taken the Lease meanwhile
/// and lost it to a hand delete just before the resync, its grant live until its last renew
/// (before the delete) + R, its app stopping by + K. A resync that finds the Lease absent keeps
/// the count, but the takeover still waits R + K and the margin from it.
#[test]
fn a_resync_that_finds_the_lease_absent_waits_out_a_holder_it_may_have_missed() {
    let t = Timing {
        lease_duration: Duration::from_secs(120),
        ..Timing::default()
    };
    let mut c = Candidate::new("me_1", t);
    read(&mut c, at(0.0), Observed::Absent);
    // The count is long done when the resync (the stream went quiet, maybe dead) comes in.
    resync(&mut c, at(200.0), Observed::Absent);
    let holder_gone = 200.0 + 10.0 + 3.0 + 1.0; // R + K + margin
    assert!(!c.may_acquire(at(200.0)), "took the Lease at the resync");
    assert!(!c.may_acquire(at(holder_gone - 0.1)));
    assert!(c.may_acquire(at(holder_gone)));
    assert_eq!(c.free_at(), Some(at(holder_gone)));
}

#[test]
fn a_reread_of_an_unchanged_held_record_keeps_its_first_look() {
    for source in [
        Source::Read { sent_at: at(9.0) },
        Source::Resync { sent_at: at(9.0) },
    ] {
        let mut c = candidate();
        event(&mut c, at(0.0), held(Some("other"), 10, Some(15), 1));
        let _ = c.observe(at(10.0), held(Some("other"), 10, Some(15), 1), source);
        assert_eq!(c.free_at(), Some(at(15.0)), "{source:?}");
        // A changed record restarts the wait, whatever brought it.
        let _ = c.observe(at(11.0), held(Some("other"), 11, Some(15), 1), source);
        assert_eq!(c.free_at(), Some(at(26.0)), "{source:?}");
    }
}

#[test]
fn garbage_or_short_durations_never_shorten_our_wait_but_longer_ones_lengthen_it() {
    let mut c = candidate();
    event(&mut c, at(0.0), held(Some("other"), 10, None, 0));
    assert_eq!(c.free_at(), Some(at(15.0)));
    event(&mut c, at(0.0), held(Some("other"), 11, Some(2), 0));
    assert_eq!(c.free_at(), Some(at(15.0)));
    event(&mut c, at(0.0), held(Some("other"), 12, Some(60), 0));
    assert_eq!(c.free_at(), Some(at(60.0)));
}

#[test]
fn acquire_grants_until_send_time_plus_renew_deadline() {
    let mut c = candidate();
    event(&mut c, at(0.0), held(None, 10, None, 4));
    let t = c.acquired(at(1.0), at(1.2), held(Some("me_1"), 11, Some(15), 5));
    assert_eq!(
        t,
        Some(Transition::BecameLeader {
            epoch: 5,
            expiry: at(11.0),
            cause: HandoverCause::Released,
            leaderless: Duration::from_secs(1),
        })
    );
    assert!(c.tick(at(10.9)).is_none());
    assert_eq!(
        c.tick(at(11.0)),
        Some(Transition::StoppedLeading {
            reason: StopReason::GrantExpired
        })
    );
    assert!(!c.is_leader());
}

#[test]
fn renew_extends_from_its_send_time_not_its_answer_time() {
    let mut c = candidate();
    event(&mut c, at(0.0), held(None, 10, None, 0));
    c.acquired(at(0.0), at(0.1), held(Some("me_1"), 11, Some(15), 1));
    let t = c.renewed(at(2.0), at(3.5), held(Some("me_1"), 12, Some(15), 1));
    assert_eq!(
        t,
        Some(Transition::Renewed {
            epoch: 1,
            expiry: at(12.0)
        })
    );
}

#[test]
fn a_renew_answered_after_the_grant_lapsed_does_not_resurrect_it() {
    // A leader paused (SIGSTOP) with a renew in flight: its answer arrives after expiry.
    let mut c = candidate();
    event(&mut c, at(0.0), held(None, 10, None, 0));
    c.acquired(at(0.0), at(0.1), held(Some("me_1"), 11, Some(15), 1));
    let t = c.renewed(at(9.0), at(30.0), held(Some("me_1"), 12, Some(15), 1));
    assert_eq!(
        t,
        Some(Transition::StoppedLeading {
            reason: StopReason::GrantExpired
        })
    );
    assert!(!c.is_leader());
}

#[test]
fn an_acquire_answered_too_late_grants_nothing() {
    let mut c = candidate();
    event(&mut c, at(0.0), held(None, 10, None, 0));
    assert_eq!(
        c.acquired(at(0.0), at(10.0), held(Some("me_1"), 11, Some(15), 1)),
        None
    );
    assert!(!c.is_leader());
    // The record is ours, so it is free for us at once.
    assert!(c.may_acquire(at(10.0)));
}

#[test]
fn seeing_another_holder_demotes_at_once() {
    let mut c = candidate();
    event(&mut c, at(0.0), held(None, 10, None, 0));
    c.acquired(at(0.0), at(0.1), held(Some("me_1"), 11, Some(15), 1));
    let t = event(&mut c, at(1.0), held(Some("thief"), 12, Some(15), 2));
    assert_eq!(
        t,
        Some(Transition::StoppedLeading {
            reason: StopReason::LostLease {
                holder: Some("thief".into())
            }
        })
    );
    // And the thief's record must then age a full lease duration before we may take it.
    assert!(!c.may_acquire(at(15.9)));
    assert!(c.may_acquire(at(16.0)));
}

#[test]
fn a_deleted_lease_does_not_demote_the_leader_by_itself() {
    let mut c = candidate();
    event(&mut c, at(0.0), held(None, 10, None, 0));
    c.acquired(at(0.0), at(0.1), held(Some("me_1"), 11, Some(15), 1));
    assert_eq!(event(&mut c, at(1.0), Observed::Absent), None);
    assert!(c.is_leader());
}

// --- Fresh answers against watch events ---

#[test]
fn a_fresh_read_replaces_the_view_whatever_its_resource_version() {
    // etcd restored from an older snapshot: the leader's renewals now carry lower versions.
    let mut c = candidate();
    event(&mut c, at(0.0), held(Some("leader"), 1500, Some(15), 3));
    read(&mut c, at(10.0), held(Some("leader"), 1003, Some(15), 3));
    assert_eq!(
        c.observed().and_then(Observed::resource_version),
        Some("1003"),
        "the read must become the view (and the base of the next write)"
    );
    // The restored record counts as new: its D wait starts at the read, not at 0.
    assert!(!c.may_acquire(at(15.0)));
    assert_eq!(c.free_at(), Some(at(25.0)));
    assert_eq!(c.history_breaks(), 1);
}

#[test]
fn watch_events_after_a_history_break_are_ordered_against_the_new_view() {
    let mut c = candidate();
    event(&mut c, at(0.0), held(Some("leader"), 1500, Some(15), 3));
    read(&mut c, at(1.0), held(Some("leader"), 1003, Some(15), 3));
    // The leader's next renewal arrives as an event with a version below the old maximum.
    event(&mut c, at(2.0), held(Some("leader"), 1004, Some(15), 3));
    assert_eq!(
        c.observed().and_then(Observed::resource_version),
        Some("1004")
    );
    assert_eq!(c.free_at(), Some(at(17.0)));
    // A late event of the new history is still dropped.
    assert_eq!(
        c.observe(at(3.0), held(None, 1002, Some(1), 3), Source::Event),
        Observation::Stale
    );
    assert_eq!(c.history_breaks(), 1, "events never count as a break");
}

#[test]
fn after_a_conflict_the_leader_demotes_on_a_reread_with_a_lower_resource_version() {
    let mut c = candidate();
    event(&mut c, at(0.0), held(None, 1499, None, 0));
    c.acquired(at(0.0), at(0.1), held(Some("me_1"), 1500, Some(15), 1));
    // Restored store: a follower took the Lease there; our renew got a 409 and we re-read.
    let t = read(&mut c, at(2.0), held(Some("follower"), 1010, Some(15), 1));
    assert_eq!(
        t,
        Some(Transition::StoppedLeading {
            reason: StopReason::LostLease {
                holder: Some("follower".into())
            }
        })
    );
}

#[test]
fn our_renewal_answered_with_a_lower_resource_version_still_renews() {
    let mut c = candidate();
    event(&mut c, at(0.0), held(None, 1499, None, 0));
    c.acquired(at(0.0), at(0.1), held(Some("me_1"), 1500, Some(15), 1));
    let t = c.renewed(at(2.0), at(2.1), held(Some("me_1"), 1004, Some(15), 1));
    assert_eq!(
        t,
        Some(Transition::Renewed {
            epoch: 1,
            expiry: at(12.0)
        })
    );
    assert_eq!(
        c.observed().and_then(Observed::resource_version),
        Some("1004")
    );
}

#[test]
fn a_read_sent_before_a_newer_view_arrived_cannot_rewind_it() {
    // The watch task's GET (sent at 0.5) races our acquire (answered at 1.0): its older answer
    // must not make us believe the Lease is released again.
    let mut c = candidate();
    event(&mut c, at(0.0), held(None, 99, Some(1), 0));
    c.acquired(at(0.9), at(1.0), held(Some("me_1"), 100, Some(15), 1));
    let late = c.observe(
        at(1.1),
        held(None, 99, Some(1), 0),
        Source::Read { sent_at: at(0.5) },
    );
    assert_eq!(late, Observation::Stale);
    assert!(c.is_leader());
    // The same answer to a read sent after our write is what the API says now: a history break.
    let fresh = c.observe(
        at(1.3),
        held(None, 99, Some(1), 0),
        Source::Read { sent_at: at(1.2) },
    );
    assert!(fresh.accepted());
    assert!(!c.is_leader());
}

#[test]
fn after_a_history_break_a_released_or_own_record_waits_a_lease_duration() {
    // A store restored to a past where the Lease was released (or held by us) while a leader of
    // the lost future still runs: that leader demotes only at its next renew, so taking the
    // record at once could overlap with its app.
    for holder in [None, Some("me_1")] {
        let mut c = candidate();
        event(&mut c, at(0.0), held(Some("leader"), 1500, Some(15), 3));
        read(&mut c, at(5.0), held(holder, 900, Some(15), 2));
        assert!(!c.may_acquire(at(19.9)), "{holder:?}");
        assert!(c.may_acquire(at(20.0)), "{holder:?}");
        // Without a break, both are free at once.
        let mut c = candidate();
        event(&mut c, at(0.0), held(Some("leader"), 1500, Some(15), 3));
        read(&mut c, at(5.0), held(holder, 1501, Some(15), 3));
        assert!(c.may_acquire(at(5.0)), "{holder:?}");
    }
}

// --- What counts as a renewal ---

#[test]
fn metadata_edits_do_not_restart_the_wait() {
    let mut c = candidate();
    let record = held(Some("dead"), 10, Some(15), 1);
    event(&mut c, at(0.0), record.clone());
    for (i, t) in [3.0, 6.0, 9.0, 12.0, 14.9].into_iter().enumerate() {
        event(&mut c, at(t), with_rv(&record, 11 + i as u64));
    }
    read(&mut c, at(14.95), with_rv(&record, 20));
    assert_eq!(c.free_at(), Some(at(15.0)));
    assert!(c.may_acquire(at(15.0)));
    // The precondition of the takeover is the newest version, though.
    assert_eq!(
        c.observed().and_then(Observed::resource_version),
        Some("20")
    );
}

#[test]
fn a_foreign_duration_is_honoured_only_up_to_the_cap() {
    let mut c = candidate();
    event(
        &mut c,
        at(0.0),
        held(Some("other"), 10, Some(i32::MAX as u64), 1),
    );
    assert_eq!(c.free_at(), Some(at(300.0)));
}

#[test]
fn fewer_transitions_in_a_fresh_answer_is_a_history_break_unless_the_lease_was_seen_absent() {
    // The store wrote past the old revision already, but the Lease's own count went back.
    let mut c = candidate();
    event(&mut c, at(0.0), held(Some("leader"), 100, Some(15), 7));
    read(&mut c, at(1.0), held(None, 180, Some(1), 5));
    assert_eq!(c.history_breaks(), 1);
    assert!(!c.may_acquire(at(15.9)));
    assert!(c.may_acquire(at(16.0)));
    // A deleted and recreated Lease starts again at 0: no break once the absence was seen.
    let mut c = candidate();
    event(&mut c, at(0.0), held(Some("leader"), 100, Some(15), 7));
    read(&mut c, at(1.0), Observed::Absent);
    read(&mut c, at(2.0), held(None, 150, Some(1), 0));
    assert_eq!(c.history_breaks(), 0);
    assert!(c.may_acquire(at(2.0)));
}

/// The cause and the leaderless time of a takeover are what this candidate saw of the term
/// before: a release, a holder whose record stopped changing, or a Lease that was not there;
/// counted from when it first saw that, which a metadata edit does not move.
#[test]
fn a_takeover_says_how_the_previous_term_ended_and_since_when() {
    let mut c = candidate();
    event(&mut c, at(0.0), held(None, 10, None, 4));
    let t = c.acquired(at(3.0), at(3.1), held(Some("me_1"), 11, Some(15), 5));
    assert!(matches!(
        t,
        Some(Transition::BecameLeader { cause: HandoverCause::Released, leaderless, .. })
            if leaderless == Duration::from_secs(3)
    ));

    let mut c = candidate();
    let old = held(Some("other"), 10, Some(15), 4);
    event(&mut c, at(2.0), old.clone());
    event(&mut c, at(9.0), with_rv(&old, 11));
    assert_eq!(
        c.vacancy(),
        Some(Vacancy {
            cause: HandoverCause::Expired,
            since: at(2.0)
        })
    );
    let t = c.acquired(at(17.0), at(17.5), held(Some("me_1"), 12, Some(15), 5));
    assert!(matches!(
        t,
        Some(Transition::BecameLeader { cause: HandoverCause::Expired, leaderless, .. })
            if leaderless == Duration::from_secs(15)
    ));

    let mut c = candidate();
    event(&mut c, at(1.0), Observed::Absent);
    assert_eq!(c.vacancy().map(|v| v.cause), Some(HandoverCause::Created));
    assert_eq!(candidate().vacancy(), None, "nothing seen, nothing to say");
}
