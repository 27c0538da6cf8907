//! The elector's RBAC, stated once: the permissions the chart and `inject` grant, which every
//! integration test runs under (and which negative tests shrink by one permission).

use k8s_openapi::api::rbac::v1::PolicyRule;

/// The Lease name test namespaces use unless a test asks for another.
pub const DEFAULT_LEASE_NAME: &str = "passmower-operators";

/// Exactly what an elector needs, and no more:
/// - `get`/`watch`/`list`/`update`/`patch` on its own Lease only (`resourceNames`). A `list` or
///   `watch` restricted by name is only allowed with `fieldSelector=metadata.name=<lease>`;
///   the elector must watch that way.
/// - `create` on Leases without a name restriction: a create request carries no name in its
///   URL, so RBAC cannot restrict it by `resourceNames` (such a rule would never match).
/// - `create`/`patch` on Events, in both the core and the `events.k8s.io` group, for the
///   "became leader" / "stopped leading" events.
///
/// There is deliberately no `delete`: a release is an update (holder "").
pub fn elector_lease_rules(lease_name: &str) -> Vec<PolicyRule> {
    vec![
        rule(
            "coordination.k8s.io",
            "leases",
            &["get", "watch", "list", "update", "patch"],
            Some(lease_name),
        ),
        rule("coordination.k8s.io", "leases", &["create"], None),
        rule("", "events", &["create", "patch"], None),
        rule("events.k8s.io", "events", &["create", "patch"], None),
    ]
}

/// `rules` with one verb taken away from every rule on `group`/`resource` (rules left without
/// verbs are dropped): "one permission less", for tests that show each grant is needed.
pub fn rules_without(
    rules: &[PolicyRule],
    group: &str,
    resource: &str,
    verb: &str,
) -> Vec<PolicyRule> {
    rules
        .iter()
        .cloned()
        .filter_map(|mut r| {
            let matches = r.api_groups.iter().flatten().any(|g| g == group)
                && r.resources.iter().flatten().any(|x| x == resource);
            if matches {
                r.verbs.retain(|v| v != verb);
            }
            (!r.verbs.is_empty()).then_some(r)
        })
        .collect()
}

fn rule(group: &str, resource: &str, verbs: &[&str], name: Option<&str>) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(vec![resource.to_owned()]),
        resource_names: name.map(|n| vec![n.to_owned()]),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        non_resource_urls: None,
    }
}
