//! The webhook under test: `passmower-elector webhook` as a process on loopback, the
//! MutatingWebhookConfiguration that points the real kube-apiserver at it (`clientConfig.url`),
//! and pods created through the API.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

pub use pme_testkit::free_port;
use pme_testkit::ElectorProcess;

/// The image the tests inject (never pulled: no kubelet runs these pods).
pub const IMAGE: &str = "registry.example.com/passmower-elector:test";
pub const INJECT_LABEL: &str = "passmower-elector.io/inject";

/// A running `passmower-elector webhook`.
pub struct Webhook {
    pub process: ElectorProcess,
    pub port: u16,
    pub health_port: u16,
}

impl Webhook {
    /// Starts the webhook keeping the caBundle of `configuration`, serving a certificate for
    /// 127.0.0.1, with the API identity of `kubeconfig` and a 1s propagation delay.
    pub fn start(configuration: &str, kubeconfig: &Path, extra: &[&str]) -> Webhook {
        Self::start_with_env(configuration, kubeconfig, extra, &[])
    }

    /// [`Webhook::start`] with more environment variables (e.g. the downward API's POD_NAME).
    pub fn start_with_env(
        configuration: &str,
        kubeconfig: &Path,
        extra: &[&str],
        env: &[(&str, &OsStr)],
    ) -> Webhook {
        let port = free_port();
        let health_port = free_port();
        let listen = format!("--listen=127.0.0.1:{port}");
        let health = format!("--health-addr=127.0.0.1:{health_port}");
        let config = format!("--webhook-configuration={configuration}");
        let mut args = vec![
            "webhook",
            "--image",
            IMAGE,
            &listen,
            &health,
            &config,
            "--tls-name=127.0.0.1",
            "--ca-propagation-delay=1s",
            "--ca-bundle-resync=2s",
            "--shutdown-delay=0s",
        ];
        args.extend_from_slice(extra);
        // PME_WEBHOOK_BIN: measure another build (the release binary) with the same tests.
        let program = std::env::var_os("PME_WEBHOOK_BIN")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_passmower-elector").into());
        let process = ElectorProcess::spawn_program(
            &format!("webhook-{configuration}"),
            &program,
            &args,
            &[
                ("KUBECONFIG", kubeconfig.as_os_str()),
                ("ELECTOR_LOG_LEVEL", OsStr::new("info,kube=warn")),
            ]
            .into_iter()
            .chain(env.iter().copied())
            .collect::<Vec<_>>(),
        );
        Webhook {
            process,
            port,
            health_port,
        }
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}/mutate", self.port)
    }

    /// GET on the health port: (status, body), or `None` when nothing answers.
    pub fn health_get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.health_port, path)
    }

    /// Waits until `/readyz` says ok (our CA published and propagated); panics with the log.
    pub fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.process.try_exit_status() {
                panic!("webhook exited: {status}\n{}", self.process.logs());
            }
            if matches!(self.health_get("/readyz"), Some((200, _))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "webhook not ready within {timeout:?}\n{}",
            self.process.logs()
        );
    }

    /// The value of a metric line starting with `prefix` (summed over its label sets).
    pub fn metric(&self, prefix: &str) -> f64 {
        let (_, body) = self.health_get("/metrics").expect("metrics answer");
        body.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Resident memory of the webhook process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.process.pid()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// Creates a MutatingWebhookConfiguration like the chart's, calling `url`, limited to
/// namespace `namespace` (tests run in parallel against one API server, and a configuration is
/// cluster-wide) when it carries the opt-in label.
pub async fn create_configuration(
    client: &kube::Client,
    name: &str,
    url: &str,
    namespace: &str,
    failure_policy: &str,
) {
    let hook = MutatingWebhook {
        name: "pods.passmower-elector.io".into(),
        admission_review_versions: vec!["v1".into()],
        client_config: WebhookClientConfig {
            url: Some(url.to_owned()),
            ..Default::default()
        },
        failure_policy: Some(failure_policy.into()),
        match_conditions: None,
        match_policy: Some("Equivalent".into()),
        namespace_selector: Some(LabelSelector {
            match_labels: Some([(INJECT_LABEL.to_owned(), "enabled".to_owned())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![namespace.to_owned()]),
            }]),
        }),
        object_selector: Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: INJECT_LABEL.into(),
                operator: "NotIn".into(),
                values: Some(vec!["disabled".into()]),
            }]),
            ..Default::default()
        }),
        reinvocation_policy: Some("Never".into()),
        rules: Some(vec![RuleWithOperations {
            operations: Some(vec!["CREATE".into()]),
            api_groups: Some(vec!["".into()]),
            api_versions: Some(vec!["v1".into()]),
            resources: Some(vec!["pods".into()]),
            scope: Some("Namespaced".into()),
        }]),
        side_effects: "None".into(),
        timeout_seconds: Some(5),
    };
    let config = MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        webhooks: Some(vec![hook]),
    };
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &config)
        .await
        .unwrap_or_else(|e| panic!("create MutatingWebhookConfiguration {name}: {e}"));
}

/// The CA certificates (PEM) of the configuration's caBundle.
pub async fn ca_bundle(client: &kube::Client, name: &str) -> String {
    let config = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get {name}: {e}"));
    let hooks = config.webhooks.unwrap_or_default();
    hooks
        .first()
        .and_then(|h| h.client_config.ca_bundle.as_ref())
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

/// Puts the opt-in label on `namespace`.
pub async fn opt_in(client: &kube::Client, namespace: &str) {
    Api::<Namespace>::all(client.clone())
        .patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {INJECT_LABEL: "enabled"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("label namespace {namespace}: {e}"));
}

/// A Pod as a ReplicaSet of Deployment `deployment` would create it (no controller runs here,
/// so the owner is only named), running Passmower as ServiceAccount `passmower`.
pub fn replicaset_pod(deployment: &str, extra_metadata: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("{deployment}-7f9c6-"),
            "labels": {"app": deployment, "pod-template-hash": "7f9c6"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("{deployment}-7f9c6"), "uid": "00000000-0000-0000-0000-000000000001",
                "controller": true}]
        },
        "spec": {
            "serviceAccountName": "passmower",
            "containers": [{
                "name": "passmower",
                "image": "ghcr.io/passmower/passmower:1.3.0",
                "env": [{"name": "NAMESPACE_SELECTOR", "value": "*"}]
            }]
        }
    });
    if let (Some(meta), Some(extra)) = (pod["metadata"].as_object_mut(), extra_metadata.as_object())
    {
        for (k, v) in extra {
            match (meta.get_mut(k), v) {
                (Some(Value::Object(existing)), Value::Object(more)) => {
                    existing.extend(more.clone());
                }
                _ => {
                    meta.insert(k.clone(), v.clone());
                }
            }
        }
    }
    pod
}

/// Creates `pod` in `namespace`: the stored Pod, or the API's refusal.
pub async fn create_pod(
    client: &kube::Client,
    namespace: &str,
    pod: &Value,
) -> Result<Pod, kube::Error> {
    let pod: Pod = serde_json::from_value(pod.clone()).expect("a Pod");
    Api::<Pod>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &pod)
        .await
}

/// Names of the pod's init containers and containers.
pub fn container_names(pod: &Pod) -> (Vec<String>, Vec<String>) {
    let spec = pod.spec.as_ref().expect("spec");
    let names = |cs: &[k8s_openapi::api::core::v1::Container]| {
        cs.iter().map(|c| c.name.clone()).collect::<Vec<_>>()
    };
    (
        names(spec.init_containers.as_deref().unwrap_or_default()),
        names(&spec.containers),
    )
}

/// Whether the pod was stored with the elector.
pub fn is_injected(pod: &Pod) -> bool {
    container_names(pod)
        .0
        .iter()
        .any(|n| n == "passmower-elector")
}

/// Creates pods (of Deployment `passmower`) until one is stored with the elector: the API server uses a new
/// configuration and a new caBundle a moment after they are written.
pub async fn wait_effective(client: &kube::Client, namespace: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline {
        match create_pod(client, namespace, &replicaset_pod("passmower", json!({}))).await {
            Ok(pod) if is_injected(&pod) => return,
            Ok(_) => last = "stored without the elector".into(),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the webhook did not take effect in {namespace} within {timeout:?}: {last}");
}

/// POSTs `body` to the webhook with curl, trusting the CA in `ca_pem`: (HTTP status, body).
pub fn curl_post(webhook: &Webhook, ca_pem: &str, path: &str, body: &[u8]) -> (u16, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.pem");
    let data = dir.path().join("body.json");
    std::fs::write(&ca, ca_pem).expect("write ca");
    std::fs::write(&data, body).expect("write body");
    let out = std::process::Command::new("curl")
        .args(["-sS", "--noproxy", "*", "--max-time", "20", "--cacert"])
        .arg(&ca)
        .args(["-H", "Content-Type: application/json", "--data-binary"])
        .arg(format!("@{}", data.display()))
        .args(["-w", "\n%{http_code}"])
        .arg(format!("https://127.0.0.1:{}{path}", webhook.port))
        .output()
        .expect("run curl (is it installed?)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        format!("{body}{}", String::from_utf8_lossy(&out.stderr)),
    )
}

/// Sets the caBundle of every webhook of configuration `name` to `pem` (what cert-manager's
/// CA injector does for a bring-your-own certificate).
pub async fn set_ca_bundle(client: &kube::Client, name: &str, pem: &str) {
    let api = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let mut config = api.get(name).await.expect("get configuration");
    for hook in config.webhooks.iter_mut().flatten() {
        hook.client_config.ca_bundle = Some(k8s_openapi::ByteString(pem.as_bytes().to_vec()));
    }
    api.replace(name, &PostParams::default(), &config)
        .await
        .expect("replace configuration");
}

/// Writes `text` to `path` atomically (temp file + rename), as the kubelet updates a Secret
/// volume.
pub fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write temp");
    std::fs::rename(&tmp, path).expect("rename");
}
