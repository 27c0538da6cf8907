//! Following the flag file: inotify on its directory for promptness, plus a periodic re-read so
//! a missed or coalesced event can never strand the supervisor on an old grant.

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use crate::atomic_file;
use crate::grant::Grant;

/// What the flag file says at one reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// No file (yet): follower.
    Absent,
    /// A file that is not a grant object, or cannot be read: follower, and logged.
    Invalid(String),
    Valid(Grant),
}

/// One reading: the raw bytes (to tell whether anything changed) and what they mean.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    raw: Option<Result<Vec<u8>, String>>,
}

impl Reading {
    /// Reads the flag file without ever blocking: a FIFO, a symlink or an oversized file put
    /// there is an invalid reading (follower), not a wait that would freeze the runtime and with
    /// it the dead man's switch.
    pub fn take(path: &Path) -> Self {
        let raw = match atomic_file::read_capped(path, atomic_file::MAX_READ) {
            Ok(Some(bytes)) => Some(Ok(bytes)),
            Ok(None) => None,
            Err(e) => Some(Err(format!("cannot read {}: {e}", path.display()))),
        };
        Reading { raw }
    }

    pub fn observation(&self) -> Observation {
        match &self.raw {
            None => Observation::Absent,
            Some(Err(e)) => Observation::Invalid(e.clone()),
            Some(Ok(bytes)) => match Grant::from_json(bytes) {
                Ok(g) => Observation::Valid(g),
                Err(e) => Observation::Invalid(e.to_string()),
            },
        }
    }
}

/// Sends an [`Observation`] each time the flag file's content differs from the previous reading
/// (starting from `initial`, the reading the supervisor started with). Ends when `tx` closes.
pub async fn follow(
    path: PathBuf,
    reread: Duration,
    initial: Reading,
    tx: mpsc::UnboundedSender<Observation>,
) {
    let watch = match DirWatch::new(&path) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e,
                "cannot watch the flag file's directory with inotify; relying on the periodic re-read");
            None
        }
    };
    let mut last = initial;
    let mut ticker = tokio::time::interval(reread);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            relevant = wait_event(watch.as_ref()) => {
                if !relevant {
                    continue;
                }
            }
            _ = tx.closed() => return,
        }
        let now = Reading::take(&path);
        if now != last {
            last = now;
            if tx.send(last.observation()).is_err() {
                return;
            }
        }
    }
}

async fn wait_event(watch: Option<&DirWatch>) -> bool {
    match watch {
        Some(w) => w.next_relevant().await,
        None => std::future::pending().await,
    }
}

/// An inotify watch on the flag file's directory: the elector replaces the file by rename, which
/// a watch on the file itself would not follow.
struct DirWatch {
    fd: AsyncFd<InotifyFd>,
    name: OsString,
}

struct InotifyFd(Inotify);

impl AsRawFd for InotifyFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl DirWatch {
    fn new(path: &Path) -> std::io::Result<Self> {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .ok_or_else(|| std::io::Error::other("flag file path has no file name"))?
            .to_owned();
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        // Not IN_MODIFY or IN_CREATE: a writer that does not rename would be seen half-written.
        inotify.add_watch(
            dir,
            AddWatchFlags::IN_CLOSE_WRITE
                | AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_MOVED_FROM
                | AddWatchFlags::IN_DELETE
                | AddWatchFlags::IN_DELETE_SELF
                | AddWatchFlags::IN_MOVE_SELF,
        )?;
        // SAFETY: the AsyncFd owns the Inotify, which owns the fd, so the fd stays open and is
        // not reused for as long as it is registered with the reactor.
        let fd = unsafe { AsyncFd::register(InotifyFd(inotify)) }?;
        Ok(DirWatch { fd, name })
    }

    /// Waits for events; true when one of them may concern the flag file.
    async fn next_relevant(&self) -> bool {
        let Ok(mut guard) = self.fd.readable().await else {
            return false;
        };
        match guard.get_inner().0.read_events() {
            Ok(events) => events
                .iter()
                .any(|e| e.name.as_ref().is_none_or(|n| *n == self.name)),
            Err(nix::errno::Errno::EAGAIN) => {
                guard.clear_ready();
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading inotify events failed");
                guard.clear_ready();
                // Re-read the file anyway; the periodic re-read keeps us right if this repeats.
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::{self, Order};

    #[test]
    fn readings_mean_absent_invalid_or_valid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grant.json");
        assert_eq!(Reading::take(&path).observation(), Observation::Absent);
        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(
            Reading::take(&path).observation(),
            Observation::Invalid(_)
        ));
        let g = Grant::follower("a", 1, Order::default(), "ns/l");
        grant::write_file(&path, &g).unwrap();
        assert_eq!(Reading::take(&path).observation(), Observation::Valid(g));
    }

    #[tokio::test]
    async fn a_rename_into_place_is_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grant.json");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(follow(
            path.clone(),
            Duration::from_secs(3600),
            Reading::take(&path),
            tx,
        ));
        // Let the watch be set up before the write.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let g = Grant::follower(
            "a",
            1,
            Order {
                incarnation: 1,
                seq: 2,
            },
            "ns/l",
        );
        grant::write_file(&path, &g).unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert_eq!(got.ok().flatten(), Some(Observation::Valid(g)));
        // The ack file beside it is not the flag file.
        std::fs::write(dir.path().join("grant.json.ack"), b"x").unwrap();
        let more = tokio::time::timeout(Duration::from_millis(200), rx.recv()).await;
        assert!(more.is_err(), "unexpected observation {more:?}");
        drop(rx);
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
}
