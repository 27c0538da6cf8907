//! The admission decision for one request: whether the object is a pod to inject, with which
//! options (the webhook's flags, then the pod's own annotations), whether its ServiceAccount
//! may hold the Lease, and the response the API server gets.

use serde_json::Value;

use super::access::{Access, LeaseAccess};
use super::patch;
use super::review::{AdmissionRequest, AdmissionResponse};
use crate::config::is_dns1123_subdomain;
use crate::inject::{
    check_leader_selector, describe_pod, inject_pod, not_a_target, parse_app_command, InjectError,
    InjectOptions, PodOutcome, LEASE_ANNOTATION,
};

/// Label (on a namespace or a pod) that opts in with `enabled`; on a pod, `disabled` opts out
/// (the webhook's own pods carry it). As a pod annotation, `disabled` opts out too.
pub const INJECT_LABEL: &str = "passmower-elector.io/inject";
pub use crate::wire::{CONTAINER_ANNOTATION, NEVER_NAMESPACES};
/// Pod annotation: the app's command, instead of `--app-command` (words, or a JSON array).
pub const APP_COMMAND_ANNOTATION: &str = "passmower-elector.io/app-command";
/// Pod annotation: the leader's NAMESPACE_SELECTOR, instead of `--namespace-selector` (empty:
/// the pod's own namespace).
pub const NAMESPACE_SELECTOR_ANNOTATION: &str = "passmower-elector.io/namespace-selector";

/// What became of a request, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Injected,
    Skipped,
    Refused,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Injected => "injected",
            Outcome::Skipped => "skipped",
            Outcome::Refused => "refused",
        }
    }
}

/// Decides and builds responses. Shared by every connection.
pub struct Injector {
    /// The webhook's flags, validated at start.
    pub base: InjectOptions,
    /// `None` when the Lease permission check is switched off.
    pub access: Option<LeaseAccess>,
}

impl Injector {
    /// The response to `request`, and what it was.
    pub async fn admit(&self, request: &AdmissionRequest) -> (AdmissionResponse, Outcome) {
        match self.decide(request).await {
            Decision::Skip(reason) => {
                tracing::debug!(uid = %request.uid, %reason, "admitted unchanged");
                let mut response = AdmissionResponse::allow(&request.uid);
                response.audit_annotations.insert("skipped".into(), reason);
                (response, Outcome::Skipped)
            }
            Decision::Withheld { describe, detail } => {
                // The detail answers a question about the cluster (may this ServiceAccount
                // update that Lease?) that whoever sent the review may not be allowed to ask;
                // it goes to the webhook's own log, the caller gets the same words whatever it
                // was.
                tracing::warn!(uid = %request.uid, %detail, "refused (reason withheld from the caller)");
                (
                    AdmissionResponse::refuse(
                        &request.uid,
                        403,
                        "Forbidden",
                        withheld_message(&describe, &request.uid),
                    ),
                    Outcome::Refused,
                )
            }
            Decision::Refuse {
                code,
                reason,
                message,
            } => {
                tracing::info!(uid = %request.uid, %message, "refused");
                (
                    AdmissionResponse::refuse(&request.uid, code, reason, message),
                    Outcome::Refused,
                )
            }
            Decision::Inject {
                patch,
                warnings,
                what,
            } => {
                tracing::info!(uid = %request.uid, %what, "injected");
                let mut response = AdmissionResponse::patched(&request.uid, &patch);
                response.warnings = warnings;
                response.audit_annotations.insert("injected".into(), what);
                (response, Outcome::Injected)
            }
        }
    }

    async fn decide(&self, request: &AdmissionRequest) -> Decision {
        let kind = &request.kind;
        if (
            kind.group.as_str(),
            kind.version.as_str(),
            kind.kind.as_str(),
        ) != ("", "v1", "Pod")
            || request
                .sub_resource
                .as_deref()
                .is_some_and(|s| !s.is_empty())
        {
            return Decision::Skip(format!(
                "only pods are injected, not {}/{} {}{}",
                kind.group,
                kind.version,
                kind.kind,
                request
                    .sub_resource
                    .as_deref()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default()
            ));
        }
        if request.operation != "CREATE" {
            return Decision::Skip(format!(
                "only CREATE is injected, not {}",
                request.operation
            ));
        }
        let namespace = request.namespace.clone().unwrap_or_default();
        if NEVER_NAMESPACES.contains(&namespace.as_str()) {
            return Decision::Skip(format!("namespace {namespace} is never injected"));
        }
        let Some(pod) = request.object.as_ref().filter(|o| o.is_object()) else {
            return Decision::refuse(400, "BadRequest", "the CREATE request carries no object");
        };
        let describe = format!("{namespace}/{}", describe_pod_json(pod));
        let label = pod["metadata"]["labels"][INJECT_LABEL].as_str();
        let annotation = pod["metadata"]["annotations"][INJECT_LABEL].as_str();
        if label == Some("disabled") || annotation == Some("disabled") {
            return Decision::Skip(format!("{describe} opts out ({INJECT_LABEL}: disabled)"));
        }
        let Ok(yaml) = serde_norway::to_value(pod) else {
            return Decision::refuse(400, "BadRequest", format!("{describe}: unreadable object"));
        };
        // Whether the pod is a target at all comes first, before any of its options is judged:
        // a pod that would not be injected is admitted whatever it carries, which is what the
        // chart's matchConditions (the same rule in CEL) assume when they skip the call.
        // An empty container annotation names no container; it is refused below, by name.
        if let Some(reason) =
            target_container(pod, &self.base.container).and_then(|c| not_a_target(&yaml, c))
        {
            return Decision::Skip(format!("{namespace}/{reason}"));
        }
        // The chart's Lease grant and write fence are keyed on the ServiceAccount: on the
        // namespace's `default` one they would cover every pod there that names none.
        let account = pod["spec"]["serviceAccountName"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("default");
        if account == "default" {
            return Decision::refuse(
                422,
                "Invalid",
                format!(
                    "{describe} opts in to passmower-elector but runs as the namespace's default \
                     ServiceAccount, which every pod that names none shares: the Lease grant and \
                     the write fence are keyed on the ServiceAccount, so any such pod could stall \
                     the election and the fence would refuse their Secret writes and Pod creates. \
                     Set serviceAccountName in its pod template to a ServiceAccount of \
                     Passmower's own"
                ),
            );
        }

        let opts = match self.pod_options(pod) {
            Ok(opts) => opts,
            Err(message) => {
                return Decision::refuse(400, "BadRequest", format!("{describe}: {message}"))
            }
        };
        let lease = match lease_for(pod, &opts) {
            Ok(lease) => lease,
            Err(message) => {
                return Decision::refuse(400, "BadRequest", format!("{describe}: {message}"))
            }
        };

        let (injected, mut warnings) = match inject_pod(&yaml, &lease, &opts) {
            Ok(PodOutcome::Unchanged(reason)) => {
                return Decision::Skip(format!("{namespace}/{reason}"))
            }
            Ok(PodOutcome::Injected { pod, warnings }) => (pod, warnings),
            Err(e) => {
                return Decision::refuse(
                    422,
                    "Invalid",
                    format!(
                        "{describe} opts in to passmower-elector but cannot be injected: {}",
                        admission_message(&e)
                    ),
                )
            }
        };

        if let Some(access) = &self.access {
            match access.may_update_lease(&namespace, account, &lease).await {
                Access::Allowed => {}
                Access::Denied(why) => {
                    return Decision::Withheld {
                        detail: format!(
                            "{describe} opts in to passmower-elector, but its ServiceAccount \
                             {namespace}/{account} may not update Lease {namespace}/{lease} \
                             (coordination.k8s.io), so its elector could never lead: install the \
                             passmower-elector chart for this workload in {namespace} (Role and \
                             RoleBinding for the Lease), or name the Lease the Role allows with \
                             the {LEASE_ANNOTATION} annotation{}",
                            if why.is_empty() {
                                String::new()
                            } else {
                                format!(" ({why})")
                            }
                        ),
                        describe,
                    };
                }
                Access::Unknown(why) => warnings.push(format!(
                    "passmower-elector could not check that ServiceAccount {namespace}/{account} \
                     may update Lease {lease}: {why}"
                )),
            }
        }

        let Ok(after) = serde_json::to_value(&injected) else {
            return Decision::Withheld {
                detail: format!("{describe}: cannot encode the injected pod"),
                describe,
            };
        };
        Decision::Inject {
            patch: patch::diff(pod, &after),
            warnings,
            what: format!("{describe}: Lease {lease}, container {:?}", opts.container),
        }
    }

    /// The webhook's options with the pod's annotations applied.
    fn pod_options(&self, pod: &Value) -> Result<InjectOptions, String> {
        let mut opts = self.base.clone();
        let annotation = |key: &str| pod["metadata"]["annotations"][key].as_str();
        if let Some(container) = annotation(CONTAINER_ANNOTATION) {
            if container.is_empty() {
                return Err(format!("annotation {CONTAINER_ANNOTATION} is empty"));
            }
            opts.container = container.to_owned();
        }
        if let Some(command) = annotation(APP_COMMAND_ANNOTATION) {
            opts.app_command = Some(
                parse_app_command(command)
                    .map_err(|e| format!("annotation {APP_COMMAND_ANNOTATION}: {}", e.reason))?,
            );
        }
        if let Some(selector) = annotation(NAMESPACE_SELECTOR_ANNOTATION) {
            if check_leader_selector(selector).is_err() {
                return Err(format!(
                    "annotation {NAMESPACE_SELECTOR_ANNOTATION} is blank; leave it empty for the \
                     pod's own namespace, or give one namespace name, `*` for every namespace, \
                     or comma-separated patterns"
                ));
            }
            opts.namespace_selector = Some(selector.to_owned());
        }
        Ok(opts)
    }
}

enum Decision {
    Inject {
        patch: Value,
        warnings: Vec<String>,
        what: String,
    },
    Skip(String),
    /// Refused with [`withheld_message`]; `detail` only in the webhook's log.
    Withheld {
        describe: String,
        detail: String,
    },
    Refuse {
        code: u16,
        reason: &'static str,
        message: String,
    },
}

impl Decision {
    fn refuse(code: u16, reason: &'static str, message: impl Into<String>) -> Decision {
        Decision::Refuse {
            code,
            reason,
            message: message.into(),
        }
    }
}

/// What the caller is told of a refusal whose reason is withheld: the same words for every
/// such reason, so the answer tells nothing about the Lease permission checked for it.
pub fn withheld_message(describe: &str, uid: &str) -> String {
    format!(
        "{describe} opts in to passmower-elector but was refused; the reason is in the \
         passmower-elector webhook's log (request {uid})"
    )
}

/// The container a pod asks to be wrapped: its annotation, else `default` (the flag); `None`
/// for an empty annotation, which names none (and is refused).
fn target_container<'a>(pod: &'a Value, default: &'a str) -> Option<&'a str> {
    match pod["metadata"]["annotations"][CONTAINER_ANNOTATION].as_str() {
        Some("") => None,
        Some(named) => Some(named),
        None => Some(default),
    }
}

/// Whether a pod CREATE in an opted-in namespace is one the webhook acts on (injects or
/// refuses), with `container` as `--container`: the rule the chart's matchConditions express
/// in CEL, so that every other pod is admitted without calling the webhook.
pub fn acts_on(pod: &Value, container: &str) -> bool {
    let opted_out = ["labels", "annotations"]
        .iter()
        .any(|m| pod["metadata"][m][INJECT_LABEL].as_str() == Some("disabled"));
    if opted_out {
        return false;
    }
    let Ok(yaml) = serde_norway::to_value(pod) else {
        return true;
    };
    target_container(pod, container).is_none_or(|c| not_a_target(&yaml, c).is_none())
}

fn describe_pod_json(pod: &Value) -> String {
    serde_norway::to_value(pod)
        .map(|v| describe_pod(&v))
        .unwrap_or_else(|_| "Pod".into())
}

/// The Lease a pod's elector holds: the pod's annotation, else `--lease-name`, else its
/// workload's name (what `inject` and the chart name it): the Deployment behind a ReplicaSet,
/// the StatefulSet, or whatever else controls the pod. A bare pod must name it.
fn lease_for(pod: &Value, opts: &InjectOptions) -> Result<String, String> {
    let lease = if let Some(explicit) = pod["metadata"]["annotations"][LEASE_ANNOTATION].as_str() {
        explicit.to_owned()
    } else if let Some(flag) = &opts.lease_name {
        flag.clone()
    } else {
        let owner = pod["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["controller"].as_bool() == Some(true));
        let Some((kind, name)) =
            owner.and_then(|o| Some((o["kind"].as_str()?, o["name"].as_str()?)))
        else {
            return Err(format!(
                "no controller owns the pod, so its Lease cannot be named after a workload: set \
                 the {LEASE_ANNOTATION} annotation"
            ));
        };
        let hash = pod["metadata"]["labels"]["pod-template-hash"].as_str();
        match (kind, hash) {
            ("ReplicaSet", Some(hash)) => name
                .strip_suffix(&format!("-{hash}"))
                .unwrap_or(name)
                .to_owned(),
            _ => name.to_owned(),
        }
    };
    if !is_dns1123_subdomain(&lease) {
        return Err(format!(
            "Lease name {lease:?} is not a DNS-1123 subdomain (set the {LEASE_ANNOTATION} annotation)"
        ));
    }
    Ok(lease)
}

/// An injection error worded for an admission response: the pod, not a document of a stream,
/// and the pod's annotations as the way out, not `inject`'s flags.
fn admission_message(e: &InjectError) -> String {
    match e {
        InjectError::Manifest { reason, .. } => reason.clone(),
        InjectError::NoCommand { container, .. } => format!(
            "container {container:?} sets no command, so the app command is unknown; set the \
             {APP_COMMAND_ANNOTATION} annotation (e.g. 'node server.js') or --app-command"
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::patch::tests::apply;
    use crate::webhook::review::parse;
    use serde_json::json;

    fn injector() -> Injector {
        Injector {
            base: InjectOptions::new("registry.example.com/passmower-elector:test"),
            access: None,
        }
    }

    fn request(object: Value) -> AdmissionRequest {
        let body = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "namespace": "pm", "operation": "CREATE", "userInfo": {},
                        "object": object}
        });
        parse(&serde_json::to_vec(&body).unwrap()).unwrap()
    }

    fn deployment_pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "passmower-5f7c9-", "namespace": "pm",
                         "labels": {"app": "pm", "pod-template-hash": "5f7c9"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                             "name": "passmower-5f7c9", "uid": "x", "controller": true}]},
            "spec": {"serviceAccountName": "passmower", "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "passmower", "image": "passmower:1.3.0",
                                     "env": [{"name": "NAMESPACE_SELECTOR", "value": "*"}]}]}
        })
    }

    async fn admitted(object: Value) -> (AdmissionResponse, Outcome) {
        injector().admit(&request(object)).await
    }

    #[tokio::test]
    async fn a_deployments_pod_gets_the_sidecar_and_the_deployments_lease() {
        let pod = deployment_pod();
        let (response, outcome) = admitted(pod.clone()).await;
        assert_eq!(outcome, Outcome::Injected, "{response:?}");
        let patch: Value = serde_json::from_slice(&response.patch.unwrap().0).unwrap();
        let after = apply(&pod, &patch);
        assert_eq!(
            after["metadata"]["annotations"][LEASE_ANNOTATION],
            "passmower"
        );
        let init = after["spec"]["initContainers"].as_array().unwrap();
        assert_eq!(init.len(), 2);
        assert!(init[1]["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--lease-name=passmower")));
        // The leader instance's metrics reach the elector's port here too.
        assert!(init[1]["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--leader-app-metrics-port=19090")));
        assert!(after["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--leader-port-map=9090=19090")));
        assert_eq!(init[1]["ports"][0]["name"], "elector-probe");
        // Injecting the result again changes nothing.
        let (again, outcome) = admitted(after).await;
        assert_eq!(outcome, Outcome::Skipped);
        assert!(again.patch.is_none());
        assert!(again.audit_annotations["skipped"].contains("already injected"));
    }

    #[tokio::test]
    async fn a_pod_on_the_default_service_account_is_refused() {
        for account in [None, Some("default"), Some("")] {
            let mut pod = deployment_pod();
            match account {
                Some(name) => pod["spec"]["serviceAccountName"] = json!(name),
                None => {
                    pod["spec"]
                        .as_object_mut()
                        .unwrap()
                        .remove("serviceAccountName");
                }
            }
            let (response, outcome) = admitted(pod).await;
            assert_eq!(outcome, Outcome::Refused, "{account:?}: {response:?}");
            let status = response.status.expect("a refusal carries a status");
            assert_eq!(status.code, 422);
            assert!(
                status.message.contains("default ServiceAccount")
                    && status.message.contains("serviceAccountName"),
                "{}",
                status.message
            );
        }
    }

    #[tokio::test]
    async fn annotations_override_the_flags_and_bad_ones_are_refused_by_name() {
        let mut pod = deployment_pod();
        pod["metadata"]["annotations"] = json!({
            LEASE_ANNOTATION: "custom",
            NAMESPACE_SELECTOR_ANNOTATION: "tenant-a",
        });
        let (response, _) = admitted(pod.clone()).await;
        let after = apply(
            &pod,
            &serde_json::from_slice(&response.patch.unwrap().0).unwrap(),
        );
        let args = after["spec"]["containers"][0]["args"].to_string();
        assert!(
            args.contains("--leader-env=NAMESPACE_SELECTOR=tenant-a"),
            "{args}"
        );
        assert!(after["spec"]["initContainers"][1]["args"]
            .to_string()
            .contains("--lease-name=custom"));

        for (key, value, expected) in [
            (LEASE_ANNOTATION, "Not_A_Name", "DNS-1123"),
            (APP_COMMAND_ANNOTATION, "  ", APP_COMMAND_ANNOTATION),
            (CONTAINER_ANNOTATION, "", CONTAINER_ANNOTATION),
        ] {
            let mut pod = deployment_pod();
            pod["metadata"]["annotations"] = json!({ key: value });
            let (response, outcome) = admitted(pod).await;
            assert_eq!(outcome, Outcome::Refused);
            let message = response.status.unwrap().message;
            assert!(message.contains(expected), "{key}: {message}");
            assert!(message.contains("pm/Pod/passmower-5f7c9-*"), "{message}");
        }
    }

    /// A container that sets no NAMESPACE_SELECTOR keeps Passmower's own-namespace scope: the
    /// leader gets no selector of its own (it inherits the unset one), only the follower's is
    /// set. An empty annotation asks for the own namespace explicitly; a blank one is refused.
    #[tokio::test]
    async fn a_pod_without_a_selector_keeps_its_own_namespace() {
        let args_of = |pod: &Value, response: AdmissionResponse| -> Vec<String> {
            let after = apply(
                pod,
                &serde_json::from_slice(&response.patch.unwrap().0).unwrap(),
            );
            after["spec"]["containers"][0]["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_owned())
                .collect()
        };
        let selectors = |args: &[String]| -> Vec<String> {
            args.iter()
                .filter(|a| a.contains("NAMESPACE_SELECTOR"))
                .cloned()
                .collect()
        };
        let mut pod = deployment_pod();
        pod["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("env");
        let (response, outcome) = admitted(pod.clone()).await;
        assert_eq!(outcome, Outcome::Injected, "{response:?}");
        let args = args_of(&pod, response);
        assert_eq!(
            selectors(&args),
            ["--follower-env=NAMESPACE_SELECTOR=passmower-elector_idle"],
            "{args:?}"
        );

        pod["metadata"]["annotations"] = json!({ NAMESPACE_SELECTOR_ANNOTATION: "" });
        let (response, outcome) = admitted(pod.clone()).await;
        assert_eq!(outcome, Outcome::Injected, "{response:?}");
        let args = args_of(&pod, response);
        assert_eq!(
            selectors(&args),
            [
                "--leader-env=NAMESPACE_SELECTOR=",
                "--follower-env=NAMESPACE_SELECTOR=passmower-elector_idle"
            ],
            "{args:?}"
        );

        pod["metadata"]["annotations"] = json!({ NAMESPACE_SELECTOR_ANNOTATION: "  " });
        let (response, outcome) = admitted(pod).await;
        assert_eq!(outcome, Outcome::Refused);
        let message = response.status.unwrap().message;
        assert!(message.contains(NAMESPACE_SELECTOR_ANNOTATION), "{message}");
    }

    #[tokio::test]
    async fn what_is_not_a_target_passes_unchanged_with_the_reason() {
        let mut other_kind = request(json!({"kind": "ConfigMap", "metadata": {}}));
        other_kind.kind.kind = "ConfigMap".into();
        let mut update = request(deployment_pod());
        update.operation = "UPDATE".into();
        let mut system = request(deployment_pod());
        system.namespace = Some("kube-system".into());
        let mut redis = deployment_pod();
        redis["spec"]["containers"][0]["name"] = json!("redis");
        let mut opted_out = deployment_pod();
        opted_out["metadata"]["labels"][INJECT_LABEL] = json!("disabled");
        // Not a target, so nothing else about it is judged: a bare pod (no workload to name a
        // Lease after), an annotation that would be refused on a target, another container.
        let mut bare_debug = redis.clone();
        bare_debug["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences");
        let mut bad_annotation = redis.clone();
        bad_annotation["metadata"]["annotations"] = json!({ APP_COMMAND_ANNOTATION: "  " });
        let mut elsewhere = deployment_pod();
        elsewhere["metadata"]["annotations"] = json!({ CONTAINER_ANNOTATION: "app" });
        for (req, expected) in [
            (other_kind, "only pods"),
            (update, "only CREATE"),
            (system, "never injected"),
            (request(redis), "no container named"),
            (request(opted_out), "opts out"),
            (request(bare_debug), "no container named \"passmower\""),
            (request(bad_annotation), "no container named"),
            (request(elsewhere), "no container named \"app\""),
        ] {
            let (response, outcome) = injector().admit(&req).await;
            assert_eq!(outcome, Outcome::Skipped, "{expected}");
            assert!(response.allowed && response.patch.is_none());
            assert!(
                response.audit_annotations["skipped"].contains(expected),
                "{expected}: {:?}",
                response.audit_annotations
            );
        }
    }

    #[tokio::test]
    async fn a_pod_that_cannot_be_wrapped_is_refused_with_the_way_out() {
        let mut pod = deployment_pod();
        pod["metadata"]["annotations"] = json!({ CONTAINER_ANNOTATION: "app" });
        pod["spec"]["containers"][0]["name"] = json!("app");
        let (response, outcome) = admitted(pod).await;
        assert_eq!(outcome, Outcome::Refused);
        let status = response.status.unwrap();
        assert_eq!(status.code, 422);
        assert!(
            status.message.contains(APP_COMMAND_ANNOTATION),
            "{}",
            status.message
        );

        let mut bare = deployment_pod();
        bare["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences");
        let (response, _) = admitted(bare).await;
        assert!(response.status.unwrap().message.contains(LEASE_ANNOTATION));
    }

    #[tokio::test]
    async fn statefulset_pods_take_the_statefulsets_name() {
        let mut pod = deployment_pod();
        pod["metadata"]["ownerReferences"][0]["kind"] = json!("StatefulSet");
        pod["metadata"]["ownerReferences"][0]["name"] = json!("pm-sts");
        let lease = lease_for(&pod, &injector().base).unwrap();
        assert_eq!(lease, "pm-sts");
    }
}
