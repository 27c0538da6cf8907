//! Every command the install pages (docs/install/) mark `<!-- tested: NAME -->` runs as
//! written, in bash, against a real kube-apiserver of its own (the upstream chart's CRDs and
//! ClusterRole are cluster-wide, so two installs would collide): Helm 3, Helm 4 with its
//! plugin, kustomize, and kubectl on a live install. The text must name the upstream chart as
//! users install it (`oci://ghcr.io/passmower/charts/passmower --version 1.3.0`); here that
//! reference resolves to the upstream chart directory, and installs skip the chart's hook Job
//! (no kubelet runs it), as testkit/src/tools.rs explains. Then the result is checked
//! on the server.

use std::time::Duration;

use pme_testkit::install::DOCS_IMAGE;
use pme_testkit::tools::{tested_blocks, Helm, Sandbox, UPSTREAM_OCI, UPSTREAM_VERSION};
use pme_testkit::Cluster;

const HELM3: &str = include_str!("../../docs/install/helm3.md");
const HELM4: &str = include_str!("../../docs/install/helm4.md");
const KUSTOMIZE: &str = include_str!("../../docs/install/kustomize-flux.md");
const KUBECTL: &str = include_str!("../../docs/install/kubectl.md");

/// Every page a user installs from, with the blocks it must mark as tested (the install
/// blocks run here; the rest in tests/install_*.rs, which name the test of each page).
const PAGES: [(&str, &str, &[&str]); 15] = [
    ("README.md", include_str!("../../README.md"), &[]),
    (
        "docs/install/README.md",
        include_str!("../../docs/install/README.md"),
        &[],
    ),
    (
        "docs/install/sidecar-image.md",
        include_str!("../../docs/install/sidecar-image.md"),
        &[],
    ),
    (
        "docs/install/helm3.md",
        HELM3,
        &[
            "helm3",
            "helm3-upgrade-passmower",
            "helm3-upgrade-elector",
            "helm3-rollback",
            "helm3-uninstall",
            "helm3-chart",
        ],
    ),
    (
        "docs/install/helm4.md",
        HELM4,
        &[
            "helm4",
            "helm4-upgrade-passmower",
            "helm4-upgrade-elector",
            "helm4-rollback",
            "helm4-uninstall",
        ],
    ),
    (
        "docs/install/kustomize-flux.md",
        KUSTOMIZE,
        &["kustomize", "kustomize-upgrade", "kustomize-uninstall"],
    ),
    (
        "docs/install/flux.md",
        include_str!("../../docs/install/flux.md"),
        &["flux", "flux-upgrade", "flux-uninstall"],
    ),
    (
        "docs/install/argocd.md",
        include_str!("../../docs/install/argocd.md"),
        &[
            "argocd-webhook",
            "argocd",
            "argocd-upgrade",
            "argocd-uninstall",
        ],
    ),
    (
        "docs/install/k3s.md",
        include_str!("../../docs/install/k3s.md"),
        &["k3s-webhook", "k3s", "k3s-upgrade", "k3s-uninstall"],
    ),
    (
        "docs/install/kubectl.md",
        KUBECTL,
        &["kubectl", "kubectl-upgrade-passmower", "kubectl-uninstall"],
    ),
    (
        "docs/install/webhook.md",
        include_str!("../../docs/install/webhook.md"),
        &[
            "webhook",
            "webhook-upgrade-passmower",
            "webhook-upgrade-elector",
            "webhook-uninstall",
        ],
    ),
    (
        "docs/operations/upgrade.md",
        include_str!("../../docs/operations/upgrade.md"),
        &["upgrade-chart"],
    ),
    (
        "docs/operations/uninstall.md",
        include_str!("../../docs/operations/uninstall.md"),
        &["uninstall-chart"],
    ),
    (
        "docs/operations/troubleshooting.md",
        include_str!("../../docs/operations/troubleshooting.md"),
        &[],
    ),
    (
        "examples/retrofit-passmower/README.md",
        include_str!("../../examples/retrofit-passmower/README.md"),
        &[],
    ),
];

/// Whether a line of a block runs helm on Passmower's chart (`helm install|upgrade|template`
/// with the release `passmower`), or names its chart in a manifest (`chart:` of a HelmChart or
/// an Argo CD source, `url:` of a Flux OCIRepository).
fn names_passmowers_chart(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    let helm_on_passmower = words.first() == Some(&"helm")
        && words
            .iter()
            .any(|w| ["install", "upgrade", "template"].contains(w))
        && words
            .iter()
            .skip_while(|w| !["install", "upgrade", "template"].contains(w))
            .skip(1)
            .find(|w| !w.starts_with('-'))
            == Some(&"passmower");
    // A chart reference (Argo CD's `chart: passmower` beside a repoURL is checked apart).
    let manifest = line.trim_start().starts_with("chart: ")
        && line.contains('/')
        && !line.contains("charts/passmower-elector");
    helm_on_passmower || manifest
}

fn block(markdown: &str, name: &str) -> String {
    tested_blocks(markdown)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, body)| body)
        .unwrap_or_else(|| panic!("no block marked `<!-- tested: {name} -->`"))
}

#[test]
fn the_docs_name_upstream_as_users_install_it() {
    for (file, text, tested) in PAGES {
        let names: Vec<String> = tested_blocks(text).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, tested, "{file}: the blocks marked tested");
        for (name, body) in tested_blocks(text) {
            // Commands continued over lines with `\` are one line here.
            let joined = body.replace("\\\n", " ");
            let lines: Vec<String> = joined
                .lines()
                .map(|l| {
                    let indent = l.len() - l.trim_start().len();
                    format!(
                        "{}{}",
                        &l[..indent],
                        l.split_whitespace().collect::<Vec<_>>().join(" ")
                    )
                })
                .collect();
            for line in lines.iter().filter(|l| names_passmowers_chart(l)) {
                let from_upstream = line
                    .contains(&format!("{UPSTREAM_OCI} --version {UPSTREAM_VERSION}"))
                    || (line.contains(&format!("chart: {UPSTREAM_OCI}"))
                        && body.contains(&format!("version: {UPSTREAM_VERSION}")));
                assert!(
                    from_upstream,
                    "{file} {name}: installs Passmower from somewhere else:\n{line}"
                );
            }
            // Flux and Argo CD name the registry in their own fields.
            if body.contains("kind: OCIRepository") {
                assert!(
                    body.contains(&format!("url: {UPSTREAM_OCI}")),
                    "{file} {name}"
                );
                assert!(
                    body.contains(&format!("tag: {UPSTREAM_VERSION}")),
                    "{file} {name}"
                );
            }
            if body.contains("chart: passmower\n") {
                assert!(
                    body.contains(&format!("targetRevision: {UPSTREAM_VERSION}")),
                    "{file} {name}"
                );
            }
        }
        for stale in ["2.2.0", "codemowers/passmower", "passmower/passmower "] {
            assert!(!text.contains(stale), "{file} still says {stale:?}");
        }
        // The wrapper script an older --help named; the policy names start with it too.
        assert!(
            !text
                .replace("passmower-elector-inject.", "")
                .contains("passmower-elector-inject"),
            "{file} names a passmower-elector-inject wrapper"
        );
    }
    // Without the ELECTOR_* variables of the test's own environment, as a user reads it.
    let mut inject_help = std::process::Command::new(crate::product::BIN);
    inject_help.args(["inject", "--help"]);
    for (key, _) in std::env::vars_os() {
        if key
            .to_str()
            .is_some_and(|k| k.starts_with("ELECTOR_") || k == "HELM_NAMESPACE")
        {
            inject_help.env_remove(key);
        }
    }
    let help = inject_help.output().expect("run inject --help");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    assert!(!help.contains("passmower-elector-inject"), "{help}");
    assert!(
        help.contains("--post-renderer passmower-elector --post-renderer-args inject"),
        "{help}"
    );
    assert!(
        help.contains("helm plugin install examples/retrofit-passmower/helm4-plugin"),
        "{help}"
    );
}

/// What a successful retrofit leaves on the server: the injected Deployment (its sidecar
/// image the one the docs set) and, unless `workload_only`, the Role and budget.
fn assert_retrofitted(sandbox: &Sandbox, namespace: &str, rbac: bool) {
    let ran = sandbox.ok(&format!(
        "kubectl -n {namespace} get deployment passmower -o json"
    ));
    let deployment: serde_json::Value = serde_json::from_str(&ran.stdout).expect("JSON");
    assert_eq!(
        deployment["metadata"]["annotations"]["passmower-elector.io/injected"],
        passmower_elector::inject::VERSION
    );
    let pod = &deployment["spec"]["template"]["spec"];
    let elector = pod["initContainers"]
        .as_array()
        .expect("initContainers")
        .iter()
        .find(|c| c["name"] == "passmower-elector")
        .expect("the elector sidecar");
    assert_eq!(elector["image"], DOCS_IMAGE);
    assert_eq!(elector["restartPolicy"], "Always");
    assert_eq!(
        pod["containers"][0]["image"],
        format!("ghcr.io/passmower/passmower:{UPSTREAM_VERSION}")
    );
    if rbac {
        sandbox.ok(&format!(
            "kubectl -n {namespace} get role/passmower-elector rolebinding/passmower-elector poddisruptionbudget/passmower"
        ));
    }
}

/// The documented commands add no idle-namespace policy, and the idle namespace the injected
/// followers run with cannot be created.
fn assert_idle_namespace_unguarded_and_uncreatable(sandbox: &Sandbox) {
    let policies = sandbox.ok("kubectl get validatingadmissionpolicies -o name");
    assert!(
        !policies.stdout.contains("passmower-elector-inject."),
        "{}",
        policies.stdout
    );
    let idle = passmower_elector::inject::DEFAULT_IDLE_NAMESPACE;
    let deployment = sandbox.ok("kubectl -n passmower get deployment passmower -o yaml");
    assert!(
        deployment
            .stdout
            .contains(&format!("--follower-env=NAMESPACE_SELECTOR={idle}")),
        "{}",
        deployment.stdout
    );
    let refused = sandbox.bash(
        &format!("kubectl create namespace {idle} --dry-run=server"),
        Duration::from_secs(60),
    );
    assert!(
        !refused.success && refused.stderr.contains("is invalid"),
        "the idle namespace can be created: {} {}",
        refused.stdout,
        refused.stderr
    );
}

fn run_helm_block(markdown: &str, helm: Helm, name: &str) {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(helm, &cluster.admin_kubeconfig());
    sandbox.ok(&block(markdown, name));
    assert_retrofitted(&sandbox, "passmower", true);
    // The write fence, named for this install; no idle-namespace policy is needed (or
    // added): the followers' idle namespace is a name the apiserver refuses to create.
    sandbox.ok(
        "kubectl get validatingadmissionpolicy,validatingadmissionpolicybinding \
         passmower-elector-fence.passmower.passmower",
    );
    assert_idle_namespace_unguarded_and_uncreatable(&sandbox);
    // Running the same command again (an upgrade) changes nothing that matters and succeeds.
    let again = block(markdown, name).replace("helm plugin install", "true || helm plugin install");
    sandbox.ok(&again);
    assert_retrofitted(&sandbox, "passmower", true);
}

#[test]
fn install_helm3() {
    run_helm_block(HELM3, Helm::V3, "helm3");
}

#[test]
fn install_helm4() {
    run_helm_block(HELM4, Helm::V4, "helm4");
}

/// The GitOps path: the Component rendered by the real kustomize, applied server-side.
#[test]
fn install_kustomize() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(Helm::V3, &cluster.admin_kubeconfig());
    sandbox.ok(&block(KUSTOMIZE, "kustomize"));
    assert_retrofitted(&sandbox, "passmower", true);
    assert_idle_namespace_unguarded_and_uncreatable(&sandbox);
    // Flux gets the same patches as the Component.
    let read = |f: &str| {
        std::fs::read_to_string(sandbox.root().join("passmower-elector").join(f)).expect(f)
    };
    let component: serde_json::Value =
        serde_norway::from_str(&read("kustomization.yaml")).expect("YAML");
    let flux: serde_json::Value =
        serde_norway::from_str(&read("flux-postrenderers.yaml")).expect("YAML");
    assert_eq!(
        flux["postRenderers"][0]["kustomize"]["patches"],
        component["patches"]
    );
}

/// kubectl on a live install, as one object (the documented command) and as the `kind: List`
/// that `kubectl get deployments -o yaml` prints.
#[test]
fn install_kubectl() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(Helm::V3, &cluster.admin_kubeconfig());
    // A live install made without the post-renderer.
    sandbox.ok(&format!(
        "helm upgrade --install passmower {UPSTREAM_OCI} --version {UPSTREAM_VERSION} -n passmower \
         --create-namespace --set passmower.host=auth.example.com"
    ));
    sandbox.ok(&block(KUBECTL, "kubectl"));
    assert_retrofitted(&sandbox, "passmower", true);

    // The List form, first as a server-side dry run, then for real.
    sandbox.ok(&format!(
        "kubectl create namespace list\n\
         helm template passmower {UPSTREAM_OCI} --version {UPSTREAM_VERSION} --show-only templates/deployment.yaml \
           | kubectl -n list create -f -\n\
         kubectl -n list get deployments -o yaml >live.yaml\n\
         grep -q '^kind: List' live.yaml\n\
         passmower-elector inject --image {DOCS_IMAGE} -f live.yaml >injected.yaml\n\
         kubectl apply --dry-run=server -f injected.yaml\n\
         kubectl apply -f injected.yaml"
    ));
    assert_retrofitted(&sandbox, "list", true);
}

/// Helm 4 shows why inject failed (it hides the plugin's stderr), and installs nothing.
#[test]
fn helm4_shows_why_inject_failed() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(Helm::V4, &cluster.admin_kubeconfig());
    sandbox.ok("helm plugin install examples/retrofit-passmower/helm4-plugin");
    let cases = [
        ("", "the sidecar image is required"),
        ("--post-renderer-args=--image=registry.example.com/passmower-elector:0.1.0 --post-renderer-args=--container=nope", "no target found"),
        ("--post-renderer-args=--imagee=x", "--imagee"),
    ];
    for (args, reason) in cases {
        let ran = sandbox.bash(
            &format!(
                "helm upgrade --install passmower {UPSTREAM_OCI} --version {UPSTREAM_VERSION} -n passmower \
                 --create-namespace --post-renderer passmower-elector {args}"
            ),
            Duration::from_secs(120),
        );
        assert!(!ran.success, "{args}: installed");
        assert!(
            ran.stderr.contains("passmower-elector inject failed: ") && ran.stderr.contains(reason),
            "{args}: Helm 4 does not show {reason:?}:\n{}",
            ran.stderr
        );
    }
    let releases = sandbox.ok("helm list -A -q");
    assert_eq!(releases.stdout.trim(), "", "a failed inject left a release");
}

/// Helm gives a post-renderer no `HELM_NAMESPACE` and renders no `metadata.namespace`, but the
/// upstream chart writes the release namespace into its ClusterRoleBinding: inject refuses a
/// `--namespace` other than `helm -n`'s (the fence would protect another namespace than the one
/// Helm installs into) and, given none, fences the one Helm installs into. Real Helm 3 and 4.
fn release_namespace_from_the_chart(helm: Helm) {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(helm, &cluster.admin_kubeconfig());
    let post_renderer = match helm {
        Helm::V3 => "--post-renderer passmower-elector --post-renderer-args inject",
        Helm::V4 => {
            sandbox.ok("helm plugin install examples/retrofit-passmower/helm4-plugin");
            "--post-renderer passmower-elector"
        }
    };
    let chart = format!("passmower {UPSTREAM_OCI} --version {UPSTREAM_VERSION} -n auth");
    let image = format!("--post-renderer-args=--image={DOCS_IMAGE}");
    for command in ["template", "upgrade --install --create-namespace"] {
        let ran = sandbox.bash(
            &format!(
                "helm {command} {chart} {post_renderer} {image} \
                 --post-renderer-args=--namespace=passmower"
            ),
            Duration::from_secs(120),
        );
        // Helm 4's `template` prints the failure object of `--on-error=manifest` instead.
        let refused = !ran.success || ran.stdout.contains("kind: InjectFailed");
        assert!(
            refused,
            "{command}: a --namespace other than -n's was accepted:\n{}",
            ran.stdout
        );
        assert!(
            ran.stderr.contains("--namespace=auth") || ran.stdout.contains("--namespace=auth"),
            "{command}: the refusal does not name helm's namespace:\n{}\n{}",
            ran.stdout,
            ran.stderr
        );
    }
    let releases = sandbox.ok("helm list -A -q");
    assert_eq!(
        releases.stdout.trim(),
        "",
        "a refused inject left a release"
    );

    let rendered = sandbox.ok(&format!("helm template {chart} {post_renderer} {image}"));
    assert!(
        rendered
            .stdout
            .contains("name: passmower-elector-fence.auth.passmower"),
        "{}",
        rendered.stdout
    );
    sandbox.ok(&format!(
        "helm upgrade --install --create-namespace {chart} {post_renderer} {image} \
           --set passmower.host=auth.example.com\n\
         kubectl get validatingadmissionpolicybinding passmower-elector-fence.auth.passmower \
           -o jsonpath='{{.spec.paramRef.namespace}}' | grep -qx auth\n\
         kubectl -n auth get role/passmower-elector"
    ));
    assert_retrofitted(&sandbox, "auth", true);
}

#[test]
fn release_namespace_from_the_chart_with_helm3() {
    release_namespace_from_the_chart(Helm::V3);
}

#[test]
fn release_namespace_from_the_chart_with_helm4() {
    release_namespace_from_the_chart(Helm::V4);
}
