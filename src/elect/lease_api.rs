//! Typed access to the one Lease: conditional writes with a timeout each, and a watch task
//! that feeds every change to the election loop.
//!
//! Every call is bounded by a timeout shorter than the renew deadline, so a hung API server can
//! delay a renew but never hold the loop past the grant's expiry. The watch is bounded too: the
//! server ends it after [`WATCH_TIMEOUT_SECONDS`] and sends bookmarks while it is idle, so a
//! stream that delivers nothing at all for [`WATCH_IDLE_LIMIT`], or outlives its server-side
//! timeout by [`WATCH_DEADLINE_SLACK`], was dropped by something in between (a middlebox that
//! forgot the connection, a half-open TCP stream) and is replaced. A server that has never sent
//! a bookmark (one without a watch cache) sends nothing at all about an absent Lease, so there a
//! quiet stream is normal: it is still replaced, but by a resync that keeps the absence's count
//! (see [`crate::election::candidate::Source::Resync`]). The election loop does not
//! rely on that alone: it re-reads a Lease that has been quiet for longer than its holder's
//! renewals explain (see `elect::run`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::clock::BootInstant;
use crate::elect::object_watch::{Backoff, End, Next, ObjectStream};
use crate::election::record::Observed;

pub use crate::elect::object_watch::{
    WATCH_DEADLINE_SLACK, WATCH_IDLE_LIMIT, WATCH_TIMEOUT_SECONDS,
};

/// How a Lease call failed, coarse enough to act on and to label metrics with.
#[derive(Debug, thiserror::Error)]
pub enum LeaseApiError {
    /// 409: the resourceVersion precondition failed, or the object already exists.
    #[error("conflict: the Lease changed since it was read")]
    Conflict,
    /// 404 on a write: the Lease was deleted.
    #[error("the Lease does not exist")]
    NotFound,
    /// 401/403: RBAC or credentials; retried, but an operator has to fix it.
    #[error("not allowed: {0}")]
    Forbidden(String),
    #[error("the API did not answer within {0:?}")]
    Timeout(Duration),
    /// Any other status the API answered with.
    #[error("API error: {code} {reason}: {message}")]
    Status {
        code: u16,
        reason: String,
        message: String,
    },
    /// No answer from the API at all (connection, TLS, a body that does not decode, …).
    #[error("API error: {0}")]
    Other(#[source] kube::Error),
}

impl LeaseApiError {
    /// Label for the API error counter.
    pub fn kind(&self) -> &'static str {
        match self {
            LeaseApiError::Conflict => "conflict",
            LeaseApiError::NotFound => "not_found",
            LeaseApiError::Forbidden(_) => "forbidden",
            LeaseApiError::Timeout(_) => "timeout",
            LeaseApiError::Status { .. } | LeaseApiError::Other(_) => "other",
        }
    }

    fn from_kube(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(status) => match status.code {
                409 => LeaseApiError::Conflict,
                404 => LeaseApiError::NotFound,
                401 | 403 => LeaseApiError::Forbidden(status.message),
                code => LeaseApiError::Status {
                    code,
                    reason: status.reason,
                    message: status.message,
                },
            },
            other => LeaseApiError::Other(other),
        }
    }
}

/// The Lease named by the configuration, in its namespace.
#[derive(Clone)]
pub struct LeaseApi {
    api: Api<Lease>,
    name: String,
    namespace: String,
    timeout: Duration,
    /// Whether the server has sent a bookmark on any of our watch streams: if it has, a quiet
    /// stream is a dead one; if it never has, quiet is all it sends about an absent Lease, and
    /// the read that replaces such a stream is a resync (see [`WatchItem::Read`]). Shared by
    /// every watch task of this elector, since it is the server's habit.
    bookmarks_seen: Arc<AtomicBool>,
}

impl LeaseApi {
    pub fn new(client: Client, namespace: &str, name: &str, timeout: Duration) -> Self {
        LeaseApi {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            timeout,
            bookmarks_seen: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The same Lease, with calls bounded by `timeout` instead.
    pub fn with_timeout(&self, timeout: Duration) -> LeaseApi {
        LeaseApi {
            timeout,
            ..self.clone()
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `"namespace/name"`, as written into grants.
    pub fn reference(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    async fn bounded<T>(
        &self,
        call: impl Future<Output = kube::Result<T>>,
    ) -> Result<T, LeaseApiError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result.map_err(LeaseApiError::from_kube),
            Err(_) => Err(LeaseApiError::Timeout(self.timeout)),
        }
    }

    /// Reads the Lease; `Ok(None)` when it does not exist.
    pub async fn get(&self) -> Result<Option<Lease>, LeaseApiError> {
        self.bounded(self.api.get_opt(&self.name)).await
    }

    /// Creates the Lease; `Conflict` when it already exists.
    pub async fn create(&self, lease: &Lease) -> Result<Lease, LeaseApiError> {
        self.bounded(self.api.create(&PostParams::default(), lease))
            .await
    }

    /// Replaces the Lease, conditional on the resourceVersion carried by `lease`.
    pub async fn replace(&self, lease: &Lease) -> Result<Lease, LeaseApiError> {
        if lease
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or("")
            .is_empty()
        {
            // Without a resourceVersion the PUT would be unconditional: never send one.
            return Err(LeaseApiError::Conflict);
        }
        self.bounded(self.api.replace(&self.name, &PostParams::default(), lease))
            .await
    }

    /// Starts the watch task. It sends each observed state of the Lease (with the full object)
    /// and keeps the watch alive: on its end it resumes from the last resourceVersion; on
    /// `410 Gone`, an error or a silent stream it re-reads once (with backoff) and watches
    /// again — after a silent stream on a server that has never sent a bookmark, the read is a
    /// resync. Dropping the returned handle stops the task, even one stuck on a dead connection.
    #[must_use = "the watch stops when its handle is dropped"]
    pub fn spawn_watch(&self, retry: Duration) -> Watch {
        let (tx, rx) = mpsc::channel(16);
        let this = self.clone();
        let task = tokio::spawn(async move { this.watch_loop(tx, retry).await });
        Watch { rx, task }
    }

    async fn watch_loop(self, tx: mpsc::Sender<WatchItem>, retry: Duration) {
        let mut backoff = Backoff::new(Duration::from_millis(100), retry);
        let mut resume_from: Option<String> = None;
        let mut resync = false;
        loop {
            let rv = match resume_from.take() {
                Some(rv) => rv,
                None => match self.read_for_watch().await {
                    Ok((sent_at, lease)) => {
                        let rv = lease
                            .as_ref()
                            .and_then(|l| l.metadata.resource_version.clone())
                            .unwrap_or_else(|| "0".to_owned());
                        let read = WatchItem::Read {
                            lease: lease.map(Box::new),
                            sent_at,
                            resync: std::mem::take(&mut resync),
                        };
                        if tx.send(read).await.is_err() {
                            return;
                        }
                        rv
                    }
                    Err(e) => {
                        // No stream runs until a read succeeds: whatever happens meanwhile is
                        // unseen, so the read that finally succeeds is no resync.
                        resync = false;
                        if tx.send(WatchItem::Error(e)).await.is_err() {
                            return;
                        }
                        backoff.sleep().await;
                        continue;
                    }
                },
            };
            let started = tokio::time::Instant::now();
            match self.watch_from(&rv, &tx).await {
                WatchEnd::Resume(last) => {
                    // A stream closed at once (a proxy that cuts long requests) must not turn
                    // into back-to-back watch requests.
                    backoff.after_stream(started).await;
                    resume_from = Some(last);
                }
                WatchEnd::Silent => resync = !self.bookmarks_seen.load(Ordering::Relaxed),
                // A server that answers 410 at once must not get back-to-back requests.
                WatchEnd::Relist => backoff.if_at_once(started).await,
                WatchEnd::Failed(e) => {
                    if tx.send(WatchItem::Error(e)).await.is_err() {
                        return;
                    }
                    backoff.sleep().await;
                }
                WatchEnd::ReceiverGone => return,
            }
        }
    }

    /// A GET for the start of a watch, with the instant it was sent (see
    /// [`crate::election::candidate::Source`]).
    async fn read_for_watch(&self) -> Result<(BootInstant, Option<Lease>), LeaseApiError> {
        let sent_at = BootInstant::now();
        self.get().await.map(|lease| (sent_at, lease))
    }

    async fn watch_from(&self, rv: &str, tx: &mpsc::Sender<WatchItem>) -> WatchEnd {
        let mut stream = match self
            .bounded(ObjectStream::open(&self.api, &self.name, rv))
            .await
        {
            Ok(s) => s,
            Err(e) => return WatchEnd::Failed(e),
        };
        loop {
            let item = match stream.next().await {
                Next::Changed(l) => WatchItem::Observed(Some(Box::new(l))),
                Next::Deleted(_) => WatchItem::Observed(None),
                Next::Bookmark => {
                    self.bookmarks_seen.store(true, Ordering::Relaxed);
                    continue;
                }
                Next::End(end) => {
                    return match end {
                        End::Closed => WatchEnd::Resume(stream.last_version().to_owned()),
                        End::Silent => {
                            tracing::warn!(
                                lease = %self.reference(),
                                "the Lease watch went silent (no event, no bookmark); restarting it"
                            );
                            WatchEnd::Silent
                        }
                        End::Gone => WatchEnd::Relist,
                        End::Failed(e) => WatchEnd::Failed(LeaseApiError::from_kube(e)),
                    };
                }
            };
            if tx.send(item).await.is_err() {
                return WatchEnd::ReceiverGone;
            }
        }
    }
}

/// A running watch task: its items, and the task, stopped when this is dropped.
pub struct Watch {
    rx: mpsc::Receiver<WatchItem>,
    task: JoinHandle<()>,
}

impl Watch {
    /// The next item; `None` once the task has ended.
    pub async fn recv(&mut self) -> Option<WatchItem> {
        self.rx.recv().await
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the watch task reports.
#[derive(Debug)]
pub enum WatchItem {
    /// A watch event: the Lease as it is now (`None`: it was deleted).
    Observed(Option<Box<Lease>>),
    /// A fresh read (sent at `sent_at`) when the watch (re)starts: no continuity with what
    /// came before. `resync`: it replaces a stream that was quiet on a server that never sent
    /// a bookmark (see [`crate::election::candidate::Source::Resync`]).
    Read {
        lease: Option<Box<Lease>>,
        sent_at: BootInstant,
        resync: bool,
    },
    /// The watch or its re-read failed; it retries by itself.
    Error(LeaseApiError),
}

enum WatchEnd {
    Resume(String),
    Relist,
    /// Nothing arrived for too long: the stream is dead although it looks open (or, on a
    /// server that sends no bookmarks, merely quiet).
    Silent,
    Failed(LeaseApiError),
    ReceiverGone,
}

/// Converts an optional Lease into an observation.
pub fn observe(lease: Option<&Lease>) -> Observed {
    match lease {
        Some(l) => Observed::from_lease(l),
        None => Observed::Absent,
    }
}
