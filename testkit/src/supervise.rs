//! `supervise` under test: a sandbox directory (the pod's shared volume: flag file, ack file,
//! the app's records), the product's binary running `supervise` as a process, a tiny loopback
//! HTTP client for its toggle, and what /proc says about the processes it manages. Playing the
//! elector (its token, signed grants) needs the product's types: `tests/product`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clock::BootTime;
use crate::recording_app::{self, OnTerm, RecordingApp};
use crate::wait::{wait_until, POLL};

/// The product's binary (see [`crate::elector::binary`]), as a string for command lines.
pub fn bin() -> &'static str {
    crate::elector::binary()
        .to_str()
        .expect("the binary's path is UTF-8")
}

/// A temporary directory holding the flag file, the ack file and what the child records: the
/// pod's shared volume.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().expect("tempdir"),
        }
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

    /// Writes an executable POSIX sh script named `name` with `body`.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    /// A Node.js app: writes the ES module `js` as `app.mjs` and returns the executable that runs
    /// it (`app.sh`: `exec node app.mjs`). The tests that run it need `node` ([`crate::needs_node`]).
    pub fn node_app(&self, js: &str) -> PathBuf {
        let module = self.path("app.mjs");
        std::fs::write(&module, js).expect("write app.mjs");
        self.script("app.sh", &format!("exec node {}", module.display()))
    }

    /// The kit's recording app in the sandbox (see [`crate::recording_app`]): it records each
    /// start (`starts`: pid, $MODE, args), each stop (`runs`) and each signal it receives
    /// (`signals`: NAME pid boot-seconds). On SIGTERM it exits with `term_exit`, or ignores
    /// SIGTERM when `term_exit` is None.
    pub fn recording_app(&self, term_exit: Option<i32>) -> PathBuf {
        let on_term = match term_exit {
            Some(code) => OnTerm::Exit(code),
            None => OnTerm::Ignore,
        };
        RecordingApp::new(self.dir.path(), on_term).write()
    }

    /// Lines of a record file (`starts`, `signals`, ...), empty if absent.
    pub fn lines(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.path(name))
            .map(|s| s.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// `(pid, mode)` of each recorded start.
    pub fn starts(&self) -> Vec<(i32, String)> {
        recording_app::starts(&self.lines("starts"))
    }
}

/// The value of `name` in a `/proc/<pid>/environ` block.
pub fn environ_var<'a>(environ: &'a [u8], name: &str) -> Option<&'a str> {
    environ
        .split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
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

/// How long [`Supervisor::logged`] waits for a line.
pub const LOGGED_LIMIT: Duration = Duration::from_secs(10);

/// The supervisor under test: the real binary, its stderr collected for assertions.
pub struct Supervisor {
    pub child: Child,
    pub port: u16,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Supervisor {
    /// Starts `supervise` with the sandbox's flag file, a free loopback port, `flags`, then
    /// `-- command`. Waits (bounded) until the toggle listens.
    pub fn start(sb: &Sandbox, flags: &[&str], command: &[&str]) -> Self {
        Self::start_bin(bin(), sb, flags, command)
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
        std::fs::copy(bin(), &copy).expect("copy the binary into the sandbox");
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod the copy");
        let copy = copy.to_str().expect("sandbox path is UTF-8").to_owned();
        Self::start_with(&copy, sb, flags, command, Some(uid))
    }

    /// Like [`Supervisor::start`], run through `wrapper` (a command that execs its arguments,
    /// like `setpriv --bounding-set=-all --`).
    pub fn start_wrapped(sb: &Sandbox, wrapper: &[&str], flags: &[&str], command: &[&str]) -> Self {
        Self::start_in(wrapper, bin(), sb, flags, command, None, &[])
    }

    /// Like [`Supervisor::start`], with `env` added to the supervisor's environment (the
    /// container's, as both instances inherit it).
    pub fn start_env(sb: &Sandbox, env: &[(&str, &str)], flags: &[&str], command: &[&str]) -> Self {
        Self::start_in(&[], bin(), sb, flags, command, None, env)
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
        Supervisor { child, port, log }
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

    /// `POST /` of exactly `body` (a grant object's JSON); returns status and body.
    pub fn post_grant(&self, body: &[u8]) -> (u16, String) {
        http(self.port, "POST", "/", body).expect("POST grant")
    }

    /// Waits (bounded) until GET /mode reports `mode` with a running child in that mode; returns
    /// the child's PID.
    pub fn wait_mode(&self, mode: &str, limit: Duration) -> Option<i32> {
        let mut pid = None;
        wait_until(limit, POLL, || {
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
        wait_until(limit, POLL, || sb.starts().iter().any(|(p, _)| *p == pid)).then_some(pid)
    }

    /// Whether a line of the supervisor's stderr contains `needle`, waiting for it up to
    /// [`LOGGED_LIMIT`]: its stderr reaches the test through a reader thread, which may not
    /// have taken in a line the supervisor wrote before what the test just saw (its `/mode`,
    /// an ack), least of all on a loaded machine. For a line that must be absent, read
    /// [`Supervisor::log_contains`] after whatever would have caused it.
    pub fn logged(&self, needle: &str) -> bool {
        crate::wait::wait_until(LOGGED_LIMIT, crate::wait::POLL, || {
            self.log_contains(needle)
        })
    }

    /// The lines of the stderr taken in so far that contain `needle` (no wait).
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        self.log
            .lock()
            .map(|l| {
                l.iter()
                    .filter(|line| line.contains(needle))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether a line of the stderr taken in so far contains `needle` (no wait).
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
    BootTime::now().as_secs_f64()
}
