//! The grant's outputs, kept in step: the flag file (written atomically, first) and the HTTP
//! toggle push (in the background, retried with backoff), plus the wait for the consumer's ack.
//!
//! The flag file is written before anything is pushed: if it cannot be written, a leader grant
//! is not pushed either (fail closed), so the two channels never disagree about a promotion.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::watch;

use crate::clock::{self, BootInstant};
use crate::grant::{self, Grant, GrantError, Mode, Order, Sequencer};

/// Where the grant goes.
pub struct Outputs {
    flag_file: PathBuf,
    lease_ref: String,
    sequencer: Sequencer,
    toggle: Option<Toggle>,
    /// Expiry of the leader grant the flag file may still hold (None once a follower object
    /// was written): a consumer that missed the demotion push obeys it until then.
    leader_on_disk: Option<BootInstant>,
}

/// How a demotion was acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckSource {
    /// The toggle endpoint answered 2xx to the demotion push.
    Toggle,
    /// The consumer's ack file shows the demotion (or that it has stopped).
    AckFile,
    /// Nobody acknowledged; kill grace and margin have passed since the demotion was written.
    KillGrace,
}

impl Outputs {
    pub fn new(
        flag_file: PathBuf,
        lease_ref: String,
        toggle_url: Option<Uri>,
        push_timeout: Duration,
    ) -> Self {
        Outputs {
            flag_file,
            lease_ref,
            sequencer: Sequencer::start(),
            toggle: toggle_url.map(|url| Toggle::spawn(url, push_timeout)),
            leader_on_disk: None,
        }
    }

    pub fn flag_file(&self) -> &Path {
        &self.flag_file
    }

    pub fn incarnation(&self) -> u64 {
        self.sequencer.incarnation()
    }

    /// Publishes a leader grant. On a write failure nothing is pushed and the caller must fail
    /// closed (demote and release).
    pub fn leader(
        &mut self,
        holder: &str,
        epoch: u64,
        expiry: BootInstant,
    ) -> Result<Order, GrantError> {
        let grant = Grant::leader(
            holder,
            epoch,
            self.sequencer.next_order(),
            &self.lease_ref,
            expiry,
        );
        // Even a failed write may have reached the file (rename done, directory fsync failed):
        // assume the consumer can see this expiry either way.
        self.leader_on_disk = Some(self.leader_on_disk.map_or(expiry, |e| e.max(expiry)));
        grant::write_file(&self.flag_file, &grant)?;
        self.push(grant.clone());
        Ok(grant.order())
    }

    /// Publishes follower mode. The push goes out even when the file cannot be written: a
    /// demotion must reach the consumer by every channel that still works.
    pub fn follower(&mut self, holder: &str, epoch: u64) -> (Order, Result<(), GrantError>) {
        let grant = Grant::follower(holder, epoch, self.sequencer.next_order(), &self.lease_ref);
        let written = grant::write_file(&self.flag_file, &grant);
        if written.is_ok() {
            self.leader_on_disk = None;
        }
        self.push(grant.clone());
        (grant.order(), written)
    }

    /// Until when a consumer reading only the flag file may still run as leader: the expiry of
    /// a leader grant that no follower object has replaced on disk yet.
    pub fn leader_grant_on_disk(&self) -> Option<BootInstant> {
        self.leader_on_disk
    }

    fn push(&self, grant: Grant) {
        if let Some(toggle) = &self.toggle {
            toggle.latest.send_replace(Some(grant));
        }
    }

    /// Waits until the consumer has acknowledged the demotion stamped `order` — by the toggle's
    /// 2xx or by its ack file — or until `deadline` (the demotion time plus kill grace and margin).
    pub async fn wait_for_demotion_ack(&self, order: Order, deadline: BootInstant) -> AckSource {
        let ack_file = grant::ack_path(&self.flag_file);
        let mut acked = self.toggle.as_ref().map(|t| t.acked.clone());
        loop {
            if acked
                .as_ref()
                .is_some_and(|rx| rx.borrow().is_some_and(|a| a >= order))
            {
                return AckSource::Toggle;
            }
            if ack_file_confirms(&ack_file, order) {
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

/// Whether the ack file shows the consumer obeyed `order` (or anything newer) as a non-leader,
/// or that it has stopped altogether.
fn ack_file_confirms(path: &Path, order: Order) -> bool {
    match grant::read_file(path) {
        Ok(Some(ack)) => {
            ack.mode == Mode::Stopped || (ack.mode == Mode::Follower && ack.order() >= order)
        }
        _ => false,
    }
}

/// The background pusher: always pushes the newest object; an older one is never retried once
/// a newer exists (the consumer would refuse it anyway).
struct Toggle {
    latest: watch::Sender<Option<Grant>>,
    acked: watch::Receiver<Option<Order>>,
}

impl Toggle {
    fn spawn(url: Uri, timeout: Duration) -> Self {
        let (latest, rx) = watch::channel(None);
        let (ack_tx, acked) = watch::channel(None);
        tokio::spawn(push_loop(url, timeout, rx, ack_tx));
        Toggle { latest, acked }
    }
}

async fn push_loop(
    url: Uri,
    timeout: Duration,
    mut latest: watch::Receiver<Option<Grant>>,
    acked: watch::Sender<Option<Order>>,
) {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut backoff = Duration::from_millis(25);
    let mut failures = 0u32;
    loop {
        let Some(grant) = latest.borrow_and_update().clone() else {
            if latest.changed().await.is_err() {
                return;
            }
            continue;
        };
        // A leader grant that has lapsed is moot: the consumer has demoted itself already.
        if grant.mode == Mode::Leader && BootInstant::now() >= grant.expiry() {
            if latest.changed().await.is_err() {
                return;
            }
            continue;
        }
        let result = tokio::select! {
            r = post(&client, &url, &grant, timeout) => r,
            changed = latest.changed() => {
                if changed.is_err() { return; }
                continue;
            }
        };
        match result {
            Ok(()) => {
                if failures > 0 {
                    tracing::info!(after_failures = failures, "toggle push delivered again");
                }
                failures = 0;
                backoff = Duration::from_millis(25);
                acked.send_replace(Some(grant.order()));
                if latest.changed().await.is_err() {
                    return;
                }
            }
            Err(why) => {
                failures += 1;
                // Log the first failure and then every 50th, so a dead consumer cannot flood logs.
                if failures == 1 || failures.is_multiple_of(50) {
                    tracing::warn!(url = %url, mode = %grant.mode, seq = grant.seq, failures, error = %why, "toggle push failed; retrying");
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    changed = latest.changed() => if changed.is_err() { return; },
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

async fn post(
    client: &Client<HttpConnector, Full<Bytes>>,
    url: &Uri,
    grant: &Grant,
    timeout: Duration,
) -> Result<(), String> {
    let request = hyper::Request::post(url.clone())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(grant.to_json())))
        .map_err(|e| e.to_string())?;
    let response = tokio::time::timeout(timeout, client.request(request))
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
        .map_err(|e| e.to_string())?;
    let status = response.status();
    // Drain the body so the connection can be reused.
    let _ = tokio::time::timeout(timeout, response.into_body().collect()).await;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("answered {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-over's fallback wait counts from the leader grant a consumer may still read:
    /// it stays "on disk" until a follower object is really written.
    #[test]
    fn a_leader_grant_stays_on_disk_until_a_follower_write_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("volume");
        std::fs::create_dir(&volume).unwrap();
        let mut out = Outputs::new(
            volume.join("grant.json"),
            "ns/l".into(),
            None,
            Duration::from_secs(1),
        );
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

    #[test]
    fn ack_file_confirms_only_a_demotion_at_least_as_new() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grant.json.ack");
        let order = Order {
            incarnation: 5,
            seq: 10,
        };
        assert!(!ack_file_confirms(&path, order));
        let older = Grant::follower(
            "",
            0,
            Order {
                incarnation: 5,
                seq: 9,
            },
            "ns/l",
        );
        grant::write_file(&path, &older).unwrap();
        assert!(!ack_file_confirms(&path, order));
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
        grant::write_file(&path, &leader).unwrap();
        assert!(!ack_file_confirms(&path, order));
        let same = Grant::follower("", 0, order, "ns/l");
        grant::write_file(&path, &same).unwrap();
        assert!(ack_file_confirms(&path, order));
        let mut stopped = older;
        stopped.mode = Mode::Stopped;
        grant::write_file(&path, &stopped).unwrap();
        assert!(ack_file_confirms(&path, order));
    }
}
