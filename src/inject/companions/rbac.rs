//! The objects `inject` adds beside a workload: the Role and RoleBinding for its Lease, the
//! PodDisruptionBudget, and the optional admission policy that keeps the idle namespace away.

use std::fmt;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_norway::{Mapping, Value};

use crate::inject::names::{subdomain_name, GENERATED_FOR_ANNOTATION, WARNINGS_ANNOTATION};
use crate::inject::target::Target;
use crate::inject::value::to_value;

/// An object `inject` adds, with what the operator should know about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    pub value: Value,
    pub notes: Vec<String>,
}

/// Identifies an object in a stream: kind, namespace (as written) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    pub fn of(value: &Value) -> Option<ObjectKey> {
        Some(ObjectKey {
            kind: value.get("kind")?.as_str()?.to_owned(),
            namespace: value
                .get("metadata")
                .and_then(|m| m.get("namespace"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            name: value.get("metadata")?.get("name")?.as_str()?.to_owned(),
        })
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Whether `inject` generated this object (it carries our annotation).
pub fn is_generated(value: &Value) -> bool {
    value
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(GENERATED_FOR_ANNOTATION))
        .is_some()
}

/// The namespace and selector of a PodDisruptionBudget document.
pub fn pdb_selector(value: &Value) -> Option<(Option<String>, Value)> {
    if value.get("kind")?.as_str()? != "PodDisruptionBudget" {
        return None;
    }
    let namespace = value
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    Some((namespace, value.get("spec")?.get("selector")?.clone()))
}

fn metadata(info: &Target, name: String) -> ObjectMeta {
    let mut labels = std::collections::BTreeMap::from([
        (
            "app.kubernetes.io/name".to_owned(),
            "passmower-elector".to_owned(),
        ),
        (
            "app.kubernetes.io/component".to_owned(),
            "leader-election".to_owned(),
        ),
        ("app.kubernetes.io/part-of".to_owned(), info.name.clone()),
    ]);
    // Keep the release's instance label so `kubectl get -l` finds these with the rest of it.
    if let Some(instance) = info
        .labels
        .get("app.kubernetes.io/instance")
        .and_then(Value::as_str)
    {
        labels.insert("app.kubernetes.io/instance".into(), instance.into());
    }
    ObjectMeta {
        name: Some(name),
        namespace: info.namespace.clone(),
        labels: Some(labels),
        annotations: Some(
            [(
                GENERATED_FOR_ANNOTATION.to_owned(),
                format!("{}/{}", info.kind.as_str(), info.name),
            )]
            .into(),
        ),
        ..Default::default()
    }
}

fn strings(items: &[&str]) -> Option<Vec<String>> {
    Some(items.iter().map(|s| s.to_string()).collect())
}

/// Exactly what an elector needs on its Lease `lease_name`, and the one statement of it: the
/// Role `inject` generates, the chart's `templates/role.yaml` (a test compares the rendered
/// chart with this) and every integration test use these rules.
/// - `get`/`watch`/`update` on its own Lease only (`resourceNames`). A `watch` restricted by
///   name is only allowed with `fieldSelector=metadata.name=<lease>`, which RBAC authorizes per
///   name; the elector watches that way. No `list` and no `patch`: the elector never sends
///   either (every write is an update conditional on `resourceVersion`).
/// - `create` on Leases without a name restriction: a create request carries no name in its
///   URL, so RBAC cannot restrict it by `resourceNames` (such a rule would never match).
/// - `create` on Events, in both the core and the `events.k8s.io` group, for the
///   "became leader" / "stopped leading" Events.
///
/// - `get` and `watch` on pods: each elector reads and watches its own Pod
///   (`fieldSelector=metadata.name=$POD_NAME`) and does not take the Lease once the Pod is
///   terminating. A pod's name is not known in advance, so this cannot be limited by
///   `resourceNames`; no `list`. Without it the elector contends as if its pod stayed.
///
/// There is deliberately no `delete`: a release is an update (holder "").
pub fn elector_lease_rules(lease_name: &str) -> Vec<PolicyRule> {
    vec![
        PolicyRule {
            api_groups: strings(&["coordination.k8s.io"]),
            resources: strings(&["leases"]),
            resource_names: Some(vec![lease_name.to_owned()]),
            // The elector reads with get and follows with a watch by field selector (authorized
            // per name) and writes with update; it never lists or patches.
            verbs: vec!["get", "watch", "update"]
                .into_iter()
                .map(String::from)
                .collect(),
            ..Default::default()
        },
        PolicyRule {
            api_groups: strings(&["coordination.k8s.io"]),
            resources: strings(&["leases"]),
            verbs: vec!["create".into()],
            ..Default::default()
        },
        PolicyRule {
            api_groups: strings(&["", "events.k8s.io"]),
            resources: strings(&["events"]),
            verbs: vec!["create".into()],
            ..Default::default()
        },
        PolicyRule {
            api_groups: strings(&[""]),
            resources: strings(&["pods"]),
            verbs: vec!["get".into(), "watch".into()],
            ..Default::default()
        },
    ]
}

/// The elector's rules for its Lease `lease` and, when it holds Passmower's own Lease beside it
/// (`--native-lease`), get and update on that one too (its `create` is among the elector's).
pub fn elector_rules(lease: &str, native_lease: Option<&str>) -> Vec<PolicyRule> {
    let mut rules = elector_lease_rules(lease);
    if let Some(native) = native_lease {
        rules.extend(
            native_lease_rules(native)
                .into_iter()
                .filter(|r| r.resource_names.is_some()),
        );
    }
    rules
}

/// What Passmower's own election (2.4.0 and later) needs on its Lease `lease_name`, as
/// upstream's 2.4 chart grants it (`get`, `create`, `update` on Leases), narrowed by name where
/// RBAC can: it reads with get and renews, takes over and releases with update (a PUT); a
/// create carries no name RBAC could match.
pub fn native_lease_rules(lease_name: &str) -> Vec<PolicyRule> {
    vec![
        PolicyRule {
            api_groups: strings(&["coordination.k8s.io"]),
            resources: strings(&["leases"]),
            resource_names: Some(vec![lease_name.to_owned()]),
            verbs: vec!["get".into(), "update".into()],
            ..Default::default()
        },
        PolicyRule {
            api_groups: strings(&["coordination.k8s.io"]),
            resources: strings(&["leases"]),
            verbs: vec!["create".into()],
            ..Default::default()
        },
    ]
}

/// The Role and RoleBinding of `--passmower-election=fence-only`: Passmower's own election on
/// `info.lease`. Added whatever the stream grants already (RBAC only adds up): without them its
/// election meets a 403 and runs the operators in every pod.
pub fn native_lease_companions(info: &Target) -> Vec<Generated> {
    let role_name = format!("{}-leader-election", info.name);
    let role = Role {
        metadata: metadata(info, role_name.clone()),
        rules: Some(native_lease_rules(&info.lease)),
    };
    let binding = RoleBinding {
        metadata: metadata(info, role_name.clone()),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: role_name,
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: info.service_account.clone(),
            namespace: info.namespace.clone(),
            ..Default::default()
        }]),
    };
    [to_value(&role), to_value(&binding)]
        .into_iter()
        .map(|value| Generated {
            value,
            notes: Vec::new(),
        })
        .collect()
}

/// Whether a label selector (`matchLabels`, `matchExpressions`) selects a pod with `labels`.
/// An empty selector selects every pod, as a policy/v1 PodDisruptionBudget's does. An operator
/// the apiserver would not have accepted counts as selecting: a budget too many is the failure
/// this guards against.
pub fn selects(selector: &Value, labels: &Mapping) -> bool {
    let label = |key: &str| labels.get(key).and_then(Value::as_str);
    let match_labels = selector
        .get("matchLabels")
        .and_then(Value::as_mapping)
        .into_iter()
        .flatten()
        .all(|(k, v)| k.as_str().is_some_and(|k| label(k) == v.as_str()));
    let match_expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_sequence)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let value = label(key);
            match e.get("operator").and_then(Value::as_str) {
                Some("In") => value.is_some_and(|v| values.contains(&v)),
                Some("NotIn") => !value.is_some_and(|v| values.contains(&v)),
                Some("Exists") => value.is_some(),
                Some("DoesNotExist") => value.is_none(),
                _ => true,
            }
        });
    match_labels && match_expressions
}

/// The Role, RoleBinding and (when `with_pdb`) PodDisruptionBudget for one workload.
pub fn companions(info: &Target, with_pdb: bool) -> Vec<Generated> {
    let role_name = format!("{}-elector", info.name);
    let role = Role {
        metadata: metadata(info, role_name.clone()),
        rules: Some(elector_rules(&info.lease, info.native_lease.as_deref())),
    };
    let binding = RoleBinding {
        metadata: metadata(info, role_name.clone()),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: role_name,
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: info.service_account.clone(),
            // Without a namespace the subject is the binding's own namespace, which is what a
            // namespace-less `helm template` stream needs.
            namespace: info.namespace.clone(),
            ..Default::default()
        }]),
    };
    let plain = |value| Generated {
        value,
        notes: Vec::new(),
    };
    let mut out = vec![plain(to_value(&role)), plain(to_value(&binding))];
    if with_pdb {
        out.push(pdb(info));
    }
    out
}

/// The budget: at most one of the workload's pods evicted at a time. It never blocks a drain
/// (a `minAvailable: 1` budget over one replica does, forever), and with two or more replicas
/// it keeps one serving and able to take over the Lease while another moves.
fn pdb(info: &Target) -> Generated {
    let mut notes = Vec::new();
    match info.replicas {
        Some(n) if n >= 2 => {}
        // Unset: Kubernetes runs one, unless an autoscaler owns the count.
        replicas => notes.push(format!(
            "{}/{} {}: a node drain evicts its only pod and Passmower serves nothing until it \
             is rescheduled (this budget allows one eviction so drains never block); set \
             replicas to 2 or more to keep one serving",
            info.kind.as_str(),
            info.name,
            match replicas {
                Some(n) => format!("runs {n} replica"),
                None => "sets no replicas (Kubernetes runs 1)".to_owned(),
            }
        )),
    }
    let mut meta = metadata(info, info.name.clone());
    if !notes.is_empty() {
        if let Some(annotations) = meta.annotations.as_mut() {
            annotations.insert(WARNINGS_ANNOTATION.to_owned(), notes.join("\n"));
        }
    }
    let pdb = PodDisruptionBudget {
        metadata: meta,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            // A pod that is not Ready serves nobody; evicting it must not wait on the budget.
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..Default::default()
        }),
        status: None,
    };
    let mut value = to_value(&pdb);
    if let Some(spec) = value.get_mut("spec").and_then(Value::as_mapping_mut) {
        spec.insert("selector".into(), info.selector.clone());
    }
    Generated { value, notes }
}

/// Name of the admission policy (and binding) that `inject` adds for `workload`: cluster-wide
/// objects, so named per install (`passmower-elector-inject.NAMESPACE.WORKLOAD`) that two
/// installs, or this and the chart's (`passmower-elector-chart.…`), never claim one name.
pub fn deny_policy_name(namespace: Option<&str>, workload: &str) -> String {
    match namespace {
        Some(ns) => subdomain_name(&["passmower-elector-inject", ns, workload]),
        None => subdomain_name(&["passmower-elector-inject", workload]),
    }
}

/// A ValidatingAdmissionPolicy and its binding that refuse to create (or adopt by update)
/// the idle namespace, so nothing can ever be put where followers would reconcile it.
pub fn deny_idle_namespace(idle: &str, namespace: Option<&str>, workload: &str) -> Vec<Value> {
    let name = deny_policy_name(namespace, workload);
    let meta = || ObjectMeta {
        name: Some(name.clone()),
        labels: Some(
            [
                (
                    "app.kubernetes.io/name".to_owned(),
                    "passmower-elector".to_owned(),
                ),
                (
                    "app.kubernetes.io/component".to_owned(),
                    "idle-namespace-guard".to_owned(),
                ),
            ]
            .into(),
        ),
        annotations: Some(
            [(
                GENERATED_FOR_ANNOTATION.to_owned(),
                format!("Namespace/{idle}"),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let policy = ValidatingAdmissionPolicy {
        metadata: meta(),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".into()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![NamedRuleWithOperations {
                    api_groups: strings(&[""]),
                    api_versions: strings(&["v1"]),
                    operations: strings(&["CREATE", "UPDATE"]),
                    resources: strings(&["namespaces"]),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            validations: Some(vec![Validation {
                expression: format!("object.metadata.name != '{idle}'"),
                message: Some(format!(
                    "namespace {idle} is reserved by passmower-elector: Passmower followers use \
                     it as their idle NAMESPACE_SELECTOR and would reconcile anything in it"
                )),
                reason: Some("Forbidden".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: meta(),
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(name.clone()),
            validation_actions: strings(&["Deny"]),
            ..Default::default()
        }),
    };
    vec![to_value(&policy), to_value(&binding)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::names::WorkloadKind;

    fn info(replicas: Option<u64>) -> Target {
        Target {
            document: 1,
            injected_by: None,
            election_annotation: None,
            pod_labels: Mapping::new(),
            kind: WorkloadKind::Deployment,
            name: "passmower".into(),
            namespace: Some("auth".into()),
            service_account: "passmower".into(),
            selector: serde_norway::from_str("matchLabels: {app: passmower}").unwrap(),
            replicas,
            labels: Mapping::new(),
            lease: "passmower".into(),
            native_lease: None,
        }
    }

    #[test]
    fn the_role_of_an_elector_holding_passmowers_own_lease_gets_and_updates_it_by_name() {
        let mut target = info(Some(3));
        target.native_lease = Some("passmower-operators".into());
        let role = &companions(&target, true)[0].value;
        let rules = role["rules"].as_sequence().unwrap();
        let named: Vec<(&str, Vec<&str>)> = rules
            .iter()
            .filter_map(|r| {
                let name = r["resourceNames"].as_sequence()?.first()?.as_str()?;
                let verbs = r["verbs"]
                    .as_sequence()?
                    .iter()
                    .filter_map(Value::as_str)
                    .collect();
                Some((name, verbs))
            })
            .collect();
        assert_eq!(
            named,
            [
                ("passmower", vec!["get", "watch", "update"]),
                ("passmower-operators", vec!["get", "update"]),
            ],
            "{rules:?}"
        );
        let plain = &companions(&info(Some(3)), true)[0].value;
        assert_eq!(plain["rules"].as_sequence().unwrap().len() + 1, rules.len());
    }

    #[test]
    fn role_limits_lease_access_to_its_name() {
        let objects: Vec<Value> = companions(&info(Some(3)), true)
            .into_iter()
            .map(|g| g.value)
            .collect();
        let rules = objects[0]["rules"].as_sequence().unwrap();
        assert_eq!(rules[0]["resourceNames"][0].as_str(), Some("passmower"));
        let verbs: Vec<_> = rules[0]["verbs"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(verbs, ["get", "watch", "update"]);
        assert!(rules[1].get("resourceNames").is_none());
        assert_eq!(
            objects[1]["subjects"][0]["name"].as_str(),
            Some("passmower")
        );
        assert_eq!(
            objects[1]["subjects"][0]["namespace"].as_str(),
            Some("auth")
        );
    }

    #[test]
    fn the_budget_never_blocks_a_drain_and_warns_about_one_replica() {
        for replicas in [None, Some(1), Some(2), Some(3)] {
            let objects = companions(&info(replicas), true);
            let pdb = &objects[2];
            assert_eq!(pdb.value["spec"]["maxUnavailable"].as_u64(), Some(1));
            assert!(pdb.value["spec"].get("minAvailable").is_none());
            assert_eq!(
                pdb.value["spec"]["selector"]["matchLabels"]["app"].as_str(),
                Some("passmower")
            );
            let warned = pdb.value["metadata"]["annotations"]
                .get(WARNINGS_ANNOTATION)
                .and_then(Value::as_str);
            if replicas.unwrap_or(1) < 2 {
                assert_eq!(pdb.notes.len(), 1, "{replicas:?}");
                assert_eq!(warned, Some(pdb.notes[0].as_str()));
                assert!(pdb.notes[0].contains("2 or more"), "{}", pdb.notes[0]);
            } else {
                assert!(pdb.notes.is_empty() && warned.is_none(), "{replicas:?}");
            }
        }
        assert_eq!(companions(&info(Some(3)), false).len(), 2);
    }

    #[test]
    fn deny_policy_names_the_idle_namespace() {
        let objects = deny_idle_namespace("idle-x", Some("auth"), "passmower");
        let expression = objects[0]["spec"]["validations"][0]["expression"].as_str();
        assert_eq!(expression, Some("object.metadata.name != 'idle-x'"));
        assert_eq!(
            objects[1]["spec"]["policyName"].as_str(),
            Some("passmower-elector-inject.auth.passmower")
        );
        assert_eq!(
            deny_policy_name(None, "passmower"),
            "passmower-elector-inject.passmower"
        );
        assert_ne!(
            deny_policy_name(Some("a"), "passmower"),
            deny_policy_name(Some("b"), "passmower")
        );
    }
    #[test]
    fn a_selector_selects_pods_by_labels_and_expressions() {
        let labels: Mapping =
            serde_norway::from_str("{app: passmower, tier: auth, release: a}").unwrap();
        let sel = |yaml: &str| -> Value { serde_norway::from_str(yaml).unwrap() };
        for yes in [
            "{}",
            "matchLabels: {app: passmower}",
            "matchLabels: {app: passmower, tier: auth}",
            "matchExpressions: [{key: app, operator: In, values: [passmower, x]}]",
            "matchExpressions: [{key: tier, operator: NotIn, values: [web]}]",
            "matchExpressions: [{key: release, operator: Exists}]",
            "matchExpressions: [{key: canary, operator: DoesNotExist}]",
            "{matchLabels: {app: passmower}, matchExpressions: [{key: tier, operator: Exists}]}",
        ] {
            assert!(selects(&sel(yes), &labels), "{yes}");
        }
        for no in [
            "matchLabels: {app: other}",
            "matchLabels: {app: passmower, component: server}",
            "matchExpressions: [{key: app, operator: In, values: [x]}]",
            "matchExpressions: [{key: tier, operator: NotIn, values: [auth]}]",
            "matchExpressions: [{key: canary, operator: Exists}]",
            "matchExpressions: [{key: app, operator: DoesNotExist}]",
        ] {
            assert!(!selects(&sel(no), &labels), "{no}");
        }
    }
}
