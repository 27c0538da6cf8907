//! The human screen of `status`: the verdict first, then the Lease, the pods, the last
//! handovers and Events, the fence; one line per fact, no colour.

use std::fmt::Write;

use super::report::{NativeLeaseView, Report};

/// The report as one screen of text.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = write_report(&mut out, r);
    out
}

fn write_report(out: &mut String, r: &Report) -> std::fmt::Result {
    let word = match r.exit_code() {
        0 => "HEALTHY",
        1 => "NO WORKING LEADER",
        _ => "UNKNOWN",
    };
    writeln!(out, "{word}: {}", r.verdict)?;
    writeln!(out)?;
    if let Some(d) = &r.deployment {
        if d.found {
            writeln!(
                out,
                "Deployment  {}/{}: {} of {} replicas ready",
                r.namespace,
                d.name,
                d.ready_replicas.unwrap_or(0),
                d.replicas.unwrap_or(0)
            )?;
        } else {
            writeln!(out, "Deployment  {}/{}: not found", r.namespace, d.name)?;
        }
    }
    let l = &r.lease;
    write!(out, "Lease       {}/{}", r.namespace, l.name)?;
    if l.name_from != "--lease" {
        write!(out, " (from {})", l.name_from)?;
    }
    writeln!(out)?;
    if l.exists {
        match &l.holder {
            Some(h) => writeln!(
                out,
                "  holder    {} (pod {})",
                h,
                l.holder_pod.as_deref().unwrap_or("?")
            )?,
            None => writeln!(out, "  holder    none (released)")?,
        }
        writeln!(
            out,
            "  epoch     {}   acquired {}",
            l.epoch.map_or_else(|| "?".to_owned(), |e| e.to_string()),
            l.acquire_time.as_deref().unwrap_or("?")
        )?;
        writeln!(
            out,
            "  renewed   {} ({}; lease duration {}s{})",
            l.renew_time.as_deref().unwrap_or("never"),
            l.renewed_seconds_ago
                .map_or_else(|| "?".to_owned(), |s| format!("{s:.1}s ago")),
            l.lease_duration_seconds.unwrap_or(0),
            if l.renew_fresh { "" } else { ", STALE" }
        )?;
        if l.holder.is_some() {
            let running = match l.operators_running {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "unknown (no report)",
            };
            writeln!(
                out,
                "  operators {running}   consumer {}: {}",
                l.consumer.as_deref().unwrap_or("?"),
                l.consumer_reason.as_deref().unwrap_or("-")
            )?;
        }
        if let Some(cause) = &l.acquired_cause {
            writeln!(
                out,
                "  this term began: {cause}, after {} without a leader",
                seconds(l.leaderless_seconds)
            )?;
        }
    } else {
        writeln!(out, "  does not exist")?;
    }
    if let Some(n) = &r.native_lease {
        write_native_lease(out, &r.namespace, n)?;
    }
    writeln!(out)?;
    writeln!(out, "PODS")?;
    if r.pods.is_empty() {
        writeln!(out, "  none found")?;
    }
    let width = r
        .pods
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    for p in &r.pods {
        let restarts: i32 = p.containers.iter().map(|c| c.restarts).sum();
        writeln!(
            out,
            "  {:width$}  {:15} {:9} restarts {}",
            p.name,
            p.state,
            p.phase.as_deref().unwrap_or("?"),
            restarts
        )?;
        for d in p.detail.iter().filter(|d| !d.is_empty()) {
            writeln!(out, "  {:width$}    {d}", "")?;
        }
    }
    writeln!(out)?;
    writeln!(out, "LAST HANDOVERS (from Events; newest first)")?;
    if r.handovers.is_empty() {
        writeln!(out, "  none recorded (Events expire after an hour)")?;
    }
    for h in &r.handovers {
        writeln!(
            out,
            "  {}  {}  epoch {}  cause {}  leaderless {}",
            h.time.as_deref().unwrap_or("?"),
            h.pod.as_deref().unwrap_or("?"),
            h.epoch.map_or_else(|| "?".to_owned(), |e| e.to_string()),
            h.cause.as_deref().unwrap_or("?"),
            seconds(h.leaderless_seconds)
        )?;
    }
    writeln!(out)?;
    writeln!(out, "RECENT EVENTS (newest first)")?;
    if r.events.is_empty() {
        writeln!(out, "  none")?;
    }
    for e in &r.events {
        writeln!(
            out,
            "  {}  {:16} {}: {}",
            e.time.as_deref().unwrap_or("?"),
            e.reason,
            e.pod.as_deref().unwrap_or("?"),
            e.message
        )?;
    }
    writeln!(out)?;
    let f = &r.fence;
    if f.name.is_empty() {
        writeln!(out, "FENCE       unknown")?;
    } else {
        writeln!(
            out,
            "FENCE       {} (ServiceAccount {})",
            f.name, f.service_account
        )?;
    }
    writeln!(
        out,
        "  policy {}, binding {}, Lease parameter {}",
        f.policy, f.binding, f.param
    )?;
    match f.refusals {
        Some(n) => writeln!(out, "  refusals  {n} ({})", f.refusals_note)?,
        None => writeln!(out, "  refusals  {}", f.refusals_note)?,
    }
    if !r.unreadable.is_empty() {
        writeln!(out)?;
        writeln!(out, "NOT READ")?;
        for u in &r.unreadable {
            writeln!(out, "  {u}")?;
        }
    }
    Ok(())
}

/// Passmower's own Lease, held beside ours (`elect --native-lease`).
fn write_native_lease(out: &mut String, namespace: &str, n: &NativeLeaseView) -> std::fmt::Result {
    writeln!(
        out,
        "Passmower's own Lease {namespace}/{} (elect --native-lease)",
        n.name
    )?;
    if !n.exists {
        return writeln!(out, "  does not exist (the leader creates it)");
    }
    let whose = if n.held_by_leader {
        "the leader, as it should"
    } else if n.held_by_elector && n.fresh {
        "a pod of ours, about to lead or handing over"
    } else if n.fresh {
        "Passmower's own election: no elector contends while it renews"
    } else if n.holder.is_some() {
        "STALE: free to take"
    } else {
        "released: free to take"
    };
    writeln!(
        out,
        "  holder    {} ({whose})",
        n.holder.as_deref().unwrap_or("none")
    )?;
    writeln!(
        out,
        "  renewed   {} (lease duration {}s)",
        n.renewed_seconds_ago
            .map_or_else(|| "never".to_owned(), |s| format!("{s:.1}s ago")),
        n.lease_duration_seconds.unwrap_or(0)
    )
}

fn seconds(s: Option<f64>) -> String {
    s.map_or_else(|| "?".to_owned(), |s| format!("{s:.3}s"))
}
