//! Who wrote an install's operator objects around a fault, from both places Passmower's
//! operators write: the apiserver's audit log (by source address) and Redis `MONITOR` (by
//! client address), each write set against the pod the Lease named at that instant
//! ([`Holders`]). From them the side-by-side comparison's per-round figures: the writes from a
//! non-holder, the new holder's first write after a handover, the writes a pod sent after it
//! released the Lease, and those of a given pod in a stretch (a thawed one).

use super::audit::{Holders, Write};
use super::redis_monitor::Monitored;

/// Where a write went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    Api,
    Redis,
}

/// One operator write, from either store.
#[derive(Clone, Debug)]
pub struct OpWrite {
    /// When the store received it (µs since the epoch).
    pub t_us: i64,
    pub store: Store,
    /// The sender's pod address, and for Redis its client port (which names the process).
    pub ip: String,
    pub port: Option<u16>,
    /// `update oidcclients/x/status`, `SET oidc:Client:x`.
    pub what: String,
    /// The store took it: a 2xx from the apiserver; Redis takes everything.
    pub admitted: bool,
    /// The apiserver's answer (`None` for Redis).
    pub code: Option<i32>,
}

/// The operator writes in `[from_us, to_us]`: the apiserver's by `user` (admitted or not; dry
/// runs are none) and Redis's to the operators' keys, in time order.
pub fn operator_writes(
    api: &[Write],
    redis: &[Monitored],
    user: &str,
    from_us: i64,
    to_us: i64,
) -> Vec<OpWrite> {
    let mut out: Vec<OpWrite> = api
        .iter()
        .filter(|w| w.user == user && w.is_operator_write())
        .filter(|w| (from_us..=to_us).contains(&w.received_us))
        .map(|w| OpWrite {
            t_us: w.received_us,
            store: Store::Api,
            ip: w.source_ip.clone(),
            port: None,
            what: format!(
                "{} {}/{}{}{}",
                w.verb,
                w.resource,
                w.name,
                if w.subresource.is_empty() { "" } else { "/" },
                w.subresource
            ),
            admitted: w.succeeded(),
            code: Some(w.code),
        })
        .collect();
    out.extend(
        redis
            .iter()
            .filter(|m| m.is_operator_write() && (from_us..=to_us).contains(&m.t_us))
            .map(|m| OpWrite {
                t_us: m.t_us,
                store: Store::Redis,
                ip: m.ip.clone(),
                port: Some(m.port),
                what: format!("{} {}", m.command, m.key()),
                admitted: true,
                code: None,
            }),
    );
    out.sort_by_key(|w| w.t_us);
    out
}

/// The admitted ones from a pod the Lease did not name at that instant.
pub fn non_holder<'a>(ops: &'a [OpWrite], holders: &Holders) -> Vec<&'a OpWrite> {
    ops.iter()
        .filter(|w| w.admitted && holders.at(w.t_us) != Some(w.ip.as_str()))
        .collect()
}

/// The handover after a fault at `t_fault_us` that hit the leader at `old_ip`: the first pod
/// other than it that the Lease named after the fault (or, when none did, the old leader's pod
/// again, restarted in place), and its first admitted operator write while the Lease named it
/// and after it was named: (that write, its pod's address). `None` when it wrote nothing.
pub fn handover<'a>(
    ops: &'a [OpWrite],
    holders: &Holders,
    old_ip: &str,
    t_fault_us: i64,
) -> Option<&'a OpWrite> {
    let (since, new_ip) = holders
        .first_other_after(t_fault_us, old_ip)
        .unwrap_or((t_fault_us, old_ip));
    ops.iter().find(|w| {
        w.admitted && w.ip == new_ip && w.t_us >= since && holders.at(w.t_us) == Some(new_ip)
    })
}

/// Admitted operator writes a pod sent after it released the Lease itself (a clean stop that
/// clears the holder before its operators have stopped), until the Lease names it again:
/// (the write, µs after the release).
pub fn after_release<'a>(
    ops: &'a [OpWrite],
    holders: &Holders,
    from_us: i64,
    to_us: i64,
) -> Vec<(&'a OpWrite, i64)> {
    let mut out = Vec::new();
    for (released, ip) in holders.releases(from_us, to_us) {
        let until = holders.next_named(ip, released).unwrap_or(i64::MAX);
        out.extend(
            ops.iter()
                .filter(|w| w.admitted && w.ip == ip && w.t_us > released && w.t_us < until)
                .map(|w| (w, w.t_us - released)),
        );
    }
    out.sort_by_key(|(w, _)| w.t_us);
    out
}

/// The writes (admitted or not) from the pod at `ip` in `[from_us, to_us]`, stopping where the
/// Lease names it again (from then on they are its own as holder).
pub fn from_pod<'a>(
    ops: &'a [OpWrite],
    holders: &Holders,
    ip: &str,
    from_us: i64,
    to_us: i64,
) -> Vec<&'a OpWrite> {
    let until = holders
        .next_named(ip, from_us)
        .map_or(to_us, |t| t.saturating_sub(1).min(to_us));
    ops.iter()
        .filter(|w| w.ip == ip && (from_us..=until).contains(&w.t_us))
        .collect()
}
