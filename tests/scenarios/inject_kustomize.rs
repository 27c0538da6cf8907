//! `inject --kustomize DIR` means the same as `inject`: the Component, built by the real
//! kustomize over the original manifests, gives the objects `inject` prints, field for field
//! (lists Kubernetes treats as sets compared as sets; the order of init containers kept).

use std::collections::BTreeMap;

use crate::golden::{golden_path, IMAGE};
use pme_testkit::tools::{kustomize, Helm, Sandbox};
use serde_json::Value;

/// Lists whose order Kubernetes ignores, with their merge key: kustomize puts the items a
/// strategic patch adds first, `inject` appends them.
const SETS: [(&str, &str); 3] = [
    ("volumes", "name"),
    ("volumeMounts", "mountPath"),
    ("env", "name"),
];

fn normalize(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if let (Some((_, merge_key)), Value::Array(items)) =
                    (SETS.iter().find(|(k, _)| k == key), &mut *child)
                {
                    items.sort_by_key(|i| i[*merge_key].to_string());
                }
                normalize(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

fn objects(yaml: &str) -> BTreeMap<String, Value> {
    serde_norway::Deserializer::from_str(yaml)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .filter(|d: &Value| !d.is_null())
        .map(|mut d| {
            normalize(&mut d);
            (
                format!(
                    "{}/{}",
                    d["kind"].as_str().unwrap_or("?"),
                    d["metadata"]["name"].as_str().unwrap_or("?")
                ),
                d,
            )
        })
        .collect()
}

fn same_as_inject(input: &str, flags: &str) {
    let dir = tempfile::tempdir().expect("tmp");
    let sandbox = Sandbox::new(Helm::V3, &dir.path().join("no-cluster"));
    let path = golden_path(input);
    let ran = sandbox.ok(&format!(
        "cp {path} input.yaml\n\
         passmower-elector inject --image {IMAGE} {flags} -f input.yaml >direct.yaml\n\
         passmower-elector inject --image {IMAGE} {flags} -f input.yaml --kustomize component\n\
         printf 'resources: [input.yaml]\\ncomponents: [component]\\n' >kustomization.yaml\n\
         {kustomize} build .",
        path = path.display(),
        kustomize = kustomize().display(),
    ));
    let built = objects(&ran.stdout);
    let direct =
        objects(&std::fs::read_to_string(sandbox.root().join("direct.yaml")).expect("direct"));
    assert_eq!(
        built.keys().collect::<Vec<_>>(),
        direct.keys().collect::<Vec<_>>(),
        "{input}: other objects"
    );
    for (key, object) in &direct {
        assert!(
            built[key] == *object,
            "{input}: {key} differs:\nkustomize: {}\ninject:    {}",
            built[key],
            object
        );
    }
    // The init containers keep inject's order (the app's own first), which a strategic
    // patch alone would not.
    for (key, object) in &direct {
        let names = |o: &Value| -> Vec<String> {
            o["spec"]["template"]["spec"]["initContainers"]
                .as_array()
                .map(|l| l.iter().map(|c| c["name"].to_string()).collect())
                .unwrap_or_default()
        };
        assert_eq!(names(&built[key]), names(object), "{input}: {key}");
    }
}

#[test]
fn the_component_gives_injects_output_for_a_helm_stream() {
    same_as_inject(
        "passmower.in.yaml",
        "--namespace passmower --deny-idle-namespace",
    );
}

/// Existing init containers (ordered appends), a valueFrom selector (a renamed env entry), a
/// replaced Recreate strategy, a PodMonitor (a custom resource, merged as JSON).
#[test]
fn the_component_gives_injects_output_for_a_mixed_stream() {
    same_as_inject("mixed.in.yaml", "");
}

#[test]
fn the_component_gives_injects_output_for_a_statefulset() {
    same_as_inject(
        "statefulset.in.yaml",
        "--kind StatefulSet --container app --app-command '/usr/bin/idp serve' --classic-sidecar \
         --namespace team",
    );
}
