//! Which user the sidecars run as: the app's own when it is not root, because the elector and
//! the app read files the other writes with mode 0600 — and root too when the app is a root that
//! has dropped the capabilities that let root read another user's 0600 file.
//!
//! What it decides shows in the containers and flags of the rewritten pod, so its tests are the
//! pod-spec rewrite's (`workload/tests.rs`): tests here would import the module that uses this one.

use k8s_openapi::api::core::v1::SecurityContext;
use serde_norway::{Mapping, Value};

use crate::inject::names::SIDECAR_UID;
use crate::inject::value::{at, str_at};

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

/// Image repositories of upstream Passmower, whose image (`node:lts`, no `USER`) runs as root,
/// matched at the end of the repository path so a mirror that keeps the path is known too.
const ROOT_IMAGES: [&str; 2] = ["passmower/passmower", "codemowers/passmower"];

/// Whether `image` is upstream Passmower's (see [`ROOT_IMAGES`]).
fn known_root_image(image: &str) -> bool {
    let named = image.trim().split('@').next().unwrap_or_default();
    // A ':' after the last '/' starts the tag (one before it is a registry port).
    let repository = match named.rsplit_once('/') {
        Some((path, last)) => format!("{path}/{}", last.split(':').next().unwrap_or_default()),
        None => named.split(':').next().unwrap_or_default().to_owned(),
    };
    ROOT_IMAGES
        .iter()
        .any(|r| repository == *r || repository.ends_with(&format!("/{r}")))
}

/// The warning for an app whose user nobody names: no runAsUser on the container or the pod,
/// no `runAsNonRoot: true` (that has [`unmatched_non_root_warning`]), no UID for the elector
/// either, and an image that is not upstream Passmower's (which runs as root). It runs as its
/// image's `USER`, which inject cannot read; a non-root one other than the elector's UID
/// cannot read the elector's 0600 token, so its supervisor never obeys a grant, no pod contends
/// and the operators never run. There is no rendering that works for every image user without
/// weakening the token (see [`app_identity`]), so the fix is named instead.
pub fn unknown_image_user_warning(
    pod: &Mapping,
    container: &str,
    explicit: Option<&SecurityContext>,
    workload: &str,
) -> Option<String> {
    let field = |name: &str| app_security_field(pod, container, name);
    if field("runAsUser").is_some()
        || field("runAsNonRoot").and_then(Value::as_bool) == Some(true)
        || explicit.is_some_and(|sc| sc.run_as_user.is_some())
    {
        return None;
    }
    let image = pod
        .get("containers")
        .and_then(Value::as_sequence)?
        .iter()
        .find(|c| str_at(c, &["name"]) == Some(container))
        .and_then(|c| str_at(c, &["image"]))
        .unwrap_or_default();
    if known_root_image(image) {
        return None;
    }
    let elector = if root_without_file_override(pod, container) {
        0
    } else {
        SIDECAR_UID
    };
    Some(format!(
        "{workload}: container {container:?} names no runAsUser (nor does the pod), so it runs \
         as the user of image {image:?}, which inject cannot read (only upstream Passmower's \
         image is known to run as root); the elector runs as UID {elector}, and if the image's \
         user is neither root nor UID {elector} the supervisor cannot read the elector's token, \
         no pod ever leads and the operators never run: set runAsUser on the container (or the \
         pod) to the image's user (0 for root), or pass --sidecar-security-context with the \
         image's UID"
    ))
}
