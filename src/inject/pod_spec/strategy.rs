//! The Deployment's rollout strategy under the elector: surge before removing when none is
//! set, the user's own when it keeps a pod running, replaced (and said why) when it stops
//! every pod at once.

use serde_norway::{Mapping, Value};

use crate::inject::options::InjectOptions;
use crate::inject::target::Target;

/// The strategy `inject` sets: surge before removing, so a new pod is up (as follower) before
/// an old one goes, a serving replica always exists and the leader hands over instead of
/// vanishing. Overlapping pods are what the elector makes safe.
const SURGE_STRATEGY: &str =
    "type: RollingUpdate\nrollingUpdate:\n  maxSurge: 1\n  maxUnavailable: 0\n";

/// Sets the Deployment's rollout strategy: ours when it has none, the user's when it keeps a
/// pod running through a rollout, ours with the reason in `warnings` when it stops every pod
/// at once (unless --keep-strategy).
pub fn rollout_strategy(
    spec: &mut Mapping,
    target: &Target,
    opts: &InjectOptions,
    warnings: &mut Vec<String>,
) {
    let ours = || serde_norway::from_str::<Value>(SURGE_STRATEGY).unwrap_or_default();
    let current = match spec.get("strategy") {
        None | Some(Value::Null) => None,
        Some(Value::Mapping(m)) if m.is_empty() => None,
        Some(other) => Some(other.clone()),
    };
    let Some(current) = current else {
        spec.insert("strategy".into(), ours());
        return;
    };
    let Some(why) = stops_every_pod(&current, target.replicas) else {
        return;
    };
    if opts.keep_strategy {
        warnings.push(format!(
            "{}: keeps its strategy although {why} (--keep-strategy): every rollout leaves no \
             replica serving and none leading until the new pods are up",
            target.describe()
        ));
        return;
    }
    warnings.push(format!(
        "{}: strategy replaced by RollingUpdate (maxSurge 1, maxUnavailable 0) because {why}: \
         no replica would serve HTTP or lead until the new pods are up. With the elector, old \
         and new pods may overlap safely; pass --keep-strategy to keep it",
        target.describe()
    ));
    spec.insert("strategy".into(), ours());
}

/// Why `strategy` takes every pod down at once during a rollout, if it does.
fn stops_every_pod(strategy: &Value, replicas: Option<u64>) -> Option<String> {
    match strategy.get("type").and_then(Value::as_str) {
        Some("Recreate") => {
            return Some("Recreate stops every pod before starting new ones".into())
        }
        None | Some("RollingUpdate") => {}
        Some(_) => return None,
    }
    // Kubernetes runs 1 replica when none is set (an autoscaler may run more).
    let replicas = replicas.unwrap_or(1);
    let max_unavailable = strategy.get("rollingUpdate")?.get("maxUnavailable")?;
    let unavailable = match max_unavailable {
        Value::Number(n) => n.as_u64()?,
        // Kubernetes rounds a percentage of unavailable pods down.
        Value::String(s) => {
            let percent: u64 = s.strip_suffix('%')?.trim().parse().ok()?;
            replicas * percent / 100
        }
        _ => return None,
    };
    (replicas > 0 && unavailable >= replicas).then(|| {
        format!(
            "maxUnavailable {} allows all {replicas} replica(s) down at once",
            yaml_scalar(max_unavailable)
        )
    })
}

fn yaml_scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::target::tests::{opts, target_of, DEPLOYMENT};

    /// `text`'s Deployment after `rollout_strategy`, and its warnings.
    fn rewritten(text: &str, opts: &InjectOptions) -> (Value, Vec<String>) {
        let (mut value, target) = target_of(text, opts);
        let mut warnings = Vec::new();
        let spec = value["spec"].as_mapping_mut().unwrap();
        rollout_strategy(spec, &target, opts, &mut warnings);
        (value, warnings)
    }

    fn with_strategy(strategy: &str, replicas: u64) -> String {
        DEPLOYMENT.replace(
            "spec:\n  selector:",
            &format!("spec:\n  replicas: {replicas}\n  strategy: {strategy}\n  selector:"),
        )
    }

    fn strategy_of(value: &Value) -> Value {
        value["spec"]["strategy"].clone()
    }

    #[test]
    fn an_explicit_rolling_update_that_keeps_a_pod_is_kept() {
        for (strategy, replicas) in [
            (
                "{type: RollingUpdate, rollingUpdate: {maxSurge: 2, maxUnavailable: 1}}",
                3,
            ),
            ("{rollingUpdate: {maxUnavailable: 50%}}", 3),
            ("{type: RollingUpdate}", 1),
        ] {
            let text = with_strategy(strategy, replicas);
            let (value, warnings) = rewritten(&text, &opts());
            let (original, _) = target_of(&text, &opts());
            assert_eq!(strategy_of(&value), strategy_of(&original), "{strategy}");
            assert!(warnings.is_empty(), "{strategy}: {warnings:?}");
        }
    }

    #[test]
    fn a_strategy_that_stops_every_pod_is_replaced_and_says_why() {
        let ours: Value = serde_norway::from_str(SURGE_STRATEGY).unwrap();
        for (strategy, replicas, why) in [
            ("{type: Recreate}", 2, "Recreate"),
            (
                "{rollingUpdate: {maxSurge: 1, maxUnavailable: 3}}",
                3,
                "maxUnavailable 3",
            ),
            (
                "{rollingUpdate: {maxUnavailable: 100%}}",
                2,
                "maxUnavailable 100%",
            ),
            ("{rollingUpdate: {maxUnavailable: 1}}", 1, "all 1 replica"),
        ] {
            let (value, warnings) = rewritten(&with_strategy(strategy, replicas), &opts());
            assert_eq!(strategy_of(&value), ours, "{strategy}");
            assert_eq!(warnings.len(), 1, "{strategy}: {warnings:?}");
            assert!(warnings[0].contains(why), "{strategy}: {}", warnings[0]);
            assert!(warnings[0].contains("--keep-strategy"));
        }
        let keep = InjectOptions {
            keep_strategy: true,
            ..opts()
        };
        let (value, warnings) = rewritten(&with_strategy("{type: Recreate}", 2), &keep);
        assert_eq!(strategy_of(&value)["type"].as_str(), Some("Recreate"));
        assert_eq!(warnings.len(), 1);
    }

    #[test]
    fn no_strategy_gets_the_surge_strategy_without_a_warning() {
        let (value, warnings) = rewritten(DEPLOYMENT, &opts());
        let ours: Value = serde_norway::from_str(SURGE_STRATEGY).unwrap();
        assert_eq!(strategy_of(&value), ours);
        assert!(warnings.is_empty());
    }
}
