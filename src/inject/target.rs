//! The workloads `inject` aims at: what a target is, read once from its manifest, and where a
//! pod spec sits for the messages about it.

use serde_norway::{Mapping, Value};

use crate::inject::error::InjectError;
use crate::inject::names::{
    WorkloadKind, ELECTOR_CONTAINER, INJECTED_ANNOTATION, LEASE_ANNOTATION,
};
use crate::inject::native_election;
use crate::inject::options::InjectOptions;
use crate::inject::value::{at, str_at};

/// A workload the options aim at (right kind, with the target container): what the rewrite
/// and the companion objects (RBAC, budget, fence, deny policy) need to know about it.
#[derive(Debug, Clone)]
pub struct Target {
    /// The document of the stream (1-based).
    pub document: usize,
    pub kind: WorkloadKind,
    pub name: String,
    pub namespace: Option<String>,
    /// The version in our marker annotation when already injected.
    pub injected_by: Option<String>,
    /// The `--passmower-election` mode an earlier `inject` wrote (only `fence-only` is).
    pub election_annotation: Option<String>,
    pub service_account: String,
    /// `spec.selector` as written, reused verbatim by the PodDisruptionBudget.
    pub selector: Value,
    /// `spec.replicas`; `None` when unset (Kubernetes then runs 1, or an autoscaler decides).
    pub replicas: Option<u64>,
    pub labels: Mapping,
    /// The labels of the workload's pods (what a PodMonitor selects).
    pub pod_labels: Mapping,
    /// The Lease: the one an earlier `inject` annotated, else `--lease-name`, else the
    /// workload's name; with `--passmower-election=fence-only`, upstream's Lease once rewritten.
    pub lease: String,
    /// Passmower's own Lease, which the elector holds beside ours (`--native-lease`), when its
    /// pods get one: read from the elector's arguments once injected.
    pub native_lease: Option<String>,
}

impl Target {
    /// Returns the target in `doc`, if it is one. Structural problems are errors only once the
    /// document is clearly aimed at (right kind, target container present).
    pub fn find(
        value: &Value,
        document: usize,
        opts: &InjectOptions,
    ) -> Result<Option<Target>, InjectError> {
        let Some(kind) = str_at(value, &["kind"]).and_then(WorkloadKind::parse) else {
            return Ok(None);
        };
        if !opts.kinds.contains(&kind)
            || !str_at(value, &["apiVersion"]).is_some_and(|v| v.starts_with("apps/"))
        {
            return Ok(None);
        }
        let has_container = at(value, &["spec", "template", "spec", "containers"])
            .and_then(Value::as_sequence)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| str_at(c, &["name"]) == Some(opts.container.as_str()))
            });
        if !has_container {
            return Ok(None);
        }
        let fail = |workload: String, reason: &str| InjectError::Manifest {
            document,
            workload,
            reason: reason.to_owned(),
        };
        let name = str_at(value, &["metadata", "name"])
            .filter(|n| !n.is_empty())
            .ok_or_else(|| fail(kind.as_str().into(), "metadata.name is missing"))?
            .to_owned();
        let namespace = str_at(value, &["metadata", "namespace"]).map(str::to_owned);
        let describe = format!("{}/{}", kind.as_str(), name);
        let selector = at(value, &["spec", "selector"])
            .filter(|s| s.is_mapping())
            .cloned()
            .ok_or_else(|| fail(describe.clone(), "spec.selector is missing"))?;
        let annotation = |key: &str| {
            at(value, &["metadata", "annotations", key])
                .and_then(scalar_string)
                .map(str::to_owned)
        };
        let lease = annotation(LEASE_ANNOTATION)
            .or_else(|| opts.lease_name.clone())
            .unwrap_or_else(|| name.clone());
        let injected_by = annotation(INJECTED_ANNOTATION);
        let native_lease = if injected_by.is_some() {
            elector_native_lease(value)
        } else {
            at(value, &["spec", "template", "spec", "containers"])
                .and_then(Value::as_sequence)
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| str_at(c, &["name"]) == Some(opts.container.as_str()))
                })
                .and_then(Value::as_mapping)
                .and_then(|main| {
                    native_election::native_lease_to_hold(
                        main,
                        opts.passmower_election,
                        &opts.container,
                    )
                })
        };
        // An elector whose own Lease is upstream's already excludes upstream's election on
        // that very object (each side leaves a live holder alone): nothing to hold beside it.
        let native_lease = native_lease.filter(|n| *n != lease);
        Ok(Some(Target {
            document,
            kind,
            name,
            namespace,
            injected_by,
            election_annotation: annotation(native_election::MODE_ANNOTATION),
            service_account: str_at(value, &["spec", "template", "spec", "serviceAccountName"])
                .or_else(|| str_at(value, &["spec", "template", "spec", "serviceAccount"]))
                .filter(|s| !s.is_empty())
                .unwrap_or("default")
                .to_owned(),
            selector,
            replicas: at(value, &["spec", "replicas"]).and_then(Value::as_u64),
            labels: at(value, &["metadata", "labels"])
                .and_then(Value::as_mapping)
                .cloned()
                .unwrap_or_default(),
            pod_labels: at(value, &["spec", "template", "metadata", "labels"])
                .and_then(Value::as_mapping)
                .cloned()
                .unwrap_or_default(),
            lease,
            native_lease,
        }))
    }

    /// The namespace and labels of the workload's pods (what a PodMonitor selects).
    pub fn pod_labels(&self) -> (Option<String>, Mapping) {
        (self.namespace.clone(), self.pod_labels.clone())
    }

    /// `Kind/name`, for messages.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.kind.as_str(), self.name)
    }

    pub(crate) fn error(&self, reason: impl Into<String>) -> InjectError {
        InjectError::Manifest {
            document: self.document,
            workload: self.describe(),
            reason: reason.into(),
        }
    }
}

/// The `--native-lease` an earlier `inject` gave the elector container of `value`'s pods.
fn elector_native_lease(value: &Value) -> Option<String> {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|list| at(value, &["spec", "template", "spec", list]))
        .filter_map(Value::as_sequence)
        .flatten()
        .filter(|c| str_at(c, &["name"]) == Some(ELECTOR_CONTAINER))
        .filter_map(|c| at(c, &["args"]).and_then(Value::as_sequence))
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix("--native-lease="))
        .map(str::to_owned)
}

fn scalar_string(v: &Value) -> Option<&str> {
    v.as_str()
}

/// Where a pod spec sits and how messages name it: a workload's template (`inject`) or a Pod
/// itself (`webhook`). The rewrite is the same; only the names in its messages differ.
#[derive(Debug, Clone)]
pub struct PodSite {
    /// The document of the stream (1-based; 0 for an admission request).
    pub document: usize,
    /// `Kind/name` of the object, for messages.
    pub workload: String,
    /// The pod spec's path in the object, for messages: `spec.template.spec` or `spec`.
    pub path: &'static str,
}

impl PodSite {
    pub(crate) fn error(&self, reason: impl Into<String>) -> InjectError {
        InjectError::Manifest {
            document: self.document,
            workload: self.workload.clone(),
            reason: reason.into(),
        }
    }
}

impl Target {
    pub(crate) fn site(&self) -> PodSite {
        PodSite {
            document: self.document,
            workload: self.describe(),
            path: "spec.template.spec",
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::inject::yaml::parse_stream;

    /// The options the tests of the rewrite start from.
    pub(crate) fn opts() -> InjectOptions {
        InjectOptions::new("registry.example.com/passmower-elector:test")
    }

    /// The smallest target: a Passmower Deployment that sets nothing else.
    pub(crate) const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: pm
spec:
  selector:
    matchLabels: {app: pm}
  template:
    spec:
      containers:
      - name: passmower
        image: ghcr.io/passmower/passmower:2.2.0
";

    /// The first document of `text` and the target it is.
    pub(crate) fn target_of(text: &str, opts: &InjectOptions) -> (Value, Target) {
        let docs = parse_stream(text).unwrap();
        let target = Target::find(&docs[0].value, 1, opts)
            .unwrap()
            .expect("a target");
        (docs[0].value.clone(), target)
    }

    #[test]
    fn other_kinds_and_containers_are_not_targets() {
        let docs = parse_stream(&DEPLOYMENT.replace("name: passmower", "name: other")).unwrap();
        assert!(Target::find(&docs[0].value, 1, &opts()).unwrap().is_none());
        let sts = DEPLOYMENT.replace("kind: Deployment", "kind: StatefulSet");
        let docs = parse_stream(&sts).unwrap();
        assert!(Target::find(&docs[0].value, 1, &opts()).unwrap().is_none());
        let opts = InjectOptions {
            kinds: vec![WorkloadKind::StatefulSet],
            ..opts()
        };
        assert!(Target::find(&docs[0].value, 1, &opts).unwrap().is_some());
    }
}
