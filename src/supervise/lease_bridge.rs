//! `--on-change=lease-bridge`: one Passmower process per pod for the generations that elect a
//! leader themselves (2.4 and later), with upstream's election on and made to follow the pod's
//! grant; what the supervisor sends it, and how it knows the app has taken a grant in.
//!
//! Passmower 2.4 starts its reconcilers in `onStartedLeading` and stops them in
//! `onStoppedLeading` of its own `LeaderElection`, whose only input is the Lease it reads and
//! writes through `KubernetesAdapter` (`getLease`, `createLease`, `replaceLease`), one tick every
//! `LEADER_RETRY_PERIOD_SECONDS`, never two ticks at once (its `ticking` guard). The bridge is a
//! preload module (`lease_bridge/preload.mjs`, shipped inside this binary as a `data:` URL, like
//! the port map's) that answers those three calls for `LEADER_ELECTION_LEASE_NAME` from the
//! grant: held by this pod's identity and fresh while the grant says leader, held by another and
//! fresh otherwise; writes succeed locally while leader and conflict (409) otherwise. None of
//! them reaches the API server.
//!
//! Why the adapter's methods and not the HTTP request for the Lease's path: client-node 2.x sends
//! every request through the npm `undici` it bundles, with a per-request dispatcher built from
//! the kubeconfig (and the global dispatcher when there is none), so a local HTTP answer means
//! patching a transitive dependency's `Agent.prototype.dispatch` and driving its handler
//! protocol, which changed between undici majors: two paths to miss and a version the app never
//! names. The adapter's three methods are the election's whole input by upstream's design
//! (`leader-election.js` is handed the adapter and calls nothing else), they take and return
//! plain Lease objects and throw errors with a `code`, and a patch of the class's prototype
//! either is in place before the app's first line or the preload says at once that it is not
//! ("broken"). What a patch cannot see (a later election that reads its Lease another way) is
//! caught twice: it never reads through the bridge, so the supervisor never acks (below), and
//! the process keeps the follower environment until the bridge has answered "held by us", so
//! such an election can only start operators that watch the idle namespace.
//!
//! The ack of a promotion is derived from what the app did, not from a timer. After the
//! supervisor sends grant `n`, the first Lease read answered from grant `n` (or later) starts the
//! tick that takes it in (renews and awaits `onStartedLeading`); the next read can only start
//! once that tick has finished. So the mode counts as in effect, and is acked, at that next read
//! ([`Tracker::on_read`]).
//!
//! A demotion is not taken in by the process at all: the supervisor kills it (see
//! `supervisor::begin_stop`) and acks once it is gone, then starts the next one as follower. An
//! in-process stand-down leaves callbacks in flight that still wrote to Redis after its ack
//! (tests/api/lease_bridge.rs), and nothing fences Redis. So a running process is only ever
//! told a promotion; the follower grant a process starts with is tracked the same way, and holds
//! acks until the app's election has taken it in.
//!
//! Neither read waits for the app's timer when the preload finds upstream's `LeaderElection`
//! class beside the main script (`services/leader-election.js`): a new grant starts a tick at
//! once, and the tick after it starts as soon as that one has finished, both under the
//! election's own `ticking` guard, so a promotion costs the callbacks' time, not up to two retry
//! periods. Without the class the ticks stay on the timer; the ack rule is the same either way.
//!
//! Detection: a process that never reads its Lease through the bridge within [`PROOF_WITHIN`]
//! of its start, or whose preload reports it cannot patch the adapter, is refused: the
//! supervisor exits 2 with an error naming the two-instance mode (`--on-change=leader-instance`)
//! as the one for that Passmower. Until the first read, nothing is acked, so the elector counts
//! the pod's consumer as unproven and does not contend.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use crate::clock::BootInstant;
use crate::grant::Mode;
use crate::supervise::leader_instance::port_map;

/// The preload module (see the module doc).
pub const PRELOAD: &str = include_str!("lease_bridge/preload.mjs");

/// The variable telling the preload which descriptor its socket is.
pub const FD_VAR: &str = "PASSMOWER_ELECTOR_BRIDGE_FD";
/// The leader's values of `--leader-env`, as a JSON object, for the preload to set while leader.
pub const LEADER_VAR: &str = "PASSMOWER_ELECTOR_BRIDGE_LEADER_ENV";
/// The follower's values of the same keys, put back when the bridge answers "held by another".
pub const FOLLOWER_VAR: &str = "PASSMOWER_ELECTOR_BRIDGE_FOLLOWER_ENV";

/// How long after its start a process has to read its Lease through the bridge. Passmower 2.4
/// reads it at the end of its boot (about 1.5 s alone on a small node), then every second.
pub const PROOF_WITHIN: Duration = Duration::from_secs(30);

/// The shortest `--kill-grace` the mode accepts: a demotion is taken in at the app's second
/// Lease read after it, at once with the immediate ticks, else up to two retry periods (1 s
/// each), and the callbacks later.
pub const MIN_KILL_GRACE: Duration = Duration::from_secs(3);

/// Upstream's election, on, ticking every second (its smallest period).
const APP_ENV: [(&str, &str); 2] = [
    ("LEADER_ELECTION_ENABLED", "true"),
    ("LEADER_RETRY_PERIOD_SECONDS", "1"),
];

/// The process's environment overrides: the follower's (every doubt is follower), upstream's
/// election on, the preload first in `NODE_OPTIONS` (the follower's own, else `inherited`), and
/// the leader's values for the preload to set. The descriptor is added per start.
pub fn spawn_env(
    leader_env: &[(String, String)],
    follower_env: &[(String, String)],
    inherited_node_options: Option<&str>,
) -> Vec<(String, String)> {
    let last = |env: &[(String, String)], key: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let mut env: Vec<(String, String)> = follower_env
        .iter()
        .filter(|(k, _)| k != "NODE_OPTIONS")
        .cloned()
        .collect();
    env.extend(APP_ENV.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let import = port_map::data_import(PRELOAD);
    let existing = last(follower_env, "NODE_OPTIONS")
        .or_else(|| inherited_node_options.map(str::to_owned))
        .filter(|s| !s.trim().is_empty());
    let node_options = match existing {
        Some(rest) => format!("{import} {}", rest.trim()),
        None => import,
    };
    env.push(("NODE_OPTIONS".to_owned(), node_options));
    let mut leader = serde_json::Map::new();
    let mut follower = serde_json::Map::new();
    for (key, _) in leader_env {
        if key == "NODE_OPTIONS" || leader.contains_key(key) {
            continue;
        }
        leader.insert(key.clone(), last(leader_env, key).into());
        follower.insert(
            key.clone(),
            last(follower_env, key)
                .or_else(|| std::env::var(key).ok())
                .into(),
        );
    }
    env.push((
        LEADER_VAR.to_owned(),
        serde_json::Value::from(leader).to_string(),
    ));
    env.push((
        FOLLOWER_VAR.to_owned(),
        serde_json::Value::from(follower).to_string(),
    ));
    env
}

/// What the preload says, tagged with the start it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Said {
    /// The adapter is patched.
    Ready,
    /// It cannot be: why.
    Broken(String),
    /// The app read its Lease; the answer came from grant `n`, "held by us" when `us`.
    Read { n: u64, us: bool },
    /// The socket closed (the process is gone, or closed it).
    Closed,
}

/// One line from the preload; `None` for anything else.
pub fn parse_line(line: &str) -> Option<Said> {
    let line = line.trim_end();
    if line == "ready" {
        return Some(Said::Ready);
    }
    if let Some(why) = line.strip_prefix("broken ") {
        return Some(Said::Broken(why.to_owned()));
    }
    let mut words = line.strip_prefix("read ")?.split(' ');
    let n = words.next()?.parse().ok()?;
    let us = match words.next()? {
        "us" => true,
        "other" => false,
        _ => return None,
    };
    words.next().is_none().then_some(Said::Read { n, us })
}

/// A grant sent and not yet taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Awaited {
    mode: Mode,
    n: u64,
    /// A read answered from grant `n` or later was seen: the tick taking it in has started.
    answered: bool,
}

/// The bridge's state for one process: the grants sent, the reads seen. Pure.
#[derive(Clone, Debug, Default)]
pub struct Tracker {
    sent: u64,
    awaited: Option<Awaited>,
    /// A read came through the bridge: the app's election follows it.
    proven: bool,
    started: Option<BootInstant>,
}

impl Tracker {
    /// A fresh process started at `now`.
    pub fn started(now: BootInstant) -> Tracker {
        Tracker {
            started: Some(now),
            ..Tracker::default()
        }
    }

    /// Sends `mode` (the line for the socket); it is in effect once [`Tracker::on_read`] says
    /// so.
    pub fn tell(&mut self, mode: Mode) -> String {
        self.sent += 1;
        self.awaited = Some(Awaited {
            mode,
            n: self.sent,
            answered: false,
        });
        format!("grant {} {mode}\n", self.sent)
    }

    /// Takes a read in; returns the mode that is now in effect, once the tick that took the
    /// awaited grant in has finished (the read after the first one answered from it).
    pub fn on_read(&mut self, n: u64, us: bool) -> Option<Mode> {
        self.proven = true;
        let a = self.awaited.as_mut()?;
        if n < a.n {
            return None;
        }
        // The answer follows the grant it came from; one that does not is no evidence.
        if us != (a.mode == Mode::Leader) {
            return None;
        }
        if !a.answered {
            a.answered = true;
            return None;
        }
        let mode = a.mode;
        self.awaited = None;
        Some(mode)
    }

    /// Whether a grant sent has not been taken in yet, or the app has not shown it follows the
    /// bridge: nothing may be acked meanwhile.
    pub fn waiting(&self) -> bool {
        self.awaited.is_some() || !self.proven
    }

    pub fn proven(&self) -> bool {
        self.proven
    }

    /// When the loop must look again: the end of the proof window while unproven.
    pub fn wake_at(&self) -> Option<BootInstant> {
        (!self.proven)
            .then(|| self.started.map(|s| s.saturating_add(PROOF_WITHIN)))
            .flatten()
    }

    /// Whether at `now` no read has come through the bridge within [`PROOF_WITHIN`] of the
    /// start: the app's election does not follow the bridge.
    pub fn unproven_at(&self, now: BootInstant) -> bool {
        !self.proven
            && self
                .started
                .is_some_and(|s| now >= s.saturating_add(PROOF_WITHIN))
    }
}

/// The supervisor's end of one process's socket.
#[derive(Debug)]
pub struct Link {
    /// A duplicate of the socket, written directly: the socket is non-blocking, and tokio's
    /// `try_write` refuses until its reactor has seen the socket writable once.
    write: std::os::unix::net::UnixStream,
}

/// A socket pair for one start: the child's end (inheritable) and ours.
#[derive(Debug)]
pub struct Pair {
    ours: OwnedFd,
    theirs: OwnedFd,
}

impl Pair {
    /// Opens the pair with an inheritable child end. The supervisor starts processes from its one
    /// loop thread and opens the pair right before the start, so no other start inherits it.
    pub fn open() -> io::Result<Pair> {
        // Both ends close-on-exec, as std opens them; the child's end is then made inheritable.
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        let (ours, theirs) = (OwnedFd::from(ours), OwnedFd::from(theirs));
        fcntl(&theirs, FcntlArg::F_SETFD(FdFlag::empty()))?;
        Ok(Pair { ours, theirs })
    }

    /// The variable to give the process.
    pub fn env(&self) -> (String, String) {
        (FD_VAR.to_owned(), self.theirs.as_raw_fd().to_string())
    }

    /// Closes our copy of the child's end and reads the preload's lines in a task, sending each
    /// (tagged `start`) on `said`, and [`Said::Closed`] at EOF.
    pub fn link(self, start: u64, said: mpsc::UnboundedSender<(u64, Said)>) -> io::Result<Link> {
        drop(self.theirs);
        let std = std::os::unix::net::UnixStream::from(self.ours);
        std.set_nonblocking(true)?;
        let write = std.try_clone()?;
        let read = tokio::net::UnixStream::from_std(std)?;
        tokio::spawn(async move {
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match parse_line(&line) {
                    Some(s) => {
                        if said.send((start, s)).is_err() {
                            return;
                        }
                    }
                    None => tracing::debug!(%line, "lease bridge: line not understood"),
                }
            }
            let _ = said.send((start, Said::Closed));
        });
        Ok(Link { write })
    }
}

impl Link {
    /// Sends a line; a few bytes into an empty socket buffer, so it never blocks. A failure is
    /// the process gone (it is reaped) or a full buffer (nothing read for a long time), where
    /// the grant then is never taken in, so never acked.
    pub fn send(&self, line: &str) -> io::Result<()> {
        let n = std::io::Write::write(&mut &self.write, line.as_bytes())?;
        if n == line.len() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("only {n} of {} bytes sent", line.len()),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn inject_refuses_the_kill_grace_this_mode_refuses() {
        assert_eq!(MIN_KILL_GRACE, crate::inject::LEASE_BRIDGE_MIN_KILL_GRACE);
    }

    use super::*;

    fn at(s: u64) -> BootInstant {
        BootInstant::from_nanos(s * 1_000_000_000)
    }

    #[test]
    fn lines_parse_and_nothing_else_does() {
        assert_eq!(parse_line("ready\n"), Some(Said::Ready));
        assert_eq!(
            parse_line("broken no adapter"),
            Some(Said::Broken("no adapter".into()))
        );
        assert_eq!(parse_line("read 3 us"), Some(Said::Read { n: 3, us: true }));
        assert_eq!(
            parse_line("read 0 other"),
            Some(Said::Read { n: 0, us: false })
        );
        for bad in [
            "read x us",
            "read 3 maybe",
            "read 3 us more",
            "grant 1 leader",
            "",
        ] {
            assert_eq!(parse_line(bad), None, "{bad}");
        }
    }

    /// A grant is in effect at the read after the first one answered from it: that read could
    /// start only once the tick that took it in (and awaited its callback) had ended.
    #[test]
    fn a_grant_is_taken_in_at_the_read_after_the_first_answered_from_it() {
        let mut t = Tracker::started(at(0));
        assert!(t.waiting(), "unproven until a read comes through");
        let line = t.tell(Mode::Follower);
        assert_eq!(line, "grant 1 follower\n");
        assert_eq!(t.on_read(1, false), None, "the tick taking it in starts");
        assert_eq!(t.on_read(1, false), Some(Mode::Follower));
        assert!(!t.waiting());

        let line = t.tell(Mode::Leader);
        assert_eq!(line, "grant 2 leader\n");
        assert!(t.waiting());
        // A read answered from the follower grant (in flight when the promotion was sent) is no
        // evidence: the tick it started has not taken the promotion in.
        assert_eq!(t.on_read(1, false), None);
        assert_eq!(t.on_read(2, true), None);
        assert!(t.waiting());
        assert_eq!(t.on_read(2, true), Some(Mode::Leader));
        assert!(!t.waiting());
        assert_eq!(t.wake_at(), None, "proven: nothing to look at again");
    }

    /// An answer that does not follow the grant it came from proves nothing.
    #[test]
    fn a_read_that_contradicts_its_grant_is_no_evidence() {
        let mut t = Tracker::started(at(0));
        t.tell(Mode::Leader);
        assert_eq!(t.on_read(1, false), None);
        assert_eq!(t.on_read(1, false), None);
        assert!(t.waiting());
        assert_eq!(t.on_read(1, true), None);
        assert_eq!(t.on_read(1, true), Some(Mode::Leader));
    }

    #[test]
    fn a_newer_grant_replaces_the_one_awaited() {
        let mut t = Tracker::started(at(0));
        t.tell(Mode::Follower);
        t.on_read(1, false);
        t.tell(Mode::Leader);
        assert_eq!(t.on_read(1, false), None);
        assert_eq!(t.on_read(2, true), None);
        assert_eq!(t.on_read(3, true), Some(Mode::Leader), "n counts up");
    }

    #[test]
    fn a_process_that_never_reads_through_the_bridge_is_overdue_after_the_proof_window() {
        let mut t = Tracker::started(at(100));
        t.tell(Mode::Follower);
        assert_eq!(t.wake_at(), Some(at(100).saturating_add(PROOF_WITHIN)));
        let end = at(100).saturating_add(PROOF_WITHIN);
        assert!(!t.unproven_at(at(101)));
        assert!(t.unproven_at(end));
        // One read proves it, whatever it answered.
        t.on_read(0, false);
        assert!(t.proven());
        assert!(!t.unproven_at(end));
        assert_eq!(t.wake_at(), None);
    }

    #[test]
    fn the_process_starts_with_the_follower_env_the_election_on_and_the_preload_first() {
        let kv = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let leader = kv(&[("NAMESPACE_SELECTOR", "*")]);
        let follower = kv(&[
            ("NAMESPACE_SELECTOR", "idle"),
            ("LEADER_ELECTION_ENABLED", "false"),
        ]);
        let env = spawn_env(&leader, &follower, Some("--max-old-space-size=256"));
        let get = |key: &str| {
            env.iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("NAMESPACE_SELECTOR").as_deref(), Some("idle"));
        assert_eq!(get("LEADER_ELECTION_ENABLED").as_deref(), Some("true"));
        assert_eq!(get("LEADER_RETRY_PERIOD_SECONDS").as_deref(), Some("1"));
        let node = get("NODE_OPTIONS").expect("NODE_OPTIONS");
        assert_eq!(
            node,
            format!(
                "{} --max-old-space-size=256",
                port_map::data_import(PRELOAD)
            )
        );
        assert_eq!(
            get(LEADER_VAR).as_deref(),
            Some(r#"{"NAMESPACE_SELECTOR":"*"}"#)
        );
        assert_eq!(
            get(FOLLOWER_VAR).as_deref(),
            Some(r#"{"NAMESPACE_SELECTOR":"idle"}"#)
        );
        assert!(get(FD_VAR).is_none(), "added per start");
    }
}
