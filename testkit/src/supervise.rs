//! Test harness for `passmower-elector supervise`: a per-test sandbox, the real binary as a
//! process, a recording child script, a tiny loopback HTTP client and bounded waits.
#![allow(dead_code)] // each test file uses a different part of the harness

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use passmower_elector::clock::BootInstant;
use passmower_elector::grant::auth::{self, Key, Token};
use passmower_elector::grant::{Grant, Order};

pub const BIN: &str = env!("CARGO_BIN_EXE_passmower-elector");

/// Polls `cond` every 10 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The renew deadline test grants announce: longer than any grant a test writes lasts.
pub const TEST_RENEW_DEADLINE: Duration = Duration::from_secs(120);
/// The kill grace test grants announce: longer than any supervisor's in these tests, so none is
/// clamped unless a test asks for it.
pub const TEST_ELECTOR_KILL_GRACE: Duration = Duration::from_secs(10);

/// A temporary directory holding the flag file, the ack file, the elector's token and what the
/// child records. It plays the elector's part: the token (incarnation 1 at first) and the key
/// that [`Sandbox::sign`], [`Sandbox::write_grant`] and [`Supervisor::push`] sign with.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    token: Arc<Mutex<Token>>,
}

impl Sandbox {
    pub fn new() -> Self {
        let sb = Sandbox {
            dir: tempfile::tempdir().expect("tempdir"),
            token: Arc::new(Mutex::new(Token {
                incarnation: 1,
                key: Key::generate().expect("key"),
            })),
        };
        sb.write_token();
        sb
    }

    fn write_token(&self) {
        let token = self.token.lock().expect("token").clone();
        auth::write_token(&auth::token_path(&self.flag_file()), &token).expect("write token");
    }

    /// A new elector incarnation: a new key in the token file.
    pub fn elector_restart(&self, incarnation: u64) {
        *self.token.lock().expect("token") = Token {
            incarnation,
            key: Key::generate().expect("key"),
        };
        self.write_token();
    }

    pub fn token_file(&self) -> PathBuf {
        auth::token_path(&self.flag_file())
    }

    /// `g` as the elector would emit it: with its limits and a MAC under the current key.
    pub fn sign(&self, g: &Grant) -> Grant {
        sign_with(&self.token, g)
    }

    /// The ack file's object, if it is one.
    pub fn ack_object(&self) -> Option<Grant> {
        passmower_elector::grant::read_file(&self.path("grant.json.ack"))
            .ok()
            .flatten()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn flag_file(&self) -> PathBuf {
        self.path("grant.json")
    }

    pub fn ack(&self) -> Option<serde_json::Value> {
        let bytes = std::fs::read(self.path("grant.json.ack")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes `g`, signed, to the flag file.
    pub fn write_grant(&self, g: &Grant) {
        self.write_raw_grant(&self.sign(g));
    }

    /// Writes `g` to the flag file exactly as given (forgeries, unsigned objects).
    pub fn write_raw_grant(&self, g: &Grant) {
        passmower_elector::grant::write_file(&self.flag_file(), g).expect("write flag file");
    }

    /// Whether the ack file's MAC verifies under the current key.
    pub fn ack_verifies(&self) -> bool {
        let Ok(Some(ack)) = passmower_elector::grant::read_file(&self.path("grant.json.ack"))
        else {
            return false;
        };
        self.token.lock().expect("token").key.verify_ack(&ack)
    }

    /// Writes an executable POSIX sh script named `name` with `body`.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    /// A long-running app that records each start (`starts`: pid, $MODE, args, boot seconds) and
    /// each signal it receives (`signals`: NAME pid boot-seconds). On SIGTERM it exits with
    /// `term_exit`, or ignores SIGTERM when `term_exit` is None.
    pub fn recording_app(&self, term_exit: Option<i32>) -> PathBuf {
        let dir = self.dir.path().display();
        let on_term = match term_exit {
            Some(code) => format!("rec TERM; exit {code}"),
            None => "rec TERM".to_owned(),
        };
        self.script(
            "app.sh",
            &format!(
                r#"
rec() {{ echo "$1 $$ $(cut -d' ' -f1 /proc/uptime)" >> {dir}/signals; }}
trap '{on_term}' TERM
trap 'rec HUP' HUP
trap 'rec USR1' USR1
trap 'rec USR2' USR2
trap 'rec INT; exit 130' INT
# Recorded once the traps are in place, so a test that saw the start may signal the app.
echo "$$ mode=$MODE args=$*" >> {dir}/starts
# `wait` returns when a trapped signal arrives; a foreground sleep would delay the trap.
while :; do sleep 0.05 & wait $!; done
"#
            ),
        )
    }

    /// Lines of a record file (`starts`, `signals`, ...), empty if absent.
    pub fn lines(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.path(name))
            .map(|s| s.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// `(pid, mode)` of each recorded start.
    pub fn starts(&self) -> Vec<(i32, String)> {
        self.lines("starts")
            .iter()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let pid = it.next()?.parse().ok()?;
                let mode = it.next()?.strip_prefix("mode=")?.to_owned();
                Some((pid, mode))
            })
            .collect()
    }
}

/// A leader grant expiring `ttl` from now on CLOCK_BOOTTIME.
pub fn leader(incarnation: u64, seq: u64, ttl: Duration) -> Grant {
    Grant::leader(
        "pod-a",
        7,
        Order { incarnation, seq },
        "ns/passmower",
        BootInstant::now().saturating_add(ttl),
    )
}

pub fn follower(incarnation: u64, seq: u64) -> Grant {
    Grant::follower("pod-b", 8, Order { incarnation, seq }, "ns/passmower")
}

/// The forgery a MAC-less protocol allowed: `incarnation=now, seq=u64::MAX, expires=u64::MAX`. Before the MAC
/// it made the pod leader for ever and every real object after it looked stale.
pub fn forgeries() -> Vec<(&'static str, passmower_elector::grant::Grant)> {
    use passmower_elector::clock::BootInstant;
    use passmower_elector::grant::auth::Key;
    let now = BootInstant::now().as_nanos();
    let mut forged = leader(now, u64::MAX, Duration::from_secs(60));
    forged.expires_boottime_ns = u64::MAX;
    forged.renew_deadline_ns = u64::MAX;
    forged.kill_grace_ns = 1;
    let unsigned = forged.clone();
    // "Plausible": a well-formed MAC, under a key the forger made up.
    let mut plausible = forged.clone();
    Key::generate().expect("key").sign_grant(&mut plausible);
    // The running elector's incarnation, a mac copied from nowhere.
    let mut same_incarnation = leader(1, u64::MAX, Duration::from_secs(60));
    same_incarnation.expires_boottime_ns = u64::MAX;
    same_incarnation.mac = Some("ab".repeat(32));
    vec![
        ("unsigned", unsigned),
        ("signed with another key", plausible),
        ("the elector's incarnation, a made-up mac", same_incarnation),
    ]
}

/// Whether `pid` names a live (non-zombie) process. Test processes are ours, so PID reuse within
/// a test's lifetime is not a concern worth more than this.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => state_of(&stat) != Some('Z'),
        Err(_) => false,
    }
}

/// Whether `pid` exists at all, zombie or not.
pub fn exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn state_of(stat: &str) -> Option<char> {
    // The command name may contain spaces; the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Zombie children of `parent` (PIDs), from /proc.
pub fn zombie_children(parent: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let ppid = fields.next().and_then(|p| p.parse::<i32>().ok());
        if state == Some("Z") && ppid == Some(parent) {
            found.push(pid);
        }
    }
    found
}

fn sign_with(token: &Mutex<Token>, g: &Grant) -> Grant {
    let mut g = g.clone();
    if g.renew_deadline_ns == 0 && g.kill_grace_ns == 0 {
        g = g.with_limits(TEST_RENEW_DEADLINE, TEST_ELECTOR_KILL_GRACE);
    }
    token.lock().expect("token").key.sign_grant(&mut g);
    g
}

/// The supervisor under test: the real binary, its stderr collected for assertions.
pub struct Supervisor {
    pub child: Child,
    pub port: u16,
    pub log: Arc<Mutex<Vec<String>>>,
    token: Arc<Mutex<Token>>,
}

impl Supervisor {
    /// Starts `supervise` with the sandbox's flag file, a free loopback port, `flags`, then
    /// `-- command`. Waits (bounded) until the toggle listens.
    pub fn start(sb: &Sandbox, flags: &[&str], command: &[&str]) -> Self {
        Self::start_bin(BIN, sb, flags, command)
    }

    /// Like [`Supervisor::start`] with another build of the binary (the benchmark's release build).
    pub fn start_bin(bin: &str, sb: &Sandbox, flags: &[&str], command: &[&str]) -> Self {
        Self::start_with(bin, sb, flags, command, None)
    }

    /// Like [`Supervisor::start`], running as `uid` (the test must be root to ask for that).
    /// The binary runs from a 0755 copy in the sandbox: the cargo target dir may sit where
    /// another UID cannot reach it (CI keeps it under root's 0700 home).
    pub fn start_as(sb: &Sandbox, flags: &[&str], command: &[&str], uid: u32) -> Self {
        let copy = sb.dir.path().join("passmower-elector-as-uid");
        std::fs::copy(BIN, &copy).expect("copy the binary into the sandbox");
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod the copy");
        let copy = copy.to_str().expect("sandbox path is UTF-8").to_owned();
        Self::start_with(&copy, sb, flags, command, Some(uid))
    }

    /// Like [`Supervisor::start`], run through `wrapper` (a command that execs its arguments,
    /// like `setpriv --bounding-set=-all --`).
    pub fn start_wrapped(sb: &Sandbox, wrapper: &[&str], flags: &[&str], command: &[&str]) -> Self {
        Self::start_in(wrapper, BIN, sb, flags, command, None, &[])
    }

    /// Like [`Supervisor::start`], with `env` added to the supervisor's environment (the
    /// container's, as both instances inherit it).
    pub fn start_env(sb: &Sandbox, env: &[(&str, &str)], flags: &[&str], command: &[&str]) -> Self {
        Self::start_in(&[], BIN, sb, flags, command, None, env)
    }

    fn start_with(
        bin: &str,
        sb: &Sandbox,
        flags: &[&str],
        command: &[&str],
        uid: Option<u32>,
    ) -> Self {
        Self::start_in(&[], bin, sb, flags, command, uid, &[])
    }

    fn start_in(
        wrapper: &[&str],
        bin: &str,
        sb: &Sandbox,
        flags: &[&str],
        command: &[&str],
        uid: Option<u32>,
        env: &[(&str, &str)],
    ) -> Self {
        let flag = sb.flag_file();
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut cmd = Command::new(first);
                cmd.args(rest).arg(bin);
                cmd
            }
            None => Command::new(bin),
        };
        if let Some(uid) = uid {
            std::os::unix::process::CommandExt::uid(&mut cmd, uid);
        }
        cmd.envs(env.iter().copied());
        cmd.arg("supervise")
            .arg("--flag-file")
            .arg(&flag)
            .args(["--listen", "127.0.0.1:0"])
            .args(flags)
            .arg("--")
            .args(command)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn supervisor");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        if let Some(stderr) = child.stderr.take() {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    eprintln!("[supervise] {line}");
                    if let Some(rest) = line.split("addr=127.0.0.1:").nth(1) {
                        let digits: String =
                            rest.chars().take_while(char::is_ascii_digit).collect();
                        if let Ok(p) = digits.parse::<u16>() {
                            let _ = port_tx.send(p);
                        }
                    }
                    if let Ok(mut l) = log.lock() {
                        l.push(line);
                    }
                }
            });
        }
        let port = port_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("supervisor did not report its toggle address");
        Supervisor {
            child,
            port,
            log,
            token: sb.token.clone(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig)
            .expect("signal supervisor");
    }

    /// Waits (bounded) for the supervisor to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `GET /mode` as JSON.
    pub fn mode(&self) -> serde_json::Value {
        let (status, body) = http(self.port, "GET", "/mode", b"").expect("GET /mode");
        assert_eq!(status, 200, "GET /mode: {body}");
        serde_json::from_str(&body).expect("GET /mode JSON")
    }

    /// `POST /` of a grant object, signed as the sandbox's elector would; status and body.
    pub fn push(&self, g: &Grant) -> (u16, String) {
        self.push_raw(&sign_with(&self.token, g))
    }

    /// `POST /` of exactly `g` (forgeries, unsigned objects); returns status and body.
    pub fn push_raw(&self, g: &Grant) -> (u16, String) {
        http(self.port, "POST", "/", &g.to_json()).expect("POST grant")
    }

    /// `g` signed as the sandbox's elector would, for a request sent by hand.
    pub fn sign(&self, g: &Grant) -> Grant {
        sign_with(&self.token, g)
    }

    /// Waits (bounded) until GET /mode reports `mode` with a running child in that mode; returns
    /// the child's PID.
    pub fn wait_mode(&self, mode: &str, limit: Duration) -> Option<i32> {
        let mut pid = None;
        wait_until(limit, || {
            let m = self.mode();
            if m["mode"] == mode && m["child_mode"] == mode {
                pid = m["child_pid"].as_i64().map(|p| p as i32);
            }
            pid.is_some()
        });
        pid
    }

    /// Like [`Supervisor::wait_mode`], and then waits (bounded) until that child has recorded its
    /// start in the sandbox's `starts` (for a recording app: its traps are in place).
    pub fn wait_started(&self, sb: &Sandbox, mode: &str, limit: Duration) -> Option<i32> {
        let pid = self.wait_mode(mode, limit)?;
        wait_until(limit, || sb.starts().iter().any(|(p, _)| *p == pid)).then_some(pid)
    }

    pub fn log_contains(&self, needle: &str) -> bool {
        self.log
            .lock()
            .map(|l| l.iter().any(|line| line.contains(needle)))
            .unwrap_or(false)
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // A test that failed half-way must not leave its processes behind: SIGTERM lets the
        // supervisor take its child's group down; SIGKILL only if it does not within bounds.
        if let Ok(None) = self.child.try_wait() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid()),
                nix::sys::signal::Signal::SIGTERM,
            );
            if self.wait_exit(Duration::from_secs(10)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// A one-shot HTTP/1.1 request on loopback; returns status code and body.
pub fn http(port: u16, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad response {resp:?}")))?;
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// CLOCK_BOOTTIME now, in seconds, comparable with what the child scripts read from /proc/uptime.
pub fn boot_secs() -> f64 {
    BootInstant::now().as_nanos() as f64 / 1e9
}
