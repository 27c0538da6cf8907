//! Real Passmower (an npm-installed copy, `PME_PASSMOWER_APP`) as a process the way a pod runs
//! it, against the test apiserver, with its own loopback Redis.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::free_port;

/// Moves a Passmower's metrics port 9090 out of other tests' way (see [`start_passmower_as`]).
const METRICS_PORT_PRELOAD: &str = include_str!("passmower/metrics-port.mjs");

/// The npm-installed copy of upstream Passmower 1.3.0 (`src/` and `node_modules/`) that the
/// real-Passmower test runs, from `PME_PASSMOWER_APP` (scripts/test.sh sets it).
pub fn passmower_app() -> Option<PathBuf> {
    app_dir(
        "PME_PASSMOWER_APP",
        "Point it at a copy of ../shared/upstream/passmower after `npm install --omit=dev` (drop \
         @codemowers/oidc-key-manager from package.json first, see that README)",
    )
}

/// The npm-installed copy of an upstream Passmower tree named by the environment variable
/// `var` (scripts/test.sh sets them); none: the test says so (how to make one: `hint`) and
/// checks nothing, except under CI, where it fails.
pub fn app_dir(var: &str, hint: &str) -> Option<PathBuf> {
    let Some(dir) = std::env::var_os(var).map(PathBuf::from) else {
        // scripts/test.sh always sets it: in CI a skip here would be a test that cannot fail.
        assert!(
            std::env::var_os("CI").is_none(),
            "{var} is not set under CI: run the tests through scripts/test.sh"
        );
        eprintln!("{var} is not set: real Passmower is NOT run. {hint}");
        return None;
    };
    assert!(
        dir.join("src/app.js").is_file() && dir.join("node_modules/micromatch").is_dir(),
        "{var} {} holds no npm-installed Passmower",
        dir.display()
    );
    Some(dir)
}

/// A child process killed (by PID) when dropped.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Redis on a loopback port, nothing persisted.
pub fn start_redis(port: u16) -> Killed {
    let mut cmd = std::process::Command::new("redis-server");
    cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--port", &port.to_string()])
        .stdout(std::process::Stdio::null());
    let redis = Killed(crate::process::spawn_tracked(cmd).expect("redis-server"));
    let up = crate::wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        redis_keys(port).is_some()
    });
    assert!(up, "redis-server on {port} did not answer");
    redis
}

/// The Redis keys of OIDC clients (`oidc:Client:*`).
pub fn redis_keys(port: u16) -> Option<BTreeSet<String>> {
    let out = std::process::Command::new("redis-cli")
        .args([
            "-p",
            &port.to_string(),
            "--scan",
            "--pattern",
            "oidc:Client:*",
        ])
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    })
}

/// A JWKS with one RS256 signing key and two cookie keys, as Passmower's env wants them.
pub fn passmower_keys() -> (String, String) {
    let out = std::process::Command::new("node")
        .args([
            "-e",
            "const {generateKeyPairSync} = require('node:crypto');\
             const {privateKey} = generateKeyPairSync('rsa', {modulusLength: 2048});\
             const jwk = privateKey.export({format: 'jwk'});\
             console.log(JSON.stringify([{...jwk, kid: 'k1', use: 'sig', alg: 'RS256'}]));",
        ])
        .output()
        .expect("node");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        r#"["cookie-key-one-0123456789","cookie-key-two-0123456789"]"#.to_owned(),
    )
}

/// Starts Passmower as a pod would run it (in-cluster config: the ServiceAccount files are put
/// at their fixed path in a private mount namespace of its own, so the host's /run is left as
/// it was), in namespace `auth` (`PME_POD_NAMESPACE` in `env` of [`start_passmower_as`]
/// names another), with `selector` as NAMESPACE_SELECTOR; returns once it serves
/// /.well-known/openid-configuration.
pub fn start_passmower(
    app: &Path,
    kubeconfig: &Path,
    api: std::net::SocketAddr,
    redis_port: u16,
    selector: &str,
    log: &Path,
) -> Killed {
    start_passmower_as(
        app,
        kubeconfig,
        api,
        redis_port,
        // 2.4's own leader election off, as in every instance under our election (1.3.0 and
        // the 2.2 era ignore it).
        &[
            ("NAMESPACE_SELECTOR", selector),
            ("LEADER_ELECTION_ENABLED", "false"),
        ],
        &[],
        log,
    )
}

/// As [`start_passmower`], with `env` added and the command `wrapper` + `node … src/app.js`
/// (e.g. `passmower-elector supervise … --`), in the same mount namespace, so the wrapper uses
/// the same ServiceAccount files. Returns once `PORT` serves.
///
/// Passmower's metrics listen on the fixed port 9090 of the host's network (the mount
/// namespace is its own, the network is not), so two tests running Passmower at once would
/// meet there (EADDRINUSE, and the second exits). Unless `env` sets `NODE_OPTIONS`, every
/// instance imports the kit's `metrics-port.mjs`, which moves 9090 to a free port except in a
/// process the supervisor's own port map governs (a leader instance keeps the port the test
/// gave it with `--leader-port-map`).
pub fn start_passmower_as(
    app: &Path,
    kubeconfig: &Path,
    api: std::net::SocketAddr,
    redis_port: u16,
    env: &[(&str, &str)],
    wrapper: &[&str],
    log: &Path,
) -> Killed {
    let (jwks, cookies) = passmower_keys();
    // The app's HTTP port: the caller's `PORT` when it names one, else a free one.
    let port = env
        .iter()
        .find(|(k, _)| *k == "PORT")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(free_port);
    let moved_metrics = if env.iter().any(|(k, _)| *k == "NODE_OPTIONS") {
        None
    } else {
        let preload = log.with_extension("metrics-port.mjs");
        std::fs::write(&preload, METRICS_PORT_PRELOAD).expect("write the metrics-port preload");
        Some((
            "NODE_OPTIONS",
            format!("--import=file://{}", preload.display()),
        ))
    };
    let script = r#"set -e
mount -t tmpfs tmpfs /run
d=/run/secrets/kubernetes.io/serviceaccount
mkdir -p "$d"
python3 - "$PME_KUBECONFIG" "$d" "${PME_POD_NAMESPACE:-auth}" <<'PY'
import base64, json, sys
c = json.load(open(sys.argv[1]))
open(sys.argv[2] + "/token", "w").write(c["users"][0]["user"]["token"])
open(sys.argv[2] + "/ca.crt", "wb").write(base64.b64decode(c["clusters"][0]["cluster"]["certificate-authority-data"]))
open(sys.argv[2] + "/namespace", "w").write(sys.argv[3])
PY
exec "$@" node --no-warnings src/app.js"#;
    let mut cmd = std::process::Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "bash",
        "-c",
        script,
        "passmower",
    ])
    .args(wrapper)
    .current_dir(app)
    .env("PME_KUBECONFIG", kubeconfig)
    .env("KUBERNETES_SERVICE_HOST", api.ip().to_string())
    .env("KUBERNETES_SERVICE_PORT", api.port().to_string())
    .env("ISSUER_URL", "https://passmower.example.com/")
    .env("REDIS_URI", format!("redis://127.0.0.1:{redis_port}"))
    .env("OIDC_JWKS", jwks)
    .env("OIDC_COOKIE_KEYS", cookies)
    .env("DEPLOYMENT_NAME", "passmower")
    // The later generations need outbound email configured or off (1.3.0 ignores it).
    .env("OUTBOUND_EMAIL_ENABLED", "false")
    .env("PORT", port.to_string())
    // Unset unless `env` sets it, as in a pod whose container sets none.
    .env_remove("NAMESPACE_SELECTOR")
    .envs(moved_metrics)
    .envs(env.iter().copied())
    .stdin(std::process::Stdio::null())
    .stdout(std::fs::File::create(log).expect("log"))
    .stderr(std::fs::File::create(log.with_extension("err")).expect("log"));
    let child = Killed(crate::process::spawn_tracked(cmd).expect("unshare + node"));
    let url = format!("127.0.0.1:{port}");
    let serving = crate::wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(&url) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let request = "GET /.well-known/openid-configuration HTTP/1.1\r\nHost: passmower.example.com\r\nX-Forwarded-Proto: https\r\nConnection: close\r\n\r\n";
        let mut response = String::new();
        s.write_all(request.as_bytes()).is_ok()
            && s.read_to_string(&mut response).is_ok()
            && response.starts_with("HTTP/1.1 200")
    });
    assert!(
        serving,
        "Passmower ({env:?}) did not serve within 60s:\n{}\n{}",
        std::fs::read_to_string(log).unwrap_or_default(),
        std::fs::read_to_string(log.with_extension("err")).unwrap_or_default()
    );
    child
}
