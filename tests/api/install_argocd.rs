//! The Argo CD page (docs/install/argocd.md) as written against a real kube-apiserver, with
//! what Argo CD does with its `Application`s done by the test beside each block (no Argo CD
//! runs here; its CRD stands in schema-less): for each new or changed `Application`, `helm
//! template` of its source — a chart of the OCI Helm repository, which must be declared by a
//! repository Secret with `enableOCI` (the sandbox's registry stand-in serves the upstream
//! chart and the released passmower-elector charts) — with its `releaseName`, `valuesObject`, destination namespace and the
//! apiserver's version, hooks left out; the namespace created with `managedNamespaceMetadata`
//! when `CreateNamespace=true`, a sync failure when the namespace is missing otherwise; then
//! `kubectl apply` of the result. An `Application` deleted with the resources finalizer has
//! what it applied deleted, then the finalizer removed.
//!
//! What it shows: the namespace exists, labelled, before Passmower's Deployment; the replica
//! guard admits two replicas there; upgrade and removal leave what the page says.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::product::install::replicas_and_elector_image;
use pme_testkit::install::{
    block, get, object_keys, policies, run_beside, settle, stand_in_crd, Record,
};
use pme_testkit::tools::{released_image, Helm, Ran, Sandbox};
use pme_testkit::Cluster;
use serde_json::Value;

const ARGOCD: &str = include_str!("../../docs/install/argocd.md");
const FINALIZER: &str = "resources-finalizer.argocd.argoproj.io";

/// What Argo CD last synced, per Application: its spec and the objects it applied.
type Synced = BTreeMap<String, (Value, Vec<(String, String, String)>)>;

/// One pass over the Applications of namespace `argocd`.
fn reconcile(sandbox: &Sandbox, synced: &mut Synced) -> Vec<(String, Ran)> {
    let list = sandbox.bash(
        "kubectl -n argocd get applications -o json",
        Duration::from_secs(60),
    );
    if !list.success {
        return vec![("list".into(), list)];
    }
    let list: Value = serde_json::from_str(&list.stdout).expect("JSON");
    let mut ran = Vec::new();
    let mut present = Vec::new();
    for app in list["items"].as_array().expect("items") {
        let name = app["metadata"]["name"].as_str().expect("name").to_owned();
        present.push(name.clone());
        if app["metadata"].get("deletionTimestamp").is_some() {
            let finalizers = app["metadata"]["finalizers"].to_string();
            if finalizers.contains(FINALIZER) {
                let applied = synced.remove(&name).map(|(_, o)| o).unwrap_or_default();
                pme_testkit::install::delete_objects(sandbox, &applied);
                ran.push((
                    name.clone(),
                    sandbox.bash(
                        &format!(
                            "kubectl -n argocd patch application {name} --type=json \
                             -p '[{{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}}]'"
                        ),
                        Duration::from_secs(60),
                    ),
                ));
            }
            continue;
        }
        if synced.get(&name).map(|(spec, _)| spec) == Some(&app["spec"]) {
            continue;
        }
        let (result, objects) = sync(sandbox, app);
        if result.success {
            synced.insert(name.clone(), (app["spec"].clone(), objects));
        }
        ran.push((name, result));
    }
    // Deleted without the finalizer: Argo CD leaves what it applied.
    synced.retain(|name, _| present.contains(name));
    ran
}

fn failed(why: String) -> Ran {
    Ran {
        success: false,
        stdout: String::new(),
        stderr: why,
    }
}

/// One sync of `app`: render its source, create its namespace if asked, apply.
fn sync(sandbox: &Sandbox, app: &Value) -> (Ran, Vec<(String, String, String)>) {
    let name = app["metadata"]["name"].as_str().expect("name");
    let spec = &app["spec"];
    let source = &spec["source"];
    let namespace = spec["destination"]["namespace"]
        .as_str()
        .expect("namespace");
    let repo = source["repoURL"].as_str().expect("repoURL");
    let revision = source["targetRevision"].as_str().unwrap_or("HEAD");
    let Some(chart) = source["chart"].as_str() else {
        return (
            failed(format!(
                "{repo}: a Git source; the page's are Helm repositories"
            )),
            Vec::new(),
        );
    };
    // An OCI Helm repository, only when declared with enableOCI.
    let secrets = sandbox
        .ok("kubectl -n argocd get secrets -l argocd.argoproj.io/secret-type=repository -o json")
        .stdout;
    let secrets: Value = serde_json::from_str(&secrets).expect("JSON");
    let declared = secrets["items"].as_array().expect("items").iter().any(|s| {
        let field = |k: &str| {
            s["data"][k]
                .as_str()
                .map(|v| decode(sandbox, v))
                .unwrap_or_default()
        };
        field("url") == repo && field("enableOCI") == "true" && field("type") == "helm"
    });
    if !declared {
        return (
            failed(format!("{repo}: no Helm OCI repository declared")),
            Vec::new(),
        );
    }
    let chart = format!("oci://{repo}/{chart} --version {revision}");
    let options = spec["syncPolicy"]["syncOptions"].to_string();
    let exists = get(sandbox, "", &format!("namespace {namespace}")).is_some();
    if !exists && !options.contains("CreateNamespace=true") {
        return (
            failed(format!("namespaces \"{namespace}\" not found")),
            Vec::new(),
        );
    }
    if options.contains("CreateNamespace=true") {
        let mut setup = String::new();
        if !exists {
            setup.push_str(&format!("kubectl create namespace {namespace}\n"));
        }
        if let Some(labels) = spec["syncPolicy"]["managedNamespaceMetadata"]["labels"].as_object() {
            for (k, v) in labels {
                setup.push_str(&format!(
                    "kubectl label namespace {namespace} {k}={} --overwrite\n",
                    v.as_str().unwrap_or_default()
                ));
            }
        }
        if !setup.is_empty() {
            let ran = sandbox.bash(&setup, Duration::from_secs(60));
            if !ran.success {
                return (ran, Vec::new());
            }
        }
    }
    let dir = sandbox.root().join(".argocd").join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let values = dir.join("values.json");
    std::fs::write(&values, source["helm"]["valuesObject"].to_string()).expect("values");
    let release = source["helm"]["releaseName"].as_str().unwrap_or(name);
    let rendered = dir.join("rendered.yaml");
    let ran = sandbox.bash(
        &format!(
            "kube=$(kubectl version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"serverVersion\"][\"gitVersion\"])')\n\
             helm template {release} {chart} --namespace {namespace} --kube-version \"$kube\" \
               --values {values} --no-hooks >{rendered}\n\
             kubectl apply -n {namespace} -f {rendered}",
            values = values.display(),
            rendered = rendered.display(),
        ),
        Duration::from_secs(300),
    );
    let objects = std::fs::read_to_string(&rendered)
        .map(|r| object_keys(&r, namespace))
        .unwrap_or_default();
    (ran, objects)
}

fn decode(sandbox: &Sandbox, base64: &str) -> String {
    sandbox
        .ok(&format!("printf %s '{base64}' | base64 -d"))
        .stdout
}

#[test]
fn the_argocd_page_installs_upgrades_and_removes_as_argocd_syncs_it() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(Helm::V3, &cluster.admin_kubeconfig());
    // Argo CD is installed: its namespace and (a stand-in for) its CRD.
    sandbox.ok("kubectl create namespace argocd");
    stand_in_crd(
        &sandbox,
        "argoproj.io",
        "v1alpha1",
        "Application",
        "applications",
    );
    let mut synced = Synced::new();
    let mut beside = |script: &str| {
        run_beside(&sandbox, script, || reconcile(&sandbox, &mut synced));
        settle(|| reconcile(&sandbox, &mut synced));
    };

    beside(&block(ARGOCD, "argocd-webhook"));
    sandbox.ok("kubectl get mutatingwebhookconfiguration passmower-elector-webhook");
    let webhook_image = || {
        get(
            &sandbox,
            "passmower-elector-system",
            "deployment passmower-elector-webhook",
        )
        .expect("webhook")["spec"]["template"]["spec"]["containers"][0]["image"]
            .clone()
    };
    // The released chart names the image released with it.
    assert_eq!(webhook_image(), released_image("0.1.0").as_str());
    beside(&block(ARGOCD, "argocd"));
    let ns = get(&sandbox, "", "namespace passmower").expect("namespace");
    assert_eq!(
        ns["metadata"]["labels"]["passmower-elector.io/inject"],
        "enabled"
    );
    assert_eq!(replicas_and_elector_image(&sandbox, "passmower"), (2, None));
    // The namespace was labelled before the Deployment existed: creation times.
    let deployment = pme_testkit::install::deployment(&sandbox, "passmower");
    assert!(
        ns["metadata"]["creationTimestamp"].as_str()
            <= deployment["metadata"]["creationTimestamp"].as_str()
    );
    assert!(
        policies(&sandbox).contains(
            &"ValidatingAdmissionPolicy/passmower-elector-guard.passmower.passmower".into()
        ),
        "{:?}",
        policies(&sandbox)
    );

    beside(&block(ARGOCD, "argocd-upgrade"));
    assert_eq!(webhook_image(), released_image("0.1.1").as_str());

    beside(&block(ARGOCD, "argocd-uninstall"));
    assert_eq!(replicas_and_elector_image(&sandbox, "passmower"), (1, None));
    assert_eq!(policies(&sandbox), Vec::<String>::new());
    assert!(get(
        &sandbox,
        "",
        "mutatingwebhookconfiguration passmower-elector-webhook"
    )
    .is_none());
    assert!(get(&sandbox, "passmower", "role passmower-elector").is_none());
    let apps = sandbox
        .ok("kubectl -n argocd get applications -o name")
        .stdout;
    assert_eq!(apps.trim(), "application.argoproj.io/passmower");
    Record {
        path: "argocd",
        tier: "api",
        test: "install_argocd::the_argocd_page_installs_upgrades_and_removes_as_argocd_syncs_it",
        helm: Some(Helm::V3),
        kustomize: false,
        kubelet: None,
        ran: "install, upgrade, uninstall; Argo CD's render and apply done by the test",
    }
    .write(&sandbox);
}
