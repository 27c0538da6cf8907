//! The replica guard: a ValidatingAdmissionPolicy that refuses to create or update the
//! protected workload with more than one replica unless its pods get the elector, so a
//! `helm upgrade` or `helm rollback` without the post-renderer (which strips the sidecar but
//! keeps `replicaCount`) cannot bring back several replicas each running Passmower's operators.
//!
//! The pods get the elector when the pod template has the elector container (`inject`, the
//! post-renderer), or, where the admission webhook injects the pods instead
//! ([`WebhookOptIn`]), when the webhook would inject them: the template or its namespace opts
//! in, and none of the webhook's reasons to skip a pod holds (an opt-out, no container to
//! wrap, markers of an earlier injection, a namespace the webhook never injects). The webhook
//! decides the same from the pod (src/webhook/admit.rs, `not_a_target`); a test per reason
//! holds them together. A template whose app container runs Passmower's own election
//! (`LEADER_ELECTION_ENABLED` set to `"true"` and to nothing else, as upstream's 2.4 chart renders
//! it) is admitted too: Passmower 2.4 and later then elect one leader themselves, which is what
//! removing passmower-elector from a 2.4 install returns to (the elector's `--native-lease`
//! keeps the two elections apart while the pods roll). Older Passmower ignores that variable,
//! and its chart never sets it. A scale to
//! one replica is always admitted, and so is every other workload. The policy matches the
//! workload by kind, namespace and name, and only `CREATE` and `UPDATE` of the workload
//! itself: the `scale` subresource (`kubectl scale`, an autoscaler) carries no pod template,
//! so it is not matched. This module is the one statement of the policy: `inject` emits it,
//! the chart's `templates/guard.yaml` renders the same spec (a test compares them).

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde_norway::Value;

use crate::inject::kube_version::KubeVersion;
use crate::inject::names::{
    subdomain_name, WorkloadKind, BIN_VOLUME, ELECTOR_CONTAINER, FLAG_VOLUME,
    GENERATED_FOR_ANNOTATION, INJECTED_ANNOTATION, INSTALL_CONTAINER,
};
use crate::inject::options::InjectOptions;
use crate::inject::value::to_value;
use crate::wire::{CONTAINER_ANNOTATION, NEVER_NAMESPACES};

/// What every refusal's message starts with.
pub const GUARD_DENIAL_PREFIX: &str = "passmower-elector replica guard";
/// The `app.kubernetes.io/component` label of the guard's policy and binding.
pub const GUARD_COMPONENT: &str = "replica-guard";
/// The annotation with which a pod opts out of the webhook whatever its labels say (the
/// webhook's own match conditions read it under this fixed name).
const OPT_OUT_ANNOTATION: &str = "passmower-elector.io/inject";
/// The value of the opt-in label that opts a pod out.
const OPT_OUT_VALUE: &str = "disabled";

/// What the admission webhook's chart says about which pods it injects: the label with which
/// a namespace or a pod opts in (`optIn.label`, `optIn.value`), the container it wraps unless a
/// pod names another (`injection.container`) and the namespaces it never injects besides the
/// cluster's own (`excludeNamespaces`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookOptIn<'a> {
    pub label: &'a str,
    pub value: &'a str,
    pub container: &'a str,
    pub excluded_namespaces: &'a [&'a str],
}

impl WebhookOptIn<'static> {
    /// The webhook chart's defaults: `passmower-elector.io/inject=enabled`, container
    /// `passmower`, no namespace excluded but the cluster's own.
    pub const DEFAULT: WebhookOptIn<'static> = WebhookOptIn {
        label: "passmower-elector.io/inject",
        value: "enabled",
        container: "passmower",
        excluded_namespaces: &[],
    };
}

/// What one guard protects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardTarget<'a> {
    pub namespace: &'a str,
    pub kind: WorkloadKind,
    pub name: &'a str,
    /// `Some` where the admission webhook injects the pods (the workload has no elector of
    /// its own): then an opted-in template or namespace admits more than one replica.
    pub webhook: Option<WebhookOptIn<'a>>,
    /// The app container, whose own election (Passmower 2.4 and later) admits more than one
    /// replica too, when [`GuardTarget::native_lease`] is set.
    pub app_container: &'a str,
    /// The Lease of Passmower's own election that the electors hold beside theirs
    /// (`--native-lease`; `None` for a Passmower known to be older than 2.4): a template that
    /// runs that election on that very Lease is admitted, so removing passmower-elector returns
    /// to it while the elector keeps the two elections apart. Without it, only the elector
    /// admits more than one replica.
    pub native_lease: Option<&'a str>,
}

/// Whether the template's container `app` runs Passmower's own election on Lease `lease`, in
/// CEL: it sets `LEADER_ELECTION_ENABLED` to `"true"` and never to anything else (a later
/// duplicate wins in Kubernetes; a `valueFrom` cannot be read here, so it does not count), and
/// `LEADER_ELECTION_LEASE_NAME` to nothing but `lease` (unset is upstream's default, which
/// `lease` is then).
fn own_election(app: &str, lease: &str) -> String {
    let enabled = cel_string("LEADER_ELECTION_ENABLED");
    let lease_var = cel_string("LEADER_ELECTION_LEASE_NAME");
    let lease = cel_string(lease);
    // Unset is upstream's default name: fine when that is the Lease, else it must be named.
    let named = if lease == cel_string(crate::inject::native_election::DEFAULT_NATIVE_LEASE) {
        String::new()
    } else {
        format!(" && c.env.exists(e, e.name == {lease_var} && has(e.value) && e.value == {lease})")
    };
    format!(
        "object.spec.template.spec.containers.exists(c, c.name == {app} && has(c.env) && \
         c.env.exists(e, e.name == {enabled} && has(e.value) && e.value == 'true') && \
         !c.env.exists(e, e.name == {enabled} && (!has(e.value) || e.value != 'true')) && \
         !c.env.exists(e, e.name == {lease_var} && (!has(e.value) || e.value != {lease})){named})",
        app = cel_string(app),
    )
}

/// Name of the policy (and binding) that guards workload `name` of `namespace`: named by what
/// it protects, so `inject` and the chart name one object for one workload.
pub fn guard_policy_name(namespace: &str, name: &str) -> String {
    subdomain_name(&["passmower-elector-guard", namespace, name])
}

/// A CEL string literal of `s` (label keys and values, names: no quote or backslash in them,
/// but escaped anyway).
fn cel_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `true` when `map` (a CEL path to an optional string map) has `key` set to `value`.
fn has_entry(parent: &str, field: &str, key: &str, value: &str) -> String {
    format!(
        "has({parent}.{field}) && {key} in {parent}.{field} && {parent}.{field}[{key}] == {value}",
        key = cel_string(key),
        value = cel_string(value),
    )
}

fn resource(kind: WorkloadKind) -> &'static str {
    match kind {
        WorkloadKind::Deployment => "deployments",
        WorkloadKind::StatefulSet => "statefulsets",
    }
}

/// The policy's spec for `target`.
pub fn guard_policy_spec(target: &GuardTarget) -> ValidatingAdmissionPolicySpec {
    let elector = cel_string(ELECTOR_CONTAINER);
    let mut variables = vec![
        Variable {
            name: "replicas".into(),
            // The apiserver defaults replicas to 1 before admission; an absent field is 1.
            expression: "has(object.spec.replicas) ? object.spec.replicas : 1".into(),
        },
        Variable {
            name: "elector".into(),
            expression: format!(
                "object.spec.template.spec.containers.exists(c, c.name == {elector}) || \
                 (has(object.spec.template.spec.initContainers) && \
                 object.spec.template.spec.initContainers.exists(c, c.name == {elector}))"
            ),
        },
    ];
    let mut admits = "variables.replicas <= 1 || variables.elector".to_owned();
    if let Some(lease) = target.native_lease {
        // The container the webhook wraps, where it injects the pods (the chart's
        // webhookOptIn.container either way).
        let app = target.webhook.map_or(target.app_container, |w| w.container);
        variables.push(Variable {
            name: "ownElection".into(),
            expression: own_election(app, lease),
        });
        admits.push_str(" || variables.ownElection");
    }
    let mut fix = "run it with the passmower-elector post-renderer (helm upgrade ... \
                   --post-renderer passmower-elector ...)"
        .to_owned();
    if let Some(opt_in) = target.webhook {
        let (injects, webhook_fix) = webhook_injects(target.namespace, &opt_in);
        variables.push(Variable {
            name: "webhookInjects".into(),
            expression: injects,
        });
        admits.push_str(" || variables.webhookInjects");
        fix = webhook_fix;
    }
    variables.push(Variable {
        name: "fix".into(),
        expression: cel_string(&capitalize(&fix)),
    });
    let kind = target.kind.as_str();
    ValidatingAdmissionPolicySpec {
        // The policy reads only the request: nothing to fail but its own expressions, which
        // guard every optional field. A guard that cannot decide refuses.
        failure_policy: Some("Fail".into()),
        match_constraints: Some(MatchResources {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_owned(),
                    target.namespace.to_owned(),
                )])),
                ..Default::default()
            }),
            resource_rules: Some(vec![NamedRuleWithOperations {
                api_groups: Some(vec!["apps".into()]),
                api_versions: Some(vec!["v1".into()]),
                operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                resources: Some(vec![resource(target.kind).into()]),
                resource_names: Some(vec![target.name.to_owned()]),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        variables: Some(variables),
        validations: Some(vec![Validation {
            expression: admits,
            message: Some(format!(
                "{GUARD_DENIAL_PREFIX}: {kind} {ns}/{name} may run more than one replica only \
                 with the passmower-elector sidecar in its pods",
                ns = target.namespace,
                name = target.name
            )),
            // One literal for every guard (the names come from the request, the fix from a
            // variable), so the troubleshooting guide can quote it whole.
            message_expression: Some(
                "\"passmower-elector replica guard: \" + request.kind.kind + \" \" + \
                 request.namespace + \"/\" + request.name + \" asks for \" + \
                 string(variables.replicas) + \" replicas and its pods would run without the \
                 passmower-elector sidecar, so every replica would run the Passmower operators. \
                 \" + variables.fix + \", or set its replicas to 1; to remove passmower-elector, \
                 scale to 1 first (docs/operations/uninstall.md)\""
                    .to_owned(),
            ),
            reason: Some("Forbidden".into()),
        }]),
        ..Default::default()
    }
}

/// The webhook's decision for the pods of the template, in CEL, and what to do when it is no:
/// the template opts in (or its namespace does) and none of the webhook's reasons to skip a pod
/// holds. A namespace the webhook never injects is known when the guard is made.
fn webhook_injects(namespace: &str, opt_in: &WebhookOptIn) -> (String, String) {
    webhook_injects_at(
        namespace,
        opt_in,
        "object.spec.template.metadata",
        "object.spec.template.spec",
    )
}

/// Whether the webhook never injects `namespace`.
fn never_injected(namespace: &str, opt_in: &WebhookOptIn) -> bool {
    NEVER_NAMESPACES.contains(&namespace) || opt_in.excluded_namespaces.contains(&namespace)
}

/// [`webhook_injects`] for the pod whose metadata and spec are at the CEL paths `meta` and
/// `spec` (a workload's template, or a Pod itself).
fn webhook_injects_at(
    namespace: &str,
    opt_in: &WebhookOptIn,
    meta: &str,
    spec: &str,
) -> (String, String) {
    if never_injected(namespace, opt_in) {
        return (
            "false".into(),
            format!(
                "the admission webhook never injects namespace {namespace} (kube-system, \
                 kube-public, kube-node-lease and the excludeNamespaces of its chart): run Passmower \
                 in another namespace, or with the passmower-elector post-renderer"
            ),
        );
    }
    let opted_out = format!(
        "has({meta}) && (({}) || ({}))",
        has_entry(meta, "labels", opt_in.label, OPT_OUT_VALUE),
        has_entry(meta, "annotations", OPT_OUT_ANNOTATION, OPT_OUT_VALUE),
    );
    let pod_opts_in = format!(
        "has({meta}) && {}",
        has_entry(meta, "labels", opt_in.label, opt_in.value)
    );
    let namespace_opts_in = format!(
        "namespaceObject != null && {}",
        has_entry(
            "namespaceObject.metadata",
            "labels",
            opt_in.label,
            opt_in.value
        )
    );
    // The container the webhook wraps: the template's annotation (an empty one names none),
    // else the webhook's default.
    let annotation = cel_string(CONTAINER_ANNOTATION);
    let has_container = format!(
        "has({meta}) && has({meta}.annotations) && {annotation} in {meta}.annotations ? \
         {spec}.containers.exists(c, c.name == {meta}.annotations[{annotation}]) : \
         {spec}.containers.exists(c, c.name == {})",
        cel_string(opt_in.container)
    );
    // What the webhook takes for an earlier injection, and so leaves alone.
    let ours = format!(
        "[{}, {}]",
        cel_string(ELECTOR_CONTAINER),
        cel_string(INSTALL_CONTAINER)
    );
    let volumes = format!("[{}, {}]", cel_string(FLAG_VOLUME), cel_string(BIN_VOLUME));
    let injected = cel_string(INJECTED_ANNOTATION);
    let not_injected_yet = format!(
        "!(has({meta}) && has({meta}.annotations) && {injected} in {meta}.annotations) && \
         !{spec}.containers.exists(c, c.name in {ours}) && \
         !(has({spec}.initContainers) && {spec}.initContainers.exists(c, c.name in {ours})) && \
         !(has({spec}.volumes) && {spec}.volumes.exists(v, v.name in {volumes}))"
    );
    (
        format!(
            "!({opted_out}) && (({pod_opts_in}) || ({namespace_opts_in})) && ({has_container}) \
             && ({not_injected_yet})"
        ),
        format!(
            "label its namespace {label}={value} and leave its pods to the admission webhook \
             (run the webhook first): the container named by the {CONTAINER_ANNOTATION} \
             annotation, else {container}, and no {OPT_OUT_ANNOTATION}={OPT_OUT_VALUE}, no \
             {INJECTED_ANNOTATION} annotation and no passmower-elector container or volume of \
             their own",
            label = opt_in.label,
            value = opt_in.value,
            container = opt_in.container,
        ),
    )
}

/// Name of the pod guard of workload `name` of `namespace` (see [`pod_guard_policy_spec`]).
pub fn pod_guard_policy_name(namespace: &str, name: &str) -> String {
    subdomain_name(&["passmower-elector-pod-guard", namespace, name])
}

/// What every refusal of the pod guard starts with.
pub const POD_GUARD_DENIAL_PREFIX: &str = "passmower-elector pod guard";

/// The pod guard, on the webhook path only: refuses a pod of the protected workload that the
/// webhook would inject but that arrives without the elector. That is a pod the webhook never
/// saw: it did not answer and its `failurePolicy` is `Ignore`, or its configuration was
/// removed. The replica guard cannot see that (it admitted the workload because the webhook
/// would inject its pods), and such a pod would run Passmower's operators beside the elected
/// one. So the workload's pods wait for the webhook, as under `failurePolicy: Fail`, while
/// other pods of the namespace keep `Ignore`'s behaviour. `None` where the webhook never
/// injects the namespace (the replica guard then refuses more than one replica) or for a
/// workload with an elector of its own.
pub fn pod_guard_policy_spec(target: &GuardTarget) -> Option<ValidatingAdmissionPolicySpec> {
    let opt_in = target.webhook?;
    if never_injected(target.namespace, &opt_in) {
        return None;
    }
    let (injects, _) =
        webhook_injects_at(target.namespace, &opt_in, "object.metadata", "object.spec");
    let name = cel_string(target.name);
    // The pod's controller: a Deployment's ReplicaSet is named `<deployment>-<pod-template-hash>`
    // and labels its pods with that hash; a StatefulSet owns its pods itself.
    let owned = match target.kind {
        WorkloadKind::Deployment => format!(
            "has(object.metadata.ownerReferences) && has(object.metadata.labels) && \
             'pod-template-hash' in object.metadata.labels && \
             object.metadata.ownerReferences.exists(o, o.kind == 'ReplicaSet' && \
             o.name == {name} + '-' + object.metadata.labels['pod-template-hash'])"
        ),
        WorkloadKind::StatefulSet => format!(
            "has(object.metadata.ownerReferences) && \
             object.metadata.ownerReferences.exists(o, o.kind == 'StatefulSet' && o.name == {name})"
        ),
    };
    let kind = target.kind.as_str();
    let ns = target.namespace;
    let workload = target.name;
    Some(ValidatingAdmissionPolicySpec {
        // It reads only the request; a guard that cannot decide refuses (and only the
        // workload's pods reach it: the owner is a match condition).
        failure_policy: Some("Fail".into()),
        match_constraints: Some(MatchResources {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_owned(),
                    ns.to_owned(),
                )])),
                ..Default::default()
            }),
            resource_rules: Some(vec![NamedRuleWithOperations {
                api_groups: Some(vec![String::new()]),
                api_versions: Some(vec!["v1".into()]),
                operations: Some(vec!["CREATE".into()]),
                resources: Some(vec!["pods".into()]),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        match_conditions: Some(vec![MatchCondition {
            name: "pod-of-the-workload".into(),
            expression: owned,
        }]),
        validations: Some(vec![Validation {
            expression: format!("!({injects})"),
            message: Some(format!(
                "{POD_GUARD_DENIAL_PREFIX}: a pod of {kind} {ns}/{workload} arrived without the \
                 passmower-elector sidecar, which the admission webhook adds to it: the webhook \
                 did not answer (failurePolicy Ignore) or is not installed, and the pod would \
                 run the Passmower operators beside the elected pod; its controller retries \
                 until the webhook answers"
            )),
            reason: Some("Forbidden".into()),
            ..Default::default()
        }]),
        ..Default::default()
    })
}

/// The pod guard's ValidatingAdmissionPolicy and binding for `target`, none where
/// [`pod_guard_policy_spec`] is `None`.
pub fn pod_guard(target: &GuardTarget, generated_for: &str) -> Vec<Value> {
    let Some(spec) = pod_guard_policy_spec(target) else {
        return Vec::new();
    };
    let name = pod_guard_policy_name(target.namespace, target.name);
    let meta = || guard_meta(&name, generated_for);
    let policy = ValidatingAdmissionPolicy {
        metadata: meta(),
        spec: Some(spec),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: meta(),
        spec: Some(guard_binding_spec(&name)),
    };
    vec![to_value(&policy), to_value(&binding)]
}

/// The metadata of a guard's policy and binding.
fn guard_meta(name: &str, generated_for: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(BTreeMap::from([
            (
                "app.kubernetes.io/name".to_owned(),
                "passmower-elector".to_owned(),
            ),
            (
                "app.kubernetes.io/component".to_owned(),
                GUARD_COMPONENT.to_owned(),
            ),
        ])),
        annotations: Some(BTreeMap::from([(
            GENERATED_FOR_ANNOTATION.to_owned(),
            generated_for.to_owned(),
        )])),
        ..Default::default()
    }
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The binding's spec: the policy, denying.
pub fn guard_binding_spec(policy: &str) -> ValidatingAdmissionPolicyBindingSpec {
    ValidatingAdmissionPolicyBindingSpec {
        policy_name: Some(policy.to_owned()),
        validation_actions: Some(vec!["Deny".into()]),
        ..Default::default()
    }
}

/// The ValidatingAdmissionPolicy and its binding for `target`; `generated_for` (`Kind/name`)
/// goes into the annotation by which `inject` recognises them.
pub fn replica_guard(target: &GuardTarget, generated_for: &str) -> Vec<Value> {
    let name = guard_policy_name(target.namespace, target.name);
    let meta = || guard_meta(&name, generated_for);
    let policy = ValidatingAdmissionPolicy {
        metadata: meta(),
        spec: Some(guard_policy_spec(target)),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: meta(),
        spec: Some(guard_binding_spec(&name)),
    };
    vec![to_value(&policy), to_value(&binding)]
}

/// Why `inject` adds no guard for a workload it rewrites with the elector, as a warning for the
/// manifest, or `None` when it adds one (or is told not to, or the guard is not its to add).
/// `workload` is `Kind/name`, which starts the warning as it starts the others.
pub fn left_out(opts: &InjectOptions, workload: &str, namespace: Option<&str>) -> Option<String> {
    if !opts.guard || opts.workload_only {
        return None;
    }
    let unguarded = "so a `helm upgrade` or `helm rollback` without the post-renderer would \
                     run every replica's operators unguarded";
    if !KubeVersion::SLEEP_ACTION_AND_POLICY.served_by(opts.kube_version) {
        let cluster = opts.kube_version.map(|v| v.to_string()).unwrap_or_default();
        return Some(format!(
            "{workload}: no replica guard: it is a ValidatingAdmissionPolicy, served from Kubernetes {}, \
             and this cluster is {cluster}, {unguarded}; upgrade with the post-renderer every \
             time",
            KubeVersion::SLEEP_ACTION_AND_POLICY
        ));
    }
    if namespace.is_none() {
        return Some(format!(
            "{workload}: no replica guard: it names no namespace and no --namespace was given, \
             and the guard (cluster-wide) must name it, {unguarded}; pass --namespace"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(webhook: Option<WebhookOptIn<'static>>) -> GuardTarget<'static> {
        GuardTarget {
            namespace: "auth",
            kind: WorkloadKind::Deployment,
            name: "passmower",
            webhook,
            app_container: "passmower",
            native_lease: Some("passmower-operators"),
        }
    }

    #[test]
    fn the_guard_matches_one_workload_by_kind_namespace_and_name() {
        let objects = replica_guard(&target(None), "Deployment/passmower");
        let (policy, binding) = (&objects[0], &objects[1]);
        assert_eq!(
            policy["metadata"]["name"].as_str(),
            Some("passmower-elector-guard.auth.passmower")
        );
        let constraints = &policy["spec"]["matchConstraints"];
        assert_eq!(
            constraints["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"].as_str(),
            Some("auth")
        );
        let rule = &constraints["resourceRules"][0];
        assert_eq!(rule["resources"][0].as_str(), Some("deployments"));
        assert_eq!(rule["resourceNames"][0].as_str(), Some("passmower"));
        assert_eq!(rule["operations"][1].as_str(), Some("UPDATE"));
        assert_eq!(policy["spec"]["failurePolicy"].as_str(), Some("Fail"));
        assert_eq!(
            binding["spec"]["policyName"].as_str(),
            policy["metadata"]["name"].as_str()
        );
        assert_eq!(
            binding["spec"]["validationActions"][0].as_str(),
            Some("Deny")
        );
        let expression = policy["spec"]["validations"][0]["expression"]
            .as_str()
            .unwrap();
        assert_eq!(
            expression,
            "variables.replicas <= 1 || variables.elector || variables.ownElection"
        );
        let own = policy["spec"]["variables"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"].as_str() == Some("ownElection"))
            .and_then(|v| v["expression"].as_str())
            .unwrap()
            .to_owned();
        for needle in [
            "c.name == 'passmower'",
            "e.name == 'LEADER_ELECTION_ENABLED' && has(e.value) && e.value == 'true'",
            "!c.env.exists(e, e.name == 'LEADER_ELECTION_ENABLED' && (!has(e.value) || e.value != 'true'))",
        ] {
            assert!(own.contains(needle), "{needle}: {own}");
        }
        let stateful = GuardTarget {
            kind: WorkloadKind::StatefulSet,
            ..target(None)
        };
        assert_eq!(
            guard_policy_spec(&stateful)
                .match_constraints
                .and_then(|m| m.resource_rules)
                .and_then(|r| r[0].resources.clone()),
            Some(vec!["statefulsets".to_owned()])
        );
    }

    /// Passmower's own election admits more replicas only where the electors hold its Lease
    /// (a Passmower not known to be older than 2.4), and only on that very Lease.
    #[test]
    fn own_election_admits_only_on_the_lease_the_electors_hold() {
        let spec = |native_lease| {
            guard_policy_spec(&GuardTarget {
                native_lease,
                ..target(None)
            })
        };
        let older = spec(None);
        assert_eq!(
            older.validations.as_ref().unwrap()[0].expression,
            "variables.replicas <= 1 || variables.elector"
        );
        assert!(!older
            .variables
            .unwrap()
            .iter()
            .any(|v| v.name == "ownElection"));
        let own = |native_lease| {
            spec(native_lease)
                .variables
                .unwrap()
                .into_iter()
                .find(|v| v.name == "ownElection")
                .unwrap()
                .expression
        };
        let default = own(Some("passmower-operators"));
        assert!(
            default.contains(
                "!c.env.exists(e, e.name == 'LEADER_ELECTION_LEASE_NAME' && (!has(e.value) || \
                 e.value != 'passmower-operators'))"
            ),
            "{default}"
        );
        assert!(!default.contains("has(e.value) && e.value == 'passmower-operators'"));
        // Another name must be set, or upstream's election would run on its default Lease.
        let renamed = own(Some("pm-operators"));
        assert!(
            renamed.contains(
                "c.env.exists(e, e.name == 'LEADER_ELECTION_LEASE_NAME' && has(e.value) && \
                 e.value == 'pm-operators')"
            ),
            "{renamed}"
        );
    }

    #[test]
    fn the_pod_guard_exists_only_where_the_webhook_injects() {
        assert!(pod_guard_policy_spec(&target(None)).is_none());
        let excluded = WebhookOptIn {
            excluded_namespaces: &["auth"],
            ..WebhookOptIn::DEFAULT
        };
        assert!(pod_guard_policy_spec(&target(Some(excluded))).is_none());
        let spec = pod_guard_policy_spec(&target(Some(WebhookOptIn::DEFAULT))).unwrap();
        let owner = &spec.match_conditions.as_ref().unwrap()[0].expression;
        assert!(
            owner.contains("o.kind == 'ReplicaSet' && o.name == 'passmower' + '-'"),
            "{owner}"
        );
        let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
        assert_eq!(rules[0].resources, Some(vec!["pods".to_owned()]));
        assert_eq!(rules[0].operations, Some(vec!["CREATE".to_owned()]));
        let validation = &spec.validations.unwrap()[0];
        assert!(
            validation.expression.starts_with("!(")
                && validation
                    .expression
                    .contains("object.metadata.annotations"),
            "{}",
            validation.expression
        );
        let stateful = GuardTarget {
            kind: WorkloadKind::StatefulSet,
            ..target(Some(WebhookOptIn::DEFAULT))
        };
        let owner = pod_guard_policy_spec(&stateful)
            .unwrap()
            .match_conditions
            .unwrap()[0]
            .expression
            .clone();
        assert!(
            owner.contains("o.kind == 'StatefulSet' && o.name == 'passmower'"),
            "{owner}"
        );
    }

    #[test]
    fn on_the_webhook_path_an_opted_in_namespace_or_pod_admits() {
        let spec = guard_policy_spec(&target(Some(WebhookOptIn::DEFAULT)));
        let validation = &spec.validations.as_ref().unwrap()[0];
        assert!(validation
            .expression
            .ends_with("|| variables.webhookInjects"));
        let variables = spec.variables.clone().unwrap();
        let webhook = variables
            .iter()
            .find(|v| v.name == "webhookInjects")
            .unwrap();
        assert!(
            webhook.expression.contains(
                "namespaceObject.metadata.labels['passmower-elector.io/inject'] == 'enabled'"
            ),
            "{}",
            webhook.expression
        );
        assert!(
            webhook.expression.contains("== 'disabled'"),
            "{}",
            webhook.expression
        );
        let fix = &variables
            .iter()
            .find(|v| v.name == "fix")
            .unwrap()
            .expression;
        assert!(fix.starts_with("'Label its namespace"), "{fix}");
    }

    /// In a namespace the webhook never injects, its opt-in label admits nothing.
    #[test]
    fn on_the_webhook_path_a_namespace_the_webhook_skips_admits_nothing() {
        const EXCLUDED: &[&str] = &["auth"];
        for (namespace, opt_in) in [
            ("kube-system", WebhookOptIn::DEFAULT),
            (
                "auth",
                WebhookOptIn {
                    excluded_namespaces: EXCLUDED,
                    ..WebhookOptIn::DEFAULT
                },
            ),
        ] {
            let spec = guard_policy_spec(&GuardTarget {
                namespace,
                ..target(Some(opt_in))
            });
            let variables = spec.variables.unwrap();
            let injects = variables
                .iter()
                .find(|v| v.name == "webhookInjects")
                .unwrap();
            assert_eq!(injects.expression, "false", "{namespace}");
            let fix = &variables
                .iter()
                .find(|v| v.name == "fix")
                .unwrap()
                .expression;
            assert!(
                fix.contains(&format!("never injects namespace {namespace}")),
                "{fix}"
            );
        }
        let spec = guard_policy_spec(&target(Some(WebhookOptIn::DEFAULT)));
        let injects = spec.variables.unwrap();
        let injects = &injects
            .iter()
            .find(|v| v.name == "webhookInjects")
            .unwrap()
            .expression;
        assert!(injects.contains("c.name == 'passmower'"), "{injects}");
    }

    #[test]
    fn left_out_with_a_warning_before_1_30_or_without_a_namespace() {
        let opts = InjectOptions::new("registry.example.com/passmower-elector:0.1.0");
        assert_eq!(left_out(&opts, "Deployment/x", Some("auth")), None);
        let old = InjectOptions {
            kube_version: Some(KubeVersion::new(1, 29)),
            fence: false,
            ..opts.clone()
        };
        let warning = left_out(&old, "Deployment/x", Some("auth")).unwrap();
        assert!(
            warning.contains("1.30") && warning.contains("1.29"),
            "{warning}"
        );
        let warning = left_out(&opts, "Deployment/x", None).unwrap();
        assert!(warning.contains("--namespace"), "{warning}");
        let off = InjectOptions {
            guard: false,
            ..opts.clone()
        };
        assert_eq!(left_out(&off, "Deployment/x", None), None);
        let chart = InjectOptions {
            workload_only: true,
            ..opts
        };
        assert_eq!(left_out(&chart, "Deployment/x", None), None);
    }

    #[test]
    fn names_are_per_workload_and_within_the_limit() {
        assert_ne!(guard_policy_name("a", "x"), guard_policy_name("b", "x"));
        let long = "x".repeat(300);
        let name = guard_policy_name("auth", &long);
        assert_eq!(name.len(), 253);
    }
}
