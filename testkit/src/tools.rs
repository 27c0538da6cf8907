//! The tools a new user runs (helm 3 and 4, kustomize, kubectl, the `passmower-elector`
//! binary) and a sandbox to run their commands as written: a scratch directory laid out like
//! this repository, on a `PATH` where `helm` is the real helm behind a thin stand-in for what
//! this machine lacks (a registry: the OCI reference names the upstream chart directory; a
//! kubelet: installs skip the chart's pre-install hook Job, which nothing would run).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::repo;

/// The upstream chart as the documentation names it.
pub const UPSTREAM_OCI: &str = "oci://ghcr.io/passmower/charts/passmower";
/// The upstream chart version the documentation installs; its image tag is the same.
pub const UPSTREAM_VERSION: &str = "1.3.0";

/// Held by the tests that run helm against a private control plane of their own: those are the
/// slow ones, and one at a time is what the machine takes (a lock of the whole test binary,
/// whichever scenario file the test is in). A failed holder does not poison it.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn cache() -> PathBuf {
    std::env::var_os("PME_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/passmower-elector"))
        })
        .unwrap_or_else(|| PathBuf::from("/nonexistent"))
}

/// A tool built by a script of this repository: `$VAR`, else its cached path. Panics with the
/// command that builds it.
fn tool(var: &str, cached: &str, build: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| cache().join(cached));
    assert!(
        path.is_file(),
        "{} is missing: build it with `{build}` (or set {var})",
        path.display()
    );
    path
}

pub fn helm3() -> PathBuf {
    tool(
        "PME_HELM3",
        "helm/helm-v3.22.0/helm",
        "scripts/build-helm.sh",
    )
}

pub fn helm4() -> PathBuf {
    tool(
        "PME_HELM4",
        "helm/helm-v4.3.2/helm",
        "HELM_VERSION=v4.3.2 scripts/build-helm.sh",
    )
}

pub fn kustomize() -> PathBuf {
    tool(
        "PME_KUSTOMIZE",
        "kustomize/kustomize-v5.8.2/kustomize",
        "scripts/build-kustomize.sh",
    )
}

/// kubectl: `$PME_KUBECTL`, else the one `scripts/build-test-cluster.sh` builds beside the test
/// apiserver (`$PME_CONTROL_PLANE/kubectl`, same version), else none (the sandbox's `PATH` then
/// decides). Debian packages no kubectl, so CI relies on the build.
pub fn kubectl() -> Option<PathBuf> {
    std::env::var_os("PME_KUBECTL")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("PME_CONTROL_PLANE").map(|d| PathBuf::from(d).join("kubectl")))
        .filter(|p| p.is_file())
}

/// The upstream Passmower chart directory (read at test time, never copied into the repo).
pub fn upstream_chart() -> PathBuf {
    let candidates = [
        std::env::var_os("PME_UPSTREAM_PASSMOWER").map(PathBuf::from),
        Some(repo().join("../shared/upstream/passmower")),
        Some(repo().join("../../shared/upstream/passmower")),
    ];
    candidates
        .into_iter()
        .flatten()
        .map(|p| p.join("charts/passmower"))
        .find(|p| p.join("Chart.yaml").is_file())
        .expect("the upstream Passmower chart (shared/upstream/passmower/charts/passmower, or PME_UPSTREAM_PASSMOWER)")
}

/// Which helm a sandbox puts on `PATH`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Helm {
    V3,
    V4,
}

/// What a command printed.
pub struct Ran {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// A scratch directory laid out like the repository, with the tools on `PATH`.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    path: String,
    kubeconfig: PathBuf,
}

impl Sandbox {
    pub fn new(helm: Helm, kubeconfig: &Path) -> Sandbox {
        let dir = tempfile::tempdir().expect("sandbox dir");
        let root = dir.path();
        for entry in ["examples", "charts", "scripts", "Dockerfile.sidecar"] {
            std::os::unix::fs::symlink(repo().join(entry), root.join(entry)).expect("symlink");
        }
        let bin = root.join(".bin");
        std::fs::create_dir_all(&bin).expect("bin dir");
        let real = match helm {
            Helm::V3 => helm3(),
            Helm::V4 => helm4(),
        };
        let shim = format!(
            "#!/bin/bash\n\
             # Stand-in for a registry and a kubelet (see testkit/src/tools.rs).\n\
             args=()\n\
             for a in \"$@\"; do\n\
             \x20 [[ \"$a\" == {UPSTREAM_OCI} ]] && a={chart}\n\
             \x20 args+=(\"$a\")\n\
             done\n\
             case \"${{1:-}}\" in install|upgrade) args+=(--no-hooks) ;; esac\n\
             exec {real} \"${{args[@]}}\"\n",
            chart = upstream_chart().display(),
            real = real.display(),
        );
        std::fs::write(bin.join("helm"), shim).expect("helm shim");
        std::fs::set_permissions(
            bin.join("helm"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        std::os::unix::fs::symlink(kustomize(), bin.join("kustomize")).expect("kustomize");
        if let Some(kubectl) = kubectl() {
            std::os::unix::fs::symlink(kubectl, bin.join("kubectl")).expect("kubectl");
        }
        std::os::unix::fs::symlink(crate::elector::binary(), bin.join("passmower-elector"))
            .expect("passmower-elector");
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Sandbox {
            dir,
            path,
            kubeconfig: kubeconfig.to_owned(),
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `script` with `bash -euo pipefail` in the sandbox, at most `limit`.
    pub fn bash(&self, script: &str, limit: Duration) -> Ran {
        let root = self.root();
        let mut cmd = Command::new("bash");
        cmd.args(["-euo", "pipefail", "-c", script])
            .current_dir(root)
            .env("PATH", &self.path)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_DATA_HOME", root.join(".helm/data"))
            .env("HELM_CONFIG_HOME", root.join(".helm/config"))
            .env("HELM_CACHE_HOME", root.join(".helm/cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ELECTOR_") {
                cmd.env_remove(key);
            }
        }
        let mut child = cmd.spawn().expect("spawn bash");
        let deadline = Instant::now() + limit;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    // Our own child, by PID.
                    let _ = child.kill();
                    break;
                }
            }
        }
        let out = child.wait_with_output().expect("bash output");
        Ran {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Like [`Sandbox::bash`], panicking with the script and its output unless it succeeds.
    pub fn ok(&self, script: &str) -> Ran {
        let ran = self.bash(script, Duration::from_secs(300));
        assert!(
            ran.success,
            "failed:\n{script}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            ran.stdout, ran.stderr
        );
        ran
    }
}

/// The blocks of a markdown file marked `<!-- tested: NAME -->` (the fenced block right after
/// the marker), as (NAME, script).
pub fn tested_blocks(markdown: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .trim()
            .strip_prefix("<!-- tested: ")
            .and_then(|r| r.strip_suffix(" -->"))
        else {
            continue;
        };
        let fence = lines.next().unwrap_or_default();
        assert!(
            fence.starts_with("```"),
            "<!-- tested: {name} --> is not followed by a fenced block"
        );
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        out.push((name.to_owned(), body.join("\n") + "\n"));
    }
    out
}
