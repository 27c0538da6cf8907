//! Figures for `supervise` (printed, never asserted): grant change → new child running, grant
//! expiry → old process group gone, and the supervisor's resident memory.
//!
//! `cargo test --test bench supervise_bench:: -- --ignored --nocapture`; set `SUPERVISE_BIN` to measure
//! another build, e.g. `SUPERVISE_BIN=target/release/passmower-elector` after `cargo build --release`.

use std::time::{Duration, Instant};

use crate::product::*;
use passmower_elector::clock::BootInstant;

const ROUNDS: usize = 20;
const LIMIT: Duration = Duration::from_secs(15);

fn percentile(xs: &mut [Duration], p: f64) -> Duration {
    xs.sort();
    xs[((xs.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn vm(pid: i32, key: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(key)).map(|l| l.to_owned()))
        .unwrap_or_else(|| format!("{key} unavailable"))
}

/// Polls (1 ms) until the `starts` record grows past `n`; returns when it did.
fn wait_starts(sb: &Sandbox, n: usize) -> Option<Instant> {
    let start = Instant::now();
    while start.elapsed() < LIMIT {
        if sb.lines("starts").len() > n {
            return Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

#[test]
#[ignore = "benchmark: prints figures, run with --ignored --nocapture"]
fn bench_supervise() {
    let bin = std::env::var("SUPERVISE_BIN").unwrap_or_else(|_| BIN.to_owned());
    let sb = Sandbox::new();
    let dir = sb.dir.path().display().to_string();
    // An app that starts instantly and stops promptly on SIGTERM, so the figures are ours.
    let app = sb.script(
        "app.sh",
        &format!("echo \"$$ mode=$MODE\" >> {dir}/starts\ntrap 'exit 0' TERM\nwhile :; do sleep 1 & wait $!; done"),
    );
    let sv = Supervisor::start_bin(
        &bin,
        &sb,
        &[
            "--leader-env",
            "MODE=leader",
            "--follower-env",
            "MODE=follower",
            "--kill-grace",
            "3s",
        ],
        &[app.to_str().unwrap_or_default()],
    );
    sv.wait_mode("follower", LIMIT).expect("follower child");

    // 1. Flag file change → new child running (its first line written).
    let mut via_file = Vec::new();
    let mut seq = 0;
    for round in 0..ROUNDS {
        seq += 1;
        let g = if round % 2 == 0 {
            leader(1, seq, Duration::from_secs(60))
        } else {
            follower(1, seq)
        };
        let n = sb.lines("starts").len();
        let t0 = Instant::now();
        sb.write_grant(&g);
        let t1 = wait_starts(&sb, n).expect("new child started");
        via_file.push(t1 - t0);
        std::thread::sleep(Duration::from_millis(50));
    }

    // 2. Push → 200 (old group gone and new child started).
    let mut via_push = Vec::new();
    for round in 0..ROUNDS {
        seq += 1;
        let g = if round % 2 == 0 {
            leader(1, seq, Duration::from_secs(60))
        } else {
            follower(1, seq)
        };
        let t0 = Instant::now();
        let (status, body) = sv.push(&g);
        assert_eq!(status, 200, "{body}");
        via_push.push(t0.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    }

    // 3. Expiry without renewal → the leader's process group is gone.
    let mut expiry_to_gone = Vec::new();
    for _ in 0..5 {
        if sv.mode()["mode"] == "leader" {
            seq += 1;
            assert_eq!(sv.push(&follower(1, seq)).0, 200);
        }
        seq += 1;
        let g = leader(1, seq, Duration::from_millis(800));
        assert_eq!(sv.push(&g).0, 200);
        let pid = sv.wait_mode("leader", LIMIT).expect("leader");
        let expiry = BootInstant::from_nanos(g.expires_boottime_ns);
        let start = Instant::now();
        while exists(pid) && start.elapsed() < LIMIT {
            std::thread::sleep(Duration::from_micros(500));
        }
        expiry_to_gone.push(BootInstant::now().saturating_since(expiry));
        sv.wait_mode("follower", LIMIT).expect("follower again");
    }

    let pid = sv.pid();
    println!("supervise figures ({bin}):");
    println!(
        "  flag file change -> new child running: p50 {} p90 {} max {} ({ROUNDS} rounds)",
        ms(percentile(&mut via_file, 0.5)),
        ms(percentile(&mut via_file, 0.9)),
        ms(percentile(&mut via_file, 1.0)),
    );
    println!(
        "  push -> 200 (old group gone, new child started): p50 {} p90 {} max {} ({ROUNDS} rounds)",
        ms(percentile(&mut via_push, 0.5)),
        ms(percentile(&mut via_push, 0.9)),
        ms(percentile(&mut via_push, 1.0)),
    );
    println!(
        "  grant expiry -> old process group gone: p50 {} max {} (5 rounds, includes up to 0.5 ms polling)",
        ms(percentile(&mut expiry_to_gone, 0.5)),
        ms(percentile(&mut expiry_to_gone, 1.0)),
    );
    println!("  supervisor {} / {}", vm(pid, "VmRSS"), vm(pid, "VmHWM"));
}
