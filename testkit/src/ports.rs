//! Free loopback ports for the servers the tests start.
//!
//! Why not the kernel's choice (`bind(:0)`): it comes from the ephemeral range
//! (`net.ipv4.ip_local_port_range`), the same range every outgoing connection's source port is
//! taken from. Between choosing a port and the server binding it, any connection on the machine
//! (a client of the apiserver, of Redis, of the app) may take it as its source port, and the
//! server's start then fails with EADDRINUSE; with hundreds of connections per test run that
//! happened. Ports below the ephemeral range are given to no connection by the kernel, so only
//! another server can take them: those are chosen here, from a cursor that starts at a
//! different place in each process and moves on with every choice, so two tests of one run do
//! not pick the same port either. A port is checked free on 127.0.0.1 and ::1 when chosen.

use std::net::{Ipv4Addr, Ipv6Addr, TcpListener};
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The lowest port chosen: above the registered services most often found on a machine.
const LOWEST: u16 = 10_000;

/// The fewest ports the range below the ephemeral one must have; with fewer (a machine whose
/// ephemeral range starts low) the kernel's choice is used after all.
const FEWEST: u16 = 1_000;

/// One free port on 127.0.0.1.
pub fn free_port() -> u16 {
    let [port] = free_ports();
    port
}

/// `N` distinct free ports on 127.0.0.1, all held open together while choosing, so none
/// repeats.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let mut ports = [0u16; N];
    ports.copy_from_slice(&free_port_list(N));
    ports
}

/// `n` distinct free ports on 127.0.0.1, as [`free_ports`].
pub fn free_port_list(n: usize) -> Vec<u16> {
    let held: Vec<Held> = (0..n).map(|_| choose()).collect();
    held.iter().map(|held| held.port).collect()
}

/// A chosen port, bound until dropped.
struct Held {
    port: u16,
    _v4: TcpListener,
    _v6: Option<TcpListener>,
}

fn choose() -> Held {
    let Some(range) = below_ephemeral() else {
        let v4 = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
        let port = v4.local_addr().expect("a bound address").port();
        return Held {
            port,
            _v4: v4,
            _v6: None,
        };
    };
    let span = u32::from(range.end - range.start);
    for _ in 0..span {
        let offset = cursor().fetch_add(1, Ordering::Relaxed) % span;
        let port = range.start + offset as u16;
        let Ok(v4) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) else {
            continue;
        };
        // ::1 may be missing (IPv6 off); a port taken there is skipped.
        let v6 = match TcpListener::bind((Ipv6Addr::LOCALHOST, port)) {
            Ok(v6) => Some(v6),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(_) => None,
        };
        return Held {
            port,
            _v4: v4,
            _v6: v6,
        };
    }
    panic!("no free port on 127.0.0.1 in {range:?}");
}

/// From [`LOWEST`] up to the start of the ephemeral range, if that leaves [`FEWEST`] ports.
fn below_ephemeral() -> Option<Range<u16>> {
    static RANGE: OnceLock<Option<Range<u16>>> = OnceLock::new();
    RANGE
        .get_or_init(|| {
            let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
            let first: u16 = text.split_whitespace().next()?.parse().ok()?;
            (first >= LOWEST + FEWEST).then_some(LOWEST..first)
        })
        .clone()
}

/// Where this process chooses next: starts from its PID and the clock, so concurrent test
/// processes begin far apart.
fn cursor() -> &'static AtomicU32 {
    static CURSOR: OnceLock<AtomicU32> = OnceLock::new();
    CURSOR.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        AtomicU32::new(std::process::id().wrapping_mul(7919) ^ nanos)
    })
}
