//! A loopback TCP proxy between an elector and the apiserver that can stall, cut or slow the
//! connection on demand: the network faults the election must survive.
//!
//! It forwards raw bytes, so TLS passes through untouched and the client still verifies the
//! apiserver's certificate (which names 127.0.0.1, the proxy's address too).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kube::config::Kubeconfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// What the proxy does with traffic, switchable at any time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultMode {
    /// Forward everything at once.
    Pass,
    /// A partition: connections (old and new) stay open but no byte moves in either
    /// direction. Bytes are held, not lost, so on `Pass` they flow again as they would once a
    /// real network heals under TCP retransmission.
    Blackhole,
    /// Every open connection is aborted with a TCP RST; new ones are accepted and reset at
    /// once, which a client sees as a refused connection.
    Reset,
    /// Forward every chunk this long after it was read (latency, not a bandwidth limit).
    Delay(Duration),
}

/// A running proxy. Dropping it stops it and closes every connection.
#[must_use = "the proxy stops when dropped"]
pub struct FaultProxy {
    addr: SocketAddr,
    mode: watch::Sender<FaultMode>,
    /// Connections numbered below this are silenced for good (see
    /// [`FaultProxy::silence_open_connections`]).
    silenced_below: watch::Sender<u64>,
    /// Connections numbered from this on are held until released (see
    /// [`FaultProxy::hold_new_connections_after`]).
    held_from: watch::Sender<u64>,
    accepted: Arc<AtomicU64>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    dir: tempfile::TempDir,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` and forwards to `upstream`, in `Pass` mode.
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        assert!(
            upstream.ip().is_loopback(),
            "the proxy only forwards to loopback"
        );
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind proxy");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("proxy addr");
        let (mode, mode_rx) = watch::channel(FaultMode::Pass);
        let (silenced_below, silenced_rx) = watch::channel(0u64);
        let (held_from, held_rx) = watch::channel(u64::MAX);
        let accepted = Arc::new(AtomicU64::new(0));
        let counter = accepted.clone();
        let (shutdown, shutdown_rx) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name(format!("pme-proxy-{}", addr.port()))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("proxy runtime");
                rt.block_on(async move {
                    let listener = TcpListener::from_std(listener).expect("tokio listener");
                    let gates = Gates {
                        mode: mode_rx,
                        silenced_below: silenced_rx,
                        held_from: held_rx,
                        accepted: counter,
                    };
                    tokio::select! {
                        _ = accept_loop(listener, upstream, gates) => {}
                        _ = shutdown_rx => {}
                    }
                });
                // Dropping the runtime drops every connection task and its sockets.
            })
            .expect("spawn proxy thread");
        FaultProxy {
            addr,
            mode,
            silenced_below,
            held_from,
            accepted,
            shutdown: Some(shutdown),
            thread: Some(thread),
            dir: tempfile::Builder::new()
                .prefix("pme-proxy-")
                .tempdir()
                .expect("proxy tempdir"),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn mode(&self) -> FaultMode {
        *self.mode.borrow()
    }

    pub fn set_mode(&self, mode: FaultMode) {
        self.mode.send_replace(mode);
    }

    pub fn pass(&self) {
        self.set_mode(FaultMode::Pass)
    }

    pub fn blackhole(&self) {
        self.set_mode(FaultMode::Blackhole)
    }

    pub fn reset(&self) {
        self.set_mode(FaultMode::Reset)
    }

    pub fn delay(&self, d: Duration) {
        self.set_mode(FaultMode::Delay(d))
    }

    /// Every connection open now goes silent for good — no byte moves either way, nothing is
    /// closed — while new connections pass as the mode says: a middlebox that forgot its flows
    /// (a NAT or conntrack table flushed, a load balancer replaced), leaving half-open streams
    /// such as a watch that looks alive and never delivers again.
    pub fn silence_open_connections(&self) {
        self.silenced_below
            .send_replace(self.accepted.load(Ordering::SeqCst));
    }

    /// The connections opened after the next `n` wait — no byte moves, nothing is closed —
    /// until [`FaultProxy::release_held`], while the others pass as the mode says: a request
    /// held on its way (an HTTP/1 client opens a connection per concurrent request, so the
    /// first `n` serve what is already under way, e.g. a read and the watch it turns into).
    pub fn hold_new_connections_after(&self, n: u64) {
        self.held_from
            .send_replace(self.accepted.load(Ordering::SeqCst) + n);
    }

    /// Lets the held connections go.
    pub fn release_held(&self) {
        self.held_from.send_replace(u64::MAX);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// A copy of `base` (any kubeconfig) whose clusters all point at this proxy. It lives as
    /// long as the proxy.
    pub fn kubeconfig_via(&self, base: &Path) -> PathBuf {
        let mut config = Kubeconfig::read_from(base)
            .unwrap_or_else(|e| panic!("read kubeconfig {}: {e}", base.display()));
        for named in &mut config.clusters {
            if let Some(cluster) = named.cluster.as_mut() {
                cluster.server = Some(format!("https://{}", self.addr));
            }
        }
        let stem = base
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "kubeconfig".into());
        let path = self
            .dir
            .path()
            .join(format!("{stem}-via-{}.json", self.addr.port()));
        let bytes = serde_json::to_vec_pretty(&config).expect("serialize kubeconfig");
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What decides whether a connection's bytes may move: the mode, and whether the connection
/// was silenced.
#[derive(Clone)]
struct Gates {
    mode: watch::Receiver<FaultMode>,
    silenced_below: watch::Receiver<u64>,
    held_from: watch::Receiver<u64>,
    accepted: Arc<AtomicU64>,
}

/// The gates of one connection.
#[derive(Clone)]
struct ConnGate {
    mode: watch::Receiver<FaultMode>,
    silenced_below: watch::Receiver<u64>,
    held_from: watch::Receiver<u64>,
    id: u64,
}

impl ConnGate {
    fn silenced(&self) -> bool {
        self.id < *self.silenced_below.borrow()
    }

    /// Waits while the link is down; `Some(delay)` to forward, `None` on `Reset`. A silenced
    /// connection waits for ever.
    async fn open(&mut self) -> Option<Duration> {
        if self.silenced() {
            std::future::pending::<()>().await;
        }
        let id = self.id;
        self.held_from.wait_for(|from| id < *from).await.ok()?;
        gate(&mut self.mode).await
    }

    /// Returns when the mode, the silencing or the hold changes.
    async fn changed(&mut self) {
        tokio::select! {
            _ = self.mode.changed() => {}
            _ = self.silenced_below.changed() => {}
            _ = self.held_from.changed() => {}
        }
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, gates: Gates) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // EMFILE and the like: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if *gates.mode.borrow() == FaultMode::Reset {
            rst(&client);
            continue;
        }
        let conn = ConnGate {
            mode: gates.mode.clone(),
            silenced_below: gates.silenced_below.clone(),
            held_from: gates.held_from.clone(),
            id: gates.accepted.fetch_add(1, Ordering::SeqCst),
        };
        tokio::spawn(serve(client, upstream, conn));
    }
}

/// Closes with RST instead of FIN: the peer sees ECONNRESET, as when a middlebox drops state.
fn rst(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

async fn serve(mut client: TcpStream, upstream: SocketAddr, mut conn: ConnGate) {
    // A connection opened during a partition reaches the apiserver only once it heals.
    if conn.open().await.is_none() {
        rst(&client);
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        rst(&client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let reset = {
        let (cr, cw) = client.split();
        let (sr, sw) = server.split();
        let mut reset_watch = conn.mode.clone();
        tokio::select! {
            _ = async { tokio::join!(pump(cr, sw, conn.clone()), pump(sr, cw, conn.clone())) } => false,
            _ = reset_watch.wait_for(|m| *m == FaultMode::Reset) => true,
        }
    };
    if reset {
        rst(&client);
        rst(&server);
    }
}

/// Waits while the mode is `Blackhole`; `Some(delay)` to forward, `None` on `Reset`.
async fn gate(mode: &mut watch::Receiver<FaultMode>) -> Option<Duration> {
    let m = *mode.wait_for(|m| *m != FaultMode::Blackhole).await.ok()?;
    match m {
        FaultMode::Pass => Some(Duration::ZERO),
        FaultMode::Delay(d) => Some(d),
        FaultMode::Reset | FaultMode::Blackhole => None,
    }
}

/// Copies one direction. The reader stops reading during a partition (so TCP back-pressure
/// holds the sender, as on a real dead link); the writer holds each chunk until its delay has
/// passed and the link is up.
async fn pump<R, W>(mut from: R, mut to: W, conn: ConnGate)
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(64);
    let mut read_mode = conn.clone();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let Some(delay) = read_mode.open().await else {
                return;
            };
            tokio::select! {
                n = from.read(&mut buf) => match n {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if tx.send((Instant::now() + delay, buf[..n].to_vec())).await.is_err() {
                            return;
                        }
                    }
                },
                // Re-gate when the mode changes mid-read (a partition starts).
                _ = read_mode.changed() => {}
            }
        }
    };
    let mut write_mode = conn;
    let writer = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if write_mode.open().await.is_none() || to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        // The reader saw EOF: pass the half-close on.
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}
