//! The leader instance's part of `supervise`'s checks (`--on-change=leader-instance`): its
//! environment and port map, the Node.js it needs, the warm standby, the health probe and the
//! promotion's converge; each refusal a `ConfigError` (exit 2) before any child starts.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::config::ConfigError;
use crate::supervise::args::SuperviseArgs;
use crate::supervise::leader_instance::converge;
use crate::supervise::leader_instance::health::{self, HealthSpec};
use crate::supervise::leader_instance::port_map;
use crate::supervise::leader_instance::standby::spec::{self as standby, StandbySpec};
use crate::supervise::mode::{OnChange, OnFollower};
use crate::wire::SELECTOR_VAR;

/// The promotion check of `--converge-oidc-clients`, set up from what the leader instance's
/// environment will be: `--leader-env` over the supervisor's own.
pub(in crate::supervise) fn converge_settings(
    args: &SuperviseArgs,
    leader_env: &[(String, String)],
) -> Result<Option<converge::Converge>, ConfigError> {
    if !args.converge_oidc_clients {
        return Ok(None);
    }
    if matches!(args.on_change, OnChange::Signal(_) | OnChange::LeaseBridge) {
        return Err(ConfigError::new(
            "--converge-oidc-clients",
            "true",
            format!(
                "needs --on-change=leader-instance or restart: with {} the operator is not \
                 started at promotion, so there is no start to check before",
                args.on_change
            ),
        ));
    }
    let leader_value = |key: &str| {
        leader_env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(key).ok())
    };
    Ok(Some(converge::Converge {
        selector: leader_value(SELECTOR_VAR),
        deployment: leader_value("DEPLOYMENT_NAME"),
    }))
}

/// `--leader-standby`'s start and go, from the follower environment and the leader instance's
/// (its preloads included); refused without a Node leader instance to warm (leader-instance with
/// a port map, whose preload the standby's follows) and with `--leader-args`, which would be in
/// the standby's command line before any promotion.
pub(in crate::supervise) fn standby_settings(
    args: &SuperviseArgs,
    leader_env: &[(String, String)],
) -> Result<Option<StandbySpec>, ConfigError> {
    if !args.leader_standby {
        return Ok(None);
    }
    let refuse = |reason: String| ConfigError::new("--leader-standby", "true", reason);
    if args.on_change != OnChange::LeaderInstance {
        return Err(refuse(format!(
            "needs --on-change=leader-instance (not {}): the standby is a leader instance \
             started ahead of the promotion",
            args.on_change
        )));
    }
    if args.leader_port_map.is_empty() {
        return Err(refuse(
            "needs --leader-port-map (a Node.js app, 18.18 or later): the standby waits in a \
             Node preload loaded after the port map's, and its listeners must move like a \
             leader instance's (Passmower: --leader-port-map='*=0')"
                .to_owned(),
        ));
    }
    if let Some(first) = args.leader_args.first() {
        return Err(refuse(format!(
            "cannot be combined with --leader-args ({first}): the standby is started before the \
             promotion, so its command line would carry the leader's arguments while it follows; \
             give the leader's settings with --leader-env instead"
        )));
    }
    StandbySpec::new(&args.follower_env, leader_env, standby::inherited)
        .map(Some)
        .map_err(refuse)
}

/// `--leader-health-url` and its timings, within their ranges (see [`health::MIN_PERIOD`] and
/// the rest); refused without a leader instance to probe.
pub(in crate::supervise) fn health_settings(
    args: &SuperviseArgs,
) -> Result<Option<HealthSpec>, ConfigError> {
    use crate::config::human;
    let Some(url) = &args.leader_health_url else {
        return Ok(None);
    };
    if args.on_change != OnChange::LeaderInstance {
        return Err(ConfigError::new(
            "--leader-health-url",
            url,
            format!(
                "needs --on-change=leader-instance (not {}): with one instance the kubelet's \
                 liveness probe reaches the app itself",
                args.on_change
            ),
        ));
    }
    let (addr, path) =
        health::parse_url(url).map_err(|e| ConfigError::new("--leader-health-url", url, e))?;
    let period = args.leader_health_period;
    if !(health::MIN_PERIOD..=health::MAX_PERIOD).contains(&period) {
        return Err(ConfigError::new(
            "--leader-health-period",
            human(period),
            format!(
                "must be from {} to {}: shorter only loads the app, longer keeps a wedged \
                 leader on the Lease for the failure count times it",
                human(health::MIN_PERIOD),
                human(health::MAX_PERIOD)
            ),
        ));
    }
    let timeout = args.leader_health_timeout;
    if !(health::MIN_TIMEOUT..=health::MAX_TIMEOUT).contains(&timeout) {
        return Err(ConfigError::new(
            "--leader-health-timeout",
            human(timeout),
            format!(
                "must be from {} to {}",
                human(health::MIN_TIMEOUT),
                human(health::MAX_TIMEOUT)
            ),
        ));
    }
    let failures = args.leader_health_failures;
    if !(1..=health::MAX_FAILURES).contains(&failures) {
        return Err(ConfigError::new(
            "--leader-health-failures",
            failures.to_string(),
            format!(
                "must be from 1 to {}: failed probes in a row that restart the leader instance",
                health::MAX_FAILURES
            ),
        ));
    }
    Ok(Some(HealthSpec {
        addr,
        path,
        period,
        timeout,
        failures,
    }))
}

/// The leader's environment, with `--leader-port-map`'s preload for the leader instance; refuses
/// combinations that cannot work: the leader instance with `--on-follower=stop` (it would serve
/// nothing while follower and serve twice while leader), a port map without it, and a map that
/// moves a listener onto the toggle's own `listen` address.
pub(in crate::supervise) fn leader_instance_env(
    args: &SuperviseArgs,
    listen: SocketAddr,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut env = args.leader_env.clone();
    let separate = args.on_change == OnChange::LeaderInstance;
    if separate && args.on_follower == OnFollower::Stop {
        return Err(ConfigError::new(
            "--on-follower",
            "stop",
            "cannot be combined with --on-change=leader-instance, whose follower instance runs \
             (and serves) the whole time; for an app that must run only while leader use \
             --on-change=restart --on-follower=stop",
        ));
    }
    let map = port_map::PortMap::new(args.leader_port_map.clone()).map_err(|e| {
        ConfigError::new(
            "--leader-port-map",
            port_map::show(&args.leader_port_map),
            e,
        )
    })?;
    if map.is_empty() {
        return Ok(env);
    }
    // The moved listeners bind 127.0.0.1, where the toggle may already listen.
    let toggle_v4 = listen.ip() == std::net::Ipv4Addr::LOCALHOST;
    if let Some(entry) = map.moves_onto(listen.port()).filter(|_| toggle_v4) {
        return Err(ConfigError::new(
            "--leader-port-map",
            port_map::show(&args.leader_port_map),
            format!(
                "{entry} moves a listener onto {listen}, where the supervisor's toggle (--listen) \
                 listens; TO must be 0 (any free port) or a port nothing in the pod listens on"
            ),
        ));
    }
    if !separate {
        return Err(ConfigError::new(
            "--leader-port-map",
            port_map::show(&args.leader_port_map),
            format!(
                "only moves the ports of a second, leader-only instance; it needs \
                 --on-change=leader-instance (not {})",
                args.on_change
            ),
        ));
    }
    check_node_preloads(&args.command, &args.leader_port_map)?;
    // The leader instance's NODE_OPTIONS: its own leader value, else the container's.
    let inherited = match env.iter().rposition(|(k, _)| k == "NODE_OPTIONS") {
        Some(i) => Some(env.remove(i).1),
        None => std::env::var("NODE_OPTIONS").ok(),
    };
    env.retain(|(k, _)| {
        k != "NODE_OPTIONS" && k != port_map::TABLE_VAR && k != port_map::REQUIRE_VAR
    });
    env.extend(map.env(inherited.as_deref()));
    Ok(env)
}

/// How long `node --version` may take before the check gives up on it (and lets the app start).
const NODE_VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// What would make every leader instance fail at start, which the elector would see only as a
/// leader that keeps failing, handed from pod to pod: a Node.js without `--import` (it refuses
/// the leader instance's `NODE_OPTIONS`, "bad option"), and a `--require` on node's command line
/// (it runs before the map's `--import`, which cannot move it there as it does one in
/// `NODE_OPTIONS`). The Node the app runs (the command itself when it is `node`, else `node` on
/// `PATH`) is asked its version before anything starts; no Node found, or no answer, lets the
/// app start as before.
fn check_node_preloads(command: &[String], map: &[(Option<u16>, u16)]) -> Result<(), ConfigError> {
    let named = command.first().filter(|c| {
        Path::new(c)
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n == "node" || n == "nodejs")
    });
    if let Some(module) = named.and_then(|_| command_line_require(&command[1..])) {
        return Err(ConfigError::new(
            "--leader-port-map",
            port_map::show(map),
            format!(
                "the command loads {module:?} with --require on node's command line, which Node \
                 runs before the map's --import, so a port it opens is not moved and the leader \
                 instance collides with the serving one; move it into NODE_OPTIONS \
                 (`--require {module}`), where it loads after the map's patch"
            ),
        ));
    }
    let node = named.map_or("node", String::as_str);
    let Some(version) = node_version(node) else {
        tracing::debug!(
            node,
            "no Node.js version found; the port map's --import is not checked"
        );
        return Ok(());
    };
    match port_map::node_has_import(&version) {
        Some(false) => Err(ConfigError::new(
            "--leader-port-map",
            port_map::show(map),
            format!(
                "needs Node.js {min} or later (any 19 or newer): the map is loaded with \
                 --import, which `{node} --version` ({version}) does not have, so every leader \
                 instance would fail at start; upgrade the image's Node.js, or run the app \
                 without --leader-port-map and --on-change=leader-instance (the default \
                 --on-change=restart needs neither)",
                min = port_map::MIN_NODE,
                version = version.trim(),
            ),
        )),
        _ => Ok(()),
    }
}

/// The first module `node ARGS` loads with `-r`/`--require` before its script. Only options
/// Node gives a separate value are skipped with their value; at anything else that is not an
/// option (the script, or an option's value this list lacks) the search ends, so an argument of
/// the app itself is never taken for one of Node's.
fn command_line_require(args: &[String]) -> Option<String> {
    const WITH_VALUE: [&str; 9] = [
        "--import",
        "--loader",
        "--experimental-loader",
        "-C",
        "--conditions",
        "--title",
        "--env-file",
        "--input-type",
        "--inspect-port",
    ];
    let mut args = args.iter();
    while let Some(a) = args.next() {
        if a == "-r" || a == "--require" {
            return args.next().cloned();
        }
        if let Some(module) = a.strip_prefix("--require=") {
            return Some(module.to_owned());
        }
        if a == "--" || !a.starts_with('-') {
            return None;
        }
        if WITH_VALUE.contains(&a.as_str()) {
            args.next();
        }
    }
    None
}

/// `node --version`'s output, or `None` when it cannot be run, fails, or takes longer than
/// [`NODE_VERSION_TIMEOUT`] (then it is killed, by its PID).
fn node_version(node: &str) -> Option<String> {
    use std::io::Read;
    let mut child = std::process::Command::new(node)
        .arg("--version")
        // A NODE_OPTIONS Node cannot parse would fail the question, not answer it.
        .env_remove("NODE_OPTIONS")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + NODE_VERSION_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => break None,
        }
    };
    if !status.is_some_and(|s| s.success()) {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    let mut out = String::new();
    child
        .stdout
        .take()?
        .take(256)
        .read_to_string(&mut out)
        .ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_require_on_nodes_command_line_is_found_only_among_nodes_own_options() {
        for (line, module) in [
            (&["-r", "./otel.js", "app.js"][..], Some("./otel.js")),
            (
                &[
                    "--max-old-space-size=256",
                    "--require",
                    "dd-trace/init",
                    "app.js",
                ],
                Some("dd-trace/init"),
            ),
            (
                &["--import", "./x.mjs", "--require=apm", "app.js"],
                Some("apm"),
            ),
            (&["app.js", "-r", "not-node's"], None),
            (&["--", "app.js", "--require", "x"], None),
            (&["--unknown-with-value", "v", "-r", "x"], None),
            (&["app.js"], None),
        ] {
            assert_eq!(
                command_line_require(&args(line)).as_deref(),
                module,
                "{line:?}"
            );
        }
    }
}
