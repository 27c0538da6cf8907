//! Moving a running Passmower 2.4 install between its own election and ours, on real pods: the
//! user adds `inject` as the post-renderer of a running release (`helm upgrade`), and later
//! takes it away again. Each time the rollout runs old and new pods side by side, each side
//! electing its own way: Passmower's own election on `passmower-operators` in the pods without
//! our elector, ours in the others. `elect --native-lease` (inject sets it for 2.4) has our
//! leader hold `passmower-operators` too, under its pod name, so that the two sides never run
//! operators at once; Redis writes pass no write fence, so nothing else would stop them.
//!
//! Checked from outside the pods, for the whole rollout and a lease duration after it: every
//! 100 ms which pods run Passmower's operators (from their processes), and every operator write
//! the apiserver admitted (audit log) or Redis took (`MONITOR`), set against the pod that
//! `passmower-operators` named at that instant, the one Lease both sides honour. The way in
//! starts from upstream's image as shipped (its shell drops the kubelet's SIGTERM, so an old
//! leader runs until its grace period ends); the way back must leave no stretch without an
//! operator longer than that Lease's duration. The same from and back to `fence-only`
//! (Passmower's own election with our write fence).

use std::time::{Duration, Instant};

use pme_testkit::node::audit::{self, now_us, Holders};
use pme_testkit::node::passmower::{ElectionMode, Install, Release, Retrofit, UPSTREAM_LEASE};
use pme_testkit::node::redis_monitor::{self, Monitor};
use pme_testkit::node::writers;
use pme_testkit::node::{report, Node};

use crate::real_pods::{OperatorSampler, RedisClients, ThawWindow};

/// What one move showed.
struct Move {
    /// `FROM-to-TO`; also the OIDCClient created at the switch.
    name: String,
    /// `helm upgrade` to steady again (every replica replaced, Ready, a leader renewing).
    rollout: Duration,
    /// Time with two pods running operators at once (sampled).
    two_operators_ms: f64,
    /// The longest stretch with no pod running operators (sampled).
    no_operator_ms: f64,
    /// Operator writes both stores took, and those from a pod `passmower-operators` did not
    /// name at that instant.
    writes: usize,
    non_holder: Vec<String>,
    /// The pods seen running operators, in order.
    leaders: Vec<String>,
    /// Its resident memory per pod, median and largest (MiB).
    pod_rss_mib: Option<(f64, f64)>,
}

/// Upstream's election alone (its image as shipped) → ours → upstream's election alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_moves_to_ours_and_back_with_one_writer_at_a_time() {
    // A node of its own: the chart's CRDs belong to one release per cluster.
    moves(
        concat!(module_path!(), "::upstream"),
        ElectionMode::Upstream,
    )
    .await;
}

/// Upstream's election with our write fence (`--passmower-election=fence-only`) → ours →
/// fence-only again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_only_and_ours_trade_places_with_one_writer_at_a_time() {
    moves(
        concat!(module_path!(), "::fence_only"),
        ElectionMode::FenceOnly,
    )
    .await;
}

/// On the node of test group `group`, installs Passmower 2.4 with `from` deciding, moves it to
/// ours and back to `from`, and checks both moves.
async fn moves(group: &'static str, from: ElectionMode) {
    let node_use = Node::of_group(group).await;
    let node = node_use.node();
    let redis_db = 2;
    let client = node.admin_client().await;
    let ns = node.new_namespace(from.name()).await;
    let release = Release {
        replicas: 3,
        retrofit: Retrofit::PostRenderer,
        extra_env: &[],
        stages: &[],
    };
    let t0 = Instant::now();
    let mut install = Install::install_as(node, &ns, redis_db, &release, from).await;
    report(&format!(
        "election-move: Passmower 2.4 installed with election {}: 3 Ready and a leader in {:.1}s",
        from.name(),
        t0.elapsed().as_secs_f64()
    ));
    let monitor = Monitor::start(
        node,
        &node
            .layout
            .path(&format!("election-move-{}-redis.log", from.name())),
    );

    let way_in = move_to(
        node,
        &client,
        &mut install,
        &monitor,
        redis_db,
        ElectionMode::Ours,
    )
    .await;
    let way_back = move_to(node, &client, &mut install, &monitor, redis_db, from).await;

    let lease_duration_s = install
        .lease_spec(&client)
        .await
        .and_then(|s| s.lease_duration_seconds)
        .expect("passmower-operators declares its duration");
    for m in [&way_in, &way_back] {
        report(&format!(
            "election-move: {}: rollout {:.1}s; two pods running operators {:.0} ms; longest with none {:.0} ms; operator writes {} (apiserver and Redis), from a non-holder of {UPSTREAM_LEASE} {}; pods running operators in turn {:?}; memory per pod {}",
            m.name,
            m.rollout.as_secs_f64(),
            m.two_operators_ms,
            m.no_operator_ms,
            m.writes,
            m.non_holder.len(),
            m.leaders,
            m.pod_rss_mib.map_or("-".into(), |(median, peak)| format!(
                "{median:.0} MiB median, {peak:.0} MiB largest"
            )),
        ));
        assert_eq!(
            m.two_operators_ms, 0.0,
            "{}: two pods ran operators at once (pods in turn: {:?})",
            m.name, m.leaders
        );
        assert!(
            m.non_holder.is_empty(),
            "{}: operator writes from a pod {UPSTREAM_LEASE} did not name: {:?}",
            m.name,
            m.non_holder
        );
    }
    assert!(
        way_back.no_operator_ms <= (lease_duration_s as f64) * 1000.0,
        "{}: no pod ran operators for {:.0} ms, longer than {UPSTREAM_LEASE}'s {lease_duration_s}s",
        way_back.name,
        way_back.no_operator_ms
    );
}

/// Switches `install` to `to` with `helm upgrade`, creates an OIDCClient at once (who runs the
/// operators during the rollout reconciles it), and watches until steady again and a lease
/// duration more (a takeover the rollout set off has happened by then).
async fn move_to(
    node: &'static Node,
    client: &kube::Client,
    install: &mut Install,
    monitor: &Monitor,
    redis_db: u32,
    to: ElectionMode,
) -> Move {
    let name = format!("{}-to-{}", install.election.name(), to.name());
    let sampler = OperatorSampler::start(
        node,
        install,
        client.clone(),
        ThawWindow::default(),
        RedisClients::default(),
    );
    let t_begin = now_us();
    let started = Instant::now();
    install.switch_election(node, to).await;
    install.create_client(client, &name).await;
    install.wait_steady(node, Duration::from_secs(600)).await;
    let rollout = started.elapsed();
    let reconciled =
        pme_testkit::wait_until_async(Duration::from_secs(240), Duration::from_millis(200), || {
            install.client_reconciled(client, &name)
        })
        .await;
    assert!(
        reconciled,
        "{name}: the OIDCClient created at the switch was not reconciled in 240s\n{}",
        node.logs_tail(15)
    );
    tokio::time::sleep(install.timings.lease_duration + 2 * install.timings.retry_period).await;
    let samples = sampler.finish().await;
    let t_end = now_us();

    let api = audit::read(&node.audit_log());
    // This install's database only: the node may run another install meanwhile.
    let redis: Vec<redis_monitor::Monitored> = monitor
        .read()
        .into_iter()
        .filter(|m| m.db == redis_db)
        .collect();
    let ops = writers::operator_writes(&api, &redis, &install.user(), t_begin, t_end);
    let holders = Holders::from_writes(&api, &install.namespace, UPSTREAM_LEASE);
    let non_holder = writers::non_holder(&ops, &holders)
        .into_iter()
        .map(|w| {
            format!(
                "{:?} {} from {} at +{} ms (holder then: {:?})",
                w.store,
                w.what,
                w.ip,
                (w.t_us - t_begin) / 1000,
                holders.at(w.t_us)
            )
        })
        .collect();
    Move {
        name,
        rollout,
        two_operators_ms: samples.two_ms,
        no_operator_ms: samples.longest_none_ms,
        writes: ops.iter().filter(|w| w.admitted).count(),
        non_holder,
        leaders: samples.leaders.iter().map(|(pod, _)| pod.clone()).collect(),
        pod_rss_mib: samples.pod_rss_mib(),
    }
}
