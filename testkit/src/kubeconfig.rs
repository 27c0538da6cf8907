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

/// Standard base64 for `certificate-authority-data`; a dozen lines instead of a dependency.
fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
