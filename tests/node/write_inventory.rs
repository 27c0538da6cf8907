//! Every write a follower makes, for the Passmower generation under test
//! (`PME_PASSMOWER_GENERATION`): the real Passmower on the real one-node Kubernetes, retrofitted
//! by `inject` as a helm post-renderer (3 replicas), the activity flush forced to every 5 s
//! (`ACTIVITY_FLUSH_INTERVAL_SECONDS`), an OIDCClient and an OIDCUser in the namespace, a
//! rollout restart (so every pod boots with them present), the HTTP side exercised on every pod
//! (discovery, the authorization request that starts a login, the login page), a whole sign-in
//! on a follower (e-mail login on, its mail to an SMTP sink), then a minute of quiet. Writes come from the apiserver's audit log (by source address) and Redis `MONITOR`
//! (by client address); a write is a follower's when its pod did not hold the Lease at that
//! instant (from the Lease writes in the same audit log).
//!
//! Records what it saw as JSON in `PME_INVENTORY_OUT` (default
//! `$CARGO_TARGET_DIR/write-inventory-<generation>.json`); scripts/write-inventory.sh runs it for
//! each generation and renders docs/results/write-inventory.md and compatibility.md. Asserts the
//! install works (Ready replicas, a leader, the client reconciled by the leader only), that no
//! follower wrote an operator object to the apiserver, and that a whole e-mail sign-in on a
//! follower (testkit/src/node/email_login.rs, the mail caught by node/smtp.rs)
//! completes with none of that pod's writes refused; the Redis side is reported, not asserted.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write as _};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};

use pme_testkit::node::audit::{self, now_us};
use pme_testkit::node::config::NODE_IP;
use pme_testkit::node::email_login::{self, Login};
use pme_testkit::node::passmower::{self, Generation, Install, Retrofit};
use pme_testkit::node::single_writer::assert_single_writer;
use pme_testkit::node::smtp::SmtpSink;
use pme_testkit::node::{pods, redis_monitor, report, Node};

/// Flush interval given to every instance: short enough that a minute sees a dozen flushes.
const FLUSH_SECONDS: &str = "5";
const QUIET: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a minute and more on real pods; scripts/write-inventory.sh runs it per generation"]
async fn follower_write_inventory() {
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    let generation = Generation::from_env();
    let client = node.admin_client().await;
    let started = now_us();

    let monitor_log = node.layout.path("redis-monitor.log");
    let monitor = redis_monitor::Monitor::start(node, &monitor_log);

    // E-mail login on, its mail to a sink beside the node: a follower completes a sign-in.
    let sink = std::sync::Arc::new(SmtpSink::start(node).expect("start the SMTP sink"));
    let login_env = email_login::env(&sink);
    let mut env = vec![("ACTIVITY_FLUSH_INTERVAL_SECONDS", FLUSH_SECONDS)];
    env.extend(login_env.iter().map(|(k, v)| (*k, v.as_str())));

    let ns = node.new_namespace("passmower").await;
    let install = Install::install_with_env(node, &ns, 3, 1, Retrofit::PostRenderer, &env).await;
    report(&format!(
        "write inventory ({}): 3 Ready replicas and a leader",
        generation.name()
    ));

    install.create_client(&client, "inventory").await;
    create_user(&client, &ns, "inventory-user").await;
    wait(Duration::from_secs(60), "the client reconciled", || {
        install.client_reconciled(&client, "inventory")
    })
    .await;

    // Every pod boots again with the client and the user present: what a follower does at
    // start (seeding, sweeps, the email-uniqueness pass) has something to act on.
    let before: Vec<String> = install
        .pods(&client)
        .await
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let out = node
        .kubectl()
        .args([
            "rollout",
            "restart",
            "deployment",
            passmower::NAME,
            "-n",
            &ns,
        ])
        .output()
        .expect("run kubectl");
    assert!(out.status.success(), "kubectl rollout restart: {out:?}");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let now: Vec<String> = install
            .pods(&client)
            .await
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        if now.len() == 3 && now.iter().all(|n| !before.contains(n)) {
            break;
        }
        assert!(Instant::now() < deadline, "rollout restart did not finish");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    install.wait_steady(node, Duration::from_secs(300)).await;

    // The HTTP side, on every pod: discovery, the authorization request (a login starts:
    // an interaction is stored), the login page it redirects to.
    let client_id = client_key(&client, &ns, "inventory", "OIDC_CLIENT_ID").await;
    let auth = format!(
        "/auth?client_id={client_id}&response_type=code&scope=openid&\
         redirect_uri=https%3A%2F%2Fapp.example.com%2Fcallback&state=s&nonce=n&\
         code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256"
    );
    let mut http = Vec::new();
    for p in install.pods(&client).await {
        let Some(ip) = pods::pod_ip(&p) else { continue };
        let addr = format!("{ip}:3000");
        let pod = p.metadata.name.clone().unwrap_or_default();
        for round in 0..3 {
            let disc = get(node, &addr, "/.well-known/openid-configuration", None);
            let start = get(node, &addr, &auth, None);
            let mut page = None;
            if let Ok((_, Some(loc), cookies)) = &start {
                let path = loc
                    .strip_prefix(&format!("https://{}", passmower::HOST))
                    .unwrap_or(loc);
                page = Some(get(node, &addr, path, Some(cookies)));
            }
            if round == 0 {
                http.push(serde_json::json!({
                    "pod": pod,
                    "discovery": status(&disc),
                    "authorize": status(&start),
                    "authorize_location": start.as_ref().ok().and_then(|(_, l, _)| l.clone())
                        .map(|l| l.chars().take(120).collect::<String>()),
                    "login_page": page.as_ref().map(status),
                }));
            }
        }
    }

    // Memory per pod as a user runs it: every process of each pod (the app's instances, the
    // elector, the supervisor, the sandbox), after a 20 s idle window so the heaps settle.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let leader_pod = install
        .leader_pod(&client)
        .await
        .and_then(|p| p.metadata.name);
    let (mut leader_mib, mut follower_mib) = (None, Vec::new());
    for p in install.pods(&client).await {
        // No process found (the pod just went): no figure rather than 0.
        let kib = node.pod_rss_kib(&p);
        if kib == 0 {
            continue;
        }
        let mib = kib as f64 / 1024.0;
        if p.metadata.name == leader_pod {
            leader_mib = Some(mib);
        } else {
            follower_mib.push(mib);
        }
    }
    report(&format!(
        "memory per pod ({}): leader {leader_mib:?} MiB, followers {follower_mib:?} MiB",
        generation.name()
    ));

    // A whole sign-in (e-mail link, tokens, userinfo) on a follower, the write fence in place.
    let login = Login {
        client_id: client_id.clone(),
        client_secret: client_key(&client, &ns, "inventory", "OIDC_CLIENT_SECRET").await,
        redirect_uri: "https://app.example.com/callback".into(),
        email: "inventory-user@example.com".into(),
    };
    let sign_in = email_login::on_a_follower(node, &install, sink.clone(), login).await;
    report(&format!(
        "sign-in on follower {} ({}): signed in {}, steps {:?}, stopped {:?}; its apiserver writes meanwhile {:?}, refused {:?}",
        sign_in.pod,
        generation.name(),
        sign_in.outcome.signed_in(),
        sign_in.outcome.steps,
        sign_in.outcome.stopped,
        sign_in.apiserver_writes,
        sign_in.refused
    ));

    // Quiet: a dozen activity flushes, the periodic sweeps.
    tokio::time::sleep(QUIET).await;
    // What the activity projection made of the sign-in a dozen flushes later (2.2 and 2.4
    // have one; 1.3 has none): the client's lastUsedAt, the user's recentApplications.
    let status_of = |plural: &'static str, kind: &'static str, name: &'static str| {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("codemowers.cloud", "v1beta1", kind),
                plural,
            );
            Api::<DynamicObject>::namespaced_with(client, &ns, &ar)
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .and_then(|o| o.data.get("status").cloned())
                .unwrap_or_default()
        }
    };
    let activity = serde_json::json!({
        "client_last_used_at": status_of("oidcclients", "OIDCClient", "inventory").await
            .get("lastUsedAt").cloned().unwrap_or_default(),
        "user_recent_applications": status_of("oidcusers", "OIDCUser", "inventory-user").await
            .get("recentApplications").cloned().unwrap_or_default(),
    });
    let ended = now_us();
    let tenures = assert_single_writer(node, &install);
    drop(monitor);

    let writes = audit::read(&node.audit_log());
    let leader_at = |ip: &str, t: i64| {
        tenures
            .iter()
            .any(|t0| t0.source_ip == ip && t0.start_us <= t && t <= t0.end_us)
    };
    let pod_ips = pod_ips_seen(&writes, &install);
    let mut seen: BTreeMap<(String, String, String, String), usize> = BTreeMap::new();
    let mut bump = |role: &str, source: &str, op: String, target: String| {
        *seen
            .entry((role.into(), source.into(), op, target))
            .or_insert(0) += 1;
    };
    for w in writes.iter().filter(|w| w.received_us >= started) {
        if w.user != install.user() || !pod_ips.contains(&w.source_ip) {
            continue;
        }
        let role = if leader_at(&w.source_ip, w.received_us) {
            "leader"
        } else {
            "follower"
        };
        let target = if w.subresource.is_empty() {
            format!("{}/{}", group(&w.api_group), w.resource)
        } else {
            format!("{}/{}/{}", group(&w.api_group), w.resource, w.subresource)
        };
        let op = if w.succeeded() {
            w.verb.clone()
        } else {
            format!("{} (refused {})", w.verb, w.code)
        };
        bump(role, "apiserver", op, target);
    }
    let monitor_text = std::fs::read_to_string(&monitor_log).unwrap_or_default();
    // The raw MONITOR log beside the record, for a look (the node's directory goes at exit).
    let _ = std::fs::write(
        out_path(generation).with_extension("redis.log"),
        &monitor_text,
    );
    // The follower's Redis writes while it served the sign-in.
    let mut sign_in_redis: BTreeMap<String, usize> = BTreeMap::new();
    for line in monitor_text.lines() {
        let Some(m) = redis_monitor::parse(line) else {
            continue;
        };
        let (t_us, ip, key) = (m.t_us, m.ip.clone(), m.key().to_owned());
        let cmd = m.command.clone();
        if !m.is_write() || !pod_ips.contains(&ip) || t_us < started {
            continue;
        }
        let role = if leader_at(&ip, t_us) {
            "leader"
        } else {
            "follower"
        };
        let in_sign_in =
            ip == sign_in.pod_ip && (sign_in.from_us..=sign_in.to_us + 2_000_000).contains(&t_us);
        if in_sign_in {
            *sign_in_redis
                .entry(format!("{cmd} {}", key_pattern(&key, &ns)))
                .or_insert(0) += 1;
        }
        bump(role, "redis", cmd, key_pattern(&key, &ns));
    }

    let follower_operator_writes: Vec<String> = writes
        .iter()
        .filter(|w| w.received_us >= started && w.user == install.user() && w.succeeded())
        .filter(|w| w.is_operator_write() && !leader_at(&w.source_ip, w.received_us))
        .map(|w| format!("{} {}/{} {}", w.verb, w.resource, w.subresource, w.name))
        .collect();

    let rows: Vec<serde_json::Value> = seen
        .iter()
        .map(|((role, source, op, target), count)| {
            serde_json::json!({"role": role, "source": source, "op": op, "target": target, "count": count})
        })
        .collect();
    let doc = serde_json::json!({
        "generation": generation.name(),
        "folder": generation.folder(),
        "required_env": generation.required_env().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        "extra_env": env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        "observed_seconds": (ended - started) as f64 / 1e6,
        "quiet_seconds": QUIET.as_secs(),
        "tenures": tenures.len(),
        "reconciled": true,
        "http": http,
        "writes": rows,
        "follower_operator_writes_apiserver": follower_operator_writes,
        "sign_in": sign_in,
        "sign_in_redis_writes": sign_in_redis,
        "activity_after_sign_in": activity,
        "memory_mib": {"leader": leader_mib, "followers": follower_mib},
    });
    let out = out_path(generation);
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&doc).expect("json") + "\n",
    )
    .unwrap_or_else(|e| panic!("write {}: {e}", out.display()));
    report(&format!("write inventory: {}", out.display()));
    assert!(
        follower_operator_writes.is_empty(),
        "followers wrote operator objects to the apiserver: {follower_operator_writes:?}"
    );
    // The fence never refuses a request-driven write: a sign-in on a follower goes through.
    assert!(
        sign_in.refused.is_empty(),
        "the apiserver refused the follower's writes during its sign-in: {:?}",
        sign_in.refused
    );
    assert!(
        sign_in.outcome.signed_in(),
        "the sign-in on follower {} did not complete: {:?} after {:?}",
        sign_in.pod,
        sign_in.outcome.stopped,
        sign_in.outcome.steps
    );
}

/// `PME_INVENTORY_OUT`, else `$CARGO_TARGET_DIR/write-inventory-<generation>.json`.
fn out_path(generation: Generation) -> std::path::PathBuf {
    std::env::var_os("PME_INVENTORY_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(
                &std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()),
            )
            .join(format!("write-inventory-{}.json", generation.name()))
        })
}

fn group(g: &str) -> &str {
    if g.is_empty() {
        "core"
    } else {
        g
    }
}

/// Every address a pod of the install had (from the pods now and the audit log's Lease
/// writes, which only pods make): the pods replaced by the rollout are gone from the API.
fn pod_ips_seen(writes: &[audit::Write], install: &Install) -> Vec<String> {
    let mut ips: Vec<String> = writes
        .iter()
        .filter(|w| w.user == install.user() && w.source_ip.starts_with("10.88."))
        .map(|w| w.source_ip.clone())
        .filter(|ip| ip != NODE_IP)
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

/// A Redis key with its per-object part replaced by `*`, but the namespace's own objects
/// and Passmower's built-in client kept by name.
fn key_pattern(key: &str, ns: &str) -> String {
    let parts: Vec<&str> = key.splitn(3, ':').collect();
    match parts.as_slice() {
        [a, b, rest] if *rest == "passmower" || rest.starts_with(&format!("{ns}-")) => {
            format!("{a}:{b}:{rest}")
        }
        [a, b, _] => format!("{a}:{b}:*"),
        _ => key.to_owned(),
    }
}

fn user_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("codemowers.cloud", "v1beta1", "OIDCUser"),
        "oidcusers",
    )
}

async fn create_user(client: &kube::Client, ns: &str, name: &str) {
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &user_resource());
    let obj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "codemowers.cloud/v1beta1",
        "kind": "OIDCUser",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "type": "person",
            "email": format!("{name}@example.com"),
            "companyEmail": format!("{name}@example.com"),
        }
    }))
    .expect("OIDCUser object");
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create OIDCUser {name}: {e}"));
}

/// `key` (`OIDC_CLIENT_ID`, `OIDC_CLIENT_SECRET`) of the Secret Passmower wrote for client
/// `name`.
async fn client_key(client: &kube::Client, ns: &str, name: &str, key: &str) -> String {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get(&passmower::secret_name(name))
        .await
        .unwrap_or_else(|e| panic!("read the client Secret: {e}"));
    let data = secret.data.unwrap_or_default();
    let value = data
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_else(|| panic!("no {key} in the client Secret: {:?}", data.keys()));
    value
}

async fn wait<F, Fut>(timeout: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !cond().await {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

type Response = Result<(u16, Option<String>, String), String>;

fn status(r: &Response) -> serde_json::Value {
    match r {
        Ok((code, _, _)) => serde_json::json!(code),
        Err(e) => serde_json::json!(e),
    }
}

/// One GET from inside the node's network namespace: status, `Location`, and the
/// `Set-Cookie` values as a `Cookie` header.
fn get(node: &Node, addr: &str, path: &str, cookies: Option<&str>) -> Response {
    let timeout = Duration::from_secs(5);
    let sock = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let mut s = node
        .ns
        .connect(sock, timeout)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let cookie = cookies
        .filter(|c| !c.is_empty())
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nX-Forwarded-Proto: https\r\n{cookie}Connection: close\r\n\r\n",
        passmower::HOST
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut reader = std::io::BufReader::new(s.take(1 << 20));
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| format!("read: {e}"))?;
    let code = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line {line:?}"))?;
    let (mut location, mut jar) = (None, Vec::new());
    loop {
        line.clear();
        if reader
            .read_line(&mut line)
            .map_err(|e| format!("read: {e}"))?
            == 0
        {
            break;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            match k.to_ascii_lowercase().as_str() {
                "location" => location = Some(v.trim().to_owned()),
                "set-cookie" => jar.push(v.trim().split(';').next().unwrap_or_default().to_owned()),
                _ => {}
            }
        }
    }
    let _ = std::io::copy(&mut reader, &mut std::io::sink());
    Ok((code, location, jar.join("; ")))
}
