//! How the warm standby is started and given the go, worked out from the flags before anything
//! starts: its start environment (the follower's, with the leader instance's preloads and its
//! own) and the go that makes its environment the leader instance's, key for key. Pure data:
//! the settings hold it, and [`super`] runs it.

use crate::supervise::leader_instance::port_map;

/// The preload that warms the module cache and waits for the go (see the module doc).
pub const PRELOAD: &str = include_str!("preload.mjs");

/// Lets the preload resolve the app's dependencies with Node's own resolver from the app's
/// directory (`import.meta.resolve`'s parent argument) without a hooks thread; see the preload.
/// Node reads it at start only, so it stays in force in the leader instance, where it changes
/// nothing an app relies on. Node 12.16 to 24 know it.
pub const RESOLVE_FLAG: &str = "--experimental-import-meta-resolve";

/// The variable telling the preload which file descriptor the go arrives on.
pub const FD_VAR: &str = "PASSMOWER_ELECTOR_STANDBY_FD";

/// How the standby is started and told to go; worked out from the flags before anything starts.
#[derive(Debug, Clone)]
pub struct StandbySpec {
    /// The environment overrides it starts with: the follower's, then the leader instance's
    /// preloads (`NODE_OPTIONS` with the standby's preload added last, the port map's table and
    /// `--require`s). Node reads `NODE_OPTIONS` once, at start, so it must be the leader's.
    pub env: Vec<(String, String)>,
    /// The go: `{"env":{KEY:VALUE or null}}`, which makes the standby's environment exactly
    /// what a leader instance started afresh would have (see [`StandbySpec::new`]).
    pub go: Vec<u8>,
}

impl StandbySpec {
    /// The standby's start and go from the follower overrides, the leader instance's overrides
    /// (`leader_env`, the port map's preload in its `NODE_OPTIONS` already) and `inherited`,
    /// which gives the supervisor's own value of a variable (both instances start from the
    /// supervisor's environment). The go names every key either list sets, and the standby's
    /// descriptor variable: its leader value; else the inherited one; else null (unset). So after
    /// the go the environment is the leader instance's, key for key. Errors with the key whose
    /// inherited value is not UTF-8 (JSON cannot carry it, nor can the preload set it).
    pub fn new(
        follower_env: &[(String, String)],
        leader_env: &[(String, String)],
        inherited: impl Fn(&str) -> Result<Option<String>, String>,
    ) -> Result<StandbySpec, String> {
        let preload_keys = ["NODE_OPTIONS", port_map::TABLE_VAR, port_map::REQUIRE_VAR];
        let mut env: Vec<(String, String)> = follower_env
            .iter()
            .filter(|(k, _)| !preload_keys.contains(&k.as_str()) && k != FD_VAR)
            .cloned()
            .collect();
        for key in preload_keys {
            let Some((_, value)) = leader_env.iter().rev().find(|(k, _)| k == key) else {
                continue;
            };
            let value = if key == "NODE_OPTIONS" {
                format!("{value} {RESOLVE_FLAG} {}", port_map::data_import(PRELOAD))
            } else {
                value.clone()
            };
            env.push((key.to_owned(), value));
        }
        let mut go = serde_json::Map::new();
        let keys = env
            .iter()
            .map(|(k, _)| k.as_str())
            .chain([FD_VAR])
            .chain(leader_env.iter().map(|(k, _)| k.as_str()));
        for key in keys {
            if go.contains_key(key) {
                continue;
            }
            let value = match leader_env.iter().rev().find(|(k, _)| k == key) {
                Some((_, v)) => Some(v.clone()),
                None => inherited(key)?,
            };
            go.insert(
                key.to_owned(),
                value.map_or(serde_json::Value::Null, Into::into),
            );
        }
        let go = serde_json::json!({ "env": go }).to_string().into_bytes();
        Ok(StandbySpec { env, go })
    }
}

/// The supervisor's own value of `key`, as a freshly started instance inherits it.
pub fn inherited(key: &str) -> Result<Option<String>, String> {
    match std::env::var(key) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!(
            "the container's {key} is not UTF-8, so the standby's go cannot carry it"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn go_env(spec: &StandbySpec) -> serde_json::Map<String, serde_json::Value> {
        let go: serde_json::Value = serde_json::from_slice(&spec.go).expect("go is JSON");
        go["env"].as_object().expect("env object").clone()
    }

    #[test]
    fn the_standby_starts_as_a_follower_with_the_leaders_preloads_and_its_own_last() {
        let follower = kv(&[("NAMESPACE_SELECTOR", "idle"), ("NODE_OPTIONS", "--x")]);
        let leader = kv(&[
            ("NAMESPACE_SELECTOR", "real"),
            ("NODE_OPTIONS", "--import=data:map --max-old-space-size=256"),
            (port_map::TABLE_VAR, "*=0"),
        ]);
        let spec = StandbySpec::new(&follower, &leader, |_| Ok(None)).expect("spec");
        let get = |key: &str| {
            spec.env
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("NAMESPACE_SELECTOR").as_deref(), Some("idle"));
        let node_options = get("NODE_OPTIONS").expect("NODE_OPTIONS");
        assert!(
            node_options.starts_with(
                "--import=data:map --max-old-space-size=256 --experimental-import-meta-resolve \
                 --import=data:"
            ),
            "the leader's preloads first, the standby's last: {node_options}"
        );
        assert!(node_options.ends_with(&port_map::data_import(PRELOAD)));
        assert_eq!(get(port_map::TABLE_VAR).as_deref(), Some("*=0"));
        assert!(
            get(FD_VAR).is_none(),
            "the descriptor is added at each start"
        );
        assert_eq!(
            spec.env.iter().filter(|(k, _)| k == "NODE_OPTIONS").count(),
            1,
            "{:?}",
            spec.env
        );
    }

    #[test]
    fn the_go_makes_the_environment_the_leader_instances_key_for_key() {
        let follower = kv(&[
            ("NAMESPACE_SELECTOR", "idle"),
            ("ONLY_FOLLOWER", "f"),
            ("UNSET_IN_CONTAINER", "f"),
        ]);
        let leader = kv(&[
            ("NAMESPACE_SELECTOR", "real"),
            ("NAMESPACE_SELECTOR", "real-last"),
            ("NODE_OPTIONS", "--import=data:map"),
            ("ONLY_LEADER", "l"),
        ]);
        let container = |key: &str| {
            Ok(match key {
                "ONLY_FOLLOWER" => Some("container".to_owned()),
                _ => None,
            })
        };
        let spec = StandbySpec::new(&follower, &leader, container).expect("spec");
        let env = go_env(&spec);
        assert_eq!(
            env["NAMESPACE_SELECTOR"], "real-last",
            "the last value wins"
        );
        assert_eq!(env["ONLY_LEADER"], "l");
        assert_eq!(
            env["NODE_OPTIONS"], "--import=data:map",
            "no standby preload"
        );
        assert_eq!(env["ONLY_FOLLOWER"], "container", "the container's own");
        assert!(
            env["UNSET_IN_CONTAINER"].is_null(),
            "unset, as in a fresh one"
        );
        assert!(env[FD_VAR].is_null(), "the descriptor's variable goes");
        assert_eq!(env.len(), 6, "{env:?}");
    }

    #[test]
    fn an_inherited_value_json_cannot_carry_is_refused() {
        let follower = kv(&[("X", "f")]);
        let e = StandbySpec::new(&follower, &[], |k| Err(format!("{k} is not UTF-8")))
            .expect_err("refused");
        assert!(e.contains('X'), "{e}");
    }
}
