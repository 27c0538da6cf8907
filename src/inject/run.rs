//! One `inject` run over a stream: finds the targets (the items of a `kind: List` too), rewrites
//! them, puts their companions after them, and writes every other document back byte for byte.

use serde_norway::{Mapping, Value};

use crate::inject::companions::decide::Companions;
use crate::inject::companions::guard;
use crate::inject::companions::monitor;
use crate::inject::error::InjectError;
use crate::inject::names::VERSION;
use crate::inject::native_election::PassmowerElection;
use crate::inject::options::{AppOnChange, InjectOptions};
use crate::inject::pod_spec::workload;
use crate::inject::target;
use crate::inject::yaml;

/// One object `inject` rewrote, as it was and as it is now: what a kustomize patch is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewrite {
    pub before: Value,
    pub after: Value,
}

/// The result of a successful injection.
#[derive(Debug, Clone, PartialEq)]
pub struct Injected {
    /// The rewritten stream.
    pub output: String,
    /// `Kind/name` of each targeted workload, in stream order.
    pub targets: Vec<String>,
    /// Things the operator should know that do not stop the injection.
    pub warnings: Vec<String>,
    /// Every object rewritten (workloads, PodMonitors), in stream order.
    pub rewrites: Vec<Rewrite>,
    /// Every object added (Role, RoleBinding, PodDisruptionBudget, admission policies).
    pub added: Vec<Value>,
}

/// Injects the elector into every target of `input`; see [`inject`].
pub fn inject_str(input: &str, opts: &InjectOptions) -> Result<String, InjectError> {
    inject(input, opts).map(|i| i.output)
}

/// An object `inject` writes, with the warnings that go above it as comments.
struct Written {
    value: Value,
    notes: Vec<String>,
}

/// What became of one object of the stream.
enum Outcome {
    /// Written back as it was.
    Unchanged,
    /// Rewritten in place.
    Replaced(Written),
}

/// The state of one `inject` run over a stream.
struct Run<'a> {
    opts: &'a InjectOptions,
    /// The companion objects: what the stream holds, what was emitted so far.
    companions: Companions<'a>,
    /// Namespace and pod labels of each target, for the PodMonitors that select them.
    target_pods: Vec<(Option<String>, Mapping)>,
    targets: Vec<String>,
    warnings: Vec<String>,
    rewrites: Vec<Rewrite>,
    added: Vec<Value>,
}

/// The objects of a document: itself, or the items of a `kind: List`.
fn objects(value: &Value) -> Vec<&Value> {
    match list_items(value) {
        Some(items) => items.iter().collect(),
        None => vec![value],
    }
}

/// The items of a `v1` `List` (what `kubectl get -o yaml` prints for several objects).
fn list_items(value: &Value) -> Option<&Vec<Value>> {
    if value.get("kind")?.as_str()? != "List" || value.get("apiVersion")?.as_str()? != "v1" {
        return None;
    }
    value.get("items")?.as_sequence()
}

impl Run<'_> {
    /// Rewrites one object; its companions (RBAC, budget, policy) go to `companions`.
    fn object(
        &mut self,
        value: &Value,
        document: usize,
        companions: &mut Vec<Written>,
    ) -> Result<Outcome, InjectError> {
        let opts = self.opts;
        let leader_app = opts.app_on_change() == AppOnChange::LeaderInstance;
        if let Some(changed) = monitor::add_elector_endpoint(value, &self.target_pods, leader_app) {
            self.rewrites.push(Rewrite {
                before: value.clone(),
                after: changed.clone(),
            });
            return Ok(Outcome::Replaced(Written {
                value: changed,
                notes: Vec::new(),
            }));
        }
        let Some(target) = target::Target::find(value, document, opts)? else {
            return Ok(Outcome::Unchanged);
        };
        let workload = target.describe();
        let fence_only = opts.passmower_election == PassmowerElection::FenceOnly;
        let (outcome, info) = match &target.injected_by {
            Some(_)
                if (target.election_annotation.as_deref() == Some("fence-only")) != fence_only =>
            {
                return Err(InjectError::Manifest {
                    document,
                    workload,
                    reason: format!(
                        "was injected {} and is asked for --passmower-election={}: inject the \
                         original manifests (the chart's output) again",
                        if fence_only {
                            "with the elector"
                        } else {
                            "with --passmower-election=fence-only"
                        },
                        opts.passmower_election.as_str()
                    ),
                })
            }
            Some(found) if compatible(found, VERSION) => (Outcome::Unchanged, target.clone()),
            Some(found) => {
                return Err(InjectError::IncompatibleVersion {
                    document,
                    workload,
                    found: found.clone(),
                    ours: VERSION.into(),
                })
            }
            None => {
                let mut rewritten = value.clone();
                let mut info = target.clone();
                let mut notes: Vec<String> = if fence_only {
                    Vec::new()
                } else {
                    let namespace = if opts.workload_only {
                        None
                    } else {
                        self.companions.namespace_of(&info)?
                    };
                    guard::left_out(opts, &workload, namespace.as_deref())
                        .into_iter()
                        .collect()
                };
                if fence_only {
                    workload::rewrite_fence_only(&mut rewritten, &mut info, opts, &mut notes)?;
                } else {
                    workload::rewrite(&mut rewritten, &info, opts, &mut notes)?;
                }
                self.rewrites.push(Rewrite {
                    before: value.clone(),
                    after: rewritten.clone(),
                });
                self.warnings.extend(notes.iter().cloned());
                (
                    Outcome::Replaced(Written {
                        value: rewritten,
                        notes,
                    }),
                    info,
                )
            }
        };
        self.targets.push(workload.clone());

        let already_injected = matches!(outcome, Outcome::Unchanged);
        for companion in self.companions.for_target(&info, value, already_injected)? {
            self.warnings.extend(companion.notes.iter().cloned());
            self.added.push(companion.value.clone());
            companions.push(Written {
                value: companion.value,
                notes: companion.notes,
            });
        }
        Ok(outcome)
    }
}

/// Injects the elector into every target of `input`, returning the whole new stream.
pub fn inject(input: &str, opts: &InjectOptions) -> Result<Injected, InjectError> {
    opts.validate()?;
    let documents = yaml::parse_stream(input)?;

    let mut run = Run {
        opts,
        companions: Companions::new(opts),
        target_pods: Vec::new(),
        targets: Vec::new(),
        warnings: Vec::new(),
        rewrites: Vec::new(),
        added: Vec::new(),
    };
    // First pass: what the stream already holds, and which pods are targets (a PodMonitor
    // may come before the workload it selects).
    for doc in &documents {
        for object in objects(&doc.value) {
            run.companions.note(object);
            if let Some(target) = target::Target::find(object, doc.number, opts)? {
                run.target_pods.push(target.pod_labels());
            }
        }
    }

    let mut out = String::with_capacity(input.len() * 2);
    for doc in &documents {
        let mut companions = Vec::new();
        if let Some(items) = list_items(&doc.value) {
            let mut new_items = Vec::with_capacity(items.len());
            let mut notes = Vec::new();
            let mut changed = false;
            for item in items {
                match run.object(item, doc.number, &mut companions)? {
                    Outcome::Unchanged => new_items.push(item.clone()),
                    Outcome::Replaced(written) => {
                        changed = true;
                        notes.extend(written.notes);
                        new_items.push(written.value);
                    }
                }
            }
            if !changed && companions.is_empty() {
                out.push_str(&doc.text);
                continue;
            }
            // A List stays one List: its companions become items too.
            for companion in companions {
                notes.extend(companion.notes);
                new_items.push(companion.value);
            }
            let mut list = doc.value.clone();
            if let Some(map) = list.as_mapping_mut() {
                map.insert("items".into(), Value::Sequence(new_items));
            }
            out.push_str(&doc.preamble());
            push_notes(&mut out, &notes);
            out.push_str(&yaml::to_yaml(&list));
            continue;
        }
        match run.object(&doc.value, doc.number, &mut companions)? {
            Outcome::Unchanged => out.push_str(&doc.text),
            Outcome::Replaced(written) => {
                out.push_str(&doc.preamble());
                push_notes(&mut out, &written.notes);
                out.push_str(&yaml::to_yaml(&written.value));
            }
        }
        for companion in companions {
            push_document(&mut out, &companion);
        }
    }

    if run.targets.is_empty() && !opts.allow_none {
        return Err(InjectError::NoTarget {
            kinds: opts
                .kinds
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(" or "),
            container: opts.container.clone(),
        });
    }
    Ok(Injected {
        output: out,
        targets: run.targets,
        warnings: run.warnings,
        rewrites: run.rewrites,
        added: run.added,
    })
}

/// Writes warnings as comments, where `helm template`, `helm get manifest` and a reviewer of
/// the rendered YAML see them.
fn push_notes(out: &mut String, notes: &[String]) {
    for note in notes {
        for line in note.lines() {
            out.push_str("# passmower-elector: warning: ");
            out.push_str(line);
            out.push('\n');
        }
    }
}

/// Appends a generated document, making sure the previous one ended its last line.
fn push_document(out: &mut String, written: &Written) {
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("---\n");
    push_notes(out, &written.notes);
    out.push_str(&yaml::to_yaml(&written.value));
}

/// Whether a workload injected by version `found` can be left as it is by version `ours`: the
/// injected shape (flags, volumes, paths) only changes with the minor version before 1.0 and
/// with the major version after.
pub fn compatible(found: &str, ours: &str) -> bool {
    fn line(v: &str) -> Option<(u64, u64)> {
        let mut parts = v.trim().trim_start_matches('v').split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(if major == 0 { (0, minor) } else { (major, 0) })
    }
    matches!((line(found), line(ours)), (Some(a), Some(b)) if a == b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_compatibility_follows_semver_lines() {
        assert!(compatible("0.1.0", "0.1.7"));
        assert!(!compatible("0.2.0", "0.1.0"));
        assert!(compatible("1.2.0", "1.9.1"));
        assert!(!compatible("2.0.0", "1.0.0"));
        assert!(!compatible("garbage", "0.1.0"));
    }

    #[test]
    fn list_items_only_of_a_v1_list() {
        let list: Value =
            serde_norway::from_str("apiVersion: v1\nkind: List\nitems: [{a: 1}]\n").unwrap();
        assert_eq!(list_items(&list).map(Vec::len), Some(1));
        let other: Value =
            serde_norway::from_str("apiVersion: x/v1\nkind: List\nitems: [{a: 1}]\n").unwrap();
        assert!(list_items(&other).is_none());
    }
}
