//! What `GET /mode` reports: the supervisor's state as the loop publishes it, with the serving
//! instance's and the promotion checks' parts. Plain data; the loop fills it, the toggle serves it.

use serde::Serialize;

/// What `GET /mode` reports.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Status {
    /// The mode in effect: `leader`, `follower`, or `stopped` while exiting.
    pub mode: String,
    /// The mode the running child was started in (or switched to by signal).
    pub child_mode: Option<String>,
    /// The epoch of the last object obeyed (fencing token).
    pub epoch: u64,
    /// The Lease holder named by the last object obeyed.
    pub holder: String,
    pub child_pid: Option<i32>,
    /// Restarts after the child exited on its own.
    pub restarts: u64,
    /// Whether a stop, a demotion by signal, or (`lease-bridge`) a grant the app's election has
    /// not taken in yet is in progress (pushes wait for it before they are answered).
    pub transitioning: bool,
    /// CLOCK_BOOTTIME nanoseconds at which the leader grant lapses; 0 when not leader.
    pub expires_boottime_ns: u64,
    /// The same expiry as RFC 3339, for humans.
    pub expires_at: Option<String>,
    /// Order of the last object obeyed.
    pub incarnation: u64,
    pub seq: u64,
    /// The kill grace in force: `--kill-grace`, or the elector's if that is shorter.
    pub kill_grace_ns: u64,
    /// Leader children in a row that exited on their own before `--restart-backoff-reset`.
    pub leader_start_failures: u64,
    /// Leader-mode starts since the supervisor started (the leader instance with
    /// `--on-change=leader-instance`).
    pub leader_starts: u64,
    /// Leader runs that ended on their own, or could not start, since the supervisor started.
    pub leader_crashes: u64,
    /// Leader instances restarted because `--leader-health-url` failed too often in a row.
    pub leader_unhealthy: u64,
    /// Failed probes of `--leader-health-url` since the supervisor started.
    pub leader_probe_failures: u64,
    /// With `--leader-health-url`: failed probes in a row of the leader instance running now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_health_failing: Option<u32>,
    /// `--on-change` as configured: `restart`, `signal:SIG` or `leader-instance`.
    pub on_change: String,
    /// With `--on-change=leader-instance`, the instance that serves whatever the grant says
    /// (the `child_*` fields then describe the leader instance, absent while follower).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving: Option<ServingStatus>,
    /// With `--leader-standby`, the warm standby of the leader instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standby: Option<StandbyStatus>,
    /// With `--converge-oidc-clients`, what the promotion checks found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub converge: Option<ConvergeStatus>,
}

/// What `GET /mode` says about the promotion checks of `--converge-oidc-clients`.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ConvergeStatus {
    /// Checks completed (one before each leader start).
    pub checks: u64,
    /// Claimed OIDCClients found without their client Secret, over all checks.
    pub missing_client_secrets: u64,
    /// Of those, the ones handed back to the starting operator.
    pub released_clients: u64,
    /// Checks that failed or timed out (the leader instance started anyway).
    pub failed_checks: u64,
}

/// What `GET /mode` says about the serving instance.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ServingStatus {
    /// Always `follower`: it runs with the follower environment.
    pub mode: String,
    pub pid: Option<i32>,
    /// Restarts after it exited on its own.
    pub restarts: u64,
}

/// What `GET /mode` says about the standby of `--leader-standby`.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct StandbyStatus {
    /// A standby waits for the go: the next promotion starts no new process.
    pub ready: bool,
    /// The waiting standby's PID.
    pub pid: Option<i32>,
    /// Standbys started so far.
    pub spawned: u64,
    /// Promotions that gave a waiting standby the go.
    pub used: u64,
    /// Promotions that found none waiting (or could not send the go) and started the leader
    /// instance afresh.
    pub missed: u64,
}
