//! The elector's RBAC: the permissions the chart and `inject` grant (stated once, in the
//! library), which every integration test runs under and negative tests shrink by one.

use k8s_openapi::api::rbac::v1::PolicyRule;

/// The Lease name test namespaces use unless a test asks for another.
pub const DEFAULT_LEASE_NAME: &str = "passmower-operators";

/// Exactly what an elector needs, and no more: the library's own statement of it
/// ([`passmower_elector::inject::elector_lease_rules`], which `inject` puts in the Role it
/// generates and the chart's Role is checked against), so tests grant what users get.
pub fn elector_lease_rules(lease_name: &str) -> Vec<PolicyRule> {
    passmower_elector::inject::elector_lease_rules(lease_name)
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
