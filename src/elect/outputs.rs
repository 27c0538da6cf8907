//! The grant's outputs, kept in step: the flag file (written atomically, first) and the HTTP
//! toggle push (in the background, retried with backoff), plus the wait for the consumer's ack.
//!
//! The flag file is written before anything is pushed: if it cannot be written, a leader grant
//! is not pushed either (fail closed), so the two channels never disagree about a promotion.
//! Before the first object, the token file gives consumers this incarnation's key; every object
//! is signed with it, and only acks signed with it count. `push` holds the toggle's pusher.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper::Uri;

use super::consumer::Evidence;
use crate::clock::{self, BootInstant};
use crate::grant::auth::{self, AuthError, Key, Token};
use crate::grant::{self, Grant, GrantError, Mode, Order, Sequencer};

pub mod inherit;
mod push;
use push::Toggle;

/// Where the grant goes.
pub struct Outputs {
    flag_file: PathBuf,
    lease_ref: String,
    sequencer: Sequencer,
    /// This incarnation's MAC key; written to the token file before anything is published.
    key: Key,
    token_written: bool,
    /// R and K, announced in every object so a consumer can bound what it accepts.
    renew_deadline: Duration,
    kill_grace: Duration,
    toggle: Option<Toggle>,
    /// Expiry of the leader grant the flag file may still hold (None once a follower object
    /// was written): a consumer that missed the demotion push obeys it until then.
    leader_on_disk: Option<BootInstant>,
    /// Order of the first leader grant of the latest term: a consumer that ran a leader under
    /// this term has obeyed at least this object, so its `stopped` names at least this order.
    term_start: Order,
    /// Whether the last object published was a leader grant.
    leading: bool,
    /// Objects published and not yet known to be acked, oldest first, with when each was
    /// published: how long the consumer has been behind (see [`Outputs::consumer_evidence`]).
    unacked: VecDeque<(Order, BootInstant)>,
}

/// Most unacked publications remembered; the oldest is always kept (it dates the silence).
const MAX_UNACKED: usize = 1024;

/// How a demotion was acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckSource {
    /// The toggle endpoint answered 2xx to the demotion push, with a verified ack.
    Toggle,
    /// The consumer's ack file shows the demotion (or that it has stopped), with a verified MAC.
    AckFile,
    /// Nobody acknowledged; kill grace and margin have passed since the demotion was written.
    KillGrace,
}

impl Outputs {
    /// Outputs for a new elector incarnation; fails only when no random key can be made.
    pub fn new(
        flag_file: PathBuf,
        lease_ref: String,
        toggle_url: Option<Uri>,
        push_timeout: Duration,
        heartbeat: Duration,
        renew_deadline: Duration,
        kill_grace: Duration,
    ) -> Result<Self, AuthError> {
        let key = Key::generate()?;
        let ack_file = grant::ack_path(&flag_file);
        Ok(Outputs {
            flag_file,
            lease_ref,
            sequencer: Sequencer::start(),
            toggle: toggle_url
                .map(|url| Toggle::spawn(url, push_timeout, heartbeat, key.clone(), ack_file)),
            key,
            token_written: false,
            renew_deadline,
            kill_grace,
            leader_on_disk: None,
            term_start: Order::default(),
            leading: false,
            unacked: VecDeque::new(),
        })
    }

    pub fn flag_file(&self) -> &Path {
        &self.flag_file
    }

    pub fn incarnation(&self) -> u64 {
        self.sequencer.incarnation()
    }

    /// Writes `<flag-file>.token` once, before the first object: no consumer could verify an
    /// object published before its key. Retried with every publication until it succeeds.
    fn ensure_token(&mut self) -> Result<(), GrantError> {
        if self.token_written {
            return Ok(());
        }
        let path = auth::token_path(&self.flag_file);
        let token = Token {
            incarnation: self.sequencer.incarnation(),
            key: self.key.clone(),
        };
        auth::write_token(&path, &token).map_err(|source| GrantError::Write { path, source })?;
        self.token_written = true;
        Ok(())
    }

    /// A signed object carrying this elector's R and K.
    fn seal(&self, grant: Grant) -> Grant {
        let mut grant = grant.with_limits(self.renew_deadline, self.kill_grace);
        self.key.sign_grant(&mut grant);
        grant
    }

    /// Publishes a leader grant. On a write failure nothing is pushed and the caller must fail
    /// closed (demote and release).
    pub fn leader(
        &mut self,
        holder: &str,
        epoch: u64,
        expiry: BootInstant,
    ) -> Result<Order, GrantError> {
        self.ensure_token()?;
        let order = self.sequencer.next_order();
        let grant = self.seal(Grant::leader(holder, epoch, order, &self.lease_ref, expiry));
        if !self.leading {
            self.term_start = grant.order();
            self.leading = true;
        }
        // Even a failed write may have reached the file (rename done, directory fsync failed):
        // assume the consumer can see this expiry either way.
        self.leader_on_disk = Some(self.leader_on_disk.map_or(expiry, |e| e.max(expiry)));
        self.note_published(grant.order());
        grant::write_file(&self.flag_file, &grant)?;
        self.push(grant.clone());
        Ok(grant.order())
    }

    /// Publishes follower mode. The push goes out even when the file cannot be written: a
    /// demotion must reach the consumer by every channel that still works.
    pub fn follower(&mut self, holder: &str, epoch: u64) -> (Order, Result<(), GrantError>) {
        let order = self.sequencer.next_order();
        let grant = self.seal(Grant::follower(holder, epoch, order, &self.lease_ref));
        self.leading = false;
        self.note_published(grant.order());
        let written = self
            .ensure_token()
            .and_then(|()| grant::write_file(&self.flag_file, &grant));
        if written.is_ok() {
            self.leader_on_disk = None;
        }
        self.push(grant.clone());
        (grant.order(), written)
    }

    /// The previous elector of this pod left a leader grant on disk that lapses at `expiry`:
    /// until a follower object of ours replaces it, a consumer reading only the file obeys it,
    /// so a hand-over must wait for it as for one of our own.
    pub fn inherit_leader_grant(&mut self, expiry: BootInstant) {
        self.leader_on_disk = Some(self.leader_on_disk.map_or(expiry, |e| e.max(expiry)));
    }

    /// Until when a consumer reading only the flag file may still run as leader: the expiry of
    /// a leader grant that no follower object has replaced on disk yet.
    pub fn leader_grant_on_disk(&self) -> Option<BootInstant> {
        self.leader_on_disk
    }

    /// Order of the first leader grant of the latest term (zero before any).
    pub fn term_start(&self) -> Order {
        self.term_start
    }

    fn note_published(&mut self, order: Order) {
        if self.unacked.len() >= MAX_UNACKED {
            self.unacked.remove(1);
        }
        self.unacked.push_back((order, BootInstant::now()));
    }

    /// What the consumer has shown of itself: the mode of its newest signed ack, when the
    /// toggle last answered, and since when it has been behind our objects. Forgets the
    /// publications the newest ack covers.
    pub fn consumer_evidence(&mut self) -> Evidence {
        let report = self.consumer_report();
        if let Some(acked) = report.as_ref().map(Grant::order) {
            while self.unacked.front().is_some_and(|(o, _)| *o <= acked) {
                self.unacked.pop_front();
            }
        }
        Evidence {
            acked_mode: report.map(|r| r.mode),
            last_answer: self.toggle.as_ref().and_then(|t| *t.answered.borrow()),
            oldest_unacked: self.unacked.front().map(|(_, at)| *at),
        }
    }

    /// Why the latest push to the toggle failed, when it did (None once one succeeds again).
    pub fn toggle_failure(&self) -> Option<String> {
        self.toggle
            .as_ref()
            .and_then(|t| t.failure.borrow().clone())
    }

    fn push(&self, grant: Grant) {
        if let Some(toggle) = &self.toggle {
            toggle.latest.send_replace(Some(grant));
        }
    }

    /// The oldest order a `stopped` ack may name and still count: the start of the latest term
    /// and anything the toggle acked since. A consumer that stopped after running this term's
    /// leader names at least that much; an older `stopped` (a previous container's, copied back)
    /// says nothing about the consumer running now.
    fn stopped_floor(&self) -> Order {
        let toggled = self
            .toggle
            .as_ref()
            .and_then(|t| t.acked.borrow().as_ref().map(Grant::order))
            .unwrap_or_default();
        self.term_start.max(toggled)
    }

    /// The newest verified ack of this incarnation, from the ack file or a toggle answer: what
    /// the consumer last reported (mode, order, failed leader starts).
    pub fn consumer_report(&self) -> Option<Grant> {
        let from_file = read_verified_ack(&grant::ack_path(&self.flag_file), &self.key);
        let from_toggle = self.toggle.as_ref().and_then(|t| t.acked.borrow().clone());
        // On equal orders the file wins: the consumer rewrites it on every change of its ack
        // (a `stopped` at exit included), while an answer to a repeated push restates the last.
        [from_toggle, from_file]
            .into_iter()
            .flatten()
            .filter(|a| a.incarnation == self.incarnation())
            .max_by_key(Grant::order)
    }

    /// Waits until the consumer has acknowledged the demotion stamped `order` — by the toggle's
    /// 2xx or by its ack file, either carrying a MAC under our key — or until `deadline` (the
    /// demotion time plus kill grace and margin).
    pub async fn wait_for_demotion_ack(&self, order: Order, deadline: BootInstant) -> AckSource {
        let ack_file = grant::ack_path(&self.flag_file);
        let mut acked = self.toggle.as_ref().map(|t| t.acked.clone());
        loop {
            if acked.as_ref().is_some_and(|rx| {
                rx.borrow()
                    .as_ref()
                    .is_some_and(|a| a.mode != Mode::Leader && a.order() >= order)
            }) {
                return AckSource::Toggle;
            }
            if ack_file_confirms(&ack_file, &self.key, order, self.stopped_floor()) {
                // The consumer has said so: pushing the demotion further would only fail (at
                // pod shutdown nobody listens any more) and fill the log with retries.
                if let Some(t) = &self.toggle {
                    t.settled.send_replace(order);
                }
                return AckSource::AckFile;
            }
            if BootInstant::now() >= deadline {
                return AckSource::KillGrace;
            }
            // The ack file has no change notification here; a short poll is bounded by the deadline.
            let poll = clock::sleep(Duration::from_millis(20));
            match acked.as_mut() {
                Some(rx) => {
                    tokio::select! {
                        _ = rx.changed() => {}
                        _ = poll => {}
                    }
                }
                None => poll.await,
            }
        }
    }
}

/// The ack file's object if it carries a MAC under `key`; anything else counts as no ack.
fn read_verified_ack(path: &Path, key: &Key) -> Option<Grant> {
    match grant::read_file(path) {
        Ok(Some(ack)) if key.verify_ack(&ack) => Some(ack),
        _ => None,
    }
}

/// Whether the ack file shows the consumer obeyed `order` (or anything newer) as a non-leader,
/// or that it has stopped after obeying at least `stopped_floor`; only with a verified MAC.
fn ack_file_confirms(path: &Path, key: &Key, order: Order, stopped_floor: Order) -> bool {
    match read_verified_ack(path, key) {
        Some(ack) => match ack.mode {
            Mode::Stopped => ack.order() >= stopped_floor,
            Mode::Follower => ack.order() >= order,
            Mode::Leader => false,
        },
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outputs(flag_file: PathBuf) -> Outputs {
        Outputs::new(
            flag_file,
            "ns/l".into(),
            None,
            Duration::from_secs(1),
            Duration::from_secs(1),
            Duration::from_secs(10),
            Duration::from_secs(3),
        )
        .unwrap()
    }

    /// The hand-over's fallback wait counts from the leader grant a consumer may still read:
    /// it stays "on disk" until a follower object is really written.
    #[test]
    fn a_leader_grant_stays_on_disk_until_a_follower_write_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("volume");
        std::fs::create_dir(&volume).unwrap();
        let mut out = outputs(volume.join("grant.json"));
        assert_eq!(out.leader_grant_on_disk(), None);
        out.leader("me", 1, BootInstant::from_nanos(100)).unwrap();
        assert_eq!(
            out.leader_grant_on_disk(),
            Some(BootInstant::from_nanos(100))
        );

        // The volume breaks: writes fail (ENOTDIR; root ignores permission bits).
        std::fs::rename(&volume, dir.path().join("away")).unwrap();
        std::fs::write(&volume, b"not a directory").unwrap();
        assert!(out.follower("me", 1).1.is_err());
        assert_eq!(
            out.leader_grant_on_disk(),
            Some(BootInstant::from_nanos(100))
        );
        // A failed renewal may still have reached the file: its expiry counts too.
        assert!(out.leader("me", 1, BootInstant::from_nanos(200)).is_err());
        assert_eq!(
            out.leader_grant_on_disk(),
            Some(BootInstant::from_nanos(200))
        );

        std::fs::remove_file(&volume).unwrap();
        std::fs::rename(dir.path().join("away"), &volume).unwrap();
        out.follower("me", 1).1.unwrap();
        assert_eq!(out.leader_grant_on_disk(), None);
    }

    /// The token is on disk (0600) before the first object, and every object carries R, K and
    /// a MAC that verifies under the token's key for the token's incarnation.
    #[test]
    fn the_token_comes_first_and_every_object_is_signed_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("grant.json");
        let mut out = outputs(flag.clone());
        let token_path = auth::token_path(&flag);
        assert!(!token_path.exists(), "nothing published yet");
        out.follower("", 0).1.unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let token = auth::read_token(&token_path, &[me]).unwrap().unwrap();
        assert_eq!(token.incarnation, out.incarnation());
        let g = grant::read_file(&flag).unwrap().unwrap();
        assert!(token.key.verify_grant(&g));
        assert_eq!(g.incarnation, token.incarnation);
        assert_eq!(
            (g.renew_deadline_ns, g.kill_grace_ns),
            (10_000_000_000, 3_000_000_000)
        );
        out.leader("me", 2, BootInstant::from_nanos(100)).unwrap();
        let g = grant::read_file(&flag).unwrap().unwrap();
        assert_eq!(g.mode, Mode::Leader);
        assert!(token.key.verify_grant(&g));
    }

    /// Before the MAC, any process that could write the shared volume could put `stopped` in
    /// the ack file and have the elector release the Lease while the app still ran.
    #[test]
    fn ack_file_confirms_only_a_verified_demotion_at_least_as_new() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grant.json.ack");
        let key = Key::generate().unwrap();
        let order = Order {
            incarnation: 5,
            seq: 10,
        };
        let floor = Order {
            incarnation: 5,
            seq: 4,
        };
        let signed = |mut a: Grant| {
            key.sign_ack(&mut a);
            a
        };
        assert!(!ack_file_confirms(&path, &key, order, floor));
        let older = Grant::follower(
            "",
            0,
            Order {
                incarnation: 5,
                seq: 9,
            },
            "ns/l",
        );
        grant::write_file(&path, &signed(older.clone())).unwrap();
        assert!(!ack_file_confirms(&path, &key, order, floor));
        let leader = Grant::leader(
            "",
            0,
            Order {
                incarnation: 5,
                seq: 11,
            },
            "ns/l",
            BootInstant::from_nanos(1),
        );
        grant::write_file(&path, &signed(leader)).unwrap();
        assert!(!ack_file_confirms(&path, &key, order, floor));
        let same = Grant::follower("", 0, order, "ns/l");
        grant::write_file(&path, &same).unwrap();
        assert!(
            !ack_file_confirms(&path, &key, order, floor),
            "an ack without a MAC counted"
        );
        grant::write_file(&path, &signed(same.clone())).unwrap();
        assert!(ack_file_confirms(&path, &key, order, floor));
        let mut wrong_key = same;
        Key::generate().unwrap().sign_ack(&mut wrong_key);
        grant::write_file(&path, &wrong_key).unwrap();
        assert!(!ack_file_confirms(&path, &key, order, floor));

        let mut stopped = older;
        stopped.mode = Mode::Stopped;
        grant::write_file(&path, &stopped).unwrap();
        assert!(
            !ack_file_confirms(&path, &key, order, floor),
            "a forged stopped counted"
        );
        grant::write_file(&path, &signed(stopped.clone())).unwrap();
        assert!(ack_file_confirms(&path, &key, order, floor));
        // A `stopped` from before the term began (a previous container's) says nothing now.
        stopped.seq = 3;
        grant::write_file(&path, &signed(stopped)).unwrap();
        assert!(!ack_file_confirms(&path, &key, order, floor));
    }

    /// The elector runs on one thread too: a FIFO at the ack file's path used to block its
    /// hand-over wait (and every renewal) on the open.
    #[test]
    fn a_fifo_as_the_ack_file_is_no_ack_and_no_hang() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grant.json.ack");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
        let key = Key::generate().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let order = Order::default();
            let _ = tx.send(ack_file_confirms(&path, &key, order, order));
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(false));
    }
}
