//! The pod-spec rewrite: what `inject` does to a workload's pod template and the webhook to a
//! Pod — the sidecar and its install container, the app wrapped in `supervise` with the app's
//! own identity, the rollout strategy, the sidecar image's pull secrets, and the memory warning.

pub mod identity;
pub mod pod;
pub mod pull_secrets;
pub mod sidecar;
pub mod sizing;
pub mod strategy;
pub mod workload;
