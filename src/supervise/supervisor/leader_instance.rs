//! The loop's part for `--on-change=leader-instance`: the serving instance's head start and
//! shutdown, the leader instance's start (afresh, or the waiting standby given the go), its
//! health probe, and the promotion check of `--converge-oidc-clients` that a leader start waits
//! for. These are methods of the one [`Supervisor`], so the loop stays the only writer.

use nix::unistd::Pid;

use super::{Shutdown, Supervisor};
use crate::clock::BootInstant;
use crate::grant::Mode;
use crate::supervise::leader_instance::converge::{self, Outcome};
use crate::supervise::leader_instance::health::{self, Verdict};
use crate::supervise::leader_instance::listening;
use crate::supervise::leader_instance::serving::Serving;
use crate::supervise::leader_instance::standby::Go;
use crate::supervise::mode;
use crate::supervise::process::child::Exit;
use crate::supervise::status::ConvergeStatus;

/// A finished promotion check: its number and what it found.
pub(super) type Converged = (u64, Result<Outcome, String>);

/// The promotion check of `--converge-oidc-clients`, per leader start.
#[derive(Debug, Default)]
pub(super) struct ConvergeState {
    /// The check in flight: its number and task (aborted when the leader start is no longer
    /// wanted; its late writes would be refused by the fence anyway).
    pub(super) running: Option<(u64, tokio::task::JoinHandle<()>)>,
    /// Checks started so far (numbers them).
    pub(super) started: u64,
    /// The check for the next leader start is done.
    pub(super) done: bool,
    /// The start the check delays is a restart after a crash.
    pub(super) after_crash: bool,
    pub(super) status: ConvergeStatus,
}

impl Supervisor {
    /// A serving instance held back for the leader instance's head start waits no longer once no
    /// leader instance runs or is on its way (its start failed, it exited, the pod was demoted):
    /// nothing boots that it would compete with, and the pod would serve nothing meanwhile.
    pub(super) fn serving_after_leader(&mut self) {
        if self.converge.running.is_some() || !self.child.is_idle() {
            return;
        }
        if let Some(serving) = &mut self.serving {
            serving.start_now_if_held(&self.settings, BootInstant::now());
        }
    }

    /// Hands `pid`'s exit to the serving instance if it is its main process; true if it was.
    /// An exit on its own ends the supervisor with `--exit-with-child`, as the leader's does.
    pub(super) fn serving_exited(&mut self, pid: Pid, exit: Exit) -> bool {
        let grace = self.obedience.kill_grace();
        let Some(serving) = &mut self.serving else {
            return false;
        };
        match serving.on_exit(pid, exit, BootInstant::now(), grace) {
            None => false,
            Some(own) => {
                if let (Some(exit), true, None) =
                    (own, self.settings.exit_with_child, &self.shutdown)
                {
                    tracing::info!(pid = pid.as_raw(), %exit, "serving instance exited; exiting with it");
                    self.shutdown = Some(Shutdown {
                        exit_code: Some(exit.code()),
                    });
                    self.crash_hold = None;
                    self.reconcile();
                }
                true
            }
        }
    }

    /// Once the supervisor is shutting down for any reason (a signal, or `--exit-with-child`
    /// after the leader instance exited), the serving instance goes too.
    pub(super) fn serving_follows_shutdown(&mut self) {
        if self.shutdown.is_none() {
            return;
        }
        let grace = self.obedience.kill_grace();
        if let Some(serving) = &mut self.serving {
            serving.shutdown(false, BootInstant::now(), grace);
            serving.tick(&self.settings, BootInstant::now());
        }
    }

    /// Starts the leader instance afresh. While the serving instance's first start waits for
    /// it, it is given the listening pipe (see `listening`), when its preload can use one.
    pub(super) fn spawn_leader(&mut self, now: BootInstant) -> std::io::Result<Pid> {
        let waited_for = self.settings.leader_says_listening
            && self.serving.as_ref().is_some_and(Serving::first_start_held);
        let pipe = waited_for
            .then(|| {
                listening::Pipe::open()
                    .inspect_err(|e| {
                        tracing::warn!(error = %e, "cannot open the listening pipe; the serving \
                            instance starts after the whole head start");
                    })
                    .ok()
            })
            .flatten();
        let mut env = std::borrow::Cow::Borrowed(&self.settings.leader_env);
        if let Some(pipe) = &pipe {
            env.to_mut().push(pipe.env());
        }
        let pid = self.child.spawn(
            &self.settings.command,
            &self.settings.leader_args,
            &env,
            Mode::Leader,
            now,
        )?;
        if let Some(pipe) = pipe {
            if let Err(e) = pipe.watch(self.listening_tx.clone()) {
                tracing::warn!(error = %e, "cannot watch the listening pipe; the serving \
                    instance starts after the whole head start");
            }
        }
        Ok(pid)
    }

    /// The leader instance started while the serving instance waits has booted (its first
    /// listen) or is gone: the serving instance need not wait any longer.
    pub(super) fn on_leader_listening(&mut self) {
        let settings = &self.settings;
        let started = self
            .serving
            .as_mut()
            .is_some_and(|serving| serving.start_now_if_held(settings, BootInstant::now()));
        if started {
            tracing::info!("the leader instance listens; starting the serving instance");
        }
    }

    /// With `--leader-standby`, a leader start gives the waiting standby the go instead of starting
    /// a new process: it becomes the child, started now. `None`: start afresh (not a leader
    /// start, no standby configured, none waiting, or the go could not be sent).
    pub(super) fn go_standby(&mut self, m: Mode, now: BootInstant) -> Option<Pid> {
        let (Mode::Leader, Some(spec), Some(standby)) =
            (m, self.settings.standby.as_ref(), self.standby.as_mut())
        else {
            return None;
        };
        match standby.go(spec, now) {
            Go::Given(leader) => {
                // The child is idle here (a leader start happens only then), and the standby
                // is running: it simply takes the child's place.
                self.child = leader;
                let pid = self.child.main_pid();
                if let Some(pid) = pid {
                    tracing::info!(
                        pid = pid.as_raw(),
                        "standby given the go: it is the leader instance now"
                    );
                }
                pid
            }
            Go::NotReady => {
                tracing::info!("no standby waiting; starting the leader instance afresh");
                None
            }
            Go::Failed(error) => {
                tracing::warn!(%error, "cannot give the standby the go; starting the leader instance afresh");
                None
            }
        }
    }

    /// Keeps one standby waiting while it is wanted: this pod is not owed leader, no leader
    /// instance runs or stops (a new standby only once the old leader instance is gone), and the
    /// supervisor is not shutting down (then it is withdrawn).
    pub(super) fn tend_standby(&mut self) {
        let (Some(spec), Some(standby)) = (self.settings.standby.as_ref(), self.standby.as_mut())
        else {
            return;
        };
        if self.shutdown.is_some() {
            standby.withdraw("the supervisor is shutting down");
        }
        let now = BootInstant::now();
        let wanted = self.shutdown.is_none()
            && self.child.is_idle()
            && self.obedience.target(now) != Mode::Leader;
        standby.tick(wanted, &self.settings, spec, now);
    }

    /// Probes the leader instance while one runs in leader mode (and the supervisor is not
    /// shutting down), nothing otherwise; each run is probed afresh.
    pub(super) fn tend_health(&mut self) {
        let Some(health) = &mut self.health else {
            return;
        };
        let running = self
            .child
            .running()
            .filter(|r| r.mode == Mode::Leader && self.shutdown.is_none())
            .map(|r| (r.pid, r.started));
        health.tend(running, &self.health_tx);
    }

    /// Counts a probe's answer; once the leader instance has failed `--leader-health-failures`
    /// probes in a row it is stopped and restarted as if it had crashed: after the backoff, and
    /// counted as a failed leader start unless it had answered healthy for
    /// `--restart-backoff-reset` (its stable run), so a leader that cannot stay healthy makes
    /// the elector step down after the same budget as one that keeps exiting.
    pub(super) fn on_health(&mut self, answer: health::Answer) {
        let Some(health) = &mut self.health else {
            return;
        };
        let now = BootInstant::now();
        let pid = answer.pid.as_raw();
        let failures = health.spec().failures;
        let url = format!("http://{}{}", health.spec().addr, health.spec().path);
        match health.judge(answer, now) {
            Verdict::Stale | Verdict::Healthy => {}
            Verdict::Failed { in_a_row, reason } => {
                tracing::warn!(pid, %url, %reason, in_a_row, restart_at = failures,
                    "leader instance's health probe failed");
            }
            Verdict::Unhealthy {
                in_a_row,
                reason,
                healthy_for,
            } => {
                self.leader_start_failures = mode::leader_failures_after_exit(
                    self.leader_start_failures,
                    healthy_for,
                    self.settings.backoff.reset_after,
                );
                let delay = self.settings.backoff.on_exit(healthy_for);
                tracing::error!(pid, %url, %reason, in_a_row,
                    healthy_for = %crate::config::human(healthy_for),
                    failures_in_a_row = self.leader_start_failures,
                    restart_in = %crate::config::human(delay),
                    "leader instance failed its health probe too often in a row; restarting it \
                     as if it had crashed");
                self.crash_hold = Some((Mode::Leader, now.saturating_add(delay)));
                self.begin_stop();
            }
        }
    }

    /// Whether a leader start may go ahead: without `--converge-oidc-clients`, or once this
    /// start's check is done (started here if it is not running yet).
    pub(super) fn converge_ready(&mut self, after_crash: bool) -> bool {
        let Some(spec) = self.settings.converge.clone() else {
            return true;
        };
        if self.converge.done {
            return true;
        }
        if self.converge.running.is_none() {
            self.converge.started += 1;
            self.converge.after_crash = after_crash;
            let id = self.converge.started;
            let tx = self.converged_tx.clone();
            tracing::info!(
                "checking the OIDCClients this Deployment claimed for missing client Secrets \
                 before the leader instance starts"
            );
            let task = tokio::spawn(async move {
                let result = match tokio::time::timeout(converge::CONVERGE_LIMIT, spec.run()).await
                {
                    Ok(r) => r,
                    Err(_) => Err(format!(
                        "not finished within {}",
                        crate::config::human(converge::CONVERGE_LIMIT)
                    )),
                };
                let _ = tx.send((id, result));
            });
            self.converge.running = Some((id, task));
        }
        false
    }

    /// The leader start the check was for is no longer wanted: stop the check, and check again
    /// before the next one.
    pub(super) fn abandon_converge(&mut self) {
        if let Some((_, task)) = self.converge.running.take() {
            task.abort();
            tracing::info!("leader start no longer wanted; promotion check abandoned");
        }
        self.converge.done = false;
        self.converge.after_crash = false;
    }

    pub(super) fn on_converged(&mut self, (id, result): Converged) {
        if self.converge.running.as_ref().map(|(i, _)| *i) != Some(id) {
            return; // an abandoned check's late answer
        }
        self.converge.running = None;
        self.converge.done = true;
        let status = &mut self.converge.status;
        status.checks += 1;
        match result {
            Ok(out) => {
                status.missing_client_secrets += out.missing.len() as u64;
                status.released_clients += out.released.len() as u64;
                for client in &out.released {
                    tracing::warn!(%client,
                        "OIDCClient claimed by this Deployment has no client Secret (a write \
                         sequence cut short by a takeover, a crash or a deletion); handed back so \
                         the leader instance claims and reconciles it");
                }
                for failure in &out.failed {
                    tracing::error!(%failure, "OIDCClient left unreconciled by the promotion check");
                }
                for client in &out.skipped {
                    tracing::warn!(%client,
                        "OIDCClient not checked: NAMESPACE_SELECTOR uses more than `*`, so the \
                         check cannot tell whether the operator reconciles its namespace");
                }
                tracing::info!(
                    checked = out.checked,
                    missing = out.missing.len(),
                    released = out.released.len(),
                    "promotion check done; starting the leader instance"
                );
            }
            Err(error) => {
                status.failed_checks += 1;
                tracing::error!(%error,
                    "promotion check failed; starting the leader instance anyway (a client whose \
                     Secret is missing stays so until its OIDCClient changes)");
            }
        }
        self.reconcile();
    }
}
