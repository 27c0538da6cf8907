//! The shared volume is not trusted: what the supervisor finds at the flag file's path (a FIFO,
//! a symlink, a huge file) never blocks it, is never followed and never read whole; the ack file
//! is reset before the flag file is first read; a token file it cannot read means follower only;
//! and `copy-self` writes 0755 whatever the umask.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::product::*;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use nix::sys::stat::Mode as FileMode;
use passmower_elector::grant::Mode;
use pme_testkit::wait::{wait_until, POLL};

const LIMIT: Duration = Duration::from_secs(15);
const MODE_FLAGS: [&str; 4] = [
    "--leader-env",
    "MODE=leader",
    "--follower-env",
    "MODE=follower",
];

fn start_recording(sb: &Sandbox) -> Supervisor {
    let app = sb.recording_app(Some(0));
    Supervisor::start(sb, &MODE_FLAGS, &[app.to_str().unwrap_or_default()])
}

/// `GET /mode` that gives up after `limit` instead of hanging with a frozen supervisor.
fn mode_within(sv: &Supervisor, limit: Duration) -> Option<serde_json::Value> {
    let port = sv.port;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let got = http(port, "GET", "/mode", b"")
            .ok()
            .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok());
        let _ = tx.send(got);
    });
    rx.recv_timeout(limit).ok().flatten()
}

/// Puts `make`'s creation at the flag file's path by rename, as a writer to the volume would.
fn replace_flag_file(sb: &Sandbox, make: impl FnOnce(&Path)) {
    let staged = sb.path("staged");
    make(&staged);
    std::fs::rename(&staged, sb.flag_file()).expect("rename into place");
}

/// Item 4a: a supervisor that read the flag file first could start a leader from that reading
/// while a previous container's `stopped`, still in the ack file, acked a demotion written in
/// between. The directory's inotify queue shows the order of the supervisor's file operations.
#[test]
fn the_ack_file_is_reset_before_the_flag_file_is_first_read() {
    let sb = Sandbox::new();
    sb.write_grant(&leader(1, 1, Duration::from_secs(60)));
    let mut stopped = sb.sign(&follower(1, 1));
    stopped.mode = Mode::Stopped;
    passmower_elector::grant::write_file(&sb.path("grant.json.ack"), &stopped).expect("ack");

    let inotify =
        Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).expect("inotify init");
    inotify
        .add_watch(
            sb.dir.path(),
            AddWatchFlags::IN_OPEN | AddWatchFlags::IN_MOVED_TO,
        )
        .expect("watch the sandbox");
    let _sv = start_recording(&sb);
    let mut seen: Vec<String> = Vec::new();
    let start = Instant::now();
    let ack_replaced = loop {
        match inotify.read_events() {
            Ok(events) => {
                for e in events {
                    let name = e
                        .name
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    if e.mask.contains(AddWatchFlags::IN_OPEN) && name == "grant.json" {
                        seen.push("open grant.json".into());
                    }
                    if e.mask.contains(AddWatchFlags::IN_MOVED_TO) && name == "grant.json.ack" {
                        seen.push("ack replaced".into());
                    }
                }
            }
            Err(nix::errno::Errno::EAGAIN) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("inotify: {e}"),
        }
        if seen.iter().any(|s| s == "ack replaced") {
            break true;
        }
        if start.elapsed() > LIMIT {
            break false;
        }
    };
    assert!(ack_replaced, "the ack file was never replaced: {seen:?}");
    assert_eq!(
        seen.first().map(String::as_str),
        Some("ack replaced"),
        "the flag file was read before the old ack file was replaced: {seen:?}"
    );
}

/// A FIFO put at the flag file's path: the old reader's blocking open froze the supervisor's
/// only runtime thread, and with it the dead man's switch and the toggle.
#[test]
fn a_fifo_at_the_flag_files_path_neither_blocks_nor_counts_as_a_grant() {
    let sb = Sandbox::new();
    let sv = start_recording(&sb);
    sv.wait_mode("follower", LIMIT).expect("follower child");
    sb.write_grant(&leader(1, 1, Duration::from_secs(60)));
    let leader_pid = sv.wait_mode("leader", LIMIT).expect("leader child");

    replace_flag_file(&sb, |p| {
        nix::unistd::mkfifo(p, FileMode::from_bits_truncate(0o666)).expect("mkfifo")
    });
    // Give the supervisor time to see the rename, then ask: a blocked runtime never answers.
    std::thread::sleep(Duration::from_millis(500));
    let m = mode_within(&sv, Duration::from_secs(5)).expect("the supervisor stopped answering");
    assert!(
        wait_until(LIMIT, POLL, || sv.log_contains("not a regular file")),
        "the FIFO was not reported"
    );
    assert!(
        wait_until(LIMIT, POLL, || mode_within(&sv, Duration::from_secs(5))
            .is_some_and(|m| m["mode"] == "follower")),
        "a FIFO kept the leader: {m}"
    );
    assert!(!alive(leader_pid));
    // The elector's next write replaces the FIFO and is obeyed.
    sb.write_grant(&leader(1, 2, Duration::from_secs(60)));
    sv.wait_mode("leader", LIMIT).expect("leader again");
}

#[test]
fn a_symlink_at_the_flag_files_path_is_never_followed() {
    let sb = Sandbox::new();
    // A valid, signed leader grant elsewhere; only a link to it at the flag file's path.
    let elsewhere = sb.path("elsewhere.json");
    passmower_elector::grant::write_file(
        &elsewhere,
        &sb.sign(&leader(1, 1, Duration::from_secs(60))),
    )
    .expect("write");
    std::os::unix::fs::symlink(&elsewhere, sb.flag_file()).expect("symlink");
    let sv = start_recording(&sb);
    sv.wait_mode("follower", LIMIT).expect("follower child");
    assert!(
        wait_until(LIMIT, POLL, || sv.log_contains("symbolic link")),
        "the symlink was not reported"
    );
    std::thread::sleep(Duration::from_millis(600)); // a couple of periodic re-reads
    assert_eq!(sv.mode()["mode"], "follower", "the symlink was followed");
    assert!(sb.starts().iter().all(|(_, m)| m == "follower"));
}

#[test]
fn a_huge_flag_file_is_not_read() {
    let sb = Sandbox::new();
    let sv = start_recording(&sb);
    sv.wait_mode("follower", LIMIT).expect("follower child");
    // Sparse: costs no space, but a reader without a cap would allocate and scan all of it.
    replace_flag_file(&sb, |p| {
        std::fs::File::create(p)
            .and_then(|f| f.set_len(256 << 20))
            .expect("sparse file")
    });
    assert!(
        wait_until(LIMIT, POLL, || sv.log_contains("larger than 65536 bytes")),
        "the huge file was not refused by its size"
    );
    assert!(mode_within(&sv, Duration::from_secs(2)).is_some());
}

/// The app container runs as another UID than the elector: the token is unreadable, so no
/// grant can be verified and the app must run as follower only, with an error saying the fix.
#[test]
fn an_unreadable_token_means_follower_only_and_says_the_fix() {
    let sb = Sandbox::new();
    let root = nix::unistd::geteuid().is_root();
    std::fs::set_permissions(sb.dir.path(), std::fs::Permissions::from_mode(0o777))
        .expect("chmod sandbox");
    let app = sb.recording_app(Some(0));
    let command = [app.to_str().unwrap_or_default()];
    let sv = if root {
        // The token stays root's with mode 0600; the supervisor runs as another UID.
        Supervisor::start_as(&sb, &MODE_FLAGS, &command, 4242)
    } else {
        // Without root, take the owner's read permission away instead: EACCES all the same.
        std::fs::set_permissions(sb.token_file(), std::fs::Permissions::from_mode(0o000))
            .expect("chmod token");
        Supervisor::start(&sb, &MODE_FLAGS, &command)
    };
    sv.wait_mode("follower", LIMIT).expect("follower child");
    let cause = if root {
        "runs as uid 4242; fix: run the elector container as the app's UID 4242"
    } else {
        "the mode gives it no read permission"
    };
    assert!(
        wait_until(LIMIT, POLL, || sv
            .log_contains("cannot read the elector's token file")
            && sv.log_contains(cause)),
        "no error saying the cause and the fix"
    );
    assert_follower_only(&sb, &sv);
}

/// Refused grants, pushed and written: the app stays follower.
fn assert_follower_only(sb: &Sandbox, sv: &Supervisor) {
    let (status, body) = sv.push(&leader(1, 1, Duration::from_secs(60)));
    assert_eq!(status, 403, "{body}");
    sb.write_grant(&leader(1, 2, Duration::from_secs(60)));
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(sv.mode()["mode"], "follower");
    assert!(
        sb.starts().iter().all(|(_, m)| m == "follower"),
        "{:?}",
        sb.starts()
    );
}

/// A root app container hardened with `capabilities: {drop: [ALL]}`: its supervisor is UID 0
/// without CAP_DAC_OVERRIDE, so the elector's 0600 token owned by 65532 is as closed to it as to
/// any other user. The error says so, and how to fix it, instead of only "permission denied".
#[test]
fn a_root_supervisor_without_capabilities_names_the_dropped_capability() {
    if !pme_testkit::have_or_skip(
        pme_testkit::is_root(),
        "it needs root, to chown the token and drop capabilities",
    ) {
        return;
    }
    let sb = Sandbox::new();
    nix::unistd::chown(
        &sb.token_file(),
        Some(nix::unistd::Uid::from_raw(65532)),
        Some(nix::unistd::Gid::from_raw(65532)),
    )
    .expect("chown token");
    let app = sb.recording_app(Some(0));
    let command = [app.to_str().unwrap_or_default()];
    // util-linux setpriv, as root: no capability survives the exec.
    let no_caps = [
        "setpriv",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--",
    ];
    let sv = Supervisor::start_wrapped(&sb, &no_caps, &MODE_FLAGS, &command);
    sv.wait_mode("follower", LIMIT).expect("follower child");
    let status = std::fs::read_to_string(format!("/proc/{}/status", sv.pid())).expect("status");
    assert!(
        status.lines().any(|l| l == "CapEff:\t0000000000000000"),
        "the supervisor kept capabilities: {status}"
    );
    assert!(
        wait_until(LIMIT, POLL, || sv.log_contains(&format!(
            "cannot read the elector's token file {}: it is owned by uid 65532, mode 0600, and \
             this process runs as uid 0 without CAP_DAC_OVERRIDE (capabilities dropped)",
            sb.token_file().display()
        )) && sv
            .log_contains("fix: run the elector container as uid 0 too")),
        "no error naming the dropped capability"
    );
    assert_follower_only(&sb, &sv);

    // What inject does for such an app: the elector runs as UID 0 too, so the token is the
    // supervisor's own file, readable without any capability; grants are obeyed again.
    nix::unistd::chown(
        &sb.token_file(),
        Some(nix::unistd::Uid::from_raw(0)),
        Some(nix::unistd::Gid::from_raw(0)),
    )
    .expect("chown token back");
    let (status, body) = sv.push(&leader(1, 3, Duration::from_secs(60)));
    assert_eq!(status, 200, "{body}");
    sv.wait_mode("leader", LIMIT)
        .expect("the app runs as leader once the token is its own UID's");
}

/// `copy-self` put the binary in place with mode 0755 & ~umask: 0700 under umask 077, which
/// another UID cannot execute.
#[test]
fn copy_self_writes_0755_whatever_the_umask() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("passmower-elector");
    let mut cmd = Command::new(BIN);
    cmd.arg("copy-self").arg(&dest);
    // SAFETY: umask(2) is async-signal-safe and touches only the child's own state.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0o077);
            Ok(())
        });
    }
    let out = cmd.output().expect("run copy-self");
    assert!(out.status.success(), "{out:?}");
    let mode = std::fs::metadata(&dest)
        .expect("copied")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o755, "copy-self wrote mode {mode:o} under umask 077");
}
