//! The election loop: drives the [`Candidate`] with Lease observations, API results and the
//! boot clock; publishes every transition; hands the Lease over on SIGTERM/SIGINT.
//!
//! Order of concerns in every iteration: first the dead man's switch (a lapsed grant demotes
//! before anything else, e.g. right after a SIGSTOP/SIGCONT), then signals, then watch events,
//! then the timer for the next renew, acquisition attempt or re-check. API calls race the
//! grant's expiry, so a hung call cannot delay a demotion.
//!
//! A follower re-reads the Lease when it has heard nothing of it for longer than a holder's
//! renewals explain (two retry periods, then backing off to the lease duration), whatever state
//! the watch claims to be in; a re-read that shows a change the watch did not deliver restarts
//! the watch. With a live leader the watch delivers a renewal every retry period, so a healthy
//! watch costs no extra request.
//!
//! `lease_calls` holds the API calls, `publish` the outputs of a transition, `handover` the
//! demote-ack-release sequence of a shutdown, `adopt` the start-up: adopting the Lease from the
//! pod's previous elector process, or starting as a follower.

mod adopt;
mod contention;
mod handover;
mod lease_calls;
mod native;
mod publish;
mod step_down;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_tokio::Signals;

use super::consumer::{ConsumerCheck, ConsumerState};
use super::events::{EventRecorder, PodRef};
use super::metrics::Metrics;
use super::options::ElectConfig;
use super::outputs::Outputs;
use super::own_pod::{OwnPod, PodState};
use super::probes::{self, ProbeState};
use super::status::SharedStatus;
use crate::clock::{self, BootInstant};
use crate::elect::lease_api::{observe, LeaseApi, WatchItem};
use crate::election::adoption::Inheritance;
use crate::election::candidate::Source;
use crate::election::identity;
use crate::election::record::Observed;
use crate::election::report::TermStart;
use crate::election::Candidate;
use crate::runtime::{self, RoleError};

/// The User-Agent of every API request, so audit logs and API priority and fairness can tell
/// the elector from other clients of the same ServiceAccount. (kube 5 offers no TCP keepalive
/// setting on its default stack; dead connections are caught by the per-call timeouts and the
/// watch's idle limit instead.)
pub const USER_AGENT: &str = concat!("passmower-elector/", env!("CARGO_PKG_VERSION"), " (elect)");

/// The holder identity of this process (see [`identity::build`]), with a random suffix of its
/// own so two processes of one pod never share one.
fn holder_identity(base: &str, pod_uid: Option<&str>) -> String {
    identity::build(base, pod_uid, process_suffix())
}

/// 32 random bits from the kernel.
fn process_suffix() -> u32 {
    let mut bytes = [0u8; 4];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_ok();
    if random {
        u32::from_le_bytes(bytes)
    } else {
        // Without /dev/urandom, pid and boot time still differ between processes of one node.
        (std::process::id() ^ (crate::clock::BootInstant::now().as_nanos() as u32)).rotate_left(7)
    }
}

/// Sets up the probe server, the API client and signals, then runs the loop to the end. What
/// cannot be set up ends the role before the loop starts (see [`crate::runtime`]).
pub async fn start(config: ElectConfig) -> Result<ExitCode, RoleError> {
    let holder = holder_identity(&config.identity, config.pod_uid.as_deref());
    let listener = probes::bind(config.probe_addr).map_err(|source| RoleError::Listen {
        flag: "--probe-addr",
        addr: config.probe_addr,
        source,
    })?;
    let client = runtime::kube_client(Some(USER_AGENT)).await?;
    let signals = Signals::new([SIGTERM, SIGINT])
        .map_err(|e| RoleError::start("cannot install signal handlers", e))?;

    let status = SharedStatus::default();
    let (metrics, registry) = Metrics::new(status.clone());
    status.update(|s| {
        s.identity = holder.clone();
        s.loop_heartbeat = BootInstant::now();
    });
    let probe_state = Arc::new(ProbeState {
        status: status.clone(),
        registry,
        timing: config.timing,
        leader_app: config
            .leader_app_metrics_port
            .map(super::leader_app::LeaderAppMetrics::new),
    });
    // Its own thread and runtime: nothing the probe port receives can delay the loop.
    probes::spawn(listener, probe_state)
        .map_err(|e| RoleError::start("cannot start the probe server", e))?;

    let api = LeaseApi::new(
        client.clone(),
        &config.namespace,
        &config.lease_name,
        config.timing.api_timeout(),
    );
    // A demotion push is answered once the consumer has stopped, which may take kill grace.
    let push_timeout = config.timing.kill_grace + Duration::from_secs(2);
    // Before anything of ours is written to the volume: what the previous elector of this pod
    // left there (its token is about to be replaced by ours).
    let inheritance = super::outputs::inherit::read(&config.flag_file, BootInstant::now());
    let mut outputs = Outputs::new(
        config.flag_file.clone(),
        api.reference(),
        config.toggle_url.clone(),
        push_timeout,
        config.timing.retry_period,
        config.timing.renew_deadline,
        config.timing.kill_grace,
    )
    .map_err(|e| RoleError::start("cannot make this elector's grant key", e))?;
    if let Some(until) = inheritance
        .as_ref()
        .and_then(|i| i.window(BootInstant::now()))
    {
        outputs.inherit_leader_grant(until);
    }
    // Watched only once the start-up (adoption) is decided: the adoption is a read and one
    // conditional write that must land while the previous elector's grant still runs, and
    // nothing else of ours should stand in their way; until then the pod counts as pending.
    let own_pod_target = match &config.pod {
        Some((name, namespace)) => Ok(OwnPodTarget {
            client: client.clone(),
            namespace: namespace.clone(),
            name: name.clone(),
            uid: config.pod_uid.clone(),
            timeout: config.timing.api_timeout(),
        }),
        None => Err(PodState::Unknown {
            why: "POD_NAME is not set (downward API metadata.name): the elector cannot tell \
                  whether its pod is terminating"
                .to_owned(),
        }),
    };
    let pod_ref = config.pod.as_ref().map(|(name, namespace)| PodRef {
        name: name.clone(),
        namespace: namespace.clone(),
        uid: config.pod_uid.clone(),
    });
    let events = config.events.then(|| {
        EventRecorder::new(
            client.clone(),
            &config.namespace,
            &config.lease_name,
            pod_ref,
            &holder,
        )
    });
    if let Some(period) = config.write_fence_check {
        super::fence_check::FenceCheck {
            client: client.clone(),
            namespace: config.namespace.clone(),
            lease_name: config.lease_name.clone(),
            period,
            timeout: config.timing.api_timeout(),
            status: status.clone(),
            gauge: metrics.write_fence.clone(),
            events: events.clone(),
        }
        .spawn();
    }
    tracing::info!(
        identity = %holder,
        lease = %api.reference(),
        flag_file = %config.flag_file.display(),
        lease_duration = ?config.timing.lease_duration,
        renew_deadline = ?config.timing.renew_deadline,
        retry_period = ?config.timing.retry_period,
        kill_grace = ?config.timing.kill_grace,
        consumer_check = config.consumer.mode.as_str(),
        consumer_timeout = ?config.consumer.timeout,
        "elector starting"
    );
    let native = config.native_lease.as_deref().map(|name| {
        tracing::info!(lease = %name, identity = %config.identity,
            "holding Passmower's own Lease beside ours (--native-lease)");
        native::Native::new(
            LeaseApi::new(
                client.clone(),
                &config.namespace,
                name,
                config.timing.api_timeout(),
            ),
            &config.identity,
        )
    });
    let now = BootInstant::now();
    let elector = Elector {
        candidate: Candidate::new(holder, config.timing),
        api,
        outputs,
        status,
        metrics,
        events,
        current: None,
        next_attempt: now,
        failures: 0,
        last_heard: now,
        quiet_rechecks: 0,
        restart_watch: false,
        history_breaks_logged: 0,
        outputs_healthy: true,
        release_pending: false,
        step_down: step_down::StepDown::new(config.max_leader_failures),
        inheritance,
        adopting: false,
        predecessor: None,
        consumer_check: config.consumer,
        consumer: None,
        consumer_live_at: now,
        said: contention::Said::default(),
        term_start: None,
        own_pod: OwnPod::fixed(PodState::Pending),
        own_pod_target: Some(own_pod_target),
        pod_state: PodState::Pending,
        native,
    };
    Ok(elector.run(signals).await)
}

struct Elector {
    candidate: Candidate,
    api: LeaseApi,
    outputs: Outputs,
    status: SharedStatus,
    metrics: Metrics,
    events: Option<EventRecorder>,
    /// The Lease as the candidate sees it: the base (and precondition) of our next write.
    current: Option<Lease>,
    /// Earliest time of the next renew or acquisition attempt.
    next_attempt: BootInstant,
    /// Failed attempts in a row (errors and conflicts): they space the next attempts out.
    failures: u32,
    /// When the Lease's content last reached us (a watch event or a fresh answer; bookmarks
    /// do not count: a stuck watch cache sends those too).
    last_heard: BootInstant,
    /// Re-checks in a row that found nothing new: they space the next ones out.
    quiet_rechecks: u32,
    /// Set by a re-check that found a change the watch missed: the loop replaces the watch.
    restart_watch: bool,
    /// History breaks already reported in the log.
    history_breaks_logged: u64,
    /// False after the flag file could not be written: we do not contend until it can be.
    outputs_healthy: bool,
    /// Set when we demoted ourselves while still named in the Lease (fail closed): hand it over.
    release_pending: bool,
    /// Stepping down for an app that cannot run as leader, and sitting out afterwards.
    step_down: step_down::StepDown,
    /// What the pod's previous elector process left on the volume; taken by the start-up.
    inheritance: Option<Inheritance>,
    /// Set while an adoption may still happen: no follower object may be published then, or it
    /// would demote the app that runs under the previous elector's grant.
    adopting: bool,
    /// The record of our pod's previous elector process that a hand-over releases too (when
    /// the app it led keeps failing, see `adopt`).
    predecessor: Option<String>,
    /// How the consumer proves it is alive (see [`super::consumer`]).
    consumer_check: ConsumerCheck,
    /// The consumer's state as last judged (None before the first judgement): only a live one
    /// lets this pod contend.
    consumer: Option<ConsumerState>,
    /// When the consumer was last judged live, or this pod's term began (whichever is later):
    /// a leader whose consumer stays unproven for the consumer timeout after it steps down.
    consumer_live_at: BootInstant,
    /// What this pod last said (Event) about whether it contends.
    said: contention::Said,
    /// How the current (or last) term began: written into the Lease with every renewal.
    term_start: Option<TermStart>,
    /// The watch on this pod's own Pod object: a terminating pod does not take the Lease.
    own_pod: OwnPod,
    /// Its state as last taken over by the loop.
    pod_state: PodState,
    /// What to watch once the start-up is over (or the fixed state when there is no Pod).
    own_pod_target: Option<Result<OwnPodTarget, PodState>>,
    /// Passmower's own Lease, held beside ours (`--native-lease`).
    native: Option<native::Native>,
}

/// The Pod the elector watches, from the downward API.
struct OwnPodTarget {
    client: kube::Client,
    namespace: String,
    name: String,
    uid: Option<String>,
    timeout: Duration,
}

impl Elector {
    async fn run(mut self, mut signals: Signals) -> ExitCode {
        let timing = *self.candidate.timing();
        let mut watch = self.api.spawn_watch(timing.retry_period);
        if let adopt::StartUp::Shutdown = self.start_up(&mut watch, &mut signals).await {
            return self.shutdown(&mut signals).await;
        }
        self.own_pod = match self.own_pod_target.take() {
            Some(Ok(t)) => OwnPod::spawn(t.client, &t.namespace, &t.name, t.uid, t.timeout),
            Some(Err(state)) => OwnPod::fixed(state),
            None => OwnPod::fixed(PodState::Pending),
        };
        self.on_pod_change();
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
            if !self.candidate.is_leader() && self.native_release_at().is_some_and(|at| now >= at) {
                self.native_release().await;
            }
            self.step_down_if_app_failing(now).await;
            self.check_consumer(now).await;
            if std::mem::take(&mut self.restart_watch) {
                // Dropping the old handle stops its task, stuck as it may be.
                watch = self.api.spawn_watch(timing.retry_period);
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
                _ = self.own_pod.changed() => self.on_pod_change(),
                _ = clock::sleep_until(wake) => self.act().await,
            }
        }
    }

    /// Whether this pod may take the Lease: its consumer, as last judged, is live, and its
    /// Pod is not terminating.
    fn may_contend(&self) -> bool {
        self.consumer.is_some_and(ConsumerState::may_contend) && self.pod_state.may_contend()
    }

    /// The own Pod's state changed: take it over, report it, and contend now if that is what
    /// changed (a free Lease waits for nothing else).
    fn on_pod_change(&mut self) {
        let state = self.own_pod.state();
        if state == self.pod_state {
            return;
        }
        match &state {
            PodState::Terminating { .. } => tracing::info!(
                pod = state.name(),
                leader = self.candidate.is_leader(),
                "{state}: not taking the Lease from now on (a leader keeps it until it is \
                 stopped, then hands it over)"
            ),
            _ => tracing::info!(pod = state.name(), "{state}"),
        }
        self.metrics
            .pod_terminating
            .set(i64::from(matches!(state, PodState::Terminating { .. })));
        self.status.update(|s| s.pod = state.clone());
        self.pod_state = state;
        self.report_contention(self.consumer, BootInstant::now());
        if self.may_contend() {
            self.next_attempt = self.next_attempt.min(BootInstant::now());
        }
    }

    /// When the loop must next act: a renew or acquisition attempt, a follower's re-check, or
    /// at least every retry period (heartbeat, fail-closed retry).
    fn next_wake(&self, now: BootInstant) -> BootInstant {
        let heartbeat = now.saturating_add(self.candidate.timing().retry_period);
        if self.candidate.is_leader() {
            return self.next_attempt.min(heartbeat);
        }
        let wake = match self.candidate.free_at() {
            Some(free) if self.outputs_healthy && self.may_contend() => free
                .max(self.next_attempt)
                .max(self.step_down.sit_out_end())
                .min(heartbeat),
            _ => heartbeat,
        };
        let wake = self.native_release_at().map_or(wake, |at| wake.min(at));
        self.recheck_at().map_or(wake, |at| wake.min(at))
    }

    /// When a follower re-reads a Lease it has heard nothing of: two retry periods after the
    /// last news (a live holder renews every retry period), doubling while re-checks find
    /// nothing new, at most one lease duration. Only a Lease that exists: an absent one has no
    /// holder whose renewals could be missed (a Lease created meanwhile under a dead watch makes
    /// the conditional create at the end of the wait fail), and a fresh read of it would restart
    /// its wait (see [`Candidate::observe`](crate::election::Candidate::observe)) for ever.
    fn recheck_at(&self) -> Option<BootInstant> {
        if !matches!(self.candidate.observed(), Some(Observed::Present(_))) {
            return None;
        }
        let timing = self.candidate.timing();
        let interval = (timing.retry_period * 2)
            .saturating_mul(1 << self.quiet_rechecks.min(16))
            .min(timing.lease_duration);
        Some(self.last_heard.saturating_add(interval))
    }

    fn on_watch(&mut self, item: WatchItem) {
        let now = BootInstant::now();
        match item {
            WatchItem::Observed(lease) => {
                self.quiet_rechecks = 0;
                self.on_lease(now, lease.map(|l| *l), Source::Event)
            }
            WatchItem::Read {
                lease,
                sent_at,
                resync,
            } => {
                let source = if resync {
                    Source::Resync { sent_at }
                } else {
                    Source::Read { sent_at }
                };
                self.on_lease(now, lease.map(|l| *l), source)
            }
            WatchItem::Error(e) => {
                self.metrics.api_error(e.kind());
                tracing::debug!(error = %e, "Lease watch interrupted; it resumes by itself");
            }
        }
    }

    /// The watch task saw the Lease.
    fn on_lease(&mut self, now: BootInstant, lease: Option<Lease>, source: Source) {
        self.status.update(|s| {
            s.lease_observed = true;
            s.api_ok = true;
        });
        self.observe(now, lease, source);
        // A release (or anything that frees the Lease) is acted on now, not at the next poll;
        // but not in the middle of a streak of failures, which must stay spaced out.
        if self.candidate.may_acquire(now) && self.failures == 0 {
            self.next_attempt = self.next_attempt.min(now);
        }
    }

    /// Feeds one observation of the Lease to the candidate. When it is accepted (see
    /// [`Source`]), it becomes `current`, the base and precondition of our next write.
    /// Returns whether it was accepted.
    fn observe(&mut self, now: BootInstant, lease: Option<Lease>, source: Source) -> bool {
        self.last_heard = now;
        let observed = observe(lease.as_ref());
        let holder = observed.holder().unwrap_or("").to_owned();
        let transitions = match &observed {
            Observed::Present(r) => r.transitions,
            Observed::Absent => 0,
        };
        let leading = self.candidate.is_leader();
        let seen = self.candidate.observe(now, observed, source);
        self.report_history_breaks();
        if !seen.accepted() {
            return false;
        }
        self.current = lease;
        let before = self.status.get();
        let changed = before.holder != holder || (!leading && before.epoch != transitions);
        self.status.update(|s| {
            s.holder = holder;
            if !leading {
                s.epoch = transitions;
            }
        });
        if let Some(t) = seen.transition() {
            self.apply(t, now);
        } else if changed && !self.candidate.is_leader() && self.outputs_healthy && !self.adopting {
            // Followers' flag files name the current leader too, for humans and dashboards.
            self.publish_follower();
        }
        true
    }

    /// Logs each history break the candidate detected.
    fn report_history_breaks(&mut self) {
        let breaks = self.candidate.history_breaks();
        if breaks > self.history_breaks_logged {
            self.history_breaks_logged = breaks;
            tracing::warn!(
                lease = %self.api.reference(),
                "the Lease's resourceVersion went backwards (etcd restored from an older \
                 snapshot?): following what the API says now; a released or own record must \
                 stay unchanged for a lease duration before it is taken"
            );
        }
    }

    /// One attempt: renew when leading, acquire when the Lease is free; a follower's re-check
    /// when it is due.
    async fn act(&mut self) {
        let now = BootInstant::now();
        if let Some(t) = self.candidate.tick(now) {
            self.apply(t, now);
        }
        if !self.candidate.is_leader() && self.recheck_at().is_some_and(|at| now >= at) {
            self.recheck().await;
        }
        let now = BootInstant::now();
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
            // Upstream's Lease first: a leader that can no longer hold it steps down instead.
            if self.native_keep().await {
                self.renew().await;
            }
        } else if self.candidate.may_acquire(now)
            && !self.step_down.sitting_out(now)
            && self.may_contend()
        {
            if self.native_take().await {
                self.acquire().await;
                if !self.candidate.is_leader() {
                    // Another pod of ours won, or ours could not be taken (an error, a Role
                    // that no longer grants it): upstream's Lease must not keep naming a pod
                    // that does not lead, or upstream's election waits its whole duration.
                    self.native_release().await;
                }
            }
        } else {
            self.native_observe(now).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f40";

    #[test]
    fn holder_identities_differ_per_call() {
        let a = holder_identity("pod", None);
        let b = holder_identity("pod", None);
        assert!(a.starts_with("pod_") && b.starts_with("pod_"));
        assert_eq!(a.len(), "pod_".len() + 8, "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn the_holder_identity_with_a_pod_uid_names_this_pod_and_differs_per_call() {
        let a = holder_identity("passmower-7d9f-abcde", Some(UID));
        let b = holder_identity("passmower-7d9f-abcde", Some(UID));
        let (pa, pb) = (
            identity::HolderIdentity::parse(&a).expect("parses"),
            identity::HolderIdentity::parse(&b).expect("parses"),
        );
        assert_eq!((pa.pod_name, pa.pod_uid), ("passmower-7d9f-abcde", UID));
        assert!(pa.same_pod(&pb));
        assert_ne!(a, b);
    }
}
