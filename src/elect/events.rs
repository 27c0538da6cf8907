//! Kubernetes Events on the Lease for "BecameLeader" and "StoppedLeading". Best effort: an
//! Event never delays the election, and a missing RBAC permission is reported once, not per event.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};

#[derive(Clone)]
pub struct EventRecorder {
    api: Api<Event>,
    namespace: String,
    lease_name: String,
    reporter: String,
    disabled: Arc<AtomicBool>,
}

impl EventRecorder {
    pub fn new(client: Client, namespace: &str, lease_name: &str, reporter: &str) -> Self {
        EventRecorder {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            lease_name: lease_name.to_owned(),
            reporter: reporter.to_owned(),
            disabled: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Records an Event in the background.
    pub fn record(&self, reason: &'static str, message: String) {
        if self.disabled.load(Ordering::Relaxed) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move { this.send(reason, message).await });
    }

    async fn send(&self, reason: &'static str, message: String) {
        let now = Time(Timestamp::now());
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", self.lease_name)),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("coordination.k8s.io/v1".into()),
                kind: Some("Lease".into()),
                name: Some(self.lease_name.clone()),
                namespace: Some(self.namespace.clone()),
                ..ObjectReference::default()
            },
            reason: Some(reason.into()),
            message: Some(message),
            type_: Some("Normal".into()),
            source: Some(EventSource {
                component: Some("passmower-elector".into()),
                host: None,
            }),
            reporting_component: Some("passmower-elector".into()),
            reporting_instance: Some(self.reporter.clone()),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Event::default()
        };
        match tokio::time::timeout(
            Duration::from_secs(5),
            self.api.create(&PostParams::default(), &event),
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
