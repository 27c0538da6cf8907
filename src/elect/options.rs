//! The flags of `elect` (`ElectArgs`, clap) and their validation into `ElectConfig`; every error
//! names the flag and what is allowed, and exits 2.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use hyper::Uri;

use super::consumer::{CheckMode, ConsumerCheck};
use crate::config::{parse_positive_duration, ConfigError};
use crate::election::timing::TimingArgs;
use crate::election::{identity, Timing};

/// Where the service-account namespace is mounted in a pod.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

#[derive(Debug, Clone, clap::Args)]
pub struct ElectArgs {
    /// Name of the coordination.k8s.io/v1 Lease to hold.
    #[arg(long, env = "ELECTOR_LEASE_NAME", default_value = "passmower-elector")]
    pub lease_name: String,
    /// Namespace of the Lease [default: $POD_NAMESPACE, then the service-account namespace].
    #[arg(long, env = "ELECTOR_NAMESPACE")]
    pub namespace: Option<String>,
    /// This pod's identity [default: $POD_NAME]. A per-process suffix is appended, so two
    /// processes with the same name can never both believe they hold the Lease.
    #[arg(long, env = "ELECTOR_IDENTITY")]
    pub identity: Option<String>,
    /// This pod's UID (downward API `metadata.uid`) [default: $POD_UID]. When known, the holder
    /// identity is `<identity>_<pod-uid>_<suffix>`, which the write fence (an admission policy)
    /// matches against the pod a request's ServiceAccount token is bound to.
    #[arg(long, env = "ELECTOR_POD_UID")]
    pub pod_uid: Option<String>,
    #[command(flatten)]
    pub timing: TimingArgs,
    /// The flag file (on a shared memory-backed emptyDir); its directory must exist.
    #[arg(
        long,
        env = "ELECTOR_FLAG_FILE",
        default_value = "/var/run/passmower-elector/grant.json"
    )]
    pub flag_file: PathBuf,
    /// Loopback URL to POST every grant change and renewal to (e.g. http://127.0.0.1:8082/grant).
    #[arg(long, env = "ELECTOR_TOGGLE_URL")]
    pub toggle_url: Option<String>,
    /// Address of the probe and metrics server (/healthz, /readyz, /leader, /metrics).
    #[arg(long, env = "ELECTOR_PROBE_ADDR", default_value = "0.0.0.0:8081")]
    pub probe_addr: SocketAddr,
    /// Do not create Kubernetes Events for transitions.
    #[arg(long, env = "ELECTOR_NO_EVENTS")]
    pub no_events: bool,
    /// Step down after the app has exited on its own this many times in a row in leader mode
    /// (as the supervisor reports in its ack), hand the Lease over and stay out of contention
    /// for one lease duration so another pod can try. 0 never steps down.
    #[arg(
        long,
        env = "ELECTOR_MAX_LEADER_FAILURES",
        value_name = "N",
        default_value = "3"
    )]
    pub max_leader_failures: u64,
    /// How to tell that the app's consumer (the supervisor, or a native app) runs and obeys:
    /// `toggle` (signed answers to pushes; followers' last object is pushed again every retry
    /// period), `ack-file` (its signed ack file keeps up with our objects), or `none` (contend
    /// regardless). `auto`: `toggle` with --toggle-url, else `ack-file`. Without that proof the
    /// pod does not contend, and a leader whose consumer goes quiet steps down.
    #[arg(long, env = "ELECTOR_CONSUMER_CHECK", value_name = "auto|toggle|ack-file|none",
        default_value = "auto", value_parser = ["auto", "toggle", "ack-file", "none"])]
    pub consumer_check: String,
    /// How long the consumer may go without a signed answer before this pod stops contending
    /// or, when leading, steps down [default: the lease duration]. At least kill grace + 1s and
    /// two retry periods (a promotion is answered once the leader app runs), at most 10m.
    #[arg(long, env = "ELECTOR_CONSUMER_TIMEOUT", value_parser = parse_positive_duration)]
    pub consumer_timeout: Option<Duration>,
    /// Loopback port where the leader instance serves its own Prometheus metrics (where
    /// `supervise --leader-port-map` moves the app's metrics port); the probe port then serves
    /// them at /metrics/leader-app for a PodMonitor to scrape.
    #[arg(long, env = "ELECTOR_LEADER_APP_METRICS_PORT", value_name = "PORT",
        value_parser = clap::value_parser!(u16).range(1..))]
    pub leader_app_metrics_port: Option<u16>,
    /// How often to check that the write fence guards this install: a dry-run create of a
    /// Secret by this pod's ServiceAccount, judged by who holds the Lease (admitted while
    /// another pod holds it: no fence; refused by a fence of another Lease: the ServiceAccount
    /// is shared). Reported as passmower_elector_write_fence{state} and an Event. `off` for
    /// installs without a fence. Between 1s and 24h.
    #[arg(long, env = "ELECTOR_WRITE_FENCE_CHECK", value_name = "DURATION|off",
        default_value = "5m", value_parser = parse_fence_check)]
    pub write_fence_check: FenceCheckPeriod,
    /// Passmower's own Lease (2.4 and later: `passmower-operators`, or its
    /// LEADER_ELECTION_LEASE_NAME), in the same namespace, for installs that move between its
    /// election and ours: this pod leads only while it also holds that Lease under its pod name
    /// (the identity upstream's election uses), takes it only once it is free, renews it with
    /// ours and clears it when it hands over. So no pod running upstream's election runs
    /// operators beside ours, on the way in or back. Needs get and update on that Lease.
    #[arg(long, env = "ELECTOR_NATIVE_LEASE", value_name = "NAME")]
    pub native_lease: Option<String>,
}

/// `--write-fence-check`: a period, or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceCheckPeriod(pub Option<Duration>);

/// The bounds of `--write-fence-check`: one dry run a second per pod at most, and at least one
/// a day.
const FENCE_CHECK_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(24 * 3600));

fn parse_fence_check(s: &str) -> Result<FenceCheckPeriod, String> {
    if s == "off" {
        return Ok(FenceCheckPeriod(None));
    }
    let d = crate::config::parse_duration(s).map_err(|e| format!("{e}; or off"))?;
    if d < FENCE_CHECK_RANGE.0 || d > FENCE_CHECK_RANGE.1 {
        return Err(format!(
            "must be between {} and {}, or off",
            crate::config::human(FENCE_CHECK_RANGE.0),
            crate::config::human(FENCE_CHECK_RANGE.1)
        ));
    }
    Ok(FenceCheckPeriod(Some(d)))
}

/// The validated configuration of the `elect` role.
#[derive(Debug, Clone)]
pub struct ElectConfig {
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace.
    pub namespace: String,
    /// Base identity (usually the pod name); the holder identity adds a per-process suffix.
    pub identity: String,
    /// The pod's UID, when known: it goes into the holder identity between the base identity
    /// and the suffix.
    pub pod_uid: Option<String>,
    pub timing: Timing,
    pub flag_file: PathBuf,
    pub toggle_url: Option<Uri>,
    pub probe_addr: SocketAddr,
    pub events: bool,
    /// Failed leader starts in a row after which this pod steps down (0: never).
    pub max_leader_failures: u64,
    /// How the consumer proves it is alive, and for how long it may stay quiet.
    pub consumer: ConsumerCheck,
    /// This pod's name and namespace (`POD_NAME`, `POD_NAMESPACE`, downward API), when known:
    /// the elector watches that Pod and does not take the Lease once it is terminating.
    pub pod: Option<(String, String)>,
    /// The leader instance's metrics port on loopback, proxied at `/metrics/leader-app`.
    pub leader_app_metrics_port: Option<u16>,
    /// How often to check the write fence (None: never).
    pub write_fence_check: Option<Duration>,
    /// Passmower's own Lease, held beside ours (see `--native-lease`).
    pub native_lease: Option<String>,
}

impl ElectArgs {
    /// Validates the flags; every error names the flag and what is allowed.
    pub fn into_config(self) -> Result<ElectConfig, ConfigError> {
        let timing = self.timing.timing();
        timing.validate()?;
        check_dns_subdomain("--lease-name", &self.lease_name)?;
        let namespace = match self.namespace.filter(|n| !n.is_empty()) {
            Some(ns) => ns,
            None => default_namespace().ok_or_else(|| {
                ConfigError::new(
                    "--namespace",
                    "",
                    format!("not set, and neither POD_NAMESPACE nor {SERVICE_ACCOUNT_NAMESPACE} gives one"),
                )
            })?,
        };
        check_dns_label("--namespace", &namespace)?;
        let identity = match self.identity.filter(|i| !i.is_empty()) {
            Some(i) => i,
            None => std::env::var("POD_NAME")
                .ok()
                .filter(|p| !p.is_empty())
                .ok_or_else(|| {
                    ConfigError::new(
                        "--identity",
                        "",
                        "not set and POD_NAME is empty (set it from the downward API)",
                    )
                })?,
        };
        let pod_uid = match self.pod_uid.filter(|u| !u.is_empty()) {
            Some(uid) => Some(uid),
            None => std::env::var("POD_UID").ok().filter(|u| !u.is_empty()),
        };
        if let Some(uid) = &pod_uid {
            if !identity::is_uid(uid) {
                return Err(ConfigError::new(
                    "--pod-uid",
                    uid,
                    "must be a pod UID as the downward API gives it (metadata.uid: 36 characters, \
                     hexadecimal digits in groups of 8-4-4-4-12 joined by '-')",
                ));
            }
            // The holder identity is parsed as `<pod-name>_<pod-uid>_<suffix>` (the write
            // fence, adoption by a restarted elector): the base must be a pod name then.
            check_dns_subdomain("--identity", &identity).map_err(|e| {
                ConfigError::new(
                    "--identity",
                    &identity,
                    format!(
                        "with a pod UID ({uid}) the identity must be the pod's name: {}",
                        e.reason
                    ),
                )
            })?;
        }
        match self.flag_file.parent() {
            Some(dir) if dir.as_os_str().is_empty() || dir.is_dir() => {}
            _ => {
                return Err(ConfigError::new(
                    "--flag-file",
                    self.flag_file.display().to_string(),
                    "its directory must exist (mount a shared emptyDir there)",
                ))
            }
        }
        let toggle_url = self
            .toggle_url
            .filter(|u| !u.is_empty())
            .map(|u| parse_toggle_url(&u))
            .transpose()?;
        let consumer = consumer_check(
            &self.consumer_check,
            self.consumer_timeout,
            toggle_url.is_some(),
            &timing,
        )?;
        // The Pod to watch: POD_NAME, in POD_NAMESPACE (else the Lease's namespace). Only a
        // valid pod name: anything else could never be found.
        let pod = std::env::var("POD_NAME")
            .ok()
            .filter(|p| check_dns_subdomain("POD_NAME", p).is_ok())
            .map(|p| {
                let ns = std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|n| check_dns_label("POD_NAMESPACE", n).is_ok())
                    .unwrap_or_else(|| namespace.clone());
                (p, ns)
            });
        let native_lease = self.native_lease.filter(|n| !n.is_empty());
        if let Some(name) = &native_lease {
            check_dns_subdomain("--native-lease", name)?;
            if *name == self.lease_name {
                return Err(ConfigError::new(
                    "--native-lease",
                    name,
                    "must differ from --lease-name: it is Passmower's own Lease, held beside ours",
                ));
            }
            // Upstream's election names a pod by its pod name: the identity must be one.
            check_dns_subdomain("--identity", &identity).map_err(|e| {
                ConfigError::new(
                    "--identity",
                    &identity,
                    format!(
                        "with --native-lease the identity must be the pod's name (POD_NAME, \
                         the holder upstream's election writes): {}",
                        e.reason
                    ),
                )
            })?;
        }
        Ok(ElectConfig {
            native_lease,
            pod,
            lease_name: self.lease_name,
            namespace,
            identity,
            pod_uid,
            timing,
            flag_file: self.flag_file,
            toggle_url,
            probe_addr: self.probe_addr,
            events: !self.no_events,
            max_leader_failures: self.max_leader_failures,
            consumer,
            leader_app_metrics_port: self.leader_app_metrics_port,
            write_fence_check: self.write_fence_check.0,
        })
    }
}

/// The longest `--consumer-timeout`: past it a dead consumer would hold the Lease for longer
/// than anyone waits for a failover.
const MAX_CONSUMER_TIMEOUT: Duration = Duration::from_secs(600);

/// `--consumer-check` and `--consumer-timeout`, validated against each other and the timings.
fn consumer_check(
    mode: &str,
    timeout: Option<Duration>,
    has_toggle: bool,
    timing: &Timing,
) -> Result<ConsumerCheck, ConfigError> {
    let mode = match mode {
        "auto" if has_toggle => CheckMode::Toggle,
        "auto" | "ack-file" => CheckMode::AckFile,
        "toggle" if has_toggle => CheckMode::Toggle,
        "toggle" => {
            return Err(ConfigError::new(
                "--consumer-check",
                mode,
                "toggle needs --toggle-url (or use ack-file, auto or none)",
            ))
        }
        _ => CheckMode::Off,
    };
    let timeout = timeout.unwrap_or(timing.lease_duration);
    // A promotion is answered once the leader app runs: in restart mode that is after the
    // follower app stopped (up to kill grace) and the leader app started; a follower's repeat
    // push comes every retry period. A shorter timeout would call a healthy consumer silent.
    let floor = (timing.kill_grace + Duration::from_secs(1)).max(timing.retry_period * 2);
    if timeout < floor || timeout > MAX_CONSUMER_TIMEOUT {
        return Err(ConfigError::new(
            "--consumer-timeout",
            crate::config::human(timeout),
            format!(
                "must be between {} (kill grace + 1s, and two retry periods) and {}",
                crate::config::human(floor),
                crate::config::human(MAX_CONSUMER_TIMEOUT)
            ),
        ));
    }
    Ok(ConsumerCheck { mode, timeout })
}

fn default_namespace() -> Option<String> {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
                .ok()
                .map(|s| s.trim().to_owned())
        })
        .filter(|n| !n.is_empty())
}

/// The toggle is a control channel: it must stay inside the pod, on loopback, over plain HTTP.
fn parse_toggle_url(raw: &str) -> Result<Uri, ConfigError> {
    let bad = |why: &str| ConfigError::new("--toggle-url", raw, why.to_owned());
    let uri: Uri = raw
        .parse()
        .map_err(|_| bad("not a URL; expected http://127.0.0.1:PORT/PATH"))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad(
            "must be an http:// URL on loopback (127.0.0.0/8, [::1] or localhost)",
        ));
    }
    let host = uri
        .host()
        .unwrap_or("")
        .trim_start_matches('[')
        .trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return Err(bad("must point at loopback (127.0.0.0/8, [::1] or localhost): the toggle never leaves the pod"));
    }
    Ok(uri)
}

fn check_dns_label(flag: &str, value: &str) -> Result<(), ConfigError> {
    if crate::config::is_dns1123_label(value) {
        Ok(())
    } else {
        Err(ConfigError::new(
            flag,
            value,
            "must be a DNS-1123 label: 1-63 of a-z, 0-9 and '-', alphanumeric at both ends",
        ))
    }
}

fn check_dns_subdomain(flag: &str, value: &str) -> Result<(), ConfigError> {
    if crate::config::is_dns1123_subdomain(value) {
        Ok(())
    } else {
        Err(ConfigError::new(
            flag,
            value,
            "must be a DNS-1123 subdomain: lowercase a-z, 0-9, '-' and '.', at most 253 characters",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: ElectArgs,
    }

    fn parse(extra: &[&str]) -> Result<ElectConfig, ConfigError> {
        let dir = std::env::temp_dir();
        let flag = dir.join("grant.json");
        let flag = flag.to_string_lossy().to_string();
        let mut argv = vec!["elect"];
        if !extra.contains(&"--identity") {
            argv.extend_from_slice(&["--identity", "pod-a"]);
        }
        if !extra.contains(&"--namespace") {
            argv.extend_from_slice(&["--namespace", "ns"]);
        }
        if !extra.contains(&"--flag-file") {
            argv.extend_from_slice(&["--flag-file", &flag]);
        }
        argv.extend_from_slice(extra);
        Cmd::try_parse_from(argv)
            .expect("flags parse")
            .args
            .into_config()
    }

    #[test]
    fn defaults_validate() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.timing, Timing::default());
        assert_eq!(c.lease_name, "passmower-elector");
    }

    #[test]
    fn unsafe_timing_names_the_flag() {
        let e = parse(&["--kill-grace", "5s"]).unwrap_err();
        assert_eq!(e.flag, "--lease-duration");
    }

    #[test]
    fn toggle_must_be_loopback_http() {
        assert!(parse(&["--toggle-url", "http://127.0.0.1:8082/grant"]).is_ok());
        assert!(parse(&["--toggle-url", "http://[::1]:8082/grant"]).is_ok());
        assert_eq!(
            parse(&["--toggle-url", "http://10.0.0.1:8082/"])
                .unwrap_err()
                .flag,
            "--toggle-url"
        );
        assert_eq!(
            parse(&["--toggle-url", "https://127.0.0.1/"])
                .unwrap_err()
                .flag,
            "--toggle-url"
        );
    }

    #[test]
    fn names_must_be_dns_compatible() {
        assert_eq!(
            parse(&["--lease-name", "Bad_Name"]).unwrap_err().flag,
            "--lease-name"
        );
        assert_eq!(
            parse(&["--namespace", "a.b"]).unwrap_err().flag,
            "--namespace"
        );
    }

    #[test]
    fn missing_flag_file_directory_is_refused() {
        let e = parse(&["--flag-file", "/no/such/dir/grant.json"]).unwrap_err();
        assert_eq!(e.flag, "--flag-file");
    }

    const UID: &str = "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f40";

    #[test]
    fn pod_uid_from_the_flag_or_pod_uid_and_validated() {
        let c = parse(&["--pod-uid", UID]).unwrap();
        assert_eq!(c.pod_uid.as_deref(), Some(UID));
        // An empty flag means unknown (the variable may still give it: not set in tests).
        assert_eq!(parse(&["--pod-uid", ""]).unwrap().pod_uid, None);
        for bad in [
            "abc",
            "0f9c3a52_6b1e_4d0a_9a57_3c2e1d7b8f40",
            "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f4",
            "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f4g",
            "0f9c3a526b1e4d0a9a573c2e1d7b8f40aaaa",
        ] {
            let e = parse(&["--pod-uid", bad]).unwrap_err();
            assert_eq!(e.flag, "--pod-uid", "{bad}");
            assert!(e.reason.contains("8-4-4-4-12"), "{e}");
        }
    }

    #[test]
    fn with_a_pod_uid_the_identity_must_be_a_pod_name() {
        let e = parse(&["--pod-uid", UID, "--identity", "pod_a"]).unwrap_err();
        assert_eq!(e.flag, "--identity");
        assert!(
            parse(&["--identity", "pod_a"]).is_ok(),
            "without a UID any base goes"
        );
    }
}
