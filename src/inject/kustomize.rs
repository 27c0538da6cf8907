//! `inject --kustomize DIR`: the same injection as a kustomize Component, for tools that run
//! kustomize but no Helm post-renderer (Flux's HelmRelease `postRenderers`, Argo CD, a plain
//! `kustomization.yaml`).
//!
//! Each rewritten object becomes a strategic-merge patch holding only what `inject` changed
//! (lists merged by their Kubernetes merge keys, removed entries as `$patch: delete`), so the
//! patch does not pin what the chart renders around it (Passmower's image, its other env).
//! The added objects go to `resources.yaml`. A test builds the Component with the real
//! kustomize and compares the result with `inject`'s own output.

use std::io;
use std::path::{Path, PathBuf};

use serde_norway::{Mapping, Value};

use crate::atomic_file;
use crate::inject::names::VERSION;
use crate::inject::run::{Injected, Rewrite};
use crate::inject::yaml;

/// The Kubernetes merge key (`patchMergeKey`) of the lists a pod-template rewrite touches.
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "ports" => Some("containerPort"),
        _ => None,
    }
}

/// The patch that turns `before` into `after`. With `strategic`, lists with a Kubernetes merge
/// key are merged by it; otherwise (custom resources, which kustomize patches as JSON merge
/// patches) every changed list is replaced whole.
pub fn strategic_patch(before: &Value, after: &Value, strategic: bool) -> Value {
    match (before.as_mapping(), after.as_mapping()) {
        (Some(b), Some(a)) => Value::Mapping(diff_map(b, a, strategic)),
        _ => after.clone(),
    }
}

fn diff_map(before: &Mapping, after: &Mapping, strategic: bool) -> Mapping {
    let mut patch = Mapping::new();
    for (key, new) in after {
        match before.get(key) {
            None => {
                patch.insert(key.clone(), new.clone());
            }
            Some(old) if old == new => {}
            Some(old) => {
                let field = key.as_str().unwrap_or_default();
                patch.insert(key.clone(), diff_value(field, old, new, strategic));
            }
        }
    }
    for key in before.keys() {
        if !after.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    patch
}

fn diff_value(field: &str, old: &Value, new: &Value, strategic: bool) -> Value {
    match (old, new) {
        (Value::Mapping(o), Value::Mapping(n)) => Value::Mapping(diff_map(o, n, strategic)),
        (Value::Sequence(o), Value::Sequence(n)) if strategic => match merge_key(field) {
            Some(key) if keyed(o, key) && keyed(n, key) => keyed_diff(key, o, n),
            _ => new.clone(),
        },
        _ => new.clone(),
    }
}

fn keyed(items: &[Value], key: &str) -> bool {
    items.iter().all(|i| i.get(key).is_some())
}

/// A merge-keyed list: new items whole, changed items as their own diff with the key, gone
/// items as `$patch: delete`.
fn keyed_diff(key: &str, old: &[Value], new: &[Value]) -> Value {
    let find = |items: &[Value], id: &Value| items.iter().find(|i| i.get(key) == Some(id)).cloned();
    let mut out = Vec::new();
    for item in new {
        let Some(id) = item.get(key) else { continue };
        match find(old, id) {
            None => out.push(item.clone()),
            Some(previous) if previous == *item => {}
            Some(previous) => {
                let mut entry = Mapping::new();
                entry.insert(key.into(), id.clone());
                if let (Some(p), Some(i)) = (previous.as_mapping(), item.as_mapping()) {
                    for (k, v) in diff_map(p, i, true) {
                        entry.insert(k, v);
                    }
                }
                out.push(Value::Mapping(entry));
            }
        }
    }
    for item in old {
        let Some(id) = item.get(key) else { continue };
        if find(new, id).is_none() {
            let mut entry = Mapping::new();
            entry.insert(key.into(), id.clone());
            entry.insert("$patch".into(), "delete".into());
            out.push(Value::Mapping(entry));
        }
    }
    Value::Sequence(out)
}

/// Lists whose order Kubernetes acts on (init containers run in order; the first container is
/// `kubectl`'s default), at their path in a workload.
const ORDERED_LISTS: [[&str; 4]; 2] = [
    ["spec", "template", "spec", "initContainers"],
    ["spec", "template", "spec", "containers"],
];

/// Takes the items a strategic patch would add to an ordered list that already has items out
/// of `body`, and returns them as JSON-patch `add …/-` operations: kustomize puts the new
/// items of a strategic merge first, which would start the elector before the app's own init
/// containers. (kustomize ignores `$setElementOrder`.)
fn ordered_additions(before: &Value, body: &mut Mapping) -> Vec<Value> {
    let mut ops = Vec::new();
    for path in ORDERED_LISTS {
        let existing = path
            .iter()
            .try_fold(before, |v, k| v.get(k))
            .and_then(Value::as_sequence);
        let Some(existing) = existing.filter(|items| !items.is_empty()) else {
            continue;
        };
        let mut slot = Some(&mut *body);
        let mut list = None;
        for (i, key) in path.iter().enumerate() {
            let map = match slot.take() {
                Some(m) => m,
                None => break,
            };
            let Some(child) = map.get_mut(*key) else {
                break;
            };
            if i + 1 == path.len() {
                list = child.as_sequence_mut();
            } else {
                slot = child.as_mapping_mut();
            }
        }
        let Some(list) = list else { continue };
        let is_new = |item: &Value| {
            item.get("$patch").is_none()
                && !existing
                    .iter()
                    .any(|e| e.get("name").is_some() && e.get("name") == item.get("name"))
        };
        let json_path = format!("/{}/-", path.join("/"));
        for item in list.iter().filter(|i| is_new(i)) {
            let mut op = Mapping::new();
            op.insert("op".into(), "add".into());
            op.insert("path".into(), json_path.clone().into());
            op.insert("value".into(), item.clone());
            ops.push(Value::Mapping(op));
        }
        list.retain(|i| !is_new(i));
    }
    prune_empty(body);
    ops
}

/// Removes the mappings and lists a patch no longer needs once items moved out of it.
fn prune_empty(map: &mut Mapping) {
    let keys: Vec<Value> = map.keys().cloned().collect();
    for key in keys {
        let empty = match map.get_mut(&key) {
            Some(Value::Mapping(child)) => {
                let was_empty = child.is_empty();
                prune_empty(child);
                !was_empty && child.is_empty()
            }
            Some(Value::Sequence(items)) => items.is_empty(),
            _ => false,
        };
        if empty {
            map.remove(&key);
        }
    }
}

/// The kustomize patch entries (`target` + inline `patch`) for one rewrite: the form both a
/// kustomization's `patches:` and Flux's `postRenderers[].kustomize.patches` take. One
/// strategic-merge patch, and a JSON patch when items must go after existing ones.
fn patch_entries(rewrite: &Rewrite) -> Option<Vec<Value>> {
    let after = &rewrite.after;
    let api_version = after.get("apiVersion")?.as_str()?;
    let kind = after.get("kind")?.as_str()?;
    let metadata = after.get("metadata")?;
    let name = metadata.get("name")?.as_str()?;
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    // Built-in workloads take strategic merge; custom resources are merged as JSON.
    let strategic = matches!(group, "" | "apps" | "batch");
    let mut body = match strategic_patch(&rewrite.before, after, strategic) {
        Value::Mapping(m) => m,
        _ => return None,
    };
    let ordered = if strategic {
        ordered_additions(&rewrite.before, &mut body)
    } else {
        Vec::new()
    };
    let mut patch = Mapping::new();
    patch.insert("apiVersion".into(), api_version.into());
    patch.insert("kind".into(), kind.into());
    let mut meta = match body.remove("metadata") {
        Some(Value::Mapping(m)) => m,
        _ => Mapping::new(),
    };
    let mut named = Mapping::new();
    named.insert("name".into(), name.into());
    if let Some(ns) = metadata.get("namespace") {
        named.insert("namespace".into(), ns.clone());
    }
    for (k, v) in std::mem::take(&mut meta) {
        named.insert(k, v);
    }
    patch.insert("metadata".into(), Value::Mapping(named));
    body.remove("apiVersion");
    body.remove("kind");
    for (k, v) in body {
        patch.insert(k, v);
    }

    let mut target = Mapping::new();
    target.insert("group".into(), group.into());
    target.insert("version".into(), version.into());
    target.insert("kind".into(), kind.into());
    target.insert("name".into(), name.into());
    if let Some(ns) = metadata.get("namespace") {
        target.insert("namespace".into(), ns.clone());
    }
    let entry = |patch: Value, target: Option<&Mapping>| {
        let mut entry = Mapping::new();
        if let Some(target) = target {
            entry.insert("target".into(), Value::Mapping(target.clone()));
        }
        entry.insert("patch".into(), yaml::to_yaml(&patch).into());
        Value::Mapping(entry)
    };
    // A strategic-merge patch without a target names its object by its own apiVersion, kind,
    // name and namespace, and kustomize (and Flux's post-renderer, which runs kustomize) fails
    // when no object has them ("no resource matches strategic merge patch"): a Component made
    // for another release name stops the build instead of adding nothing. A patch with a
    // target that selects nothing does nothing, silently, so only the JSON patches (which need
    // one) and the JSON merge patches of custom resources keep it, and they come after the
    // strategic patch of the same object, which fails first.
    let mut entries = vec![entry(
        Value::Mapping(patch),
        (!strategic).then_some(&target),
    )];
    if !ordered.is_empty() {
        entries.push(entry(Value::Sequence(ordered), Some(&target)));
    }
    Some(entries)
}

/// The files of `inject --kustomize DIR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// `kustomization.yaml`: a `kind: Component` with the patches (and `resources.yaml`).
    pub kustomization: String,
    /// `resources.yaml`: the objects to add, if any.
    pub resources: Option<String>,
    /// `flux-postrenderers.yaml`: the same patches as a HelmRelease `postRenderers` entry.
    pub flux: String,
}

/// Why the Component cannot be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot express the rewrite of {0} as a kustomize patch (no apiVersion, kind or name)")]
pub struct ComponentError(String);

const RESOURCES_FILE: &str = "resources.yaml";
const KUSTOMIZATION_FILE: &str = "kustomization.yaml";
const FLUX_FILE: &str = "flux-postrenderers.yaml";

impl Component {
    /// The Component for what `inject` did to a stream.
    pub fn build(injected: &Injected) -> Result<Component, ComponentError> {
        let mut patches = Vec::new();
        for rewrite in &injected.rewrites {
            let entries = patch_entries(rewrite).ok_or_else(|| {
                ComponentError(
                    rewrite
                        .after
                        .get("kind")
                        .and_then(Value::as_str)
                        .unwrap_or("an object")
                        .to_owned(),
                )
            })?;
            patches.extend(entries);
        }
        let mut notes = String::new();
        for warning in &injected.warnings {
            for line in warning.lines() {
                notes.push_str("# passmower-elector: warning: ");
                notes.push_str(line);
                notes.push('\n');
            }
        }
        let mut kustomization = Mapping::new();
        kustomization.insert(
            "apiVersion".into(),
            "kustomize.config.k8s.io/v1alpha1".into(),
        );
        kustomization.insert("kind".into(), "Component".into());
        let resources = (!injected.added.is_empty()).then(|| {
            let mut text = String::new();
            for object in &injected.added {
                text.push_str("---\n");
                text.push_str(&yaml::to_yaml(object));
            }
            text
        });
        if resources.is_some() {
            kustomization.insert(
                "resources".into(),
                Value::Sequence(vec![RESOURCES_FILE.into()]),
            );
        }
        kustomization.insert("patches".into(), Value::Sequence(patches.clone()));
        let targets = injected.targets.join(", ");
        let header = format!(
            "# Written by `passmower-elector inject --kustomize` {VERSION} for {targets}.\n\
             # A kustomize Component: list this directory under `components:` of the\n\
             # kustomization that holds (or renders, with helmCharts) Passmower's manifests.\n\
             # Regenerate it whenever the chart's version or values change. The patches\n\
             # name {targets}: a build over manifests without it fails (helm template\n\
             # with another release name names it otherwise).\n"
        );
        let mut flux_entry = Mapping::new();
        let mut kustomize = Mapping::new();
        kustomize.insert("patches".into(), Value::Sequence(patches));
        flux_entry.insert("kustomize".into(), Value::Mapping(kustomize));
        let mut flux = Mapping::new();
        flux.insert(
            "postRenderers".into(),
            Value::Sequence(vec![Value::Mapping(flux_entry)]),
        );
        Ok(Component {
            kustomization: format!(
                "{header}{notes}{}",
                yaml::to_yaml(&Value::Mapping(kustomization))
            ),
            resources,
            flux: format!(
                "# Flux: put `postRenderers` under the HelmRelease's `spec` (written by\n\
                 # `passmower-elector inject --kustomize` {VERSION} for {targets}). Post-renderers\n\
                 # can only patch, so apply {RESOURCES_FILE} beside the HelmRelease, e.g. from\n\
                 # the same Flux Kustomization. The patches name {targets}: set the\n\
                 # HelmRelease's spec.releaseName to the release name the manifests were\n\
                 # rendered with (Flux's default is <targetNamespace>-<name>), or the\n\
                 # post-renderer fails with \"no resource matches strategic merge patch\".\n{notes}{}",
                yaml::to_yaml(&Value::Mapping(flux))
            ),
        })
    }

    /// Writes the files into `dir` (created if missing), each one atomically, and removes a
    /// `resources.yaml` left from an earlier run that no longer has one. Returns the paths.
    pub fn write_to(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let mut written = Vec::new();
        let resources = dir.join(RESOURCES_FILE);
        match &self.resources {
            Some(text) => {
                atomic_file::write(&resources, text.as_bytes())?;
                written.push(resources);
            }
            None => match std::fs::remove_file(&resources) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            },
        }
        for (name, text) in [
            (FLUX_FILE, &self.flux),
            (KUSTOMIZATION_FILE, &self.kustomization),
        ] {
            let path = dir.join(name);
            atomic_file::write(&path, text.as_bytes())?;
            written.push(path);
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Value {
        serde_norway::from_str(text).unwrap()
    }

    #[test]
    fn keyed_lists_merge_by_key_and_delete_what_went() {
        let before = v("spec: {containers: [{name: a, image: x, env: [{name: A, value: '1'}, {name: B, value: '2'}]}], replicas: 1}");
        let after = v("spec: {containers: [{name: a, image: x, args: [y], env: [{name: B, value: '2'}, {name: C, value: '3'}]}, {name: s, image: z}], replicas: 1}");
        let patch = strategic_patch(&before, &after, true);
        assert_eq!(
            patch,
            v("spec: {containers: [{name: a, args: [y], env: [{name: C, value: '3'}, {name: A, $patch: delete}]}, {name: s, image: z}]}")
        );
    }

    #[test]
    fn removed_fields_become_null_and_other_lists_are_replaced() {
        let before = v("a: {b: 1, c: [1, 2]}\nd: 1");
        let after = v("a: {c: [1, 2, 3]}\nd: 1");
        assert_eq!(
            strategic_patch(&before, &after, true),
            v("a: {b: null, c: [1, 2, 3]}")
        );
        // Without strategic merge even a keyed-looking list is replaced whole.
        let before = v("containers: [{name: a}]");
        let after = v("containers: [{name: a}, {name: b}]");
        assert_eq!(strategic_patch(&before, &after, false), after);
    }
}
