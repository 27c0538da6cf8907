//! The election loop: drives the [`Candidate`] with Lease observations, API results and the
//! boot clock; publishes every transition; hands the Lease over on SIGTERM/SIGINT.
//!
//! Order of concerns in every iteration: first the dead man's switch (a lapsed grant demotes
//! before anything else, e.g. right after a SIGSTOP/SIGCONT), then signals, then watch events,
//! then the timer for the next renew or acquisition attempt. API calls race the grant's expiry,
//! so a hung call cannot delay a demotion.
//!
//! `lease_calls` holds the API calls, `publish` the outputs of a transition, `handover` the
//! demote-ack-release sequence of a shutdown.

mod handover;
mod lease_calls;
mod publish;
mod step_down;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_tokio::Signals;

use super::events::EventRecorder;
use super::metrics::Metrics;
use super::outputs::Outputs;
use super::probes::{self, ProbeState};
use super::status::SharedStatus;
use super::{holder_identity, ElectConfig};
use crate::clock::{self, BootInstant};
use crate::config::ConfigError;
use crate::election::lease_api::{observe, LeaseApi, WatchItem};
use crate::election::record::{self, Observed};
use crate::election::Candidate;

/// Sets up the probe server, the API client and signals, then runs the loop to the end.
pub async fn start(config: ElectConfig) -> ExitCode {
    let holder = holder_identity(&config.identity, config.pod_uid.as_deref());
    let listener = match probes::bind(config.probe_addr).await {
        Ok(l) => l,
        Err(e) => {
            return ConfigError::new(
                "--probe-addr",
                config.probe_addr.to_string(),
                format!("cannot listen: {e}"),
            )
            .report()
        }
    };
    let client = match kube::Config::infer()
        .await
        .map_err(|e| e.to_string())
        .and_then(|c| kube::Client::try_from(c).map_err(|e| e.to_string()))
    {
        Ok(c) => c,
        Err(e) => {
            return ConfigError::new(
                "KUBECONFIG",
                std::env::var("KUBECONFIG").unwrap_or_default(),
                format!(
                    "no usable Kubernetes client configuration (KUBECONFIG, then in-cluster): {e}"
                ),
            )
            .report()
        }
    };
    let signals = match Signals::new([SIGTERM, SIGINT]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("passmower-elector elect: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };

    let (metrics, registry) = Metrics::new();
    let status = SharedStatus::default();
    status.update(|s| {
        s.identity = holder.clone();
        s.loop_heartbeat = BootInstant::now();
    });
    let probe_state = Arc::new(ProbeState {
        status: status.clone(),
        registry,
        timing: config.timing,
    });
    tokio::spawn(probes::serve(listener, probe_state));

    let api = LeaseApi::new(
        client.clone(),
        &config.namespace,
        &config.lease_name,
        config.timing.api_timeout(),
    );
    // A demotion push is answered once the consumer has stopped, which may take kill grace.
    let push_timeout = config.timing.kill_grace + Duration::from_secs(2);
    let outputs = match Outputs::new(
        config.flag_file.clone(),
        api.reference(),
        config.toggle_url.clone(),
        push_timeout,
        config.timing.renew_deadline,
        config.timing.kill_grace,
    ) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("passmower-elector elect: {e}");
            return ExitCode::FAILURE;
        }
    };
    let events = config
        .events
        .then(|| EventRecorder::new(client, &config.namespace, &config.lease_name, &holder));
    tracing::info!(
        identity = %holder,
        lease = %api.reference(),
        flag_file = %config.flag_file.display(),
        lease_duration = ?config.timing.lease_duration,
        renew_deadline = ?config.timing.renew_deadline,
        retry_period = ?config.timing.retry_period,
        kill_grace = ?config.timing.kill_grace,
        "elector starting"
    );
    let elector = Elector {
        candidate: Candidate::new(holder, config.timing),
        api,
        outputs,
        status,
        metrics,
        events,
        current: None,
        next_attempt: BootInstant::now(),
        outputs_healthy: true,
        release_pending: false,
        step_down: step_down::StepDown::new(config.max_leader_failures),
    };
    elector.run(signals).await
}

struct Elector {
    candidate: Candidate,
    api: LeaseApi,
    outputs: Outputs,
    status: SharedStatus,
    metrics: Metrics,
    events: Option<EventRecorder>,
    /// The last Lease object read or written: the base (and precondition) of our next write.
    current: Option<Lease>,
    /// Earliest time of the next renew or acquisition attempt.
    next_attempt: BootInstant,
    /// False after the flag file could not be written: we do not contend until it can be.
    outputs_healthy: bool,
    /// Set when we demoted ourselves while still named in the Lease (fail closed): hand it over.
    release_pending: bool,
    /// Stepping down for an app that cannot run as leader, and sitting out afterwards.
    step_down: step_down::StepDown,
}

impl Elector {
    async fn run(mut self, mut signals: Signals) -> ExitCode {
        let timing = *self.candidate.timing();
        self.publish_follower();
        let mut watch = self.api.spawn_watch(timing.retry_period);
        loop {
            let now = BootInstant::now();
            self.status.update(|s| s.loop_heartbeat = now);
            if let Some(t) = self.candidate.tick(now) {
                self.apply(t, now);
            }
            if self.release_pending {
                // Fail closed: hand the Lease over like a shutdown would, but keep running
                // (a signal arriving meanwhile is handled by the next iteration).
                self.release_pending = false;
                self.hand_over(None).await;
            }
            self.step_down_if_app_failing(now).await;
            let expiry = self.candidate.term().map(|t| t.expiry);
            let wake = self.next_wake(now);
            tokio::select! {
                biased;
                _ = clock::sleep_until(expiry.unwrap_or(now)), if expiry.is_some() => {}
                signal = signals.next() => {
                    tracing::info!(signal = signal.unwrap_or(0), "shutdown requested");
                    return self.shutdown(&mut signals).await;
                }
                item = watch.recv() => match item {
                    Some(item) => self.on_watch(item),
                    None => watch = self.api.spawn_watch(timing.retry_period),
                },
                _ = clock::sleep_until(wake) => self.act().await,
            }
        }
    }

    /// When the loop must next act: a renew or acquisition attempt, or at least every retry
    /// period (heartbeat, fail-closed retry).
    fn next_wake(&self, now: BootInstant) -> BootInstant {
        let heartbeat = now.saturating_add(self.candidate.timing().retry_period);
        if self.candidate.is_leader() {
            return self.next_attempt.min(heartbeat);
        }
        match self.candidate.free_at() {
            Some(free) if self.outputs_healthy => free
                .max(self.next_attempt)
                .max(self.step_down.sit_out_end())
                .min(heartbeat),
            _ => heartbeat,
        }
    }

    fn on_watch(&mut self, item: WatchItem) {
        match item {
            WatchItem::Observed(lease) => self.on_lease(lease.map(|l| *l), false),
            WatchItem::Read(lease) => self.on_lease(lease.map(|l| *l), true),
            WatchItem::Error(e) => {
                self.metrics.api_error(e.kind());
                tracing::debug!(error = %e, "Lease watch interrupted; it resumes by itself");
            }
        }
    }

    /// The watch task saw the Lease (`fresh_read`: by a GET when its watch (re)started).
    fn on_lease(&mut self, lease: Option<Lease>, fresh_read: bool) {
        let now = BootInstant::now();
        self.status.update(|s| {
            s.lease_observed = true;
            s.api_ok = true;
        });
        self.remember(lease.as_ref());
        self.observe(now, observe(lease.as_ref()), fresh_read);
        // A release (or anything that frees the Lease) is acted on now, not at the next poll.
        if self.candidate.may_acquire(now) {
            self.next_attempt = self.next_attempt.min(now);
        }
    }

    fn remember(&mut self, lease: Option<&Lease>) {
        let newer = match (lease, &self.current) {
            (Some(l), Some(cur)) => !record::is_older_resource_version(
                l.metadata.resource_version.as_deref().unwrap_or(""),
                cur.metadata.resource_version.as_deref().unwrap_or(""),
            ),
            _ => true,
        };
        if newer {
            self.current = lease.cloned();
        }
    }

    /// Records an observation; `fresh_read` for a GET (see [`Candidate::observe_read`]).
    fn observe(&mut self, now: BootInstant, observed: Observed, fresh_read: bool) {
        let holder = observed.holder().unwrap_or("").to_owned();
        let transitions = match &observed {
            Observed::Present(r) => r.transitions,
            Observed::Absent => 0,
        };
        let leading = self.candidate.is_leader();
        let before = self.status.get();
        let changed = before.holder != holder || (!leading && before.epoch != transitions);
        self.status.update(|s| {
            s.holder = holder;
            if !leading {
                s.epoch = transitions;
            }
        });
        let transition = if fresh_read {
            self.candidate.observe_read(now, observed)
        } else {
            self.candidate.observe(now, observed)
        };
        if let Some(t) = transition {
            self.apply(t, now);
        } else if changed && !self.candidate.is_leader() && self.outputs_healthy {
            // Followers' flag files name the current leader too, for humans and dashboards.
            self.publish_follower();
        }
    }

    /// One attempt: renew when leading, acquire when the Lease is free.
    async fn act(&mut self) {
        let now = BootInstant::now();
        if let Some(t) = self.candidate.tick(now) {
            self.apply(t, now);
        }
        if now < self.next_attempt {
            return;
        }
        if !self.outputs_healthy {
            // Fail closed until the flag file can be written again.
            self.publish_follower();
            self.next_attempt = now.saturating_add(self.candidate.timing().retry_period);
            return;
        }
        if self.candidate.is_leader() {
            self.renew().await;
        } else if self.candidate.may_acquire(now) && !self.step_down.sitting_out(now) {
            self.acquire().await;
        }
    }
}
