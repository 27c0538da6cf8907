//! Bad input to `supervise` exits 2 with a message naming the flag, before any child starts.

use std::net::TcpListener;
use std::process::{Command, Output};

use crate::product::*;
use pme_testkit::free_port;
use pme_testkit::wait::{wait_until, POLL};

/// Runs `supervise` with `args` (bounded by the supervisor's own validation, which happens before
/// anything long-running), with a command that would leave a marker if it were ever started.
fn run(sb: &Sandbox, args: &[&str], with_command: bool) -> Output {
    run_in(sb, args, with_command.then_some(&[]), &[])
}

/// Like [`run`], with `env` added and the marking command run by `runner` (`[]`: on its own).
fn run_in(sb: &Sandbox, args: &[&str], runner: Option<&[&str]>, env: &[(&str, &str)]) -> Output {
    let marker = sb.path("started");
    let app = sb.script("app.sh", &format!("touch {}", marker.display()));
    let mut cmd = Command::new(BIN);
    cmd.arg("supervise").args(args).envs(env.iter().copied());
    if let Some(runner) = runner {
        cmd.arg("--").args(runner).arg(&app);
    }
    // No test here may reach the event loop; if one did, its child would create the marker and
    // the supervisor would not exit, so the wait is bounded and ends it by its handle.
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let exited = wait_until(std::time::Duration::from_secs(20), POLL, || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = child.kill();
    }
    child.wait_with_output().expect("wait")
}

fn assert_config_error(sb: &Sandbox, out: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{n:?} not in: {stderr}");
    }
    assert!(
        !sb.path("started").exists(),
        "a child was started despite bad input"
    );
}

fn flag(sb: &Sandbox) -> String {
    sb.flag_file().display().to_string()
}

#[test]
fn a_missing_command_is_refused() {
    let sb = Sandbox::new();
    let out = run(
        &sb,
        &["--flag-file", &flag(&sb), "--listen", "127.0.0.1:0"],
        false,
    );
    assert_config_error(&sb, &out, &["CMD", "-- CMD"]);
}

#[test]
fn an_unparseable_key_value_is_refused() {
    let sb = Sandbox::new();
    let f = flag(&sb);
    let out = run(
        &sb,
        &[
            "--flag-file",
            &f,
            "--listen",
            "127.0.0.1:0",
            "--leader-env",
            "NOEQUALS",
        ],
        true,
    );
    assert_config_error(&sb, &out, &["--leader-env", "KEY=VALUE"]);
    let out = run(
        &sb,
        &[
            "--flag-file",
            &f,
            "--listen",
            "127.0.0.1:0",
            "--follower-env",
            "1X=y",
        ],
        true,
    );
    assert_config_error(&sb, &out, &["--follower-env", "KEY=VALUE"]);
}

#[test]
fn a_flag_file_directory_that_does_not_exist_is_refused() {
    let sb = Sandbox::new();
    let f = sb.path("no/such/dir/grant.json").display().to_string();
    let out = run(&sb, &["--flag-file", &f, "--listen", "127.0.0.1:0"], true);
    assert_config_error(&sb, &out, &["--flag-file", "does not exist"]);
}

#[test]
fn a_port_in_use_is_refused() {
    let sb = Sandbox::new();
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = run(&sb, &["--flag-file", &flag(&sb), "--listen", &addr], true);
    assert_config_error(&sb, &out, &["--listen", &addr]);
}

#[test]
fn a_non_loopback_listen_address_is_refused() {
    let sb = Sandbox::new();
    for addr in ["0.0.0.0:8082", "10.1.2.3:8082", "localhost:8082", "8082"] {
        let out = run(&sb, &["--flag-file", &flag(&sb), "--listen", addr], true);
        assert_config_error(&sb, &out, &["--listen", "loopback"]);
    }
}

#[test]
fn a_bad_duration_or_policy_names_its_flag() {
    let sb = Sandbox::new();
    let f = flag(&sb);
    let out = run(
        &sb,
        &[
            "--flag-file",
            &f,
            "--listen",
            "127.0.0.1:0",
            "--kill-grace",
            "soon",
        ],
        true,
    );
    assert_config_error(&sb, &out, &["--kill-grace"]);
    let out = run(
        &sb,
        &[
            "--flag-file",
            &f,
            "--listen",
            "127.0.0.1:0",
            "--on-change",
            "reload",
        ],
        true,
    );
    assert_config_error(&sb, &out, &["--on-change", "signal:"]);
    let out = run(
        &sb,
        &[
            "--flag-file",
            &f,
            "--listen",
            "127.0.0.1:0",
            "--on-follower",
            "pause",
        ],
        true,
    );
    assert_config_error(&sb, &out, &["--on-follower"]);
}

/// Item 3: with NAMESPACE_SELECTOR=<real> in the container's environment, a `--leader-env` key
/// without a follower value let the follower inherit the real selector and run operators.
#[test]
fn a_leader_env_key_without_a_follower_value_is_refused_naming_the_key() {
    let sb = Sandbox::new();
    let f = flag(&sb);
    let out = run(
        &sb,
        &[
            "--flag-file",
            &f,
            "--listen",
            "127.0.0.1:0",
            "--leader-env",
            "NAMESPACE_SELECTOR=passmower",
            "--leader-env",
            "LOG=debug",
            "--follower-env",
            "LOG=info",
        ],
        true,
    );
    assert_config_error(
        &sb,
        &out,
        &["--leader-env", "NAMESPACE_SELECTOR", "--follower-env"],
    );
}

/// Passmower reads an empty NAMESPACE_SELECTOR as its own namespace and one with `*` or `,` as
/// patterns over every namespace: a follower so configured runs operators. Refused, from the
/// flag and from its variable alike, naming the flag and what is allowed.
#[test]
fn a_follower_selector_that_selects_namespaces_is_refused() {
    for value in ["", " ", "*", "tenant-*", "a,b", "passmower-elector_idle,"] {
        let sb = Sandbox::new();
        let f = flag(&sb);
        let follower = format!("NAMESPACE_SELECTOR={value}");
        let out = run(
            &sb,
            &[
                "--flag-file",
                &f,
                "--listen",
                "127.0.0.1:0",
                "--leader-env",
                "NAMESPACE_SELECTOR=passmower",
                "--follower-env",
                &follower,
            ],
            true,
        );
        assert_config_error(
            &sb,
            &out,
            &[
                "--follower-env",
                "NAMESPACE_SELECTOR",
                "one namespace name that no namespace has",
            ],
        );
        let out = run_in(
            &sb,
            &["--flag-file", &f, "--listen", "127.0.0.1:0"],
            Some(&[]),
            &[("ELECTOR_FOLLOWER_ENV", &format!("LOG=info\n{follower}"))],
        );
        assert_config_error(&sb, &out, &["--follower-env", "NAMESPACE_SELECTOR"]);
    }
}

#[test]
fn leader_args_without_their_follower_counterpart_are_refused() {
    let sb = Sandbox::new();
    let f = flag(&sb);
    let base = ["--flag-file", &f, "--listen", "127.0.0.1:0"];
    let out = run(
        &sb,
        &[&base[..], &["--leader-args", "--operators"]].concat(),
        true,
    );
    assert_config_error(&sb, &out, &["--leader-args", "--follower-args"]);
    let out = run(
        &sb,
        &[
            &base[..],
            &[
                "--leader-args",
                "--selector=real",
                "--follower-args",
                "--quiet",
            ],
        ]
        .concat(),
        true,
    );
    assert_config_error(&sb, &out, &["--leader-args", "--selector"]);
}

/// Without a toggle and without inotify a demotion is noticed up to one re-read interval late;
/// the elector's no-ack wait has a 1s margin for that and for scheduling.
#[test]
fn a_reread_interval_the_margin_does_not_cover_is_refused() {
    let sb = Sandbox::new();
    let f = flag(&sb);
    let out = run(
        &sb,
        &[
            "--flag-file",
            &f,
            "--listen",
            "127.0.0.1:0",
            "--reread-interval",
            "2s",
        ],
        true,
    );
    assert_config_error(&sb, &out, &["--reread-interval", "500ms"]);
}

/// Durations that pass the parser but make the supervisor spin or storm: a 1ns re-read spun a
/// core, a 1ns backoff restarted a crashing app as fast as it could fork, a 1ns reset forgave
/// every crash. Each is refused naming the flag and its range.
#[test]
fn durations_that_spin_or_storm_are_refused_with_their_range() {
    let sb = Sandbox::new();
    let f = flag(&sb);
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--reread-interval", "1ns"],
            &["--reread-interval", "10ms", "500ms"],
        ),
        (
            &["--reread-interval", "9ms"],
            &["--reread-interval", "10ms", "500ms"],
        ),
        (
            &["--restart-backoff-initial", "1ns"],
            &["--restart-backoff-initial", "at least 100ms"],
        ),
        (
            &[
                "--restart-backoff-initial",
                "1ns",
                "--restart-backoff-max",
                "1ns",
            ],
            &["--restart-backoff-initial", "at least 100ms"],
        ),
        (
            &["--restart-backoff-max", "1ns"],
            &[
                "--restart-backoff-max",
                "at least --restart-backoff-initial (200ms)",
            ],
        ),
        (
            &["--restart-backoff-reset", "1ns"],
            &["--restart-backoff-reset", "at least 1s"],
        ),
        (
            &["--serving-head-start", "10s1ms"],
            &["--serving-head-start", "from 0s to 10s"],
        ),
        (
            &["--leader-health-url", "http://127.0.0.1:19090/health"],
            &["--leader-health-url", "needs --on-change=leader-instance"],
        ),
        (
            &[
                "--on-change=leader-instance",
                "--leader-health-url",
                "http://10.0.0.1:19090/health",
            ],
            &["--leader-health-url", "not a loopback address"],
        ),
        (
            &[
                "--on-change=leader-instance",
                "--leader-health-url",
                "https://127.0.0.1:19090/health",
            ],
            &["--leader-health-url", "http://127.0.0.1:PORT/PATH"],
        ),
        (
            &[
                "--on-change=leader-instance",
                "--leader-health-url=http://127.0.0.1:19090/health",
                "--leader-health-period",
                "999ms",
            ],
            &["--leader-health-period", "from 1s to 5m"],
        ),
        (
            &[
                "--on-change=leader-instance",
                "--leader-health-url=http://127.0.0.1:19090/health",
                "--leader-health-timeout",
                "5m1ms",
            ],
            &["--leader-health-timeout", "from 100ms to 5m"],
        ),
        (
            &[
                "--on-change=leader-instance",
                "--leader-health-url=http://127.0.0.1:19090/health",
                "--leader-health-failures",
                "0",
            ],
            &["--leader-health-failures", "from 1 to 20"],
        ),
        (
            &[
                "--on-change=leader-instance",
                "--leader-health-url=http://127.0.0.1:19090/health",
                "--leader-health-failures",
                "21",
            ],
            &["--leader-health-failures", "from 1 to 20"],
        ),
    ];
    for (extra, needles) in cases {
        let mut args = vec!["--flag-file", f.as_str(), "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let out = run(&sb, &args, true);
        assert_config_error(&sb, &out, needles);
    }
    // The bounds themselves are allowed: this run gets past validation and starts the app.
    let mut child = Command::new(BIN)
        .args(["supervise", "--flag-file", &f, "--listen", "127.0.0.1:0"])
        .args([
            "--reread-interval",
            "10ms",
            "--restart-backoff-initial",
            "100ms",
        ])
        .args([
            "--restart-backoff-max",
            "100ms",
            "--restart-backoff-reset",
            "1s",
            "--serving-head-start",
            "10s",
        ])
        .arg("--")
        .arg(sb.script("ok.sh", &format!("touch {}", sb.path("ran").display())))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let ran = wait_until(std::time::Duration::from_secs(20), POLL, || {
        sb.path("ran").exists()
    });
    let _ = child.kill();
    let out = child.wait_with_output().expect("wait");
    assert!(ran, "{}", String::from_utf8_lossy(&out.stderr));
}

/// SIGCHLD or SIGTERM as the toggle signal was accepted: the app took a child's exit or a
/// shutdown request for a mode change (and SIGTERM also shut it down).
#[test]
fn a_toggle_signal_with_a_meaning_of_its_own_is_refused() {
    let sb = Sandbox::new();
    let f = flag(&sb);
    for (sig, why) in [
        ("SIGCHLD", "child's exit"),
        ("SIGTERM", "shut down"),
        ("SIGINT", "shut down"),
        ("SIGCONT", "job control"),
        ("SIGPIPE", "broken pipe"),
        ("KILL", "cannot be caught"),
    ] {
        let policy = format!("--on-change=signal:{sig}");
        let out = run(
            &sb,
            &["--flag-file", &f, "--listen", "127.0.0.1:0", &policy],
            true,
        );
        assert_config_error(
            &sb,
            &out,
            &[
                "--on-change",
                "cannot mean \"switch mode\"",
                why,
                "SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH",
            ],
        );
    }
}

/// `--leader-port-map 9090=9090` was accepted: the leader instance then tried to bind the port
/// the serving instance holds, failed on every promotion, and crash-looped.
#[test]
fn a_leader_port_map_onto_a_taken_port_is_refused() {
    let sb = Sandbox::new();
    let f = flag(&sb);
    let toggle = free_port();
    let listen = format!("127.0.0.1:{toggle}");
    let onto_toggle = format!("--leader-port-map=3000={toggle}");
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--leader-port-map=9090=9090"],
            &[
                "--leader-port-map",
                "9090=9090 maps the port to itself",
                "TO must be 0",
            ],
        ),
        (
            &["--leader-port-map=3000=9090", "--leader-port-map=9090=0"],
            &[
                "--leader-port-map",
                "3000=9090",
                "serving instance listens on 9090",
            ],
        ),
        (
            &[
                "--leader-port-map=3000=13000",
                "--leader-port-map=9090=13000",
            ],
            &["--leader-port-map", "3000 goes to 13000 as well"],
        ),
        (
            &[onto_toggle.as_str()],
            &["--leader-port-map", "toggle (--listen)", listen.as_str()],
        ),
    ];
    for (extra, needles) in cases {
        let mut args = vec![
            "--flag-file",
            f.as_str(),
            "--listen",
            listen.as_str(),
            "--on-change=leader-instance",
        ];
        args.extend_from_slice(extra);
        let out = run(&sb, &args, true);
        assert_config_error(&sb, &out, needles);
    }
}

/// A Node.js older than 18.18 has no `--import`, so the port map's preload made every leader
/// instance fail at start ("bad option"), and leadership went round the pods with nothing
/// reconciling. Now refused before anything starts, naming the version. The stand-in answers
/// `--version` as Node 16 does and refuses `--import` in NODE_OPTIONS as it does (no Node 16 on
/// the test machine).
#[test]
fn a_leader_port_map_with_a_node_without_import_is_refused_naming_the_version() {
    let sb = Sandbox::new();
    let f = flag(&sb);
    let old = sb.path("old");
    std::fs::create_dir(&old).expect("mkdir");
    let node = old.join("node");
    std::fs::write(
        &node,
        "#!/bin/sh\n\
         case \"$NODE_OPTIONS\" in *--import*) \
         echo \"node: --import= is not allowed in NODE_OPTIONS\" >&2; exit 9;; esac\n\
         [ \"$1\" = --version ] && { echo v16.20.2; exit 0; }\n\
         shift; exec sh \"$@\"\n",
    )
    .expect("write node");
    std::fs::set_permissions(&node, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let args = [
        "--flag-file",
        f.as_str(),
        "--listen",
        "127.0.0.1:0",
        "--on-change=leader-instance",
        "--leader-port-map=*=0",
    ];
    let needles = [
        "--leader-port-map",
        "needs Node.js 18.18 or later",
        "(v16.20.2)",
    ];
    // `node` on PATH, behind a wrapper script.
    let path = format!(
        "{}:{}",
        old.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = run_in(&sb, &args, Some(&[]), &[("PATH", &path)]);
    assert_config_error(&sb, &out, &needles);
    // The command itself, whatever `node` PATH finds.
    let named = node.to_str().unwrap_or_default();
    let out = run_in(&sb, &args, Some(&[named, "--no-warnings"]), &[]);
    assert_config_error(&sb, &out, &[&format!("`{named} --version`"), "(v16.20.2)"]);
    // A --require on node's own command line runs before the map's --import, which cannot move
    // it there: refused, saying where it goes instead.
    let real = format!("{}/node", old.display());
    let out = run_in(&sb, &args, Some(&[&real, "-r", "./otel.js"]), &[]);
    assert_config_error(
        &sb,
        &out,
        &[
            "--leader-port-map",
            "\"./otel.js\" with --require",
            "NODE_OPTIONS",
        ],
    );
    // Without a port map, no --import, nothing to refuse: that is the remedy. (The app exits
    // at once, and the supervisor with it.)
    let out = run_in(
        &sb,
        &[
            "--flag-file",
            f.as_str(),
            "--listen",
            "127.0.0.1:0",
            "--exit-with-child",
        ],
        Some(&[]),
        &[("PATH", &path)],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// A second, leader-only instance makes no sense beside "run nothing as follower", and a port
/// map moves only that instance's ports.
#[test]
fn leader_instance_combinations_that_cannot_work_are_refused() {
    let sb = Sandbox::new();
    let f = flag(&sb);
    let base = ["--flag-file", f.as_str(), "--listen", "127.0.0.1:0"];
    let with = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        run(&sb, &args, true)
    };
    let out = with(&["--on-change=leader-instance", "--on-follower=stop"]);
    assert_config_error(&sb, &out, &["--on-follower", "leader-instance"]);
    for policy in ["restart", "signal:SIGUSR2"] {
        let out = with(&[&format!("--on-change={policy}"), "--leader-port-map=*=0"]);
        assert_config_error(
            &sb,
            &out,
            &["--leader-port-map", "--on-change=leader-instance"],
        );
    }
    let out = with(&[
        "--on-change=leader-instance",
        "--leader-port-map=9090=0",
        "--leader-port-map=9090=1",
    ]);
    assert_config_error(&sb, &out, &["--leader-port-map", "mapped twice"]);
    for bad in ["9090", "0=1", "*=70000", "x=0"] {
        let out = with(&[
            "--on-change=leader-instance",
            &format!("--leader-port-map={bad}"),
        ]);
        assert_config_error(&sb, &out, &["--leader-port-map", "FROM=TO"]);
    }
    let out = with(&["--on-change=separate"]);
    assert_config_error(&sb, &out, &["--on-change", "leader-instance"]);
}

#[test]
fn flags_can_come_from_elector_environment_variables() {
    let sb = Sandbox::new();
    let out = Command::new(BIN)
        .args(["supervise", "--flag-file", &flag(&sb), "--", "true"])
        .env("ELECTOR_LISTEN", "0.0.0.0:1")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--listen") && stderr.contains("0.0.0.0:1"),
        "{stderr}"
    );
}

#[test]
fn help_explains_every_flag() {
    let out = Command::new(BIN)
        .args(["supervise", "--help"])
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&out.stdout);
    for f in [
        "--flag-file",
        "--listen",
        "--leader-env",
        "--follower-env",
        "--leader-args",
        "--follower-args",
        "--kill-grace",
        "--on-follower",
        "--on-change",
        "--restart-backoff-initial",
        "--restart-backoff-max",
        "--exit-with-child",
        "--serving-head-start",
        "--leader-health-url",
        "--leader-health-period",
        "--leader-health-timeout",
        "--leader-health-failures",
        "--elector-uid",
        "ELECTOR_LEADER_ENV",
    ] {
        assert!(help.contains(f), "{f} missing from --help:\n{help}");
    }
}
