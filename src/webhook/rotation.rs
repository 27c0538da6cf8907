//! Where the serving certificate comes from, and its renewal: made in memory and rotated
//! before it expires (the self-signed mode), or read from files and reloaded when they change
//! (cert-manager and other bring-your-own setups).
//!
//! The self-signed rotation never drops an admission: a new CA is added to the caBundle next
//! to the old one, the API server is given the propagation delay to see it, and only then does
//! the slot hand out the new certificate; the old CA leaves the bundle after the swap.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustls_pki_types::CertificateDer;
use tokio::sync::watch;

use super::ca_bundle::BundleKeeper;
use super::certs;
use super::metrics::Metrics;
use super::tls::CertSlot;

/// Bound on each API call of the bundle keeper, so a hung API cannot stall a rotation.
const API_TIMEOUT: Duration = Duration::from_secs(10);
/// The backoff between failed caBundle updates.
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// What readiness and shutdown need to know about the certificate.
#[derive(Debug, Default)]
pub struct CertState {
    /// The served certificate is one the API server trusts (as far as we can tell).
    pub trusted: AtomicBool,
    /// Our CA now in the bundle, to be removed at shutdown.
    pub our_ca: Mutex<Option<CertificateDer<'static>>>,
}

/// The self-signed mode's settings.
pub struct SelfSigned {
    pub slot: Arc<CertSlot>,
    pub keeper: BundleKeeper,
    /// DNS names and IP addresses of the serving certificate.
    pub names: Vec<String>,
    /// This replica's name (its pod's), written into its CAs: at start it retires the CAs its
    /// earlier runs left in the bundle. `None`: it cannot recognise them; they expire.
    pub replica: Option<String>,
    pub validity: Duration,
    /// Time between a caBundle change and the API server acting on it.
    pub propagation: Duration,
    /// How often the bundle is checked for our CA between rotations.
    pub resync: Duration,
    pub state: Arc<CertState>,
    pub metrics: Metrics,
}

impl SelfSigned {
    /// Issues, publishes and rotates until `shutdown`.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut current: Option<certs::Issued> = None;
        loop {
            let issued = match certs::issue(
                &self.names,
                self.validity,
                SystemTime::now(),
                self.replica.as_deref(),
            ) {
                Ok(issued) => issued,
                Err(e) => {
                    tracing::error!(error = %e, "cannot make the serving certificate");
                    if sleep_or_stop(RETRY_MAX, &mut shutdown).await {
                        return;
                    }
                    continue;
                }
            };
            // Add the new CA, keeping the old one: handshakes still get the old certificate. At
            // start, the CAs of this replica's earlier runs go: their keys died with them.
            let new_ca = [issued.ca_der.clone()];
            let retire = if current.is_none() {
                self.replica.as_deref()
            } else {
                None
            };
            if !self.publish(&new_ca, &[], retire, &mut shutdown).await {
                return;
            }
            if current.is_none() {
                // Nothing served yet: serving at once costs nothing, readiness waits anyway.
                self.serve(&issued);
            }
            if sleep_or_stop(self.propagation, &mut shutdown).await {
                return;
            }
            self.serve(&issued);
            if let Some(old) = current.take() {
                // Best effort: an old CA left behind expires and is pruned by the next write.
                let _ = self
                    .publish_once(&new_ca, std::slice::from_ref(&old.ca_der), None)
                    .await;
                tracing::info!(
                    expires = %humantime::format_rfc3339_seconds(issued.not_after),
                    "serving certificate rotated"
                );
            } else {
                tracing::info!(
                    configuration = self.keeper.name(),
                    expires = %humantime::format_rfc3339_seconds(issued.not_after),
                    "serving certificate published"
                );
            }
            self.state.trusted.store(true, Ordering::SeqCst);

            // Renew once two thirds of the validity have passed (the rest covers retries).
            let renew_at = issued.not_after - self.validity / 3;
            current = Some(issued);
            loop {
                let left = renew_at
                    .duration_since(SystemTime::now())
                    .unwrap_or_default();
                if left.is_zero() {
                    break;
                }
                if sleep_or_stop(left.min(self.resync), &mut shutdown).await {
                    return;
                }
                let Some(ours) = current.as_ref().map(|c| c.ca_der.clone()) else {
                    break;
                };
                match tokio::time::timeout(API_TIMEOUT, self.keeper.trusts(&ours)).await {
                    Ok(Ok(true)) => {}
                    Ok(Ok(false)) | Ok(Err(super::ca_bundle::BundleError::Missing(_))) => {
                        // The configuration was replaced (a reinstall): put our CA back, and
                        // take no admissions until the API server can have seen it.
                        tracing::warn!("our CA is missing from the caBundle; adding it again");
                        self.state.trusted.store(false, Ordering::SeqCst);
                        if !self.publish(&[ours], &[], None, &mut shutdown).await {
                            return;
                        }
                        if sleep_or_stop(self.propagation, &mut shutdown).await {
                            return;
                        }
                        self.state.trusted.store(true, Ordering::SeqCst);
                    }
                    Ok(Err(e)) => tracing::warn!(error = %e, "cannot check the caBundle"),
                    Err(_) => tracing::warn!("checking the caBundle timed out"),
                }
            }
        }
    }

    fn serve(&self, issued: &certs::Issued) {
        match self.slot.set(issued.chain.clone(), &issued.key) {
            Ok(()) => self.metrics.served(Some(issued.not_after)),
            Err(e) => tracing::error!(error = %e, "cannot serve the new certificate"),
        }
    }

    /// Retries until the bundle holds `add` and lacks `remove`; false when stopped first.
    async fn publish(
        &self,
        add: &[CertificateDer<'static>],
        remove: &[CertificateDer<'static>],
        retire: Option<&str>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        let mut backoff = RETRY_MIN;
        loop {
            if self.publish_once(add, remove, retire).await {
                if let Some(ca) = add.first() {
                    *self.state.our_ca.lock().unwrap_or_else(|e| e.into_inner()) = Some(ca.clone());
                }
                return true;
            }
            if sleep_or_stop(backoff, shutdown).await {
                return false;
            }
            backoff = (backoff * 2).min(RETRY_MAX);
        }
    }

    async fn publish_once(
        &self,
        add: &[CertificateDer<'static>],
        remove: &[CertificateDer<'static>],
        retire: Option<&str>,
    ) -> bool {
        let error = match tokio::time::timeout(API_TIMEOUT, self.keeper.update(add, remove, retire))
            .await
        {
            Ok(Ok(())) => return true,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out".to_owned(),
        };
        self.metrics.ca_bundle_errors.inc();
        tracing::warn!(error = %error, "cannot update the caBundle");
        false
    }
}

/// Removes our CA from the bundle at shutdown (best effort, bounded).
pub async fn withdraw(keeper: &BundleKeeper, state: &CertState) {
    let ours = state
        .our_ca
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(ca) = ours {
        match tokio::time::timeout(API_TIMEOUT, keeper.update(&[], &[ca], None)).await {
            Ok(Ok(())) => tracing::info!("our CA left the caBundle"),
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot remove our CA from the caBundle"),
            Err(_) => tracing::warn!("removing our CA from the caBundle timed out"),
        }
    }
}

/// The bring-your-own mode: certificate and key files, re-read every `interval`.
pub struct FromFiles {
    pub slot: Arc<CertSlot>,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub interval: Duration,
    pub state: Arc<CertState>,
    pub metrics: Metrics,
}

impl FromFiles {
    /// Loads the files once; the error names the flag.
    pub fn load(&self) -> Result<Vec<u8>, crate::config::ConfigError> {
        let read = |path: &PathBuf, flag: &str| {
            std::fs::read(path).map_err(|e| {
                crate::config::ConfigError::new(
                    flag,
                    path.display().to_string(),
                    format!("cannot read: {e}"),
                )
            })
        };
        let cert = read(&self.cert, "--tls-cert-file")?;
        let key = read(&self.key, "--tls-key-file")?;
        let (chain, private) = certs::parse_pem_pair(&cert, &key, "the certificate files")
            .map_err(|e| {
                crate::config::ConfigError::new(
                    "--tls-cert-file",
                    self.cert.display().to_string(),
                    e.to_string(),
                )
            })?;
        self.slot.set(chain, &private).map_err(|e| {
            crate::config::ConfigError::new(
                "--tls-key-file",
                self.key.display().to_string(),
                e.to_string(),
            )
        })?;
        self.metrics.served(self.slot.not_after());
        self.state.trusted.store(true, Ordering::SeqCst);
        let mut seen = cert;
        seen.extend_from_slice(&key);
        Ok(seen)
    }

    /// Re-reads the files until `shutdown`; a change that parses is served from the next
    /// handshake, one that does not is logged and the previous certificate kept.
    pub async fn run(self, mut seen: Vec<u8>, mut shutdown: watch::Receiver<bool>) {
        loop {
            if sleep_or_stop(self.interval, &mut shutdown).await {
                return;
            }
            let (Ok(cert), Ok(key)) = (std::fs::read(&self.cert), std::fs::read(&self.key)) else {
                tracing::warn!("cannot read the certificate files; keeping the served certificate");
                continue;
            };
            let mut now = cert.clone();
            now.extend_from_slice(&key);
            if now == seen {
                continue;
            }
            // cert-manager writes both files in one atomic step; a half-written pair fails to
            // parse (or the key does not match) and is retried at the next interval.
            match certs::parse_pem_pair(&cert, &key, "the certificate files") {
                Ok((chain, private)) => match self.slot.set(chain, &private) {
                    Ok(()) => {
                        self.metrics.served(self.slot.not_after());
                        tracing::info!("certificate files changed; serving the new certificate");
                        seen = now;
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot serve the new certificate"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "the changed certificate files are not usable yet")
                }
            }
        }
    }
}

/// Sleeps for `d`; true when `shutdown` turned true first.
async fn sleep_or_stop(d: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    if *shutdown.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => *shutdown.borrow(),
        _ = shutdown.changed() => true,
    }
}
