//! The tests of the pod-spec rewrite, the sidecars' identity included: what `pod_spec/identity.rs`
//! decides is seen in the containers and flags the rewrite writes, so it is tested here.

use std::time::Duration;

use k8s_openapi::api::core::v1::SecurityContext;

use super::*;
use crate::inject::names::SIDECAR_UID;
use crate::inject::target::tests::{opts, target_of, DEPLOYMENT};
use crate::inject::value::at;

/// `text`'s first document rewritten, and the warnings of the rewrite.
pub(crate) fn rewritten(text: &str, opts: &InjectOptions) -> (Value, Vec<String>) {
    let (mut value, target) = target_of(text, opts);
    let mut warnings = Vec::new();
    rewrite(&mut value, &target, opts, &mut warnings).unwrap();
    (value, warnings)
}

fn main_args(value: &Value) -> Vec<String> {
    at(value, &["spec", "template", "spec", "containers"]).unwrap()[0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// The elector's arguments in a rewritten Deployment.
fn elector_args(value: &Value) -> Vec<String> {
    at(value, &["spec", "template", "spec", "initContainers"])
        .unwrap()
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str() == Some(ELECTOR_CONTAINER))
        .unwrap()["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// Passmower keeps serving through a handover: its supervisor runs a separate leader
/// instance with every listener moved, its metrics port to a fixed one the elector serves at
/// /metrics/leader-app, kept warm as a standby unless told not to; another app keeps restart
/// mode unless asked.
#[test]
fn passmower_gets_a_leader_instance_and_other_apps_restart_mode_unless_told() {
    let on_change = |value: &Value| -> Vec<String> {
        main_args(value)
            .into_iter()
            .take_while(|a| a != "--")
            .filter(|a| a.starts_with("--on-change") || a.starts_with("--leader-"))
            .filter(|a| !a.starts_with("--leader-env"))
            .collect()
    };
    let separate = [
        "--on-change=leader-instance",
        "--leader-port-map=9090=19090",
        "--leader-port-map=*=0",
        "--leader-health-url=http://127.0.0.1:19090/health",
        "--leader-standby",
    ];
    let metrics_port = "--leader-app-metrics-port=19090".to_owned();
    let passmower = rewritten(DEPLOYMENT, &opts()).0;
    assert_eq!(on_change(&passmower), separate);
    assert!(elector_args(&passmower).contains(&metrics_port));
    let cold = InjectOptions {
        leader_standby: false,
        ..opts()
    };
    assert_eq!(on_change(&rewritten(DEPLOYMENT, &cold).0), separate[..4]);
    let restart_cold = InjectOptions {
        on_change: Some(AppOnChange::Restart),
        leader_standby: false,
        ..opts()
    };
    assert!(on_change(&rewritten(DEPLOYMENT, &restart_cold).0).is_empty());
    let restart = InjectOptions {
        on_change: Some(AppOnChange::Restart),
        ..opts()
    };
    let restarted = rewritten(DEPLOYMENT, &restart).0;
    assert!(on_change(&restarted).is_empty());
    assert!(!elector_args(&restarted).contains(&metrics_port));

    let other = DEPLOYMENT.replace("name: passmower", "name: web");
    let web = InjectOptions {
        container: "web".into(),
        app_command: Some(vec!["node".into(), "server.js".into()]),
        ..opts()
    };
    assert!(on_change(&rewritten(&other, &web).0).is_empty());
    let web_separate = InjectOptions {
        on_change: Some(AppOnChange::LeaderInstance),
        ..web
    };
    // Not Passmower: its health route is not known, so it is not probed.
    let without_health: Vec<&str> = separate
        .iter()
        .copied()
        .filter(|f| !f.starts_with("--leader-health-url"))
        .collect();
    assert_eq!(
        on_change(&rewritten(&other, &web_separate).0),
        without_health
    );
}

#[test]
fn durations_round_trip_through_the_flag_form() {
    for d in [
        Duration::from_secs(15),
        Duration::from_secs(90),
        Duration::from_millis(1500),
    ] {
        let text = duration_flag(d);
        assert!(!text.contains(' '));
        assert_eq!(crate::config::parse_positive_duration(&text), Ok(d));
    }
}

#[test]
fn container_without_command_gets_passmowers_default() {
    let (value, _) = rewritten(DEPLOYMENT, &opts());
    let args = main_args(&value);
    let dashdash = args.iter().position(|a| a == "--").unwrap();
    assert_eq!(args[dashdash + 1..], PASSMOWER_APP_COMMAND[..]);
}

/// The selector flags of a rewritten Deployment's supervisor.
fn selector_flags(value: &Value) -> Vec<String> {
    main_args(value)
        .into_iter()
        .filter(|a| a.contains("NAMESPACE_SELECTOR"))
        .collect()
}

/// A container whose `env` sets no NAMESPACE_SELECTOR runs Passmower in its pod's namespace,
/// or with what `envFrom` or the image supplies: the leader is given no value of its own and
/// inherits that, silently and without a warning, since nothing changes. Only an explicit
/// `--namespace-selector` (empty: the pod's own namespace) is written for the leader.
#[test]
fn a_container_without_a_selector_keeps_its_own_for_the_leader() {
    let follower = "--follower-env=NAMESPACE_SELECTOR=passmower-elector_idle".to_owned();
    let with_env_from = format!(
        "{DEPLOYMENT}        envFrom:
        - configMapRef: {{name: passmower-settings}}
"
    );
    for text in [DEPLOYMENT.to_owned(), with_env_from] {
        let (value, warnings) = rewritten(&text, &opts());
        assert_eq!(selector_flags(&value), [follower.as_str()], "{text}");
        assert!(
            warnings.iter().all(|w| !w.contains("NAMESPACE_SELECTOR")),
            "{warnings:?}"
        );
        for explicit in ["", "*", "tenant-a"] {
            let opts = InjectOptions {
                namespace_selector: Some(explicit.to_owned()),
                ..opts()
            };
            assert_eq!(
                selector_flags(&rewritten(&text, &opts).0),
                [
                    format!("--leader-env=NAMESPACE_SELECTOR={explicit}"),
                    follower.clone()
                ]
            );
        }
    }
}

#[test]
fn other_container_without_command_is_an_error() {
    let text = DEPLOYMENT.replace("name: passmower", "name: app");
    let opts = InjectOptions {
        container: "app".into(),
        ..opts()
    };
    let (mut value, target) = target_of(&text, &opts);
    let err = rewrite(&mut value, &target, &opts, &mut Vec::new()).unwrap_err();
    assert!(matches!(err, InjectError::NoCommand { .. }), "{err}");
}

#[test]
fn value_from_selector_is_expanded_by_the_kubelet() {
    let text = format!(
        "{DEPLOYMENT}        env:
        - name: NAMESPACE_SELECTOR
          valueFrom:
            configMapKeyRef: {{name: c, key: k}}
"
    );
    let (value, _) = rewritten(&text, &opts());
    let args = main_args(&value);
    assert!(args.contains(&format!(
        "--leader-env=NAMESPACE_SELECTOR=$({LEADER_SELECTOR_VAR})"
    )));
    let env = at(&value, &["spec", "template", "spec", "containers"]).unwrap()[0]["env"]
        .as_sequence()
        .unwrap()
        .clone();
    let names: Vec<&str> = env.iter().filter_map(|e| e["name"].as_str()).collect();
    assert_eq!(names, ["LEADER_ELECTION_ENABLED", LEADER_SELECTOR_VAR]);
}

#[test]
fn optional_value_from_selector_is_refused() {
    let text = format!(
        "{DEPLOYMENT}        env:
        - name: NAMESPACE_SELECTOR
          valueFrom:
            secretKeyRef: {{name: c, key: k, optional: true}}
"
    );
    let opts = opts();
    let (mut value, target) = target_of(&text, &opts);
    let err = rewrite(&mut value, &target, &opts, &mut Vec::new()).unwrap_err();
    assert!(err.to_string().contains("--namespace-selector"), "{err}");
}

#[test]
fn grace_period_covers_drain_kill_grace_and_release() {
    let text = DEPLOYMENT.replace(
        "      containers:",
        "      terminationGracePeriodSeconds: 60\n      containers:",
    );
    let (value, _) = rewritten(&text, &opts());
    let grace = at(
        &value,
        &["spec", "template", "spec", "terminationGracePeriodSeconds"],
    )
    .and_then(Value::as_u64);
    assert_eq!(
        grace,
        Some(60 + DRAIN_SECONDS + 3 + RELEASE_ALLOWANCE_SECONDS)
    );
}

/// `-5` got "is not a whole number", which it is: the message now says it is negative, names
/// the field's path and the allowed range.
#[test]
fn a_grace_period_that_is_negative_or_no_number_says_what_is_wrong() {
    for (given, got) in [
        ("-5", "got -5, which is negative"),
        ("1.5", "got 1.5"),
        ("'30'", "got '30'"),
        (
            "9223372036854775807",
            "must still fit): got 9223372036854775807",
        ),
    ] {
        let text = DEPLOYMENT.replace(
            "      containers:",
            &format!("      terminationGracePeriodSeconds: {given}\n      containers:"),
        );
        let (mut value, target) = target_of(&text, &opts());
        let err = rewrite(&mut value, &target, &opts(), &mut Vec::new()).unwrap_err();
        let err = err.to_string();
        assert!(
            err.contains(
                "spec.template.spec.terminationGracePeriodSeconds must be a whole number \
                 of seconds from 0 to"
            ),
            "{given}: {err}"
        );
        assert!(err.contains(got), "{given}: {err}");
    }
    assert_eq!(termination_grace(None, 13), Ok(30));
    assert_eq!(termination_grace(Some(&Value::from(0)), 13), Ok(0));
    let max = i64::MAX as u64 - 13;
    assert_eq!(termination_grace(Some(&Value::from(max)), 13), Ok(max));
    assert!(termination_grace(Some(&Value::from(max + 1)), 13).is_err());
}

#[test]
fn the_app_drains_before_its_stop_unless_it_has_its_own_pre_stop_or_a_classic_sidecar() {
    let pre_stop = |value: &Value| {
        at(value, &["spec", "template", "spec", "containers"]).unwrap()[0]["lifecycle"]["preStop"]
            .clone()
    };
    let grace = |value: &Value| {
        at(
            value,
            &["spec", "template", "spec", "terminationGracePeriodSeconds"],
        )
        .and_then(Value::as_u64)
    };
    let (value, _) = rewritten(DEPLOYMENT, &opts());
    assert_eq!(
        pre_stop(&value)["sleep"]["seconds"].as_u64(),
        Some(DRAIN_SECONDS)
    );
    assert_eq!(
        grace(&value),
        Some(30 + DRAIN_SECONDS + 3 + RELEASE_ALLOWANCE_SECONDS)
    );

    let own = format!(
        "{DEPLOYMENT}        lifecycle:\n          preStop:\n            exec: {{command: [drain]}}\n"
    );
    let (value, _) = rewritten(&own, &opts());
    assert!(
        pre_stop(&value)["sleep"].is_null(),
        "{:?}",
        pre_stop(&value)
    );
    assert_eq!(
        pre_stop(&value)["exec"]["command"][0].as_str(),
        Some("drain")
    );
    assert_eq!(grace(&value), Some(30 + 3 + RELEASE_ALLOWANCE_SECONDS));

    let classic = InjectOptions {
        classic_sidecar: true,
        ..opts()
    };
    let (value, _) = rewritten(DEPLOYMENT, &classic);
    assert!(pre_stop(&value).is_null(), "{:?}", pre_stop(&value));
    assert_eq!(grace(&value), Some(30 + 3 + RELEASE_ALLOWANCE_SECONDS));
}

/// A 1.29 cluster refuses a Deployment whose container has a `preStop` sleep (the sleep
/// action is alpha there: the field is dropped and the empty handler is invalid), so for
/// `--kube-version` 1.29 the drain is left out, with a warning saying what that costs.
#[test]
fn no_sleep_drain_for_a_cluster_before_1_30() {
    let lifecycle = |value: &Value| {
        at(value, &["spec", "template", "spec", "containers"]).unwrap()[0]["lifecycle"].clone()
    };
    let at_version = |minor| InjectOptions {
        kube_version: Some(KubeVersion::new(1, minor)),
        ..opts()
    };
    let (value, warnings) = rewritten(DEPLOYMENT, &at_version(29));
    assert!(
        lifecycle(&value)["preStop"].is_null(),
        "{:?}",
        lifecycle(&value)
    );
    let grace = at(
        &value,
        &["spec", "template", "spec", "terminationGracePeriodSeconds"],
    );
    assert_eq!(
        grace.and_then(Value::as_u64),
        Some(30 + 3 + RELEASE_ALLOWANCE_SECONDS)
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("no preStop drain") && w.contains("Kubernetes 1.30")),
        "{warnings:?}"
    );
    for minor in [30, 37] {
        let (value, warnings) = rewritten(DEPLOYMENT, &at_version(minor));
        assert_eq!(
            lifecycle(&value)["preStop"]["sleep"]["seconds"].as_u64(),
            Some(DRAIN_SECONDS)
        );
        assert!(
            !warnings.iter().any(|w| w.contains("preStop")),
            "{warnings:?}"
        );
    }
}

#[test]
fn classic_sidecar_is_a_plain_container() {
    let opts = InjectOptions {
        classic_sidecar: true,
        ..opts()
    };
    let (value, _) = rewritten(DEPLOYMENT, &opts);
    let pod = at(&value, &["spec", "template", "spec"]).unwrap();
    let containers = pod["containers"].as_sequence().unwrap();
    assert_eq!(containers[1]["name"].as_str(), Some(ELECTOR_CONTAINER));
    assert!(containers[1].get("restartPolicy").is_none());
    assert_eq!(pod["initContainers"].as_sequence().unwrap().len(), 1);
}

// === the sidecars' identity ===

fn sidecar_users(value: &Value) -> Vec<(i64, i64)> {
    let pod = &value["spec"]["template"]["spec"];
    pod["initContainers"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| {
            let sc = &c["securityContext"];
            (
                sc["runAsUser"].as_i64().unwrap(),
                sc["runAsGroup"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_sidecars_run_as_the_apps_non_root_user() {
    let container = DEPLOYMENT.replace(
        "        image: ghcr.io/passmower/passmower:2.2.0\n",
        "        image: ghcr.io/passmower/passmower:2.2.0\n        securityContext: {runAsUser: 1000, runAsGroup: 3000}\n",
    );
    let (value, _) = rewritten(&container, &opts());
    assert_eq!(sidecar_users(&value), [(1000, 3000), (1000, 3000)]);

    // The pod's securityContext applies when the container sets none; the container's
    // own wins over it field by field.
    let pod = DEPLOYMENT.replace(
        "      containers:",
        "      securityContext: {runAsUser: 2000}\n      containers:",
    );
    let (value, _) = rewritten(&pod, &opts());
    assert_eq!(sidecar_users(&value), [(2000, 2000), (2000, 2000)]);
    let both = pod.replace(
        "        image: ghcr.io/passmower/passmower:2.2.0\n",
        "        image: ghcr.io/passmower/passmower:2.2.0\n        securityContext: {runAsUser: 1001}\n",
    );
    let (value, _) = rewritten(&both, &opts());
    assert_eq!(sidecar_users(&value), [(1001, 1001), (1001, 1001)]);

    // Root, or nothing said: the image's non-root user.
    for text in [
        DEPLOYMENT.to_owned(),
        DEPLOYMENT.replace(
            "        image: ghcr.io/passmower/passmower:2.2.0\n",
            "        image: ghcr.io/passmower/passmower:2.2.0\n        securityContext: {runAsUser: 0}\n",
        ),
    ] {
        let (value, _) = rewritten(&text, &opts());
        assert_eq!(
            sidecar_users(&value),
            [(SIDECAR_UID, SIDECAR_UID), (SIDECAR_UID, SIDECAR_UID)]
        );
    }
}

/// Hardening upstream's empty securityContext with `capabilities: {drop: [ALL]}` leaves a
/// root supervisor that cannot read the elector's 0600 token owned by 65532, so the pod never
/// led: the elector now runs as root too (every capability still dropped), and the token is
/// then the supervisor's own file.
#[test]
fn a_root_app_that_drops_dac_override_gets_a_root_elector_with_no_capabilities() {
    let root_sidecars = |text: &str| {
        let (value, warnings) = rewritten(text, &opts());
        assert!(warnings.is_empty(), "{text}: {warnings:?}");
        let elector = &value["spec"]["template"]["spec"]["initContainers"][1];
        assert_eq!(elector["name"], "passmower-elector", "{elector:?}");
        let sc = &elector["securityContext"];
        assert!(sc.get("runAsNonRoot").is_none(), "{sc:?}");
        assert_eq!(sc["capabilities"]["drop"][0], "ALL");
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert!(supervise_args(&value)
            .iter()
            .all(|a| !a.starts_with("--elector-uid")));
        sidecar_users(&value)
    };
    for context in [
        "{capabilities: {drop: [ALL]}}",
        "{runAsUser: 0, capabilities: {drop: [all]}}",
        "{capabilities: {drop: [CAP_DAC_OVERRIDE]}}",
        "{capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}}",
        "{runAsNonRoot: false, capabilities: {drop: [ALL]}}",
    ] {
        assert_eq!(
            root_sidecars(&with_app_context(context)),
            [(0, 0), (0, 0)],
            "{context}"
        );
    }
    assert_eq!(
        root_sidecars(&with_app_context(
            "{runAsGroup: 3000, capabilities: {drop: [ALL]}}"
        )),
        [(0, 3000), (0, 3000)]
    );
    // Root that can still read any file, or an app that is not root: as before.
    for context in [
        "{capabilities: {drop: [NET_RAW]}}",
        "{capabilities: {drop: [ALL], add: [DAC_OVERRIDE]}}",
        "{capabilities: {drop: [ALL], add: [CAP_DAC_READ_SEARCH]}}",
        "{runAsUser: 1000, capabilities: {drop: [ALL]}}",
    ] {
        let (value, _) = rewritten(&with_app_context(context), &opts());
        let expected = if context.contains("1000") {
            [(1000, 1000), (1000, 1000)]
        } else {
            [(SIDECAR_UID, SIDECAR_UID), (SIDECAR_UID, SIDECAR_UID)]
        };
        assert_eq!(sidecar_users(&value), expected, "{context}");
    }
    // The pod says non-root: its image's user, warned about as before.
    let pod_level = with_app_context("{capabilities: {drop: [ALL]}}").replace(
        "      containers:",
        "      securityContext: {runAsNonRoot: true}\n      containers:",
    );
    let (value, warnings) = rewritten(&pod_level, &opts());
    assert_eq!(
        sidecar_users(&value),
        [(SIDECAR_UID, SIDECAR_UID), (SIDECAR_UID, SIDECAR_UID)]
    );
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    // An explicit elector user that cannot share the root app's files is warned about.
    let (_, warnings) = rewritten(
        &with_app_context("{capabilities: {drop: [ALL]}}"),
        &sidecar_as(Some(SIDECAR_UID)),
    );
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("set runAsUser 0"), "{}", warnings[0]);
}

fn supervise_args(value: &Value) -> Vec<String> {
    let args = value["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap();
    let words: Vec<String> = args
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let end = words.iter().position(|w| w == "--").unwrap();
    words[..end].to_vec()
}

fn with_app_context(context: &str) -> String {
    DEPLOYMENT.replace(
        "        image: ghcr.io/passmower/passmower:2.2.0\n",
        &format!("        image: ghcr.io/passmower/passmower:2.2.0\n        securityContext: {context}\n"),
    )
}

fn sidecar_as(uid: Option<i64>) -> InjectOptions {
    InjectOptions {
        sidecar_security_context: Some(SecurityContext {
            run_as_user: uid,
            run_as_non_root: Some(true),
            ..Default::default()
        }),
        ..opts()
    }
}

/// The supervisor trusts a token file owned by its own UID or by --elector-uid (65532 by
/// default): an elector moved to another UID beside a root app must be named, or the token
/// is refused and the pod never leads.
#[test]
fn an_elector_under_another_uid_than_the_default_beside_a_root_app_is_named_to_supervise() {
    let elector_uid = |args: &[String]| {
        args.iter()
            .filter(|a| a.starts_with("--elector-uid"))
            .cloned()
            .collect::<Vec<_>>()
    };
    for app in [DEPLOYMENT.to_owned(), with_app_context("{runAsUser: 0}")] {
        let (value, warnings) = rewritten(&app, &sidecar_as(Some(4242)));
        assert_eq!(elector_uid(&supervise_args(&value)), ["--elector-uid=4242"]);
        assert!(warnings.is_empty(), "{warnings:?}");
        // The default elector user, or the default one named explicitly: nothing to say.
        let (value, _) = rewritten(&app, &opts());
        assert!(elector_uid(&supervise_args(&value)).is_empty());
        let (value, _) = rewritten(&app, &sidecar_as(Some(SIDECAR_UID)));
        assert!(elector_uid(&supervise_args(&value)).is_empty());
    }
    // An explicit context without a user runs the elector as the pod's runAsUser.
    let pod_user = DEPLOYMENT.replace(
        "      containers:",
        "      securityContext: {runAsUser: 0}\n      containers:",
    );
    let (value, _) = rewritten(&pod_user, &sidecar_as(None));
    assert_eq!(elector_uid(&supervise_args(&value)), ["--elector-uid=0"]);
    // A non-root app shares its UID with the elector: the supervisor's own UID suffices.
    let (value, _) = rewritten(&with_app_context("{runAsUser: 1000}"), &opts());
    assert!(elector_uid(&supervise_args(&value)).is_empty());
}

#[test]
fn a_non_root_app_without_a_uid_is_warned_about_in_the_manifest() {
    let text = with_app_context("{runAsNonRoot: true}");
    let (value, warnings) = rewritten(&text, &opts());
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("runAsNonRoot without runAsUser"),
        "{}",
        warnings[0]
    );
    let annotation = value["metadata"]["annotations"]["passmower-elector.io/warnings"]
        .as_str()
        .unwrap();
    assert!(annotation.contains("runAsNonRoot without runAsUser"));

    // The pod's runAsNonRoot counts too; a UID named anywhere, or for the elector, silences it.
    let pod_level = DEPLOYMENT.replace(
        "      containers:",
        "      securityContext: {runAsNonRoot: true}\n      containers:",
    );
    assert_eq!(rewritten(&pod_level, &opts()).1.len(), 1);
    for quiet in [
        with_app_context("{runAsNonRoot: true, runAsUser: 1000}"),
        pod_level.replace(
            "runAsNonRoot: true}",
            "runAsNonRoot: true, runAsUser: 1000}",
        ),
        with_app_context("{runAsNonRoot: false}"),
        DEPLOYMENT.to_owned(),
    ] {
        let (_, warnings) = rewritten(&quiet, &opts());
        assert!(warnings.is_empty(), "{quiet}: {warnings:?}");
    }
    assert!(rewritten(&text, &sidecar_as(Some(1000))).1.is_empty());
}

#[test]
fn an_explicit_sidecar_user_other_than_the_apps_is_warned_about() {
    let text = DEPLOYMENT.replace(
        "        image: ghcr.io/passmower/passmower:2.2.0\n",
        "        image: ghcr.io/passmower/passmower:2.2.0\n        securityContext: {runAsUser: 1000}\n",
    );
    let explicit = InjectOptions {
        sidecar_security_context: Some(SecurityContext {
            run_as_user: Some(4242),
            ..Default::default()
        }),
        ..opts()
    };
    let (value, warnings) = rewritten(&text, &explicit);
    assert_eq!(
        value["spec"]["template"]["spec"]["initContainers"][0]["securityContext"]["runAsUser"]
            .as_i64(),
        Some(4242)
    );
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("UID 1000"), "{}", warnings[0]);
}

/// An app whose user nobody names runs as its image's `USER`: beside an image that is not
/// upstream Passmower's (root), a non-root `USER` other than the elector's would leave the
/// supervisor unable to read the token and no pod contending, for ever. The rewrite warns,
/// naming the image, the elector's UID and the fix; a UID named anywhere silences it.
#[test]
fn an_image_of_unknown_user_without_run_as_user_is_warned_about() {
    let custom = DEPLOYMENT.replace(
        "ghcr.io/passmower/passmower:2.2.0",
        "registry.example.com/hardened/passmower:2.4.0",
    );
    let (value, warnings) = rewritten(&custom, &opts());
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = &warnings[0];
    for part in [
        "Deployment/pm: container \"passmower\" names no runAsUser (nor does the pod)",
        "\"registry.example.com/hardened/passmower:2.4.0\"",
        "the elector runs as UID 65532",
        "set runAsUser on the container (or the pod) to the image's user (0 for root)",
        "--sidecar-security-context",
    ] {
        assert!(w.contains(part), "{part:?} not in {w}");
    }
    assert!(
        value["metadata"]["annotations"]["passmower-elector.io/warnings"]
            .as_str()
            .is_some_and(|a| a.contains("names no runAsUser"))
    );

    // A root app without DAC_OVERRIDE gets an elector as root: the warning names UID 0.
    let dropped = custom.replace(
        "passmower:2.4.0\n",
        "passmower:2.4.0\n        securityContext: {capabilities: {drop: [ALL]}}\n",
    );
    let (_, warnings) = rewritten(&dropped, &opts());
    assert!(
        warnings.len() == 1 && warnings[0].contains("the elector runs as UID 0"),
        "{warnings:?}"
    );

    let quiet = |text: &str, opts: &InjectOptions| {
        let (_, warnings) = rewritten(text, opts);
        assert!(
            !warnings.iter().any(|w| w.contains("names no runAsUser")),
            "{text}: {warnings:?}"
        );
    };
    // Upstream's image (root), also through a mirror that keeps its path.
    quiet(DEPLOYMENT, &opts());
    for image in [
        "docker.io/codemowers/passmower:2.2.0",
        "harbor.example.com:8443/ghcr-proxy/passmower/passmower:2.4.0",
        "ghcr.io/passmower/passmower@sha256:0123",
    ] {
        quiet(
            &DEPLOYMENT.replace("ghcr.io/passmower/passmower:2.2.0", image),
            &opts(),
        );
    }
    // A UID named on the container, on the pod (0 too), or for the elector.
    quiet(
        &custom.replace(
            "passmower:2.4.0\n",
            "passmower:2.4.0\n        securityContext: {runAsUser: 1000}\n",
        ),
        &opts(),
    );
    quiet(
        &custom.replace(
            "      containers:",
            "      securityContext: {runAsUser: 0}\n      containers:",
        ),
        &opts(),
    );
    quiet(&custom, &sidecar_as(Some(1000)));
    // runAsNonRoot without a UID has its own warning, not this one too.
    let non_root = custom.replace(
        "passmower:2.4.0\n",
        "passmower:2.4.0\n        securityContext: {runAsNonRoot: true}\n",
    );
    let (_, warnings) = rewritten(&non_root, &opts());
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("runAsNonRoot without runAsUser"));
}

#[test]
fn an_install_without_a_fence_does_not_check_for_one() {
    let off = "--write-fence-check=off".to_owned();
    let fenced = rewritten(DEPLOYMENT, &opts()).0;
    assert!(!elector_args(&fenced).contains(&off));
    let unfenced = InjectOptions {
        fence: false,
        ..opts()
    };
    assert!(elector_args(&rewritten(DEPLOYMENT, &unfenced).0).contains(&off));
}
