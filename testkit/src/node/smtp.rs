//! An SMTP sink on the node's bridge address, for Passmower's e-mail (magic link) login: it
//! answers every command with success (AUTH included, no TLS), keeps each message it is given,
//! and delivers nothing. It listens inside the node's network namespace only, on
//! [`NODE_IP`](super::config::NODE_IP) (the pods reach it as they reach Redis), and stops by
//! itself after [`LIFETIME`].

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::config::NODE_IP;
use super::Node;

/// How long the sink accepts connections: longer than any test that uses it.
pub const LIFETIME: Duration = Duration::from_secs(1800);
/// A message larger than this is cut (Passmower's login mail is a few KiB).
const MAX_MESSAGE: usize = 1 << 20;

/// One message as the sink received it.
#[derive(Clone, Debug)]
pub struct Mail {
    /// The `RCPT TO` addresses.
    pub to: Vec<String>,
    /// The message (headers and body) as sent, dot-stuffing undone.
    pub data: String,
}

impl Mail {
    /// The message with quoted-printable soft line breaks and `=XX` escapes undone (how
    /// Nodemailer encodes a text part with long lines), so a URL can be searched for.
    pub fn decoded(&self) -> String {
        let joined = self.data.replace("=\r\n", "").replace("=\n", "");
        let bytes = joined.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'=' && i + 2 < bytes.len() {
                if let Ok(b) = u8::from_str_radix(&joined[i + 1..i + 3], 16) {
                    out.push(b);
                    i += 3;
                    continue;
                }
            }
            out.push(bytes[i]);
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// The running sink.
pub struct SmtpSink {
    /// Where the pods reach it.
    pub addr: SocketAddr,
    mails: Arc<Mutex<Vec<Mail>>>,
}

impl SmtpSink {
    /// Starts the sink on a free port of the node's bridge address.
    pub fn start(node: &Node) -> Result<SmtpSink, String> {
        let mails: Arc<Mutex<Vec<Mail>>> = Arc::default();
        let store = mails.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        node.ns.spawn_inside("pme-smtp-sink", move || {
            let listener = match TcpListener::bind((NODE_IP, 0)) {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(format!("bind {NODE_IP}:0: {e}")));
                    return;
                }
            };
            let _ = tx.send(listener.local_addr().map_err(|e| e.to_string()));
            let until = Instant::now() + LIFETIME;
            if listener.set_nonblocking(true).is_err() {
                return;
            }
            while Instant::now() < until {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let store = store.clone();
                        std::thread::spawn(move || session(conn, &store));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|e| format!("the SMTP sink did not start: {e}"))??;
        Ok(SmtpSink { addr, mails })
    }

    /// Every message received so far.
    pub fn mails(&self) -> Vec<Mail> {
        self.mails.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// Waits up to `timeout` for a message to `to`; the newest one.
    pub fn wait_for(&self, to: &str, timeout: Duration) -> Option<Mail> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self
                .mails()
                .into_iter()
                .rev()
                .find(|m| m.to.iter().any(|t| t.eq_ignore_ascii_case(to)));
            if found.is_some() || Instant::now() >= deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One SMTP session; each message it carries goes into `store`. Bounded by a read timeout.
fn session(conn: TcpStream, store: &Mutex<Vec<Mail>>) -> Option<()> {
    conn.set_nonblocking(false).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let mut out = conn.try_clone().ok()?;
    let mut reader = BufReader::new(conn);
    let mut say = |text: &str| out.write_all(format!("{text}\r\n").as_bytes()).is_ok();
    say("220 pme-smtp-sink ESMTP");
    let mut to = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return Some(());
        }
        let cmd = line.trim_end().to_owned();
        let verb = cmd
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_ascii_uppercase();
        let ok = match verb.as_str() {
            "EHLO" => say("250-pme-smtp-sink\r\n250-AUTH PLAIN LOGIN\r\n250 8BITMIME"),
            "HELO" => say("250 pme-smtp-sink"),
            // AUTH PLAIN with the credentials inline, or AUTH LOGIN's two prompts.
            "AUTH" if cmd.to_ascii_uppercase().starts_with("AUTH LOGIN") => {
                let mut answered = say("334 VXNlcm5hbWU6");
                for prompt in ["334 UGFzc3dvcmQ6", "235 2.7.0 accepted"] {
                    line.clear();
                    answered &= reader.read_line(&mut line).ok()? > 0 && say(prompt);
                }
                answered
            }
            "AUTH" if cmd.split_whitespace().count() >= 3 => say("235 2.7.0 accepted"),
            "AUTH" => {
                line.clear();
                say("334 ") && reader.read_line(&mut line).ok()? > 0 && say("235 2.7.0 accepted")
            }
            "MAIL" => {
                to.clear();
                say("250 ok")
            }
            "RCPT" => {
                let addr = cmd
                    .split_once(':')
                    .map(|(_, a)| a.trim().trim_start_matches('<').trim_end_matches('>'))
                    .unwrap_or_default()
                    .to_owned();
                to.push(addr);
                say("250 ok")
            }
            "DATA" => {
                if !say("354 end with <CRLF>.<CRLF>") {
                    return Some(());
                }
                let mut data = String::new();
                loop {
                    line.clear();
                    if reader.read_line(&mut line).ok()? == 0 {
                        return Some(());
                    }
                    if line.trim_end_matches(['\r', '\n']) == "." {
                        break;
                    }
                    if data.len() < MAX_MESSAGE {
                        data.push_str(line.strip_prefix('.').unwrap_or(&line));
                    }
                }
                if let Ok(mut m) = store.lock() {
                    m.push(Mail {
                        to: to.clone(),
                        data,
                    });
                }
                say("250 ok: kept")
            }
            "QUIT" => {
                say("221 bye");
                return Some(());
            }
            _ => say("250 ok"),
        };
        if !ok {
            return Some(());
        }
    }
}
