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

use crate::inject::names::DEFAULT_CONTAINER;

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
    /// `ours`, with a warning when neither the env nor a plain release tag says which
    /// Passmower runs.
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
    /// It does not (a plain release before 2.4.0); why.
    Older(String),
    /// Cannot tell: the image tag is no plain release; why.
    Unknown(String),
}

/// What an image tag says, by the rule in the module doc. Only a plain release
/// (`MAJOR.MINOR.PATCH`, optionally with a leading `v`) names a version: a line (`2`, `2.4`)
/// moves to another release under the same manifest, and a pre-release or custom tag
/// (`2.0.0-dev`, which the 2.4 tree's own chart renders, `2.4.0-rc.1`) says nothing about the
/// code it holds.
pub fn recognise_image(image: &str) -> Recognition {
    let image = image.trim();
    // `name:2.4.0@sha256:…` pulls by digest and says which release that digest is.
    let (named, digest) = match image.split_once('@') {
        Some((named, _)) => (named, true),
        None => (image, false),
    };
    // The tag follows the last ':' after the last '/' (a registry port is before a '/').
    let last = named.rsplit('/').next().unwrap_or(named);
    let Some((_, tag)) = last.rsplit_once(':') else {
        return Recognition::Unknown(if digest {
            format!("image {image:?} is pinned by a digest alone, which names no release")
        } else {
            format!("image {image:?} has no tag (latest)")
        });
    };
    let core = tag.strip_prefix('v').unwrap_or(tag);
    let numbers: Option<Vec<u64>> = core
        .split('.')
        .map(|p| {
            (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .then(|| p.parse().ok())
                .flatten()
        })
        .collect();
    let version = match numbers.as_deref() {
        Some(&[major, minor, patch]) => Version(major, minor, patch),
        Some(&[_] | &[_, _]) => {
            return Recognition::Unknown(format!(
                "image tag {tag:?} is a version line, not a release: the image it names changes \
                 with every release of that line"
            ))
        }
        _ => {
            return Recognition::Unknown(format!(
                "image tag {tag:?} is no release version (a branch, a pre-release or a custom \
                 build)"
            ))
        }
    };
    let first = FIRST_ELECTING;
    let shown = format!("{}.{}.{}", first.0, first.1, first.2);
    if version >= first {
        Recognition::ElectsItself(format!("image tag {tag:?} is Passmower {shown} or later"))
    } else {
        Recognition::Older(format!("image tag {tag:?} is a Passmower before {shown}"))
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

/// `auto` and `ours` for the target container `main`: sets `LEADER_ELECTION_ENABLED=false`
/// whatever the image says, since a Passmower before 2.4.0 ignores it and leaving it out
/// beside one that elects itself lets a whole tenure go dark. An explicit other value
/// (upstream's 2.4 chart renders `"true"` by default) is replaced, with a warning. `auto` also
/// warns when neither the env nor the image tag says which Passmower runs ([`tag_warning`]).
pub fn disable_native_election(
    main: &mut Mapping,
    mode: PassmowerElection,
    workload: &str,
    path: &str,
    container: &str,
    warnings: &mut Vec<String>,
) {
    if mode == PassmowerElection::FenceOnly {
        return;
    }
    if mode == PassmowerElection::Auto {
        warnings.extend(tag_warning(main, mode, workload, path, container));
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

/// The warning for a container whose Passmower generation cannot be read: its env names no
/// `LEADER_ELECTION_*` and its image tag is no plain release (`latest`, a branch, a digest
/// alone, a version line, a pre-release, a custom build). What it says depends on the mode:
/// under `auto` the injection is right either way and the warning asks for a readable tag;
/// under `fence-only` an image older than 2.4.0 has no election to keep, so every replica
/// would run the operators.
pub fn tag_warning(
    main: &Mapping,
    mode: PassmowerElection,
    workload: &str,
    path: &str,
    container: &str,
) -> Option<String> {
    let Recognition::Unknown(why) = recognise(main) else {
        return None;
    };
    // Another app wrapped with `--container` gets the variable (harmless, or the switch its own
    // election has), but no talk of Passmower generations.
    if !is_passmower(main, container) {
        return None;
    }
    let at = format!("{workload}: {path}.containers[{container}]");
    match mode {
        PassmowerElection::Auto => Some(format!(
            "{at}: {why}, so inject cannot tell whether this Passmower elects a leader itself \
             (2.4.0 and later do); {ENABLED_VAR}=false is set either way (releases before \
             2.4.0 ignore it), so only the elector elects. Name a release tag (2.4.0, or \
             2.4.0@sha256:... beside a digest) so the manifest says what runs, or pass \
             --passmower-election=ours to silence this"
        )),
        PassmowerElection::FenceOnly => Some(format!(
            "{at}: {why}, so inject cannot tell whether this Passmower elects a leader itself: \
             --passmower-election=fence-only keeps Passmower's own election and adds no \
             elector, and a Passmower before 2.4.0 has none, so every replica would run the \
             operators. Name a release tag of 2.4.0 or later, or use --passmower-election=auto"
        )),
        PassmowerElection::Ours => None,
    }
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

/// Whether the target container is Passmower: the default container name, or an image whose
/// name says so (another app wrapped with `--container` is not).
fn is_passmower(main: &Mapping, container: &str) -> bool {
    let image = main
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let repository = image.split('@').next().unwrap_or_default();
    let repository = repository.rsplit('/').next().unwrap_or_default();
    container == DEFAULT_CONTAINER || repository.contains("passmower")
}

/// The Lease of Passmower's own election that the elector holds beside ours
/// (`elect --native-lease`, see `elect/native_lease.rs`), so that pods still (or again) running
/// upstream's election never run operators beside ours while an install moves between the two:
/// for `auto` and `ours`, every Passmower container not recognised as older than 2.4.0, its
/// `LEADER_ELECTION_LEASE_NAME` (a literal; else upstream's default). None for `fence-only`
/// (no elector), for a Passmower before 2.4.0 (no election), and for another app wrapped with
/// `--container`.
pub fn native_lease_to_hold(
    main: &Mapping,
    mode: PassmowerElection,
    container: &str,
) -> Option<String> {
    if mode == PassmowerElection::FenceOnly
        || matches!(recognise(main), Recognition::Older(_))
        || !is_passmower(main, container)
    {
        return None;
    }
    let named = env_entry(main, LEASE_VAR)
        .and_then(literal)
        .filter(|v| !v.is_empty());
    Some(named.unwrap_or_else(|| DEFAULT_NATIVE_LEASE.to_owned()))
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
    fn only_plain_releases_name_a_generation() {
        let elects = |i: &str| matches!(recognise_image(i), Recognition::ElectsItself(_));
        let older = |i: &str| matches!(recognise_image(i), Recognition::Older(_));
        for image in [
            "ghcr.io/passmower/passmower:2.4.0",
            "ghcr.io/passmower/passmower:v2.4.1",
            "passmower:2.10.0",
            "registry.example.com:5000/passmower:3.0.0",
            "ghcr.io/passmower/passmower:2.4.0@sha256:0123",
        ] {
            assert!(elects(image), "{image}: {:?}", recognise_image(image));
        }
        for image in [
            "docker.io/codemowers/passmower:2.2.0",
            "passmower:v2.3.9",
            "passmower:1.3.0",
            "registry.example.com:5000/passmower:2.2.0",
            "passmower:2.2.0@sha256:0123",
        ] {
            assert!(older(image), "{image}: {:?}", recognise_image(image));
        }
        for image in [
            "ghcr.io/passmower/passmower@sha256:0123",
            "ghcr.io/passmower/passmower",
            "registry.example.com:5000/passmower",
            "passmower:latest",
            "passmower:develop",
            "passmower:2",
            "passmower:2.4",
            "passmower:2.3",
            "passmower:2.0.0-dev",
            "passmower:2.4.0-rc.1",
            "passmower:2.5.0-rc.1",
            "passmower:2.4.0-custom",
            "passmower:2.4.0+build.7",
            "passmower:2.4-rc1",
            "passmower:2.4.0.1",
            "passmower:v",
            "passmower:",
            "passmower:99999999999999999999999.0.0",
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

    fn run(yaml: &str, mode: PassmowerElection) -> (Vec<String>, Vec<String>) {
        let mut c = container(yaml);
        let mut warnings = Vec::new();
        disable_native_election(
            &mut c,
            mode,
            "Deployment/pm",
            "spec.template.spec",
            "passmower",
            &mut warnings,
        );
        (enabled(&c), warnings)
    }

    /// Every tag, readable or not, gets upstream's election turned off under `auto`: a
    /// `2.0.0-dev` build of the 2.4 tree elects itself as surely as a `2.4.0` one. Only a
    /// plain release is quiet; any other tag is warned about, naming the tag and the way out.
    #[test]
    fn auto_turns_upstreams_election_off_for_every_tag_and_warns_where_it_cannot_read_one() {
        use PassmowerElection::*;
        let unreadable = [
            ("passmower:2.0.0-dev", "\"2.0.0-dev\" is no release version"),
            ("passmower:latest", "\"latest\" is no release version"),
            ("passmower:develop", "\"develop\" is no release version"),
            ("passmower:2", "\"2\" is a version line"),
            ("passmower:2.4", "\"2.4\" is a version line"),
            (
                "passmower:2.4.0-rc.1",
                "\"2.4.0-rc.1\" is no release version",
            ),
            ("passmower@sha256:0123", "pinned by a digest alone"),
            ("passmower", "has no tag (latest)"),
        ];
        for (image, why) in unreadable {
            let (env, warnings) = run(&format!("{{name: passmower, image: '{image}'}}"), Auto);
            assert_eq!(env, ["false"], "{image}");
            assert_eq!(warnings.len(), 1, "{image}: {warnings:?}");
            let w = &warnings[0];
            assert!(
                w.starts_with("Deployment/pm: spec.template.spec.containers[passmower]: "),
                "{w}"
            );
            assert!(w.contains(why), "{image}: {w}");
            assert!(
                w.contains("LEADER_ELECTION_ENABLED=false is set either way"),
                "{w}"
            );
            assert!(w.contains("--passmower-election=ours"), "{w}");
            // `ours` says the same thing to the app and nothing to the user.
            assert_eq!(
                run(&format!("{{name: passmower, image: '{image}'}}"), Ours),
                (vec!["false".to_owned()], vec![]),
                "{image}"
            );
        }
        for image in ["passmower:2.2.0", "passmower:1.3.0", "passmower:2.4.0"] {
            let yaml = format!("{{name: passmower, image: '{image}'}}");
            assert_eq!(
                run(&yaml, Auto),
                (vec!["false".to_owned()], vec![]),
                "{image}"
            );
            assert_eq!(
                run(&yaml, Ours),
                (vec!["false".to_owned()], vec![]),
                "{image}"
            );
        }
        // A 2.4-aware manifest says what the app does whatever its tag: no tag warning.
        let aware = "{name: passmower, image: 'p:2.0.0-dev', env: [{name: LEADER_ELECTION_LEASE_NAME, value: ops}]}";
        assert_eq!(run(aware, Auto), (vec!["false".to_owned()], vec![]));
        // Another app (`--container app`, not a Passmower image): the variable, no talk of
        // Passmower generations; a Passmower image under another container name is warned.
        for (image, warned) in [
            ("example.com/idp:latest", 0),
            ("example.com/passmower:dev", 1),
        ] {
            let mut c = container(&format!("{{name: app, image: '{image}'}}"));
            let mut warnings = Vec::new();
            disable_native_election(
                &mut c,
                Auto,
                "StatefulSet/idp",
                "spec",
                "app",
                &mut warnings,
            );
            assert_eq!(enabled(&c), ["false"], "{image}");
            assert_eq!(warnings.len(), warned, "{image}: {warnings:?}");
        }
        // fence-only is not this function's: it keeps upstream's election.
        assert_eq!(
            run("{name: passmower, image: 'p:latest'}", FenceOnly),
            (vec![], vec![])
        );
    }

    #[test]
    fn fence_only_warns_that_an_unreadable_tag_may_have_no_election_to_keep() {
        let c = container("{name: passmower, image: 'p:2.0.0-dev'}");
        let w = tag_warning(
            &c,
            PassmowerElection::FenceOnly,
            "Deployment/pm",
            "spec",
            "passmower",
        )
        .expect("a warning");
        assert!(w.contains("every replica would run the operators"), "{w}");
        assert!(w.contains("--passmower-election=auto"), "{w}");
        let c = container("{name: passmower, image: 'p:2.4.0'}");
        assert_eq!(
            tag_warning(
                &c,
                PassmowerElection::FenceOnly,
                "Deployment/pm",
                "spec",
                "passmower"
            ),
            None
        );
    }

    #[test]
    fn a_value_the_chart_set_is_replaced_in_place_with_a_warning() {
        // Upstream's 2.4 chart renders "true": replaced, in place, duplicates dropped, warned.
        let chart = "{name: passmower, image: 'p:2.4.0', env: [{name: A, value: a}, \
                     {name: LEADER_ELECTION_ENABLED, value: 'true'}, {name: B, value: b}, \
                     {name: LEADER_ELECTION_ENABLED, value: 'true'}]}";
        let mut c = container(chart);
        let mut warnings = Vec::new();
        disable_native_election(
            &mut c,
            PassmowerElection::Auto,
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
        assert_eq!(
            run(off, PassmowerElection::Auto),
            (vec!["false".to_owned()], vec![])
        );
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
