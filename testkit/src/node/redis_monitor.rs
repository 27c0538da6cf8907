//! Redis `MONITOR` on the node's Redis: every command with its client address and time, which
//! of them change data, and which of those are Passmower's operator work (the keys the write
//! inventory, docs/results/write-inventory.md, finds only the operators writing). Also which
//! process of a pod holds a Redis connection, to name the process behind a client address.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::config::{NODE_IP, REDIS_PORT};
use super::Node;

/// Redis commands that change data (everything else MONITOR shows is a read or a connection
/// command).
pub const WRITES: &[&str] = &[
    "SET",
    "SETEX",
    "PSETEX",
    "SETNX",
    "GETSET",
    "GETDEL",
    "DEL",
    "UNLINK",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "PERSIST",
    "HSET",
    "HMSET",
    "HSETNX",
    "HDEL",
    "HINCRBY",
    "SADD",
    "SREM",
    "SMOVE",
    "LPUSH",
    "RPUSH",
    "LPOP",
    "RPOP",
    "LREM",
    "LTRIM",
    "ZADD",
    "ZREM",
    "INCR",
    "INCRBY",
    "DECR",
    "DECRBY",
    "APPEND",
    "RENAME",
    "RENAMENX",
    "XADD",
    "PUBLISH",
];

/// Passmower's built-in client: every replica writes it at boot (`oidc:Client:passmower` and
/// its entry in `oidc:Clients:*`), leader or not, so it is no operator's work.
const BUILT_IN_CLIENT: &str = "passmower";

/// One command MONITOR printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Monitored {
    /// Microseconds since the epoch (Redis's clock: the machine's).
    pub t_us: i64,
    pub db: u32,
    pub ip: String,
    pub port: u16,
    /// Upper case.
    pub command: String,
    /// The arguments after the command, unquoted.
    pub args: Vec<String>,
}

impl Monitored {
    pub fn key(&self) -> &str {
        self.args.first().map_or("", String::as_str)
    }

    pub fn is_write(&self) -> bool {
        WRITES.contains(&self.command.as_str())
    }

    /// A write of Passmower's operators: an OIDC client's record (`oidc:Client:<id>`) or its
    /// entry in a client set (`oidc:Clients:<owner>`), but the built-in client's, and the
    /// user-event-hook operator's state (`oidc:OIDCUserEventHookState:*`).
    pub fn is_operator_write(&self) -> bool {
        if !self.is_write() {
            return false;
        }
        let key = self.key();
        if let Some(id) = key.strip_prefix("oidc:Client:") {
            return id != BUILT_IN_CLIENT;
        }
        if key.starts_with("oidc:Clients:") {
            // SADD/SREM name the members; a DEL or EXPIRE of a set is the set's owner's.
            let members = &self.args[1..];
            return !matches!(self.command.as_str(), "SADD" | "SREM")
                || members.iter().any(|m| m != BUILT_IN_CLIENT);
        }
        key.starts_with("oidc:OIDCUserEventHookState:")
    }

    /// `SET oidc:Client:*` and the like: the command and the key's kind, for a report.
    pub fn describe(&self) -> String {
        let key = self.key();
        let kind = key.rsplit_once(':').map_or(key, |(k, _)| k);
        format!("{} {kind}:*", self.command)
    }
}

/// `1700000000.123456 [1 10.88.0.5:41234] "SET" "key" "v\"x"` → the command; `None` for
/// anything else (MONITOR's `OK`, a line cut short).
pub fn parse(line: &str) -> Option<Monitored> {
    let (ts, rest) = line.split_once(' ')?;
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, "0"));
    let mut micros: String = frac.chars().take(6).collect();
    while micros.len() < 6 {
        micros.push('0');
    }
    let t_us = secs.parse::<i64>().ok()? * 1_000_000 + micros.parse::<i64>().ok()?;
    let rest = rest.strip_prefix('[')?;
    let (who, rest) = rest.split_once("] ")?;
    let (db, addr) = who.split_once(' ')?;
    let (ip, port) = addr.rsplit_once(':')?;
    let mut words = quoted_words(rest)?.into_iter();
    let command = words.next()?.to_ascii_uppercase();
    Some(Monitored {
        t_us,
        db: db.parse().ok()?,
        ip: ip.to_owned(),
        port: port.parse().ok()?,
        command,
        args: words.collect(),
    })
}

/// MONITOR's arguments: each in double quotes, `\"`, `\\` and `\xHH` escaped.
fn quoted_words(s: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        match chars.next() {
            None => return Some(out),
            Some('"') => {}
            Some(_) => return None,
        }
        let mut word = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'x' => {
                        let hex: String = [chars.next()?, chars.next()?].iter().collect();
                        word.push(char::from(u8::from_str_radix(&hex, 16).ok()?));
                    }
                    'n' => word.push('\n'),
                    'r' => word.push('\r'),
                    't' => word.push('\t'),
                    c => word.push(c),
                },
                c => word.push(c),
            }
        }
        out.push(word);
    }
}

/// `redis-cli MONITOR` against the node's Redis, from inside the node's namespaces, to a log
/// file; killed on drop.
pub struct Monitor {
    child: Child,
    pub log: PathBuf,
}

impl Monitor {
    pub fn start(node: &Node, log: &Path) -> Monitor {
        let file =
            std::fs::File::create(log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", NODE_IP, "-p", &REDIS_PORT.to_string(), "monitor"])
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(Stdio::null());
        node.ns.enter(&mut cmd, &node.layout.dir, &[]);
        let child = crate::process::spawn_tracked(cmd).expect("run redis-cli monitor");
        Monitor {
            child,
            log: log.to_owned(),
        }
    }

    /// Every command logged so far.
    pub fn read(&self) -> Vec<Monitored> {
        read(&self.log)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every command in MONITOR log `path`.
pub fn read(path: &Path) -> Vec<Monitored> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(parse)
        .collect()
}

/// The local ports of process `pid`'s TCP connections to the node's Redis: its socket inodes
/// (`/proc/PID/fd`) matched against its network namespace's table (`/proc/PID/net/tcp`).
pub fn redis_ports(pid: i32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')
                .map(str::to_owned)
        })
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    let redis_port = format!("{REDIS_PORT:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (local, remote, inode) = (f.get(1)?, f.get(2)?, f.get(9)?);
            let (_, rport) = remote.split_once(':')?;
            if rport != redis_port || !inodes.iter().any(|i| i == inode) {
                return None;
            }
            u16::from_str_radix(local.split_once(':')?.1, 16).ok()
        })
        .collect()
}

/// Client address (IP, port) → (pod, PID), as seen while the connections were open.
pub type Clients = BTreeMap<(String, u16), (String, i32)>;
