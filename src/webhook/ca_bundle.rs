//! The caBundle of the MutatingWebhookConfiguration in the self-signed mode: each replica adds
//! its own CA, removes the ones it replaced (and, when it starts, the ones its earlier runs
//! left), and prunes expired ones, with writes conditional on `resourceVersion` so concurrent
//! replicas never erase each other's CA.

use std::time::SystemTime;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use rustls_pki_types::CertificateDer;

use super::certs;

/// Attempts of one update before it gives up for this round (each conflict means another
/// replica wrote in between; the next round starts again from a fresh read).
const CONFLICT_RETRIES: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("MutatingWebhookConfiguration {0} does not exist (yet)")]
    Missing(String),
    #[error("MutatingWebhookConfiguration {name} has no webhooks to hold a caBundle")]
    NoWebhooks { name: String },
    #[error("MutatingWebhookConfiguration {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("MutatingWebhookConfiguration {0}: still conflicting after {CONFLICT_RETRIES} tries")]
    Conflicts(String),
}

/// Keeps this replica's CA in one MutatingWebhookConfiguration.
pub struct BundleKeeper {
    api: Api<MutatingWebhookConfiguration>,
    name: String,
}

impl BundleKeeper {
    pub fn new(client: kube::Client, name: impl Into<String>) -> Self {
        BundleKeeper {
            api: Api::all(client),
            name: name.into(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether every webhook of the configuration trusts `ca`.
    pub async fn trusts(&self, ca: &CertificateDer<'_>) -> Result<bool, BundleError> {
        let config = self.get().await?;
        let hooks = config.webhooks.unwrap_or_default();
        Ok(!hooks.is_empty()
            && hooks.iter().all(|h| {
                let bundle = h.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice());
                certs::bundle_certs(bundle.unwrap_or_default()).contains(&ca.clone().into_owned())
            }))
    }

    /// Adds `add` to and removes `remove` from every webhook's caBundle (pruning expired CAs,
    /// and the CAs of replica `retire`: see [`certs::merge_bundle`]), writing only when
    /// something changes.
    pub async fn update(
        &self,
        add: &[CertificateDer<'static>],
        remove: &[CertificateDer<'static>],
        retire: Option<&str>,
    ) -> Result<(), BundleError> {
        for _ in 0..CONFLICT_RETRIES {
            let mut config = self.get().await?;
            let now = SystemTime::now();
            let hooks = config.webhooks.get_or_insert_with(Vec::new);
            if hooks.is_empty() {
                return Err(BundleError::NoWebhooks {
                    name: self.name.clone(),
                });
            }
            // One bundle for all the webhooks of the configuration: the union of what they hold.
            let mut union = Vec::new();
            for hook in hooks.iter() {
                if let Some(bundle) = &hook.client_config.ca_bundle {
                    union.extend_from_slice(&bundle.0);
                    union.push(b'\n');
                }
            }
            let merged = certs::to_pem(&certs::merge_bundle(&union, add, remove, retire, now));
            let mut changed = false;
            for hook in hooks.iter_mut() {
                let current = hook
                    .client_config
                    .ca_bundle
                    .as_ref()
                    .map(|b| b.0.as_slice());
                if current != Some(merged.as_bytes()) {
                    hook.client_config.ca_bundle = Some(ByteString(merged.clone().into_bytes()));
                    changed = true;
                }
            }
            if !changed {
                return Ok(());
            }
            // `replace` sends the resourceVersion we read: a concurrent write makes it a 409.
            match self
                .api
                .replace(&self.name, &PostParams::default(), &config)
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    return Err(BundleError::Missing(self.name.clone()))
                }
                Err(source) => {
                    return Err(BundleError::Api {
                        name: self.name.clone(),
                        source,
                    })
                }
            }
        }
        Err(BundleError::Conflicts(self.name.clone()))
    }

    async fn get(&self) -> Result<MutatingWebhookConfiguration, BundleError> {
        match self.api.get(&self.name).await {
            Ok(config) => Ok(config),
            Err(kube::Error::Api(status)) if status.code == 404 => {
                Err(BundleError::Missing(self.name.clone()))
            }
            Err(source) => Err(BundleError::Api {
                name: self.name.clone(),
                source,
            }),
        }
    }
}
