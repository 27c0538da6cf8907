//! The pod-template rewrite: finds target workloads and wires the elector sidecar, the
//! `copy-self` initContainer, the shared volumes (all three from `sidecar.rs`) and the
//! `supervise` entrypoint into them.
//!
//! The workload is edited as a generic YAML value, not a typed Deployment, so fields this
//! crate's Kubernetes types do not know (newer API versions, CRD-ish extensions) survive.

use k8s_openapi::api::core::v1::VolumeMount;
use serde_norway::{Mapping, Value};

use crate::inject::error::InjectError;
use crate::inject::kube_version::KubeVersion;
use crate::inject::names::{
    WorkloadKind, APP_HEALTH_PATH, APP_METRICS_PORT, BIN_DIR, BIN_VOLUME, DEFAULT_CONTAINER,
    DRAIN_SECONDS, ELECTOR_CONTAINER, FLAG_DIR, FLAG_VOLUME, INJECTED_ANNOTATION,
    INSTALL_CONTAINER, LEADER_APP_METRICS_PORT, LEADER_SELECTOR_VAR, LEASE_ANNOTATION,
    PASSMOWER_APP_COMMAND, VERSION, WARNINGS_ANNOTATION,
};
use crate::inject::native_election::{self, PassmowerElection};
use crate::inject::options::{AppOnChange, InjectOptions};
use crate::inject::pod_spec::sidecar::{
    ceil_secs, duration_flag, elector_container, install_container, volumes,
};
use crate::inject::target::{PodSite, Target};
use crate::inject::value::{append, child_mapping, str_at, to_value};
use crate::wire::SELECTOR_VAR;

/// Passmower's interval of its Redis client sweep, in milliseconds; 0 turns it off.
const SWEEP_VAR: &str = "RECONCILE_INTERVAL_MS";
/// Kubernetes' default when a pod spec sets none.
const DEFAULT_TERMINATION_GRACE_SECONDS: u64 = 30;
/// Time beyond the kill grace for the elector to write the demotion and release the Lease.
const RELEASE_ALLOWANCE_SECONDS: u64 = 5;
/// Rewrites `root` (a target workload) in place: its pod template, its rollout strategy and
/// its annotations.
pub fn rewrite(
    root: &mut Value,
    target: &Target,
    opts: &InjectOptions,
    warnings: &mut Vec<String>,
) -> Result<(), InjectError> {
    let pod = child_mapping(root, &["spec", "template", "spec"])
        .ok_or_else(|| target.error("spec.template.spec is not a mapping"))?;
    rewrite_pod_spec(pod, &target.site(), &target.lease, opts, warnings)?;

    let spec =
        child_mapping(root, &["spec"]).ok_or_else(|| target.error("spec is not a mapping"))?;
    if target.kind == WorkloadKind::Deployment {
        crate::inject::pod_spec::strategy::rollout_strategy(spec, target, opts, warnings);
    }

    let annotations = child_mapping(root, &["metadata", "annotations"])
        .ok_or_else(|| target.error("metadata.annotations is not a mapping"))?;
    annotations.insert(INJECTED_ANNOTATION.into(), VERSION.into());
    annotations.insert(LEASE_ANNOTATION.into(), target.lease.clone().into());
    if !warnings.is_empty() {
        annotations.insert(WARNINGS_ANNOTATION.into(), warnings.join("\n").into());
    }
    Ok(())
}

/// Rewrites `root` for `--passmower-election=fence-only`: no elector, no supervisor; the target
/// container keeps its command and Passmower's own election, and gets `POD_NAME` (its holder
/// identity) when it lacks it. The workload is annotated with upstream's Lease and the mode,
/// which becomes the target's Lease.
pub fn rewrite_fence_only(
    root: &mut Value,
    target: &mut Target,
    opts: &InjectOptions,
    warnings: &mut Vec<String>,
) -> Result<(), InjectError> {
    let containers = child_mapping(root, &["spec", "template", "spec"])
        .ok_or_else(|| target.error("spec.template.spec is not a mapping"))?
        .get_mut("containers")
        .and_then(Value::as_sequence_mut)
        .ok_or_else(|| target.error("spec.template.spec.containers is not a list"))?;
    let main = containers
        .iter_mut()
        .find(|c| str_at(c, &["name"]) == Some(opts.container.as_str()))
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| target.error(format!("container {:?} is not a mapping", opts.container)))?;
    target.lease = native_election::prepare_fence_only(
        main,
        opts.lease_name.as_deref(),
        "spec.template.spec",
        &opts.container,
    )
    .map_err(|reason| target.error(reason))?;
    warnings.extend(native_election::tag_warning(
        main,
        PassmowerElection::FenceOnly,
        &target.describe(),
        "spec.template.spec",
        &opts.container,
    ));
    let annotations = child_mapping(root, &["metadata", "annotations"])
        .ok_or_else(|| target.error("metadata.annotations is not a mapping"))?;
    annotations.insert(INJECTED_ANNOTATION.into(), VERSION.into());
    annotations.insert(LEASE_ANNOTATION.into(), target.lease.clone().into());
    annotations.insert(
        native_election::MODE_ANNOTATION.into(),
        PassmowerElection::FenceOnly.as_str().into(),
    );
    if !warnings.is_empty() {
        annotations.insert(WARNINGS_ANNOTATION.into(), warnings.join("\n").into());
    }
    Ok(())
}

/// The one pod rewrite both front doors share: wraps the target container with `supervise`,
/// adds the elector sidecar for `lease`, the `copy-self` initContainer, the shared volumes and
/// the sidecar image's pull secrets, warns about a memory limit that cannot hold the leader
/// instance, and lengthens the termination grace period by the kill grace and the Lease
/// release.
pub fn rewrite_pod_spec(
    pod: &mut Mapping,
    site: &PodSite,
    lease: &str,
    opts: &InjectOptions,
    warnings: &mut Vec<String>,
) -> Result<(), InjectError> {
    let path = site.path;
    for (list, ours) in [
        ("volumes", [FLAG_VOLUME, BIN_VOLUME]),
        ("initContainers", [INSTALL_CONTAINER, ELECTOR_CONTAINER]),
        ("containers", [ELECTOR_CONTAINER, INSTALL_CONTAINER]),
    ] {
        let names = pod.get(list).and_then(Value::as_sequence);
        if let Some(clash) = names
            .into_iter()
            .flatten()
            .filter_map(|v| str_at(v, &["name"]))
            .find(|n| ours.contains(n))
        {
            return Err(site.error(format!(
                "{path}.{list} already has {clash:?} but the workload lacks the \
                 {INJECTED_ANNOTATION} annotation; remove the partial injection first"
            )));
        }
    }

    let identity = crate::inject::pod_spec::identity::app_identity(pod, &opts.container);
    if let (Some(explicit), Some(app)) = (&opts.sidecar_security_context, identity) {
        if explicit.run_as_user != Some(app.uid) {
            let root = if app.uid == 0 {
                " (a root app whose capabilities drop DAC_OVERRIDE reads only its own 0600 \
                 files: set runAsUser 0 there, or give the app CAP_DAC_OVERRIDE back)"
            } else {
                ""
            };
            warnings.push(format!(
                "{}: container {:?} runs as UID {} but --sidecar-security-context sets runAsUser \
                 {:?}: the app and the elector read each other's 0600 files, so they must run \
                 as the same user{root}",
                site.workload, opts.container, app.uid, explicit.run_as_user
            ));
        }
    }

    let explicit = opts.sidecar_security_context.as_ref();
    warnings.extend(
        crate::inject::pod_spec::identity::unmatched_non_root_warning(
            pod,
            &opts.container,
            explicit,
            &site.workload,
        ),
    );
    warnings.extend(
        crate::inject::pod_spec::identity::unknown_image_user_warning(
            pod,
            &opts.container,
            explicit,
            &site.workload,
        ),
    );
    let (standby, standby_note) = pod
        .get("containers")
        .and_then(Value::as_sequence)
        .and_then(|c| {
            c.iter()
                .find(|c| str_at(c, &["name"]) == Some(opts.container.as_str()))
        })
        .and_then(Value::as_mapping)
        .map_or((opts.leader_standby, None), |main| {
            crate::inject::pod_spec::sizing::standby(main, site, opts)
        });
    warnings.extend(standby_note);
    let mut supervise_flags =
        crate::inject::pod_spec::identity::supervise_flags(pod, explicit, identity);
    supervise_flags.extend(on_change_flags(opts, standby));

    // The main container: supervise becomes its entrypoint.
    let containers = pod
        .get_mut("containers")
        .and_then(Value::as_sequence_mut)
        .ok_or_else(|| site.error(format!("{path}.containers is not a list")))?;
    let main = containers
        .iter_mut()
        .find(|c| str_at(c, &["name"]) == Some(opts.container.as_str()))
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| site.error(format!("container {:?} is not a mapping", opts.container)))?;
    // Read before the election is turned off in it: the env names upstream's Lease.
    // One named like ours is the same object, which each side already leaves alone while held.
    let native_lease =
        native_election::native_lease_to_hold(main, opts.passmower_election, &opts.container)
            .filter(|n| n != lease);
    native_election::disable_native_election(
        main,
        opts.passmower_election,
        &site.workload,
        path,
        &opts.container,
        warnings,
    );
    wrap_main_container(main, site, opts, &supervise_flags)?;
    let drain = add_drain(main, site, opts, warnings);
    warnings.extend(crate::inject::pod_spec::sizing::memory_limit_warning(
        main, site, opts, standby,
    ));

    // Sidecars go last among the initContainers so the app's own init steps finish before
    // this pod starts contending for the Lease, and the binary is in place before `supervise`.
    let elector = to_value(&elector_container(
        lease,
        native_lease.as_deref(),
        opts,
        identity,
    ));
    let install = to_value(&install_container(opts, identity));
    append(pod, "initContainers", install)
        .map_err(|()| site.error(format!("{path}.initContainers is not a list")))?;
    let sidecar_list = if opts.classic_sidecar {
        "containers"
    } else {
        "initContainers"
    };
    append(pod, sidecar_list, elector)
        .map_err(|()| site.error(format!("{path}.{sidecar_list} is not a list")))?;
    for volume in volumes() {
        append(pod, "volumes", to_value(&volume))
            .map_err(|()| site.error(format!("{path}.volumes is not a list")))?;
    }
    crate::inject::pod_spec::pull_secrets::add_image_pull_secrets(
        pod,
        site,
        &opts.image_pull_secrets,
    )?;

    // Shutdown must fit the app's own stop, the kill grace and the Lease release.
    let added = drain + ceil_secs(opts.timing.kill_grace) + RELEASE_ALLOWANCE_SECONDS;
    let existing = termination_grace(pod.get("terminationGracePeriodSeconds"), added)
        .map_err(|reason| site.error(format!("{path}.terminationGracePeriodSeconds {reason}")))?;
    pod.insert(
        "terminationGracePeriodSeconds".into(),
        (existing + added).into(),
    );
    Ok(())
}

/// The pod's own termination grace period in seconds (Kubernetes' default when unset), which
/// gets `added` seconds: a whole number from 0 up to what still fits the field (an int64) with
/// them added. The error says what is wrong and what is allowed.
fn termination_grace(value: Option<&Value>, added: u64) -> Result<u64, String> {
    let max = (i64::MAX as u64).saturating_sub(added);
    let allowed = format!("must be a whole number of seconds from 0 to {max}");
    match value {
        None | Some(Value::Null) => Ok(DEFAULT_TERMINATION_GRACE_SECONDS),
        Some(v) => match (v.as_u64(), v.as_i64()) {
            (Some(secs), _) if secs <= max => Ok(secs),
            (Some(secs), _) => Err(format!(
                "{allowed} (the {added}s inject adds must still fit): got {secs}"
            )),
            (None, Some(negative)) => Err(format!("{allowed}: got {negative}, which is negative")),
            (None, None) => {
                let shown = serde_norway::to_string(v).unwrap_or_default();
                Err(format!("{allowed}: got {}", shown.trim()))
            }
        },
    }
}

/// Gives the app container a `preStop` sleep of [`DRAIN_SECONDS`], so its SIGTERM (and the app's
/// stop) comes once the Service has stopped routing to the pod; returns the seconds added. The
/// leader keeps leading through the drain under every rule of the grant, so nothing of the
/// handover changes but its start. Left out when the container has a `preStop` of its own, and
/// with `--classic-sidecar` or a `--kube-version` before 1.30: the sleep action is served from
/// 1.30 (in 1.29 it is alpha, off by default: the apiserver drops `sleep` and then refuses the
/// empty handler, so the whole Deployment would be refused). That omission is a warning.
fn add_drain(
    main: &mut Mapping,
    site: &PodSite,
    opts: &InjectOptions,
    warnings: &mut Vec<String>,
) -> u64 {
    if opts.classic_sidecar {
        return 0;
    }
    let needed = KubeVersion::SLEEP_ACTION_AND_POLICY;
    if let Some(cluster) = opts.kube_version.filter(|c| !needed.served_by(Some(*c))) {
        warnings.push(format!(
            "{}: no preStop drain for container {:?}: the sleep action needs Kubernetes \
             {needed} and --kube-version is {cluster}, so a pod going away may still be sent \
             requests through its Service for a moment after its app stopped",
            site.workload, opts.container
        ));
        return 0;
    }
    let lifecycle = main
        .entry("lifecycle".into())
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    if matches!(lifecycle, Value::Null) {
        *lifecycle = Value::Mapping(Mapping::new());
    }
    let Some(lifecycle) = lifecycle.as_mapping_mut() else {
        return 0;
    };
    if lifecycle.get("preStop").is_some_and(|v| !v.is_null()) {
        return 0;
    }
    let mut sleep = Mapping::new();
    sleep.insert("seconds".into(), DRAIN_SECONDS.into());
    let mut pre_stop = Mapping::new();
    pre_stop.insert("sleep".into(), Value::Mapping(sleep));
    lifecycle.insert("preStop".into(), Value::Mapping(pre_stop));
    DRAIN_SECONDS
}

/// Replaces the container's entrypoint by `supervise`, moving NAMESPACE_SELECTOR into the
/// per-mode environments (the follower's always; the leader's when the container's `env` or
/// `--namespace-selector` gives one, see [`leader_selector`]).
fn wrap_main_container(
    main: &mut Mapping,
    site: &PodSite,
    opts: &InjectOptions,
    extra_flags: &[String],
) -> Result<(), InjectError> {
    let words = |key: &str| -> Result<Option<Vec<String>>, InjectError> {
        match main.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Sequence(items)) => items
                .iter()
                .map(|w| match w {
                    Value::String(s) => Ok(s.clone()),
                    Value::Number(n) => Ok(n.to_string()),
                    Value::Bool(b) => Ok(b.to_string()),
                    _ => Err(site.error(format!("container {key} holds a non-string item"))),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(site.error(format!("container {key} is not a list"))),
        }
    };
    let command = words("command")?.filter(|c| !c.is_empty());
    let args = words("args")?.unwrap_or_default();
    let program = match (&opts.app_command, command) {
        (Some(explicit), _) => explicit.clone(),
        (None, Some(command)) => command,
        (None, None) if opts.container == DEFAULT_CONTAINER => PASSMOWER_APP_COMMAND
            .iter()
            .map(|s| s.to_string())
            .collect(),
        (None, None) => {
            return Err(InjectError::NoCommand {
                document: site.document,
                workload: site.workload.clone(),
                container: opts.container.clone(),
            })
        }
    };

    let leader_selector = leader_selector(main, site, opts)?;
    if main
        .get("env")
        .and_then(Value::as_sequence)
        .is_some_and(Vec::is_empty)
    {
        main.remove("env");
    }
    let mut supervise = vec![
        "supervise".to_owned(),
        format!("--flag-file={FLAG_DIR}/grant.json"),
        format!("--listen=127.0.0.1:{}", opts.toggle_port),
        format!("--kill-grace={}", duration_flag(opts.timing.kill_grace)),
    ];
    if let Some(selector) = leader_selector {
        supervise.push(format!("--leader-env={SELECTOR_VAR}={selector}"));
    }
    supervise.push(format!(
        "--follower-env={SELECTOR_VAR}={}",
        opts.idle_namespace
    ));
    // The 2.2-era and 2.4 client sweep (ClientRedisReconciler) runs in every instance whatever
    // its selector, and removes `oidc:Clients` members whose record is missing: a follower's
    // sweep between a leader's DEL and its re-write deletes the record just written. 0 turns
    // the sweep off (1.3.0 has none and ignores it); the leader keeps the container's value.
    supervise.push(format!("--follower-env={SWEEP_VAR}=0"));
    supervise.extend(extra_flags.iter().cloned());
    supervise.push("--".to_owned());
    supervise.extend(program);
    supervise.extend(args);

    main.insert(
        "command".into(),
        Value::Sequence(vec![format!("{BIN_DIR}/passmower-elector").into()]),
    );
    main.insert(
        "args".into(),
        Value::Sequence(supervise.into_iter().map(Value::from).collect()),
    );
    let mounts = [
        VolumeMount {
            name: FLAG_VOLUME.into(),
            mount_path: FLAG_DIR.into(),
            ..Default::default()
        },
        VolumeMount {
            name: BIN_VOLUME.into(),
            mount_path: BIN_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        },
    ];
    for mount in mounts {
        append(main, "volumeMounts", to_value(&mount))
            .map_err(|()| site.error("container volumeMounts is not a list"))?;
    }
    Ok(())
}

/// `supervise`'s mode-change flags. Passmower (by default) keeps one instance serving and runs
/// its operators in a second one while leader; every listener of that one goes to a free
/// loopback port, since its metrics port 9090 is fixed in its code and `PORT` is not the only
/// port it opens — but the metrics port goes to a fixed one, which the elector serves at
/// `/metrics/leader-app` for a PodMonitor. With `standby` (unless `--no-leader-standby`, where
/// the pods' memory was planned for two instances: `sizing::standby`), that second instance is
/// kept started ahead in pods that do not lead, so a promotion does not wait for Node's boot
/// (measured on Passmower: about as much memory as the leader instance). Passmower's container also gets `--converge-oidc-clients`: its client
/// operator skips a client already in Redis, so a Secret create the write fence refused at a
/// takeover would otherwise stay missing until the OIDCClient changes. Passmower's leader
/// instance is also probed on its own `/health` (on the metrics port, so at the moved one): the
/// kubelet's probes reach only the serving instance. Another app's health route is not known,
/// and a wrong one would restart a working leader until it steps down, so it gets none.
fn on_change_flags(opts: &InjectOptions, standby: bool) -> Vec<String> {
    let mut flags = match opts.app_on_change() {
        AppOnChange::LeaderInstance => {
            let mut flags = vec![
                "--on-change=leader-instance".to_owned(),
                format!("--leader-port-map={APP_METRICS_PORT}={LEADER_APP_METRICS_PORT}"),
                "--leader-port-map=*=0".to_owned(),
            ];
            if opts.container == DEFAULT_CONTAINER {
                flags.push(format!(
                    "--leader-health-url=http://127.0.0.1:{LEADER_APP_METRICS_PORT}{APP_HEALTH_PATH}"
                ));
            }
            if standby {
                flags.push("--leader-standby".to_owned());
            }
            flags
        }
        AppOnChange::Restart => Vec::new(),
        // One process: nothing starts at a promotion, so there is no start to converge before.
        AppOnChange::LeaseBridge => return vec!["--on-change=lease-bridge".to_owned()],
    };
    if opts.container == DEFAULT_CONTAINER {
        flags.push("--converge-oidc-clients".to_owned());
    }
    flags
}

/// Works out the leader's NAMESPACE_SELECTOR and removes the variable from the container's
/// own env (the supervisor sets it per mode). A `valueFrom` source cannot be read here, so it
/// moves to [`LEADER_SELECTOR_VAR`] and the leader value becomes `$(VAR)`, which the kubelet
/// expands in the container's arguments at start.
///
/// `None`: the container's `env` sets no NAMESPACE_SELECTOR and none is asked for, so the
/// leader is given none and inherits the container's environment — exactly what the app ran
/// with, wherever that comes from: unset (Passmower's pod namespace), an `envFrom` source or
/// the image. Naming a value here instead would change the leader's scope behind the user's
/// back: `*` would widen an unset selector to every namespace, and an empty one would narrow
/// a selector `envFrom` supplies.
fn leader_selector(
    main: &mut Mapping,
    site: &PodSite,
    opts: &InjectOptions,
) -> Result<Option<String>, InjectError> {
    let env = match main.get_mut("env") {
        None | Some(Value::Null) => None,
        Some(Value::Sequence(env)) => Some(env),
        Some(_) => return Err(site.error("container env is not a list")),
    };
    let position = env.as_ref().and_then(|env| {
        env.iter()
            .rposition(|e| str_at(e, &["name"]) == Some(SELECTOR_VAR))
    });
    let (Some(env), Some(position)) = (env, position) else {
        return Ok(opts.namespace_selector.clone());
    };
    // Kubernetes keeps the last of duplicate entries; drop every other one.
    let last = env.remove(position);
    env.retain(|e| str_at(e, &["name"]) != Some(SELECTOR_VAR));
    if let Some(explicit) = &opts.namespace_selector {
        return Ok(Some(explicit.clone()));
    }
    if let Some(source) = last.get("valueFrom").filter(|v| !v.is_null()) {
        let optional = ["configMapKeyRef", "secretKeyRef"].iter().any(|r| {
            source
                .get(r)
                .and_then(|r| r.get("optional"))
                .and_then(Value::as_bool)
                == Some(true)
        });
        if optional {
            return Err(site.error(format!(
                "{SELECTOR_VAR} comes from an optional valueFrom reference, which cannot be \
                 wrapped (when the key is missing the leader would get a literal \
                 $({LEADER_SELECTOR_VAR})); pass --namespace-selector or make it non-optional"
            )));
        }
        let mut renamed = last;
        if let Some(m) = renamed.as_mapping_mut() {
            m.insert("name".into(), LEADER_SELECTOR_VAR.into());
        }
        // Last, where a kustomize patch (which appends new list items) puts it too.
        env.push(renamed);
        return Ok(Some(format!("$({LEADER_SELECTOR_VAR})")));
    }
    Ok(Some(
        last.get("value")
            .and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                Value::Bool(b) => Some(b.to_string()),
                _ => None,
            })
            .unwrap_or_default(),
    ))
}

#[cfg(test)]
pub(crate) mod tests;
