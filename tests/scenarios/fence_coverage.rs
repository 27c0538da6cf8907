//! The write fence covers every write Passmower's operators make, in every generation: each
//! tree's `src/operators/*.js` (under `../shared/upstream/`) is read for its calls to the
//! Kubernetes adapter, each write is named as the admission request it becomes (group,
//! resource, operation), and the policy `inject` emits must match it. An operator write no rule
//! matches is one a cut-off or thawed leader could still land; an adapter method this test
//! does not know fails it too, so a new kind of write is looked at, not passed over.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::api::admissionregistration::v1::NamedRuleWithOperations;
use passmower_elector::inject::fence::fence_policy_spec;
use pme_testkit::node::passmower::Generation;

/// One admission request: API group, resource (with `/status` for the subresource), operation.
type Write = (String, String, &'static str);

/// Adapter methods that read or watch: no admission request.
const READS: &[&str] = &[
    "getNamespacedCustomObject",
    "getSecret",
    "listNamespacedCustomObject",
    "setWatchParameters",
    "stopWatching",
    "watchObjects",
];

/// Adapter writes whose first argument is a kind constant: the operation and whether it is
/// the status subresource.
fn custom_object_write(method: &str) -> Option<(&'static str, bool)> {
    Some(match method {
        "createNamespacedCustomObject" => ("CREATE", false),
        "patchNamespacedCustomObject" => ("UPDATE", false),
        "deleteNamespacedCustomObject" => ("DELETE", false),
        "replaceNamespacedCustomObjectStatus" | "mutateNamespacedCustomObjectStatus" => {
            ("UPDATE", true)
        }
        _ => return None,
    })
}

/// Adapter writes of core and batch objects: group, resource, operation.
fn typed_write(method: &str) -> Option<(&'static str, &'static str, &'static str)> {
    Some(match method {
        "createSecret" => ("", "secrets", "CREATE"),
        "patchSecret" => ("", "secrets", "UPDATE"),
        "deleteSecret" => ("", "secrets", "DELETE"),
        "createPod" => ("", "pods", "CREATE"),
        "createJob" => ("batch", "jobs", "CREATE"),
        // Deliberately unfenced (see `fenced_rules`): Events change nothing an operator reads,
        // and the elector writes its own under the same ServiceAccount.
        "createEvent" => ("", "events", "CREATE"),
        _ => return None,
    })
}

/// `export const NAME = 'value'` of the tree's kube-constants.js.
fn constants(tree: &Path) -> BTreeMap<String, String> {
    let path = tree.join("src/utils/kubernetes/kube-constants.js");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("export const ")?;
            let (name, value) = rest.split_once('=')?;
            let value = value.trim().trim_end_matches(';').trim();
            let value = value.strip_prefix('\'')?.strip_suffix('\'')?;
            Some((name.trim().to_owned(), value.to_owned()))
        })
        .collect()
}

/// The plural of the kind constant `kind` (`OIDCClientCrd` → `oidcclients`): through the
/// tree's `plurals` map where it has one, else its naming rule (`XCrd` → `Xs`, `X` → `Xs`).
fn plural(tree: &Path, consts: &BTreeMap<String, String>, kind: &str) -> String {
    let path = tree.join("src/utils/kubernetes/kube-constants.js");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mapped = text.lines().find_map(|l| {
        let (key, value) = l.trim().split_once(':')?;
        (key.trim() == format!("[{kind}]")).then(|| value.trim().trim_end_matches(',').to_owned())
    });
    let name = mapped.unwrap_or_else(|| format!("{}s", kind.strip_suffix("Crd").unwrap_or(kind)));
    consts
        .get(&name)
        .unwrap_or_else(|| panic!("{}: no constant {name} for kind {kind}", path.display()))
        .clone()
}

/// Every adapter call in the tree's operators: `(file, method, first argument)`.
fn adapter_calls(tree: &Path) -> Vec<(String, String, String)> {
    let dir = tree.join("src/operators");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("read_dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "js"))
        .collect();
    files.sort();
    let mut calls = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("an operator's source");
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for (at, _) in text.match_indices("this.adapter.") {
            let rest = &text[at + "this.adapter.".len()..];
            let method: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
            let Some(args) = rest[method.len()..].strip_prefix('(') else {
                continue;
            };
            let first: String = args
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                .collect();
            calls.push((name.clone(), method, first));
        }
    }
    calls
}

/// The operator writes of `generation`'s tree, each with where it was found.
fn operator_writes(generation: Generation) -> BTreeMap<Write, BTreeSet<String>> {
    let tree = pme_testkit::repo()
        .join("../shared/upstream")
        .join(generation.folder());
    let consts = constants(&tree);
    let traefik_group = consts
        .get("TraefikMiddlewareApiGroup")
        .cloned()
        .unwrap_or_else(|| "traefik.io".to_owned());
    let mut writes: BTreeMap<Write, BTreeSet<String>> = BTreeMap::new();
    let calls = adapter_calls(&tree);
    assert!(
        !calls.is_empty(),
        "{}: no adapter call found in src/operators",
        tree.display()
    );
    for (file, method, first) in calls {
        let where_ = format!("{file}: {method}({first}…)");
        let write = if let Some((op, status)) = custom_object_write(&method) {
            let group = if first.starts_with("Traefik") {
                traefik_group.clone()
            } else {
                "codemowers.cloud".to_owned()
            };
            let resource = plural(&tree, &consts, &first);
            let resource = if status {
                format!("{resource}/status")
            } else {
                resource
            };
            (group, resource, op)
        } else if let Some((group, resource, op)) = typed_write(&method) {
            (group.to_owned(), resource.to_owned(), op)
        } else {
            assert!(
                READS.contains(&method.as_str()),
                "Passmower {}: {where_} is an adapter method this test does not know: say \
                 whether it writes, and what",
                generation.name()
            );
            continue;
        };
        writes.entry(write).or_default().insert(where_);
    }
    writes
}

fn matches(rule: &NamedRuleWithOperations, (group, resource, op): &Write) -> bool {
    let has = |list: &Option<Vec<String>>, want: &str| {
        list.as_ref()
            .is_some_and(|l| l.iter().any(|x| x == "*" || x == want))
    };
    has(&rule.api_groups, group) && has(&rule.resources, resource) && has(&rule.operations, op)
}

#[test]
fn every_operator_write_of_every_generation_is_fenced() {
    let spec = fence_policy_spec("ns", "passmower");
    let rules = spec
        .match_constraints
        .and_then(|m| m.resource_rules)
        .expect("the fence policy has resource rules");
    let mut unfenced = Vec::new();
    let mut seen = BTreeSet::new();
    for generation in Generation::ALL {
        for (write, places) in operator_writes(generation) {
            seen.insert(write.clone());
            let (_, resource, _) = &write;
            if resource == "events" {
                continue;
            }
            if !rules.iter().any(|r| matches(r, &write)) {
                unfenced.push(format!(
                    "Passmower {}: {write:?} from {places:?}",
                    generation.name()
                ));
            }
        }
    }
    assert!(
        unfenced.is_empty(),
        "operator writes no rule of the write fence matches:\n{}",
        unfenced.join("\n")
    );
    // The reading found what the generations are known to write: the 2.x Jobs and ingress
    // discovery's OIDCClients among them, so a reader that finds nothing cannot pass.
    for want in [
        ("batch", "jobs", "CREATE"),
        ("codemowers.cloud", "oidcclients", "DELETE"),
        ("codemowers.cloud", "oidcclients/status", "UPDATE"),
        ("codemowers.cloud", "oidcusereventhooks/status", "UPDATE"),
        ("codemowers.cloud", "scimconnections/status", "UPDATE"),
        ("", "pods", "CREATE"),
        ("", "secrets", "DELETE"),
        ("traefik.io", "middlewares", "CREATE"),
    ] {
        let want = (want.0.to_owned(), want.1.to_owned(), want.2);
        assert!(
            seen.contains(&want),
            "no operator write {want:?} found: {seen:?}"
        );
    }
}

/// What every replica's HTTP side writes (logins, the SCIM endpoint) stays unfenced: fencing it
/// would break sign-ins on followers.
#[test]
fn what_the_http_side_writes_is_not_fenced() {
    let rules = fence_policy_spec("ns", "passmower")
        .match_constraints
        .and_then(|m| m.resource_rules)
        .expect("the fence policy has resource rules");
    for (resource, op) in [
        ("oidcusers", "CREATE"),
        ("oidcusers", "UPDATE"),
        ("oidcusers/status", "UPDATE"),
        ("scimsubjects", "CREATE"),
        ("scimsubjects", "UPDATE"),
        ("scimgroups/status", "UPDATE"),
    ] {
        let write = ("codemowers.cloud".to_owned(), resource.to_owned(), op);
        assert!(
            !rules.iter().any(|r| matches(r, &write)),
            "{write:?} is fenced, but followers make it while serving"
        );
    }
}
