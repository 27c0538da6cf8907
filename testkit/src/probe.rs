//! Reading an elector's probe port as a scraper would: one plain HTTP/1.1 GET on loopback, and
//! samples out of the Prometheus text it serves.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// GET `path` on `127.0.0.1:port`: the body of a 200 answer within 3 s, else `None`.
pub fn probe_body(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// The value of the line of the Prometheus text `body` that starts with `series ` (a name, with
/// its labels as served: `passmower_elector_write_fence{state="active"}`).
pub fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}
