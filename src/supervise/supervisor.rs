//! The supervisor's event loop: one task owns the child and the last obeyed object (its
//! [`Obedience`]), and turns signals, flag-file readings, pushes and deadlines into starts, stops
//! and acks.
//!
//! Everything that changes the child happens here, in order, so there is never a second writer
//! to reason about. A stop is a state, not an `await`: while the old group dies the loop keeps
//! reaping, forwarding signals, answering `GET /mode` and queueing pushes.

mod bridge;
mod leader_instance;

use std::time::Duration;

use futures_util::StreamExt;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use signal_hook::consts::signal::{SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook_tokio::Signals;
use tokio::sync::{mpsc, oneshot, watch};

use bridge::Bridged;
use leader_instance::{ConvergeState, Converged};

use crate::clock::{self, BootInstant};
use crate::grant::{Grant, Mode, Order};
use crate::supervise::grant::follow::Observation;
use crate::supervise::grant::obedience::{Channel, LeaderCounts, Obedience, Offer};
use crate::supervise::grant::toggle::{Push, Reply};
use crate::supervise::grant::trust::Trust;
use crate::supervise::leader_instance::health::{self, LeaderHealth};
use crate::supervise::leader_instance::serving::Serving;
use crate::supervise::leader_instance::standby::Standby;
use crate::supervise::lease_bridge::Said;
use crate::supervise::mode::{self, OnChange, SignalDemotion, Step};
use crate::supervise::process::child::{self, Exit};
use crate::supervise::process::instance::{self, Ended, Instance};
use crate::supervise::settings::Settings;
use crate::supervise::status::Status;

/// Signals the supervisor handles; all but SIGCHLD are forwarded to the child.
pub const SIGNALS: [i32; 7] = [SIGCHLD, SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2];

/// An answer owed to a push; given once the loop has settled.
#[derive(Debug)]
struct Pending {
    /// The mode the object asked for when it arrived (an expired leader grant asks for follower).
    requested: Mode,
    order: Order,
    reply: oneshot::Sender<Reply>,
}

/// Why the supervisor is exiting.
#[derive(Debug, Default)]
struct Shutdown {
    /// The code to exit with, once known.
    exit_code: Option<u8>,
}

#[must_use = "the supervisor does nothing until `run` is awaited"]
pub struct Supervisor {
    settings: Settings,
    /// What has been obeyed and acked, and the mode owed from it.
    obedience: Obedience,
    /// The grant-following child: the app in `restart` and `signal:` modes, the leader instance
    /// with `--on-change=leader-instance`.
    child: Instance,
    /// A crashed child's mode and the time before which it must not be restarted.
    crash_hold: Option<(Mode, BootInstant)>,
    restarts: u64,
    pending: Vec<Pending>,
    shutdown: Option<Shutdown>,
    /// Leader children in a row that exited on their own before `--restart-backoff-reset`;
    /// reported in the ack so the elector can step down for a leader that cannot run.
    leader_start_failures: u64,
    /// Leader-mode starts, and leader runs that ended on their own or could not start, since
    /// this supervisor started: reported in every ack and `GET /mode` (for the elector's
    /// metrics).
    leader_starts: u64,
    leader_crashes: u64,
    /// With `--on-change=leader-instance`: the instance that serves whatever the grant says.
    serving: Option<Serving>,
    /// With `--leader-standby`: the leader instance started ahead, waiting for the go.
    standby: Option<Standby>,
    converge: ConvergeState,
    converged_tx: mpsc::UnboundedSender<Converged>,
    converged_rx: Option<mpsc::UnboundedReceiver<Converged>>,
    /// A leader instance started while the serving instance waits says it listens (or is gone).
    listening_tx: mpsc::UnboundedSender<()>,
    listening_rx: Option<mpsc::UnboundedReceiver<()>>,
    /// With `--leader-health-url`: the leader instance's probes, and their answers.
    health: Option<LeaderHealth>,
    health_tx: mpsc::UnboundedSender<health::Answer>,
    health_rx: Option<mpsc::UnboundedReceiver<health::Answer>>,
    /// With `--on-change=lease-bridge`: the running process's bridge, and what its preload says.
    bridge: Option<Bridged>,
    bridge_starts: u64,
    /// Set when the one process of `--on-change=lease-bridge` is stopped for a demotion: the
    /// demotion is acked once it is gone, before the next process starts (that one is acked
    /// only once its election reads through the bridge).
    bridge_demoted: bool,
    bridge_tx: mpsc::UnboundedSender<(u64, Said)>,
    bridge_rx: Option<mpsc::UnboundedReceiver<(u64, Said)>>,
    status: watch::Sender<Status>,
}

impl Supervisor {
    /// A supervisor that has obeyed nothing yet. Before [`Supervisor::adopt`] gives it the flag
    /// file's reading, [`Supervisor::write_startup_ack`] must replace a previous supervisor's ack.
    pub fn new(settings: Settings, trust: Trust, status: watch::Sender<Status>) -> Self {
        let serving = (settings.on_change == OnChange::LeaderInstance)
            .then(|| Serving::new(settings.backoff.clone()));
        let (converged_tx, converged_rx) = mpsc::unbounded_channel();
        let (listening_tx, listening_rx) = mpsc::unbounded_channel();
        let (health_tx, health_rx) = mpsc::unbounded_channel();
        let (bridge_tx, bridge_rx) = mpsc::unbounded_channel();
        let health = settings.health.clone().map(LeaderHealth::new);
        let standby = settings
            .standby
            .as_ref()
            .map(|_| Standby::new(settings.backoff.clone()));
        Supervisor {
            serving,
            standby,
            converge: ConvergeState::default(),
            converged_tx,
            converged_rx: Some(converged_rx),
            listening_tx,
            listening_rx: Some(listening_rx),
            health,
            health_tx,
            health_rx: Some(health_rx),
            bridge: None,
            bridge_starts: 0,
            bridge_demoted: false,
            bridge_tx,
            bridge_rx: Some(bridge_rx),
            obedience: Obedience::new(&settings, trust),
            settings,
            child: Instance::idle(),
            crash_hold: None,
            restarts: 0,
            pending: Vec::new(),
            shutdown: None,
            leader_start_failures: 0,
            leader_starts: 0,
            leader_crashes: 0,
            status,
        }
    }

    /// Takes the flag file as read at start-up (after the ack file was reset).
    pub fn adopt(&mut self, initial: Observation) {
        match initial {
            Observation::Valid(g) => self.obedience.adopt(g),
            Observation::Absent => {}
            Observation::Invalid(reason) => {
                tracing::warn!(%reason, "flag file is not a grant object; starting as follower");
            }
        }
    }

    /// Runs until a shutdown signal (or, with `--exit-with-child`, the child's own exit) has
    /// stopped the child's whole group; returns the exit code for the process.
    pub async fn run(
        mut self,
        mut signals: Signals,
        mut observations: mpsc::UnboundedReceiver<Observation>,
        mut pushes: mpsc::Receiver<Push>,
    ) -> u8 {
        let now = BootInstant::now();
        tracing::info!(
            mode = %self.obedience.target(now),
            "supervisor starting ({})",
            match self.obedience.obeyed() {
                Some(g) => format!("flag file: {} incarnation={} seq={}", g.mode, g.incarnation, g.seq),
                None => "no valid flag file".to_owned(),
            }
        );
        let head_start = self.settings.serving_head_start;
        let leads = self.obedience.target(now) == Mode::Leader;
        if let Some(serving) = &mut self.serving {
            if leads && !head_start.is_zero() {
                tracing::info!(head_start = %crate::config::human(head_start),
                    "this pod leads: the serving instance starts after the leader instance's head start");
                serving.start_after(now.saturating_add(head_start));
            } else {
                serving.start(&self.settings, now);
            }
        }
        let mut converged = self
            .converged_rx
            .take()
            .unwrap_or_else(|| mpsc::unbounded_channel().1);
        let mut listening = self
            .listening_rx
            .take()
            .unwrap_or_else(|| mpsc::unbounded_channel().1);
        let mut health_answers = self
            .health_rx
            .take()
            .unwrap_or_else(|| mpsc::unbounded_channel().1);
        let mut bridge_said = self
            .bridge_rx
            .take()
            .unwrap_or_else(|| mpsc::unbounded_channel().1);
        self.reconcile();
        loop {
            self.serving_follows_shutdown();
            self.serving_after_leader();
            self.tend_standby();
            self.tend_health();
            if let Some(code) = self.finished() {
                return code;
            }
            self.publish();
            let leader_until = self.leader_deadline();
            let restart_at = match (&self.child, self.crash_hold) {
                (child, Some((_, at))) if child.is_idle() => Some(at),
                _ => None,
            };
            let stopping = self.child.is_stopping();
            let demoted_at = self.demoting_until();
            let serving_at = self
                .serving
                .as_ref()
                .and_then(|s| s.wake_at(BootInstant::now()));
            let standby_at = self
                .standby
                .as_ref()
                .and_then(|s| s.wake_at(BootInstant::now()));
            let bridge_at = self.bridge_wake_at();
            tokio::select! {
                // The dead man's switch first: nothing that floods the other branches (pushes
                // to the toggle, flag-file churn) may delay a demotion.
                biased;
                _ = sleep_until(leader_until) => {
                    tracing::warn!("leader grant expired without renewal; demoting");
                    self.reconcile();
                }
                Some(sig) = signals.next() => self.on_signal(sig),
                Some(obs) = observations.recv() => self.on_file(obs),
                Some(push) = pushes.recv() => self.on_push(push),
                Some(done) = converged.recv() => self.on_converged(done),
                Some(()) = listening.recv() => self.on_leader_listening(),
                Some(answer) = health_answers.recv() => self.on_health(answer),
                Some(said) = bridge_said.recv() => self.on_bridge(said),
                _ = sleep_until(bridge_at) => self.on_bridge_due(),
                _ = sleep_until(restart_at) => self.reconcile(),
                _ = sleep_until(demoted_at) => self.reconcile(),
                _ = tokio::time::sleep(self.settings.ack_retry), if !self.obedience.ack_ready() => {
                    self.write_startup_ack();
                    if self.obedience.ack_ready() {
                        self.reconcile();
                    }
                }
                _ = tokio::time::sleep(instance::STOP_POLL), if stopping => self.progress_stop(),
                _ = sleep_until(serving_at) => {
                    if let Some(serving) = &mut self.serving {
                        serving.tick(&self.settings, BootInstant::now());
                    }
                }
                // The loop's next turn tends the standby (`tend_standby`).
                _ = sleep_until(standby_at) => {}
            }
        }
    }

    /// Replaces whatever ack file a previous supervisor left with "follower, nothing obeyed yet"
    /// (see [`Obedience::write_startup_ack`]); until that write succeeds the app runs only as
    /// follower.
    pub fn write_startup_ack(&mut self) {
        self.obedience.write_startup_ack();
    }

    /// When a demotion by signal takes effect, while one is in flight.
    fn demoting_until(&self) -> Option<BootInstant> {
        self.child.running().and_then(|r| r.demoting_until)
    }

    /// The mode in effect for acks and `GET /mode`.
    fn in_effect(&self, now: BootInstant) -> Mode {
        if self.shutdown.is_some() {
            Mode::Stopped
        } else {
            self.obedience.target(now)
        }
    }

    /// The expiry to demote at while leader; the dead man's switch.
    fn leader_deadline(&self) -> Option<BootInstant> {
        match self.shutdown {
            Some(_) => None,
            None => self.obedience.leader_deadline(BootInstant::now()),
        }
    }

    fn on_signal(&mut self, sig: i32) {
        if sig == SIGCHLD {
            self.reap();
            return;
        }
        let Ok(signal) = Signal::try_from(sig) else {
            return;
        };
        if let Some(pid) = self.child.main_pid() {
            child::signal(pid, signal);
        }
        if let Some(pid) = self.serving.as_ref().and_then(Serving::main_pid) {
            child::signal(pid, signal);
        }
        if matches!(signal, Signal::SIGTERM | Signal::SIGINT | Signal::SIGQUIT)
            && self.shutdown.is_none()
        {
            tracing::info!(signal = %signal, "shutting down: signal forwarded to the child");
            self.shutdown = Some(Shutdown::default());
            let grace = self.obedience.kill_grace();
            if let Some(serving) = &mut self.serving {
                serving.shutdown(true, BootInstant::now(), grace);
            }
            if let Some(standby) = &mut self.standby {
                standby.withdraw("the supervisor is shutting down");
            }
            if self.settings.on_change == OnChange::LeaseBridge {
                // The one process ends at once (see `begin_stop`): Passmower's own SIGTERM
                // handler stops its operators and then lives on until the kill grace, so waiting
                // for it only leaves the cluster without an operator for that long.
                self.child.kill();
            } else {
                let kill_at = self.obedience.kill_deadline(BootInstant::now());
                self.child.signalled(kill_at);
            }
            self.crash_hold = None;
            self.reconcile();
        }
    }

    fn reap(&mut self) {
        for (pid, exit) in child::reap_all() {
            if self.serving_exited(pid, exit) {
                continue;
            }
            let now = BootInstant::now();
            if let Some(standby) = &mut self.standby {
                if standby.on_exit(pid, exit, now) {
                    continue;
                }
            }
            if !self.on_main_exit(pid, exit) {
                tracing::debug!(pid = pid.as_raw(), %exit, "reaped an orphaned process");
            }
        }
        if self.child.is_stopping() {
            self.progress_stop();
        }
    }

    /// Takes `pid`'s exit if it is the child's main process; false if it is not.
    fn on_main_exit(&mut self, pid: Pid, exit: Exit) -> bool {
        let now = BootInstant::now();
        // Whatever it left behind in its group goes before anything new starts; a leader's
        // leftovers no later than the kill grace after its grant's expiry.
        let kill_at = self.obedience.kill_deadline(now);
        let ended = self.child.main_exited(pid, exit, kill_at);
        if ended.is_some() {
            if let Some(b) = self.bridge.take().filter(|b| !b.tracker.proven()) {
                tracing::info!(
                    pid = pid.as_raw(),
                    start = b.start,
                    "the process ended before its \
                    election read its Lease through the lease bridge"
                );
            }
        }
        match ended {
            None => return false,
            Some(Ended::Stopped { pgid }) => {
                tracing::info!(pid = pgid.as_raw(), %exit, "child stopped");
            }
            Some(Ended::OnItsOwn(r)) => {
                let ran = now.saturating_since(r.started);
                let (pid, mode) = (r.pid, r.mode);
                if self.settings.exit_with_child {
                    tracing::info!(pid = pid.as_raw(), %exit, "child exited; exiting with it");
                    self.shutdown = Some(Shutdown {
                        exit_code: Some(exit.code()),
                    });
                } else {
                    if mode == Mode::Leader {
                        self.leader_crashes = self.leader_crashes.saturating_add(1);
                        self.leader_start_failures = mode::leader_failures_after_exit(
                            self.leader_start_failures,
                            ran,
                            self.settings.backoff.reset_after,
                        );
                    }
                    let delay = self.settings.backoff.on_exit(ran);
                    tracing::warn!(pid = pid.as_raw(), %exit, ran_for = %crate::config::human(ran),
                        restart_in = %crate::config::human(delay), "child exited on its own; restarting");
                    self.crash_hold = Some((mode, now.saturating_add(delay)));
                }
            }
        }
        true
    }

    /// Begins stopping the running child: SIGTERM to its group, SIGKILL after the kill grace
    /// (at once for a leader found past its grant's expiry + the kill grace).
    fn begin_stop(&mut self) {
        let now = BootInstant::now();
        if let Some(r) = self.child.running() {
            tracing::info!(pid = r.pid.as_raw(), mode = %r.mode, "stopping the child's process group");
        }
        if self.settings.on_change == OnChange::LeaseBridge {
            // The one process of the lease bridge is killed, not asked to stop: after an
            // in-process stand-down, callbacks already in flight still wrote to Redis, which no
            // fence guards (tests/api/lease_bridge.rs), and Passmower's own SIGTERM handler stops
            // its operators and then lives on until the kill grace (its Redis client keeps it
            // up), which only lengthens the time with no operator. SIGKILL ends every write at
            // once; its pod's HTTP restarts with the next process (a rollout has drained the
            // pod by then).
            self.child.kill();
            return;
        }
        let kill_at = self.obedience.kill_deadline(now);
        self.child.stop(now, kill_at);
    }

    fn progress_stop(&mut self) {
        let Some(gone) = self.child.progress(BootInstant::now()) else {
            return;
        };
        tracing::debug!(pgid = gone.pgid.as_raw(), "process group gone");
        // Beside a serving instance, the supervisor exits with that one's status: it is the app.
        if let (Some(sd), Some(exit), None) = (&mut self.shutdown, gone.exit, &self.serving) {
            sd.exit_code.get_or_insert(exit.code());
        }
        self.reconcile();
    }

    fn on_file(&mut self, obs: Observation) {
        match obs {
            Observation::Valid(g) => self.offer(g, None),
            Observation::Absent | Observation::Invalid(_) => {
                let reason = match obs {
                    Observation::Invalid(r) => r,
                    _ => "flag file removed".to_owned(),
                };
                // The file is the channel that must still work when pushes fail; if it can no
                // longer say "follower", keep no operator running on the strength of old news.
                tracing::warn!(%reason, "flag file holds no grant; follower until a newer object arrives");
                self.demote_locally();
            }
        }
    }

    fn demote_locally(&mut self) {
        self.obedience.demote_locally();
        self.reconcile();
    }

    fn on_push(&mut self, push: Push) {
        self.offer(push.grant, Some(push.reply));
    }

    /// Offers an object from either channel to the obedience state; answers a push it did not
    /// obey, and queues the answer to one it did.
    fn offer(&mut self, g: Grant, reply: Option<oneshot::Sender<Reply>>) {
        let via = if reply.is_some() {
            Channel::Toggle
        } else {
            Channel::FlagFile
        };
        match self.obedience.offer(&g, via, BootInstant::now()) {
            Offer::Refused(refusal) => match reply {
                Some(reply) => {
                    let _ = reply.send(Reply::Refused(refusal));
                }
                // Refused from the flag file, it demoted locally (see `Obedience::offer`).
                None => self.reconcile(),
            },
            Offer::Stale { last } => {
                if let Some(reply) = reply {
                    let _ = reply.send(Reply::Stale { last });
                }
            }
            Offer::Obeyed { requested } => {
                if let Some(reply) = reply {
                    self.pending.push(Pending {
                        requested,
                        order: g.order(),
                        reply,
                    });
                }
                self.reconcile();
            }
        }
    }

    /// Moves the child towards the target mode; settles (acks) once nothing is in flight.
    fn reconcile(&mut self) {
        if self.child.is_stopping() {
            return;
        }
        let now = BootInstant::now();
        let desired = if self.shutdown.is_some() {
            None
        } else {
            mode::desired_child(self.obedience.target(now), self.settings.on_follower)
        };
        if desired != Some(Mode::Leader) {
            self.abandon_converge();
        }
        // A restart that is due but no longer wanted (the mode changed meanwhile) is dropped, so
        // its deadline does not keep waking the loop.
        if self
            .crash_hold
            .is_some_and(|(held, at)| now >= at && desired != Some(held))
        {
            self.crash_hold = None;
        }
        let running = self.child.running_mut().map(|r| {
            if r.demoting_until.is_some_and(|t| now >= t) {
                r.demoting_until = None;
            }
            r.mode
        });
        match mode::step(running, desired, self.settings.on_change) {
            Step::Keep => {}
            Step::Start(m) => {
                if std::mem::take(&mut self.bridge_demoted) && m == Mode::Follower {
                    // The demoted process is gone: that is what the demotion's ack says.
                    self.settle(now);
                }
                self.start(m, now);
            }
            Step::Stop => {
                self.bridge_demoted = self.settings.on_change == OnChange::LeaseBridge
                    && running == Some(Mode::Leader)
                    && desired == Some(Mode::Follower);
                self.begin_stop();
            }
            Step::BridgePromote => self.bridge_promote(),
            Step::Signal(sig, m) => {
                let how = match m {
                    Mode::Leader => SignalDemotion::Signal { acked_at: now },
                    _ => self.obedience.signal_demotion(now),
                };
                match how {
                    SignalDemotion::Signal { acked_at } => {
                        if let Some(r) = self.child.running_mut() {
                            tracing::info!(pid = r.pid.as_raw(), from = %r.mode, to = %m, signal = %sig,
                                "signalling the child to switch mode");
                            child::signal(r.pid, sig);
                            r.mode = m;
                            // A promotion takes effect on delivery; a demotion once the app has
                            // had the kill grace to stop operator work. Until then nothing is
                            // acked, so the elector keeps the Lease (and nobody else leads)
                            // while the app winds down.
                            r.demoting_until = (m == Mode::Follower).then_some(acked_at);
                        }
                    }
                    SignalDemotion::Stop => {
                        if let Some(r) = self.child.running() {
                            tracing::warn!(pid = r.pid.as_raw(),
                                "the leader grant expired before the demotion could be signalled \
                                 (supervisor woke late); stopping the app instead, SIGKILL no later \
                                 than the kill grace after the expiry");
                            self.begin_stop();
                        }
                    }
                }
            }
        }
        if !self.child.is_stopping() && self.demoting_until().is_none() && !self.bridge_holds_acks()
        {
            self.settle(now);
        }
    }

    fn start(&mut self, m: Mode, now: BootInstant) {
        let after_crash = match self.crash_hold {
            Some((held, at)) if held == m => {
                if now < at {
                    return; // the restart timer brings us back
                }
                true
            }
            _ => false,
        };
        self.crash_hold = None;
        if m == Mode::Leader && !self.converge_ready(after_crash) {
            return; // the check's result brings us back
        }
        let after_crash = after_crash || std::mem::take(&mut self.converge.after_crash);
        let started = match self.go_standby(m, now) {
            Some(pid) => Ok(pid),
            None if self.settings.bridge.is_some() => self.spawn_bridged(m, now),
            None if m == Mode::Leader => self.spawn_leader(now),
            None => self.child.spawn(
                &self.settings.command,
                &self.settings.follower_args,
                &self.settings.follower_env,
                m,
                now,
            ),
        };
        match started {
            Ok(pid) => {
                if after_crash {
                    self.restarts += 1;
                }
                if m == Mode::Leader {
                    self.leader_starts = self.leader_starts.saturating_add(1);
                }
                tracing::info!(pid = pid.as_raw(), mode = %m, restarts = self.restarts, "child started");
                if m == Mode::Leader {
                    // The next leader start (a restart after a crash, a later promotion) checks
                    // again.
                    self.converge.done = false;
                }
            }
            Err(e) => {
                if m == Mode::Leader {
                    self.leader_start_failures = self.leader_start_failures.saturating_add(1);
                    self.leader_crashes = self.leader_crashes.saturating_add(1);
                }
                let delay = self.settings.backoff.on_exit(Duration::ZERO);
                tracing::error!(command = ?self.settings.command, error = %e,
                    retry_in = %crate::config::human(delay), "cannot start the child");
                if self.settings.exit_with_child {
                    self.shutdown = Some(Shutdown {
                        // The shell's code for "command cannot be executed".
                        exit_code: Some(126),
                    });
                } else {
                    self.crash_hold = Some((m, now.saturating_add(delay)));
                }
            }
        }
    }

    /// Writes the ack file and answers waiting pushes; only called when no stop (or demotion by
    /// signal) is in flight.
    fn settle(&mut self, now: BootInstant) {
        let in_effect = self.in_effect(now);
        // Failed starts count per leadership: a demotion (the elector stepping down, or any
        // other) starts the count again for the next one.
        if in_effect != Mode::Leader {
            self.leader_start_failures = 0;
        }
        let ack = self.obedience.ack_object(in_effect, self.leader_counts());
        if let Err(e) = self.obedience.write_ack(&ack) {
            if self.child.running().is_some_and(|r| r.mode == Mode::Leader) {
                tracing::error!(error = %e, "cannot write the ack file while leader");
            } else {
                tracing::warn!(error = %e, "cannot write the ack file");
            }
        }
        let last = self.obedience.last_order();
        for p in self.pending.drain(..) {
            let reply = if p.requested == in_effect
                || (in_effect == Mode::Stopped && p.requested == Mode::Follower)
            {
                Reply::Acked(ack.clone())
            } else if in_effect == Mode::Stopped {
                Reply::ShuttingDown
            } else {
                tracing::debug!(
                    incarnation = p.order.incarnation,
                    seq = p.order.seq,
                    "push superseded before it took effect"
                );
                Reply::Superseded {
                    mode: in_effect,
                    last,
                }
            };
            let _ = p.reply.send(reply);
        }
    }

    /// The exit code once shutdown has finished: the child and its whole group are gone.
    fn finished(&mut self) -> Option<u8> {
        let sd = self.shutdown.as_ref()?;
        if !self.child.is_idle()
            || self.serving.as_ref().is_some_and(|s| !s.gone())
            || self.standby.as_ref().is_some_and(|s| !s.gone())
        {
            return None;
        }
        let serving_code = self
            .serving
            .as_ref()
            .and_then(Serving::last_exit)
            .map(Exit::code);
        let code = sd.exit_code.or(serving_code).unwrap_or(0);
        self.settle(BootInstant::now());
        self.publish();
        tracing::info!(
            exit_code = code,
            "supervisor exiting; child and its process group are gone"
        );
        Some(code)
    }

    fn leader_counts(&self) -> LeaderCounts {
        LeaderCounts {
            failures_in_a_row: self.leader_start_failures,
            starts: self.leader_starts,
            crashes: self.leader_crashes,
            unhealthy: self.health.as_ref().map_or(0, |h| h.unhealthy_restarts),
            probe_failures: self.health.as_ref().map_or(0, |h| h.probe_failures),
        }
    }

    fn publish(&self) {
        let now = BootInstant::now();
        let child_pid = self.child.main_pid().map(Pid::as_raw);
        let child_mode = self.child.running().map(|r| r.mode.to_string());
        let in_effect = self.in_effect(now);
        let expiry = self.leader_deadline();
        let obeyed = self.obedience.obeyed();
        self.status.send_replace(Status {
            mode: in_effect.to_string(),
            child_mode,
            epoch: obeyed.map(|g| g.epoch).unwrap_or(0),
            holder: obeyed.map(|g| g.holder.clone()).unwrap_or_default(),
            child_pid,
            restarts: self.restarts,
            on_change: self.settings.on_change.to_string(),
            serving: self.serving.as_ref().map(Serving::status),
            standby: self.standby.as_ref().map(Standby::status),
            transitioning: self.child.is_stopping()
                || self.demoting_until().is_some()
                || self.bridge_holds_acks(),
            expires_boottime_ns: expiry.map(BootInstant::as_nanos).unwrap_or(0),
            expires_at: expiry.map(clock::rfc3339_of),
            incarnation: obeyed.map(|g| g.incarnation).unwrap_or(0),
            seq: obeyed.map(|g| g.seq).unwrap_or(0),
            kill_grace_ns: crate::grant::duration_ns(self.obedience.kill_grace()),
            leader_start_failures: self.leader_start_failures,
            leader_starts: self.leader_starts,
            leader_crashes: self.leader_crashes,
            leader_unhealthy: self.health.as_ref().map_or(0, |h| h.unhealthy_restarts),
            leader_probe_failures: self.health.as_ref().map_or(0, |h| h.probe_failures),
            leader_health_failing: self.health.as_ref().map(LeaderHealth::failing_in_a_row),
            converge: self
                .settings
                .converge
                .as_ref()
                .map(|_| self.converge.status.clone()),
        });
    }
}

async fn sleep_until(deadline: Option<BootInstant>) {
    match deadline {
        Some(d) => clock::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
