//! `webhook`: a mutating admission webhook that injects the elector into the pods that opt in,
//! with the same pod rewrite as `inject` (one implementation, two front doors).
//!
//! Data flows: AdmissionReview (review.rs) → decision (admit.rs, using inject's pod rewrite
//! and the Lease permission check in access.rs) → JSON Patch (patch.rs) → response, served
//! over TLS (server.rs) with a certificate that is made and rotated in memory (certs.rs,
//! rotation.rs, ca_bundle.rs) or read from files, from a slot swapped atomically (tls.rs).

mod access;
mod admit;
mod ca_bundle;
mod certs;
mod metrics;
mod options;
mod patch;
mod probes;
mod review;
mod rotation;
mod server;
mod tls;

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub use admit::{
    acts_on, APP_COMMAND_ANNOTATION, CONTAINER_ANNOTATION, INJECT_LABEL,
    NAMESPACE_SELECTOR_ANNOTATION, NEVER_NAMESPACES,
};
pub use certs::{issue, Issued};
pub use options::{CertSource, WebhookArgs, WebhookConfig, DEFAULT_SERVICE};
pub use server::MUTATE_PATH;

use crate::runtime::RoleError;

/// The `webhook` role.
pub fn main(args: WebhookArgs) -> ExitCode {
    crate::runtime::run("webhook", args.into_config(), run)
}

/// Runs the webhook until SIGTERM or SIGINT. What cannot be set up ends the role before it
/// serves (see [`crate::runtime`]).
pub async fn run(config: WebhookConfig) -> Result<ExitCode, RoleError> {
    let needs_client =
        config.rbac_check.is_some() || matches!(config.certs, CertSource::SelfSigned { .. });
    let client = if needs_client {
        Some(crate::runtime::kube_client(None).await?)
    } else {
        None
    };

    let (metrics, registry) = metrics::Metrics::new();
    let slot = Arc::new(tls::CertSlot::default());
    let cert_state = Arc::new(rotation::CertState::default());
    let (stop_tx, stop_rx) = watch::channel(false);

    let mut keeper = None;
    let cert_task = match &config.certs {
        CertSource::Files {
            cert,
            key,
            interval,
        } => {
            let files = rotation::FromFiles {
                slot: slot.clone(),
                cert: cert.clone(),
                key: key.clone(),
                interval: *interval,
                state: cert_state.clone(),
                metrics: metrics.clone(),
            };
            let seen = files.load()?;
            tokio::spawn(files.run(seen, stop_rx.clone()))
        }
        CertSource::SelfSigned {
            configuration,
            names,
            replica,
            validity,
            propagation,
            resync,
        } => {
            let Some(client) = client.clone() else {
                return Err(RoleError::start(
                    "internal",
                    "no Kubernetes client for the caBundle",
                ));
            };
            keeper = Some(ca_bundle::BundleKeeper::new(client.clone(), configuration));
            let rotation = rotation::SelfSigned {
                slot: slot.clone(),
                keeper: ca_bundle::BundleKeeper::new(client, configuration),
                names: names.clone(),
                replica: replica.clone(),
                validity: *validity,
                propagation: *propagation,
                resync: *resync,
                state: cert_state.clone(),
                metrics: metrics.clone(),
            };
            tokio::spawn(rotation.run(stop_rx.clone()))
        }
    };

    let tls =
        tls::server_config(slot.clone()).map_err(|e| RoleError::start("cannot set up TLS", e))?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| RoleError::Listen {
            flag: "--listen",
            addr: config.listen,
            source,
        })?;
    let health =
        crate::probe_server::bind(config.health_addr).map_err(|source| RoleError::Listen {
            flag: "--health-addr",
            addr: config.health_addr,
            source,
        })?;
    let probe_state = Arc::new(probes::ProbeState {
        slot: slot.clone(),
        cert: cert_state.clone(),
        stopping: Default::default(),
        registry,
    });
    probes::spawn(health, probe_state.clone())
        .map_err(|e| RoleError::start("cannot start the probe server", e))?;
    let app = Arc::new(server::App {
        injector: admit::Injector {
            base: config.inject.clone(),
            access: match (config.rbac_check, client) {
                (Some(timeout), Some(client)) => Some(access::LeaseAccess::new(client, timeout)),
                _ => None,
            },
        },
        metrics,
        limits: config.limits.clone(),
    });
    tracing::info!(
        listen = %config.listen,
        health = %config.health_addr,
        image = %config.inject.image,
        container = %config.inject.container,
        "webhook serving POST {MUTATE_PATH}"
    );
    let server = tokio::spawn(server::serve(listener, tls, app, stop_rx.clone()));

    wait_for_signal().await;
    tracing::info!("stopping: /readyz fails now, admissions are served for the shutdown delay");
    probe_state.stopping.store(true, Ordering::SeqCst);
    tokio::time::sleep(config.shutdown_delay).await;
    let _ = stop_tx.send(true);
    let _ = cert_task.await;
    if let Some(keeper) = &keeper {
        rotation::withdraw(keeper, &cert_state).await;
    }
    let _ = server.await;
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            // Without signal handlers there is no graceful stop to wait for.
            std::future::pending::<()>().await;
        }
    }
}
