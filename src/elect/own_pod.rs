//! The elector's own Pod: whether it is going away.
//!
//! Why the elector needs this: a pod that is being deleted (a scale-down, a rollout, an
//! eviction) still has a live consumer while its app drains (the app container's `preStop`
//! sleep), so the consumer check alone lets it take a released Lease, only to hand it over
//! again moments later: two handovers instead of one, and more time with no operator running.
//! So a follower whose Pod carries `metadata.deletionTimestamp` does not take the Lease. A
//! leader keeps its term: its handover starts when its app is stopped (SIGTERM), as before.
//!
//! The elector learns it by watching its own Pod (`fieldSelector=metadata.name=$POD_NAME`,
//! `get` and `watch` on pods in its Role). When it cannot tell (no `POD_NAME`, the Pod is not
//! found, the API refuses: RBAC without pods), it contends as if the pod stayed: the check only
//! ever removes a candidate, so its failure must not stop the election.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::elect::object_watch::{Backoff, End as StreamEnd, Next, ObjectStream};

/// The longest wait between two reads of a Pod that cannot be watched (not found, refused).
const MAX_RETRY: Duration = Duration::from_secs(30);

/// What the elector knows of its own Pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PodState {
    /// Not read yet (one API call away): no contending until it answers or fails.
    #[default]
    Pending,
    /// The Pod exists and is not being deleted.
    Staying,
    /// The Pod is being deleted (`deletionTimestamp` set), was deleted, or its name now belongs
    /// to another pod (another UID). A pod never comes back from this.
    Terminating { why: String },
    /// It cannot be told; contending as if the pod stayed.
    Unknown { why: String },
}

impl PodState {
    /// Whether a pod in this state may take the Lease.
    pub fn may_contend(&self) -> bool {
        matches!(self, PodState::Staying | PodState::Unknown { .. })
    }

    /// A short name for probes, metrics and logs.
    pub fn name(&self) -> &'static str {
        match self {
            PodState::Pending => "pending",
            PodState::Staying => "staying",
            PodState::Terminating { .. } => "terminating",
            PodState::Unknown { .. } => "unknown",
        }
    }
}

impl std::fmt::Display for PodState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PodState::Pending => f.write_str("the pod has not been read yet"),
            PodState::Staying => f.write_str("the pod is not being deleted"),
            PodState::Terminating { why } | PodState::Unknown { why } => f.write_str(why),
        }
    }
}

/// The state of the Pod `pod` as read, for a pod named `name` whose UID (when known) is `uid`.
pub fn judge(name: &str, uid: Option<&str>, pod: &Pod) -> PodState {
    if let (Some(ours), Some(theirs)) = (uid, pod.metadata.uid.as_deref()) {
        if ours != theirs {
            return PodState::Terminating {
                why: format!(
                    "pod {name} is another pod now (UID {theirs}, ours is {ours}): ours is gone"
                ),
            };
        }
    }
    match &pod.metadata.deletion_timestamp {
        Some(t) => PodState::Terminating {
            why: format!("pod {name} is terminating (deletionTimestamp {})", t.0),
        },
        None => PodState::Staying,
    }
}

/// The watch on the own Pod: the latest state, and the task, stopped when this is dropped.
pub struct OwnPod {
    rx: watch::Receiver<PodState>,
    task: Option<JoinHandle<()>>,
}

impl OwnPod {
    /// A state that never changes (no Pod to watch).
    pub fn fixed(state: PodState) -> Self {
        let (_tx, rx) = watch::channel(state);
        OwnPod { rx, task: None }
    }

    /// Starts watching Pod `name` in `namespace`; every call is bounded by `timeout`.
    pub fn spawn(
        client: Client,
        namespace: &str,
        name: &str,
        uid: Option<String>,
        timeout: Duration,
    ) -> Self {
        let (tx, rx) = watch::channel(PodState::Pending);
        let task = PodTask {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid,
            timeout,
            tx,
            complained: false,
        };
        OwnPod {
            rx,
            task: Some(tokio::spawn(task.run())),
        }
    }

    /// The latest state.
    pub fn state(&self) -> PodState {
        self.rx.borrow().clone()
    }

    /// Resolves when the state changes; never, once the task has ended (a terminating pod).
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for OwnPod {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

struct PodTask {
    api: Api<Pod>,
    namespace: String,
    name: String,
    uid: Option<String>,
    timeout: Duration,
    tx: watch::Sender<PodState>,
    /// Whether this spell of not being able to tell has been warned about.
    complained: bool,
}

/// How one watch stream ended.
enum End {
    /// The pod is going away: nothing more to learn.
    Terminating,
    /// Read again and watch again (410, a silent or failed stream).
    Reread,
    /// The server closed the stream in order: resume from this version.
    Resume(String),
}

impl PodTask {
    async fn run(mut self) {
        let mut backoff = Backoff::new(Duration::from_millis(200), MAX_RETRY);
        let mut resume: Option<String> = None;
        loop {
            let rv = match resume.take() {
                Some(rv) => rv,
                None => match self.read().await {
                    Some(rv) => {
                        backoff.reset();
                        rv
                    }
                    None if matches!(*self.tx.borrow(), PodState::Terminating { .. }) => return,
                    None => {
                        backoff.sleep().await;
                        continue;
                    }
                },
            };
            let started = tokio::time::Instant::now();
            match self.watch_from(&rv).await {
                End::Terminating => return,
                End::Resume(last) => resume = Some(last),
                End::Reread => {}
            }
            // A stream that ends at once must not turn into back-to-back requests.
            backoff.if_at_once(started).await;
        }
    }

    fn publish(&mut self, state: PodState) {
        match &state {
            PodState::Unknown { why } if !self.complained => {
                self.complained = true;
                tracing::warn!(pod = %self.name, "cannot tell whether this pod is terminating \
                    ({why}); contending as if it stays, so a terminating pod may take the Lease");
            }
            PodState::Unknown { .. } => {}
            _ => self.complained = false,
        }
        self.tx.send_if_modified(|s| {
            let changed = *s != state;
            *s = state;
            changed
        });
    }

    /// Reads the Pod and publishes its state; returns the resourceVersion to watch from, None
    /// when there is nothing to watch (not found, refused, terminating).
    async fn read(&mut self) -> Option<String> {
        let result = tokio::time::timeout(self.timeout, self.api.get_opt(&self.name)).await;
        match result {
            Ok(Ok(Some(pod))) => {
                let state = judge(&self.name, self.uid.as_deref(), &pod);
                let terminating = matches!(state, PodState::Terminating { .. });
                self.publish(state);
                if terminating {
                    return None;
                }
                pod.metadata.resource_version
            }
            Ok(Ok(None)) => {
                let why = format!(
                    "pod {} not found in namespace {} (is POD_NAME the pod's name?)",
                    self.name, self.namespace
                );
                self.publish(PodState::Unknown { why });
                None
            }
            Ok(Err(e)) => {
                self.publish(PodState::Unknown {
                    why: describe(&self.name, &e),
                });
                None
            }
            Err(_) => {
                let why = format!(
                    "reading pod {} took longer than {:?}",
                    self.name, self.timeout
                );
                self.publish(PodState::Unknown { why });
                None
            }
        }
    }

    async fn watch_from(&mut self, rv: &str) -> End {
        let open = ObjectStream::open(&self.api, &self.name, rv);
        let mut stream = match tokio::time::timeout(self.timeout, open).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(pod = %self.name, error = %e, "pod watch refused; reading again");
                return End::Reread;
            }
            Err(_) => return End::Reread,
        };
        loop {
            match stream.next().await {
                Next::Changed(pod) => {
                    let state = judge(&self.name, self.uid.as_deref(), &pod);
                    let terminating = matches!(state, PodState::Terminating { .. });
                    self.publish(state);
                    if terminating {
                        return End::Terminating;
                    }
                }
                Next::Deleted(_) => {
                    let why = format!("pod {} was deleted", self.name);
                    self.publish(PodState::Terminating { why });
                    return End::Terminating;
                }
                Next::Bookmark => {}
                Next::End(StreamEnd::Closed) => {
                    return End::Resume(stream.last_version().to_owned())
                }
                Next::End(StreamEnd::Silent) => return End::Reread,
                Next::End(end) => {
                    tracing::debug!(pod = %self.name, ?end, "pod watch ended; reading again");
                    return End::Reread;
                }
            }
        }
    }
}

/// Why reading the Pod failed, with the fix when it is RBAC.
fn describe(name: &str, e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if status.code == 401 || status.code == 403 => format!(
            "not allowed to read pod {name} ({}): the elector's Role needs get and watch on \
             pods",
            status.message
        ),
        other => format!("reading pod {name} failed: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn pod(uid: &str, deleting: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                uid: Some(uid.into()),
                deletion_timestamp: deleting
                    .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn a_deletion_timestamp_or_another_uid_means_terminating() {
        assert_eq!(judge("p", Some("a"), &pod("a", false)), PodState::Staying);
        assert_eq!(judge("p", None, &pod("a", false)), PodState::Staying);
        let t = judge("p", Some("a"), &pod("a", true));
        assert_eq!(t.name(), "terminating");
        assert!(t.to_string().contains("1970-01-01T00:00:00Z"), "{t}");
        assert!(!t.may_contend());
        let other = judge("p", Some("b"), &pod("a", false));
        assert_eq!(other.name(), "terminating");
        assert!(!other.may_contend());
    }

    #[test]
    fn only_a_pod_known_to_stay_or_unknowable_contends() {
        assert!(PodState::Staying.may_contend());
        assert!(PodState::Unknown { why: "x".into() }.may_contend());
        assert!(!PodState::Pending.may_contend());
    }
}
