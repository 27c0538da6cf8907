//! The election loop: drives the [`Candidate`] with Lease observations, API results and the
//! boot clock; publishes every transition; hands the Lease over on SIGTERM/SIGINT.
//!
//! Order of concerns in every iteration: first the dead man's switch (a lapsed grant demotes
//! before anything else, e.g. right after a SIGSTOP/SIGCONT), then signals, then watch events,
//! then the timer for the next renew or acquisition attempt. API calls race the grant's expiry,
//! so a hung call cannot delay a demotion.

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_tokio::Signals;

use super::events::EventRecorder;
use super::metrics::Metrics;
use super::outputs::{AckSource, Outputs};
use super::probes::{self, ProbeState};
use super::status::SharedStatus;
use super::{holder_identity, ElectConfig};
use crate::clock::{self, BootInstant};
use crate::config::ConfigError;
use crate::election::lease_api::{observe, LeaseApi, LeaseApiError, WatchItem};
use crate::election::record::{self, Observed};
use crate::election::timing::MIN_MARGIN;
use crate::election::{Candidate, StopReason, Transition};
use crate::grant::Order;

/// Sets up the probe server, the API client and signals, then runs the loop to the end.
pub async fn start(config: ElectConfig) -> ExitCode {
    let holder = holder_identity(&config.identity);
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
    let outputs = Outputs::new(
        config.flag_file.clone(),
        api.reference(),
        config.toggle_url.clone(),
        push_timeout,
    );
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
            Some(free) if self.outputs_healthy => free.max(self.next_attempt).min(heartbeat),
            _ => heartbeat,
        }
    }

    fn on_watch(&mut self, item: WatchItem) {
        let now = BootInstant::now();
        match item {
            WatchItem::Observed(lease) => {
                let lease = lease.map(|l| *l);
                self.status.update(|s| {
                    s.lease_observed = true;
                    s.api_ok = true;
                });
                self.remember(lease.as_ref());
                self.observe(now, observe(lease.as_ref()));
                // A release (or anything that frees the Lease) is acted on now, not at the next poll.
                if self.candidate.may_acquire(now) {
                    self.next_attempt = self.next_attempt.min(now);
                }
            }
            WatchItem::Error(e) => {
                self.metrics.api_error(e.kind());
                tracing::debug!(error = %e, "Lease watch interrupted; it resumes by itself");
            }
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

    fn observe(&mut self, now: BootInstant, observed: Observed) {
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
        if let Some(t) = self.candidate.observe(now, observed) {
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
        } else if self.candidate.may_acquire(now) {
            self.acquire().await;
        }
    }

    async fn renew(&mut self) {
        let retry = self.candidate.timing().retry_period;
        let Some(current) = self.current.clone() else {
            // The watch saw the Lease deleted under us.
            self.recreate().await;
            return;
        };
        let desired = record::renewed(
            &current,
            self.candidate.holder_id(),
            self.candidate.timing().lease_duration_seconds(),
        );
        let sent_at = BootInstant::now();
        self.next_attempt = sent_at.saturating_add(retry);
        let api = self.api.clone();
        let result = self
            .race_expiry(async move { api.replace(&desired).await })
            .await;
        let now = BootInstant::now();
        match result {
            Ok(lease) => {
                self.metrics
                    .renew_latency
                    .observe(now.saturating_since(sent_at).as_secs_f64());
                self.api_ok(true);
                self.current = Some(lease.clone());
                if let Some(t) = self
                    .candidate
                    .renewed(sent_at, now, Observed::from_lease(&lease))
                {
                    self.apply(t, now);
                }
            }
            Err(LeaseApiError::Conflict) => {
                self.metrics.api_error("conflict");
                // Someone else wrote the Lease: re-read; if it still names us, renew again at once.
                self.refresh().await;
                if self.candidate.is_leader() {
                    self.next_attempt = BootInstant::now();
                }
            }
            Err(LeaseApiError::NotFound) => {
                self.metrics.api_error("not_found");
                tracing::warn!("the Lease was deleted while we held it; recreating it");
                self.recreate().await;
            }
            Err(e) => self.api_failed("renew", &e),
        }
    }

    /// Recreates a deleted Lease while leading. Followers wait a full lease duration after
    /// seeing it absent, so our grant lapses before any of them may create it.
    async fn recreate(&mut self) {
        let desired = record::new_lease(
            self.api.name(),
            self.api.namespace(),
            self.candidate.holder_id(),
            self.candidate.timing().lease_duration_seconds(),
        );
        let sent_at = BootInstant::now();
        let api = self.api.clone();
        let result = self
            .race_expiry(async move { api.create(&desired).await })
            .await;
        let now = BootInstant::now();
        match result {
            Ok(lease) => {
                self.api_ok(true);
                self.current = Some(lease.clone());
                if let Some(t) = self
                    .candidate
                    .renewed(sent_at, now, Observed::from_lease(&lease))
                {
                    self.apply(t, now);
                }
            }
            Err(LeaseApiError::Conflict) => self.refresh().await,
            Err(e) => self.api_failed("recreate", &e),
        }
    }

    async fn acquire(&mut self) {
        let timing = *self.candidate.timing();
        let holder = self.candidate.holder_id().to_owned();
        let absent = matches!(self.candidate.observed(), Some(Observed::Absent));
        let sent_at = BootInstant::now();
        self.next_attempt = sent_at.saturating_add(timing.retry_period);
        let api = self.api.clone();
        let result = if absent {
            let desired = record::new_lease(
                api.name(),
                api.namespace(),
                &holder,
                timing.lease_duration_seconds(),
            );
            api.create(&desired).await
        } else {
            let Some(current) = self.current.clone() else {
                self.refresh().await;
                return;
            };
            api.replace(&record::acquired(
                &current,
                &holder,
                timing.lease_duration_seconds(),
            ))
            .await
        };
        let now = BootInstant::now();
        match result {
            Ok(lease) => {
                self.api_ok(true);
                self.current = Some(lease.clone());
                self.status.update(|s| s.holder = holder.clone());
                if let Some(t) = self
                    .candidate
                    .acquired(sent_at, now, Observed::from_lease(&lease))
                {
                    self.apply(t, now);
                }
            }
            Err(LeaseApiError::Conflict) => {
                // Lost the race (or our copy was stale): re-read and keep following.
                self.metrics.api_error("conflict");
                self.refresh().await;
            }
            Err(LeaseApiError::NotFound) => {
                self.metrics.api_error("not_found");
                self.remember(None);
                self.observe(now, Observed::Absent);
            }
            Err(e) => self.api_failed("acquire", &e),
        }
    }

    /// Re-reads the Lease (after a conflict, or when we have no copy).
    async fn refresh(&mut self) {
        let api = self.api.clone();
        let result = self.race_expiry(async move { api.get().await }).await;
        match result {
            Ok(lease) => {
                self.api_ok(true);
                self.status.update(|s| s.lease_observed = true);
                self.current = lease.clone();
                self.observe(BootInstant::now(), observe(lease.as_ref()));
            }
            Err(e) => self.api_failed("get", &e),
        }
    }

    /// Runs an API call while keeping the dead man's switch: if the grant lapses before the
    /// call returns, the demotion is published at the expiry instant, then the call finishes.
    async fn race_expiry<T>(&mut self, call: impl Future<Output = T>) -> T {
        let mut call = std::pin::pin!(call);
        loop {
            let Some(expiry) = self.candidate.term().map(|t| t.expiry) else {
                return call.await;
            };
            tokio::select! {
                biased;
                out = &mut call => return out,
                _ = clock::sleep_until(expiry) => {
                    let now = BootInstant::now();
                    if let Some(t) = self.candidate.tick(now) {
                        self.apply(t, now);
                    }
                }
            }
        }
    }

    fn api_ok(&self, ok: bool) {
        self.status.update(|s| s.api_ok = ok);
    }

    fn api_failed(&mut self, what: &'static str, e: &LeaseApiError) {
        self.metrics.api_error(e.kind());
        self.api_ok(false);
        if self.candidate.is_leader() {
            tracing::warn!(call = what, error = %e, "Lease call failed; the grant lapses unless a renew succeeds in time");
        } else {
            tracing::debug!(call = what, error = %e, "Lease call failed");
        }
    }

    /// Publishes a transition to every output, the log, the metrics and Events.
    fn apply(&mut self, transition: Transition, now: BootInstant) {
        let holder = self.candidate.holder_id().to_owned();
        match transition {
            Transition::BecameLeader { epoch, expiry } => {
                if self.publish_leader(epoch, expiry).is_err() {
                    return;
                }
                tracing::info!(identity = %holder, epoch, grant_for = ?expiry.saturating_since(now), "became leader");
                self.metrics.is_leader.set(1);
                self.metrics.transition("became");
                self.status.update(|s| {
                    s.epoch = epoch;
                    s.since = Some(SystemTime::now());
                    s.last_renew_ok = Some(now);
                });
                self.event(
                    "BecameLeader",
                    format!("{holder} became leader (epoch {epoch})"),
                );
            }
            Transition::Renewed { epoch, expiry } => {
                if self.publish_leader(epoch, expiry).is_ok() {
                    self.status.update(|s| s.last_renew_ok = Some(now));
                }
            }
            Transition::StoppedLeading { reason } => {
                let lease_holder = self.status.get().holder;
                let (_, written) = self
                    .outputs
                    .follower(&lease_holder, self.status.get().epoch);
                if let Err(e) = &written {
                    tracing::error!(error = %e, "cannot write the follower flag file; the grant's own expiry still stops the consumer");
                }
                tracing::info!(identity = %holder, %reason, "stopped leading");
                self.metrics.is_leader.set(0);
                self.metrics.grant_expiry.set(0.0);
                self.metrics.transition("stopped");
                self.status.update(|s| {
                    s.grant_expiry = None;
                    s.since = Some(SystemTime::now());
                });
                self.event(
                    "StoppedLeading",
                    format!("{holder} stopped leading: {reason}"),
                );
                if reason == StopReason::OutputFailed {
                    self.release_pending = true;
                }
            }
        }
    }

    /// Writes and pushes a leader grant; on failure demotes (fail closed) and returns Err.
    fn publish_leader(&mut self, epoch: u64, expiry: BootInstant) -> Result<(), ()> {
        let holder = self.candidate.holder_id().to_owned();
        match self.outputs.leader(&holder, epoch, expiry) {
            Ok(_) => {
                self.metrics.grant_expiry.set(
                    clock::wall_clock_of(expiry)
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64()),
                );
                self.status.update(|s| s.grant_expiry = Some(expiry));
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot write the leader flag file; failing closed");
                self.outputs_healthy = false;
                if let Some(t) = self.candidate.demote(StopReason::OutputFailed) {
                    self.apply(t, BootInstant::now());
                }
                Err(())
            }
        }
    }

    /// Publishes follower mode (start-up, and the fail-closed retry).
    fn publish_follower(&mut self) -> Option<Order> {
        let status = self.status.get();
        let (order, written) = self.outputs.follower(&status.holder, status.epoch);
        match written {
            Ok(()) => {
                if !self.outputs_healthy {
                    tracing::info!("the flag file is writable again; contending for the Lease");
                }
                self.outputs_healthy = true;
            }
            Err(e) => {
                if self.outputs_healthy {
                    tracing::error!(error = %e, "cannot write the flag file; not contending until it can be written");
                }
                self.outputs_healthy = false;
            }
        }
        Some(order)
    }

    fn event(&self, reason: &'static str, message: String) {
        if let Some(events) = &self.events {
            events.record(reason, message);
        }
    }

    /// Whether the Lease, as we last saw it, names us.
    fn named_in_lease(&self) -> bool {
        self.candidate.observed().and_then(Observed::holder) == Some(self.candidate.holder_id())
    }

    /// SIGTERM/SIGINT: demote, wait for the consumer's ack (or kill grace + margin), release,
    /// exit 0.
    async fn shutdown(mut self, signals: &mut Signals) -> ExitCode {
        if self.candidate.is_leader() || self.named_in_lease() {
            if !self.hand_over(Some(signals)).await {
                return ExitCode::FAILURE;
            }
        } else {
            self.publish_follower();
        }
        tracing::info!("elector stopped");
        ExitCode::SUCCESS
    }

    /// Demotes, waits for the ack, then releases the Lease. Returns false when a second signal
    /// cut the wait short (the Lease is then left to expire).
    async fn hand_over(&mut self, signals: Option<&mut Signals>) -> bool {
        let now = BootInstant::now();
        if let Some(t) = self.candidate.demote(StopReason::Shutdown) {
            self.apply(t, now);
        }
        // A fresh demotion stamp, so the ack we wait for is for this very object.
        let Some(order) = self.publish_follower() else {
            return true;
        };
        let demoted_at = BootInstant::now();
        // Without an ack, give the consumer its kill grace *plus the margin*: its grace starts
        // when it reads the demotion, which is later than when we wrote it (push delivery, a
        // busy or CPU-throttled container). Releasing at exactly K let the next leader start
        // while a late consumer's app was still running (fault campaign, handover-stall). The
        // margin is the one the takeover path reserves (R + K + margin < D).
        let deadline = demoted_at
            .saturating_add(self.candidate.timing().kill_grace)
            .saturating_add(MIN_MARGIN);
        let ack = match signals {
            Some(signals) => tokio::select! {
                ack = self.outputs.wait_for_demotion_ack(order, deadline) => ack,
                _ = signals.next() => {
                    tracing::warn!("second signal: exiting at once without releasing the Lease");
                    return false;
                }
            },
            None => self.outputs.wait_for_demotion_ack(order, deadline).await,
        };
        let waited = BootInstant::now().saturating_since(demoted_at);
        match ack {
            AckSource::KillGrace => {
                tracing::info!(
                    ?waited,
                    "no ack from the consumer; kill grace and margin have passed"
                )
            }
            source => tracing::info!(?source, ?waited, "consumer acknowledged the demotion"),
        }
        self.release().await;
        true
    }

    /// Releases the Lease if it still names us: holder "" and a one-second duration.
    async fn release(&mut self) {
        for _ in 0..3 {
            if !self.named_in_lease() {
                return;
            }
            let Some(current) = self.current.clone() else {
                return;
            };
            match self.api.replace(&record::released(&current)).await {
                Ok(lease) => {
                    tracing::info!(lease = %self.api.reference(), "released the Lease");
                    self.current = Some(lease.clone());
                    self.candidate
                        .observe(BootInstant::now(), Observed::from_lease(&lease));
                    return;
                }
                Err(LeaseApiError::Conflict) => self.refresh().await,
                Err(e) => {
                    tracing::warn!(error = %e, "could not release the Lease; it expires on its own");
                    return;
                }
            }
        }
    }
}
