//! The objects `inject` writes beside a workload: the Role, RoleBinding and
//! PodDisruptionBudget, the write fence, the replica and pod guards, the PodMonitor, and which of
//! them a target gets (`decide.rs`), given what the stream already holds.

pub mod decide;
pub mod fence;
pub mod guard;
pub mod monitor;
pub mod rbac;
pub mod release_namespace;
