//! The namespace a rendered stream reveals for a workload that names none: where the stream's
//! RoleBindings and ClusterRoleBindings bind the workload's ServiceAccount. Helm gives a
//! post-renderer no namespace and leaves `metadata.namespace` unset, but charts write
//! `.Release.Namespace` into a binding's ServiceAccount subject (upstream's ClusterRoleBinding
//! does), so that is where Helm will install the workload, its Role and its budget.

use std::collections::{BTreeSet, HashMap};

use serde_norway::Value;

use crate::inject::error::InjectError;
use crate::inject::options::InjectOptions;
use crate::inject::target::Target;

/// The namespaces in which the stream's bindings bind each ServiceAccount, by name.
#[derive(Debug, Default)]
pub(super) struct BoundAccounts {
    namespaces: HashMap<String, BTreeSet<String>>,
}

impl BoundAccounts {
    /// Notes the ServiceAccount subjects of `object` when it is a binding.
    pub(super) fn note(&mut self, object: &Value) {
        let kind = object.get("kind").and_then(Value::as_str);
        if !matches!(kind, Some("RoleBinding" | "ClusterRoleBinding")) {
            return;
        }
        let subjects = object.get("subjects").and_then(Value::as_sequence);
        for subject in subjects.into_iter().flatten() {
            let field = |key: &str| subject.get(key).and_then(Value::as_str);
            if field("kind") != Some("ServiceAccount") {
                continue;
            }
            if let (Some(name), Some(namespace)) = (field("name"), field("namespace")) {
                if !name.is_empty() && !namespace.is_empty() {
                    self.namespaces
                        .entry(name.to_owned())
                        .or_default()
                        .insert(namespace.to_owned());
                }
            }
        }
    }

    /// The namespace of `info`'s pods: its own, else `--namespace`, else the one namespace the
    /// stream binds its ServiceAccount in. A `--namespace` the bindings contradict is refused:
    /// Helm would install the workload and its Role where the bindings say, while the write
    /// fence and the replica guard would protect `--namespace`.
    pub(super) fn namespace_of(
        &self,
        info: &Target,
        opts: &InjectOptions,
    ) -> Result<Option<String>, InjectError> {
        if let Some(own) = &info.namespace {
            return Ok(Some(own.clone()));
        }
        let bound = self.namespaces.get(&info.service_account);
        match (opts.namespace.as_deref(), bound) {
            (Some(given), Some(bound)) if !bound.contains(given) => Err(info.error(format!(
                "names no namespace, and the stream binds its ServiceAccount {sa} in namespace \
                 {found} (a chart renders the release namespace there), but --namespace is \
                 {given:?}: the workload, its Role and its budget would land in {found} while \
                 the write fence and the replica guard would protect {given}. Pass \
                 --namespace={first} (the namespace given to helm -n), or leave --namespace out",
                sa = info.service_account,
                found = bound.iter().cloned().collect::<Vec<_>>().join(", "),
                first = bound.iter().next().cloned().unwrap_or_default(),
            ))),
            (Some(given), _) => Ok(Some(given.to_owned())),
            (None, Some(bound)) if bound.len() == 1 => Ok(bound.iter().next().cloned()),
            (None, _) => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::target::tests::{opts, target_of, DEPLOYMENT};
    use crate::inject::yaml::parse_stream;

    const BINDING: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: pm}
subjects:
- {kind: ServiceAccount, name: pm, namespace: auth}
- {kind: User, name: someone}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pm}
";

    fn bound(text: &str) -> BoundAccounts {
        let mut accounts = BoundAccounts::default();
        for doc in parse_stream(text).unwrap() {
            accounts.note(&doc.value);
        }
        accounts
    }

    #[test]
    fn the_binding_gives_the_namespace_and_contradicts_another() {
        let deployment = DEPLOYMENT.replace(
            "    spec:\n      containers:",
            "    spec:\n      serviceAccountName: pm\n      containers:",
        );
        let accounts = bound(BINDING);
        let (_, target) = target_of(&deployment, &opts());
        assert_eq!(
            accounts.namespace_of(&target, &opts()).unwrap().as_deref(),
            Some("auth")
        );
        let given = |ns: &str| InjectOptions {
            namespace: Some(ns.into()),
            ..opts()
        };
        assert_eq!(
            accounts
                .namespace_of(&target, &given("auth"))
                .unwrap()
                .as_deref(),
            Some("auth")
        );
        let refused = accounts
            .namespace_of(&target, &given("passmower"))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("--namespace=auth"), "{refused}");
        // Another account's binding says nothing about this workload.
        let other = bound(&BINDING.replace("name: pm, namespace", "name: other, namespace"));
        assert_eq!(
            other
                .namespace_of(&target, &given("passmower"))
                .unwrap()
                .as_deref(),
            Some("passmower")
        );
        assert_eq!(other.namespace_of(&target, &opts()).unwrap(), None);
    }
}
