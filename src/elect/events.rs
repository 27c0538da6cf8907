//! Kubernetes Events for this pod's state changes — `BecameLeader`, `Adopted`,
//! `AdoptionDeclined`, `StoppedLeading`, `NotContending`, `FollowerReady` — each recorded on the
//! Lease (where `passmower-elector status` and `kubectl describe lease` find every pod's) and on
//! this pod's own Pod (where `kubectl describe pod` shows them).
//!
//! Best effort: an Event never delays the election, and a missing RBAC permission is reported
//! once, not per event. The loop records an Event only when a state changes; this recorder
//! also drops an Event that repeats the previous one of its reason within
//! [`REPEAT_WINDOW`], and keeps to a budget ([`BURST`] at once, one more every
//! [`REFILL`]), so a state that flaps cannot flood the namespace. Events are created, never
//! patched: the elector's Role grants `create` on events and nothing more.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};

use crate::clock::BootInstant;
pub use crate::wire::{CAUSE_ANNOTATION, COMPONENT, EPOCH_ANNOTATION, LEADERLESS_ANNOTATION};

/// An Event equal to the previous one of its reason within this window is not recorded again.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(600);
/// Events recorded at once before the budget applies.
pub const BURST: u32 = 20;
/// One more Event is allowed this often once the burst is spent.
pub const REFILL: Duration = Duration::from_secs(30);

/// The figures of an Event, written as its annotations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Details {
    pub epoch: Option<u64>,
    pub cause: Option<&'static str>,
    pub leaderless: Option<Duration>,
}

impl Details {
    fn annotations(&self) -> Option<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        if let Some(epoch) = self.epoch {
            out.insert(EPOCH_ANNOTATION.to_owned(), epoch.to_string());
        }
        if let Some(cause) = self.cause {
            out.insert(CAUSE_ANNOTATION.to_owned(), cause.to_owned());
        }
        if let Some(leaderless) = self.leaderless {
            let ms = u64::try_from(leaderless.as_millis()).unwrap_or(u64::MAX);
            out.insert(LEADERLESS_ANNOTATION.to_owned(), ms.to_string());
        }
        (!out.is_empty()).then_some(out)
    }
}

/// Whether an Event is a plain state change or one a human should look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Normal,
    Warning,
}

/// This pod's Pod object, the second object each Event is recorded on.
#[derive(Clone, Debug)]
pub struct PodRef {
    pub name: String,
    pub namespace: String,
    pub uid: Option<String>,
}

#[derive(Clone)]
pub struct EventRecorder {
    client: Client,
    namespace: String,
    lease_name: String,
    pod: Option<PodRef>,
    reporter: String,
    disabled: Arc<AtomicBool>,
    filter: Arc<Mutex<Filter>>,
}

impl EventRecorder {
    pub fn new(
        client: Client,
        namespace: &str,
        lease_name: &str,
        pod: Option<PodRef>,
        reporter: &str,
    ) -> Self {
        EventRecorder {
            client,
            namespace: namespace.to_owned(),
            lease_name: lease_name.to_owned(),
            pod,
            reporter: reporter.to_owned(),
            disabled: Arc::new(AtomicBool::new(false)),
            filter: Arc::new(Mutex::new(Filter::default())),
        }
    }

    /// Records an Event on the Lease and the Pod in the background, unless the filter drops it.
    pub fn record(&self, kind: Kind, reason: &'static str, message: String, details: Details) {
        tokio::spawn(self.record_now(kind, reason, message, details));
    }

    /// Records an Event on the Lease and the Pod, unless the filter drops it; done when both
    /// creates have been answered (each within its own time limit).
    pub fn record_now(
        &self,
        kind: Kind,
        reason: &'static str,
        message: String,
        details: Details,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let admitted = !self.disabled.load(Ordering::Relaxed)
            && self
                .filter
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .admit(reason, &message, BootInstant::now());
        if !admitted {
            tracing::debug!(reason, %message, "event not recorded: a repeat, or over the budget");
        }
        let this = self.clone();
        async move {
            if !admitted {
                return;
            }
            let lease = ObjectReference {
                api_version: Some("coordination.k8s.io/v1".into()),
                kind: Some("Lease".into()),
                name: Some(this.lease_name.clone()),
                namespace: Some(this.namespace.clone()),
                ..ObjectReference::default()
            };
            this.send(&this.namespace, lease, kind, reason, &message, details)
                .await;
            if let Some(pod) = &this.pod {
                let object = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(pod.name.clone()),
                    namespace: Some(pod.namespace.clone()),
                    uid: pod.uid.clone(),
                    ..ObjectReference::default()
                };
                this.send(&pod.namespace, object, kind, reason, &message, details)
                    .await;
            }
        }
    }

    async fn send(
        &self,
        namespace: &str,
        object: ObjectReference,
        kind: Kind,
        reason: &'static str,
        message: &str,
        details: Details,
    ) {
        if self.disabled.load(Ordering::Relaxed) {
            return;
        }
        let now = Time(Timestamp::now());
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!(
                    "{}.",
                    object.name.as_deref().unwrap_or(&self.lease_name)
                )),
                namespace: Some(namespace.to_owned()),
                annotations: details.annotations(),
                ..ObjectMeta::default()
            },
            involved_object: object,
            reason: Some(reason.into()),
            message: Some(message.to_owned()),
            type_: Some(
                match kind {
                    Kind::Normal => "Normal",
                    Kind::Warning => "Warning",
                }
                .into(),
            ),
            source: Some(EventSource {
                component: Some(COMPONENT.into()),
                host: None,
            }),
            reporting_component: Some(COMPONENT.into()),
            reporting_instance: Some(self.reporter.clone()),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        match tokio::time::timeout(
            Duration::from_secs(5),
            api.create(&PostParams::default(), &event),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(kube::Error::Api(status))) if status.code == 403 => {
                tracing::warn!(
                    "cannot create Events (RBAC forbids it); transitions are still logged"
                );
                self.disabled.store(true, Ordering::Relaxed);
            }
            Ok(Err(e)) => tracing::debug!(error = %e, reason, "event not recorded"),
            Err(_) => tracing::debug!(reason, "event not recorded: timeout"),
        }
    }
}

/// The recorder's own limits: no repeat of the previous Event of a reason within the window,
/// and a budget for all of them.
#[derive(Debug)]
struct Filter {
    /// The last message recorded per reason, and when.
    last: HashMap<&'static str, (String, BootInstant)>,
    /// Events that may still be recorded at once.
    tokens: u32,
    /// When the budget last grew.
    refilled: Option<BootInstant>,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            last: HashMap::new(),
            tokens: BURST,
            refilled: None,
        }
    }
}

impl Filter {
    fn admit(&mut self, reason: &'static str, message: &str, now: BootInstant) -> bool {
        let refilled = *self.refilled.get_or_insert(now);
        let periods = now.saturating_since(refilled).as_nanos() / REFILL.as_nanos().max(1);
        if periods > 0 {
            let grown = u32::try_from(periods).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(grown).min(BURST);
            self.refilled = Some(now);
        }
        if let Some((previous, at)) = self.last.get(reason) {
            if previous == message && now.saturating_since(*at) < REPEAT_WINDOW {
                return false;
            }
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        self.last.insert(reason, (message.to_owned(), now));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> BootInstant {
        BootInstant::from_nanos(secs * 1_000_000_000)
    }

    #[test]
    fn a_repeat_of_the_same_event_is_dropped_within_the_window() {
        let mut f = Filter::default();
        assert!(f.admit("NotContending", "silent", at(10)));
        assert!(!f.admit("NotContending", "silent", at(20)));
        // Another message of the reason, or another reason, is a change.
        assert!(f.admit("NotContending", "stopped", at(21)));
        assert!(f.admit("FollowerReady", "silent", at(22)));
        assert!(f.admit("NotContending", "silent", at(23)));
        // Past the window the same message counts again.
        assert!(f.admit("NotContending", "silent", at(23 + 601)));
    }

    #[test]
    fn a_flapping_state_is_held_to_the_budget() {
        let mut f = Filter::default();
        let admitted = (0..100u64)
            .filter(|i| f.admit("NotContending", &format!("state {i}"), at(100)))
            .count();
        assert_eq!(admitted, BURST as usize);
        assert!(!f.admit("BecameLeader", "x", at(100)));
        assert!(f.admit("BecameLeader", "x", at(100 + REFILL.as_secs())));
        assert!(!f.admit("BecameLeader", "y", at(100 + REFILL.as_secs())));
    }
}
