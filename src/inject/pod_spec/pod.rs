//! The Pod front door of the injection: the pod-spec rewrite `inject` applies to a workload's
//! template, applied to a Pod as the admission webhook receives it.

use serde_norway::Value;

use crate::inject::error::InjectError;
use crate::inject::names::{
    BIN_VOLUME, ELECTOR_CONTAINER, FLAG_VOLUME, INJECTED_ANNOTATION, INSTALL_CONTAINER,
    LEASE_ANNOTATION, VERSION, WARNINGS_ANNOTATION,
};
use crate::inject::options::InjectOptions;
use crate::inject::pod_spec::workload;
use crate::inject::target::PodSite;
use crate::inject::value::{at, child_mapping, str_at};

/// What the injection made of one Pod.
#[derive(Debug, Clone, PartialEq)]
pub enum PodOutcome {
    /// The Pod with the elector added, and what its owner should know.
    Injected { pod: Value, warnings: Vec<String> },
    /// Left as it is, and why (no target container, already injected).
    Unchanged(String),
}

/// `Pod/name` (or the generated name's prefix) for messages.
pub fn describe_pod(pod: &Value) -> String {
    let name = str_at(pod, &["metadata", "name"])
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            str_at(pod, &["metadata", "generateName"])
                .filter(|n| !n.is_empty())
                .map(|n| format!("{n}*"))
        })
        .unwrap_or_else(|| "(unnamed)".into());
    format!("Pod/{name}")
}

/// Injects the elector into `pod` for `lease`, with the same rewrite `inject` gives a
/// workload's template. The Pod carries the marker annotations itself, since nothing else does.
pub fn inject_pod(
    pod: &Value,
    lease: &str,
    opts: &InjectOptions,
) -> Result<PodOutcome, InjectError> {
    let describe = describe_pod(pod);
    if let Some(reason) = not_a_target(pod, &opts.container) {
        return Ok(PodOutcome::Unchanged(reason));
    }

    let site = PodSite {
        document: 0,
        workload: describe.clone(),
        path: "spec",
    };
    let mut pod = pod.clone();
    let mut warnings = Vec::new();
    let spec = child_mapping(&mut pod, &["spec"]).ok_or_else(|| InjectError::Manifest {
        document: 0,
        workload: describe.clone(),
        reason: "spec is not a mapping".into(),
    })?;
    workload::rewrite_pod_spec(spec, &site, lease, opts, &mut warnings)?;
    let annotations = child_mapping(&mut pod, &["metadata", "annotations"]).ok_or_else(|| {
        InjectError::Manifest {
            document: 0,
            workload: describe,
            reason: "metadata.annotations is not a mapping".into(),
        }
    })?;
    annotations.insert(INJECTED_ANNOTATION.into(), VERSION.into());
    annotations.insert(LEASE_ANNOTATION.into(), lease.into());
    if !warnings.is_empty() {
        annotations.insert(WARNINGS_ANNOTATION.into(), warnings.join("\n").into());
    }
    Ok(PodOutcome::Injected { pod, warnings })
}

/// Why `pod` is not injected whatever its options, if it is not: it is already injected (our
/// annotation, containers or volumes), or no container of it is named `container`. The
/// webhook chart's `matchConditions` mirror this rule, so the API server calls the webhook only
/// for pods this returns `None` for.
pub fn not_a_target(pod: &Value, container: &str) -> Option<String> {
    let describe = describe_pod(pod);
    if let Some(version) =
        at(pod, &["metadata", "annotations", INJECTED_ANNOTATION]).and_then(Value::as_str)
    {
        return Some(format!(
            "{describe} is already injected (by passmower-elector {version})"
        ));
    }
    // A pod of a workload `inject` rewrote carries the sidecar but no annotation of its own.
    let ours = [ELECTOR_CONTAINER, INSTALL_CONTAINER];
    for list in ["initContainers", "containers"] {
        let found = at(pod, &["spec", list])
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .filter_map(|c| str_at(c, &["name"]))
            .find(|n| ours.contains(n));
        if let Some(name) = found {
            return Some(format!(
                "{describe} already has container {name:?} in spec.{list} (injected by `inject`?)"
            ));
        }
    }
    let has_our_volume = at(pod, &["spec", "volumes"])
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter_map(|v| str_at(v, &["name"]))
        .any(|n| n == FLAG_VOLUME || n == BIN_VOLUME);
    if has_our_volume {
        return Some(format!("{describe} already has a passmower-elector volume"));
    }
    let is_target = at(pod, &["spec", "containers"])
        .and_then(Value::as_sequence)
        .is_some_and(|cs| cs.iter().any(|c| str_at(c, &["name"]) == Some(container)));
    if !is_target {
        return Some(format!("{describe} has no container named {container:?}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::native_election::PassmowerElection;
    use crate::inject::pod_spec::workload::tests::rewritten;
    use crate::inject::target::tests::{opts, DEPLOYMENT};
    use crate::inject::yaml::parse_stream;

    const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  generateName: pm-7d9f-
  labels: {app: pm}
spec:
  containers:
  - name: passmower
    image: ghcr.io/passmower/passmower:2.2.0
";

    fn pod() -> Value {
        parse_stream(POD).unwrap()[0].value.clone()
    }

    #[test]
    fn a_pod_gets_the_same_spec_as_injects_template() {
        let PodOutcome::Injected { pod, warnings } = inject_pod(&pod(), "pm", &opts()).unwrap()
        else {
            panic!("not injected");
        };
        assert!(warnings.is_empty(), "{warnings:?}");
        let (deployment, _) = rewritten(DEPLOYMENT, &opts());
        assert_eq!(pod["spec"], deployment["spec"]["template"]["spec"]);
        assert_eq!(
            pod["metadata"]["annotations"][LEASE_ANNOTATION].as_str(),
            Some("pm")
        );
        assert_eq!(
            pod["metadata"]["annotations"][INJECTED_ANNOTATION].as_str(),
            Some(VERSION)
        );
    }

    /// The webhook shares the pod rewrite: every pod gets Passmower's own election turned off,
    /// whatever its image, and a pod whose image tag names no release (a 2.4 build tagged
    /// `2.0.0-dev`) a warning that says so; `ours` keeps quiet.
    #[test]
    fn every_passmower_pod_gets_leader_election_enabled_false() {
        let enabled = |pod: &Value| -> Vec<String> {
            pod["spec"]["containers"][0]["env"]
                .as_sequence()
                .into_iter()
                .flatten()
                .filter(|e| e["name"].as_str() == Some("LEADER_ELECTION_ENABLED"))
                .filter_map(|e| e["value"].as_str().map(str::to_owned))
                .collect()
        };
        let injected = |text: &str, opts: &InjectOptions| {
            let value = parse_stream(text).unwrap()[0].value.clone();
            match inject_pod(&value, "pm", opts).unwrap() {
                PodOutcome::Injected { pod, warnings } => (enabled(&pod), warnings),
                PodOutcome::Unchanged(why) => panic!("not injected: {why}"),
            }
        };
        let ours = InjectOptions {
            passmower_election: PassmowerElection::Ours,
            ..opts()
        };
        for image in [
            "ghcr.io/passmower/passmower:2.4.0",
            "ghcr.io/passmower/passmower:2.2.0",
        ] {
            let pod = POD.replace("ghcr.io/passmower/passmower:2.2.0", image);
            assert_eq!(injected(&pod, &opts()), (vec!["false".to_owned()], vec![]));
            assert_eq!(injected(&pod, &ours), (vec!["false".to_owned()], vec![]));
        }
        let dev = POD.replace(
            "ghcr.io/passmower/passmower:2.2.0",
            "ghcr.io/passmower/passmower:2.0.0-dev",
        );
        let (env, warnings) = injected(&dev, &opts());
        assert_eq!(env, ["false"]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("\"2.0.0-dev\" is no release version")
                && warnings[0].contains("cannot tell whether this Passmower elects"),
            "{warnings:?}"
        );
        assert_eq!(injected(&dev, &ours), (vec!["false".to_owned()], vec![]));
    }

    /// The webhook's pods get the sidecar image's pull secrets after their own, and the memory
    /// warning in their annotation, like `inject`'s templates.
    #[test]
    fn a_pod_gets_the_pull_secrets_and_the_memory_warning() {
        let text = POD.replace(
            "spec:\n  containers:",
            "spec:\n  imagePullSecrets: [{name: app-registry}]\n  containers:",
        ) + "    resources: {limits: {memory: 200Mi}}\n";
        let value = parse_stream(&text).unwrap()[0].value.clone();
        let opts = InjectOptions {
            image_pull_secrets: vec!["sidecar-registry".into(), "app-registry".into()],
            ..opts()
        };
        let PodOutcome::Injected { pod, warnings } = inject_pod(&value, "pm", &opts).unwrap()
        else {
            panic!("not injected");
        };
        let names: Vec<&str> = pod["spec"]["imagePullSecrets"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(|e| e["name"].as_str())
            .collect();
        assert_eq!(names, ["app-registry", "sidecar-registry"]);
        // The limit sized for one instance: no standby (said), and a limit too small for the
        // leader's two instances (warned).
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        for w in &warnings {
            assert!(
                w.starts_with(
                    "Pod/pm-7d9f-*: spec.containers[passmower].resources.limits.memory is 200Mi"
                ),
                "{warnings:?}"
            );
        }
        assert!(warnings[0].contains("warm standby"), "{warnings:?}");
        assert!(warnings[1].contains("OOM-killed"), "{warnings:?}");
        assert_eq!(
            pod["metadata"]["annotations"][WARNINGS_ANNOTATION].as_str(),
            Some(warnings.join("\n").as_str())
        );
    }

    #[test]
    fn injecting_twice_changes_nothing() {
        let PodOutcome::Injected { pod, .. } = inject_pod(&pod(), "pm", &opts()).unwrap() else {
            panic!("not injected");
        };
        assert!(matches!(
            inject_pod(&pod, "pm", &opts()).unwrap(),
            PodOutcome::Unchanged(reason) if reason.contains("already injected")
        ));
    }

    #[test]
    fn a_pod_of_an_injected_workload_is_left_as_it_is() {
        let (deployment, _) = rewritten(DEPLOYMENT, &opts());
        let mut from_template = pod();
        from_template["spec"] = deployment["spec"]["template"]["spec"].clone();
        assert!(matches!(
            inject_pod(&from_template, "pm", &opts()).unwrap(),
            PodOutcome::Unchanged(reason) if reason.contains("passmower-elector-install")
        ));
    }

    #[test]
    fn a_pod_without_the_container_is_not_a_target() {
        let other = POD.replace("name: passmower", "name: redis");
        let value = parse_stream(&other).unwrap()[0].value.clone();
        assert!(matches!(
            inject_pod(&value, "pm", &opts()).unwrap(),
            PodOutcome::Unchanged(reason) if reason.contains("Pod/pm-7d9f-*") && reason.contains("\"passmower\"")
        ));
    }

    #[test]
    fn errors_name_the_pod_and_its_spec_path() {
        let text = POD.replace("name: passmower", "name: app");
        let value = parse_stream(&text).unwrap()[0].value.clone();
        let opts = InjectOptions {
            container: "app".into(),
            ..opts()
        };
        let err = inject_pod(&value, "pm", &opts).unwrap_err();
        assert!(matches!(err, InjectError::NoCommand { .. }), "{err}");
        assert!(err.to_string().contains("Pod/pm-7d9f-*"), "{err}");

        let broken = POD.replace("spec:\n  containers:", "spec:\n  volumes: 3\n  containers:");
        let value = parse_stream(&broken).unwrap()[0].value.clone();
        let err = inject_pod(&value, "pm", &crate::inject::target::tests::opts()).unwrap_err();
        assert!(
            err.to_string().contains("spec.volumes is not a list"),
            "{err}"
        );
    }
}
