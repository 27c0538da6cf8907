//! Passmower's own leader election (2.4.0 and later): recognising a Passmower that elects
//! itself, and making sure exactly one election decides which pod runs the operators.
//!
//! From 2.4.0 every Passmower process runs an election of its own for Lease
//! `passmower-operators` (`LEADER_ELECTION_LEASE_NAME`), holder `POD_NAME` or the hostname, and
//! starts its operators only while it holds that Lease; `LEADER_ELECTION_ENABLED=false` turns it
//! off. Beside the elector both elections run: every serving instance (idle selector) also
//! contends, and when a follower's serving instance wins upstream's Lease no instance that
//! watches the real namespaces runs operators, so a whole tenure reconciles nothing. Hence the
//! modes of `--passmower-election`:
//! - `ours`: `LEADER_ELECTION_ENABLED=false` in the app container's env (the supervisor passes
//!   it to both instances), so only the elector elects. Upstream's Lease is left alone.
//! - `auto` (default): `ours` unless the container is recognised as older than 2.4.0. A
//!   Passmower before 2.4.0 ignores the variable, so setting it for an image of unknown version
//!   costs nothing, while leaving it out beside a 2.4 image would let a whole tenure go dark.
//! - `fence-only`: upstream's election is kept and no elector is added; `inject` adds the
//!   Lease RBAC upstream's election needs, `POD_NAME` from `metadata.name`, and the write
//!   fence keyed on upstream's Lease with the pod name as holder.
//!
//! The rule (documented in `--help`): the container elects itself when its env names
//! `LEADER_ELECTION_ENABLED` or `LEADER_ELECTION_LEASE_NAME` (only a 2.4-aware manifest does),
//! or its image tag is a version, or a version line (`2.4`, `3`), of which every version is
//! 2.4.0 or later (`2.4.0`, `v2.4.1`, `2.5.0-rc.1`). A tag of which every version is older
//! (`2.2.0`, `1`) does not; a digest, `latest`, a line that spans both (`2`) or a pre-release
//! of 2.4.0 is unknown, which `auto` treats as electing.

use serde_norway::{Mapping, Value};

/// Upstream's switch: anything but `false` leaves its election on.
pub const ENABLED_VAR: &str = "LEADER_ELECTION_ENABLED";
/// Upstream's Lease name variable.
pub const LEASE_VAR: &str = "LEADER_ELECTION_LEASE_NAME";
/// Upstream's holder identity variable (else the hostname).
pub const POD_NAME_VAR: &str = "POD_NAME";
/// Upstream's Lease when `LEADER_ELECTION_LEASE_NAME` is unset.
pub const DEFAULT_NATIVE_LEASE: &str = "passmower-operators";
/// The first Passmower release that elects a leader itself.
pub const FIRST_ELECTING: Version = Version(2, 4, 0);
/// Annotation on a workload `inject` rewrote in `fence-only` mode (the mode is not changed by
/// a later `inject`).
pub const MODE_ANNOTATION: &str = "passmower-elector.io/passmower-election";

/// Who decides which pod runs Passmower's operators (`--passmower-election`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PassmowerElection {
    /// `ours` when the container is recognised as a Passmower that elects itself (2.4.0 or
    /// later by its image tag, or its env names LEADER_ELECTION_*), else the injection alone.
    #[default]
    Auto,
    /// Only the elector elects: LEADER_ELECTION_ENABLED=false is given to every instance,
    /// whatever the image (older Passmowers ignore it); upstream's Lease is left alone.
    Ours,
    /// Keep Passmower's own election and add no elector: only the Lease RBAC it needs,
    /// POD_NAME from metadata.name, and the write fence keyed on its Lease (holder = pod name).
    /// `inject` only, with the fence.
    FenceOnly,
}

impl PassmowerElection {
    pub fn as_str(self) -> &'static str {
        match self {
            PassmowerElection::Auto => "auto",
            PassmowerElection::Ours => "ours",
            PassmowerElection::FenceOnly => "fence-only",
        }
    }
}

/// A release version `MAJOR.MINOR.PATCH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u64, pub u64, pub u64);

/// What the container says about Passmower's own election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recognition {
    /// It elects itself; why (for messages).
    ElectsItself(String),
    /// It does not (an older release); why.
    Older(String),
    /// Cannot tell; why.
    Unknown(String),
}

/// What an image tag says, by the rule in the module doc.
pub fn recognise_image(image: &str) -> Recognition {
    let image = image.trim();
    if image.contains('@') {
        return Recognition::Unknown(format!(
            "image {image:?} is pinned by digest, which names no version"
        ));
    }
    // The tag follows the last ':' after the last '/' (a registry port is before a '/').
    let last = image.rsplit('/').next().unwrap_or(image);
    let Some((_, tag)) = last.rsplit_once(':') else {
        return Recognition::Unknown(format!("image {image:?} has no tag (latest)"));
    };
    let unknown = || Recognition::Unknown(format!("image tag {tag:?} is no release version"));
    // `v2.4.1`, `2.5.0-rc.1`, `2.4.0+build.7`: the build metadata says nothing of the release.
    let core = tag.strip_prefix('v').unwrap_or(tag);
    let core = core.split('+').next().unwrap_or_default();
    let (core, pre) = match core.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (core, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty()
        || parts.len() > 3
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return unknown();
    }
    let Ok(numbers) = parts
        .iter()
        .map(|p| p.parse::<u64>())
        .collect::<Result<Vec<_>, _>>()
    else {
        return unknown();
    };
    if pre.is_some() && numbers.len() < 3 {
        return unknown();
    }
    // The lowest and highest release the tag can name (a line `2.4` names 2.4.0 to 2.4.x).
    let lowest = Version(
        numbers[0],
        numbers.get(1).copied().unwrap_or(0),
        numbers.get(2).copied().unwrap_or(0),
    );
    let highest = Version(
        numbers[0],
        numbers.get(1).copied().unwrap_or(u64::MAX),
        numbers.get(2).copied().unwrap_or(u64::MAX),
    );
    let first = FIRST_ELECTING;
    let shown = format!("{}.{}.{}", first.0, first.1, first.2);
    // A pre-release comes before its release: 2.5.0-rc.1 is after 2.4.0, 2.4.0-rc.1 is not
    // known to have the election.
    let elects = if pre.is_some() {
        lowest > first
    } else {
        lowest >= first
    };
    if elects {
        Recognition::ElectsItself(format!("image tag {tag:?} is Passmower {shown} or later"))
    } else if highest < first {
        Recognition::Older(format!("image tag {tag:?} is a Passmower before {shown}"))
    } else {
        Recognition::Unknown(format!(
            "image tag {tag:?} spans releases before and after {shown}"
        ))
    }
}

/// The env entry named `name` that Kubernetes uses (the last of duplicates).
fn env_entry<'a>(container: &'a Mapping, name: &str) -> Option<&'a Value> {
    container
        .get("env")?
        .as_sequence()?
        .iter()
        .rev()
        .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
}

/// A literal env value as Kubernetes passes it (`None` when unset or from `valueFrom`).
fn literal(entry: &Value) -> Option<String> {
    if entry.get("valueFrom").is_some_and(|v| !v.is_null()) {
        return None;
    }
    Some(match entry.get("value") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    })
}

/// What the target container says, by the rule in the module doc: its env first, then its image.
pub fn recognise(container: &Mapping) -> Recognition {
    for var in [ENABLED_VAR, LEASE_VAR] {
        if env_entry(container, var).is_some() {
            return Recognition::ElectsItself(format!("the container sets {var}"));
        }
    }
    match container.get("image").and_then(Value::as_str) {
        Some(image) => recognise_image(image),
        None => Recognition::Unknown("the container names no image".into()),
    }
}

/// `ours` for the target container `main` (of `workload`, at `path`): sets
/// `LEADER_ELECTION_ENABLED=false` when the mode and the rule say so. An explicit other value
/// (upstream's 2.4 chart renders `"true"` by default) is replaced, with a warning. `auto` sets it
/// for a container of unknown version too: an older Passmower ignores it.
pub fn disable_native_election(
    main: &mut Mapping,
    mode: PassmowerElection,
    workload: &str,
    path: &str,
    container: &str,
    warnings: &mut Vec<String>,
) {
    let recognition = recognise(main);
    match (mode, &recognition) {
        (PassmowerElection::Ours, _)
        | (_, Recognition::ElectsItself(_))
        | (_, Recognition::Unknown(_)) => {}
        (_, Recognition::Older(_)) => return,
    }
    let existing = env_entry(main, ENABLED_VAR).cloned();
    if let Some(entry) = &existing {
        match literal(entry) {
            Some(v) if v == "false" => {}
            shown => warnings.push(format!(
                "{workload}: {path}.containers[{container}].env {ENABLED_VAR} was {}; set to \
                 \"false\": the elector decides which pod runs the operators, and Passmower's \
                 own election beside it would let a follower's serving instance take them. \
                 Set it false yourself (upstream chart: passmower.leaderElection.enabled=false) \
                 to silence this, or pass --passmower-election=fence-only to keep upstream's \
                 election instead",
                shown.map_or_else(|| "set from valueFrom".to_owned(), |v| format!("{v:?}"))
            )),
        }
    }
    set_env(main, ENABLED_VAR, env_value(ENABLED_VAR, "false"));
}

/// Refuses the elector's Lease `lease` when it is the Lease Passmower's own election takes and
/// that election is still on in `main` (after [`disable_native_election`]): both elections would
/// write one Lease, each taking the other's holder for a live leader, and whichever instance
/// upstream's takes it with (a follower's serving one, say) would keep it.
pub fn check_lease_clash(main: &Mapping, lease: &str, container: &str) -> Result<(), String> {
    if matches!(recognise(main), Recognition::Older(_)) {
        return Ok(());
    }
    let off = env_entry(main, ENABLED_VAR)
        .and_then(literal)
        .is_some_and(|v| v == "false");
    let native = env_entry(main, LEASE_VAR)
        .and_then(literal)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_NATIVE_LEASE.to_owned());
    if off || native != lease {
        return Ok(());
    }
    Err(format!(
        "the elector's Lease {lease} is the one Passmower's own election takes (container \
         {container:?} may be a Passmower 2.4.0 or later, whose election is left on): both \
         would write one Lease. Pass --passmower-election=ours (only the elector elects), or \
         another --lease-name"
    ))
}

fn env_value(name: &str, value: &str) -> Value {
    let mut entry = Mapping::new();
    entry.insert("name".into(), name.into());
    entry.insert("value".into(), value.into());
    Value::Mapping(entry)
}

fn env_field(name: &str, path: &str) -> Value {
    let mut field = Mapping::new();
    field.insert("fieldPath".into(), path.into());
    let mut source = Mapping::new();
    source.insert("fieldRef".into(), Value::Mapping(field));
    let mut entry = Mapping::new();
    entry.insert("name".into(), name.into());
    entry.insert("valueFrom".into(), Value::Mapping(source));
    Value::Mapping(entry)
}

/// Replaces every entry named `name` by `entry` (at the first one's place), or appends it.
fn set_env(main: &mut Mapping, name: &str, entry: Value) {
    let slot = main
        .entry("env".into())
        .or_insert_with(|| Value::Sequence(Vec::new()));
    if !slot.is_sequence() {
        *slot = Value::Sequence(Vec::new());
    }
    let Some(env) = slot.as_sequence_mut() else {
        return;
    };
    let is = |e: &Value| e.get("name").and_then(Value::as_str) == Some(name);
    match env.iter().position(is) {
        Some(first) => {
            env[first] = entry;
            let mut i = 0;
            env.retain(|e| {
                i += 1;
                i - 1 == first || !is(e)
            });
        }
        None => env.push(entry),
    }
}

/// `fence-only` for the target container `main`: refuses what would leave the fence
/// refusing every operator write or guarding a Lease nobody takes, adds `POD_NAME` from
/// `metadata.name` (upstream's holder), and returns the name of upstream's Lease.
pub fn prepare_fence_only(
    main: &mut Mapping,
    lease_flag: Option<&str>,
    path: &str,
    container: &str,
) -> Result<String, String> {
    let field = |var: &str| format!("{path}.containers[{container}].env {var}");
    if let Recognition::Older(why) = recognise(main) {
        return Err(format!(
            "--passmower-election=fence-only keeps Passmower's own leader election, but {why}, \
             which has none: every replica would run the operators. Use \
             --passmower-election=auto (the elector elects)"
        ));
    }
    if let Some(entry) = env_entry(main, ENABLED_VAR) {
        match literal(entry) {
            Some(v) if v == "false" => {
                return Err(format!(
                    "{} is \"false\", which turns off the election --passmower-election=\
                     fence-only keeps: every replica would run the operators. Remove it, or use \
                     --passmower-election=auto",
                    field(ENABLED_VAR)
                ))
            }
            Some(_) => {}
            None => {
                return Err(format!(
                    "{} comes from valueFrom, so whether Passmower's election is on cannot be \
                     known; set it literally (\"true\") for --passmower-election=fence-only",
                    field(ENABLED_VAR)
                ))
            }
        }
    }
    let lease = match env_entry(main, LEASE_VAR) {
        None => DEFAULT_NATIVE_LEASE.to_owned(),
        Some(entry) => match literal(entry).filter(|v| !v.is_empty()) {
            Some(v) => v,
            None => {
                return Err(format!(
                    "{} is empty or comes from valueFrom, so the Lease the write fence must \
                     follow is unknown; set it literally (or remove it: {DEFAULT_NATIVE_LEASE})",
                    field(LEASE_VAR)
                ))
            }
        },
    };
    if let Some(flag) = lease_flag.filter(|f| *f != lease) {
        return Err(format!(
            "--lease-name {flag} is not the Lease Passmower's own election takes ({lease}, \
             from {}); with --passmower-election=fence-only leave --lease-name out",
            if env_entry(main, LEASE_VAR).is_some() {
                field(LEASE_VAR)
            } else {
                format!("its default, {LEASE_VAR} being unset")
            }
        ));
    }
    match env_entry(main, POD_NAME_VAR) {
        None => set_env(main, POD_NAME_VAR, env_field(POD_NAME_VAR, "metadata.name")),
        Some(entry) => {
            let from_name = entry
                .get("valueFrom")
                .and_then(|v| v.get("fieldRef"))
                .and_then(|f| f.get("fieldPath"))
                .and_then(Value::as_str)
                == Some("metadata.name");
            if !from_name {
                return Err(format!(
                    "{} is not from the downward API's metadata.name: Passmower writes it into \
                     Lease {lease} as its holder, and the write fence admits a pod's writes only \
                     when the holder is that pod's name; use valueFrom.fieldRef.fieldPath: \
                     metadata.name",
                    field(POD_NAME_VAR)
                ));
            }
        }
    }
    Ok(lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(yaml: &str) -> Mapping {
        serde_norway::from_str(yaml).expect("container")
    }

    #[test]
    fn image_tags_of_2_4_0_and_later_elect_and_older_ones_do_not() {
        let elects = |i: &str| matches!(recognise_image(i), Recognition::ElectsItself(_));
        let older = |i: &str| matches!(recognise_image(i), Recognition::Older(_));
        for image in [
            "ghcr.io/passmower/passmower:2.4.0",
            "ghcr.io/passmower/passmower:v2.4.1",
            "passmower:2.10.0",
            "registry.example.com:5000/passmower:3.0.0",
            "passmower:2.4",
            "passmower:3",
            "passmower:2.5.0-rc.1",
            "passmower:2.4.0+build.7",
        ] {
            assert!(elects(image), "{image}: {:?}", recognise_image(image));
        }
        for image in [
            "docker.io/codemowers/passmower:2.2.0",
            "passmower:v2.3.9",
            "passmower:1.3.0",
            "passmower:2.3",
            "passmower:1",
            "registry.example.com:5000/passmower:2.2.0",
        ] {
            assert!(older(image), "{image}: {:?}", recognise_image(image));
        }
        for image in [
            "ghcr.io/passmower/passmower@sha256:0123",
            "ghcr.io/passmower/passmower:2.4.0@sha256:0123",
            "ghcr.io/passmower/passmower",
            "registry.example.com:5000/passmower",
            "passmower:latest",
            "passmower:develop",
            "passmower:2",
            "passmower:2.4.0-rc.1",
            "passmower:2.4-rc1",
            "passmower:2.4.0.1",
            "passmower:v",
            "passmower:",
            "passmower:99999999999999999999999",
        ] {
            assert!(
                matches!(recognise_image(image), Recognition::Unknown(_)),
                "{image}: {:?}",
                recognise_image(image)
            );
        }
    }

    #[test]
    fn the_environment_recognises_a_2_4_aware_manifest_whatever_the_image() {
        for var in [ENABLED_VAR, LEASE_VAR] {
            let c = container(&format!(
                "{{name: passmower, image: 'p@sha256:00', env: [{{name: {var}, value: 'x'}}]}}"
            ));
            assert!(matches!(recognise(&c), Recognition::ElectsItself(_)));
        }
        let c = container("{name: passmower, image: 'p:2.2.0', env: [{name: POD_NAME}]}");
        assert!(matches!(recognise(&c), Recognition::Older(_)));
    }

    fn enabled(c: &Mapping) -> Vec<String> {
        c.get("env")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .filter(|e| e["name"].as_str() == Some(ENABLED_VAR))
            .map(|e| e["value"].as_str().unwrap_or("<valueFrom>").to_owned())
            .collect()
    }

    #[test]
    fn ours_turns_upstreams_election_off_and_auto_only_where_it_is_recognised() {
        let run = |yaml: &str, mode| {
            let mut c = container(yaml);
            let mut warnings = Vec::new();
            disable_native_election(
                &mut c,
                mode,
                "Deployment/pm",
                "spec",
                "passmower",
                &mut warnings,
            );
            (enabled(&c), warnings)
        };
        use PassmowerElection::*;
        let new = "{name: passmower, image: 'p:2.4.0'}";
        let old = "{name: passmower, image: 'p:2.2.0'}";
        let digest = "{name: passmower, image: 'p@sha256:00'}";
        assert_eq!(run(new, Auto), (vec!["false".to_owned()], vec![]));
        assert_eq!(run(old, Auto), (vec![], vec![]));
        // Unknown (a digest): set, since a Passmower before 2.4.0 ignores it.
        assert_eq!(run(digest, Auto), (vec!["false".to_owned()], vec![]));
        for image in [new, old, digest] {
            assert_eq!(run(image, Ours), (vec!["false".to_owned()], vec![]));
        }
        // Upstream's 2.4 chart renders "true": replaced, in place, duplicates dropped, warned.
        let chart = "{name: passmower, image: 'p@sha256:00', env: [{name: A, value: a}, \
                     {name: LEADER_ELECTION_ENABLED, value: 'true'}, {name: B, value: b}, \
                     {name: LEADER_ELECTION_ENABLED, value: 'true'}]}";
        let mut c = container(chart);
        let mut warnings = Vec::new();
        disable_native_election(
            &mut c,
            Auto,
            "Deployment/pm",
            "spec.template.spec",
            "passmower",
            &mut warnings,
        );
        let names: Vec<&str> = c["env"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(|e| e["name"].as_str())
            .collect();
        assert_eq!(names, ["A", ENABLED_VAR, "B"]);
        assert_eq!(enabled(&c), ["false"]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains(
                "spec.template.spec.containers[passmower].env LEADER_ELECTION_ENABLED was \"true\""
            ),
            "{warnings:?}"
        );
        assert!(warnings[0].contains("fence-only"), "{warnings:?}");
        // Already false: nothing to say.
        let off = "{name: passmower, image: 'p:2.4.0', env: [{name: LEADER_ELECTION_ENABLED, value: 'false'}]}";
        assert_eq!(run(off, Auto), (vec!["false".to_owned()], vec![]));
    }

    #[test]
    fn the_electors_lease_may_not_be_upstreams_while_upstreams_election_is_on() {
        let digest = container("{name: passmower, image: 'p@sha256:00'}");
        let err = check_lease_clash(&digest, DEFAULT_NATIVE_LEASE, "passmower").unwrap_err();
        assert!(err.contains("--passmower-election=ours"), "{err}");
        assert!(check_lease_clash(&digest, "passmower", "passmower").is_ok());
        let older = container("{name: passmower, image: 'p:2.2.0'}");
        assert!(check_lease_clash(&older, DEFAULT_NATIVE_LEASE, "passmower").is_ok());
        let off = container(
            "{name: passmower, image: 'p:2.4.0', env: [{name: LEADER_ELECTION_ENABLED, value: 'false'}]}",
        );
        assert!(check_lease_clash(&off, DEFAULT_NATIVE_LEASE, "passmower").is_ok());
        let named = container(
            "{name: passmower, image: 'p@sha256:00', env: [{name: LEADER_ELECTION_LEASE_NAME, value: ops}]}",
        );
        assert!(check_lease_clash(&named, DEFAULT_NATIVE_LEASE, "passmower").is_ok());
        assert!(check_lease_clash(&named, "ops", "passmower").is_err());
    }

    #[test]
    fn fence_only_needs_upstreams_election_and_its_lease_and_gets_pod_name() {
        let prepare = |yaml: &str, flag: Option<&str>| {
            let mut c = container(yaml);
            prepare_fence_only(&mut c, flag, "spec.template.spec", "passmower").map(|l| (l, c))
        };
        let (lease, c) = prepare("{name: passmower, image: 'p:2.4.0'}", None).unwrap();
        assert_eq!(lease, DEFAULT_NATIVE_LEASE);
        let pod_name = env_entry(&c, POD_NAME_VAR).expect("POD_NAME added");
        assert_eq!(
            pod_name["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            Some("metadata.name")
        );
        let named = "{name: passmower, image: 'p:2.4.0', env: [{name: LEADER_ELECTION_LEASE_NAME, value: ops}]}";
        assert_eq!(prepare(named, None).unwrap().0, "ops");
        assert_eq!(prepare(named, Some("ops")).unwrap().0, "ops");
        let err = prepare(named, Some("other")).unwrap_err();
        assert!(
            err.contains("--lease-name other") && err.contains("ops"),
            "{err}"
        );
        let err = prepare("{name: passmower, image: 'p:2.2.0'}", None).unwrap_err();
        assert!(err.contains("before 2.4.0"), "{err}");
        let off = "{name: passmower, image: 'p:2.4.0', env: [{name: LEADER_ELECTION_ENABLED, value: 'false'}]}";
        let err = prepare(off, None).unwrap_err();
        assert!(
            err.contains("spec.template.spec.containers[passmower].env LEADER_ELECTION_ENABLED"),
            "{err}"
        );
        let literal_pod = "{name: passmower, image: 'p:2.4.0', env: [{name: POD_NAME, value: x}]}";
        let err = prepare(literal_pod, None).unwrap_err();
        assert!(
            err.contains("env POD_NAME") && err.contains("metadata.name"),
            "{err}"
        );
        let right = "{name: passmower, image: 'p@sha256:00', env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]}";
        let (_, c) = prepare(right, None).unwrap();
        assert_eq!(c["env"].as_sequence().map(Vec::len), Some(1));
    }
}
