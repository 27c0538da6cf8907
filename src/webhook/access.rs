//! Whether a pod's ServiceAccount may update its Lease, asked of the API server with a
//! SubjectAccessReview before the pod is admitted with a sidecar that would need it.
//!
//! The check is for a clear message at `kubectl apply` time, not for safety: an elector
//! without the permission never leads, so its app stays a follower. So when the check itself
//! fails (timeout, API error, no RBAC for SubjectAccessReviews) the pod is admitted with a
//! warning rather than refused: a flaky check must not stop pods from being created.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// How long an "allowed" answer is reused: a revoked permission is noticed within this.
const ALLOWED_TTL: Duration = Duration::from_secs(30);
/// Entries kept before the cache starts over (bounded memory whatever the pod churn).
const CACHE_LIMIT: usize = 1024;

/// What the API server said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    Allowed,
    /// Denied, with the authorizer's reason when it gave one.
    Denied(String),
    /// The check could not be made.
    Unknown(String),
}

/// Asks the API server, with a timeout and a short cache of "allowed" answers.
pub struct LeaseAccess {
    client: kube::Client,
    timeout: Duration,
    allowed: Mutex<HashMap<(String, String, String), Instant>>,
}

impl LeaseAccess {
    pub fn new(client: kube::Client, timeout: Duration) -> Self {
        LeaseAccess {
            client,
            timeout,
            allowed: Mutex::new(HashMap::new()),
        }
    }

    /// May `system:serviceaccount:<namespace>:<service_account>` update Lease `lease` in
    /// `namespace`? (`update` is what taking and renewing the Lease need; the chart's Role
    /// grants it with get, watch and patch on that one name.)
    pub async fn may_update_lease(
        &self,
        namespace: &str,
        service_account: &str,
        lease: &str,
    ) -> Access {
        let key = (
            namespace.to_owned(),
            service_account.to_owned(),
            lease.to_owned(),
        );
        let now = Instant::now();
        {
            let cache = self.allowed.lock().unwrap_or_else(|e| e.into_inner());
            if cache.get(&key).is_some_and(|until| *until > now) {
                return Access::Allowed;
            }
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(format!(
                    "system:serviceaccount:{namespace}:{service_account}"
                )),
                groups: Some(vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{namespace}"),
                    "system:authenticated".into(),
                ]),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_owned()),
                    verb: Some("update".into()),
                    group: Some("coordination.k8s.io".into()),
                    resource: Some("leases".into()),
                    name: Some(lease.to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api = Api::<SubjectAccessReview>::all(self.client.clone());
        let answer =
            tokio::time::timeout(self.timeout, api.create(&PostParams::default(), &review)).await;
        let status = match answer {
            Err(_) => {
                return Access::Unknown(format!(
                    "no answer to the SubjectAccessReview within {}",
                    crate::config::human(self.timeout)
                ))
            }
            Ok(Err(e)) => return Access::Unknown(format!("the SubjectAccessReview failed: {e}")),
            Ok(Ok(review)) => review.status.unwrap_or_default(),
        };
        if status.allowed {
            let mut cache = self.allowed.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(key, now + ALLOWED_TTL);
            return Access::Allowed;
        }
        let reason = status
            .reason
            .filter(|r| !r.is_empty())
            .or(status.evaluation_error)
            .unwrap_or_default();
        Access::Denied(reason)
    }
}
