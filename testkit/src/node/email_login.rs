//! A whole sign-in through Passmower's HTTP side, as a browser and a relying party would make
//! it against one pod: the authorization request, the e-mail (magic link) login form, the link
//! from the mail the pod sent to the [SMTP sink](super::smtp), whatever prompts follow (name,
//! terms of service: the form on the page is filled and sent; consent is granted by the pod
//! itself), the redirect back with a code, the code exchanged for tokens at `/token`, and
//! `/me` (userinfo) with the access token. Each step is recorded, so a tree that stops on the
//! way says where and with what.
//!
//! The "browser" keeps a cookie jar and speaks HTTP/1.1 to the pod's address from inside the
//! node's network namespace, with the `Host` and `X-Forwarded-Proto: https` a TLS-terminating
//! ingress would send.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use super::passmower::HOST;
use super::smtp::SmtpSink;
use super::Node;

/// What the relying party registered (the OIDCClient the test created) and who signs in.
#[derive(Clone, Debug)]
pub struct Login {
    pub client_id: String,
    pub client_secret: String,
    pub redirect_uri: String,
    pub email: String,
}

/// What the sign-in did, step by step.
#[derive(Debug, Default, serde::Serialize)]
pub struct Outcome {
    /// `METHOD path → status [→ location]`, in order.
    pub steps: Vec<String>,
    /// The login link the mail carried (its token cut off).
    pub mail_link: Option<String>,
    /// The redirect back to the relying party carried a code.
    pub code_issued: bool,
    /// `/token`'s status and the token types it returned.
    pub token_status: Option<u16>,
    pub tokens: Vec<String>,
    /// `/me`'s status and the claims it returned (names only).
    pub userinfo_status: Option<u16>,
    pub userinfo_claims: Vec<String>,
    /// The `sub` the userinfo named.
    pub subject: Option<String>,
    /// Where and why it stopped, when it did not finish.
    pub stopped: Option<String>,
}

impl Outcome {
    /// Signed in: tokens issued and userinfo answered.
    pub fn signed_in(&self) -> bool {
        self.token_status == Some(200) && self.userinfo_status == Some(200)
    }
}

/// PKCE's verifier (43+ characters) and its S256 challenge.
const VERIFIER: &str = "pme-email-login-verifier-0123456789-abcdefghijklmnop";

/// Runs the sign-in against the pod at `addr` (`IP:3000`); never panics, records where it
/// stopped instead.
pub fn sign_in(node: &Node, addr: &str, sink: &SmtpSink, login: &Login) -> Outcome {
    let mut out = Outcome::default();
    if let Err(e) = run(node, addr, sink, login, &mut out) {
        out.stopped = Some(e);
    }
    out
}

fn run(
    node: &Node,
    addr: &str,
    sink: &SmtpSink,
    login: &Login,
    out: &mut Outcome,
) -> Result<(), String> {
    let mut browser = Browser::new(node, addr);
    let challenge = base64(
        ring::digest::digest(&ring::digest::SHA256, VERIFIER.as_bytes()).as_ref(),
        true,
    );
    let auth = format!(
        "/auth?client_id={}&response_type=code&scope=openid%20profile&redirect_uri={}\
         &state=pme-state&nonce=pme-nonce&code_challenge={challenge}&code_challenge_method=S256",
        enc(&login.client_id),
        enc(&login.redirect_uri)
    );
    let mut next = Some(("GET".to_owned(), auth, None::<String>));
    let mut mail_sent = false;
    let mut code = None;
    // Bounded: a sign-in is a dozen requests; a loop in the flow stops here.
    for _ in 0..20 {
        let Some((method, path, form)) = next.take() else {
            break;
        };
        let r = browser.request(&method, &path, form.as_deref(), None)?;
        let mut step = format!("{method} {} → {}", short(&path), r.status);
        if let Some(l) = &r.location {
            step.push_str(&format!(" → {}", short(l)));
        }
        out.steps.push(step);
        if let Some(loc) = &r.location {
            if let Some(rest) = loc.strip_prefix(login.redirect_uri.as_str()) {
                code = query(rest, "code");
                if code.is_none() {
                    return Err(format!("back at the client without a code: {}", short(loc)));
                }
                break;
            }
            let p = loc
                .strip_prefix(&format!("https://{HOST}"))
                .unwrap_or(loc)
                .to_owned();
            next = Some(("GET".into(), p, None));
            continue;
        }
        if r.status != 200 {
            return Err(format!(
                "{method} {} answered {}: {}",
                short(&path),
                r.status,
                text_of(&r.body)
            ));
        }
        if path.contains("/link-sent") || (mail_sent && path.contains("/email-status")) {
            // The mail: its link opened in this same browser.
            let mail = sink
                .wait_for(&login.email, Duration::from_secs(20))
                .ok_or_else(|| format!("no mail to {} in 20 s", login.email))?;
            let text = mail.decoded();
            let link = find_link(&text)
                .ok_or_else(|| "the mail carries no verify-email link".to_owned())?;
            out.mail_link = Some(short(&link));
            let p = link
                .strip_prefix(&format!("https://{HOST}"))
                .unwrap_or(&link)
                .to_owned();
            next = Some(("GET".into(), p, None));
            continue;
        }
        // A page with a form to send: the login page (its e-mail form), a name or terms prompt.
        let forms = forms(&r.body);
        let pick = [
            "/email",
            "/enter-username",
            "/update-name",
            "/confirm-tos",
            "/email-complete",
        ]
        .iter()
        .find_map(|want| forms.iter().find(|f| f.action.ends_with(want)));
        let Some(form) = pick else {
            // The newer trees' "Email verified" page (another device) or anything else.
            return Err(format!(
                "stopped on {} (no form to send): {}",
                short(&path),
                text_of(&r.body)
            ));
        };
        let mut fields: Vec<(String, String)> = form.fields.clone();
        for (k, v) in &mut fields {
            match k.as_str() {
                "email" => v.clone_from(&login.email),
                // Passmower takes letters, digits and spaces only.
                "name" => "PME Signin Test".clone_into(v),
                // A new user's username prompt (the mail's address matched no OIDCUser).
                "username" if v.is_empty() => "pme-sign-in".clone_into(v),
                _ => {}
            }
        }
        if form.action.ends_with("/email") {
            mail_sent = true;
            if !fields.iter().any(|(k, _)| k == "email") {
                fields.push(("email".into(), login.email.clone()));
            }
        }
        let body = fields
            .iter()
            .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
            .collect::<Vec<_>>()
            .join("&");
        // The same form again after sending it: the page says why (a refused value).
        if method == "POST" && path == form.action {
            return Err(format!(
                "{} answered with its own form again: {}",
                short(&path),
                text_of(&r.body)
            ));
        }
        next = Some(("POST".into(), form.action.clone(), Some(body)));
    }
    let code = code.ok_or_else(|| "no code after 20 requests".to_owned())?;
    out.code_issued = true;

    // The relying party: the code for tokens (client_secret_basic), then userinfo.
    let basic = base64(
        format!("{}:{}", enc(&login.client_id), enc(&login.client_secret)).as_bytes(),
        false,
    );
    let form = format!(
        "grant_type=authorization_code&code={}&redirect_uri={}&code_verifier={VERIFIER}",
        enc(&code),
        enc(&login.redirect_uri)
    );
    let mut r = Browser::new(node, addr).request(
        "POST",
        "/token",
        Some(&form),
        Some(&format!("Basic {basic}")),
    )?;
    out.steps
        .push(format!("POST /token (client_secret_basic) → {}", r.status));
    if r.status == 401 {
        // A client registered for client_secret_post takes its credentials in the form.
        let form = format!(
            "{form}&client_id={}&client_secret={}",
            enc(&login.client_id),
            enc(&login.client_secret)
        );
        r = Browser::new(node, addr).request("POST", "/token", Some(&form), None)?;
        out.steps
            .push(format!("POST /token (client_secret_post) → {}", r.status));
    }
    out.token_status = Some(r.status);
    let tokens: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
    out.tokens = ["access_token", "id_token", "refresh_token"]
        .into_iter()
        .filter(|k| tokens.get(k).is_some())
        .map(str::to_owned)
        .collect();
    let access = tokens
        .get("access_token")
        .and_then(|v| v.as_str())
        .ok_or_else(|| format!("/token gave no access token: {}", text_of(&r.body)))?;
    let r =
        Browser::new(node, addr).request("GET", "/me", None, Some(&format!("Bearer {access}")))?;
    out.steps.push(format!("GET /me → {}", r.status));
    out.userinfo_status = Some(r.status);
    let claims: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
    if let Some(map) = claims.as_object() {
        out.userinfo_claims = map.keys().cloned().collect();
        out.subject = map.get("sub").and_then(|s| s.as_str()).map(str::to_owned);
    }
    if r.status != 200 {
        return Err(format!("/me answered {}: {}", r.status, text_of(&r.body)));
    }
    Ok(())
}

/// One response.
struct Response {
    status: u16,
    location: Option<String>,
    body: String,
}

/// A cookie jar (by name and path, as oidc-provider scopes its interaction cookies to the
/// interaction's path) and one pod's address.
struct Browser<'a> {
    node: &'a Node,
    addr: String,
    jar: BTreeMap<(String, String), String>,
}

impl<'a> Browser<'a> {
    fn new(node: &'a Node, addr: &str) -> Self {
        Browser {
            node,
            addr: addr.to_owned(),
            jar: BTreeMap::new(),
        }
    }

    fn request(
        &mut self,
        method: &str,
        path: &str,
        form: Option<&str>,
        authorization: Option<&str>,
    ) -> Result<Response, String> {
        let timeout = Duration::from_secs(15);
        let sock = self
            .addr
            .parse()
            .map_err(|e| format!("{}: {e}", self.addr))?;
        let mut s = self
            .node
            .ns
            .connect(sock, timeout)
            .map_err(|e| format!("connect {}: {e}", self.addr))?;
        s.set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {HOST}\r\nX-Forwarded-Proto: https\r\n\
             Accept: text/html,application/json\r\nUser-Agent: passmower-elector-tests\r\n\
             Connection: close\r\n"
        );
        let bare = path.split('?').next().unwrap_or(path);
        let cookies: Vec<String> = self
            .jar
            .iter()
            .filter(|((_, p), _)| {
                bare.strip_prefix(p.as_str()).is_some_and(|rest| {
                    rest.is_empty() || p.ends_with('/') || rest.starts_with('/')
                })
            })
            .map(|((k, _), v)| format!("{k}={v}"))
            .collect();
        if !cookies.is_empty() {
            head.push_str(&format!("Cookie: {}\r\n", cookies.join("; ")));
        }
        if let Some(a) = authorization {
            head.push_str(&format!("Authorization: {a}\r\n"));
        }
        let body = form.unwrap_or_default();
        if form.is_some() {
            head.push_str(&format!(
                "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes())
            .and_then(|()| s.write_all(body.as_bytes()))
            .map_err(|e| format!("send {method} {}: {e}", short(path)))?;
        let mut raw = Vec::new();
        s.take(4 << 20)
            .read_to_end(&mut raw)
            .map_err(|e| format!("read the answer to {method} {}: {e}", short(path)))?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("no status line in the answer to {method} {}", short(path)))?;
        let (mut location, mut chunked) = (None, false);
        for l in lines {
            let Some((k, v)) = l.split_once(':') else {
                continue;
            };
            let v = v.trim();
            match k.to_ascii_lowercase().as_str() {
                "location" => location = Some(v.to_owned()),
                "transfer-encoding" => chunked = v.eq_ignore_ascii_case("chunked"),
                "set-cookie" => self.set_cookie(v),
                _ => {}
            }
        }
        let body = if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        };
        Ok(Response {
            status,
            location,
            body,
        })
    }

    fn set_cookie(&mut self, header: &str) {
        let mut parts = header.split(';');
        let Some((name, value)) = parts.next().and_then(|p| p.trim().split_once('=')) else {
            return;
        };
        let (mut path, mut expired) = ("/".to_owned(), false);
        for a in parts {
            let a = a.trim();
            let lower = a.to_ascii_lowercase();
            if lower.starts_with("path=") {
                a[5..].clone_into(&mut path);
            }
            expired |= lower == "max-age=0" || lower.starts_with("expires=thu, 01 jan 1970");
        }
        let key = (name.to_owned(), path);
        if expired || value.is_empty() {
            self.jar.remove(&key);
        } else {
            self.jar.insert(key, value.to_owned());
        }
    }
}

/// A form on a page: its action and its named inputs with their values.
struct Form {
    action: String,
    fields: Vec<(String, String)>,
}

/// The `<form method="post">`s of `html`, read loosely (Passmower's views are plain EJS).
fn forms(html: &str) -> Vec<Form> {
    let mut found = Vec::new();
    for chunk in html.split("<form").skip(1) {
        let (tag, rest) = chunk.split_once('>').unwrap_or((chunk, ""));
        if !attr(tag, "method").is_some_and(|m| m.eq_ignore_ascii_case("post")) {
            continue;
        }
        let Some(action) = attr(tag, "action") else {
            continue;
        };
        let inner = rest.split("</form>").next().unwrap_or_default();
        let fields = inner
            .split("<input")
            .skip(1)
            .filter_map(|i| {
                let tag = i.split('>').next().unwrap_or_default();
                let name = attr(tag, "name")?;
                Some((name, attr(tag, "value").unwrap_or_default()))
            })
            .collect();
        found.push(Form {
            action: action.replace("&amp;", "&"),
            fields,
        });
    }
    found
}

/// The value of attribute `name` in a tag's text (double or single quotes).
fn attr(tag: &str, name: &str) -> Option<String> {
    let mut rest = tag;
    while let Some(i) = rest.find(name) {
        let before_ok = i == 0 || rest.as_bytes()[i - 1].is_ascii_whitespace();
        let after = rest[i + name.len()..].trim_start();
        if let (true, Some(v)) = (before_ok, after.strip_prefix('=')) {
            let v = v.trim_start();
            let q = v.chars().next()?;
            if q == '"' || q == '\'' {
                return v[1..].split(q).next().map(str::to_owned);
            }
            return v.split_whitespace().next().map(str::to_owned);
        }
        rest = &rest[i + name.len()..];
    }
    None
}

/// The magic link in a mail: `https://HOST/interaction/<uid>/verify-email/<token>`.
fn find_link(text: &str) -> Option<String> {
    let start = text.find(&format!("https://{HOST}/interaction/"))?;
    let link: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "-_./:".contains(*c))
        .collect();
    link.contains("/verify-email/").then_some(link)
}

fn query(rest: &str, key: &str) -> Option<String> {
    rest.trim_start_matches('?')
        .split('&')
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .map(str::to_owned)
}

/// A path or URL for the record: no query values, the token of a login link cut.
fn short(p: &str) -> String {
    let p = p.split('?').next().unwrap_or(p);
    match p.split_once("/verify-email/") {
        Some((head, _)) => format!("{head}/verify-email/…"),
        None => p.to_owned(),
    }
}

/// A page's text for an error message: tags dropped, whitespace squeezed, 200 characters.
fn text_of(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(200)
        .collect()
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            out.push_str(after.get(..n.min(after.len())).unwrap_or_default());
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// Percent-encoding of a form or query value.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Base64 (standard with padding, or URL-safe without).
pub fn base64(bytes: &[u8], url: bool) -> String {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use base64::Engine;
    if url {
        URL_SAFE_NO_PAD.encode(bytes)
    } else {
        STANDARD.encode(bytes)
    }
}

/// The e-mail login's environment for Passmower's app container: e-mail login on, outbound
/// mail to the sink at `sink` (the credentials are any: the sink takes every AUTH).
pub fn env(sink: &SmtpSink) -> Vec<(&'static str, String)> {
    vec![
        ("EMAIL_ENABLED", "true".into()),
        ("OUTBOUND_EMAIL_ENABLED", "true".into()),
        ("EMAIL_HOST", sink.addr.ip().to_string()),
        ("EMAIL_PORT", sink.addr.port().to_string()),
        ("EMAIL_SSL", "false".into()),
        ("EMAIL_USERNAME", "pme".into()),
        ("EMAIL_PASSWORD", "pme".into()),
        ("EMAIL_FROM", "passmower@example.com".into()),
    ]
}

/// A sign-in on a pod that does not hold the Lease, and what the apiserver did with that pod's
/// writes meanwhile.
#[derive(Debug, serde::Serialize)]
pub struct FollowerSignIn {
    pub pod: String,
    pub pod_ip: String,
    /// µs since the epoch, start and end of the sign-in.
    pub from_us: i64,
    pub to_us: i64,
    pub outcome: Outcome,
    /// The pod's writes to the apiserver during the sign-in: `verb resource[/sub] → code`.
    pub apiserver_writes: Vec<String>,
    /// Of those, the ones the write fence refused (403 with its message's prefix in the audit
    /// log is not kept, so every 403 counts).
    pub refused: Vec<String>,
}

/// Signs in (see [`sign_in`]) on a follower of `install`: the newest pod that does not hold
/// the Lease, checked again after the sign-in.
pub async fn on_a_follower(
    node: &'static Node,
    install: &super::passmower::Install,
    sink: std::sync::Arc<SmtpSink>,
    login: Login,
) -> FollowerSignIn {
    let client = node.admin_client().await;
    let leader = install
        .leader_pod(&client)
        .await
        .and_then(|p| p.metadata.name);
    let pod = install
        .pods(&client)
        .await
        .into_iter()
        .rfind(|p| p.metadata.name != leader)
        .expect("a follower to sign in on");
    let name = pod.metadata.name.clone().unwrap_or_default();
    let ip = super::pods::pod_ip(&pod).expect("the follower's address");
    let addr = format!("{ip}:3000");
    let from_us = super::audit::now_us();
    let outcome = tokio::task::spawn_blocking(move || sign_in(node, &addr, &sink, &login))
        .await
        .expect("the sign-in task");
    let to_us = super::audit::now_us();
    let still_follower = install
        .leader_pod(&client)
        .await
        .and_then(|p| p.metadata.name)
        .is_some_and(|l| l != name);
    assert!(
        still_follower,
        "{name} took the Lease during the sign-in: not a follower's sign-in"
    );
    let writes = super::audit::read(&node.audit_log());
    let mine: Vec<&super::audit::Write> = writes
        .iter()
        .filter(|w| w.source_ip == ip && w.user == install.user())
        .filter(|w| (from_us..=to_us + 2_000_000).contains(&w.received_us))
        .filter(|w| !w.is_lease_write())
        .collect();
    let show = |w: &super::audit::Write| {
        let target = if w.subresource.is_empty() {
            w.resource.clone()
        } else {
            format!("{}/{}", w.resource, w.subresource)
        };
        format!("{} {target} {} → {}", w.verb, w.name, w.code)
    };
    FollowerSignIn {
        pod: name,
        pod_ip: ip,
        from_us,
        to_us,
        outcome,
        apiserver_writes: mine.iter().map(|w| show(w)).collect(),
        refused: mine
            .iter()
            .filter(|w| w.code == 403)
            .map(|w| show(w))
            .collect(),
    }
}
