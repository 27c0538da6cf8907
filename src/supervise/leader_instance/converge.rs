//! The promotion check for Passmower's client operator (`--converge-oidc-clients`): before a
//! leader instance starts, find the OIDCClients this Deployment's operator claimed whose client
//! Secret is missing, report each one, and hand it back so the starting operator reconciles it.
//!
//! Why: the operator writes the Secret and then upserts the client into Redis, and on start
//! (the watch's initial list) it skips every client already in Redis. A takeover between the
//! two (the write fence refuses the old leader's create, Passmower 1.3.0 swallows the refusal
//! and upserts anyway), an old leader killed in between, or a Secret deleted by hand leaves the
//! client in Redis with no Secret, and no later leader ever creates it until the OIDCClient
//! changes. What the check does about it works for every generation of the operator: it removes
//! `status.instance` (a status PUT with the listed resourceVersion, so a client changed since
//! is left alone), and the leader instance, started right after, takes the unclaimed path for
//! it: claim, then create (1.3.0) or create-or-adopt (2.x) the Secret, then upsert Redis, with
//! no look at Redis first.
//!
//! The writes go through the app's ServiceAccount (in-cluster config, the token mounted in the
//! app container) and so through the write fence: they are admitted only while this pod holds
//! the Lease. A check overtaken by a demotion is abandoned; its late writes are refused.

use std::time::Duration;

use futures_util::stream::{self, StreamExt};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

/// How many claimed clients' Secrets the check reads at once. A leader start waits for the
/// whole check, and a Deployment may have claimed hundreds of clients: one GET after another
/// would put each one's round trip into the leaderless gap. Sixteen in flight is far below
/// what the apiserver's priority and fairness lets one ServiceAccount have queued.
const PARALLEL_READS: usize = 16;

/// The whole check (list, one GET per claimed client, the releases) gives up after this long,
/// and the leader instance starts anyway: an apiserver that slow would stall the operator too.
pub const CONVERGE_LIMIT: Duration = Duration::from_secs(10);

/// What the operator's `NamespaceFilter` reconciles, as far as this check can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One namespace, listed by name (`NAMESPACE_SELECTOR` unset or empty: the pod's own; one name
    /// without `*` or `,`: that one).
    Namespace(String),
    /// Every pattern must match (Passmower uses `micromatch.every`).
    Patterns(Vec<String>),
}

impl Scope {
    /// Passmower's `NamespaceFilter` for `selector` (its `NAMESPACE_SELECTOR`) in a pod of
    /// `own` namespace.
    pub fn from_selector(selector: Option<&str>, own: &str) -> Scope {
        match selector.filter(|s| !s.is_empty()) {
            None => Scope::Namespace(own.to_owned()),
            Some(s) => {
                let parts: Vec<String> = s.split(',').map(str::to_owned).collect();
                if parts.len() == 1 && !s.contains('*') {
                    Scope::Namespace(s.to_owned())
                } else {
                    Scope::Patterns(parts)
                }
            }
        }
    }

    /// `Some(true)` if the operator reconciles `namespace`, `Some(false)` if not, `None` when a
    /// pattern uses more of micromatch than `*` (the check then leaves the client alone).
    pub fn covers(&self, namespace: &str) -> Option<bool> {
        match self {
            Scope::Namespace(n) => Some(n == namespace),
            Scope::Patterns(patterns) => {
                let mut all = true;
                for p in patterns {
                    all &= glob_star(p, namespace)?;
                }
                Some(all)
            }
        }
    }
}

/// `pattern` with `*` (any run of characters; namespace names hold no `/`) against `name`;
/// `None` if the pattern holds another character micromatch treats specially.
fn glob_star(pattern: &str, name: &str) -> Option<bool> {
    if pattern.chars().any(|c| "?[]{}()!+@\\".contains(c)) {
        return None;
    }
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return Some(false);
    };
    let tail: Vec<&str> = parts.collect();
    let Some((last, middle)) = tail.split_last() else {
        return Some(rest.is_empty());
    };
    for piece in middle {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return Some(false),
        }
    }
    Some(rest.len() >= last.len() && rest.ends_with(last))
}

/// The name of an OIDCClient's Secret (Passmower's `OIDCClientSecretName`).
pub fn secret_name(client: &str) -> String {
    format!("oidc-client-{client}-owner-secrets")
}

/// What the operator of this Deployment is called in `status.instance`: its `namespace + '-' +
/// DEPLOYMENT_NAME`, as Passmower's Kubernetes adapter builds it (JavaScript spells a missing
/// variable `undefined`).
pub fn instance_name(namespace: &str, deployment: Option<&str>) -> String {
    format!("{namespace}-{}", deployment.unwrap_or("undefined"))
}

/// How the check is set up: taken from the leader instance's environment.
#[derive(Debug, Clone)]
pub struct Converge {
    /// `NAMESPACE_SELECTOR` of the leader instance: its `--leader-env` value, else the
    /// supervisor's own, which the leader instance inherits (`None`: unset).
    pub selector: Option<String>,
    /// `DEPLOYMENT_NAME` of the leader instance.
    pub deployment: Option<String>,
}

/// What one check found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Clients claimed by this Deployment in scope, whose Secret was looked up.
    pub checked: usize,
    /// `namespace/name` of each claimed client whose Secret is missing.
    pub missing: Vec<String>,
    /// Those handed back (claim removed), for the starting operator to reconcile.
    pub released: Vec<String>,
    /// Those that could not be handed back, with why.
    pub failed: Vec<String>,
    /// Claimed clients whose namespace the check cannot place in the selector: left alone.
    pub skipped: Vec<String>,
}

fn oidc_clients() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("codemowers.cloud", "v1beta1", "OIDCClient"),
        "oidcclients",
    )
}

impl Converge {
    /// Runs the check with the app's in-cluster ServiceAccount.
    pub async fn run(&self) -> Result<Outcome, String> {
        let config = kube::Config::incluster()
            .map_err(|e| format!("no in-cluster Kubernetes configuration for the app: {e}"))?;
        let own = config.default_namespace.clone();
        let client = kube::Client::try_from(config)
            .map_err(|e| format!("cannot build a Kubernetes client: {e}"))?;
        let scope = Scope::from_selector(self.selector.as_deref(), &own);
        let instance = instance_name(&own, self.deployment.as_deref());
        check(&client, &scope, &instance).await
    }
}

/// The check proper, with `client` as the app's identity.
pub async fn check(
    client: &kube::Client,
    scope: &Scope,
    instance: &str,
) -> Result<Outcome, String> {
    let ar = oidc_clients();
    let api: Api<DynamicObject> = match scope {
        Scope::Namespace(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        Scope::Patterns(_) => Api::all_with(client.clone(), &ar),
    };
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("cannot list OIDCClients: {e}"))?;
    let mut out = Outcome::default();
    let mut mine = Vec::new();
    for obj in list.items {
        let (Some(name), Some(ns)) = (obj.metadata.name.clone(), obj.metadata.namespace.clone())
        else {
            continue;
        };
        let claimed = obj
            .data
            .pointer("/status/instance")
            .and_then(Value::as_str)
            .is_some_and(|i| i == instance);
        if !claimed {
            continue;
        }
        let id = format!("{ns}/{name}");
        match scope.covers(&ns) {
            Some(true) => {}
            Some(false) => continue,
            None => {
                out.skipped.push(id);
                continue;
            }
        }
        out.checked += 1;
        mine.push((obj, ns, name, id));
    }
    // The futures are built first: a stream that maps borrowed items into them is not Send.
    let gets: Vec<_> = mine
        .iter()
        .map(|(_, ns, name, _)| {
            let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
            let secret = secret_name(name);
            async move { secrets.get_opt(&secret).await }
        })
        .collect();
    let reads: Vec<_> = stream::iter(gets).buffered(PARALLEL_READS).collect().await;
    for ((obj, ns, name, id), read) in mine.iter().zip(reads) {
        match read {
            Ok(Some(_)) => continue,
            Ok(None) => {}
            Err(e) => {
                out.failed
                    .push(format!("{id}: cannot read its Secret: {e}"));
                continue;
            }
        }
        out.missing.push(id.clone());
        match release(client, &ar, obj, ns, name).await {
            Ok(()) => out.released.push(id.clone()),
            Err(e) => out.failed.push(format!("{id}: {e}")),
        }
        report_event(client, obj, ns, name).await;
    }
    Ok(out)
}

/// Removes `status.instance` from the listed object (a PUT of its status with the listed
/// resourceVersion: a client changed since the list is refused with 409 and left alone).
async fn release(
    client: &kube::Client,
    ar: &ApiResource,
    obj: &DynamicObject,
    ns: &str,
    name: &str,
) -> Result<(), String> {
    let mut updated = obj.clone();
    if let Some(status) = updated
        .data
        .get_mut("status")
        .and_then(Value::as_object_mut)
    {
        status.remove("instance");
    }
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    api.replace_status(name, &PostParams::default(), &updated)
        .await
        .map(|_| ())
        .map_err(|e| format!("cannot hand it back to the operator (status update): {e}"))
}

/// A Warning Event on the client (best effort: Passmower 1.3.0's chart grants no Events).
async fn report_event(client: &kube::Client, obj: &DynamicObject, ns: &str, name: &str) {
    let now = Time(Timestamp::now());
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}.")),
            namespace: Some(ns.to_owned()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("codemowers.cloud/v1beta1".into()),
            kind: Some("OIDCClient".into()),
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            uid: obj.metadata.uid.clone(),
            resource_version: obj.metadata.resource_version.clone(),
            ..Default::default()
        },
        reason: Some("ClientSecretMissing".into()),
        message: Some(format!(
            "the client Secret {} is missing while the client is claimed; the new leader's \
             operator reconciles it",
            secret_name(name)
        )),
        type_: Some("Warning".into()),
        source: Some(EventSource {
            component: Some("passmower-elector".into()),
            ..Default::default()
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        reporting_component: Some("passmower-elector".into()),
        reporting_instance: std::env::var("HOSTNAME").ok(),
        count: Some(1),
        ..Default::default()
    };
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    if let Err(e) = events.create(&PostParams::default(), &event).await {
        tracing::debug!(client = %format!("{ns}/{name}"), error = %e, "cannot create an Event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_follows_passmowers_namespace_filter() {
        assert_eq!(
            Scope::from_selector(None, "auth"),
            Scope::Namespace("auth".into())
        );
        assert_eq!(
            Scope::from_selector(Some(""), "auth"),
            Scope::Namespace("auth".into())
        );
        assert_eq!(
            Scope::from_selector(Some("apps"), "auth"),
            Scope::Namespace("apps".into())
        );
        let all = Scope::from_selector(Some("*"), "auth");
        assert_eq!(all.covers("anything"), Some(true));
        let pre = Scope::from_selector(Some("team-*"), "auth");
        assert_eq!(pre.covers("team-a"), Some(true));
        assert_eq!(pre.covers("other"), Some(false));
        // every pattern must match
        let both = Scope::from_selector(Some("team-*,*-prod"), "auth");
        assert_eq!(both.covers("team-a-prod"), Some(true));
        assert_eq!(both.covers("team-a"), Some(false));
        assert_eq!(
            Scope::from_selector(Some("team-{a,b}"), "auth").covers("team-a"),
            None
        );
        assert_eq!(
            Scope::Namespace("apps".into()).covers("apps-x"),
            Some(false)
        );
    }

    #[test]
    fn glob_star_matches_like_micromatch_for_star() {
        for (p, n, want) in [
            ("*", "", true),
            ("a*", "a", true),
            ("a*b", "ab", true),
            ("a*b", "axxb", true),
            ("a*b", "axxbc", false),
            ("*a*", "bab", true),
            ("a*a", "a", false),
            ("x", "x", true),
            ("x", "xy", false),
        ] {
            assert_eq!(glob_star(p, n), Some(want), "{p} vs {n}");
        }
    }

    #[test]
    fn names_are_passmowers() {
        assert_eq!(secret_name("app"), "oidc-client-app-owner-secrets");
        assert_eq!(instance_name("auth", Some("passmower")), "auth-passmower");
        assert_eq!(instance_name("auth", None), "auth-undefined");
    }
}
