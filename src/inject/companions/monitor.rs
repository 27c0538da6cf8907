//! Metrics: a Prometheus Operator PodMonitor that selects a target's pods gets an endpoint for
//! the elector's `/metrics`, and, when the app runs a separate leader instance, one for that
//! instance's own metrics, which the elector serves at `/metrics/leader-app` (the instance
//! listens on loopback only); so the chart's own monitoring (Passmower's `podMonitor.enabled`)
//! scrapes both without a second object.
//!
//! A PodMonitor scrapes the container ports its endpoints name. Giving the elector's port the
//! app's port name (`metrics`) would scrape it too, but two containers with one port name make
//! the API server warn on every apply and send named-port Services and probes to the first
//! one; a second endpoint naming the elector's own port has neither problem.

use serde_norway::{Mapping, Value};

use crate::inject::names::{LEADER_APP_METRICS_PATH, PROBE_PORT_NAME};

/// The PodMonitor `value` with endpoints for the elector's port added (`/metrics`, and with
/// `leader_app` also `/metrics/leader-app`), when it selects the pods of a target and lacks
/// them; `None` otherwise (also for anything not a PodMonitor).
pub fn add_elector_endpoint(
    value: &Value,
    target_pods: &[(Option<String>, Mapping)],
    leader_app: bool,
) -> Option<Value> {
    if value.get("kind")?.as_str()? != "PodMonitor"
        || !value
            .get("apiVersion")?
            .as_str()?
            .starts_with("monitoring.coreos.com/")
    {
        return None;
    }
    let namespace = value
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str);
    let spec = value.get("spec")?;
    // Only what matchLabels says can be checked here; a PodMonitor that also has
    // matchExpressions, or that looks in other namespaces, is left alone.
    let selector = spec.get("selector")?.as_mapping()?;
    if selector.keys().any(|k| k.as_str() != Some("matchLabels"))
        || spec.get("namespaceSelector").is_some()
    {
        return None;
    }
    let match_labels = selector.get("matchLabels")?.as_mapping()?;
    let selects = target_pods.iter().any(|(ns, labels)| {
        ns.as_deref() == namespace
            && !match_labels.is_empty()
            && match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
    });
    if !selects {
        return None;
    }
    let endpoints = spec.get("podMetricsEndpoints")?.as_sequence()?;
    let has = |path: &str| {
        endpoints.iter().any(|e| {
            e.get("port").and_then(Value::as_str) == Some(PROBE_PORT_NAME)
                && e.get("path").and_then(Value::as_str).unwrap_or("/metrics") == path
        })
    };
    let mut paths = vec!["/metrics"];
    if leader_app {
        paths.push(LEADER_APP_METRICS_PATH);
    }
    paths.retain(|p| !has(p));
    if paths.is_empty() {
        return None;
    }
    // Scraped as often as the app's own metrics.
    let interval = endpoints.first().and_then(|e| e.get("interval")).cloned();
    let mut changed = value.clone();
    let list = changed
        .get_mut("spec")?
        .get_mut("podMetricsEndpoints")?
        .as_sequence_mut()?;
    for path in paths {
        let mut endpoint = Mapping::new();
        endpoint.insert("port".into(), PROBE_PORT_NAME.into());
        endpoint.insert("path".into(), path.into());
        if let Some(interval) = &interval {
            endpoint.insert("interval".into(), interval.clone());
        }
        list.push(Value::Mapping(endpoint));
    }
    Some(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> Vec<(Option<String>, Mapping)> {
        let labels: Mapping = serde_norway::from_str(
            "app.kubernetes.io/name: passmower\napp.kubernetes.io/instance: pm\n",
        )
        .unwrap();
        vec![(None, labels)]
    }

    fn monitor(match_labels: &str) -> Value {
        serde_norway::from_str(&format!(
            "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata: {{name: pm}}\n\
             spec:\n  selector:\n    matchLabels: {match_labels}\n  podMetricsEndpoints:\n  \
             - port: metrics\n    interval: 30s\n"
        ))
        .unwrap()
    }

    #[test]
    fn a_podmonitor_of_the_target_scrapes_the_elector_once() {
        let changed = add_elector_endpoint(
            &monitor("{app.kubernetes.io/name: passmower, app.kubernetes.io/instance: pm}"),
            &pods(),
            false,
        )
        .expect("changed");
        let endpoints = changed["spec"]["podMetricsEndpoints"]
            .as_sequence()
            .unwrap();
        assert_eq!(endpoints.len(), 2);
        assert_eq!(endpoints[1]["port"].as_str(), Some(PROBE_PORT_NAME));
        assert_eq!(endpoints[1]["path"].as_str(), Some("/metrics"));
        assert_eq!(endpoints[1]["interval"].as_str(), Some("30s"));
        assert!(add_elector_endpoint(&changed, &pods(), false).is_none());
        // With a leader instance its metrics are scraped too, once.
        let both = add_elector_endpoint(&changed, &pods(), true).expect("changed");
        let endpoints = both["spec"]["podMetricsEndpoints"].as_sequence().unwrap();
        assert_eq!(endpoints.len(), 3);
        assert_eq!(endpoints[2]["path"].as_str(), Some(LEADER_APP_METRICS_PATH));
        assert!(add_elector_endpoint(&both, &pods(), true).is_none());
    }

    #[test]
    fn other_podmonitors_are_left_alone() {
        for labels in ["{app: other}", "{}", "{app.kubernetes.io/instance: other}"] {
            assert!(add_elector_endpoint(&monitor(labels), &pods(), true).is_none());
        }
    }
}
