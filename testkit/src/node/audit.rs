//! Reads the node apiserver's audit log: who wrote what, when and from which address. Pods
//! have addresses of their own on the node, so the source address names the pod; Lease
//! writes carry their response body, so they name the holder. From those, the leadership
//! intervals and the single-writer check of the end-to-end tests.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::oracle::{overlaps, Stretch};

/// One completed write (stage `ResponseComplete`).
#[derive(Clone, Debug)]
pub struct Write {
    /// Microseconds since the epoch when the apiserver received the request.
    pub received_us: i64,
    /// When it answered.
    pub completed_us: i64,
    pub user: String,
    pub source_ip: String,
    pub verb: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: i32,
    /// For Leases: `spec.holderIdentity` in the response (empty for a released Lease).
    pub lease_holder: Option<String>,
    /// A dry run (`dryRun=All` in the request URI): admitted or not, it changed nothing.
    pub dry_run: bool,
}

impl Write {
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// A write Passmower's operators make: its custom resources (and their status, the SCIM
    /// connections and user event hooks among them), the Secrets and Pods it creates, the Jobs
    /// of the event hooks and the Traefik middlewares of middleware clients. Not Leases or
    /// Events, which the elector writes, and not OIDCUsers: the HTTP side of every replica
    /// creates and patches them on a sign-in, so the audit log cannot tell the user operator's
    /// writes to them from a request's (the write fence leaves them alone for the same reason).
    /// A dry run is no write.
    pub fn is_operator_write(&self) -> bool {
        !self.dry_run
            && ((self.api_group == "codemowers.cloud" && self.resource != "oidcusers")
                || (self.api_group.is_empty()
                    && matches!(self.resource.as_str(), "secrets" | "pods"))
                || (self.api_group == "batch" && self.resource == "jobs")
                || matches!(
                    self.api_group.as_str(),
                    "traefik.io" | "traefik.containo.us"
                ))
    }

    /// A write to a Lease that took effect or was refused; a dry run (a probe) is none.
    pub fn is_lease_write(&self) -> bool {
        !self.dry_run && self.api_group == "coordination.k8s.io" && self.resource == "leases"
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    stage: String,
    verb: String,
    user: User,
    #[serde(default)]
    source_i_ps: Vec<String>,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(default)]
    response_status: Option<Status>,
    request_received_timestamp: String,
    stage_timestamp: String,
    #[serde(default)]
    response_object: Option<serde_json::Value>,
    #[serde(default, rename = "requestURI")]
    request_uri: String,
}

#[derive(Deserialize)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    api_group: String,
    #[serde(default)]
    subresource: String,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    code: i32,
}

/// Every completed write in the log (lines that do not parse are skipped: the last one may
/// be half-written while the apiserver runs). Dry runs are kept, marked (the elector's
/// write-fence check is one): they are neither operator writes nor Lease writes.
pub fn read(path: &Path) -> Vec<Write> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut writes = Vec::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Event>(line) else {
            continue;
        };
        if e.stage != "ResponseComplete" {
            continue;
        }
        let (Some(received_us), Some(completed_us)) = (
            parse_rfc3339_us(&e.request_received_timestamp),
            parse_rfc3339_us(&e.stage_timestamp),
        ) else {
            continue;
        };
        let r = e.object_ref.unwrap_or(ObjectRef {
            resource: String::new(),
            namespace: String::new(),
            name: String::new(),
            api_group: String::new(),
            subresource: String::new(),
        });
        let lease_holder = e.response_object.as_ref().and_then(|o| {
            (o.get("kind")?.as_str()? == "Lease").then(|| {
                o.pointer("/spec/holderIdentity")
                    .and_then(|h| h.as_str())
                    .unwrap_or_default()
                    .to_owned()
            })
        });
        writes.push(Write {
            received_us,
            completed_us,
            user: e.user.username,
            source_ip: e.source_i_ps.first().cloned().unwrap_or_default(),
            verb: e.verb,
            api_group: r.api_group,
            resource: r.resource,
            subresource: r.subresource,
            namespace: r.namespace,
            name: r.name,
            code: e.response_status.map(|s| s.code).unwrap_or(0),
            lease_holder,
            dry_run: is_dry_run(&e.request_uri),
        });
    }
    writes.sort_by_key(|w| w.received_us);
    writes
}

/// Whether request URI `uri` asks for a dry run: a `dryRun` query parameter with a value
/// (`All`, the only one the apiserver accepts, which it refuses rather than ignores if wrong).
pub fn is_dry_run(uri: &str) -> bool {
    uri.split_once('?').is_some_and(|(_, query)| {
        query.split('&').any(|kv| {
            kv.split_once('=')
                .is_some_and(|(k, v)| k == "dryRun" && !v.is_empty())
        })
    })
}

/// `2026-12-01T03:04:05.123456Z` → microseconds since the epoch (UTC only, as the apiserver
/// writes it).
pub fn parse_rfc3339_us(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|x| x.parse::<i64>());
    let (hh, mm, ss) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    let mut micros = frac.chars().take(6).collect::<String>();
    while micros.len() < 6 {
        micros.push('0');
    }
    let micros: i64 = micros.parse().ok()?;
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1_000_000) + micros)
}

/// Microseconds since the epoch, now (the apiserver and the tests share the machine's clock).
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// A stretch during which one pod (source address) was allowed to run operators: from the
/// write that made its elector the holder to the write that released the Lease, or, when
/// the elector stopped renewing, to its last successful renewal + renew deadline + kill
/// grace (by then the supervisor has stopped the app, whatever happened to the elector).
#[derive(Clone, Debug)]
pub struct Tenure {
    pub source_ip: String,
    pub holder: String,
    pub start_us: i64,
    pub end_us: i64,
    /// Whether it ended with a release (rather than expiry, or still running at the end).
    pub released: bool,
}

/// Leadership of Lease `namespace/name` from its successful writes. `bound_us` is renew
/// deadline + kill grace, in microseconds. A tenure still open at the end of the log lasts
/// until `now_us`.
pub fn tenures(
    writes: &[Write],
    namespace: &str,
    name: &str,
    bound_us: i64,
    now_us: i64,
) -> Vec<Tenure> {
    let mut out: Vec<Tenure> = Vec::new();
    let mut open: Option<(Tenure, i64)> = None; // (tenure, last renew received)
    for w in writes.iter().filter(|w| {
        w.succeeded() && w.is_lease_write() && w.namespace == namespace && w.name == name
    }) {
        let Some(holder) = &w.lease_holder else {
            continue;
        };
        match open.take() {
            Some((mut t, _)) if holder.is_empty() => {
                t.end_us = w.received_us;
                t.released = true;
                out.push(t);
            }
            Some((t, _)) if *holder == t.holder => open = Some((t, w.received_us)),
            Some((mut t, last)) => {
                // Taken over without a release: the old holder's grant ran out.
                t.end_us = last + bound_us;
                out.push(t);
                open = Some((new_tenure(w, holder), w.received_us));
            }
            None if holder.is_empty() => {}
            None => open = Some((new_tenure(w, holder), w.received_us)),
        }
    }
    if let Some((mut t, last)) = open {
        t.end_us = (last + bound_us).max(now_us);
        out.push(t);
    }
    out
}

fn new_tenure(w: &Write, holder: &str) -> Tenure {
    Tenure {
        source_ip: w.source_ip.clone(),
        holder: holder.to_owned(),
        // From when the write took effect: only then may the grant be given.
        start_us: w.completed_us,
        end_us: i64::MAX,
        released: false,
    }
}

/// Checks the single-writer property: (1) no two tenures of different pods overlap; (2)
/// every operator write by a pod in `namespace`'s ServiceAccount `user` that the apiserver
/// admitted (2xx) falls inside a tenure of that pod. A write it refused changed nothing: the
/// write fence refuses exactly the ones a paused ex-leader sends (see [`operator_writes_from`]).
/// Returns the violations, human-readable.
pub fn single_writer_violations(writes: &[Write], tenures: &[Tenure], user: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let stretches: Vec<Stretch<&str, i64>> = tenures
        .iter()
        .map(|t| Stretch {
            owner: t.source_ip.as_str(),
            start: t.start_us,
            end: Some(t.end_us),
        })
        .collect();
    for (i, j) in overlaps(&stretches) {
        let (a, b) = (&tenures[i], &tenures[j]);
        bad.push(format!("overlapping leadership: {a:?} and {b:?}"));
    }
    for w in writes
        .iter()
        .filter(|w| w.user == user && w.is_operator_write() && w.succeeded())
    {
        let covered = tenures.iter().any(|t| {
            t.source_ip == w.source_ip && t.start_us <= w.received_us && w.received_us <= t.end_us
        });
        if !covered {
            bad.push(format!(
                "operator write outside its pod's leadership: {} {}/{} {}/{}{} from {} at {}",
                w.verb,
                w.api_group,
                w.resource,
                w.namespace,
                w.name,
                if w.subresource.is_empty() {
                    String::new()
                } else {
                    format!("/{}", w.subresource)
                },
                w.source_ip,
                w.received_us
            ));
        }
    }
    bad
}

/// Operator writes by `user` from `source_ip` received in `[from_us, to_us]`: (admitted,
/// refused with 403 — the write fence's answer).
pub fn operator_writes_from<'a>(
    writes: &'a [Write],
    user: &str,
    source_ip: &str,
    from_us: i64,
    to_us: i64,
) -> (Vec<&'a Write>, Vec<&'a Write>) {
    let from_pod = writes.iter().filter(|w| {
        w.user == user
            && w.is_operator_write()
            && w.source_ip == source_ip
            && (from_us..=to_us).contains(&w.received_us)
    });
    (
        from_pod.clone().filter(|w| w.succeeded()).collect(),
        from_pod.filter(|w| w.code == 403).collect(),
    )
}

/// Who Lease `namespace/lease` named, from its successful writes: the pod (source address) of
/// the last write that set a holder, until a write releases the Lease or names another. No
/// grace for an old holder and no expiry: what the write fence would allow, whichever election
/// runs. Lease writes come from the holder's own pod (Passmower's election in the app, ours in
/// the sidecar), so the address names the pod.
#[derive(Clone, Debug, Default)]
pub struct Holders {
    /// (received µs, holder's address; `None`: released), in time order.
    changes: Vec<(i64, Option<String>)>,
}

impl Holders {
    pub fn from_writes(writes: &[Write], namespace: &str, lease: &str) -> Holders {
        let mut lease_writes: Vec<&Write> = writes
            .iter()
            .filter(|w| {
                w.succeeded() && w.is_lease_write() && w.namespace == namespace && w.name == lease
            })
            .collect();
        lease_writes.sort_by_key(|w| w.received_us);
        let mut changes: Vec<(i64, Option<String>)> = Vec::new();
        for w in lease_writes {
            let Some(holder) = &w.lease_holder else {
                continue;
            };
            let now = (!holder.is_empty()).then(|| w.source_ip.clone());
            if changes.last().is_none_or(|(_, h)| *h != now) {
                changes.push((w.received_us, now));
            }
        }
        Holders { changes }
    }

    /// The holder's address at `t_us` (`None`: released, or no write seen yet).
    pub fn at(&self, t_us: i64) -> Option<&str> {
        self.changes
            .iter()
            .take_while(|(t, _)| *t <= t_us)
            .last()
            .and_then(|(_, h)| h.as_deref())
    }

    /// The first pod other than `ip` named after `t_us`: (when, its address).
    pub fn first_other_after(&self, t_us: i64, ip: &str) -> Option<(i64, &str)> {
        self.changes
            .iter()
            .filter(|(t, _)| *t > t_us)
            .find_map(|(t, h)| h.as_deref().filter(|h| *h != ip).map(|h| (*t, h)))
    }

    /// The releases in `[from_us, to_us]`: writes that cleared the holder, made by the pod
    /// that held it (when, its address).
    pub fn releases(&self, from_us: i64, to_us: i64) -> Vec<(i64, &str)> {
        self.changes
            .windows(2)
            .filter_map(|w| {
                let ((_, before), (t, after)) = (&w[0], &w[1]);
                let ip = before.as_deref()?;
                (after.is_none() && (from_us..=to_us).contains(t)).then_some((*t, ip))
            })
            .collect()
    }

    /// When `ip` was named next after `t_us` (it leads again).
    pub fn next_named(&self, ip: &str, t_us: i64) -> Option<i64> {
        self.changes
            .iter()
            .find(|(t, h)| *t > t_us && h.as_deref() == Some(ip))
            .map(|(t, _)| *t)
    }
}

/// Operator writes by `user` that the apiserver admitted (2xx), received in `[from_us, to_us]`,
/// from a pod the Lease `namespace/lease` did not name at that instant (see [`Holders`]): what
/// the fence would refuse, whichever election runs, and the writes two operators at once can
/// land.
pub fn non_holder_operator_writes<'a>(
    writes: &'a [Write],
    namespace: &str,
    lease: &str,
    user: &str,
    from_us: i64,
    to_us: i64,
) -> Vec<&'a Write> {
    let holders = Holders::from_writes(writes, namespace, lease);
    let mut out: Vec<&Write> = writes
        .iter()
        .filter(|w| {
            w.user == user
                && w.is_operator_write()
                && w.succeeded()
                && (from_us..=to_us).contains(&w.received_us)
                && holders.at(w.received_us) != Some(w.source_ip.as_str())
        })
        .collect();
    out.sort_by_key(|w| w.received_us);
    out
}

/// Write requests to Leases in `namespace` by `user` received in `[from_us, to_us]`, whatever
/// the answer (a lost race's 409 is a write the apiserver had to handle too).
pub fn lease_writes_between(
    writes: &[Write],
    namespace: &str,
    user: &str,
    from_us: i64,
    to_us: i64,
) -> usize {
    writes
        .iter()
        .filter(|w| {
            w.is_lease_write()
                && w.namespace == namespace
                && w.user == user
                && (from_us..=to_us).contains(&w.received_us)
        })
        .count()
}

/// Operator writes by `user`, grouped by source address.
pub fn operator_writes_by_ip<'a>(
    writes: &'a [Write],
    user: &str,
) -> BTreeMap<String, Vec<&'a Write>> {
    let mut by_ip: BTreeMap<String, Vec<&Write>> = BTreeMap::new();
    for w in writes
        .iter()
        .filter(|w| w.user == user && w.is_operator_write())
    {
        by_ip.entry(w.source_ip.clone()).or_default().push(w);
    }
    by_ip
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dry_run_is_told_from_a_write_by_its_query() {
        assert!(is_dry_run(
            "/api/v1/namespaces/auth/secrets?dryRun=All&fieldManager=passmower-elector-fence-check"
        ));
        assert!(is_dry_run(
            "/api/v1/namespaces/auth/secrets?fieldManager=x&dryRun=All"
        ));
        assert!(!is_dry_run("/api/v1/namespaces/auth/secrets"));
        assert!(!is_dry_run(
            "/api/v1/namespaces/auth/secrets?fieldManager=dryRun"
        ));
    }
}
