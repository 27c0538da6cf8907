//! The election: a pure state machine over Lease observations (`candidate`), the Lease records
//! it reads and writes (`record`), the timing rules (`timing`), and the API adapter (`lease_api`).

pub mod candidate;
pub mod lease_api;
pub mod record;
pub mod timing;

pub use candidate::{Candidate, StopReason, Term, Transition};
pub use record::{LeaseRecord, Observed};
pub use timing::Timing;
