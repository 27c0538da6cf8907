//! The write fence: a ValidatingAdmissionPolicy that lets the kube-apiserver admit Passmower's
//! operator writes only from the pod the Lease names, whatever a paused or stray process does.
//!
//! The elector's holder identity is `<pod-name>_<pod-uid>_<suffix>`; the ServiceAccount token a
//! pod's containers use is bound to that pod, and the apiserver puts the pod's name and UID into
//! the request's user info. The policy takes the Lease itself as its parameter and admits a
//! write by Passmower's ServiceAccount to the objects its operators write only when the Lease's
//! current holder starts with the requesting pod's `<name>_<uid>_`. With
//! `--passmower-election=fence-only` the Lease is Passmower's own (2.4.0 and later), whose
//! holder is the pod name (`POD_NAME`), and the policy admits when the holder equals the
//! requesting pod's name ([`Holder::PodName`]). This module is the one
//! statement of that policy: `inject` emits it, the chart's `templates/fence.yaml` must render
//! the same spec (a test compares them), and the fence tests install it.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ParamKind, ParamRef,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_norway::Value;

use crate::inject::names::GENERATED_FOR_ANNOTATION;
use crate::inject::value::to_value;

/// The user-info key under which the apiserver gives the name of the pod a ServiceAccount token
/// is bound to (kubelet-mounted tokens are; Kubernetes ≥ 1.11 for TokenRequest tokens).
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// The same for the pod's UID.
pub const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";
pub use crate::wire::{fence_policy_name, DENIAL_PREFIX};

/// How the Lease's holder names the pod that may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Holder {
    /// The elector's identity, `<pod-name>_<pod-uid>_<suffix>`: one pod incarnation.
    #[default]
    ElectorIdentity,
    /// The pod's name, as Passmower's own election (2.4.0 and later, `POD_NAME`) writes it:
    /// the fence of `--passmower-election=fence-only`. A name says less than a name and UID: a
    /// pod recreated under the same name (a StatefulSet's) is the same holder.
    PodName,
}

/// What one fence protects: whose writes, and which Lease names the writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceTarget<'a> {
    /// Namespace of the ServiceAccount and of the Lease.
    pub namespace: &'a str,
    /// Passmower's ServiceAccount: only its writes are matched.
    pub service_account: &'a str,
    /// The Lease whose holder may write.
    pub lease: &'a str,
}

/// The writes Passmower's operators make, and nothing its HTTP side makes, in every generation
/// (`src/operators` of 1.3.0, the 2.2 era and 2.4; `tests/scenarios/fence_coverage.rs` reads
/// each tree's operators and fails on an operator write no rule matches):
/// - claiming OIDCClients and OIDCMiddlewareClients (status updates);
/// - the client Secrets (create, JSON patch, delete before a re-create);
/// - the secret refresh: a Pod (1.3) or a `batch/v1` Job (2.x), and the user-event-hook Jobs
///   that run user-supplied provisioning (2.x);
/// - the Traefik Middlewares of OIDCMiddlewareClients;
/// - ingress discovery's OIDCClients (2.x: create, patch, and delete, which garbage-collects
///   the client's Secret);
/// - the status of OIDCUserEventHooks and SCIMConnections (2.x).
///
/// Left out, because every replica's HTTP side makes them: OIDCUsers and their status (logins),
/// SCIMSubjects and SCIMGroups (the SCIM endpoint). Events are left out too: they change
/// nothing an operator reads, and the elector writes its own under the same ServiceAccount.
/// A rule for a resource a generation does not have (no Jobs in 1.3, no SCIMConnection CRD)
/// matches nothing there.
fn fenced_rules() -> Vec<NamedRuleWithOperations> {
    let rule = |group: &str, version: &str, operations: &[&str], resources: &[&str]| {
        NamedRuleWithOperations {
            api_groups: Some(vec![group.to_owned()]),
            api_versions: Some(vec![version.to_owned()]),
            operations: Some(operations.iter().map(|s| s.to_string()).collect()),
            resources: Some(resources.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    };
    vec![
        // A PUT or PATCH of a status subresource is an UPDATE to admission.
        rule(
            "codemowers.cloud",
            "*",
            &["UPDATE"],
            &[
                "oidcclients/status",
                "oidcmiddlewareclients/status",
                "oidcusereventhooks/status",
                "scimconnections/status",
            ],
        ),
        rule(
            "codemowers.cloud",
            "*",
            &["CREATE", "UPDATE", "DELETE"],
            &["oidcclients"],
        ),
        rule("", "v1", &["CREATE", "UPDATE", "DELETE"], &["secrets"]),
        rule("", "v1", &["CREATE"], &["pods"]),
        rule("batch", "v1", &["CREATE"], &["jobs"]),
        rule("traefik.io", "*", &["CREATE", "UPDATE"], &["middlewares"]),
    ]
}

/// `request.userInfo.extra[key][0]`, or `""` when the token carries no such entry (a legacy
/// Secret-based token, a static token, a token bound to no pod).
fn extra_expression(key: &str) -> String {
    let value = format!("request.userInfo.extra[\"{key}\"]");
    format!(
        "has(request.userInfo.extra) && \"{key}\" in request.userInfo.extra && size({value}) == 1 \
         ? {value}[0] : \"\""
    )
}

/// The policy's spec for `target`'s ServiceAccount (the Lease comes from the binding), for
/// the elector's holder identity.
pub fn fence_policy_spec(namespace: &str, service_account: &str) -> ValidatingAdmissionPolicySpec {
    fence_policy_spec_for(namespace, service_account, Holder::ElectorIdentity)
}

/// The policy's spec for `target`'s ServiceAccount and a Lease whose holder is written as
/// `holder` says.
pub fn fence_policy_spec_for(
    namespace: &str,
    service_account: &str,
    holder: Holder,
) -> ValidatingAdmissionPolicySpec {
    // Pod names are DNS subdomains and never contain '_', so the elector's prefix names exactly
    // one pod incarnation; upstream's holder is the pod name itself. An empty holder
    // (released) admits nobody.
    let admits = match holder {
        Holder::ElectorIdentity => {
            "variables.podName != \"\" && variables.podUID != \"\" && \
             variables.holder.startsWith(variables.podName + \"_\" + variables.podUID + \"_\")"
        }
        Holder::PodName => "variables.podName != \"\" && variables.holder == variables.podName",
    };
    let user = format!("system:serviceaccount:{namespace}:{service_account}");
    ValidatingAdmissionPolicySpec {
        // A policy the apiserver cannot evaluate admits. The fence is a second line behind the
        // election, and its failures are the apiserver's own (its Lease informer not synced,
        // stopped or broken; its expressions guard every optional field), which happen while
        // the Lease parameter is looked up: before the matchConditions, so for every write the
        // binding matches, by anyone. With Fail such a failure refuses every Secret and Pod
        // write in the cluster, for as long as it lasts; with Ignore it opens the fence for
        // that time, and the election still holds.
        failure_policy: Some("Ignore".into()),
        param_kind: Some(ParamKind {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
        }),
        match_constraints: Some(MatchResources {
            resource_rules: Some(fenced_rules()),
            ..Default::default()
        }),
        // Only Passmower's own ServiceAccount: people, controllers and other apps are never
        // affected, and the cheap string compare runs before any parameter is looked up.
        match_conditions: Some(vec![MatchCondition {
            name: "passmower-service-account".into(),
            expression: format!("request.userInfo.username == \"{user}\""),
        }]),
        variables: Some(vec![
            Variable {
                name: "podName".into(),
                expression: extra_expression(POD_NAME_EXTRA),
            },
            Variable {
                name: "podUID".into(),
                expression: extra_expression(POD_UID_EXTRA),
            },
            Variable {
                name: "holder".into(),
                expression: "has(params.spec) && has(params.spec.holderIdentity) \
                             ? params.spec.holderIdentity : \"\""
                    .into(),
            },
        ]),
        validations: Some(vec![Validation {
            expression: admits.into(),
            message: Some(format!(
                "{DENIAL_PREFIX}: only the pod that holds the Lease may write Passmower's \
                 operator objects"
            )),
            message_expression: Some(format!(
                "variables.podName == \"\" \
                 ? \"{DENIAL_PREFIX}: the request carries no pod-bound ServiceAccount token, so it \
                 cannot be tied to the holder of Lease \" + params.metadata.namespace + \"/\" + \
                 params.metadata.name \
                 : \"{DENIAL_PREFIX}: pod \" + variables.podName + \" does not hold Lease \" + \
                 params.metadata.namespace + \"/\" + params.metadata.name + \
                 (variables.holder == \"\" ? \" (released)\" : \" (holder \" + variables.holder + \")\") + \
                 \"; only the leader writes operator objects\""
            )),
            reason: Some("Forbidden".into()),
        }]),
        ..Default::default()
    }
}

/// The binding's spec: the policy with `target`'s Lease as its parameter.
pub fn fence_binding_spec(
    policy: &str,
    target: &FenceTarget,
) -> ValidatingAdmissionPolicyBindingSpec {
    ValidatingAdmissionPolicyBindingSpec {
        policy_name: Some(policy.to_owned()),
        param_ref: Some(ParamRef {
            name: Some(target.lease.to_owned()),
            namespace: Some(target.namespace.to_owned()),
            // Allow: while the Lease does not exist (a fresh install before its first leader, a
            // Lease deleted by hand until the leader recreates it) the fence is open; the
            // elector's own rules still hold then. Deny would make a missing Lease an error of
            // the policy, raised before the matchConditions run: under Fail it refuses every
            // matched write in the cluster, by anyone, including the ReplicaSet controller
            // creating the Passmower pods whose electors would create the Lease.
            parameter_not_found_action: Some("Allow".into()),
            ..Default::default()
        }),
        validation_actions: Some(vec!["Deny".into()]),
        ..Default::default()
    }
}

/// The ValidatingAdmissionPolicy and its binding, named `name`, for `target`. `generated_for`
/// (`Kind/name` of the workload) goes into the annotation by which `inject` recognises them.
pub fn write_fence(name: &str, target: &FenceTarget, generated_for: &str) -> Vec<Value> {
    write_fence_for(name, target, generated_for, Holder::ElectorIdentity)
}

/// [`write_fence`] for a Lease whose holder is written as `holder` says.
pub fn write_fence_for(
    name: &str,
    target: &FenceTarget,
    generated_for: &str,
    holder: Holder,
) -> Vec<Value> {
    let meta = || ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(BTreeMap::from([
            (
                "app.kubernetes.io/name".to_owned(),
                "passmower-elector".to_owned(),
            ),
            (
                "app.kubernetes.io/component".to_owned(),
                "write-fence".to_owned(),
            ),
        ])),
        annotations: Some(BTreeMap::from([(
            GENERATED_FOR_ANNOTATION.to_owned(),
            generated_for.to_owned(),
        )])),
        ..Default::default()
    };
    let policy = ValidatingAdmissionPolicy {
        metadata: meta(),
        spec: Some(fence_policy_spec_for(
            target.namespace,
            target.service_account,
            holder,
        )),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: meta(),
        spec: Some(fence_binding_spec(name, target)),
    };
    vec![to_value(&policy), to_value(&binding)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> FenceTarget<'static> {
        FenceTarget {
            namespace: "auth",
            service_account: "passmower",
            lease: "passmower",
        }
    }

    #[test]
    fn the_policy_takes_the_lease_as_parameter_and_matches_only_the_service_account() {
        let objects = write_fence(
            &fence_policy_name("auth", "passmower"),
            &target(),
            "Deployment/passmower",
        );
        let (policy, binding) = (&objects[0], &objects[1]);
        assert_eq!(policy["kind"].as_str(), Some("ValidatingAdmissionPolicy"));
        assert_eq!(
            policy["metadata"]["name"].as_str(),
            Some("passmower-elector-fence.auth.passmower")
        );
        assert_eq!(policy["spec"]["paramKind"]["kind"].as_str(), Some("Lease"));
        assert_eq!(policy["spec"]["failurePolicy"].as_str(), Some("Ignore"));
        assert_eq!(
            policy["spec"]["matchConditions"][0]["expression"].as_str(),
            Some("request.userInfo.username == \"system:serviceaccount:auth:passmower\"")
        );
        let resources: Vec<&str> = policy["spec"]["matchConstraints"]["resourceRules"]
            .as_sequence()
            .unwrap()
            .iter()
            .flat_map(|r| r["resources"].as_sequence().unwrap())
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(
            resources,
            [
                "oidcclients/status",
                "oidcmiddlewareclients/status",
                "oidcusereventhooks/status",
                "scimconnections/status",
                "oidcclients",
                "secrets",
                "pods",
                "jobs",
                "middlewares"
            ]
        );
        assert!(!resources.iter().any(|r| r.contains("oidcusers")));
        assert_eq!(
            binding["spec"]["paramRef"]["name"].as_str(),
            Some("passmower")
        );
        assert_eq!(
            binding["spec"]["paramRef"]["namespace"].as_str(),
            Some("auth")
        );
        assert_eq!(
            binding["spec"]["paramRef"]["parameterNotFoundAction"].as_str(),
            Some("Allow")
        );
        assert_eq!(
            binding["spec"]["validationActions"][0].as_str(),
            Some("Deny")
        );
        assert_eq!(
            binding["spec"]["policyName"].as_str(),
            policy["metadata"]["name"].as_str()
        );
    }

    #[test]
    fn the_fence_only_policy_compares_the_holder_with_the_pod_name() {
        let spec = |holder| {
            fence_policy_spec_for("auth", "passmower", holder)
                .validations
                .unwrap()[0]
                .expression
                .clone()
        };
        assert_eq!(
            spec(Holder::PodName),
            "variables.podName != \"\" && variables.holder == variables.podName"
        );
        assert!(spec(Holder::ElectorIdentity).contains("startsWith"));
        assert_eq!(
            fence_policy_spec("auth", "passmower"),
            fence_policy_spec_for("auth", "passmower", Holder::ElectorIdentity)
        );
    }

    #[test]
    fn names_are_per_service_account_and_valid() {
        assert_ne!(fence_policy_name("a", "p"), fence_policy_name("b", "p"));
        assert_ne!(fence_policy_name("a", "p"), fence_policy_name("a", "q"));
        let long = fence_policy_name(&"n".repeat(63), &"w".repeat(253));
        assert!(long.len() <= 253 && !long.ends_with('.'), "{long}");
    }
}
