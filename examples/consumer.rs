//! A reference consumer of the grant protocol, for apps that switch operator mode live
//! instead of being restarted by `passmower-elector supervise`.
//!
//! It does what the protocol asks of any consumer (see DESIGN "Safety"):
//! - takes grants from two channels, the toggle push (POST /grant on loopback) and the flag
//!   file, and obeys an object only if its (incarnation, seq) is newer than the last one;
//! - keeps its own dead man's switch: a leader grant lapses at `expires_boottime_ns` on
//!   CLOCK_BOOTTIME even if the elector never says so;
//! - acknowledges only once a change has taken effect (operators really stopped), by the 2xx
//!   response and by the ack file `<flag-file>.ack`, and writes `"stopped"` there on exit.
//!
//! Run: `cargo run --example consumer -- [FLAG_FILE] [LISTEN_ADDR]`
//! (defaults /var/run/passmower-elector/grant.json and 127.0.0.1:8082).

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use passmower_elector::clock::{self, BootInstant};
use passmower_elector::grant::{self, Grant, Mode, Order};
use tokio::sync::{Mutex, Notify};
use tokio::task::JoinHandle;

/// What this process is doing and why.
struct Consumer {
    ack_file: PathBuf,
    /// The newest object obeyed; older ones are ignored.
    last: Order,
    /// The obeyed grant, if it made us leader (its expiry drives the dead man's switch).
    leader_until: Option<BootInstant>,
    /// The operator work; `Some` exactly while in operator mode.
    operators: Option<JoinHandle<()>>,
}

/// How a grant was received.
enum Outcome {
    Obeyed,
    AlreadyInEffect,
    Stale,
}

impl Consumer {
    /// Applies `g` if it is newer than anything obeyed, then acks it in the ack file.
    async fn obey(&mut self, g: &Grant) -> Outcome {
        if g.order() < self.last {
            return Outcome::Stale;
        }
        if g.order() == self.last {
            return Outcome::AlreadyInEffect;
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
        self.ack(mode);
        Outcome::Obeyed
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

    fn ack(&self, mode: Mode) {
        let ack = serde_json::json!({
            "incarnation": self.last.incarnation,
            "seq": self.last.seq,
            "mode": mode,
        });
        let mut bytes = ack.to_string().into_bytes();
        bytes.push(b'\n');
        if let Err(e) = passmower_elector::atomic_file::write(&self.ack_file, &bytes) {
            eprintln!("cannot write {}: {e}", self.ack_file.display());
        }
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
    let consumer = Arc::new(Mutex::new(Consumer {
        ack_file: grant::ack_path(&flag_file),
        last: Order::default(),
        leader_until: None,
        operators: None,
    }));
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

/// POST /grant: 200 once the grant is in effect, 409 for an object older than one obeyed.
async fn toggle(
    req: Request<Incoming>,
    consumer: Arc<Mutex<Consumer>>,
    changed: Arc<Notify>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, body: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *r.status_mut() = status;
        Ok(r)
    };
    if req.method() != Method::POST || req.uri().path() != "/grant" {
        return reply(StatusCode::NOT_FOUND, "POST /grant\n");
    }
    let Ok(body) = req.into_body().collect().await else {
        return reply(StatusCode::BAD_REQUEST, "unreadable body\n");
    };
    let Ok(g) = Grant::from_json(&body.to_bytes()) else {
        return reply(StatusCode::BAD_REQUEST, "not a grant object\n");
    };
    let outcome = consumer.lock().await.obey(&g).await;
    changed.notify_one();
    match outcome {
        Outcome::Obeyed | Outcome::AlreadyInEffect => reply(StatusCode::OK, "ok\n"),
        Outcome::Stale => reply(StatusCode::CONFLICT, "older than the grant in effect\n"),
    }
}

/// The flag file is the channel that survives a lost push; polling it is simple and enough
/// (inotify would only shave the interval).
async fn watch_flag_file(path: PathBuf, consumer: Arc<Mutex<Consumer>>, changed: Arc<Notify>) {
    loop {
        if let Some(g) = read(&path) {
            if let Outcome::Obeyed = consumer.lock().await.obey(&g).await {
                changed.notify_one();
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn read(path: &Path) -> Option<Grant> {
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
