//! Which user the sidecars run as: the app's own when it is not root, because the elector and
//! the app read files the other writes with mode 0600 — and root too when the app is a root that
//! has dropped the capabilities that let root read another user's 0600 file.

use k8s_openapi::api::core::v1::SecurityContext;
use serde_norway::{Mapping, Value};

use super::names::SIDECAR_UID;
use super::value::{at, str_at};

/// The user and group the app runs as, when the elector must share them: the elector and the
/// install container take them over, so the token the elector writes with mode 0600 stays
/// readable to the supervisor. `uid` is 0 only for a root app without CAP_DAC_OVERRIDE and
/// CAP_DAC_READ_SEARCH (see [`root_without_file_override`]).
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
/// its runAsGroup taken the same way; UID 0 for a root app that cannot read another user's 0600
/// file ([`root_without_file_override`]).
///
/// Why the elector runs as root beside such an app, and the token is not made group-readable
/// instead: the token's secrecy rests on one rule, "0600, owned by the user the elector and the
/// app share", so exactly the two containers that mount the volume under that user can read it.
/// A group-readable token needs a group both share, which only the pod-level `fsGroup` or
/// `supplementalGroups` can give: that changes the ownership of every volume of the pod and
/// puts every container in the group, and the supervisor would have to trust group bits. The
/// elector as UID 0 keeps the restricted profile's other fields (every capability dropped, no
/// privilege escalation, a read-only root file system), the same hardening the app chose.
pub fn app_identity(pod: &Mapping, container: &str) -> Option<AppIdentity> {
    let field = |name: &str| app_security_field(pod, container, name).and_then(Value::as_i64);
    let gid = field("runAsGroup");
    match field("runAsUser").filter(|uid| *uid > 0) {
        Some(uid) => Some(AppIdentity { uid, gid }),
        None => root_without_file_override(pod, container).then_some(AppIdentity { uid: 0, gid }),
    }
}

/// Whether the target container runs as root (runAsUser 0, or none and no `runAsNonRoot:
/// true`: Passmower's image runs as root) without the capabilities that let root read a file
/// another user owns with mode 0600: its `capabilities.drop` names `ALL` or `DAC_OVERRIDE`, and
/// its `capabilities.add` gives back neither `DAC_OVERRIDE` nor `DAC_READ_SEARCH` (the default
/// capability set of containerd and CRI-O has the first, not the second). Such a supervisor
/// cannot read a token owned by the elector's default UID.
pub fn root_without_file_override(pod: &Mapping, container: &str) -> bool {
    let field = |name: &str| app_security_field(pod, container, name);
    if field("runAsUser")
        .and_then(Value::as_i64)
        .is_some_and(|uid| uid != 0)
        || field("runAsNonRoot").and_then(Value::as_bool) == Some(true)
    {
        return false;
    }
    // Capabilities exist only on the container's own securityContext.
    let capabilities = pod
        .get("containers")
        .and_then(Value::as_sequence)
        .and_then(|cs| cs.iter().find(|c| str_at(c, &["name"]) == Some(container)))
        .and_then(|c| at(c, &["securityContext", "capabilities"]));
    let names = |list: &str| -> Vec<String> {
        capabilities
            .and_then(|c| c.get(list))
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|n| {
                let n = n.trim().to_ascii_uppercase();
                n.strip_prefix("CAP_").map(str::to_owned).unwrap_or(n)
            })
            .collect()
    };
    let dropped = names("drop");
    let added = names("add");
    dropped.iter().any(|n| n == "ALL" || n == "DAC_OVERRIDE")
        && !added
            .iter()
            .any(|n| n == "ALL" || n == "DAC_OVERRIDE" || n == "DAC_READ_SEARCH")
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
    use crate::inject::names::SIDECAR_UID;
    use crate::inject::workload::tests::{opts, rewritten, DEPLOYMENT};
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
