//! Bad input to `passmower-elector inject`: each case exits 2, prints nothing on stdout (no
//! partial output for a pipe to apply) and says on stderr what is wrong and where.

use crate::golden::{golden, inject, run, ExitStatus, IMAGE};

/// Runs ARGS (starting with `inject`; the test image is added), asserts exit 2 with empty
/// stdout, returns stderr.
fn refused(args: &[&str], input: &str, env: &[(&str, &str)]) -> String {
    assert_eq!(args[0], "inject");
    let out = inject(&args[1..], input, env);
    check_refused(out)
}

fn check_refused(out: crate::golden::Output) -> String {
    assert_eq!(out.status, ExitStatus::Code(2), "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "", "a refused injection must print nothing");
    assert!(!out.stderr.is_empty());
    out.stderr
}

#[test]
fn invalid_yaml_names_the_document_and_line() {
    // A valid target comes first: its output must not leak out before the error is found.
    let input = format!(
        "{}---\napiVersion: v1\nkind: ConfigMap\ndata:\n  a: [1, 2\n  b: 3\n",
        golden("passmower.in.yaml")
    );
    let stderr = refused(&["inject"], &input, &[]);
    // libyaml notices the unclosed `[` on the line after it.
    let broken_line = input.lines().count();
    assert!(stderr.contains("document 4"), "{stderr}");
    assert!(stderr.contains(&format!("line {broken_line}")), "{stderr}");
}

#[test]
fn no_target_is_an_error_without_allow_none() {
    let stderr = refused(&["inject"], &golden("no-target.in.yaml"), &[]);
    assert!(stderr.contains("no target"), "{stderr}");
    assert!(stderr.contains("--allow-none"), "{stderr}");
}

#[test]
fn empty_input_has_no_target() {
    refused(&["inject"], "", &[]);
}

#[test]
fn target_injected_by_an_incompatible_version_is_refused() {
    let input = golden("already-injected.in.yaml").replace(
        "passmower-elector.io/injected: 0.1.0",
        "passmower-elector.io/injected: 9.0.0",
    );
    assert!(input.contains("injected: 9.0.0"));
    let stderr = refused(&["inject"], &input, &[]);
    assert!(stderr.contains("9.0.0"), "{stderr}");
    assert!(stderr.contains("Deployment/passmower"), "{stderr}");
}

#[test]
fn container_without_command_and_no_app_command_is_refused() {
    let input = golden("statefulset.in.yaml");
    let stderr = refused(
        &["inject", "--kind", "StatefulSet", "--container", "app"],
        &input,
        &[],
    );
    assert!(stderr.contains("--app-command"), "{stderr}");
    assert!(stderr.contains("StatefulSet/idp"), "{stderr}");
}

#[test]
fn optional_value_from_selector_cannot_be_wrapped() {
    let input = golden("mixed.in.yaml").replace(
        "key: namespaceSelector",
        "key: namespaceSelector\n              optional: true",
    );
    let stderr = refused(&["inject"], &input, &[]);
    assert!(stderr.contains("optional"), "{stderr}");
    assert!(stderr.contains("--namespace-selector"), "{stderr}");
}

#[test]
fn an_idle_namespace_must_be_one_literal_name() {
    let input = golden("passmower.in.yaml");
    for bad in ["*", "a,b", "!idle", "{a,b}", "a b", "a/b", ".."] {
        for deny in [&[][..], &["--deny-idle-namespace"][..]] {
            let flag = format!("--idle-namespace={bad}");
            let args = [&["inject", flag.as_str()][..], deny].concat();
            let stderr = refused(&args, &input, &[]);
            assert!(stderr.contains("--idle-namespace"), "{stderr}");
        }
    }
    let stderr = refused(&["inject"], &input, &[("ELECTOR_IDLE_NAMESPACE", "x*")]);
    assert!(stderr.contains("--idle-namespace"), "{stderr}");
}

/// A name a namespace can have idles the followers only while nobody creates that namespace:
/// refused, saying why and how out, unless the deny policy forbids creating it. A name no
/// namespace can have needs nothing else.
#[test]
fn an_idle_namespace_a_namespace_could_have_is_refused_without_the_deny_policy() {
    let input = golden("passmower.in.yaml");
    for name in [
        "passmower-elector-idle",
        "passmower-elector-idle-never-create",
        "idle",
    ] {
        let flag = format!("--idle-namespace={name}");
        let stderr = refused(&["inject", &flag], &input, &[]);
        assert!(stderr.contains("--idle-namespace"), "{stderr}");
        assert!(stderr.contains("a namespace can have"), "{stderr}");
        assert!(stderr.contains("--deny-idle-namespace"), "{stderr}");
        let out = inject(
            &[&flag, "--deny-idle-namespace", "--namespace=auth"],
            &input,
            &[],
        );
        assert_eq!(out.status, ExitStatus::Code(0), "{name}: {}", out.stderr);
        assert!(out
            .stdout
            .contains(&format!("object.metadata.name != '{name}'")));
        let stderr = refused(&["inject"], &input, &[("ELECTOR_IDLE_NAMESPACE", name)]);
        assert!(stderr.contains("--idle-namespace"), "{stderr}");
    }
    let long = format!("{}-idle", "p".repeat(60));
    for name in [
        "Passmower-Elector-Idle",
        "passmower-elector.idle",
        "pm_idle",
        long.as_str(),
    ] {
        let flag = format!("--idle-namespace={name}");
        let out = inject(&[&flag, "--namespace=auth"], &input, &[]);
        assert_eq!(out.status, ExitStatus::Code(0), "{name}: {}", out.stderr);
        assert!(
            out.stdout
                .contains(&format!("--follower-env=NAMESPACE_SELECTOR={name}")),
            "{name}"
        );
        assert!(!out.stdout.contains("idle-namespace-guard"), "{name}");
    }
}

/// The webhook takes the same rule: its --deny-idle-namespace says the chart's policy guards
/// the name, and then the next missing setting is what it names.
#[test]
fn the_webhook_refuses_an_idle_namespace_a_namespace_could_have_without_the_deny_policy() {
    let image = format!("--image={IMAGE}");
    let out = run(
        &["webhook", &image, "--idle-namespace=passmower-elector-idle"],
        "",
        &[],
    );
    let stderr = check_refused(out);
    assert!(stderr.contains("--idle-namespace"), "{stderr}");
    assert!(stderr.contains("--deny-idle-namespace"), "{stderr}");
    let out = run(
        &[
            "webhook",
            &image,
            "--idle-namespace=passmower-elector-idle",
            "--deny-idle-namespace",
        ],
        "",
        &[],
    );
    let stderr = check_refused(out);
    assert!(!stderr.contains("--idle-namespace"), "{stderr}");
    assert!(stderr.contains("--webhook-configuration"), "{stderr}");
    let stderr = check_refused(run(&["webhook", &image], "", &[]));
    assert!(stderr.contains("--webhook-configuration"), "{stderr}");
}

/// With --workload-only the chart installs the guard: the post-renderer emits none of its own.
#[test]
fn workload_only_leaves_the_idle_namespace_policy_to_the_chart() {
    let input = golden("passmower.in.yaml");
    let args = [
        "--namespace=auth",
        "--idle-namespace=pm-idle",
        "--deny-idle-namespace",
    ];
    let out = inject(&args, &input, &[]);
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
    assert!(out.stdout.contains("idle-namespace-guard"));
    let out = inject(&[&args[..], &["--workload-only"]].concat(), &input, &[]);
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
    assert!(
        !out.stdout.contains("idle-namespace-guard"),
        "{}",
        out.stdout
    );
    assert!(out
        .stdout
        .contains("--follower-env=NAMESPACE_SELECTOR=pm-idle"));
}

#[test]
fn unsafe_timings_are_refused() {
    let stderr = refused(
        &["inject", "--renew-deadline", "14s"],
        &golden("passmower.in.yaml"),
        &[],
    );
    assert!(stderr.contains("--renew-deadline"), "{stderr}");
    // Safe by the lease rule but below the floor `elect` enforces, so every sidecar would exit 2.
    let stderr = refused(
        &["inject", "--retry-period", "1ns"],
        &golden("passmower.in.yaml"),
        &[],
    );
    assert!(
        stderr.contains("--retry-period") && stderr.contains("at least 100ms"),
        "{stderr}"
    );
}

#[test]
fn unreadable_file_is_a_configuration_error() {
    let stderr = refused(&["inject", "-f", "/nonexistent/manifests.yaml"], "", &[]);
    assert!(stderr.contains("/nonexistent/manifests.yaml"), "{stderr}");
}

#[test]
fn foreign_object_with_a_generated_name_is_refused() {
    let input = format!(
        "{}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: passmower-elector\nrules: []\n",
        golden("passmower.in.yaml")
    );
    let stderr = refused(&["inject", "--no-fence"], &input, &[]);
    assert!(stderr.contains("Role passmower-elector"), "{stderr}");
}

/// The write fence is cluster-wide and names the namespace of Passmower's ServiceAccount and
/// Lease: without one (helm gives a post-renderer none) inject says how to give it, or how to go
/// without the fence, rather than emit a fence that guards nobody.
#[test]
fn the_fence_needs_a_namespace() {
    let stderr = refused(&["inject"], &golden("passmower.in.yaml"), &[]);
    for needle in [
        "write fence",
        "--namespace",
        "--no-fence",
        "Deployment/passmower",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    for ok in [
        vec!["inject", "--namespace", "auth"],
        vec!["inject", "--no-fence"],
        vec!["inject", "--workload-only"],
    ] {
        let out = inject(&ok[1..], &golden("passmower.in.yaml"), &[]);
        assert_eq!(out.status, ExitStatus::Code(0), "{ok:?}: {}", out.stderr);
    }
    let out = inject(
        &[],
        &golden("passmower.in.yaml"),
        &[("ELECTOR_NO_FENCE", "true")],
    );
    assert_eq!(
        out.status,
        ExitStatus::Code(0),
        "ELECTOR_NO_FENCE: {}",
        out.stderr
    );
}

/// Helm gives its post-renderers and plugins the release namespace as HELM_NAMESPACE: a
/// --namespace that differs would put the RBAC where Helm installs (where it works) and the
/// fence on a Lease in a namespace no elector writes to (where it admits everything).
#[test]
fn a_namespace_other_than_helms_is_refused() {
    let input = golden("passmower.in.yaml");
    let stderr = refused(
        &["inject", "--namespace", "auth"],
        &input,
        &[("HELM_NAMESPACE", "passmower")],
    );
    for needle in [
        "--namespace",
        "\"auth\"",
        "HELM_NAMESPACE",
        "--namespace=passmower",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    // The same namespace, helm giving none (an empty value too), or no --namespace: accepted.
    for (args, env) in [
        (
            vec!["--namespace", "auth"],
            vec![("HELM_NAMESPACE", "auth")],
        ),
        (vec!["--namespace", "auth"], vec![("HELM_NAMESPACE", "")]),
        (vec!["--namespace", "auth"], vec![]),
        (vec!["--no-fence"], vec![("HELM_NAMESPACE", "passmower")]),
    ] {
        let out = inject(&args, &input, &env);
        assert_eq!(
            out.status,
            ExitStatus::Code(0),
            "{args:?} {env:?}: {}",
            out.stderr
        );
    }
}

/// The fence admits a ServiceAccount's operator writes from the holder of one Lease: two
/// workloads running as one ServiceAccount with their own Leases would each have the other's
/// leader refused for ever. inject names the fence by the ServiceAccount and refuses the second.
#[test]
fn two_workloads_sharing_a_service_account_on_different_leases_are_refused() {
    let one = golden("passmower.in.yaml");
    let doc = one
        .split("\n---\n")
        .find(|d| d.contains("kind: Deployment"))
        .expect("the golden's Deployment");
    // Its own name (metadata.name only: the ServiceAccount and container stay).
    let second = doc.replacen("\n  name: passmower\n", "\n  name: passmower-two\n", 1);
    assert_ne!(second, doc, "the golden changed");
    let input = format!("{one}\n---\n{second}\n");
    let stderr = refused(&["inject", "--namespace", "auth"], &input, &[]);
    for needle in [
        "Deployment/passmower-two",
        "ServiceAccount auth/passmower",
        "Lease auth/passmower-two",
        "binds Lease auth/passmower",
        "passmower-elector-fence.auth.passmower",
        "--no-fence",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    // One Lease for both: one fence, which admits whichever pod holds it.
    let out = inject(
        &["--namespace", "auth", "--lease-name", "passmower"],
        &input,
        &[],
    );
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
    // One fence binding, and one replica guard per workload.
    let bindings: Vec<&str> = out
        .stdout
        .split("\n---\n")
        .filter(|d| d.contains("kind: ValidatingAdmissionPolicyBinding"))
        .filter_map(|d| d.lines().find_map(|l| l.strip_prefix("  name: ")))
        .collect();
    assert_eq!(
        bindings,
        [
            "passmower-elector-fence.auth.passmower",
            "passmower-elector-guard.auth.passmower",
            "passmower-elector-guard.auth.passmower-two"
        ],
        "{}",
        out.stdout
    );
}

/// A fence already in the stream (the chart's, or an earlier run's) for the same
/// ServiceAccount but another Lease: refused rather than ANDed with it.
#[test]
fn a_fence_in_the_stream_on_another_lease_is_refused() {
    let injected = inject(
        &["--namespace", "auth", "--lease-name", "elsewhere"],
        &golden("passmower.in.yaml"),
        &[],
    );
    assert_eq!(injected.status, ExitStatus::Code(0), "{}", injected.stderr);
    let fence: String = injected
        .stdout
        .split("\n---\n")
        .filter(|d| d.contains("kind: ValidatingAdmissionPolicy"))
        .map(|d| format!("---\n{}\n", d.trim_start_matches("---\n")))
        .collect();
    assert!(fence.contains("name: elsewhere"), "{fence}");
    let input = format!("{}\n{fence}", golden("passmower.in.yaml"));
    let stderr = refused(&["inject", "--namespace", "auth"], &input, &[]);
    assert!(stderr.contains("binds Lease auth/elsewhere"), "{stderr}");
    // With the Lease it names, the fence in the stream is the one inject would write.
    let out = inject(
        &["--namespace", "auth", "--lease-name", "elsewhere"],
        &input,
        &[],
    );
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
}

/// A workload injected by a build before the fence has no POD_UID on its elector, so its
/// holder identity names no pod UID and the fence would refuse every operator write of its
/// leader: inject says so instead of adding a fence to it.
#[test]
fn an_earlier_injection_without_the_pod_uid_gets_no_fence() {
    let current = golden("already-injected.in.yaml");
    let pod_uid_env = "        - name: POD_UID\n          valueFrom:\n            fieldRef:\n              fieldPath: metadata.uid\n";
    assert_eq!(
        current.matches(pod_uid_env).count(),
        1,
        "the golden changed"
    );
    let earlier = current.replace(pod_uid_env, "");
    let stderr = refused(&["inject", "--namespace", "auth"], &earlier, &[]);
    for needle in [
        "POD_UID",
        "write fence",
        "--no-fence",
        "Deployment/passmower",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    // The current output, and the earlier one without the fence, pass.
    for (input, extra) in [(&current, None), (&earlier, Some("--no-fence"))] {
        let mut args = vec!["--namespace", "auth"];
        args.extend(extra);
        let out = inject(&args, input, &[]);
        assert_eq!(out.status, ExitStatus::Code(0), "{args:?}: {}", out.stderr);
    }
}

/// A development build (this test's) knows no published image: it refuses to guess one, which
/// would leave every pod in Init, and says how to build and push one, both ways.
#[test]
fn the_sidecar_image_is_required() {
    let out = run(&["inject"], &golden("passmower.in.yaml"), &[]);
    let stderr = check_refused(out);
    for needle in [
        "--image",
        "Dockerfile.sidecar",
        "scripts/build-sidecar-image.sh",
        "skopeo copy oci-archive:",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    // The variable works as the flag does.
    let out = run(
        &["inject", "--namespace", "auth"],
        &golden("passmower.in.yaml"),
        &[("ELECTOR_IMAGE", IMAGE)],
    );
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
    assert!(out.stdout.contains(&format!("image: {IMAGE}")));
}

/// Releases push version tags only: the released repository without one would pull `latest`,
/// which nothing publishes.
#[test]
fn the_released_repository_without_a_version_is_refused() {
    let stderr = refused(
        &[
            "inject",
            "--image=ghcr.io/passmower/passmower-elector:latest",
        ],
        &golden("passmower.in.yaml"),
        &[],
    );
    assert!(stderr.contains("version tags only"), "{stderr}");
    let versioned = format!(
        "ghcr.io/passmower/passmower-elector:{}",
        env!("CARGO_PKG_VERSION")
    );
    assert!(stderr.contains(&versioned), "{stderr}");
}

/// `--on-error=manifest` (what the Helm 4 plugin runs): the reason also goes to stdout, as
/// one object of a kind no cluster serves whose name is the reason, and the exit is 0 so that
/// Helm 4 reads it. Even a mistyped flag is reported that way.
#[test]
fn on_error_manifest_puts_the_reason_where_helm_4_shows_it() {
    let cases: [(&[&str], &str); 3] = [
        (&["inject", "--on-error=manifest"], "--image"),
        (
            &["inject", "--on-error=manifest", &format!("--image={IMAGE}")],
            "no target found",
        ),
        (
            &["inject", "--on-error", "manifest", "--imagee=x"],
            "--imagee",
        ),
    ];
    let no_target = golden("no-target.in.yaml");
    for (args, reason) in cases {
        let input = if reason == "no target found" {
            no_target.as_str()
        } else {
            ""
        };
        let out = run(args, input, &[]);
        assert_eq!(out.status, ExitStatus::Code(0), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(reason), "{args:?}: {}", out.stderr);
        let docs: Vec<serde_json::Value> = serde_norway::Deserializer::from_str(&out.stdout)
            .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
            .filter(|d: &serde_json::Value| !d.is_null())
            .collect();
        assert_eq!(docs.len(), 1, "{args:?}: {}", out.stdout);
        assert_eq!(docs[0]["kind"], "InjectFailed");
        let name = docs[0]["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            name.starts_with("passmower-elector inject failed: ") && name.contains(reason),
            "{args:?}: {name}"
        );
    }
    // Without the flag a usage error stays clap's: exit 2, nothing on stdout.
    check_refused(run(&["inject", "--imagee=x"], "", &[]));
}

/// `terminationGracePeriodSeconds: -5` got "is not a whole number", which it is.
#[test]
fn a_negative_termination_grace_period_is_called_negative_with_its_path_and_range() {
    let input = golden("passmower.in.yaml").replacen(
        "\n      containers:",
        "\n      terminationGracePeriodSeconds: -5\n      containers:",
        1,
    );
    assert!(input.contains("terminationGracePeriodSeconds: -5"));
    let stderr = refused(&["inject"], &input, &[]);
    for needle in [
        "Deployment/passmower",
        "spec.template.spec.terminationGracePeriodSeconds must be a whole number of seconds \
         from 0 to",
        "got -5, which is negative",
    ] {
        assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
    }
}

/// What a cluster older than `--kube-version` says cannot serve is refused, naming the flag
/// that fits it; before this, a 1.29 cluster got a Deployment (preStop sleep) and a fence it
/// refuses, and nothing here said why.
#[test]
fn what_the_named_kubernetes_version_cannot_serve_is_refused_naming_the_way_out() {
    let input = golden("passmower.in.yaml");
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["inject", "--namespace", "auth", "--kube-version", "1.29"],
            &["--kube-version", "write fence", "1.30", "--no-fence"],
        ),
        (
            &[
                "inject",
                "--kube-version=1.29",
                "--no-fence",
                "--deny-idle-namespace",
            ],
            &["--kube-version", "--deny-idle-namespace", "1.30"],
        ),
        (
            &["inject", "--kube-version=1.28", "--no-fence"],
            &[
                "--kube-version",
                "native sidecar",
                "1.29",
                "--classic-sidecar",
            ],
        ),
        (
            &["inject", "--kube-version=latest"],
            &["--kube-version", "MAJOR.MINOR"],
        ),
    ];
    for (args, needles) in cases {
        let stderr = refused(args, &input, &[]);
        for needle in *needles {
            assert!(
                stderr.contains(needle),
                "{args:?}: {needle:?} not in: {stderr}"
            );
        }
    }
    let stderr = refused(&["inject"], &input, &[("ELECTOR_KUBE_VERSION", "1.29")]);
    assert!(stderr.contains("--no-fence"), "{stderr}");
}

/// The webhook only rewrites pods and `fence-only` adds nothing to a pod: refused at start
/// (exit 2, naming the flag and what to use instead); `auto` and `ours` pass this check (the
/// next missing setting is what it names), and a value outside the three is clap's error.
#[test]
fn the_webhook_refuses_fence_only_and_takes_auto_and_ours() {
    let image = format!("--image={IMAGE}");
    let stderr = check_refused(run(
        &["webhook", &image, "--passmower-election=fence-only"],
        "",
        &[],
    ));
    assert!(stderr.contains("--passmower-election"), "{stderr}");
    assert!(
        stderr.contains("inject --passmower-election=fence-only"),
        "{stderr}"
    );
    for mode in ["auto", "ours"] {
        let stderr = check_refused(run(
            &["webhook", &image, &format!("--passmower-election={mode}")],
            "",
            &[],
        ));
        assert!(!stderr.contains("--passmower-election"), "{mode}: {stderr}");
        assert!(
            stderr.contains("--webhook-configuration"),
            "{mode}: {stderr}"
        );
    }
    let out = run(&["inject", &image, "--passmower-election=theirs"], "", &[]);
    assert_eq!(out.status, ExitStatus::Code(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("--passmower-election"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("fence-only"), "{}", out.stderr);
}

/// The elector's Lease may be named like the one Passmower's own election takes: `auto` and
/// `ours` turn that election off whatever the image (a digest, a plain 2.2.0), so the two never
/// share the Lease.
#[test]
fn the_electors_lease_may_be_passmowers_own_name_since_its_election_is_off() {
    for image in [
        "ghcr.io/passmower/passmower@sha256:0123",
        "docker.io/codemowers/passmower:2.2.0",
    ] {
        let input =
            golden("passmower.in.yaml").replace("docker.io/codemowers/passmower:2.2.0", image);
        check_passmower_operators_lease(&input);
    }
}

fn check_passmower_operators_lease(input: &str) {
    let clash = ["--namespace=auth", "--lease-name=passmower-operators"];
    for mode in [None, Some("--passmower-election=ours")] {
        let mut args = clash.to_vec();
        args.extend(mode);
        let out = inject(&args, input, &[]);
        assert_eq!(out.status, ExitStatus::Code(0), "{mode:?}: {}", out.stderr);
        assert!(
            out.stdout
                .contains("- name: LEADER_ELECTION_ENABLED\n          value: 'false'"),
            "{mode:?}: {}",
            out.stdout
        );
    }
}

/// `--image-pull-secret` names a Secret: anything else exits 2 naming the flag and the value,
/// from the flag and from `ELECTOR_IMAGE_PULL_SECRET` alike; so does the webhook.
#[test]
fn an_image_pull_secret_must_be_a_secret_name() {
    let input = golden("passmower.in.yaml");
    for bad in ["Regcred", "reg_cred", "regcred."] {
        let stderr = refused(
            &[
                "inject",
                "--namespace=auth",
                &format!("--image-pull-secret={bad}"),
            ],
            &input,
            &[],
        );
        assert!(
            stderr.contains(&format!("invalid --image-pull-secret {bad:?}")),
            "{stderr}"
        );
        assert!(stderr.contains("DNS-1123 subdomain"), "{stderr}");
    }
    let stderr = refused(
        &["inject", "--namespace=auth"],
        &input,
        &[("ELECTOR_IMAGE_PULL_SECRET", "regcred,Other")],
    );
    assert!(
        stderr.contains("invalid --image-pull-secret \"Other\""),
        "{stderr}"
    );
    let image = format!("--image={IMAGE}");
    let stderr = check_refused(run(
        &["webhook", &image, "--image-pull-secret=Regcred"],
        "",
        &[],
    ));
    assert!(
        stderr.contains("invalid --image-pull-secret \"Regcred\""),
        "{stderr}"
    );
}

/// The Lease grant and the write fence are keyed on the ServiceAccount: a workload that runs as
/// its namespace's `default` one (none named, or `default` named) would share both with every
/// other pod there, so inject refuses it and names the field to set.
#[test]
fn a_workload_on_the_default_service_account_is_refused() {
    let own = golden("passmower.in.yaml");
    let line = "      serviceAccountName: passmower\n";
    assert_eq!(own.matches(line).count(), 1, "the golden changed");
    for (how, input) in [
        ("unset", own.replace(line, "")),
        (
            "default",
            own.replace(line, "      serviceAccountName: default\n"),
        ),
    ] {
        for args in [
            vec!["inject", "--namespace", "auth"],
            vec!["inject", "--namespace", "auth", "--no-fence"],
        ] {
            let stderr = refused(&args, &input, &[]);
            for needle in [
                "Deployment/passmower",
                "default ServiceAccount",
                "spec.template.spec.serviceAccountName",
            ] {
                assert!(stderr.contains(needle), "{how} {args:?} {needle}: {stderr}");
            }
        }
        // With --workload-only the chart owns the ServiceAccount, its RBAC and the fence.
        let out = inject(&["--namespace", "auth", "--workload-only"], &input, &[]);
        assert_eq!(out.status, ExitStatus::Code(0), "{how}: {}", out.stderr);
    }
    // Passmower 2.4 keeping its own election: its Lease grant and fence are keyed alike.
    let native = golden("passmower-2.4.in.yaml").replace(line, "");
    let stderr = refused(
        &[
            "inject",
            "--passmower-election=fence-only",
            "--namespace",
            "auth",
        ],
        &native,
        &[],
    );
    assert!(stderr.contains("default ServiceAccount"), "{stderr}");
}

/// Helm gives a post-renderer neither the release namespace nor a `metadata.namespace` on the
/// objects, but a chart writes it into its bindings' ServiceAccount subjects (upstream's
/// ClusterRoleBinding does): a `--namespace` that contradicts them would put the fence and the
/// guard on another namespace than the one Helm installs into, so inject refuses it, and
/// without `--namespace` it takes the namespace from there.
#[test]
fn a_namespace_the_rendered_bindings_contradict_is_refused() {
    let binding = "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
                   metadata:\n  name: passmower\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  \
                   kind: ClusterRole\n  name: passmower\nsubjects:\n  - kind: ServiceAccount\n    \
                   name: passmower\n    namespace: auth\n";
    let input = format!("{}{binding}", golden("passmower.in.yaml"));
    let stderr = refused(&["inject", "--namespace", "passmower"], &input, &[]);
    for needle in [
        "Deployment/passmower",
        "ServiceAccount passmower in namespace auth",
        "--namespace is \"passmower\"",
        "--namespace=auth",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    // The namespace Helm installs into, or none: the fence and the guard protect `auth`.
    for args in [vec!["--namespace", "auth"], vec![]] {
        let out = inject(&args, &input, &[]);
        assert_eq!(out.status, ExitStatus::Code(0), "{args:?}: {}", out.stderr);
        for name in [
            "name: passmower-elector-fence.auth.passmower",
            "name: passmower-elector-guard.auth.passmower",
        ] {
            assert!(
                out.stdout.contains(name),
                "{args:?} {name}:\n{}",
                out.stdout
            );
        }
    }
}
