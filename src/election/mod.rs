//! The election: a pure state machine over Lease observations (`candidate`), the Lease records
//! it reads and writes (`record`), the timing rules (`timing`), holder identities (`identity`),
//! adoption by a restarted elector of its own pod (`adoption`), and the API adapter
//! (`lease_api`).

pub mod adoption;
pub mod candidate;
pub mod identity;
pub mod lease_api;
pub mod record;
pub mod timing;

pub use candidate::{Candidate, StopReason, Term, Transition};
pub use record::{LeaseRecord, Observed};
pub use timing::Timing;
