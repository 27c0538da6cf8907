//! Pods as the kubelet runs them: their containers' processes (found through the node's
//! cgroup subtree by container ID), signals to them, a pod cut off from the apiserver (iptables
//! in its network namespace), and the kubelet's own view of pod status (its `/pods` endpoint),
//! which stays readable while the apiserver is down.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::config::{API_PORT, KUBELET_PORT, KUBERNETES_SERVICE_IP, NODE_IP};
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

/// Resident memory (KiB) of process `pid` (`VmRSS` in /proc/PID/status); 0 once it is gone.
fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
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

    /// Resident memory of a pod (KiB): `VmRSS` summed over every process of it (app, elector,
    /// supervisor, sandbox); 0 when none is found.
    pub fn pod_rss_kib(&self, pod: &Pod) -> u64 {
        self.pod_pids(pod).into_iter().map(rss_kib).sum()
    }

    /// Sends `signal` to every process of `container` in `pod`; returns how many.
    pub fn signal_container(&self, pod: &Pod, container: &str, signal: Signal) -> usize {
        let Some(id) = container_id(pod, container) else {
            return 0;
        };
        signal_all(&self.container_pids(&id), signal)
    }

    /// Cuts `pod` off from the apiserver until the returned cut is healed (or dropped): rules at
    /// the top of OUTPUT in the pod's network namespace, entered through one of its processes,
    /// for every address a pod reaches the apiserver at — the `kubernetes` Service
    /// (`KUBERNETES_SERVICE_HOST:PORT`, what in-cluster clients use; kube-proxy translates it
    /// outside the pod, so the pod's OUTPUT still sees the ClusterIP) and the endpoint behind it,
    /// for a client that goes around the Service. Only what the pod sends is matched: a packet
    /// the apiserver sends on an open connection still arrives.
    pub fn cut_off_from_apiserver(&self, pod: &Pod, how: Cut) -> Result<ApiserverCut, String> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        // Any process of the pod: they all share the sandbox's network namespace.
        let pid = *self
            .pod_pids(pod)
            .first()
            .ok_or_else(|| format!("no processes in pod {name}"))?;
        let netns = File::open(format!("/proc/{pid}/ns/net"))
            .map_err(|e| format!("open the network namespace of {name} (PID {pid}): {e}"))?;
        let mut cut = ApiserverCut {
            netns,
            how,
            rules: Vec::new(),
            healed: false,
        };
        for (ip, port) in [(KUBERNETES_SERVICE_IP, 443), (NODE_IP, API_PORT)] {
            let rule = ApiserverCut::rule(ip, port, how);
            // On an error the rules added so far are removed when `cut` drops.
            cut.iptables("-I", &rule)?;
            cut.rules.push((format!("{ip}:{port}"), rule));
        }
        Ok(cut)
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

/// How a pod cut off from the apiserver loses what it sends there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Refused: each packet answered with a TCP reset (`REJECT --reject-with tcp-reset`), so a
    /// connection attempt is refused and an open connection is reset: requests fail at once.
    Reset,
    /// Dropped (`DROP`): nothing arrives and nothing answers, so every request hangs until its
    /// client gives up; what was sent is retransmitted once the cut heals.
    Drop,
}

impl Cut {
    pub fn name(self) -> &'static str {
        match self {
            Cut::Reset => "reset",
            Cut::Drop => "dropped",
        }
    }
}

/// The iptables rules that keep one pod from the apiserver (see
/// [`Node::cut_off_from_apiserver`]). [`ApiserverCut::heal`] removes them by their exact
/// inverse (`-D` with the same rule); a cut dropped unhealed (a test that panicked) removes
/// them too, so no rule outlives the test.
#[must_use = "dropping the cut heals it at once"]
pub struct ApiserverCut {
    /// The pod's network namespace, held open and entered through this process's descriptor:
    /// the process it was found through may be gone by the heal (an app restarted to demote).
    netns: File,
    pub how: Cut,
    /// (address, rule after the chain name), in the order added.
    rules: Vec<(String, Vec<String>)>,
    healed: bool,
}

impl ApiserverCut {
    fn rule(ip: &str, port: u16, how: Cut) -> Vec<String> {
        let mut rule: Vec<String> = ["-d", &format!("{ip}/32"), "-p", "tcp"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        rule.extend(["--dport".into(), port.to_string(), "-j".into()]);
        match how {
            Cut::Reset => rule.extend(["REJECT", "--reject-with", "tcp-reset"].map(String::from)),
            Cut::Drop => rule.push("DROP".into()),
        }
        rule
    }

    /// The addresses cut off, for reports: `10.96.0.1:443, 10.88.0.1:6443`.
    pub fn addresses(&self) -> String {
        self.rules
            .iter()
            .map(|(addr, _)| addr.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `iptables -w <op> OUTPUT <rule>` inside the pod's network namespace.
    fn iptables(&self, op: &str, rule: &[String]) -> Result<String, String> {
        let ns = format!("/proc/{}/fd/{}", std::process::id(), self.netns.as_raw_fd());
        let out = std::process::Command::new("nsenter")
            .arg(format!("--net={ns}"))
            .args(["iptables", "-w", op, "OUTPUT"])
            .args(rule)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("run nsenter iptables: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "iptables {op} OUTPUT {} in the pod's network namespace: {}: {}",
                rule.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Packets each rule matched so far, by address (`iptables -L OUTPUT -n -v -x`: the rows
    /// whose target and destination are a rule's).
    pub fn matched(&self) -> Result<Vec<(String, u64)>, String> {
        let listing = self.iptables("-L", &["-n".into(), "-v".into(), "-x".into()])?;
        let target = match self.how {
            Cut::Reset => "REJECT",
            Cut::Drop => "DROP",
        };
        Ok(self
            .rules
            .iter()
            .map(|(addr, _)| {
                let (ip, port) = addr.rsplit_once(':').unwrap_or((addr, ""));
                let dpt = format!("dpt:{port}");
                let packets = listing
                    .lines()
                    .map(|l| l.split_whitespace().collect::<Vec<_>>())
                    .filter(|cols| cols.len() > 9 && cols[2] == target && cols[8] == ip)
                    .filter(|cols| cols[9..].contains(&dpt.as_str()))
                    .filter_map(|cols| cols[0].parse::<u64>().ok())
                    .sum();
                (addr.clone(), packets)
            })
            .collect())
    }

    /// Removes the rules (newest first); returns the packets each had matched.
    pub fn heal(mut self) -> Result<Vec<(String, u64)>, String> {
        let matched = self.matched();
        self.healed = true;
        self.remove()?;
        matched
    }

    fn remove(&mut self) -> Result<(), String> {
        let mut problems = Vec::new();
        while let Some((_, rule)) = self.rules.pop() {
            if let Err(e) = self.iptables("-D", &rule) {
                problems.push(e);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

impl Drop for ApiserverCut {
    fn drop(&mut self) {
        if !self.healed {
            if let Err(e) = self.remove() {
                eprintln!("could not heal the cut from the apiserver: {e}");
            }
        }
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
