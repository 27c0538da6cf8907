//! examples/consumer.rs, the reference consumer of the grant protocol, does what the protocol
//! asks of a consumer: obeys only objects tied to its elector (401 / 403 / 400 otherwise, and a
//! forged flag file is ignored), only newer ones (200 / 409 on the toggle), takes grants from the
//! flag file too, demotes itself when a leader grant expires, signs its acks, and writes
//! "stopped" to its ack file when SIGTERM ends it. Runs the built example (`cargo test --all-targets`, which
//! `scripts/test.sh` runs, builds it) as a child process, killed by PID if the test fails.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use passmower_elector::clock::BootInstant;
use passmower_elector::grant::auth::{self, Key, Token};
use passmower_elector::grant::{self, Grant, Order};
use pme_testkit::free_port;
use pme_testkit::ElectorProcess;
use serde_json::Value;
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
    push_answer(port, g).await.0
}

/// POSTs `g` to the toggle; the HTTP status code and the body.
async fn push_answer(port: u16, g: &Grant) -> (u16, String) {
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
    let code = reply
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP reply: {reply:?}"));
    let body = reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

const INCARNATION: u64 = 1_000;

/// `g` as the elector would emit it: R 60s, K 3s, signed with `key`.
fn signed(key: &Key, g: Grant) -> Grant {
    let mut g = g.with_limits(Duration::from_secs(60), Duration::from_secs(3));
    key.sign_grant(&mut g);
    g
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
    let ok = pme_testkit::wait_until_async(within, Duration::from_millis(20), || async {
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
        incarnation: INCARNATION,
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
    // The elector's token, as it writes it before anything else.
    let key = Key::generate().expect("key");
    auth::write_token(
        &auth::token_path(&flag_file),
        &Token {
            incarnation: INCARNATION,
            key: key.clone(),
        },
    )
    .expect("token");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut consumer = ElectorProcess::spawn_program(
        "consumer",
        &program,
        &[&flag_file.to_string_lossy(), &listen],
        &[] as &[(&str, &OsStr)],
    );
    let up = pme_testkit::wait_until_async(
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

    // Forgeries first: unsigned, signed with a made-up key, another incarnation, and a signed
    // grant that expires further ahead than its renew deadline. None is obeyed.
    let mut forged = leader(u64::MAX, Duration::from_secs(30));
    forged.expires_boottime_ns = u64::MAX;
    assert_eq!(push(port, &forged).await, 401, "unsigned");
    let made_up = signed(&Key::generate().expect("key"), forged.clone());
    assert_eq!(push(port, &made_up).await, 401, "another key");
    let mut other_incarnation = leader(1, Duration::from_secs(30));
    other_incarnation.incarnation = BootInstant::now().as_nanos();
    assert_eq!(push(port, &signed(&key, other_incarnation)).await, 403);
    assert_eq!(push(port, &signed(&key, forged.clone())).await, 400);
    grant::write_file(&flag_file, &made_up).expect("write flag");
    std::thread::sleep(Duration::from_millis(600)); // three polls of the flag file
    assert!(
        ack(&flag_file).is_none(),
        "a forged object was obeyed: {:?}",
        ack(&flag_file)
    );
    assert!(
        consumer.logs().contains("mac missing or wrong"),
        "{}",
        consumer.logs()
    );

    // A leader grant: obeyed, acked by 200 with a signed ack, and in the ack file.
    let (code, body) = push_answer(port, &signed(&key, leader(5, Duration::from_secs(30)))).await;
    assert_eq!(code, 200, "{body}");
    let answered = Grant::from_json(body.as_bytes()).expect("the 200 carries an ack object");
    assert!(
        key.verify_ack(&answered),
        "the toggle's ack is signed: {body}"
    );
    wait_for_ack(&consumer, &flag_file, 5, "leader", Duration::from_secs(2)).await;
    let on_disk = grant::read_file(&grant::ack_path(&flag_file))
        .expect("ack file")
        .expect("ack file");
    assert!(key.verify_ack(&on_disk), "the ack file is signed");
    // The same object again is already in effect: 200, nothing changes.
    assert_eq!(
        push(port, &signed(&key, leader(5, Duration::from_secs(30)))).await,
        200
    );
    // An older object (a delayed push) is refused and does not undo the newer one.
    let older = Grant::follower(
        "pod-a_1",
        1,
        Order {
            incarnation: INCARNATION,
            seq: 4,
        },
        LEASE,
    );
    assert_eq!(push(port, &signed(&key, older)).await, 409);
    assert_eq!(ack(&flag_file).expect("ack")["seq"], 5);
    assert_eq!(ack(&flag_file).expect("ack")["mode"], "leader");

    // The flag file is the other channel: a newer grant written there is obeyed.
    grant::write_file(
        &flag_file,
        &signed(&key, leader(6, Duration::from_secs(30))),
    )
    .expect("write flag");
    wait_for_ack(&consumer, &flag_file, 6, "leader", Duration::from_secs(3)).await;

    // A leader grant nobody renews: the consumer's own dead man's switch demotes it at the
    // expiry, with no word from the elector.
    assert_eq!(
        push(port, &signed(&key, leader(7, Duration::from_millis(800)))).await,
        200
    );
    wait_for_ack(&consumer, &flag_file, 7, "leader", Duration::from_secs(1)).await;
    wait_for_ack(&consumer, &flag_file, 7, "follower", Duration::from_secs(3)).await;
    assert!(
        consumer.logs().contains("grant expired: operators stopped"),
        "{}",
        consumer.logs()
    );

    // The elector restarts: a new token, and its objects (lower seq, new incarnation) are
    // obeyed after the consumer reads the token again.
    let key2 = Key::generate().expect("key");
    let restarted = BootInstant::now().as_nanos();
    auth::write_token(
        &auth::token_path(&flag_file),
        &Token {
            incarnation: restarted,
            key: key2.clone(),
        },
    )
    .expect("token");
    let mut first = leader(1, Duration::from_secs(30));
    first.incarnation = restarted;
    assert_eq!(push(port, &signed(&key2, first)).await, 200);
    wait_for_ack(&consumer, &flag_file, 1, "leader", Duration::from_secs(2)).await;

    // SIGTERM, as the kubelet stops a pod: exits and says "stopped" in the ack file.
    consumer.signal(Signal::SIGTERM);
    let status = consumer
        .wait_exit(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no exit after SIGTERM\n{}", consumer.logs()));
    assert!(status.success(), "{status}\n{}", consumer.logs());
    let last = ack(&flag_file).expect("ack file after exit");
    assert_eq!(last["mode"], "stopped", "{last}");
}
