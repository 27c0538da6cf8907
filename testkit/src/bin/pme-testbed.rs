//! `pme-testbed`: the kit's control plane and free ports for the scripts (the demo, the
//! handover benchmark), so they start etcd + kube-apiserver exactly as the tests do.
//!
//! ```text
//! pme-testbed control-plane DIR [--user NAME[=GROUP,...]]... [--audit-policy FILE]
//!                               [--apiserver-flag FLAG]...
//! pme-testbed free-ports [N]
//! ```
//!
//! `control-plane` writes its files into DIR (created if missing), starts etcd and
//! kube-apiserver on loopback, and once `/readyz` says ok writes `DIR/server` (the URL),
//! `DIR/ca.crt`, `DIR/admin.token`, `DIR/kubeconfig-admin.json` and `DIR/kubeconfig-NAME.json`
//! for each user, then `DIR/ready`, and prints `ready URL`. It runs until SIGTERM, SIGINT or
//! SIGHUP, then stops both processes by PID and exits 0; it exits 1 when one of them dies or
//! the start fails, 2 on a usage error.
//! Users get a random static token (in `DIR/tokens.csv`) and the groups given, or
//! `system:masters`. The binaries come from `PME_CONTROL_PLANE` or
//! `scripts/build-test-cluster.sh`.
//!
//! `free-ports` prints N (default 1) distinct free loopback ports, one per line.

use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal};
use pme_testkit::control_plane::{random_token, ControlPlane, Options, TokenUser};

const USAGE: &str = "usage: pme-testbed control-plane DIR [--user NAME[=GROUP,...]]... \
                     [--audit-policy FILE] [--apiserver-flag FLAG]...\n       \
                     pme-testbed free-ports [N]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("control-plane") => control_plane(&args[1..]),
        Some("free-ports") => free_ports(&args[1..]),
        _ => Err(Usage(format!("a command is needed\n{USAGE}"))),
    };
    match result {
        Ok(code) => code,
        Err(Usage(message)) => {
            eprintln!("pme-testbed: {message}");
            ExitCode::from(2)
        }
    }
}

/// A usage error (exit 2), or, from [`start_failed`], one of the run (exit 1); printed as it is.
struct Usage(String);

/// The run failed after the arguments were fine: the message, exit code 1.
fn start_failed(message: String) -> ExitCode {
    eprintln!("pme-testbed: {message}");
    ExitCode::FAILURE
}

fn free_ports(args: &[String]) -> Result<ExitCode, Usage> {
    let n: usize = match args {
        [] => 1,
        [n] => n
            .parse()
            .ok()
            .filter(|n| (1..=64).contains(n))
            .ok_or_else(|| Usage(format!("free-ports N: N must be 1..=64, not {n:?}")))?,
        _ => return Err(Usage(USAGE.into())),
    };
    for port in pme_testkit::free_port_list(n) {
        println!("{port}");
    }
    Ok(ExitCode::SUCCESS)
}

fn control_plane(args: &[String]) -> Result<ExitCode, Usage> {
    let mut dir = None;
    let mut options = Options::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        // `--flag VALUE` or `--flag=VALUE`.
        let (arg, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = |flag: &str| match inline.clone() {
            Some(value) => Ok(value),
            None => it
                .next()
                .cloned()
                .ok_or_else(|| Usage(format!("{flag} needs a value\n{USAGE}"))),
        };
        match arg {
            "--user" => {
                let spec = value("--user")?;
                let (name, groups) = match spec.split_once('=') {
                    Some((name, groups)) => (name, groups.split(',').map(str::to_owned).collect()),
                    None => (spec.as_str(), vec!["system:masters".to_owned()]),
                };
                if name.is_empty() || name.contains(['/', ',', '"']) {
                    return Err(Usage(format!(
                        "--user {spec:?}: a user name without '/', ',' or '\"' is needed"
                    )));
                }
                options.users.push(TokenUser {
                    token: String::new(), // below, once the arguments are fine
                    name: name.to_owned(),
                    uid: format!("uid-{name}"),
                    groups,
                });
            }
            "--audit-policy" => {
                let path = value("--audit-policy")?;
                let policy = fs::read_to_string(&path)
                    .map_err(|e| Usage(format!("--audit-policy {path}: {e}")))?;
                options.audit_policy = Some(policy);
            }
            "--apiserver-flag" => options.apiserver_args.push(value("--apiserver-flag")?),
            flag if flag.starts_with('-') => {
                return Err(Usage(format!("unknown flag {flag}\n{USAGE}")))
            }
            path if dir.is_none() => dir = Some(PathBuf::from(path)),
            extra => return Err(Usage(format!("unexpected argument {extra}\n{USAGE}"))),
        }
    }
    let dir = dir.ok_or_else(|| Usage(format!("control-plane needs a DIR\n{USAGE}")))?;
    options.dir = Some(dir.clone());
    for user in &mut options.users {
        user.token = match random_token() {
            Ok(token) => token,
            Err(e) => return Ok(start_failed(e)),
        };
    }
    let users: Vec<TokenUser> = options.users.clone();

    // The stop signals are waited for, not handled: blocked here, before any thread starts,
    // so every thread inherits the mask (the children get a clean one from exec).
    let mut stop = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        stop.add(sig);
    }
    if let Err(e) = stop.thread_block() {
        return Ok(start_failed(format!("block the stop signals: {e}")));
    }

    let cp = match ControlPlane::start(options) {
        Ok(cp) => cp,
        Err(e) => return Ok(start_failed(e)),
    };
    let write = |name: &str, text: &[u8]| {
        fs::write(dir.join(name), text).map_err(|e| format!("write {name}: {e}"))
    };
    let written = write("server", format!("{}\n", cp.server_url()).as_bytes())
        .and_then(|()| write("ca.crt", &cp.ca_pem()))
        .and_then(|()| write("admin.token", format!("{}\n", cp.admin_token()).as_bytes()));
    if let Err(e) = written {
        return Ok(start_failed(e));
    }
    for user in &users {
        cp.kubeconfig_for_token(&user.name, &user.token);
    }
    if let Err(e) = write("ready", b"") {
        return Ok(start_failed(e));
    }
    println!("ready {}", cp.server_url());

    // A dead etcd or apiserver ends the testbed (exit 1) as a stop signal does (exit 0): the
    // watcher tells the waiting main thread with the same signal.
    let cp = Arc::new(cp);
    let died = Arc::new(AtomicBool::new(false));
    {
        let (cp, died) = (Arc::clone(&cp), Arc::clone(&died));
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            if let Some(what) = cp.exited() {
                eprintln!("pme-testbed: {what}\n{}", cp.logs_tail(20));
                died.store(true, Ordering::SeqCst);
                let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), Signal::SIGTERM);
                return;
            }
        });
    }
    let signal = match stop.wait() {
        Ok(signal) => signal,
        Err(e) => return Ok(start_failed(format!("wait for a signal: {e}"))),
    };
    if died.load(Ordering::SeqCst) {
        return Ok(ExitCode::FAILURE);
    }
    eprintln!("pme-testbed: {signal:?}: stopping the control plane");
    // Returning runs the kit's exit handler, which kills etcd and kube-apiserver by PID.
    Ok(ExitCode::SUCCESS)
}
