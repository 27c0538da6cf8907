//! `inject` and the warm standby of the leader instance: `supervise --leader-standby` by default
//! with `--on-change=leader-instance` (Passmower's), off with `--no-leader-standby` or
//! `ELECTOR_NO_LEADER_STANDBY`, and never in restart mode, which has no leader instance.

use crate::golden::{golden, inject, ExitStatus};

/// The supervisor's flags in the output's app container, before its `--`.
fn supervise_flags(args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let out = inject(
        &[&["--namespace", "auth"], args].concat(),
        &golden("passmower.in.yaml"),
        env,
    );
    assert_eq!(out.status, ExitStatus::Code(0), "stderr: {}", out.stderr);
    let start = out
        .stdout
        .find("- supervise")
        .expect("supervise in the output");
    out.stdout[start..]
        .lines()
        .map(|l| {
            l.trim()
                .trim_start_matches("- ")
                .trim_matches('\'')
                .to_owned()
        })
        .take_while(|l| l != "--")
        .filter(|l| l.starts_with("--on-change") || l.starts_with("--leader-"))
        .filter(|l| !l.starts_with("--leader-env"))
        .collect()
}

#[test]
fn passmower_gets_a_warm_standby_unless_turned_off() {
    let warm = [
        "--on-change=leader-instance",
        "--leader-port-map=9090=19090",
        "--leader-port-map=*=0",
        "--leader-health-url=http://127.0.0.1:19090/health",
        "--leader-standby",
    ];
    assert_eq!(supervise_flags(&[], &[]), warm);
    assert_eq!(supervise_flags(&["--on-change=leader-instance"], &[]), warm);
    assert_eq!(supervise_flags(&["--no-leader-standby"], &[]), warm[..4]);
    assert_eq!(
        supervise_flags(&[], &[("ELECTOR_NO_LEADER_STANDBY", "true")]),
        warm[..4]
    );
    // Restart mode has no leader instance to keep warm.
    assert!(supervise_flags(&["--on-change=restart"], &[]).is_empty());
}
