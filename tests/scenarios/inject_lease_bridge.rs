//! `inject --on-change=lease-bridge`, run as the binary: Passmower 2.4 and later as one process
//! per pod whose own election follows the grant. The app container gets the bridge and nothing
//! of the two-instance mode (no port map, standby, leader health probe or converge); a kill
//! grace the supervisor would refuse at the pod's start is refused when the manifest is written.

use crate::golden::{golden, inject, ExitStatus};

/// The app container's `supervise` flags (before `--`) in `stdout`.
fn supervise_flags(stdout: &str) -> Vec<String> {
    let docs: Vec<serde_json::Value> = stdout
        .split("\n---")
        .filter_map(|d| serde_norway::from_str::<serde_json::Value>(d).ok())
        .filter(|d| d["kind"] == "Deployment")
        .collect();
    let containers = docs[0]["spec"]["template"]["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let app = containers
        .iter()
        .find(|c| c["name"] == "passmower")
        .expect("the passmower container");
    app["args"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .take_while(|a| a != "--")
        .collect()
}

#[test]
fn the_lease_bridge_runs_one_process_and_nothing_of_the_two_instance_mode() {
    let input = golden("passmower-2.4.in.yaml");
    let out = inject(
        &["--namespace=auth", "--on-change=lease-bridge"],
        &input,
        &[],
    );
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
    let flags = supervise_flags(&out.stdout);
    assert!(
        flags.contains(&"--on-change=lease-bridge".to_owned()),
        "{flags:?}"
    );
    for absent in [
        "--leader-port-map",
        "--leader-standby",
        "--leader-health-url",
        "--converge-oidc-clients",
    ] {
        assert!(
            !flags.iter().any(|f| f.starts_with(absent)),
            "{absent} in {flags:?}"
        );
    }
    assert!(
        !out.stdout.contains("--leader-app-metrics-port"),
        "the elector proxies no leader instance's metrics"
    );
    // The default leader-instance mode, for contrast.
    let default = inject(&["--namespace=auth"], &input, &[]);
    let flags = supervise_flags(&default.stdout);
    assert!(
        flags.contains(&"--on-change=leader-instance".to_owned()),
        "{flags:?}"
    );
}

#[test]
fn a_kill_grace_under_three_seconds_is_refused_with_the_lease_bridge() {
    let input = golden("passmower-2.4.in.yaml");
    let out = inject(
        &[
            "--namespace=auth",
            "--on-change=lease-bridge",
            "--kill-grace=2s",
        ],
        &input,
        &[],
    );
    assert_eq!(out.status, ExitStatus::Code(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("--kill-grace") && out.stderr.contains("lease-bridge"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "nothing is written on a refusal");
    let out = inject(
        &[
            "--namespace=auth",
            "--on-change=lease-bridge",
            "--kill-grace=3s",
        ],
        &input,
        &[],
    );
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
}
