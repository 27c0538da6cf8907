//! `supervise`: PID 1 of the app container; runs the app in leader or follower mode per the grant.
//!
//! The supervisor follows the grant on both channels the elector keeps in step (the flag file and
//! pushes to its loopback toggle), obeys only objects newer than the last one obeyed, demotes on
//! its own when a leader grant lapses, and acks an object only once it has fully taken effect: for
//! a demotion, once the old child and its whole process group are gone.
//!
//! What an operator can rely on, and where it stops:
//! - The ack file (`<flag-file>.ack`) holds the last object obeyed with the mode actually in
//!   effect: a leader grant that lapsed is acked as `follower` with its order, and `stopped`
//!   (with the last order) is written once the child's group is gone at exit.
//! - At start, before any child runs, the ack file is reset to `follower` with order 0/0, so a
//!   `stopped` left by a previous supervisor (the volume outlives a container restart) cannot ack
//!   a demotion for this one. While that write fails, the app runs only in follower mode.
//! - A flag file that disappears or turns unreadable after start demotes (fail closed) until a
//!   newer object arrives; the elector renews often enough for that to be short.
//! - A push that was obeyed but overtaken before it took effect (a newer object changed the mode,
//!   or the grant lapsed) gets 409 `superseded`; retries of the last object get 200.
//! - "Gone" means no process left in the child's process group. A process that moves itself to
//!   another group or session (`setsid` in a grandchild) escapes the stop; apps that daemonize
//!   that way need `--on-follower=stop` and their own cleanup.
//! - With `--on-change=signal:SIG`, a promotion is acked once the signal is delivered; a demotion
//!   (a follower object or a lapsed grant) only once the kill grace has passed since the signal,
//!   because the elector releases the Lease on that ack. The app must stop operator work within
//!   `--kill-grace` of the signal; nothing checks that it did. It keeps the environment it
//!   started with.
//! - The child runs in its own process group, so it is not the terminal's foreground group; this
//!   is meant for containers, where there is no terminal.
//! - Only objects tied to the elector are obeyed: a MAC under the key of the elector's token file
//!   (`<flag-file>.token`, owned by this UID or `--elector-uid`, mode 0600) for the incarnation
//!   it names, a leader expiry within the renew deadline the grant announces. Without a readable
//!   token the app runs only as follower. The kill grace in force is never longer than the K the
//!   elector announces.
//! - Every key of `--leader-env` must be given a follower value too, or the follower would run
//!   with whatever the container sets for it (see [`options::check_mode_pairs`]); and a follower
//!   `NAMESPACE_SELECTOR` must be one plain name, never empty, `*` or a list (see
//!   [`options::check_follower_selector`]).
//! - With `--on-change=leader-instance` two process groups run: the serving instance (follower
//!   environment, from start to shutdown, restarted only when it exits on its own) and, while
//!   leader, the leader instance, which is the grant-following child above with everything said
//!   of it (acked when started, demoted by killing its group, capped at expiry + K, its exits
//!   counted as failed leader starts). Signals go to both; at shutdown the supervisor exits once
//!   both groups are gone, with the serving instance's status. `--leader-port-map` moves a Node
//!   leader instance's listeners to loopback (see `leader_instance/port_map.rs` for why that
//!   way).
//! - With `--leader-standby` a third process group runs while the pod does not lead: the
//!   leader instance started ahead, with the follower environment, its dependencies imported,
//!   blocked before the app's first line until the go (see `leader_instance/standby.rs`). A
//!   promotion gives it the go instead of starting a process; it exits on EOF when the
//!   supervisor is gone.
//!
//! This file holds the wiring of the tasks (the runtime and the exit codes are
//! [`crate::runtime`]'s); the flags and their checks are in `options.rs`, the loop in
//! `supervisor.rs` (its lease-bridge and leader-instance parts in `supervisor/`), what it obeys
//! and acks in `grant/`, one process group's life in `process/`, and what the leader-instance
//! mode needs in `leader_instance/` (docs/design/layout.md has the rest).

mod args;
mod grant;
mod leader_instance;
mod lease_bridge;
pub mod mode;
mod options;
mod process;
mod settings;
mod status;
mod supervisor;

/// The promotion check, also run by the tests against a real API server.
pub use leader_instance::converge;

use std::process::ExitCode;

use tokio::sync::{mpsc, watch};

pub use args::SuperviseArgs;
use grant::{follow, toggle, trust};
use process::child;
use supervisor::Supervisor;

/// Runs the role: a configuration error exits 2 (with the flag named) before anything starts; a
/// failure to start the runtime or the supervisor's own machinery exits 1; otherwise the exit
/// code is the supervisor's (the app's, at shutdown).
pub fn main(args: SuperviseArgs) -> ExitCode {
    crate::runtime::run("supervise", options::prepare(args), |p| async {
        Ok(run(p).await.into())
    })
}

async fn run(p: options::Prepared) -> u8 {
    child::become_subreaper();
    // Handlers go in before the first child exists, so no SIGCHLD or forwarded signal is lost.
    let signals = match signal_hook_tokio::Signals::new(supervisor::SIGNALS) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("passmower-elector supervise: cannot install signal handlers: {e}");
            return 1;
        }
    };
    let listener = match tokio::net::TcpListener::from_std(p.listener) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("passmower-elector supervise: cannot use the toggle listener: {e}");
            return 1;
        }
    };
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "toggle listening");
    }
    let mut trust = trust::Trust::new(&p.flag_file, p.elector_uid);
    trust.reload();
    let (status_tx, status_rx) = watch::channel(status::Status::default());
    let (push_tx, push_rx) = mpsc::channel(16);
    let (obs_tx, obs_rx) = mpsc::unbounded_channel();
    let mut supervisor = Supervisor::new(p.settings, trust, status_tx);
    // The ack file before the flag file: the volume outlives a container restart, and a previous
    // supervisor's `stopped` there would ack a demotion written after our first reading, while we
    // started a leader from that reading.
    supervisor.write_startup_ack();
    let initial = follow::Reading::take(&p.flag_file);
    supervisor.adopt(initial.observation());
    tokio::spawn(toggle::serve(listener, push_tx, status_rx));
    tokio::spawn(follow::follow(p.flag_file, p.reread, initial, obs_tx));
    supervisor.run(signals, obs_rx, push_rx).await
}
