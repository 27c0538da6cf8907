//! Kubeconfigs for the test control planes (a bearer token, the test CA, one context) and
//! clients read from them, which never go through a proxy of the environment.

use std::fs;
use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Writes a kubeconfig (as JSON, which every kubeconfig reader accepts) for a bearer-token user
/// of the apiserver at `server`.
pub fn write_kubeconfig(path: &Path, server: &str, ca_pem: &[u8], token: &str) {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "pme", "cluster": {
            "server": server,
            "certificate-authority-data": base64(ca_pem),
        }}],
        "users": [{"name": "pme", "user": {"token": token}}],
        "contexts": [{"name": "pme", "context": {"cluster": "pme", "user": "pme"}}],
        "current-context": "pme",
    });
    let bytes = serde_json::to_vec_pretty(&config).expect("serialize kubeconfig");
    fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Reads a kubeconfig into a client. Ignores `HTTPS_PROXY` from the environment: every test
/// address is loopback (or in a namespace of the kit's) and must not leave the machine.
pub async fn client_from_kubeconfig(path: &Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("read kubeconfig {}: {e}", path.display()));
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap_or_else(|e| panic!("load kubeconfig {}: {e}", path.display()));
    config.proxy_url = None;
    kube::Client::try_from(config).expect("build kube client")
}

/// Standard base64 for `certificate-authority-data`.
fn base64(input: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(input)
}
