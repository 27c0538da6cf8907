//! The serving certificate as a slot that is swapped atomically: a handshake gets either the
//! old or the new certificate, whole, so a rotation never fails a connection.

use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::certs::{self, CertError};

/// The certificate every new handshake gets.
#[derive(Debug, Default)]
pub struct CertSlot {
    current: RwLock<Option<Served>>,
}

#[derive(Debug, Clone)]
struct Served {
    key: Arc<CertifiedKey>,
    not_after: Option<SystemTime>,
}

impl CertSlot {
    /// Serves `chain` with `key` from the next handshake on.
    pub fn set(
        &self,
        chain: Vec<CertificateDer<'static>>,
        key: &PrivateKeyDer<'static>,
    ) -> Result<(), CertError> {
        let signing = rustls::crypto::ring::sign::any_supported_type(key).map_err(|source| {
            CertError::Key {
                what: "serving key".into(),
                problem: "the private key is not usable",
                source,
            }
        })?;
        let not_after = chain
            .first()
            .and_then(|c| certs::validity(c))
            .map(|(_, after)| after);
        let served = Served {
            key: Arc::new(CertifiedKey::new(chain, signing)),
            not_after,
        };
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(served);
        Ok(())
    }

    /// Whether a certificate is being served.
    pub fn is_set(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// When the served certificate expires.
    pub fn not_after(&self) -> Option<SystemTime> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|s| s.not_after)
    }
}

impl ResolvesServerCert for CertSlot {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|s| s.key.clone())
    }
}

/// The server's TLS configuration: TLS 1.2 and 1.3 with ring, HTTP/1.1 only, certificates
/// from `slot`.
pub fn server_config(slot: Arc<CertSlot>) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(slot);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
