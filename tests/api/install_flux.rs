//! The Flux page (docs/install/flux.md) as written, and what Flux then does with it, with the
//! real tools against a real kube-apiserver (no Flux controller runs here): kustomize-controller
//! builds the directory with kustomize, applies it server-side and prunes what the previous
//! build had; helm-controller names the release (`spec.releaseName`, else
//! `[targetNamespace-]name`, as `GetReleaseName` in fluxcd/helm-controller), and installs the
//! chart of the HelmRelease's OCIRepository with its `values`, post-rendered as Flux's
//! `postrender.Kustomize` does: a kustomization of the rendered manifests (`helm-output.yaml`)
//! and the HelmRelease's `postRenderers[].kustomize.patches`, built by kustomize (Helm 3 here;
//! Flux runs Helm 4's library). Flux's CRDs stand in schema-less.
//!
//! And the mismatch the patches now catch: a Component or `postRenderers` made for release
//! `passmower` over manifests rendered for another release name fails the build — kustomize's
//! and Flux's — instead of installing Passmower without the elector.

use std::path::Path;

use crate::product::install::replicas_and_elector_image;
use pme_testkit::install::{
    block, delete_objects, get, object_keys, policies, stand_in_crd, Record, DOCS_IMAGE,
};
use pme_testkit::tools::{kustomize, Helm, Ran, Sandbox, UPSTREAM_OCI, UPSTREAM_VERSION};
use pme_testkit::Cluster;
use serde_json::{json, Value};

const FLUX: &str = include_str!("../../docs/install/flux.md");
const KUSTOMIZE_PAGE: &str = include_str!("../../docs/install/kustomize-flux.md");

/// What Flux's kustomize-controller keeps: the objects of its last build (its inventory).
#[derive(Default)]
struct KustomizeController {
    inventory: Vec<(String, String, String)>,
}

impl KustomizeController {
    /// Builds the sandbox's directory, applies it server-side, prunes what is no longer built.
    fn reconcile(&mut self, sandbox: &Sandbox) {
        let built = sandbox.ok("kustomize build .").stdout;
        let file = sandbox.root().join(".flux-build.yaml");
        std::fs::write(&file, &built).expect("write the build");
        sandbox.ok(&format!(
            "kubectl apply --server-side --field-manager=kustomize-controller -f {}",
            file.display()
        ));
        let now = object_keys(&built, "default");
        let gone: Vec<_> = self
            .inventory
            .iter()
            .filter(|o| !now.contains(o))
            .cloned()
            .collect();
        delete_objects(sandbox, &gone);
        self.inventory = now;
    }
}

/// Flux's release name for a HelmRelease (`GetReleaseName`).
fn release_name(hr: &Value) -> String {
    let spec = &hr["spec"];
    if let Some(name) = spec["releaseName"].as_str().filter(|n| !n.is_empty()) {
        return name.to_owned();
    }
    let name = hr["metadata"]["name"].as_str().expect("name");
    match spec["targetNamespace"].as_str().filter(|n| !n.is_empty()) {
        Some(target) => format!("{target}-{name}"),
        None => name.to_owned(),
    }
}

/// What helm-controller does with every HelmRelease the apiserver holds: one `helm upgrade
/// --install` each (what it does when the spec changed), with Flux's post-rendering.
fn helm_controller(sandbox: &Sandbox) -> Vec<(String, Ran)> {
    let list = sandbox.ok("kubectl get helmreleases -A -o json").stdout;
    let list: Value = serde_json::from_str(&list).expect("JSON");
    let mut ran = Vec::new();
    for hr in list["items"].as_array().expect("items") {
        let name = hr["metadata"]["name"].as_str().expect("name");
        let namespace = hr["metadata"]["namespace"].as_str().expect("namespace");
        let spec = &hr["spec"];
        let release = release_name(hr);
        let release_ns = spec["targetNamespace"].as_str().unwrap_or(namespace);
        assert_eq!(spec["chartRef"]["kind"], "OCIRepository", "{spec}");
        let source = get(
            sandbox,
            namespace,
            &format!(
                "ocirepository {}",
                spec["chartRef"]["name"].as_str().expect("chartRef.name")
            ),
        )
        .expect("the HelmRelease's OCIRepository");
        let url = source["spec"]["url"].as_str().expect("url");
        let tag = source["spec"]["ref"]["tag"].as_str().expect("ref.tag");
        let dir = sandbox.root().join(".helm-controller").join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let values = dir.join("values.json");
        std::fs::write(&values, spec["values"].to_string()).expect("values");
        let mut command = format!(
            "helm upgrade --install {release} {url} --version {tag} -n {release_ns} \
             --values {}",
            values.display()
        );
        let renderers: Vec<&Value> = spec["postRenderers"]
            .as_array()
            .map(|r| r.iter().filter(|r| r.get("kustomize").is_some()).collect())
            .unwrap_or_default();
        if !renderers.is_empty() {
            command.push_str(&format!(
                " --post-renderer {}",
                post_renderer(&dir, &renderers).display()
            ));
        }
        ran.push((
            name.to_owned(),
            sandbox.bash(&command, std::time::Duration::from_secs(300)),
        ));
    }
    ran
}

/// An executable doing what Flux's `postrender.Kustomize` does for each renderer in turn: the
/// manifests as `helm-output.yaml`, a kustomization with that resource and the renderer's
/// patches, built by kustomize (load restrictions off, as Flux builds it).
fn post_renderer(dir: &Path, renderers: &[&Value]) -> std::path::PathBuf {
    let mut script = String::from("#!/bin/bash\nset -euo pipefail\n");
    for (i, renderer) in renderers.iter().enumerate() {
        let stage = dir.join(format!("postrender-{i}"));
        std::fs::create_dir_all(&stage).expect("mkdir");
        let kustomization = json!({
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": ["helm-output.yaml"],
            "patches": renderer["kustomize"]["patches"],
        });
        std::fs::write(stage.join("kustomization.yaml"), kustomization.to_string())
            .expect("kustomization");
        let input = if i == 0 {
            "cat".to_owned()
        } else {
            format!(
                "{} build --load-restrictor LoadRestrictionsNone {}",
                kustomize().display(),
                dir.join(format!("postrender-{}", i - 1)).display()
            )
        };
        script.push_str(&format!(
            "{input} >{}\n",
            stage.join("helm-output.yaml").display()
        ));
    }
    script.push_str(&format!(
        "exec {} build --load-restrictor LoadRestrictionsNone {}\n",
        kustomize().display(),
        dir.join(format!("postrender-{}", renderers.len() - 1))
            .display()
    ));
    let path = dir.join("post-render");
    std::fs::write(&path, script).expect("post-renderer");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    path
}

fn flux_reconciles(sandbox: &Sandbox, kustomizations: &mut KustomizeController) {
    kustomizations.reconcile(sandbox);
    for (name, ran) in helm_controller(sandbox) {
        assert!(
            ran.success,
            "HelmRelease {name}: the release failed:\n{}\n{}",
            ran.stdout, ran.stderr
        );
    }
}

fn flux_sandbox(cluster: &Cluster) -> Sandbox {
    let sandbox = Sandbox::new(Helm::V3, &cluster.admin_kubeconfig());
    stand_in_crd(
        &sandbox,
        "source.toolkit.fluxcd.io",
        "v1",
        "OCIRepository",
        "ocirepositories",
    );
    stand_in_crd(
        &sandbox,
        "helm.toolkit.fluxcd.io",
        "v2",
        "HelmRelease",
        "helmreleases",
    );
    sandbox
}

#[test]
fn the_flux_page_installs_upgrades_and_removes_as_flux_runs_it() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = flux_sandbox(&cluster);
    let mut kustomizations = KustomizeController::default();

    sandbox.ok(&block(FLUX, "flux"));
    flux_reconciles(&sandbox, &mut kustomizations);
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (2, Some(DOCS_IMAGE.to_owned()))
    );
    assert_eq!(policies(&sandbox).len(), 4, "{:?}", policies(&sandbox));
    // The RoleBinding binds a ServiceAccount that exists: the release's.
    let binding = get(&sandbox, "passmower", "rolebinding passmower-elector").expect("binding");
    let subject = binding["subjects"][0]["name"].as_str().expect("subject");
    assert!(get(&sandbox, "passmower", &format!("serviceaccount {subject}")).is_some());

    sandbox.ok(&block(FLUX, "flux-upgrade"));
    flux_reconciles(&sandbox, &mut kustomizations);
    assert_eq!(
        replicas_and_elector_image(&sandbox, "passmower"),
        (
            3,
            Some("ghcr.io/passmower/passmower-elector:0.1.1".to_owned())
        )
    );
    let file = std::fs::read_to_string(sandbox.root().join("passmower.yaml")).expect("file");
    assert_eq!(file.matches("postRenderers:").count(), 1, "{file}");

    sandbox.ok(&block(FLUX, "flux-uninstall"));
    flux_reconciles(&sandbox, &mut kustomizations);
    sandbox.ok("kubectl -n passmower delete lease passmower --ignore-not-found");
    assert_eq!(replicas_and_elector_image(&sandbox, "passmower"), (1, None));
    assert_eq!(policies(&sandbox), Vec::<String>::new());
    assert!(get(&sandbox, "passmower", "role passmower-elector").is_none());
    Record {
        path: "flux",
        tier: "api",
        test: "install_flux::the_flux_page_installs_upgrades_and_removes_as_flux_runs_it",
        helm: Some(Helm::V3),
        kustomize: true,
        kubelet: None,
        ran: "install, upgrade, uninstall; Flux's kustomize build, prune and post-renderer done by the test",
    }
    .write(&sandbox);
}

/// Flux's default release name with `targetNamespace` is `<targetNamespace>-<name>`: the chart
/// then names its Deployment `passmower-passmower`, the patches name `passmower`, and the
/// release fails in the post-renderer, installing nothing.
#[test]
fn flux_default_release_name_fails_the_post_renderer_and_installs_nothing() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = flux_sandbox(&cluster);
    sandbox.ok(&block(FLUX, "flux"));
    sandbox.ok("sed -i -e '/^  releaseName:/d' \
         -e 's/^  interval: 10m$/  interval: 10m\\n  targetNamespace: passmower/' passmower.yaml\n\
         grep -q '^  targetNamespace: passmower$' passmower.yaml");
    KustomizeController::default().reconcile(&sandbox);
    let ran = helm_controller(&sandbox);
    assert_eq!(ran.len(), 1);
    let (_, ran) = &ran[0];
    assert!(!ran.success, "installed:\n{}", ran.stdout);
    assert!(
        ran.stderr
            .contains("no resource matches strategic merge patch \"Deployment.v1.apps/passmower"),
        "{}",
        ran.stderr
    );
    assert_eq!(sandbox.ok("helm list -A -q").stdout.trim(), "");
    assert!(get(&sandbox, "passmower", "deployment passmower-passmower").is_none());
    // The page names the message users see.
    assert!(FLUX.contains("no resource matches strategic merge patch"));
}

/// The kustomize Component made for release `passmower` over another release's manifests:
/// `kustomize build` fails with the message the page shows; over its own, it builds.
#[test]
fn a_component_for_another_release_name_fails_the_kustomize_build() {
    let dir = tempfile::tempdir().expect("tmp");
    let sandbox = Sandbox::new(Helm::V3, &dir.path().join("no-cluster"));
    let template = |release: &str| {
        format!(
            "helm template {release} {UPSTREAM_OCI} --version {UPSTREAM_VERSION} -n passmower \
             --set passmower.host=auth.example.com --set replicaCount=2"
        )
    };
    sandbox.ok(&format!(
        "{} >passmower.yaml\n\
         passmower-elector inject --image {DOCS_IMAGE} --namespace passmower -f passmower.yaml \
           --kustomize passmower-elector\n\
         {} >other.yaml\n\
         printf 'resources: [other.yaml]\\ncomponents: [passmower-elector]\\n' >kustomization.yaml",
        template("passmower"),
        template("other"),
    ));
    let failed = sandbox.bash("kustomize build .", std::time::Duration::from_secs(60));
    assert!(!failed.success, "built:\n{}", failed.stdout);
    let shown = KUSTOMIZE_PAGE
        .lines()
        .find(|l| l.starts_with("Error: accumulating components"))
        .expect("the page shows the error");
    let tail = shown
        .split_once("': ")
        .map(|(_, t)| t)
        .expect("the page's error names the path");
    assert!(
        failed.stderr.contains(tail),
        "kustomize says otherwise than the page:\n{}\npage: {tail}",
        failed.stderr
    );
    sandbox.ok("printf 'resources: [passmower.yaml]\\ncomponents: [passmower-elector]\\n' >kustomization.yaml\nkustomize build . | grep -q 'name: passmower-elector$'");
}
