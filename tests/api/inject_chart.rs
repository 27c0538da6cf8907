//! The chart as a new user meets it: installed for real on a real kube-apiserver, its NOTES
//! run in bash as printed (Helm prints them indented: a heredoc would never end), for Helm 3
//! and Helm 4; what it checks against Passmower's live Deployment; cluster-wide names that two
//! installs (or the chart and `inject --deny-idle-namespace`) cannot both claim; a kubeVersion
//! that is true of the APIs its templates use.

use std::time::Duration;

use pme_testkit::tools::{Helm, Sandbox, UPSTREAM_OCI, UPSTREAM_VERSION};
use pme_testkit::Cluster;

const IMAGE_REPOSITORY: &str = "registry.example.com/passmower-elector";

/// The indented command lines after `header` in NOTES, up to the next unindented line.
fn notes_block(notes: &str, header: &str) -> String {
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

fn chart_install(sandbox: &Sandbox, extra: &str) -> String {
    let ran = sandbox.ok(&format!(
        "helm upgrade --install passmower-elector charts/passmower-elector -n passmower \
         --create-namespace --set image.repository={IMAGE_REPOSITORY} {extra}"
    ));
    let notes = ran
        .stdout
        .split_once("NOTES:\n")
        .map(|(_, n)| n.to_owned())
        .unwrap_or_else(|| panic!("helm printed no NOTES:\n{}", ran.stdout));
    assert!(!notes.contains("<<"), "a heredoc in NOTES:\n{notes}");
    notes
}

fn notes_route(helm: Helm, header: &str) {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(helm, &cluster.admin_kubeconfig());
    let notes = chart_install(&sandbox, "");
    let upgrade = notes_block(&notes, header);
    assert!(upgrade.contains(&format!("{UPSTREAM_OCI} \\")), "{upgrade}");
    assert!(
        upgrade.contains(&format!("--version {UPSTREAM_VERSION}")),
        "{upgrade}"
    );
    sandbox.ok(&upgrade);

    let ran = sandbox.ok("kubectl -n passmower get deployment passmower -o json");
    let deployment: serde_json::Value = serde_json::from_str(&ran.stdout).expect("JSON");
    assert_eq!(
        deployment["spec"]["replicas"], 2,
        "NOTES ask for two replicas"
    );
    let elector = deployment["spec"]["template"]["spec"]["initContainers"]
        .as_array()
        .expect("initContainers")
        .iter()
        .find(|c| c["name"] == "passmower-elector")
        .expect("the elector sidecar")
        .clone();
    assert_eq!(elector["image"], format!("{IMAGE_REPOSITORY}:0.1.0"));
    // --workload-only: the Role is the chart's, not a second copy from the post-renderer.
    let role = sandbox.ok("kubectl -n passmower get role passmower-elector -o json");
    let role: serde_json::Value = serde_json::from_str(&role.stdout).expect("JSON");
    assert_eq!(
        role["metadata"]["annotations"]["meta.helm.sh/release-name"],
        "passmower-elector"
    );
    // The Lease the chart's Role names is the one the sidecar holds.
    let lease_arg = elector["args"]
        .as_array()
        .expect("args")
        .iter()
        .find_map(|a| a.as_str()?.strip_prefix("--lease-name="))
        .expect("--lease-name")
        .to_owned();
    assert_eq!(role["rules"][0]["resourceNames"][0], lease_arg.as_str());
    // And upstream's Lease, which the sidecar holds beside its own for a Passmower that elects
    // itself, may be read and updated by name.
    let named: Vec<&str> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["resourceNames"][0].as_str())
        .collect();
    assert!(named.contains(&"passmower-operators"), "{role}");
    if let Some(native) = elector["args"]
        .as_array()
        .expect("args")
        .iter()
        .find_map(|a| a.as_str()?.strip_prefix("--native-lease="))
    {
        assert!(named.contains(&native), "{native} not in {role}");
    }

    // The check lines, with the Lease an elector would have created (no kubelet runs one).
    sandbox.ok(&format!(
        "kubectl -n passmower create -f - <<'EOF'\n\
         {{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{{\"name\":\"{lease_arg}\"}},\"spec\":{{}}}}\n\
         EOF"
    ));
    let check = sandbox.ok(&notes_block(&notes, "Check:"));
    assert_eq!(
        check.stdout.lines().next(),
        Some(passmower_elector::inject::VERSION),
        "{}",
        check.stdout
    );

    // An upgrade of the chart now sees the Deployment: its names match, the NOTES run again.
    // It names a pull secret for the sidecar image (a private registry), which the printed
    // post-renderer arguments carry to the pods.
    let notes = chart_install(&sandbox, "--set imagePullSecrets={regcred}");
    assert!(notes.contains("--version 1.3.0"), "{notes}");
    let upgrade = notes_block(&notes, header);
    assert!(
        upgrade.contains("'--post-renderer-args=--image-pull-secret=regcred'"),
        "{upgrade}"
    );
    sandbox.ok(&upgrade.replace("helm plugin install", "true || helm plugin install"));
    let ran = sandbox.ok("kubectl -n passmower get deployment passmower -o json");
    let deployment: serde_json::Value = serde_json::from_str(&ran.stdout).expect("JSON");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["imagePullSecrets"],
        serde_json::json!([{"name": "regcred"}])
    );
}

#[test]
fn notes_run_as_printed_with_helm3() {
    notes_route(Helm::V3, "Helm 3:");
}

#[test]
fn notes_run_as_printed_with_helm4() {
    notes_route(Helm::V4, "Helm 4 (");
}

/// Checks against the live Deployment, and names two installs (and `inject`) cannot share.
#[test]
fn mismatches_fail_and_cluster_wide_names_are_per_install() {
    let _one = pme_testkit::tools::one_at_a_time();
    let cluster = Cluster::start_private();
    let sandbox = Sandbox::new(Helm::V3, &cluster.admin_kubeconfig());
    sandbox.ok(&format!(
        "helm upgrade --install passmower {UPSTREAM_OCI} --version {UPSTREAM_VERSION} -n passmower \
         --create-namespace --set passmower.host=auth.example.com"
    ));
    let refused = |extra: &str, says: &str| {
        let ran = sandbox.bash(
            &format!(
                "helm upgrade --install passmower-elector charts/passmower-elector -n passmower \
                 --set image.repository={IMAGE_REPOSITORY} {extra}"
            ),
            Duration::from_secs(120),
        );
        assert!(!ran.success, "{extra}: installed");
        assert!(ran.stderr.contains(says), "{extra}: {}", ran.stderr);
    };
    // An idle namespace a namespace could have, without the policy that forbids creating it.
    refused(
        "--set idleNamespace=pm-idle",
        "is a name a namespace can have",
    );
    // Passmower's chart derives the pod labels from nameOverride; the Deployment has others.
    refused(
        "--set passmower.nameOverride=pm,passmower.fullnameOverride=passmower",
        "selects its pods by",
    );
    sandbox.ok("kubectl -n passmower patch deployment passmower --type=json -p '[{\"op\":\"replace\",\"path\":\"/spec/template/spec/serviceAccountName\",\"value\":\"other\"}]'");
    refused("", "runs as ServiceAccount \"other\"");
    sandbox.ok("kubectl -n passmower patch deployment passmower --type=json -p '[{\"op\":\"replace\",\"path\":\"/spec/template/spec/serviceAccountName\",\"value\":\"passmower\"}]'");
    let notes = chart_install(&sandbox, "");
    assert!(notes.contains("runs 1 replica"), "{notes}");

    // A second install elsewhere with the idle-namespace policy, and inject's own policies:
    // six cluster-wide names (each chart install has a write fence and a replica guard, the
    // second also the idle-namespace policy; inject its idle-namespace policy, and a fence and
    // a guard that are the first install's: the fence is named by the ServiceAccount it
    // guards and the guard by its Deployment, so the same pods can never get two).
    sandbox.ok(&format!(
        "helm upgrade --install passmower-elector charts/passmower-elector -n other \
         --create-namespace --set image.repository={IMAGE_REPOSITORY} \
         --set idleNamespace=pm-idle,denyIdleNamespace=true\n\
         helm template passmower {UPSTREAM_OCI} --version {UPSTREAM_VERSION} -n passmower \
         | passmower-elector inject --image {IMAGE_REPOSITORY}:0.1.0 --namespace passmower \
           --idle-namespace pm-idle --deny-idle-namespace >injected.yaml\n\
         python3 - <<'EOF' >policy.yaml\n\
import sys, re\n\
docs = open('injected.yaml').read().split('\\n---\\n')\n\
print('\\n---\\n'.join(d for d in docs if re.search(r'^kind: ValidatingAdmissionPolicy', d, re.M)))\n\
EOF\n\
         kubectl apply -f policy.yaml\n\
         kubectl get validatingadmissionpolicies -o name | sort >names.txt"
    ));
    let names = std::fs::read_to_string(sandbox.root().join("names.txt")).expect("names");
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        [
            "validatingadmissionpolicy.admissionregistration.k8s.io/passmower-elector-chart.other.passmower-elector",
            "validatingadmissionpolicy.admissionregistration.k8s.io/passmower-elector-fence.other.passmower",
            "validatingadmissionpolicy.admissionregistration.k8s.io/passmower-elector-fence.passmower.passmower",
            "validatingadmissionpolicy.admissionregistration.k8s.io/passmower-elector-guard.other.passmower",
            "validatingadmissionpolicy.admissionregistration.k8s.io/passmower-elector-guard.passmower.passmower",
            "validatingadmissionpolicy.admissionregistration.k8s.io/passmower-elector-inject.passmower.passmower",
        ]
    );
}

/// kubeVersion says 1.30: the newest API the templates use became GA then. A template that
/// starts using a newer API (or stops using this one) fails here until kubeVersion follows.
#[test]
fn kube_version_is_the_newest_api_the_chart_uses() {
    let ga_since = |api: &str| -> u32 {
        match api {
            "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
            | "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding" => 30,
            "policy/v1/PodDisruptionBudget" => 21,
            "rbac.authorization.k8s.io/v1/Role" | "rbac.authorization.k8s.io/v1/RoleBinding" => 8,
            other => panic!("{other}: add when it became GA"),
        }
    };
    let dir = tempfile::tempdir().expect("tmp");
    let sandbox = Sandbox::new(Helm::V3, &dir.path().join("no-cluster"));
    let rendered = sandbox.ok(&format!(
        "helm template passmower-elector charts/passmower-elector -n auth --set image.repository={IMAGE_REPOSITORY}"
    ));
    let newest = rendered
        .stdout
        .split("\n---")
        .filter_map(|doc| {
            let doc: serde_json::Value = serde_norway::from_str(doc).ok()?;
            Some(format!(
                "{}/{}",
                doc["apiVersion"].as_str()?,
                doc["kind"].as_str()?
            ))
        })
        .map(|api| ga_since(&api))
        .max()
        .expect("rendered objects");
    let chart = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/passmower-elector/Chart.yaml"
    ))
    .expect("Chart.yaml");
    assert!(
        chart.contains(&format!("kubeVersion: \">=1.{newest}.0-0\"")),
        "Chart.yaml kubeVersion must be >=1.{newest}.0-0"
    );
}
