//! The command line of `supervise` (`SuperviseArgs`) and the ranges its durations must fall
//! in; `options.rs` checks them and turns them into the `Settings`.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{parse_key_value, parse_positive_duration};
use crate::supervise::leader_instance::port_map;
use crate::supervise::mode::{self, OnChange, OnFollower};

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

/// The longest `--reread-interval`: half the elector's minimum margin, the other half being left
/// for scheduling. Without a toggle and without inotify a demotion is noticed up to one interval
/// after it was written, and the elector releases without an ack K + margin after writing it.
pub const MAX_REREAD: Duration = Duration::from_millis(500);
