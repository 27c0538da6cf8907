//! Pods as the kubelet runs them: their containers' processes (found through the node's
//! cgroup subtree by container ID), signals to them, and the kubelet's own view of pod
//! status (its `/pods` endpoint), which stays readable while the apiserver is down.

use std::io::{Read, Write};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::config::{KUBELET_PORT, NODE_IP};
use super::Node;

/// The container ID (without the `containerd://` prefix) of `container` in `pod`, looking at
/// app containers and init containers (native sidecars) alike.
pub fn container_id(pod: &Pod, container: &str) -> Option<String> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .find(|c| c.name == container)
        .and_then(|c| c.container_id.as_deref())
        .map(|id| id.rsplit("://").next().unwrap_or(id).to_owned())
}

/// Restart count of `container` (app or init container).
pub fn restart_count(pod: &Pod, container: &str) -> Option<i32> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .find(|c| c.name == container)
        .map(|c| c.restart_count)
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status.as_ref()?.pod_ip.clone()
}

impl Node {
    /// Host PIDs of the processes of one container (its cgroup is named by its ID).
    pub fn container_pids(&self, container_id: &str) -> Vec<i32> {
        self.cgroups.pids_of(container_id)
    }

    /// Host PIDs of every process of a pod, the sandbox included.
    pub fn pod_pids(&self, pod: &Pod) -> Vec<i32> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        self.cgroups.pids_of(&format!("pod{uid}"))
    }

    /// Sends `signal` to every process of `container` in `pod`; returns how many.
    pub fn signal_container(&self, pod: &Pod, container: &str, signal: Signal) -> usize {
        let Some(id) = container_id(pod, container) else {
            return 0;
        };
        signal_all(&self.container_pids(&id), signal)
    }

    /// GET `path` from the kubelet's API, over TLS with the apiserver's kubelet client
    /// certificate, from inside the node's network namespace. Works while the apiserver is
    /// down (x509 authentication, no webhook authorization).
    pub fn kubelet_get(&self, path: &str) -> Result<String, String> {
        let cert = self.layout.path("pki/kubelet-client.crt");
        let key = self.layout.path("pki/kubelet-client.key");
        // curl inside the namespace: an operator's TLS client, and no TLS stack in the harness.
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &self.ns.name, "curl", "-sSfk", "-m", "5"])
            .arg("--cert")
            .arg(&cert)
            .arg("--key")
            .arg(&key)
            .arg(format!("https://{NODE_IP}:{KUBELET_PORT}{path}"))
            .output()
            .map_err(|e| format!("run curl: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "kubelet {path}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The kubelet's probe counters (`/metrics/probes`, `prober_probe_total`): for each
    /// (pod, container, probe type, result), how many probes the kubelet ran.
    pub fn kubelet_probe_counts(&self) -> Result<Vec<ProbeCount>, String> {
        let text = self.kubelet_get("/metrics/probes")?;
        Ok(text
            .lines()
            .filter(|l| l.starts_with("prober_probe_total{"))
            .filter_map(ProbeCount::parse)
            .collect())
    }

    /// One plain HTTP GET from inside the node's network namespace; the status code.
    pub fn http_get(&self, addr: &str, path: &str, timeout: Duration) -> Result<u16, String> {
        let addr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
        let mut stream = self
            .ns
            .connect(addr, timeout)
            .map_err(|e| format!("connect {addr}: {e}"))?;
        http_status(&mut stream, path, timeout)
    }
}

/// One `prober_probe_total` sample.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeCount {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// `Readiness`, `Liveness` or `Startup`.
    pub probe_type: String,
    /// `successful`, `failed` or `unknown`.
    pub result: String,
    pub count: f64,
}

impl ProbeCount {
    fn parse(line: &str) -> Option<ProbeCount> {
        let (labels, value) = line.strip_prefix("prober_probe_total{")?.split_once("} ")?;
        let label = |name: &str| {
            labels
                .split("\",")
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        Some(ProbeCount {
            namespace: label("namespace"),
            pod: label("pod"),
            container: label("container"),
            probe_type: label("probe_type"),
            result: label("result"),
            count: value.trim().parse().ok()?,
        })
    }
}

/// Sends `signal` to each PID; returns how many were signalled.
pub fn signal_all(pids: &[i32], signal: Signal) -> usize {
    pids.iter()
        .filter(|pid| kill(Pid::from_raw(**pid), signal).is_ok())
        .count()
}

/// Writes a GET for `path` and reads the status code of the answer.
pub fn http_status(
    stream: &mut std::net::TcpStream,
    path: &str,
    timeout: Duration,
) -> Result<u16, String> {
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|_| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    // Passmower runs behind a TLS-terminating proxy: tell it the original scheme and host.
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: passmower.example.com\r\nX-Forwarded-Proto: https\r\n\
         Connection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut head = [0u8; 64];
    let mut got = 0;
    while got < 12 {
        let n = stream
            .read(&mut head[got..])
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("closed before a status line".into());
        }
        got += n;
    }
    let line = String::from_utf8_lossy(&head[..got]);
    line.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP status line: {line:?}"))
}
