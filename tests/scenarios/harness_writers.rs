//! Tests of the kit's write counting for the side-by-side comparison: which audit events are
//! operator writes (dry runs are none; Jobs and Traefik middlewares are), which Redis MONITOR
//! lines are operator-key writes, and who wrote against the Lease's holder at each instant (a
//! non-holder, a pod after its own release, the new holder's first write, a thawed pod).

use pme_testkit::node::audit::{self, Holders};
use pme_testkit::node::redis_monitor::{self, Monitored};
use pme_testkit::node::writers::{self, Store};

const USER: &str = "system:serviceaccount:pm:passmower";
const A: &str = "10.88.0.11";
const B: &str = "10.88.0.12";

/// One audit event as the apiserver writes it (stage ResponseComplete), `us` µs after [`BASE`]:
/// `verb` `group`/`resource`/`name` from `ip`.
fn event(
    ip: &str,
    us: i64,
    (verb, group, resource, name): (&str, &str, &str, &str),
    uri_query: &str,
    code: i32,
    holder: Option<&str>,
) -> String {
    let ts = format!(
        "2026-12-05T00:00:{:02}.{:06}Z",
        us / 1_000_000,
        us % 1_000_000
    );
    let mut e = serde_json::json!({
        "stage": "ResponseComplete",
        "verb": verb,
        "user": {"username": USER},
        "sourceIPs": [ip],
        "requestURI": format!("/apis/{group}/v1/namespaces/pm/{resource}/{name}{uri_query}"),
        "objectRef": {"resource": resource, "namespace": "pm", "name": name, "apiGroup": group},
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": ts,
        "stageTimestamp": ts,
    });
    if let Some(h) = holder {
        e["responseObject"] = serde_json::json!({"kind": "Lease", "spec": {"holderIdentity": h}});
    }
    e.to_string()
}

fn lease(ip: &str, us: i64, holder: &str, uri_query: &str) -> String {
    event(
        ip,
        us,
        (
            "update",
            "coordination.k8s.io",
            "leases",
            "passmower-operators",
        ),
        uri_query,
        200,
        Some(holder),
    )
}

fn read_events(lines: &[String]) -> Vec<audit::Write> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    std::fs::write(&path, lines.join("\n") + "\n").expect("write the audit log");
    audit::read(&path)
}

/// 2026-12-05T00:00:00Z, where [`event`] counts from, in µs since the epoch.
const BASE: i64 = 1_796_428_800_000_000;

/// One MONITOR line at `us` µs since the epoch, parsed.
fn monitor(us: i64, ip: &str, port: u16, words: &[&str]) -> Monitored {
    let line = format!(
        "{}.{:06} [1 {ip}:{port}] {}",
        us / 1_000_000,
        us % 1_000_000,
        words
            .iter()
            .map(|w| format!("\"{w}\""))
            .collect::<Vec<_>>()
            .join(" ")
    );
    redis_monitor::parse(&line).unwrap_or_else(|| panic!("MONITOR line {line:?} did not parse"))
}

/// A dry run changes nothing: an admitted dry-run update from a non-holder is no operator
/// write, and a dry-run Lease update names no holder.
#[test]
fn a_dry_run_is_neither_an_operator_write_nor_a_holder_change() {
    let ws = read_events(&[
        lease(A, 1_000_000, "pod-a", ""),
        // B probes the Lease with a dry run: A still holds it.
        lease(B, 2_000_000, "pod-b", "?dryRun=All"),
        event(
            B,
            3_000_000,
            ("update", "codemowers.cloud", "oidcclients", "app"),
            "?dryRun=All&fieldManager=x",
            200,
            None,
        ),
        event(
            B,
            4_000_000,
            ("create", "", "secrets", "s"),
            "?fieldManager=x&dryRun=All",
            201,
            None,
        ),
        event(
            B,
            5_000_000,
            ("update", "codemowers.cloud", "oidcclients", "app"),
            "?fieldManager=x",
            200,
            None,
        ),
    ]);
    assert_eq!(ws.len(), 5, "every event read: {ws:?}");
    assert_eq!(ws.iter().filter(|w| w.dry_run).count(), 3);
    let holders = Holders::from_writes(&ws, "pm", "passmower-operators");
    assert_eq!(holders.at(BASE + 2_500_000), Some(A));
    let non_holder =
        audit::non_holder_operator_writes(&ws, "pm", "passmower-operators", USER, 0, i64::MAX);
    let names: Vec<(&str, bool)> = non_holder
        .iter()
        .map(|w| (w.resource.as_str(), w.dry_run))
        .collect();
    assert_eq!(
        names,
        [("oidcclients", false)],
        "only the real write counts"
    );
}

#[test]
fn jobs_and_traefik_middlewares_are_operator_writes_and_oidcusers_are_not() {
    let ws = read_events(&[
        event(
            A,
            1_000_000,
            ("create", "batch", "jobs", "hook"),
            "",
            201,
            None,
        ),
        event(
            A,
            1_100_000,
            ("create", "traefik.io", "middlewares", "mw"),
            "",
            201,
            None,
        ),
        event(
            A,
            1_200_000,
            ("patch", "traefik.containo.us", "middlewares", "mw"),
            "",
            200,
            None,
        ),
        event(
            A,
            1_300_000,
            ("update", "codemowers.cloud", "oidcusereventhooks", "h"),
            "",
            200,
            None,
        ),
        event(
            A,
            1_400_000,
            ("update", "codemowers.cloud", "scimconnections", "c"),
            "",
            200,
            None,
        ),
        event(
            A,
            1_500_000,
            ("patch", "codemowers.cloud", "oidcusers", "u"),
            "",
            200,
            None,
        ),
        event(A, 1_600_000, ("create", "", "events", "e"), "", 201, None),
    ]);
    let op: Vec<&str> = ws
        .iter()
        .filter(|w| w.is_operator_write())
        .map(|w| w.resource.as_str())
        .collect();
    assert_eq!(
        op,
        [
            "jobs",
            "middlewares",
            "middlewares",
            "oidcusereventhooks",
            "scimconnections"
        ]
    );
}

#[test]
fn monitor_lines_parse_with_their_escapes() {
    let m = redis_monitor::parse(
        r#"1796428800.000123 [1 10.88.0.5:41234] "set" "oidc:Client:pm.app" "{\"a\":\"b\\c\"}\x01""#,
    )
    .expect("parses");
    assert_eq!(m.t_us, 1_796_428_800_000_123);
    assert_eq!((m.db, m.ip.as_str(), m.port), (1, "10.88.0.5", 41234));
    assert_eq!(m.command, "SET");
    assert_eq!(m.args, ["oidc:Client:pm.app", "{\"a\":\"b\\c\"}\u{1}"]);
    assert!(redis_monitor::parse("OK").is_none());
    assert!(redis_monitor::parse(r#"1796428800.1 [1 10.88.0.5:41234] "SET" "cut"#).is_none());
}

#[test]
fn operator_keys_are_the_clients_and_the_event_hook_state_but_not_the_built_in_client() {
    let cases: &[(&[&str], bool)] = &[
        (&["SET", "oidc:Client:pm.app", "{}"], true),
        (&["DEL", "oidc:Client:pm.app"], true),
        (&["SET", "oidc:Client:passmower", "{}"], false),
        (&["GET", "oidc:Client:pm.app"], false),
        (&["SADD", "oidc:Clients:1", "pm.app"], true),
        (&["SREM", "oidc:Clients:1", "pm.app"], true),
        (&["SADD", "oidc:Clients:1", "passmower"], false),
        (&["SET", "oidc:OIDCUserEventHookState:uid-1", "{}"], true),
        (&["SET", "oidc:Session:abc", "{}"], false),
        (&["EXPIRE", "oidc:HealthCheck:x", "10"], false),
    ];
    for (words, operator) in cases {
        assert_eq!(
            monitor(0, A, 1, words).is_operator_write(),
            *operator,
            "{words:?}"
        );
    }
}

/// A leader (A) that releases the Lease and then still writes (its operators stop after the
/// release) wrote as a non-holder, after its release; the new holder (B) wrote first 150 ms
/// after taking the Lease; a pod thawed later (A again) is seen in its stretch.
#[test]
fn writes_after_a_release_are_a_non_holders_and_the_handover_is_the_new_holders_first() {
    let base = BASE;
    let ws = read_events(&[
        lease(A, 1_000_000, "pod-a", ""),
        event(
            A,
            1_500_000,
            ("update", "codemowers.cloud", "oidcclients", "app"),
            "",
            200,
            None,
        ),
        lease(A, 2_000_000, "", ""),
        // 70 ms after the release: A's operators still run.
        event(A, 2_070_000, ("create", "", "secrets", "s"), "", 201, None),
        lease(B, 2_200_000, "pod-b", ""),
        event(
            B,
            2_350_000,
            ("update", "codemowers.cloud", "oidcclients", "app"),
            "",
            200,
            None,
        ),
        // Refused by the fence: sent, not admitted.
        event(A, 3_000_000, ("create", "", "secrets", "s2"), "", 403, None),
    ]);
    let redis = [
        monitor(
            base + 2_120_000,
            A,
            5000,
            &["SET", "oidc:Client:pm.app", "{}"],
        ),
        monitor(
            base + 2_300_000,
            B,
            6000,
            &["SET", "oidc:Client:pm.app", "{}"],
        ),
    ];
    let holders = Holders::from_writes(&ws, "pm", "passmower-operators");
    let ops = writers::operator_writes(&ws, &redis, USER, 0, i64::MAX);
    assert_eq!(ops.len(), 6, "{ops:?}");

    let non_holder: Vec<(Store, &str)> = writers::non_holder(&ops, &holders)
        .into_iter()
        .map(|w| (w.store, w.what.as_str()))
        .collect();
    assert_eq!(
        non_holder,
        [
            (Store::Api, "create secrets/s"),
            (Store::Redis, "SET oidc:Client:pm.app")
        ]
    );

    let after: Vec<(&str, i64)> = writers::after_release(&ops, &holders, 0, i64::MAX)
        .into_iter()
        .map(|(w, d)| (w.what.as_str(), d))
        .collect();
    assert_eq!(
        after,
        [
            ("create secrets/s", 70_000),
            ("SET oidc:Client:pm.app", 120_000)
        ]
    );

    let h = writers::handover(&ops, &holders, A, base + 1_900_000).expect("a handover write");
    assert_eq!(
        (h.ip.as_str(), h.t_us),
        (B, base + 2_300_000),
        "B's Redis write came first"
    );

    let thawed = writers::from_pod(&ops, &holders, A, base + 2_500_000, i64::MAX);
    assert_eq!(thawed.len(), 1);
    assert!(!thawed[0].admitted, "the fence refused it");
}
