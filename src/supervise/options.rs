//! What `supervise` is told: the command line (`SuperviseArgs`), its validation, and the
//! `Settings` it turns into (with the toggle's socket bound). Every refusal here is a
//! `ConfigError`, which exits 2 before any child starts.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{parse_key_value, parse_positive_duration, ConfigError};
use crate::grant;
use crate::supervise::leader_instance::converge;
use crate::supervise::leader_instance::health::{self, HealthSpec};
use crate::supervise::leader_instance::port_map;
use crate::supervise::leader_instance::standby::spec::{self as standby, StandbySpec};
use crate::supervise::lease_bridge;
use crate::supervise::mode::{self, Backoff, OnChange, OnFollower};
use crate::supervise::settings::Settings;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Modes: the app is started with the supervisor's environment plus --follower-env (and \
--follower-args appended to the command) until a leader grant arrives, then restarted with \
--leader-env / --leader-args. A renewal (same mode, newer seq) only moves the expiry; it never \
restarts the app. When the leader grant expires without renewal the app is demoted at once.\n\n\
Pushes: POST the grant object to http://LISTEN/ ; 200 means it has fully taken effect (for a \
demotion: the old process group is gone) and carries the signed ack, 409 means it was older than \
the last object obeyed, 401 that its mac does not verify under the elector's token, 403 that it \
names another incarnation than the token, 400 that it is not a grant object or not one an \
elector can mean (such objects in the flag file are never obeyed, and demote until the elector \
writes again). GET /mode reports the current state as JSON.\n\n\
Leader instance: with --on-change=leader-instance the app runs with the follower environment \
the whole time (it serves, and no grant change restarts it); while leader a second instance of \
the same command runs beside it with --leader-env / --leader-args, started on promotion (acked \
then) and stopped on demotion or expiry (acked once its group is gone). --leader-port-map moves \
a Node leader instance's listening ports to loopback so both fit in one pod.\n\n\
Example (retrofit Passmower): supervise --on-change=leader-instance --leader-port-map='*=0' \
--leader-env NAMESPACE_SELECTOR=passmower \
--follower-env NAMESPACE_SELECTOR=passmower-elector_idle -- node src/app.js")]
pub struct SuperviseArgs {
    /// Flag file written by the elector on the shared volume; watched with inotify and re-read
    /// periodically. Missing or malformed means follower. The ack is kept in `<flag-file>.ack`.
    #[arg(
        long,
        env = "ELECTOR_FLAG_FILE",
        value_name = "PATH",
        default_value = "/var/run/passmower-elector/grant.json"
    )]
    pub flag_file: PathBuf,

    /// Loopback address for the toggle (POST a grant object, GET /mode). Must be a loopback IP.
    #[arg(
        long,
        env = "ELECTOR_LISTEN",
        value_name = "IP:PORT",
        default_value = "127.0.0.1:8082"
    )]
    pub listen: String,

    /// Environment variable set for the app in leader mode; repeatable. In ELECTOR_LEADER_ENV,
    /// separate several pairs with newlines. Every KEY needs a --follower-env KEY=… as well
    /// (an empty value is fine, except for NAMESPACE_SELECTOR), or the follower would inherit
    /// the container's own KEY. A KEY only --follower-env sets is the container's own value
    /// (or unset) in leader mode.
    #[arg(long, env = "ELECTOR_LEADER_ENV", value_name = "KEY=VALUE",
        value_parser = parse_key_value, value_delimiter = '\n')]
    pub leader_env: Vec<(String, String)>,

    /// Environment variable set for the app in follower mode; repeatable. In ELECTOR_FOLLOWER_ENV,
    /// separate several pairs with newlines. Passmower's NAMESPACE_SELECTOR must be one
    /// namespace name that no namespace has: empty (Passmower's own namespace) and values with
    /// `*` or `,` (patterns over every namespace) exit 2, as every follower would run operators.
    #[arg(long, env = "ELECTOR_FOLLOWER_ENV", value_name = "KEY=VALUE",
        value_parser = parse_key_value, value_delimiter = '\n')]
    pub follower_env: Vec<(String, String)>,

    /// Argument appended to the command in leader mode; repeatable (one argument each). Needs
    /// --follower-args too, and an option given as NAME=VALUE (e.g. --selector=x) needs a
    /// follower argument NAME=… (or NAME), or the follower would run with the app's default.
    #[arg(
        long,
        env = "ELECTOR_LEADER_ARGS",
        value_name = "ARG",
        allow_hyphen_values = true,
        value_delimiter = '\n'
    )]
    pub leader_args: Vec<String>,

    /// Argument appended to the command in follower mode; repeatable (one argument each).
    #[arg(
        long,
        env = "ELECTOR_FOLLOWER_ARGS",
        value_name = "ARG",
        allow_hyphen_values = true,
        value_delimiter = '\n'
    )]
    pub follower_args: Vec<String>,

    /// Time the app's process group gets between SIGTERM and SIGKILL, on a mode change and at
    /// shutdown; a leader whose grant lapsed is killed no later than this after the expiry. With
    /// --on-change=signal:, the time the app has to stop operator work after a demotion signal.
    /// Never longer than the elector's --kill-grace, which every grant announces: a longer value
    /// is replaced by the elector's (logged as an error), since the elector counts on the app
    /// having stopped within its own. `inject` sets both to the same value.
    #[arg(long, env = "ELECTOR_KILL_GRACE", value_name = "DURATION",
        default_value = "3s", value_parser = parse_positive_duration)]
    pub kill_grace: Duration,

    /// What runs while follower: `run` the app with the follower environment, or `stop` (nothing).
    #[arg(long, env = "ELECTOR_ON_FOLLOWER", value_enum, default_value = "run")]
    pub on_follower: OnFollower,

    /// How the app learns of a mode change: `restart` it with the new environment;
    /// `leader-instance`: keep it running with the follower environment (serving, never
    /// restarted because of the grant) and, while leader, run a second instance of the same
    /// command with the leader environment beside it (move its listening ports with
    /// --leader-port-map or --leader-env); `lease-bridge`: one process for both modes, for a
    /// Passmower that elects a leader itself (2.4 and later), with its election on and its
    /// Lease answered from the grant by a preload (never the API server); the mode is acked
    /// once the app's election has taken it in, a demotion not taken in within --kill-grace
    /// (at least 3s) kills it, and an app whose election does not read its Lease through the
    /// preload is refused (exit 2); or `signal:SIGNAME` for apps that toggle live,
    /// SIGNAME one of SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH (Node.js starts its debugger on
    /// SIGUSR1; other signals mean something else to the app or this supervisor). With a signal the app keeps the environment it was started with; it
    /// must read its mode elsewhere (the flag file, GET /mode), and it must stop operator work
    /// within --kill-grace of a demotion signal: the demotion is acked (and the Lease released)
    /// once that grace has passed. A crashed app is restarted with the current mode's
    /// environment.
    #[arg(long, env = "ELECTOR_ON_CHANGE", value_name = "restart|leader-instance|lease-bridge|signal:SIGNAME",
        default_value = "restart", value_parser = mode::parse_on_change)]
    pub on_change: OnChange,

    /// With --on-change=leader-instance, for a Node.js app (Node 18.18 or later; an older
    /// `node --version` is refused at start): a TCP listen() of the leader instance on port FROM
    /// goes to port TO on 127.0.0.1 instead (0: any free port); FROM `*` matches every port. A TO
    /// other than 0 may not be a FROM of the map (the serving instance listens there), another
    /// entry's TO, or the --listen port. Repeatable; in ELECTOR_LEADER_PORT_MAP,
    /// separate entries with newlines. Done by a preload module put first in the leader
    /// instance's NODE_OPTIONS, so the image stays as it is; the --require and --import modules
    /// already there (an APM or OpenTelemetry agent) load after it and are moved too.
    /// Passmower: `*=0` (its 9090 is fixed).
    #[arg(long, env = "ELECTOR_LEADER_PORT_MAP", value_name = "FROM=TO",
        value_parser = port_map::parse_entry, value_delimiter = '\n')]
    pub leader_port_map: Vec<(Option<u16>, u16)>,

    /// With --on-change=leader-instance and --leader-port-map (a Node.js app): while this pod
    /// does not lead, keep a standby leader instance started, with the follower environment,
    /// that imports the app's dependencies and then waits, running no app code, for the go; a
    /// promotion sends it the leader environment through a pipe only the supervisor holds
    /// instead of starting a new process, so Node's boot is out of the handover. EOF on that pipe
    /// (the supervisor died, or withdrew it) makes the standby exit without running the app. It
    /// costs one more Node process (its module cache) in every pod that does not lead. Not with
    /// --leader-args (the standby is started before the promotion).
    #[arg(long, env = "ELECTOR_LEADER_STANDBY")]
    pub leader_standby: bool,

    /// With --on-change=leader-instance: when the supervisor starts while its pod already leads
    /// (the app container restarted, the Lease kept), the serving instance starts once the leader
    /// instance listens (seen by the --leader-port-map preload), or this long after the leader
    /// instance at the latest, or at once when no leader instance runs any more. Two Node.js
    /// boots at once share the pod's CPU, and the leader's is the one the pod's operators wait
    /// for; the serving instance of a restarted container is not Ready before it boots either
    /// way. 0s to 10s; 0s starts both at once.
    #[arg(long, env = "ELECTOR_SERVING_HEAD_START", value_name = "DURATION",
        default_value = "3s", value_parser = crate::config::parse_duration)]
    pub serving_head_start: Duration,

    /// With --on-change=leader-instance: the leader instance's own health endpoint,
    /// `http://IP:PORT/PATH` on loopback (where --leader-port-map moved it; Passmower's /health
    /// on 9090, under `--leader-port-map=9090=19090`: http://127.0.0.1:19090/health). The
    /// kubelet's probes reach only the serving instance; this is asked every
    /// --leader-health-period, and --leader-health-failures answers in a row that are not 2xx
    /// within --leader-health-timeout restart the leader instance like a crash: with backoff,
    /// counted as a failed leader start unless it had answered healthy for
    /// --restart-backoff-reset, so the elector steps down after --max-leader-failures. Unset:
    /// the leader instance is judged by its process alone.
    #[arg(long, env = "ELECTOR_LEADER_HEALTH_URL", value_name = "URL")]
    pub leader_health_url: Option<String>,

    /// Between two probes of --leader-health-url (and before the first after a start): 1s to 5m.
    #[arg(long, env = "ELECTOR_LEADER_HEALTH_PERIOD", value_name = "DURATION",
        default_value = "10s", value_parser = parse_positive_duration)]
    pub leader_health_period: Duration,

    /// The longest one probe of --leader-health-url may take, connecting included: 100ms to 5m.
    /// Passmower's /health writes to Redis and lists from the API server.
    #[arg(long, env = "ELECTOR_LEADER_HEALTH_TIMEOUT", value_name = "DURATION",
        default_value = "10s", value_parser = parse_positive_duration)]
    pub leader_health_timeout: Duration,

    /// Failed probes of --leader-health-url in a row that restart the leader instance: 1 to 20.
    #[arg(
        long,
        env = "ELECTOR_LEADER_HEALTH_FAILURES",
        value_name = "N",
        default_value = "3"
    )]
    pub leader_health_failures: u32,

    /// First delay before restarting an app that exited on its own; doubles on each exit in a row.
    /// At least 100ms.
    #[arg(long, env = "ELECTOR_RESTART_BACKOFF_INITIAL", value_name = "DURATION",
        default_value = "200ms", value_parser = parse_positive_duration)]
    pub restart_backoff_initial: Duration,

    /// Cap on the restart delay.
    #[arg(long, env = "ELECTOR_RESTART_BACKOFF_MAX", value_name = "DURATION",
        default_value = "30s", value_parser = parse_positive_duration)]
    pub restart_backoff_max: Duration,

    /// An app that ran this long counts as stable: its next exit restarts after the initial delay.
    /// At least 1s.
    #[arg(long, env = "ELECTOR_RESTART_BACKOFF_RESET", value_name = "DURATION",
        default_value = "10s", value_parser = parse_positive_duration)]
    pub restart_backoff_reset: Duration,

    /// How often the flag file is re-read even without an inotify event: 10ms to 500ms. Without
    /// a toggle and without inotify a demotion is noticed up to this late, and the elector's
    /// no-ack hand-over wait covers only half its 1s margin for that.
    #[arg(long, env = "ELECTOR_REREAD_INTERVAL", value_name = "DURATION",
        default_value = "250ms", value_parser = parse_positive_duration)]
    pub reread_interval: Duration,

    /// UID the elector container runs as: besides this process's own UID, the only owner the
    /// token file (`<flag-file>.token`) may have. The image's default user is 65532.
    #[arg(
        long,
        env = "ELECTOR_ELECTOR_UID",
        value_name = "UID",
        default_value = "65532"
    )]
    pub elector_uid: u32,

    /// Exit with the app's status when it exits on its own, instead of restarting it.
    #[arg(long, env = "ELECTOR_EXIT_WITH_CHILD")]
    pub exit_with_child: bool,

    /// For Passmower: before each leader start, find the OIDCClients this Deployment's operator
    /// claimed (`status.instance` is `<namespace>-$DEPLOYMENT_NAME`, in the leader's
    /// NAMESPACE_SELECTOR) whose client Secret is missing, log each, record a Warning Event on
    /// it, and remove its claim so the starting operator claims it again and creates the
    /// Secret (it skips clients already in Redis otherwise). Uses the app's in-cluster
    /// ServiceAccount, so it passes the write fence only in the pod that holds the Lease; gives
    /// up after 10s and starts the leader anyway. Needs --on-change=leader-instance or restart.
    #[arg(long, env = "ELECTOR_CONVERGE_OIDC_CLIENTS")]
    pub converge_oidc_clients: bool,

    /// The app command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The shortest `--reread-interval`: the re-read is a safety net under inotify and the toggle,
/// and each one opens and parses the flag file; at 10ms that is 100 reads a second, still
/// negligible, while shorter only burns CPU (at 1ns the loop spins a core) for no gain, since a
/// demotion pushed to the toggle or seen by inotify arrives at once anyway.
pub const MIN_REREAD: Duration = Duration::from_millis(10);

/// The longest `--serving-head-start`: the serving instance of a restarted leader pod is held
/// back only while the leader instance boots (about a second on two busy cores); more only keeps
/// the pod out of its Service longer.
pub const MAX_SERVING_HEAD_START: Duration = Duration::from_secs(10);

/// The shortest `--restart-backoff-initial` (and so `-max`, which may not be shorter): it bounds
/// how often a crash-looping app is started again, at most 10 times a second here. Below that
/// each start of a real app (a Node.js process, its connections to Redis and the API server)
/// costs more than the delay, and a restart storm starves the pod, the elector sidecar with it.
pub const MIN_RESTART_BACKOFF: Duration = Duration::from_millis(100);

/// The shortest `--restart-backoff-reset`: a run shorter than a second is a failed start, not a
/// stable run. A shorter value forgives every crash, so the delay never grows past the initial
/// one and a leader that fails at once is never counted as failing (the elector steps down only
/// after `--max-leader-failures` counted failures).
pub const MIN_RESTART_BACKOFF_RESET: Duration = Duration::from_secs(1);

/// Everything checked before any child starts; an error here exits 2.
pub struct Prepared {
    pub settings: Settings,
    pub flag_file: PathBuf,
    pub reread: Duration,
    pub elector_uid: u32,
    /// The toggle's socket, bound here so a port in use is refused before any child starts.
    pub listener: TcpListener,
}

/// The longest `--reread-interval`: half the elector's minimum margin, the other half being left
/// for scheduling. Without a toggle and without inotify a demotion is noticed up to one interval
/// after it was written, and the elector releases without an ack K + margin after writing it.
pub const MAX_REREAD: Duration = Duration::from_millis(500);

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

/// Passmower's namespace variable, which its operators filter by and its HTTP side ignores.
pub const SELECTOR_VAR: &str = "NAMESPACE_SELECTOR";

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

/// The promotion check of `--converge-oidc-clients`, set up from what the leader instance's
/// environment will be: `--leader-env` over the supervisor's own.
fn converge_settings(
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

/// `--leader-standby`'s start and go, from the follower environment and the leader instance's
/// (its preloads included); refused without a Node leader instance to warm (leader-instance with
/// a port map, whose preload the standby's follows) and with `--leader-args`, which would be in
/// the standby's command line before any promotion.
fn standby_settings(
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
fn health_settings(args: &SuperviseArgs) -> Result<Option<HealthSpec>, ConfigError> {
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

/// The leader's environment, with `--leader-port-map`'s preload for the leader instance; refuses
/// combinations that cannot work: the leader instance with `--on-follower=stop` (it would serve
/// nothing while follower and serve twice while leader), a port map without it, and a map that
/// moves a listener onto the toggle's own `listen` address.
fn leader_instance_env(
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
