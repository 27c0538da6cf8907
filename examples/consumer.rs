//! A reference consumer of the grant protocol, for apps that switch operator mode live
//! instead of being restarted by `passmower-elector supervise`.
//!
//! It does what the protocol asks of any consumer (see docs/protocol.md, "The flag file and toggle
//! protocol"):
//! - obeys only objects it can tie to its elector: the `mac` verifies under the key in
//!   `<flag-file>.token` and `incarnation` is the one that file names (on a mismatch the token is
//!   read again once, in case the elector just restarted); a leader grant must not expire further
//!   ahead than the `renew_deadline_ns` it announces; anything else is refused (401/403/400 on the
//!   toggle, ignored in the flag file) — and never obeyed;
//! - takes grants from two channels, the toggle push (POST /grant on loopback) and the flag
//!   file, and obeys an object only if its (incarnation, seq) is newer than the last one;
//! - keeps its own dead man's switch: a leader grant lapses at `expires_boottime_ns` on
//!   CLOCK_BOOTTIME even if the elector never says so;
//! - acknowledges only once a change has taken effect (operators really stopped), by the 2xx
//!   response and by the ack file `<flag-file>.ack`, both a signed ack object, and writes
//!   `"stopped"` there on exit.
//!
//! Run: `cargo run --example consumer -- [FLAG_FILE] [LISTEN_ADDR]`
//! (defaults /var/run/passmower-elector/grant.json and 127.0.0.1:8082).

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use passmower_elector::clock::{self, BootInstant};
use passmower_elector::grant::auth::{self, Token};
use passmower_elector::grant::{self, Grant, Mode, Order};
use tokio::sync::{Mutex, Notify};
use tokio::task::JoinHandle;

/// The UID the elector image runs as; a token file may be owned by it or by us.
const ELECTOR_UID: u32 = 65532;

/// What this process is doing and why.
struct Consumer {
    ack_file: PathBuf,
    token_file: PathBuf,
    /// The elector's key and incarnation, as last read from the token file.
    token: Option<Token>,
    /// The newest object obeyed; older ones are ignored.
    last: Order,
    /// The obeyed grant, if it made us leader (its expiry drives the dead man's switch).
    leader_until: Option<BootInstant>,
    /// The operator work; `Some` exactly while in operator mode.
    operators: Option<JoinHandle<()>>,
}

/// How a grant was received.
enum Outcome {
    /// Obeyed; carries the signed ack of the mode now in effect.
    Obeyed(Grant),
    AlreadyInEffect(Grant),
    Stale,
    /// Cannot be tied to the elector (401: bad or no mac, 403: another incarnation) or is not
    /// something an elector can mean (400).
    Refused(StatusCode, String),
}

impl Consumer {
    /// Checks that `g` comes from the elector named by the token file and is within its limits.
    fn verify(&mut self, g: &Grant) -> Result<(), (StatusCode, String)> {
        if self.authenticate(g).is_err() {
            // The elector may just have restarted with a new key: read the token once more.
            self.reload_token();
        }
        self.authenticate(g)?;
        let now = BootInstant::now();
        if g.mode == Mode::Stopped {
            return Err((StatusCode::BAD_REQUEST, "\"stopped\" is for acks".into()));
        }
        // The rule every consumer applies, as the supervisor does.
        g.check_leader_bound(now)
            .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))
    }

    fn authenticate(&self, g: &Grant) -> Result<(), (StatusCode, String)> {
        let Some(token) = &self.token else {
            return Err((StatusCode::FORBIDDEN, "no elector token".into()));
        };
        if g.incarnation != token.incarnation {
            return Err((
                StatusCode::FORBIDDEN,
                "not the running elector's incarnation".into(),
            ));
        }
        if !token.key.verify_grant(g) {
            return Err((StatusCode::UNAUTHORIZED, "mac missing or wrong".into()));
        }
        Ok(())
    }

    fn reload_token(&mut self) {
        let me = nix::unistd::geteuid().as_raw();
        match auth::read_token(&self.token_file, &[me, ELECTOR_UID]) {
            Ok(Some(t)) => self.token = Some(t),
            Ok(None) => {}
            // Keep the key we have: a broken or planted file must not make us forget it.
            Err(e) => eprintln!("{e}"),
        }
    }

    /// Applies `g` if it is authentic and newer than anything obeyed, then acks it.
    async fn obey(&mut self, g: &Grant) -> Outcome {
        if let Err((status, why)) = self.verify(g) {
            return Outcome::Refused(status, why);
        }
        if g.order() < self.last {
            return Outcome::Stale;
        }
        if g.order() == self.last {
            return Outcome::AlreadyInEffect(self.ack_object(self.mode_in_effect()));
        }
        self.last = g.order();
        // A leader grant that arrives already expired is a follower grant.
        let mode = g.effective_mode(BootInstant::now());
        match mode {
            Mode::Leader => {
                self.leader_until = Some(g.expiry());
                if self.operators.is_none() {
                    println!("promoted (epoch {}, lease {})", g.epoch, g.lease);
                    self.operators = Some(tokio::spawn(operators()));
                }
            }
            _ => self.stop("demoted").await,
        }
        Outcome::Obeyed(self.ack(mode))
    }

    fn mode_in_effect(&self) -> Mode {
        if self.operators.is_some() {
            Mode::Leader
        } else {
            Mode::Follower
        }
    }

    /// Stops operator work for real before returning: the ack that follows is a promise.
    async fn stop(&mut self, why: &str) {
        self.leader_until = None;
        if let Some(task) = self.operators.take() {
            task.abort();
            let _ = task.await;
            println!("{why}: operators stopped");
        }
    }

    /// The signed ack of the last object obeyed, in `mode`.
    fn ack_object(&self, mode: Mode) -> Grant {
        let mut ack = Grant::follower("", 0, self.last, "");
        ack.mode = mode;
        if let Some(token) = &self.token {
            token.key.sign_ack(&mut ack);
        }
        ack
    }

    /// Writes the ack file (atomic) and returns the ack object for a toggle answer.
    fn ack(&self, mode: Mode) -> Grant {
        let ack = self.ack_object(mode);
        if let Err(e) = grant::write_file(&self.ack_file, &ack) {
            eprintln!("cannot write {}: {e}", self.ack_file.display());
        }
        ack
    }
}

/// Stands in for the app's controllers.
async fn operators() {
    loop {
        println!("reconciling");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let flag_file = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "/var/run/passmower-elector/grant.json".into()),
    );
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:8082".into());
    let mut state = Consumer {
        ack_file: grant::ack_path(&flag_file),
        token_file: auth::token_path(&flag_file),
        token: None,
        last: Order::default(),
        leader_until: None,
        operators: None,
    };
    state.reload_token();
    let consumer = Arc::new(Mutex::new(state));
    let changed = Arc::new(Notify::new());

    tokio::spawn(watch_flag_file(
        flag_file,
        consumer.clone(),
        changed.clone(),
    ));
    tokio::spawn(dead_mans_switch(consumer.clone(), changed.clone()));
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    // SIGTERM is how a pod is stopped; SIGINT (ctrl-c) for a terminal.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    println!("toggle on http://{listen}/grant");
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = accepted?;
                let (consumer, changed) = (consumer.clone(), changed.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        toggle(req, consumer.clone(), changed.clone())
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            _ = tokio::signal::ctrl_c() => break,
            _ = terminate.recv() => break,
        }
    }
    // Exiting: nothing runs any more, and the elector reads that from the ack file.
    let mut c = consumer.lock().await;
    c.stop("exiting").await;
    c.ack(Mode::Stopped);
    Ok(())
}

/// POST /grant: 200 with the signed ack once the grant is in effect, 409 for an object older
/// than one obeyed, 401/403/400 for one that cannot be tied to the elector.
async fn toggle(
    req: Request<Incoming>,
    consumer: Arc<Mutex<Consumer>>,
    changed: Arc<Notify>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, body: Vec<u8>| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        Ok(r)
    };
    if req.method() != Method::POST || req.uri().path() != "/grant" {
        return reply(StatusCode::NOT_FOUND, b"POST /grant\n".to_vec());
    }
    let Ok(body) = Limited::new(req.into_body(), 64 * 1024).collect().await else {
        return reply(StatusCode::BAD_REQUEST, b"unreadable body\n".to_vec());
    };
    let Ok(g) = Grant::from_json(&body.to_bytes()) else {
        return reply(StatusCode::BAD_REQUEST, b"not a grant object\n".to_vec());
    };
    let outcome = consumer.lock().await.obey(&g).await;
    changed.notify_one();
    match outcome {
        Outcome::Obeyed(ack) | Outcome::AlreadyInEffect(ack) => {
            reply(StatusCode::OK, ack.to_json())
        }
        Outcome::Stale => reply(
            StatusCode::CONFLICT,
            b"older than the grant in effect\n".to_vec(),
        ),
        Outcome::Refused(status, why) => {
            eprintln!("refused a pushed object: {why}");
            reply(status, format!("{why}\n").into_bytes())
        }
    }
}

/// The flag file is the channel that survives a lost push; polling it is simple and enough
/// (inotify would only shave the interval).
async fn watch_flag_file(path: PathBuf, consumer: Arc<Mutex<Consumer>>, changed: Arc<Notify>) {
    let mut last_refusal = String::new();
    loop {
        if let Some(g) = read(&path) {
            match consumer.lock().await.obey(&g).await {
                Outcome::Obeyed(_) => changed.notify_one(),
                // Logged once per distinct reason, so a forged file does not flood the log.
                Outcome::Refused(_, why) if why != last_refusal => {
                    eprintln!("ignoring {}: {why}", path.display());
                    last_refusal = why;
                }
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn read(path: &Path) -> Option<Grant> {
    // grant::read_file never follows a symlink, never blocks on a FIFO and caps the size.
    match grant::read_file(path) {
        Ok(g) => g,
        Err(e) => {
            // Never half-written (the elector renames into place), so this is worth a line.
            eprintln!("ignoring {}: {e}", path.display());
            None
        }
    }
}

/// Demotes when the grant in effect expires on CLOCK_BOOTTIME, whatever the elector does.
async fn dead_mans_switch(consumer: Arc<Mutex<Consumer>>, changed: Arc<Notify>) {
    loop {
        let deadline = consumer.lock().await.leader_until;
        match deadline {
            Some(at) => tokio::select! {
                _ = clock::sleep_until(at) => {
                    let mut c = consumer.lock().await;
                    // Only if no renewal moved the deadline meanwhile.
                    if c.leader_until == Some(at) {
                        c.stop("grant expired").await;
                        c.ack(Mode::Follower);
                    }
                }
                _ = changed.notified() => {}
            },
            None => changed.notified().await,
        }
    }
}
