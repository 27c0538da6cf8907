//! The pod's `imagePullSecrets`: the Secrets the kubelet pulls the sidecar image with, for a
//! sidecar image in a private registry (`--image-pull-secret`), added after the app's own.

use serde_norway::{Mapping, Value};

use crate::inject::error::InjectError;
use crate::inject::target::PodSite;
use crate::inject::value::str_at;

/// Appends each of `names` that the pod does not list yet to its `imagePullSecrets`, after the
/// entries it has: the kubelet tries them in order, so the app's image keeps being pulled with
/// the app's own Secret first. Nothing is touched when `names` is empty, so a pod without the
/// flag is written as before.
pub fn add_image_pull_secrets(
    pod: &mut Mapping,
    site: &PodSite,
    names: &[String],
) -> Result<(), InjectError> {
    if names.is_empty() {
        return Ok(());
    }
    let slot = pod
        .entry("imagePullSecrets".into())
        .or_insert_with(|| Value::Sequence(Vec::new()));
    if slot.is_null() {
        *slot = Value::Sequence(Vec::new());
    }
    let list = slot
        .as_sequence_mut()
        .ok_or_else(|| site.error(format!("{}.imagePullSecrets is not a list", site.path)))?;
    for name in names {
        if list
            .iter()
            .any(|entry| str_at(entry, &["name"]) == Some(name))
        {
            continue;
        }
        let mut entry = Mapping::new();
        entry.insert("name".into(), name.as_str().into());
        list.push(Value::Mapping(entry));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> PodSite {
        PodSite {
            document: 1,
            workload: "Deployment/passmower".into(),
            path: "spec.template.spec",
        }
    }

    fn pod(text: &str) -> Mapping {
        serde_norway::from_str(text).unwrap()
    }

    fn names(pod: &Mapping) -> Vec<&str> {
        pod["imagePullSecrets"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect()
    }

    fn owned(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn the_apps_own_secrets_come_first_and_none_is_listed_twice() {
        let mut spec = pod("imagePullSecrets: [{name: app-registry}, {name: shared}]\n");
        add_image_pull_secrets(
            &mut spec,
            &site(),
            &owned(&["sidecar", "shared", "sidecar"]),
        )
        .unwrap();
        assert_eq!(names(&spec), ["app-registry", "shared", "sidecar"]);
    }

    #[test]
    fn a_pod_without_the_list_gets_one_and_without_names_nothing_changes() {
        for text in ["containers: []\n", "imagePullSecrets: null\n"] {
            let mut spec = pod(text);
            add_image_pull_secrets(&mut spec, &site(), &owned(&["regcred"])).unwrap();
            assert_eq!(names(&spec), ["regcred"], "{text}");
            let mut untouched = pod(text);
            add_image_pull_secrets(&mut untouched, &site(), &[]).unwrap();
            assert_eq!(untouched, pod(text), "{text}");
        }
    }

    #[test]
    fn a_list_that_is_not_one_is_an_error_naming_its_path() {
        let mut spec = pod("imagePullSecrets: regcred\n");
        let err = add_image_pull_secrets(&mut spec, &site(), &owned(&["regcred"])).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("spec.template.spec.imagePullSecrets is not a list"),
            "{text}"
        );
        assert!(text.contains("Deployment/passmower"), "{text}");
    }
}
