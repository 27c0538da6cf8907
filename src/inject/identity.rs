//! Which user the sidecars run as: the app's own when it is not root, because the elector and
//! the app read files the other writes with mode 0600.

use k8s_openapi::api::core::v1::SecurityContext;
use serde_norway::{Mapping, Value};

use super::workload::{at, str_at, SIDECAR_UID};

/// The user and group the app runs as, when it is not root: the elector and the install
/// container take them over, so files one writes with mode 0600 (the push secret, the ack
/// file) stay readable to the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppIdentity {
    pub uid: i64,
    pub gid: Option<i64>,
}

/// A field of the target container's securityContext, else the pod's (as the kubelet applies
/// them: the container's wins field by field).
fn app_security_field<'a>(pod: &'a Mapping, container: &str, name: &str) -> Option<&'a Value> {
    let main = pod
        .get("containers")
        .and_then(Value::as_sequence)?
        .iter()
        .find(|c| str_at(c, &["name"]) == Some(container))?;
    at(main, &["securityContext", name])
        .filter(|v| !v.is_null())
        .or_else(|| {
            pod.get("securityContext")
                .and_then(|sc| sc.get(name))
                .filter(|v| !v.is_null())
        })
}

/// The target container's non-zero runAsUser (its own securityContext, else the pod's), with
/// its runAsGroup taken the same way.
pub fn app_identity(pod: &Mapping, container: &str) -> Option<AppIdentity> {
    let field = |name: &str| app_security_field(pod, container, name).and_then(Value::as_i64);
    let uid = field("runAsUser").filter(|uid| *uid > 0)?;
    Some(AppIdentity {
        uid,
        gid: field("runAsGroup"),
    })
}

/// The flags `supervise` needs to trust the elector's token file, which it accepts only from its
/// own UID or `--elector-uid` (default [`SIDECAR_UID`]). A non-root app shares its UID with the
/// elector (inject sees to that), so nothing is needed; a root or unnamed app user with an
/// elector that runs as another UID than the default (an explicit `--sidecar-security-context`
/// runAsUser, or a pod-level runAsUser that the explicit context does not override) needs that
/// UID named, or the supervisor refuses the token and the app never leads.
pub fn supervise_flags(
    pod: &Mapping,
    explicit: Option<&SecurityContext>,
    app: Option<AppIdentity>,
) -> Vec<String> {
    if app.is_some() {
        return Vec::new();
    }
    let elector_uid = match explicit {
        // The default context names SIDECAR_UID itself.
        None => return Vec::new(),
        Some(sc) => sc.run_as_user.or_else(|| {
            pod.get("securityContext")
                .and_then(|sc| sc.get("runAsUser"))
                .and_then(Value::as_i64)
        }),
    };
    match elector_uid.and_then(|uid| u32::try_from(uid).ok()) {
        Some(uid) if i64::from(uid) != SIDECAR_UID => vec![format!("--elector-uid={uid}")],
        _ => Vec::new(),
    }
}

/// The warning for an app that must not run as root but names no UID: its user comes from the
/// image, which inject cannot read, so the elector cannot be given the same one; unless it
/// happens to be the elector's, the supervisor cannot read the elector's 0600 token and the
/// app stays follower. `None` when a UID is named (by the app, or for the elector explicitly).
pub fn unmatched_non_root_warning(
    pod: &Mapping,
    container: &str,
    explicit: Option<&SecurityContext>,
    workload: &str,
) -> Option<String> {
    let non_root = app_security_field(pod, container, "runAsNonRoot").and_then(Value::as_bool);
    let named = app_security_field(pod, container, "runAsUser").is_some();
    let elector_named = explicit.is_some_and(|sc| sc.run_as_user.is_some());
    (non_root == Some(true) && !named && !elector_named).then(|| {
        format!(
            "{workload}: container {container:?} sets runAsNonRoot without runAsUser, so it runs \
             as its image's user, which inject cannot know; the elector runs as UID {SIDECAR_UID}, \
             and unless that is the image's user the supervisor cannot read the elector's token \
             and the app never leads: set runAsUser on the container (or the pod), or pass \
             --sidecar-security-context with the image's UID"
        )
    })
}

#[cfg(test)]
mod tests {
    use crate::inject::workload::tests::{opts, rewritten, DEPLOYMENT, SIDECAR_UID};
    use crate::inject::InjectOptions;
    use k8s_openapi::api::core::v1::SecurityContext;
    use serde_norway::Value;

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
            "        image: passmower:2.2.0\n",
            "        image: passmower:2.2.0\n        securityContext: {runAsUser: 1000, runAsGroup: 3000}\n",
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
            "        image: passmower:2.2.0\n",
            "        image: passmower:2.2.0\n        securityContext: {runAsUser: 1001}\n",
        );
        let (value, _) = rewritten(&both, &opts());
        assert_eq!(sidecar_users(&value), [(1001, 1001), (1001, 1001)]);

        // Root, or nothing said: the image's non-root user.
        for text in [
            DEPLOYMENT.to_owned(),
            DEPLOYMENT.replace(
                "        image: passmower:2.2.0\n",
                "        image: passmower:2.2.0\n        securityContext: {runAsUser: 0}\n",
            ),
        ] {
            let (value, _) = rewritten(&text, &opts());
            assert_eq!(
                sidecar_users(&value),
                [(SIDECAR_UID, SIDECAR_UID), (SIDECAR_UID, SIDECAR_UID)]
            );
        }
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
            "        image: passmower:2.2.0\n",
            &format!("        image: passmower:2.2.0\n        securityContext: {context}\n"),
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
            "        image: passmower:2.2.0\n",
            "        image: passmower:2.2.0\n        securityContext: {runAsUser: 1000}\n",
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
}
