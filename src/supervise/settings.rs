//! `Settings`: the validated configuration of `supervise`, read by the loop and by both
//! instances. Nothing here checks or parses; that is done before it is built.

use std::path::PathBuf;
use std::time::Duration;

use crate::supervise::leader_instance::converge::Converge;
use crate::supervise::leader_instance::health::HealthSpec;
use crate::supervise::leader_instance::standby::spec::StandbySpec;
use crate::supervise::mode::{Backoff, OnChange, OnFollower};

/// What the supervisor was configured to do; see the flags in `SuperviseArgs`.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The app command and its arguments.
    pub command: Vec<String>,
    /// Environment overrides in leader mode.
    pub leader_env: Vec<(String, String)>,
    /// Environment overrides in follower mode.
    pub follower_env: Vec<(String, String)>,
    /// Arguments appended to the command in leader mode.
    pub leader_args: Vec<String>,
    /// Arguments appended to the command in follower mode.
    pub follower_args: Vec<String>,
    /// Time between SIGTERM and SIGKILL to the group (never more than the elector's K, which
    /// every grant announces).
    pub kill_grace: Duration,
    pub on_follower: OnFollower,
    pub on_change: OnChange,
    /// The flag file's `.ack` companion.
    pub ack_file: PathBuf,
    /// How often a failed start-up write of the ack file is retried (the flag file's re-read).
    pub ack_retry: Duration,
    /// Exit with the child's status when it exits on its own, instead of restarting it.
    pub exit_with_child: bool,
    /// `--serving-head-start`: how long the serving instance waits at most after a leader
    /// instance started at the supervisor's own start.
    pub serving_head_start: Duration,
    /// The leader instance runs the port map's preload, which says when it first listens (see
    /// `listening`): the serving instance's wait ends then.
    pub leader_says_listening: bool,
    pub backoff: Backoff,
    /// `--converge-oidc-clients`: the check run before each leader start.
    pub converge: Option<Converge>,
    /// `--leader-standby`: how the warm standby of the leader instance is started and told to go.
    pub standby: Option<StandbySpec>,
    /// `--leader-health-url` and its timings: how the leader instance is probed.
    pub health: Option<HealthSpec>,
    /// `--on-change=lease-bridge`: the one process's environment overrides (the follower's,
    /// upstream's election on, the bridge's preload); its socket is added per start.
    pub bridge: Option<Vec<(String, String)>>,
}
