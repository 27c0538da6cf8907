//! Free loopback ports. A port is free when chosen; the server may lose it to another before it
//! binds, and then its start fails with its log.

use std::net::{Ipv4Addr, TcpListener};

/// One free port on 127.0.0.1.
pub fn free_port() -> u16 {
    let [port] = free_ports();
    port
}

/// `N` distinct free ports on 127.0.0.1, all held open together while choosing, so none
/// repeats.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0"))
        .collect();
    let mut ports = [0u16; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr().expect("a bound address").port();
    }
    ports
}
