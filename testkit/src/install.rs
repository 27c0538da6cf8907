//! What the install pages' tests share (tests/api/install_*.rs, tests/node/k3s_node.rs): the
//! tested blocks of a page, objects on the server as kubectl prints them, the charts' NOTES,
//! stand-ins for the controllers no test runs (their CRDs schema-less, one of their passes
//! beside a block, k3s's helm-controller in [`helm_controller`]), and the record of what each
//! test ran (tool and server versions) from which `scripts/write-install-compatibility.sh`
//! writes docs/results/install-compatibility.md. What needs the product's own names (the
//! elector container, the replica guard's message) is in the tests' `product::install`.

pub mod helm_controller;

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

use crate::tools::{tested_blocks, Helm, Ran, Sandbox, UPSTREAM_VERSION};

/// The sidecar image the install pages set: the released one, by tag.
pub const DOCS_IMAGE: &str = "ghcr.io/passmower/passmower-elector:0.1.0";

/// The fenced block after `<!-- tested: NAME -->` in `markdown`; panics when there is none.
pub fn block(markdown: &str, name: &str) -> String {
    tested_blocks(markdown)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, body)| body)
        .unwrap_or_else(|| panic!("no block marked `<!-- tested: {name} -->`"))
}

/// The names of the tested blocks of `markdown`, in order.
pub fn block_names(markdown: &str) -> Vec<String> {
    tested_blocks(markdown)
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// `kubectl get KIND NAME -o json` in namespace `ns` (`""`: a cluster-scoped object), or
/// `None` when it is not there.
pub fn get(sandbox: &Sandbox, ns: &str, what: &str) -> Option<Value> {
    let namespace = if ns.is_empty() {
        String::new()
    } else {
        format!("-n {ns} ")
    };
    let ran = sandbox.bash(
        &format!("kubectl {namespace}get {what} -o json"),
        Duration::from_secs(60),
    );
    if !ran.success {
        assert!(
            ran.stderr.contains("NotFound") || ran.stderr.contains("not found"),
            "kubectl get {what}: {}",
            ran.stderr
        );
        return None;
    }
    Some(serde_json::from_str(&ran.stdout).expect("kubectl printed JSON"))
}

/// Passmower's Deployment in `ns`; panics when it is missing.
pub fn deployment(sandbox: &Sandbox, ns: &str) -> Value {
    get(sandbox, ns, "deployment passmower").expect("Passmower's Deployment")
}

/// The admission policies and bindings passmower-elector makes for an install (write fence,
/// replica guard, pod guard, idle-namespace policy), as `Kind/name`,
/// sorted; not the webhook chart's own.
pub fn policies(sandbox: &Sandbox) -> Vec<String> {
    let ran = sandbox.ok(
        "kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings \
         -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}{\"\\n\"}{end}'",
    );
    let mut names: Vec<String> = ran
        .stdout
        .lines()
        .filter(|l| {
            ["fence.", "guard.", "pod-guard.", "inject.", "chart."]
                .iter()
                .any(|kind| l.contains(&format!("/passmower-elector-{kind}")))
        })
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

/// One row of the install compatibility table: a test that ran an install path with these
/// tools, written as a JSON line into `$PME_INSTALL_RECORD/<test>.json` when that variable is
/// set (`scripts/write-install-compatibility.sh` sets it and renders the rows).
pub struct Record {
    pub path: &'static str,
    /// The test's tier, the binary `cargo test --test TIER` runs (`api`, `node`).
    pub tier: &'static str,
    /// The test as that binary names it: `module::function`.
    pub test: &'static str,
    pub helm: Option<Helm>,
    pub kustomize: bool,
    /// `Some` on a real node: the kubelet's version.
    pub kubelet: Option<String>,
    /// What the test ran beyond the apiserver, in a few words.
    pub ran: &'static str,
}

impl Record {
    /// Writes the record, with the versions read from the tools in `sandbox` and the server
    /// it talks to, when `PME_INSTALL_RECORD` names a directory.
    pub fn write(&self, sandbox: &Sandbox) {
        let Some(dir) = std::env::var_os("PME_INSTALL_RECORD").map(PathBuf::from) else {
            return;
        };
        let helm = self.helm.map(|_| {
            sandbox
                .ok("helm version --template '{{.Version}}'")
                .stdout
                .trim()
                .to_owned()
        });
        let kustomize = self
            .kustomize
            .then(|| sandbox.ok("kustomize version").stdout.trim().to_owned());
        let server = sandbox.ok("kubectl version -o json").stdout;
        let server: Value = serde_json::from_str(&server).expect("kubectl version JSON");
        let row = json!({
            "path": self.path,
            "tier": self.tier,
            "test": self.test,
            "helm": helm,
            "kustomize": kustomize,
            "apiserver": server["serverVersion"]["gitVersion"],
            "kubectl": server["clientVersion"]["gitVersion"],
            "kubelet": self.kubelet,
            "passmower_chart": UPSTREAM_VERSION,
            "passmower_generation": std::env::var("PME_PASSMOWER_GENERATION")
                .ok()
                .filter(|g| !g.is_empty())
                .unwrap_or_else(|| "1.3".into()),
            "arch": std::env::consts::ARCH,
            "ran": self.ran,
        });
        std::fs::create_dir_all(&dir).expect("PME_INSTALL_RECORD dir");
        let file = dir.join(format!("{}.json", self.test));
        let mut out = std::fs::File::create(&file).expect("record file");
        writeln!(out, "{row}").expect("write record");
    }
}

/// The indented command lines after `header` in a chart's NOTES, up to the next unindented
/// line (Helm prints NOTES indented, so they run in bash as printed).
pub fn notes_block(notes: &str, header: &str) -> String {
    let start = notes
        .find(header)
        .unwrap_or_else(|| panic!("NOTES have no {header:?}:\n{notes}"));
    let mut out = String::new();
    for line in notes[start..].lines().skip(1) {
        if line.trim().is_empty() {
            if out.is_empty() {
                continue;
            }
            break;
        }
        assert!(line.starts_with("  "), "not a command line: {line:?}");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// What follows `NOTES:` in what helm printed.
pub fn notes_of(helm_output: &str) -> String {
    helm_output
        .split_once("NOTES:\n")
        .map(|(_, n)| n.to_owned())
        .unwrap_or_else(|| panic!("helm printed no NOTES:\n{helm_output}"))
}

/// A schema-less CustomResourceDefinition standing in for a controller's own (Flux, Argo CD,
/// helm-controller: none runs here), so the apiserver stores the objects a page applies.
/// What it does not check, the controller's own validation, the page says it did not run.
pub fn stand_in_crd(sandbox: &Sandbox, group: &str, version: &str, kind: &str, plural: &str) {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "versions": [{
                "name": version, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    });
    sandbox.ok(&format!(
        "kubectl apply -f - <<'EOF'\n{crd}\nEOF\n\
         kubectl wait --for=condition=Established --timeout=60s crd/{plural}.{group}"
    ));
}

/// The objects of a YAML stream (`kind`, `metadata.namespace` or `default_namespace` for a
/// namespaced one, `metadata.name`), for pruning what a controller no longer renders.
pub fn object_keys(yaml: &str, default_namespace: &str) -> Vec<(String, String, String)> {
    let cluster_scoped = [
        "Namespace",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingWebhookConfiguration",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
    ];
    serde_norway::Deserializer::from_str(yaml)
        .filter_map(|d| serde::Deserialize::deserialize(d).ok())
        .filter_map(|d: Value| {
            let kind = d["kind"].as_str()?.to_owned();
            let name = d["metadata"]["name"].as_str()?.to_owned();
            let namespace = if cluster_scoped.contains(&kind.as_str()) {
                String::new()
            } else {
                d["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or(default_namespace)
                    .to_owned()
            };
            Some((kind, namespace, name))
        })
        .collect()
}

/// `kubectl delete` of each object, as a controller prunes what it no longer renders.
pub fn delete_objects(sandbox: &Sandbox, objects: &[(String, String, String)]) {
    for (kind, namespace, name) in objects {
        let ns = if namespace.is_empty() {
            String::new()
        } else {
            format!("-n {namespace} ")
        };
        sandbox.ok(&format!(
            "kubectl {ns}delete {kind} {name} --ignore-not-found --wait=false"
        ));
    }
}

/// Runs `script` (a page's block) while `reconcile` — one pass of a controller that no test
/// can run here (helm-controller, Argo CD), done by the test — runs beside it every 300 ms, as
/// the controller would, so a `kubectl wait` in the block waits for it. A pass's failures are
/// printed and left to the next pass, as the controller retries. Panics unless the block
/// succeeds.
pub fn run_beside(
    sandbox: &Sandbox,
    script: &str,
    mut reconcile: impl FnMut() -> Vec<(String, Ran)> + Send,
) {
    let stop = AtomicBool::new(false);
    let ran = std::thread::scope(|scope| {
        let controller = scope.spawn(|| {
            // Bounded: the block's own limit (600 s) ends it first.
            for _ in 0..3000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                for (name, ran) in reconcile() {
                    if !ran.success {
                        eprintln!("{name}: failed, retried on the next pass: {}", ran.stderr);
                    }
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        let ran = sandbox.bash(script, Duration::from_secs(600));
        stop.store(true, Ordering::Relaxed);
        controller.join().expect("the controller thread");
        ran
    });
    assert!(
        ran.success,
        "failed:\n{script}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        ran.stdout, ran.stderr
    );
}

/// Passes of `reconcile` until one has no failure (at most five: a controller retries, and a
/// sync that waits on another, such as a namespace another creates, succeeds on a later
/// pass); panics with the last failures otherwise.
pub fn settle(mut reconcile: impl FnMut() -> Vec<(String, Ran)>) {
    let mut failures = Vec::new();
    for _ in 0..5 {
        failures = reconcile()
            .into_iter()
            .filter(|(_, ran)| !ran.success)
            .map(|(name, ran)| format!("{name}: {}", ran.stderr))
            .collect();
        if failures.is_empty() {
            return;
        }
    }
    panic!("still failing after five passes:\n{}", failures.join("\n"));
}
