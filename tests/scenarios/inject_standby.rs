//! `inject` and the warm standby of the leader instance: `supervise --leader-standby` by default
//! with `--on-change=leader-instance` (Passmower's) where the app container's memory request
//! plans for two instances (or nothing is planned), off with `--no-leader-standby` or
//! `ELECTOR_NO_LEADER_STANDBY` or a request below that (said on stderr), and never in restart
//! mode, which has no leader instance.

use crate::golden::{golden, inject, ExitStatus};

/// The golden Passmower Deployment with its app container's memory request set to `request`.
fn with_request(request: &str) -> String {
    let input = golden("passmower.in.yaml");
    assert!(
        input.contains("memory: 256Mi"),
        "the golden input's request moved"
    );
    input.replace("memory: 256Mi", &format!("memory: {request}"))
}

/// The supervisor's flags in the output's app container, before its `--` (the app container
/// requesting 512Mi of memory: room for two instances).
fn supervise_flags(args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    supervise_flags_of(&with_request("512Mi"), args, env).0
}

/// The supervisor's flags for `input`, and inject's stderr.
fn supervise_flags_of(input: &str, args: &[&str], env: &[(&str, &str)]) -> (Vec<String>, String) {
    let out = inject(&[&["--namespace", "auth"], args].concat(), input, env);
    assert_eq!(out.status, ExitStatus::Code(0), "stderr: {}", out.stderr);
    let start = out
        .stdout
        .find("- supervise")
        .expect("supervise in the output");
    let flags = out.stdout[start..]
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
        .collect();
    (flags, out.stderr)
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

/// Pods sized for one instance (a memory request below 400Mi, or with no request a limit
/// below it) get no standby, which would put a second instance in every pod; inject says so.
/// No request and no limit: the standby stays.
#[test]
fn pods_sized_for_one_instance_get_no_standby_and_are_told_why() {
    let cold = [
        "--on-change=leader-instance",
        "--leader-port-map=9090=19090",
        "--leader-port-map=*=0",
        "--leader-health-url=http://127.0.0.1:19090/health",
    ];
    let (flags, stderr) = supervise_flags_of(&with_request("256Mi"), &[], &[]);
    assert_eq!(flags, cold);
    for needle in [
        "resources.requests.memory is 256Mi, below 400Mi",
        "warm standby (--leader-standby)",
        "request at least 400Mi",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    // Said once it is turned off: no note.
    let (flags, stderr) = supervise_flags_of(&with_request("256Mi"), &["--no-leader-standby"], &[]);
    assert_eq!(flags, cold);
    assert!(!stderr.contains("warm standby"), "{stderr}");
    // Nothing planned: kept.
    let unplanned = golden("passmower.in.yaml").replace("              memory: 256Mi\n", "");
    assert!(
        !unplanned.contains("memory:"),
        "the golden input plans memory elsewhere"
    );
    let (flags, _) = supervise_flags_of(&unplanned, &[], &[]);
    assert_eq!(flags.last().map(String::as_str), Some("--leader-standby"));
}
