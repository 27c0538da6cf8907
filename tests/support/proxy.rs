//! A loopback TCP proxy between an elector and the apiserver that can stall, cut or slow the
//! connection on demand: the network faults the election must survive.
//!
//! It forwards raw bytes, so TLS passes through untouched and the client still verifies the
//! apiserver's certificate (which names 127.0.0.1, the proxy's address too).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
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
                    tokio::select! {
                        _ = accept_loop(listener, upstream, mode_rx) => {}
                        _ = shutdown_rx => {}
                    }
                });
                // Dropping the runtime drops every connection task and its sockets.
            })
            .expect("spawn proxy thread");
        FaultProxy {
            addr,
            mode,
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

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Receiver<FaultMode>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // EMFILE and the like: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if *mode.borrow() == FaultMode::Reset {
            rst(&client);
            continue;
        }
        tokio::spawn(serve(client, upstream, mode.clone()));
    }
}

/// Closes with RST instead of FIN: the peer sees ECONNRESET, as when a middlebox drops state.
fn rst(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

async fn serve(mut client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<FaultMode>) {
    // A connection opened during a partition reaches the apiserver only once it heals.
    if gate(&mut mode).await.is_none() {
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
        let mut reset_watch = mode.clone();
        tokio::select! {
            _ = async { tokio::join!(pump(cr, sw, mode.clone()), pump(sr, cw, mode.clone())) } => false,
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
async fn pump<R, W>(mut from: R, mut to: W, mode: watch::Receiver<FaultMode>)
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(64);
    let mut read_mode = mode.clone();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let Some(delay) = gate(&mut read_mode).await else {
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
    let mut write_mode = mode;
    let writer = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if gate(&mut write_mode).await.is_none() || to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        // The reader saw EOF: pass the half-close on.
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}
