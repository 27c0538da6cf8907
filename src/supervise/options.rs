//! What `supervise` is told, checked: the command line (`SuperviseArgs`, in `args.rs`) turned
//! into the `Settings` (with the toggle's socket bound); the leader instance's own checks are
//! `leader_instance/options.rs`. Every refusal here is a `ConfigError`, which exits 2 before
//! any child starts.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::ConfigError;
use crate::grant;
use crate::supervise::args::{
    SuperviseArgs, MAX_REREAD, MAX_SERVING_HEAD_START, MIN_REREAD, MIN_RESTART_BACKOFF,
    MIN_RESTART_BACKOFF_RESET,
};
use crate::supervise::leader_instance::options::{
    converge_settings, health_settings, leader_instance_env, standby_settings,
};
use crate::supervise::lease_bridge;
use crate::supervise::mode::{Backoff, OnChange, OnFollower};
use crate::supervise::settings::Settings;
use crate::wire::SELECTOR_VAR;

/// Everything checked before any child starts; an error here exits 2.
pub struct Prepared {
    pub settings: Settings,
    pub flag_file: PathBuf,
    pub reread: Duration,
    pub elector_uid: u32,
    /// The toggle's socket, bound here so a port in use is refused before any child starts.
    pub listener: TcpListener,
}

/// The follower must never run with a leader setting it did not override: a `--leader-env` key
/// without a `--follower-env` value is inherited from the container (where the real selector
/// often is), and a `--leader-args` option without a follower counterpart falls back to the
/// app's default. Required: a follower value for every leader-env key; `--follower-args` when
/// `--leader-args` is given; a follower `NAME=…` (or `NAME`) for every leader `NAME=VALUE` option.
pub fn check_mode_pairs(
    leader_env: &[(String, String)],
    follower_env: &[(String, String)],
    leader_args: &[String],
    follower_args: &[String],
) -> Result<(), ConfigError> {
    for (key, value) in leader_env {
        if !follower_env.iter().any(|(k, _)| k == key) {
            return Err(ConfigError::new(
                "--leader-env",
                format!("{key}={value}"),
                format!(
                    "{key} has no follower value, so the follower would inherit the container's \
                     own {key}; add --follower-env {key}=<follower value> (an empty value is \
                     allowed, except for {SELECTOR_VAR})"
                ),
            ));
        }
    }
    if let Some(first) = leader_args.first() {
        if follower_args.is_empty() {
            return Err(ConfigError::new(
                "--leader-args",
                first,
                "given without --follower-args, so the follower would run with the app's \
                 defaults for what the leader sets; add the follower's counterpart with \
                 --follower-args",
            ));
        }
    }
    for arg in leader_args {
        let Some((name, _)) = arg.split_once('=').filter(|(n, _)| n.starts_with('-')) else {
            continue;
        };
        let countered = follower_args.iter().any(|f| {
            f == name
                || f.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('='))
        });
        if !countered {
            return Err(ConfigError::new(
                "--leader-args",
                arg,
                format!(
                    "option {name} has no follower value, so the follower would run with the \
                     app's default for it; add --follower-args {name}=<follower value>"
                ),
            ));
        }
    }
    Ok(())
}

/// A follower `NAMESPACE_SELECTOR` must select nothing, and Passmower reads an empty one as its
/// pod's own namespace and one with `*` or `,` as patterns over every namespace: a follower so
/// configured runs operators beside the leader. Only one plain name keeps it idle (inject's
/// default names one no namespace can have). Every occurrence is checked, not only the last.
pub fn check_follower_selector(follower_env: &[(String, String)]) -> Result<(), ConfigError> {
    for (key, value) in follower_env.iter().filter(|(k, _)| k == SELECTOR_VAR) {
        let why = if value.trim().is_empty() {
            "is empty, which Passmower reads as its pod's own namespace"
        } else if value.contains('*') || value.contains(',') {
            "holds `*` or `,`, which Passmower reads as patterns over every namespace"
        } else {
            continue;
        };
        return Err(ConfigError::new(
            "--follower-env",
            format!("{key}={value}"),
            format!(
                "{key} {why}, so every follower would run operators; allowed: one namespace \
                 name that no namespace has, e.g. passmower-elector_idle"
            ),
        ));
    }
    Ok(())
}

/// Checks the flags and binds the toggle's socket; every error here is a configuration error.
pub fn prepare(args: SuperviseArgs) -> Result<Prepared, ConfigError> {
    if args.command.is_empty() {
        return Err(ConfigError::new(
            "-- CMD",
            "",
            "missing command; usage: passmower-elector supervise [flags] -- CMD [ARGS...]",
        ));
    }
    let addr: SocketAddr = args.listen.parse().map_err(|_| {
        ConfigError::new(
            "--listen",
            &args.listen,
            "expected a loopback IP:PORT such as 127.0.0.1:8082 or [::1]:8082",
        )
    })?;
    if !addr.ip().is_loopback() {
        return Err(ConfigError::new(
            "--listen",
            &args.listen,
            "the toggle must listen on loopback only (127.0.0.0/8 or ::1), e.g. 127.0.0.1:8082",
        ));
    }
    check_flag_file(&args.flag_file)?;
    check_mode_pairs(
        &args.leader_env,
        &args.follower_env,
        &args.leader_args,
        &args.follower_args,
    )?;
    check_follower_selector(&args.follower_env)?;
    check_durations(&args)?;
    let leader_env = leader_instance_env(&args, addr)?;
    let converge = converge_settings(&args, &leader_env)?;
    let standby = standby_settings(&args, &leader_env)?;
    let health = health_settings(&args)?;
    let bridge = bridge_settings(&args, &leader_env)?;
    let on_follower = match args.on_change {
        // The serving instance is what runs as follower; the grant-following child (the leader
        // instance) runs only while leader.
        OnChange::LeaderInstance => OnFollower::Stop,
        _ => args.on_follower,
    };
    let listener = TcpListener::bind(addr).and_then(|l| {
        l.set_nonblocking(true)?;
        Ok(l)
    });
    let listener = listener.map_err(|e| {
        ConfigError::new(
            "--listen",
            &args.listen,
            format!("cannot listen there: {e}; choose a free loopback port"),
        )
    })?;
    Ok(Prepared {
        settings: Settings {
            command: args.command,
            leader_env,
            follower_env: args.follower_env,
            leader_args: args.leader_args,
            follower_args: args.follower_args,
            kill_grace: args.kill_grace,
            on_follower,
            on_change: args.on_change,
            ack_file: grant::ack_path(&args.flag_file),
            ack_retry: args.reread_interval,
            exit_with_child: args.exit_with_child,
            serving_head_start: args.serving_head_start,
            leader_says_listening: !args.leader_port_map.is_empty(),
            backoff: Backoff::new(
                args.restart_backoff_initial,
                args.restart_backoff_max,
                args.restart_backoff_reset,
            ),
            converge,
            standby,
            health,
            bridge,
        },
        flag_file: args.flag_file,
        reread: args.reread_interval,
        elector_uid: args.elector_uid,
        listener,
    })
}

/// `--on-change=lease-bridge`'s process environment (see `lease_bridge.rs`); refuses what one
/// process for both modes cannot do: run nothing while follower, change its command line with
/// the mode, or take a demotion in within a kill grace shorter than two of its election's ticks.
fn bridge_settings(
    args: &SuperviseArgs,
    leader_env: &[(String, String)],
) -> Result<Option<Vec<(String, String)>>, ConfigError> {
    if args.on_change != OnChange::LeaseBridge {
        return Ok(None);
    }
    if args.on_follower == OnFollower::Stop {
        return Err(ConfigError::new(
            "--on-follower",
            "stop",
            "cannot be combined with --on-change=lease-bridge, whose one process runs (and \
             serves) in both modes; for an app that must run only while leader use \
             --on-change=restart --on-follower=stop",
        ));
    }
    if args.leader_args != args.follower_args {
        let shown = args.leader_args.first().or(args.follower_args.first());
        return Err(ConfigError::new(
            if args.leader_args.is_empty() {
                "--follower-args"
            } else {
                "--leader-args"
            },
            shown.map(String::as_str).unwrap_or_default(),
            "cannot differ between the modes with --on-change=lease-bridge: its one process is \
             never restarted for a mode change, so its command line cannot follow one; give the \
             difference as --leader-env/--follower-env",
        ));
    }
    if args.kill_grace < lease_bridge::MIN_KILL_GRACE {
        return Err(ConfigError::new(
            "--kill-grace",
            crate::config::human(args.kill_grace),
            format!(
                "must be at least {} with --on-change=lease-bridge: the app's election takes a \
                 demotion in at its second Lease read after it, up to two of its 1s ticks and \
                 its callbacks later, and a shorter grace would kill it on every demotion",
                crate::config::human(lease_bridge::MIN_KILL_GRACE)
            ),
        ));
    }
    let inherited = std::env::var("NODE_OPTIONS").ok();
    Ok(Some(lease_bridge::spawn_env(
        leader_env,
        &args.follower_env,
        inherited.as_deref(),
    )))
}

/// The re-read interval and the restart backoff within their ranges (see [`MIN_REREAD`],
/// [`MAX_REREAD`], [`MIN_RESTART_BACKOFF`], [`MIN_RESTART_BACKOFF_RESET`]).
fn check_durations(args: &SuperviseArgs) -> Result<(), ConfigError> {
    use crate::config::human;
    let reread = args.reread_interval;
    if !(MIN_REREAD..=MAX_REREAD).contains(&reread) {
        return Err(ConfigError::new(
            "--reread-interval",
            human(reread),
            format!(
                "must be from {} to {}: shorter only burns CPU (inotify and the toggle deliver \
                 changes at once), longer and a demotion noticed only by the re-read (no toggle, \
                 no inotify) could come later than the elector's 1s safety margin covers",
                human(MIN_REREAD),
                human(MAX_REREAD)
            ),
        ));
    }
    if args.serving_head_start > MAX_SERVING_HEAD_START {
        return Err(ConfigError::new(
            "--serving-head-start",
            human(args.serving_head_start),
            format!(
                "must be from 0s to {}: it only has to cover the leader instance's boot, and \
                 the restarted pod serves no request until its serving instance starts",
                human(MAX_SERVING_HEAD_START)
            ),
        ));
    }
    if args.restart_backoff_initial < MIN_RESTART_BACKOFF {
        return Err(ConfigError::new(
            "--restart-backoff-initial",
            human(args.restart_backoff_initial),
            format!(
                "must be at least {}, or a crash-looping app is restarted in a storm that \
                 starves the pod",
                human(MIN_RESTART_BACKOFF)
            ),
        ));
    }
    if args.restart_backoff_max < args.restart_backoff_initial {
        return Err(ConfigError::new(
            "--restart-backoff-max",
            human(args.restart_backoff_max),
            format!(
                "must be at least --restart-backoff-initial ({})",
                human(args.restart_backoff_initial)
            ),
        ));
    }
    if args.restart_backoff_reset < MIN_RESTART_BACKOFF_RESET {
        return Err(ConfigError::new(
            "--restart-backoff-reset",
            human(args.restart_backoff_reset),
            format!(
                "must be at least {}: a shorter run is a failed start, and counting it as stable \
                 would keep the restart delay at its initial value and hide a crash-looping leader \
                 from the elector",
                human(MIN_RESTART_BACKOFF_RESET)
            ),
        ));
    }
    Ok(())
}

/// The flag file may not exist yet, but its directory must: that is where inotify watches and
/// where the ack file goes.
fn check_flag_file(path: &Path) -> Result<(), ConfigError> {
    let shown = path.display().to_string();
    if path.file_name().is_none() {
        return Err(ConfigError::new(
            "--flag-file",
            shown,
            "expected a file path such as /var/run/passmower-elector/grant.json",
        ));
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(ConfigError::new(
            "--flag-file",
            shown,
            format!(
                "directory {} does not exist; it must be the volume shared with the elector",
                dir.display()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn every_leader_env_key_needs_a_follower_value() {
        let leader = env(&[("NAMESPACE_SELECTOR", "passmower"), ("X", "1")]);
        let e = check_mode_pairs(&leader, &env(&[("X", "")]), &[], &[]).unwrap_err();
        assert_eq!(e.flag, "--leader-env");
        assert!(e.reason.contains("NAMESPACE_SELECTOR"), "{e}");
        let follower = env(&[("NAMESPACE_SELECTOR", "idle"), ("X", "")]);
        assert!(check_mode_pairs(&leader, &follower, &[], &[]).is_ok());
        // Follower-only keys are fine: the leader then runs with the container's value.
        assert!(check_mode_pairs(&[], &follower, &[], &[]).is_ok());
    }

    #[test]
    fn leader_args_need_follower_args_and_valued_options_their_counterpart() {
        let e = check_mode_pairs(&[], &[], &args(&["--operators"]), &[]).unwrap_err();
        assert_eq!(e.flag, "--leader-args");
        assert!(check_mode_pairs(
            &[],
            &[],
            &args(&["--operators"]),
            &args(&["--no-operators"])
        )
        .is_ok());
        let leader = args(&["--selector=real", "--verbose"]);
        let e = check_mode_pairs(&[], &[], &leader, &args(&["--quiet"])).unwrap_err();
        assert!(e.reason.contains("--selector"), "{e}");
        assert!(check_mode_pairs(&[], &[], &leader, &args(&["--selector=idle"])).is_ok());
        assert!(check_mode_pairs(&[], &[], &leader, &args(&["--selector", "idle"])).is_ok());
        // A prefix of another option's name is not its counterpart.
        let e = check_mode_pairs(&[], &[], &leader, &args(&["--selector-x=1"])).unwrap_err();
        assert!(e.reason.contains("--selector"), "{e}");
        // A positional NAME=VALUE (not an option) needs nothing.
        assert!(check_mode_pairs(&[], &[], &args(&["a=b"]), &args(&["c"])).is_ok());
    }
}
