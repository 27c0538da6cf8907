//! Which user the sidecars run as: the app's own when it is not root, because the elector and
//! the app read files the other writes with mode 0600.

use serde_norway::{Mapping, Value};

use super::workload::{at, str_at};

/// The user and group the app runs as, when it is not root: the elector and the install
/// container take them over, so files one writes with mode 0600 (the push secret, the ack
/// file) stay readable to the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppIdentity {
    pub uid: i64,
    pub gid: Option<i64>,
}

/// The target container's non-zero runAsUser (its own securityContext, else the pod's), with
/// its runAsGroup taken the same way.
pub fn app_identity(pod: &Mapping, container: &str) -> Option<AppIdentity> {
    let main = pod
        .get("containers")
        .and_then(Value::as_sequence)?
        .iter()
        .find(|c| str_at(c, &["name"]) == Some(container))?;
    let field = |name: &str| {
        at(main, &["securityContext", name])
            .and_then(Value::as_i64)
            .or_else(|| {
                pod.get("securityContext")
                    .and_then(|sc| sc.get(name))
                    .and_then(Value::as_i64)
            })
    };
    let uid = field("runAsUser").filter(|uid| *uid > 0)?;
    Some(AppIdentity {
        uid,
        gid: field("runAsGroup"),
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
