//! examples/consumer.rs, the reference consumer of the grant protocol, does what the protocol
//! asks of a consumer: obeys only newer objects (200 / 409 on the toggle), takes grants from the
//! flag file too, demotes itself when a leader grant expires, and writes "stopped" to its ack
//! file when SIGTERM ends it. Runs the built example (`cargo test --all-targets`, which
//! `scripts/test.sh` runs, builds it) as a child process, killed by PID if the test fails.

mod support;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use passmower_elector::clock::BootInstant;
use passmower_elector::grant::{self, Grant, Order};
use serde_json::Value;
use support::ElectorProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LEASE: &str = "auth/passmower";

/// `target/<profile>/examples/consumer`, beside the binary under test.
fn consumer_binary() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_passmower-elector"));
    let path = bin
        .parent()
        .expect("the binary's directory")
        .join("examples/consumer");
    assert!(
        path.is_file(),
        "{} is missing: run through scripts/test.sh (cargo test --all-targets builds the \
         examples) or `cargo build --example consumer` first",
        path.display()
    );
    path
}

/// POSTs `g` to the toggle; the HTTP status code.
async fn push(port: u16, g: &Grant) -> u16 {
    let body = g.to_json();
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the toggle");
    let head = format!(
        "POST /grant HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("send head");
    stream.write_all(&body).await.expect("send body");
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut reply))
        .await
        .expect("toggle answers in time")
        .expect("read reply");
    reply
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP reply: {reply:?}"))
}

fn ack(flag_file: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(grant::ack_path(flag_file)).ok()?;
    serde_json::from_str(&text).ok()
}

async fn wait_for_ack(
    consumer: &ElectorProcess,
    flag_file: &Path,
    seq: u64,
    mode: &str,
    within: Duration,
) {
    let ok = support::wait_until_async(within, Duration::from_millis(20), || async {
        ack(flag_file).is_some_and(|a| a["seq"] == seq && a["mode"] == mode)
    })
    .await;
    assert!(
        ok,
        "no ack {{seq {seq}, mode {mode}}} within {within:?}; ack file: {:?}\n{}",
        ack(flag_file),
        consumer.logs()
    );
}

fn leader(seq: u64, valid_for: Duration) -> Grant {
    let order = Order {
        incarnation: 1_000,
        seq,
    };
    Grant::leader(
        "pod-a_1",
        1,
        order,
        LEASE,
        BootInstant::now().saturating_add(valid_for),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_consumer_obeys_orders_expires_and_acks_stopped() {
    let program = consumer_binary();
    let dir = tempfile::tempdir().expect("tempdir");
    let flag_file = dir.path().join("grant.json");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut consumer = ElectorProcess::spawn_program(
        "consumer",
        &program,
        &[&flag_file.to_string_lossy(), &listen],
        &[] as &[(&str, &OsStr)],
    );
    let up = support::wait_until_async(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        },
    )
    .await;
    assert!(up, "the consumer never listened\n{}", consumer.logs());

    // A leader grant: obeyed, acked by 200 and in the ack file.
    assert_eq!(push(port, &leader(5, Duration::from_secs(30))).await, 200);
    wait_for_ack(&consumer, &flag_file, 5, "leader", Duration::from_secs(2)).await;
    // The same object again is already in effect: 200, nothing changes.
    assert_eq!(push(port, &leader(5, Duration::from_secs(30))).await, 200);
    // An older object (a delayed push) is refused and does not undo the newer one.
    let older = Grant::follower(
        "pod-a_1",
        1,
        Order {
            incarnation: 1_000,
            seq: 4,
        },
        LEASE,
    );
    assert_eq!(push(port, &older).await, 409);
    assert_eq!(ack(&flag_file).expect("ack")["seq"], 5);
    assert_eq!(ack(&flag_file).expect("ack")["mode"], "leader");

    // The flag file is the other channel: a newer grant written there is obeyed.
    grant::write_file(&flag_file, &leader(6, Duration::from_secs(30))).expect("write flag");
    wait_for_ack(&consumer, &flag_file, 6, "leader", Duration::from_secs(3)).await;

    // A leader grant nobody renews: the consumer's own dead man's switch demotes it at the
    // expiry, with no word from the elector.
    assert_eq!(
        push(port, &leader(7, Duration::from_millis(800))).await,
        200
    );
    wait_for_ack(&consumer, &flag_file, 7, "leader", Duration::from_secs(1)).await;
    wait_for_ack(&consumer, &flag_file, 7, "follower", Duration::from_secs(3)).await;
    assert!(
        consumer.logs().contains("grant expired: operators stopped"),
        "{}",
        consumer.logs()
    );

    // SIGTERM, as the kubelet stops a pod: exits and says "stopped" in the ack file.
    consumer.signal(Signal::SIGTERM);
    let status = consumer
        .wait_exit(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no exit after SIGTERM\n{}", consumer.logs()));
    assert!(status.success(), "{status}\n{}", consumer.logs());
    let last = ack(&flag_file).expect("ack file after exit");
    assert_eq!(last["mode"], "stopped", "{last}");
}
