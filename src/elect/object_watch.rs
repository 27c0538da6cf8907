//! One watch stream of one named object, and the pause between attempts: what the Lease watch
//! (`lease_api`) and the own-Pod watch (`own_pod`) both need, written once.
//!
//! A stream asks the server to end it after [`WATCH_TIMEOUT_SECONDS`] and to send bookmarks
//! while it is idle, so a stream that delivers nothing at all for [`WATCH_IDLE_LIMIT`], or
//! outlives its server-side timeout by [`WATCH_DEADLINE_SLACK`], was dropped by something in
//! between (a middlebox that forgot the connection, a half-open TCP stream) and is given up as
//! [`End::Silent`]. A bookmark moves the resourceVersion a resumed stream starts from. What
//! an owner does between streams (read again, resume, resync) stays with the owner.

use std::fmt::Debug;
use std::time::Duration;

use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use kube::api::{WatchEvent, WatchParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// `timeoutSeconds` of every watch request: the server ends the stream then (with a bookmark
/// two seconds before), and the watch resumes from the last version it saw.
pub const WATCH_TIMEOUT_SECONDS: u32 = 290;
/// A healthy idle watch carries a bookmark at least about once a minute (the apiserver's watch
/// cache sends one every minute to watchers that allow them); nothing at all for this long
/// means the stream is dead although its connection looks open.
pub const WATCH_IDLE_LIMIT: Duration = Duration::from_secs(90);
/// How long a stream may outlive its server-side timeout before it is given up.
pub const WATCH_DEADLINE_SLACK: Duration = Duration::from_secs(15);

/// What a stream delivered next.
#[derive(Debug)]
pub enum Next<K> {
    /// The object was added or modified: its new state.
    Changed(K),
    /// The object was deleted: its last state.
    Deleted(K),
    /// A bookmark: nothing changed; the server sends them, so a quiet stream is a dead one.
    Bookmark,
    /// The stream is over.
    End(End),
}

/// How a stream ended.
#[derive(Debug)]
pub enum End {
    /// The server closed it in order: resume from [`ObjectStream::last_version`].
    Closed,
    /// Nothing came for [`WATCH_IDLE_LIMIT`], or it outlived its deadline: dropped on the way.
    Silent,
    /// `410 Gone`: the version to resume from is too old; read the object again.
    Gone,
    /// Any other error the server sent, or a stream that failed.
    Failed(kube::Error),
}

/// One watch stream of the object `name`, from a resourceVersion on.
pub struct ObjectStream<K> {
    stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
    deadline: tokio::time::Instant,
    last: String,
}

impl<K> ObjectStream<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    /// Asks for a watch of `name` (a field selector on it) from `rv`. The request itself is not
    /// bounded here: each owner bounds it as it bounds its other calls.
    pub async fn open(api: &Api<K>, name: &str, rv: &str) -> kube::Result<Self> {
        // Bookmarks are on (kube's default), so even an idle stream carries something.
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(WATCH_TIMEOUT_SECONDS);
        let deadline = tokio::time::Instant::now()
            + Duration::from_secs(u64::from(WATCH_TIMEOUT_SECONDS))
            + WATCH_DEADLINE_SLACK;
        let stream = api.watch(&params, rv).await?.boxed();
        Ok(ObjectStream {
            stream,
            deadline,
            last: rv.to_owned(),
        })
    }

    /// The next change or bookmark, or the end of the stream (after which it delivers nothing
    /// more).
    pub async fn next(&mut self) -> Next<K> {
        let quiet_until = (tokio::time::Instant::now() + WATCH_IDLE_LIMIT).min(self.deadline);
        let event = match tokio::time::timeout_at(quiet_until, self.stream.next()).await {
            Ok(Some(event)) => event,
            Ok(None) => return Next::End(End::Closed),
            Err(_) => return Next::End(End::Silent),
        };
        match event {
            Ok(WatchEvent::Added(object)) | Ok(WatchEvent::Modified(object)) => {
                self.note_version(&object);
                Next::Changed(object)
            }
            Ok(WatchEvent::Deleted(object)) => {
                self.note_version(&object);
                Next::Deleted(object)
            }
            Ok(WatchEvent::Bookmark(b)) => {
                self.last = b.metadata.resource_version;
                Next::Bookmark
            }
            Ok(WatchEvent::Error(status)) if status.code == 410 => Next::End(End::Gone),
            Ok(WatchEvent::Error(status)) => Next::End(End::Failed(kube::Error::Api(status))),
            Err(e) => Next::End(End::Failed(e)),
        }
    }

    /// The newest resourceVersion the stream has delivered (an object's or a bookmark's):
    /// where a stream the server closed resumes.
    pub fn last_version(&self) -> &str {
        &self.last
    }

    fn note_version(&mut self, object: &K) {
        if let Some(rv) = object.meta().resource_version.clone() {
            self.last = rv;
        }
    }
}

/// The pause between attempts of a watch loop: doubling from `initial` up to `max`, so a
/// server that fails, or ends streams at once (a proxy that cuts long requests, a 410 on
/// every request), never gets back-to-back requests.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

/// A stream that ended within this of its start ended "at once".
const AT_ONCE: Duration = Duration::from_secs(1);

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    /// Sleeps the current pause and doubles the next (up to the limit).
    pub async fn sleep(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(self.max);
    }

    /// After a stream that began at `started`: sleeps as [`Backoff::sleep`] if it ended at
    /// once, else starts again from the initial pause.
    pub async fn after_stream(&mut self, started: tokio::time::Instant) {
        if started.elapsed() < AT_ONCE {
            self.sleep().await;
        } else {
            self.reset();
        }
    }

    /// Sleeps as [`Backoff::sleep`] only if the stream that began at `started` ended at once;
    /// the pause is left as it is otherwise.
    pub async fn if_at_once(&mut self, started: tokio::time::Instant) {
        if started.elapsed() < AT_ONCE {
            self.sleep().await;
        }
    }

    /// Starts again from the initial pause (a success).
    pub fn reset(&mut self) {
        self.next = self.initial;
    }

    #[cfg(test)]
    fn current(&self) -> Duration {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_pause_doubles_to_its_limit_and_only_a_long_stream_resets_it() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(1), ms(3));
        let mut seen = vec![b.current()];
        for _ in 0..3 {
            b.sleep().await;
            seen.push(b.current());
        }
        // Doubled, then held at the limit.
        assert_eq!(seen, [ms(1), ms(2), ms(3), ms(3)]);

        let long_ago = tokio::time::Instant::now()
            .checked_sub(Duration::from_secs(5))
            .expect("an instant 5 s ago");
        b.if_at_once(long_ago).await;
        assert_eq!(
            b.current(),
            ms(3),
            "if_at_once leaves the pause after a long stream"
        );
        b.after_stream(long_ago).await;
        assert_eq!(
            b.current(),
            ms(1),
            "after_stream starts again after a long stream"
        );

        // A stream that ended at once waits, and the next pause is longer.
        b.after_stream(tokio::time::Instant::now()).await;
        assert_eq!(b.current(), ms(2));
        b.if_at_once(tokio::time::Instant::now()).await;
        assert_eq!(b.current(), ms(3));
    }
}
