//! Golden tests of `passmower-elector inject`: each input under tests/golden/inject/ is run
//! through the binary and compared with its `.out.yaml`. `UPDATE_GOLDEN=1 cargo test --test
//! scenarios inject_golden::` rewrites the expected files instead of comparing (review the
//! diff!).

use crate::golden::{golden, golden_path, inject, ExitStatus, IMAGE};
use passmower_elector::inject::{inject_str, InjectOptions, WorkloadKind};

/// Compares `actual` with the golden file `name`, or rewrites it under UPDATE_GOLDEN=1.
fn check_golden(name: &str, actual: &str) {
    let path = golden_path(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = golden(name);
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{name} differs from the output at line {}:\n  expected: {:?}\n  actual:   {:?}\n\
             (UPDATE_GOLDEN=1 regenerates the golden files)\n--- actual output ---\n{actual}",
            line + 1,
            expected.lines().nth(line),
            actual.lines().nth(line),
        );
    }
}

/// Runs `ARGS` (starting with `inject`; the test image is added) and returns stdout.
fn inject_ok(args: &[&str], input: &str) -> String {
    assert_eq!(args[0], "inject");
    let out = inject(&args[1..], input, &[]);
    assert_eq!(out.status, ExitStatus::Code(0), "stderr: {}", out.stderr);
    out.stdout
}

#[test]
fn passmower_deployment_gets_sidecar_supervisor_and_rbac() {
    // `helm template` output names no namespace: the write fence needs it.
    let output = inject_ok(
        &["inject", "--namespace", "auth"],
        &golden("passmower.in.yaml"),
    );
    check_golden("passmower.out.yaml", &output);
    // The main container no longer carries NAMESPACE_SELECTOR: the supervisor sets it per mode.
    let docs: Vec<&str> = output.split("\n---\n").collect();
    let deployment = docs
        .iter()
        .find(|d| d.contains("kind: Deployment"))
        .expect("the deployment");
    assert!(!deployment.contains("- name: NAMESPACE_SELECTOR"));
    assert!(deployment.contains("--leader-env=NAMESPACE_SELECTOR=*"));
    assert!(deployment.contains("--follower-env=NAMESPACE_SELECTOR=passmower-elector_idle"));
    // The elector knows its pod's UID (the holder identity carries it) ...
    assert!(deployment.contains("- name: POD_UID\n"));
    assert!(deployment.contains("fieldPath: metadata.uid"));
    // ... and the write fence admits operator writes only from the pod the Lease names.
    let fence: Vec<&&str> = docs
        .iter()
        .filter(|d| d.contains("passmower-elector-fence.auth.passmower"))
        .collect();
    assert_eq!(fence.len(), 2, "the policy and its binding");
    assert!(fence[0].contains("kind: ValidatingAdmissionPolicy\n"));
    assert!(
        fence[0].contains(r#"request.userInfo.username == "system:serviceaccount:auth:passmower""#)
    );
    assert!(fence[1].contains("kind: ValidatingAdmissionPolicyBinding\n"));
    assert!(fence[1].contains("paramRef:\n    name: passmower\n    namespace: auth\n"));
}

#[test]
fn classic_sidecar_with_idle_namespace_policy() {
    let output = inject_ok(
        &[
            "inject",
            "--classic-sidecar",
            "--namespace",
            "auth",
            "--deny-idle-namespace",
            "--idle-namespace",
            "pm-idle-never-create",
            "--image",
            "registry.example.com/passmower-elector:test",
        ],
        &golden("passmower.in.yaml"),
    );
    check_golden("passmower-classic.out.yaml", &output);
    assert!(output.contains("kind: ValidatingAdmissionPolicy\n"));
    assert!(output.contains("object.metadata.name != 'pm-idle-never-create'"));
    assert!(!output.contains("restartPolicy: Always"));
}

/// For a 1.29 cluster (`--kube-version`, with `--no-fence`, which it needs): no `preStop` sleep,
/// which a 1.29 apiserver refuses, and a warning saying so. manifests_dry_run.rs has the real
/// apiserver accept this output like every golden one.
#[test]
fn a_cluster_before_1_30_gets_no_sleep_drain() {
    let output = inject_ok(
        &[
            "inject",
            "--namespace",
            "auth",
            "--kube-version",
            "v1.29.4",
            "--no-fence",
        ],
        &golden("passmower.in.yaml"),
    );
    check_golden("passmower-1.29.out.yaml", &output);
    assert!(!output.contains("preStop:"), "{output}");
    assert!(!output.contains("lifecycle:"), "{output}");
    assert!(!output.contains("sleep:"), "{output}");
    assert!(
        output.contains("restartPolicy: Always"),
        "1.29 has native sidecars"
    );
    assert!(
        output.contains("no preStop drain"),
        "the warning is in the manifest"
    );
    assert!(!output.contains("kind: ValidatingAdmissionPolicy"));
}

/// A cluster before 1.30 serves no ValidatingAdmissionPolicy: `inject` (with `--no-fence`,
/// which such a cluster needs) leaves the guard out and says so in the manifest; `--no-guard`
/// leaves it out silently; `--workload-only` leaves it to the chart.
#[test]
fn before_1_30_the_guard_is_left_out_with_a_warning() {
    let input = golden("passmower.in.yaml");
    let kinds = |out: &str| -> Vec<String> {
        out.lines()
            .filter_map(|l| l.strip_prefix("kind: "))
            .map(str::to_owned)
            .collect()
    };
    let ran = inject(&["--namespace=passmower"], &input, &[]);
    assert!(ran
        .stdout
        .contains("app.kubernetes.io/component: replica-guard"));
    let old = inject(
        &["--namespace=passmower", "--kube-version=1.29", "--no-fence"],
        &input,
        &[],
    );
    assert_eq!(old.status, ExitStatus::Code(0), "{}", old.stderr);
    assert!(!old.stdout.contains("replica-guard"));
    assert!(
        !kinds(&old.stdout).contains(&"ValidatingAdmissionPolicy".to_owned()),
        "{}",
        old.stdout
    );
    for out in [&old.stdout, &old.stderr] {
        assert!(
            out.contains(
                "no replica guard: it is a ValidatingAdmissionPolicy, served from Kubernetes 1.30"
            ),
            "{out}"
        );
    }
    let off = inject(&["--namespace=passmower", "--no-guard"], &input, &[]);
    assert!(!off.stdout.contains("replica-guard") && !off.stderr.contains("replica guard"));
    let chart = inject(&["--workload-only"], &input, &[]);
    assert!(!chart.stdout.contains("replica-guard") && !chart.stderr.contains("replica guard"));
}

#[test]
fn mixed_stream_passes_other_documents_byte_for_byte() {
    let input = golden("mixed.in.yaml");
    let output = inject_ok(&["inject"], &input);
    check_golden("mixed.out.yaml", &output);
    // Everything before the Passmower document (ConfigMap, Service, Redis, an empty document)
    // is the input's text, comments and flow style included.
    let target_start = input
        .find("# Passmower with a command")
        .expect("marker comment in mixed.in.yaml");
    assert_eq!(output[..target_start], input[..target_start]);
}

#[test]
fn already_injected_stream_is_left_as_it_is() {
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        let fresh = inject_ok(
            &["inject", "--namespace", "auth"],
            &golden("passmower.in.yaml"),
        );
        std::fs::write(golden_path("already-injected.in.yaml"), fresh).expect("write");
    }
    let input = golden("already-injected.in.yaml");
    assert_eq!(inject_ok(&["inject", "--namespace", "auth"], &input), input);
}

#[test]
fn statefulset_with_another_container_name() {
    let output = inject_ok(
        &[
            "inject",
            "--kind",
            "StatefulSet",
            "--container",
            "app",
            "--app-command",
            "/usr/bin/idp serve",
            "--no-fence",
        ],
        &golden("statefulset.in.yaml"),
    );
    check_golden("statefulset.out.yaml", &output);
    assert!(!output.contains("ValidatingAdmissionPolicy"), "--no-fence");
    assert!(output.contains("--leader-env=NAMESPACE_SELECTOR=team-a,team-b"));
    assert!(
        !output.contains("strategy:"),
        "StatefulSets keep their own update strategy"
    );
}

/// A container that sets no NAMESPACE_SELECTOR runs Passmower's operators in the pod's own
/// namespace (Passmower reads unset and empty so): the leader is given no selector of its own,
/// so it keeps the container's (unset), and only the follower's is overridden. An empty
/// `--namespace-selector` asks for the own namespace explicitly (an empty leader value).
#[test]
fn a_container_without_a_selector_keeps_its_own_namespace() {
    let input = golden("own-namespace.in.yaml");
    let ran = inject(&[], &input, &[]);
    assert_eq!(ran.status, ExitStatus::Code(0), "stderr: {}", ran.stderr);
    check_golden("own-namespace.out.yaml", &ran.stdout);
    assert!(
        !ran.stdout.contains("--leader-env=NAMESPACE_SELECTOR"),
        "the leader must inherit the container's (unset) selector:\n{}",
        ran.stdout
    );
    assert!(
        !ran.stdout.contains("NAMESPACE_SELECTOR=*"),
        "{}",
        ran.stdout
    );
    assert!(ran
        .stdout
        .contains("--follower-env=NAMESPACE_SELECTOR=passmower-elector_idle"));
    assert!(!ran.stderr.contains("NAMESPACE_SELECTOR"), "{}", ran.stderr);

    for flag in ["--namespace-selector=", "--namespace-selector"] {
        let args: &[&str] = if flag.ends_with('=') {
            &[flag]
        } else {
            &[flag, ""]
        };
        let own = inject(args, &input, &[]);
        assert_eq!(own.status, ExitStatus::Code(0), "{flag}: {}", own.stderr);
        let leader: Vec<&str> = own
            .stdout
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("- --leader-env=NAMESPACE_SELECTOR"))
            .collect();
        assert_eq!(leader, ["- --leader-env=NAMESPACE_SELECTOR="], "{flag}");
    }
    let env_own = inject(&[], &input, &[("ELECTOR_NAMESPACE_SELECTOR", "")]);
    assert_eq!(env_own.status, ExitStatus::Code(0), "{}", env_own.stderr);
    assert!(env_own
        .stdout
        .contains("- --leader-env=NAMESPACE_SELECTOR=\n"));
    let blank = inject(&["--namespace-selector= "], &input, &[]);
    assert_eq!(blank.status, ExitStatus::Code(2), "{}", blank.stderr);
    assert!(
        blank.stderr.contains("--namespace-selector"),
        "{}",
        blank.stderr
    );
}

/// What `kubectl get deploy -o yaml` prints: a `kind: List` of live objects. It stays one List,
/// the companions become items, the sidecars run as the app's non-root user.
#[test]
fn a_kubectl_list_is_injected_in_place() {
    let output = inject_ok(&["inject"], &golden("list.in.yaml"));
    check_golden("list.out.yaml", &output);
    let list: serde_json::Value = serde_norway::from_str(&output).expect("one YAML document");
    assert_eq!(list["kind"], "List");
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "Deployment",
            "Role",
            "RoleBinding",
            "PodDisruptionBudget",
            // The write fence, then the replica guard.
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    let pod = &list["items"][0]["spec"]["template"]["spec"];
    for sidecar in pod["initContainers"].as_array().expect("initContainers") {
        assert_eq!(sidecar["securityContext"]["runAsUser"], 1000, "{sidecar}");
        assert_eq!(sidecar["securityContext"]["runAsGroup"], 1000, "{sidecar}");
    }
    // An explicit rolling update that keeps pods running is the user's to keep.
    assert_eq!(
        list["items"][0]["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        "25%"
    );
}

/// A PodMonitor that selects the target's pods scrapes the elector too, and the leader
/// instance's own metrics, which the elector serves; others are left alone.
#[test]
fn the_targets_podmonitor_scrapes_the_elector() {
    let output = inject_ok(&["inject"], &golden("mixed.in.yaml"));
    let docs: Vec<serde_json::Value> = serde_norway::Deserializer::from_str(&output)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .collect();
    let monitor = |name: &str| {
        docs.iter()
            .find(|d| d["kind"] == "PodMonitor" && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("PodMonitor {name}"))
    };
    let endpoints = monitor("passmower")["spec"]["podMetricsEndpoints"].clone();
    assert_eq!(
        endpoints,
        serde_json::json!([
            {"port": "metrics", "interval": "30s"},
            {"port": "elector-probe", "path": "/metrics", "interval": "30s"},
            {"port": "elector-probe", "path": "/metrics/leader-app", "interval": "30s"},
        ])
    );
    assert_eq!(
        monitor("redis")["spec"]["podMetricsEndpoints"],
        serde_json::json!([{"port": "metrics"}])
    );
    // The port it names is the elector container's.
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "passmower")
        .expect("deployment");
    let elector = deployment["spec"]["template"]["spec"]["initContainers"]
        .as_array()
        .expect("initContainers")
        .iter()
        .find(|c| c["name"] == "passmower-elector")
        .expect("elector");
    assert_eq!(elector["ports"][0]["name"], "elector-probe");
}

/// Warnings go where Helm users see them: a comment above the document (helm template, helm
/// get manifest) and an annotation on the object (kubectl describe), not only stderr.
#[test]
fn warnings_are_in_the_manifests() {
    let output = inject_ok(&["inject"], &golden("mixed.in.yaml"));
    for needle in ["strategy replaced by RollingUpdate", "runs 1 replica"] {
        let comment = output
            .lines()
            .find(|l| l.starts_with("# passmower-elector: warning: ") && l.contains(needle));
        assert!(comment.is_some(), "no comment with {needle:?}");
        let annotation = output.lines().find(|l| {
            l.trim_start().starts_with("passmower-elector.io/warnings:") && l.contains(needle)
        });
        assert!(annotation.is_some(), "no annotation with {needle:?}");
    }
}

#[test]
fn no_target_passes_through_with_allow_none() {
    let input = golden("no-target.in.yaml");
    assert_eq!(inject_ok(&["inject", "--allow-none"], &input), input);
    let out = inject(&[], &input, &[("ELECTOR_ALLOW_NONE", "true")]);
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
    assert_eq!(out.stdout, input);
}

#[test]
fn injecting_twice_equals_injecting_once() {
    let cases: [(&str, InjectOptions); 6] = [
        ("list.in.yaml", InjectOptions::new(IMAGE)),
        (
            "passmower.in.yaml",
            InjectOptions {
                namespace: Some("auth".into()),
                ..InjectOptions::new(IMAGE)
            },
        ),
        ("mixed.in.yaml", InjectOptions::new(IMAGE)),
        (
            "passmower.in.yaml",
            InjectOptions {
                classic_sidecar: true,
                deny_idle_namespace: true,
                namespace: Some("auth".into()),
                ..InjectOptions::new(IMAGE)
            },
        ),
        (
            "statefulset.in.yaml",
            InjectOptions {
                kinds: vec![WorkloadKind::StatefulSet],
                container: "app".into(),
                app_command: Some(vec!["/usr/bin/idp".into()]),
                fence: false,
                ..InjectOptions::new(IMAGE)
            },
        ),
        (
            "private-registry.in.yaml",
            InjectOptions {
                image_pull_secrets: vec!["sidecar-registry".into(), "app-registry".into()],
                ..InjectOptions::new(IMAGE)
            },
        ),
    ];
    for (name, opts) in cases {
        let once = inject_str(&golden(name), &opts).expect("first injection");
        let twice = inject_str(&once, &opts).expect("second injection");
        assert_eq!(once, twice, "{name}: inject(inject(x)) != inject(x)");
    }
}

#[test]
fn file_and_stdin_give_the_same_output() {
    let path = golden_path("passmower.in.yaml");
    let from_file = inject_ok(
        &[
            "inject",
            "--namespace",
            "auth",
            "-f",
            path.to_str().expect("utf-8 path"),
        ],
        "",
    );
    assert_eq!(
        from_file,
        inject_ok(
            &["inject", "--namespace", "auth"],
            &golden("passmower.in.yaml")
        )
    );
}

#[test]
fn workload_only_leaves_rbac_and_pdb_to_the_chart() {
    let output = inject_ok(&["inject", "--workload-only"], &golden("passmower.in.yaml"));
    assert!(output.contains("passmower-elector.io/injected"));
    for kind in [
        "Role",
        "RoleBinding",
        "PodDisruptionBudget",
        "ValidatingAdmissionPolicy",
    ] {
        assert!(
            !output.contains(&format!("kind: {kind}\n")),
            "{kind} emitted"
        );
    }
}

#[test]
fn retrofit_example_output_is_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/retrofit-passmower");
    let input = std::fs::read_to_string(dir.join("passmower-deployment.yaml")).expect("example");
    let output = inject_ok(&["inject"], &input);
    let expected_path = dir.join("passmower-deployment.injected.yaml");
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::write(&expected_path, &output).expect("write example output");
        return;
    }
    let expected = std::fs::read_to_string(&expected_path).expect("example output");
    assert!(
        expected == output,
        "examples/retrofit-passmower/passmower-deployment.injected.yaml is stale \
         (UPDATE_GOLDEN=1 regenerates it)"
    );
}

/// Passmower 2.4 as its own chart renders it (image 2.4.0, `LEADER_ELECTION_ENABLED: "true"`,
/// `POD_NAME`): by default only the elector elects, so the app container gets
/// `LEADER_ELECTION_ENABLED=false` in place of the chart's `"true"` (which both of the
/// supervisor's instances inherit), with a warning in the manifest; upstream's Lease gets no
/// RBAC.
#[test]
fn passmower_2_4_gets_its_own_election_turned_off() {
    let output = inject_ok(
        &["inject", "--namespace", "auth"],
        &golden("passmower-2.4.in.yaml"),
    );
    check_golden("passmower-2.4.out.yaml", &output);
    let docs: Vec<&str> = output.split("\n---\n").collect();
    let deployment = docs
        .iter()
        .find(|d| d.contains("kind: Deployment"))
        .expect("the deployment");
    assert!(
        deployment.contains("- name: LEADER_ELECTION_ENABLED\n              value: 'false'\n")
            || deployment.contains("- name: LEADER_ELECTION_ENABLED\n          value: 'false'\n"),
        "{deployment}"
    );
    assert!(!deployment.contains("value: 'true'"), "{deployment}");
    assert!(
        output.contains("# passmower-elector: warning: Deployment/passmower: spec.template.spec.containers[passmower].env LEADER_ELECTION_ENABLED was \"true\""),
        "{output}"
    );
    // Upstream's Lease: the elector holds it beside its own, so pods still (or again) running
    // upstream's election never run operators beside ours; its Role may get and update it by
    // name. No fence follows it.
    assert!(
        deployment.contains("- --native-lease=passmower-operators\n"),
        "{deployment}"
    );
    assert!(
        output.contains("  resourceNames:\n  - passmower-operators\n  resources:\n  - leases\n  verbs:\n  - get\n  - update\n"),
        "{output}"
    );
    // And the replica guard admits a template that runs upstream's election on that Lease (the
    // way back): its CEL names it once.
    assert!(
        output.contains("e.value != 'passmower-operators'"),
        "the guard does not name upstream's Lease: {output}"
    );
    assert_eq!(
        output.matches("passmower-operators").count(),
        3,
        "upstream's Lease named elsewhere (a fence?): {output}"
    );
    assert!(output.contains("passmower-elector supervise") || deployment.contains("- supervise\n"));
    // The 2.2 input gets the variable too (2.2 never reads it), so an image that turns out to
    // elect itself (a custom build, a later `kubectl set image`) still has one election; and
    // `ours` says the same.
    for mode in ["--passmower-election=auto", "--passmower-election=ours"] {
        let older = inject_ok(
            &["inject", "--namespace", "auth", mode],
            &golden("passmower.in.yaml"),
        );
        assert!(
            older.contains("- name: LEADER_ELECTION_ENABLED\n          value: 'false'\n"),
            "{mode}: {older}"
        );
        // A release before 2.4.0 has no election of its own: no Lease of it to hold.
        assert!(!older.contains("--native-lease"), "{mode}: {older}");
    }
}

/// `--passmower-election=fence-only`: the workload keeps upstream's command and election (no
/// elector, no supervisor); it gets POD_NAME if it lacks it, a Role for upstream's Lease, and
/// the write fence keyed on `passmower-operators` with the pod name as holder.
#[test]
fn passmower_2_4_fence_only_keeps_its_election_and_gets_the_fence() {
    let input = golden("passmower-2.4.in.yaml");
    let output = inject_ok(
        &[
            "inject",
            "--namespace",
            "auth",
            "--passmower-election=fence-only",
        ],
        &input,
    );
    check_golden("passmower-2.4-fence-only.out.yaml", &output);
    assert!(!output.contains("passmower-elector-install"), "{output}");
    assert!(!output.contains("supervise"), "{output}");
    assert!(output.contains("value: 'true'") || output.contains("value: \"true\""));
    assert!(output.contains("name: passmower-leader-election"));
    assert!(output.contains("paramRef:\n    name: passmower-operators\n    namespace: auth\n"));
    assert!(output.contains("variables.holder == variables.podName"));
    assert!(!output.contains("kind: PodDisruptionBudget"));
    // Idempotent.
    let again = inject_ok(
        &[
            "inject",
            "--namespace",
            "auth",
            "--passmower-election=fence-only",
        ],
        &output,
    );
    assert_eq!(again, output);
    // POD_NAME is added when the manifest lacks it.
    let without = input.replace(
        "            - name: POD_NAME\n              valueFrom:\n                fieldRef:\n                  fieldPath: metadata.name\n",
        "",
    );
    assert_ne!(without, input);
    let added = inject_ok(
        &[
            "inject",
            "--namespace",
            "auth",
            "--passmower-election=fence-only",
        ],
        &without,
    );
    assert!(added.contains("- name: POD_NAME\n"), "{added}");
    assert!(added.contains("fieldPath: metadata.name"), "{added}");
}

/// Fence-only refuses what it cannot fence: a Passmower without its own election, the
/// election turned off, the chart's workload-only output; and a workload injected in one mode
/// is not re-injected in the other. Exit 2, naming the flag or field.
#[test]
fn fence_only_refuses_what_it_cannot_fence() {
    let input = golden("passmower-2.4.in.yaml");
    for (args, text, needle) in [
        (
            vec!["--passmower-election=fence-only"],
            golden("passmower.in.yaml"),
            "before 2.4.0",
        ),
        (
            vec!["--passmower-election=fence-only"],
            input.replace("value: \"true\"", "value: \"false\""),
            "env LEADER_ELECTION_ENABLED is \"false\"",
        ),
        (
            vec!["--passmower-election=fence-only", "--workload-only"],
            input.clone(),
            "--passmower-election",
        ),
        (
            vec!["--passmower-election=fence-only", "--no-fence"],
            input.clone(),
            "--passmower-election",
        ),
        (
            vec!["--passmower-election=fence-only", "--lease-name=passmower"],
            input.clone(),
            "--lease-name passmower",
        ),
        (
            vec!["--passmower-election=fence-only"],
            inject_ok(&["inject", "--namespace", "auth"], &input),
            "was injected with the elector",
        ),
        (
            vec![],
            inject_ok(
                &[
                    "inject",
                    "--namespace",
                    "auth",
                    "--passmower-election=fence-only",
                ],
                &input,
            ),
            "was injected with --passmower-election=fence-only",
        ),
    ] {
        let mut all = vec!["--namespace", "auth"];
        all.extend(args.iter().copied());
        let out = inject(&all, &text, &[]);
        assert_eq!(out.status, ExitStatus::Code(2), "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    }
}

/// A sidecar image in a private registry: `--image-pull-secret` (repeatable, or
/// comma-separated in `ELECTOR_IMAGE_PULL_SECRET`) is added to the pod's `imagePullSecrets`
/// after the app's own, each name once. The app's memory limit, sized for one instance, is
/// warned about: the leader pod runs a second one (docs/reference/inject.md#memory).
#[test]
fn a_private_registry_gets_pull_secrets_and_a_small_limit_a_warning() {
    let input = golden("private-registry.in.yaml");
    let args = [
        "--image-pull-secret=sidecar-registry",
        "--image-pull-secret=app-registry",
    ];
    let out = inject(&args, &input, &[]);
    assert_eq!(out.status, ExitStatus::Code(0), "stderr: {}", out.stderr);
    check_golden("private-registry.out.yaml", &out.stdout);
    let docs: Vec<serde_json::Value> = serde_norway::Deserializer::from_str(&out.stdout)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .collect();
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["imagePullSecrets"],
        serde_json::json!([{"name": "app-registry"}, {"name": "sidecar-registry"}])
    );
    let warning = "spec.template.spec.containers[passmower].resources.limits.memory is 256Mi, \
                   below 400Mi";
    assert!(out.stderr.contains(warning), "{}", out.stderr);
    let annotation = deployment["metadata"]["annotations"]["passmower-elector.io/warnings"]
        .as_str()
        .expect("the warnings annotation");
    assert!(annotation.contains(warning), "{annotation}");

    // The same from the environment, comma-separated; the flag wins over it.
    let env = [("ELECTOR_IMAGE_PULL_SECRET", "sidecar-registry,app-registry")];
    let from_env = inject(&[], &input, &env);
    assert_eq!(from_env.status, ExitStatus::Code(0), "{}", from_env.stderr);
    assert_eq!(from_env.stdout, out.stdout);
    let flag_wins = inject(&["--image-pull-secret=other"], &input, &env);
    assert!(
        flag_wins.stdout.contains("- name: other\n"),
        "{}",
        flag_wins.stdout
    );
    assert!(!flag_wins.stdout.contains("sidecar-registry"));
}
