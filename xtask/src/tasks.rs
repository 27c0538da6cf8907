//! Every task a contributor runs, by name: what it does and the script that does it. The list
//! is the one place the docs' commands are gathered; the scenario tier checks that every script
//! in `scripts/` is here (a task, or one the tasks call), and that each named script exists.

/// One task: `cargo xtask NAME [ARGS…]` runs `script ARGS…` from the repository root.
pub struct Task {
    pub name: &'static str,
    pub script: &'static str,
    pub what: &'static str,
}

/// The tasks, in the order `cargo xtask` lists them.
pub const TASKS: &[Task] = &[
    Task {
        name: "demo",
        script: "scripts/demo.sh",
        what: "the local demo: apiserver, three pods, handovers you can watch (--node: real pods)",
    },
    Task {
        name: "test",
        script: "scripts/test.sh",
        what: "the test command: every tier against the real control plane (cargo test arguments)",
    },
    Task {
        name: "ci",
        script: ".ci/run",
        what: "what CI runs on a fresh machine: packages, fmt, clippy, builds, every check and test",
    },
    Task {
        name: "real-pods",
        script: "scripts/real-pods.sh",
        what: "the end-to-end tests on a real one-node Kubernetes, every Passmower generation",
    },
    Task {
        name: "side-by-side",
        script: "scripts/side-by-side.sh",
        what: "Passmower 2.4's own election beside ours on real pods: docs/results/side-by-side.md",
    },
    Task {
        name: "campaign",
        script: "scripts/campaign.sh",
        what: "the seeded fault campaign (--duration, --seed): docs/results/campaign.md",
    },
    Task {
        name: "bench",
        script: "scripts/bench.sh",
        what: "the benchmarks beside the peer elections and supervisors: docs/results/benchmarks.md",
    },
    Task {
        name: "bench-generations",
        script: "scripts/bench-generations.sh",
        what: "follower ↔ leader on the real Passmower per generation and way: docs/results/generations.md",
    },
    Task {
        name: "write-inventory",
        script: "scripts/write-inventory.sh",
        what: "every follower write per generation: docs/results/write-inventory.md, compatibility.md",
    },
    Task {
        name: "write-install-compatibility",
        script: "scripts/write-install-compatibility.sh",
        what: "which Kubernetes, Helm and kustomize versions each install path ran with",
    },
    Task {
        name: "dashboard",
        script: "scripts/dashboard-run.sh",
        what: "the dashboard picture from a real run: docs/results/dashboard.svg",
    },
    Task {
        name: "check-chart",
        script: "scripts/check-chart.sh",
        what: "lint and render the charts (HELM=… for Helm 4)",
    },
    Task {
        name: "check-monitoring",
        script: "scripts/check-monitoring.sh",
        what: "the alert rules (promtool) and the Grafana dashboard the charts ship",
    },
    Task {
        name: "check-static-binary",
        script: "scripts/check-static-binary.sh",
        what: "the release binary is static and runs from an empty root",
    },
    Task {
        name: "check-arm64",
        script: "scripts/check-arm64.sh",
        what: "the arm64 release binary under qemu-user: --version, inject, an election",
    },
    Task {
        name: "release",
        script: "scripts/release.sh",
        what: "a release step by step, or `dry-run` for this machine (nothing pushed): docs/release.md",
    },
    Task {
        name: "sidecar-image",
        script: "scripts/build-sidecar-image.sh",
        what: "the sidecar image as an OCI archive, without a container engine",
    },
    Task {
        name: "passmower-app",
        script: "scripts/build-passmower-app.sh",
        what: "an upstream Passmower tree prepared to run as a process (PME_UPSTREAM)",
    },
    Task {
        name: "control-plane",
        script: "scripts/control-plane.sh",
        what: "a throwaway kube-apiserver + etcd on loopback, as the demo starts it",
    },
];

/// Scripts no contributor runs by name: the tasks above call them (tool builds cached by
/// version, helpers of a script).
pub const CALLED_BY_TASKS: &[&str] = &[
    "scripts/build-actionlint.sh",
    "scripts/build-bench-peers.sh",
    "scripts/build-helm.sh",
    "scripts/build-kustomize.sh",
    "scripts/build-node-images.sh",
    "scripts/build-node.sh",
    "scripts/build-promtool.sh",
    "scripts/build-test-cluster.sh",
    "scripts/check-dashboard.py",
    "scripts/oci-image.py",
    "scripts/render-dashboard.py",
    "scripts/render-inventory.py",
];
