//! The containers and volumes inject adds to a pod: the elector sidecar (its flags, probes and
//! resources), the initContainer that copies the binary into the pod, the two shared volumes,
//! and the restricted security context both run with.

use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, ObjectFieldSelector, Probe, ResourceRequirements, SeccompProfile,
    SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::inject::names::{
    BIN_DIR, BIN_VOLUME, ELECTOR_CONTAINER, FLAG_DIR, FLAG_VOLUME, IMAGE_BINARY, INSTALL_CONTAINER,
    LEADER_APP_METRICS_PORT, PROBE_PORT_NAME, SIDECAR_UID,
};
use crate::inject::options::{AppOnChange, InjectOptions};
use crate::inject::pod_spec::identity::AppIdentity;

pub(super) fn elector_container(
    lease: &str,
    native_lease: Option<&str>,
    opts: &InjectOptions,
    identity: Option<AppIdentity>,
) -> Container {
    let field_env = |name: &str, path: &str| EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let probe = |path: &str, period: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String(PROBE_PORT_NAME.into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(2),
        failure_threshold: Some(3),
        ..Default::default()
    };
    Container {
        name: ELECTOR_CONTAINER.into(),
        image: Some(opts.image.clone()),
        command: Some(vec![IMAGE_BINARY.into()]),
        args: Some(
            vec![
                "elect".into(),
                format!("--lease-name={lease}"),
                format!(
                    "--lease-duration={}",
                    duration_flag(opts.timing.lease_duration)
                ),
                format!(
                    "--renew-deadline={}",
                    duration_flag(opts.timing.renew_deadline)
                ),
                format!("--retry-period={}", duration_flag(opts.timing.retry_period)),
                format!("--kill-grace={}", duration_flag(opts.timing.kill_grace)),
                format!("--flag-file={FLAG_DIR}/grant.json"),
                format!("--toggle-url=http://127.0.0.1:{}/grant", opts.toggle_port),
                format!("--probe-addr=0.0.0.0:{}", opts.probe_port),
            ]
            .into_iter()
            .chain(
                (opts.app_on_change() == AppOnChange::LeaderInstance)
                    .then(|| format!("--leader-app-metrics-port={LEADER_APP_METRICS_PORT}")),
            )
            // Without a fence its check would only ever say so.
            .chain((!opts.fence).then(|| "--write-fence-check=off".to_owned()))
            .chain(native_lease.map(|n| format!("--native-lease={n}")))
            .collect(),
        ),
        env: Some(vec![
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            // Into the holder identity (`<pod>_<uid>_<suffix>`): the write fence admits
            // operator writes only from the pod incarnation the Lease names.
            field_env("POD_UID", "metadata.uid"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some(PROBE_PORT_NAME.into()),
            container_port: i32::from(opts.probe_port),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        // Liveness only: a wedged loop is restarted, but the pod's readiness is the app's
        // business. `/readyz` follows the API, and a native sidecar's readiness counts toward
        // the pod's, so wiring it here would take every replica out of its Service at once
        // when the API server is unreachable.
        liveness_probe: Some(probe("/healthz", 10)),
        resources: Some(
            opts.sidecar_resources
                .clone()
                .unwrap_or_else(|| resources("32Mi", "128Mi")),
        ),
        security_context: Some(security_context(opts, identity)),
        volume_mounts: Some(vec![VolumeMount {
            name: FLAG_VOLUME.into(),
            mount_path: FLAG_DIR.into(),
            ..Default::default()
        }]),
        // A native sidecar: started before the app containers, stopped after them, restarted
        // on its own when it dies.
        restart_policy: (!opts.classic_sidecar).then(|| "Always".into()),
        ..Default::default()
    }
}

pub(super) fn install_container(opts: &InjectOptions, identity: Option<AppIdentity>) -> Container {
    Container {
        name: INSTALL_CONTAINER.into(),
        image: Some(opts.image.clone()),
        command: Some(vec![IMAGE_BINARY.into()]),
        args: Some(vec![
            "copy-self".into(),
            format!("{BIN_DIR}/passmower-elector"),
        ]),
        resources: Some(resources("16Mi", "64Mi")),
        security_context: Some(security_context(opts, identity)),
        volume_mounts: Some(vec![VolumeMount {
            name: BIN_VOLUME.into(),
            mount_path: BIN_DIR.into(),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

pub(super) fn volumes() -> [Volume; 2] {
    let memory = |name: &str, limit: &str| Volume {
        name: name.into(),
        // Memory-backed: the grant must not outlive the node's boot (its expiry is on
        // CLOCK_BOOTTIME), and the binary has no business on a node's disk.
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: Some(Quantity(limit.into())),
        }),
        ..Default::default()
    };
    [memory(FLAG_VOLUME, "1Mi"), memory(BIN_VOLUME, "64Mi")]
}

fn resources(memory_request: &str, memory_limit: &str) -> ResourceRequirements {
    let map = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect()
    };
    ResourceRequirements {
        requests: Some(map(&[("cpu", "10m"), ("memory", memory_request)])),
        limits: Some(map(&[("cpu", "200m"), ("memory", memory_limit)])),
        ..Default::default()
    }
}

pub(super) fn security_context(
    opts: &InjectOptions,
    identity: Option<AppIdentity>,
) -> SecurityContext {
    opts.sidecar_security_context
        .clone()
        .unwrap_or_else(|| restricted_security_context(identity))
}

/// The Pod Security Standards "restricted" profile, as the app's user when the elector must
/// share it (a non-root app, or a root app without the capabilities to read another user's
/// 0600 file: then everything but `runAsNonRoot`).
fn restricted_security_context(identity: Option<AppIdentity>) -> SecurityContext {
    let (uid, gid) = match identity {
        Some(app) => (app.uid, app.gid.unwrap_or(app.uid)),
        None => (SIDECAR_UID, SIDECAR_UID),
    };
    SecurityContext {
        run_as_non_root: (uid != 0).then_some(true),
        run_as_user: Some(uid),
        run_as_group: Some(gid),
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A duration as the roles' flags take it: `15s`, `1m30s`, `1s500ms`.
pub fn duration_flag(d: Duration) -> String {
    humantime::format_duration(d).to_string().replace(' ', "")
}

pub(super) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}
