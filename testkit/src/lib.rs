//! pme-testkit, the test kit of passmower-elector: real parts for the tests to run against —
//! child processes that cannot outlive the test, free ports, bounded waits, the control plane
//! (etcd + kube-apiserver), the one-node Kubernetes, pods of elector + supervisor + recording
//! app, a fault-injecting proxy — and the single-writer oracles that judge what they did.
//!
//! Nothing here mocks the API server or the kubelet, and everything listens on loopback or in
//! network namespaces the kit creates. The kit does not link the product: it runs its binary
//! ([`elector::binary`]) and reads the repository's scripts and charts ([`repo`]).

pub mod audit;
pub mod clock;
pub mod cluster;
pub mod control_plane;
pub mod elector;
pub mod fence;
pub mod install;
pub mod kubeconfig;
pub mod manifests;
pub mod node;
pub mod oracle;
pub mod passmower;
pub mod pki;
pub mod pods;
pub mod ports;
pub mod probe;
pub mod process;
pub mod proxy;
pub mod recording_app;
pub mod supervise;
pub mod tools;
pub mod wait;

use std::path::{Path, PathBuf};

pub use clock::BootTime;
pub use cluster::{client_from_kubeconfig, rules_without, Cluster, TestNs, DEFAULT_LEASE_NAME};
pub use elector::ElectorProcess;
pub use oracle::grants::{GrantInterval, GrantRecorder, GrantTimeline, GrantView, Seen};
pub use ports::{free_port, free_port_list, free_ports};
pub use proxy::{FaultMode, FaultProxy};
pub use wait::{wait_until, wait_until_async};

/// The shortened election timings of the scenario tests (D 4s, R 1.5s, P 300ms, K 1s): they
/// satisfy the same safety rule as the defaults (R + K + 1s < D) and run in seconds.
pub const FAST_TIMINGS: [&str; 8] = [
    "--lease-duration",
    "4s",
    "--renew-deadline",
    "1500ms",
    "--retry-period",
    "300ms",
    "--kill-grace",
    "1s",
];

/// Fails the test unless `node` runs: the tests of the Node.js preloads (the port map, the
/// standby) need it (Debian `nodejs`, installed by .ci/run).
pub fn needs_node() {
    assert!(
        std::process::Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "this test needs node (Debian package nodejs)"
    );
}

/// Whether a test has what it needs (`have`) to check all it checks. Without it the test says
/// on stderr what is not checked (`what`) and goes on with less, or returns, as it chooses;
/// under CI (`CI` set, as `.ci/run` exports it), where everything is provided, a missing piece
/// is a failure instead: a skip there would be a test that passes without running.
pub fn have_or_skip(have: bool, what: &str) -> bool {
    if !have {
        assert!(
            std::env::var_os("CI").is_none(),
            "under CI this test must run whole, but {what}"
        );
        eprintln!("skipped: {what}");
    }
    have
}

/// Whether this process runs as root (see [`have_or_skip`] for the tests that need it).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The repository's root (the kit is its `testkit/` member): its scripts, charts and docs.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ has a parent")
        .to_owned()
}
