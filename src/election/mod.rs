//! The election, the pure core of `elect`: a state machine over Lease observations
//! (`candidate`), the Lease records it reads and writes (`record`), the timing rules (`timing`),
//! holder identities (`identity`), and adoption by a restarted elector of its own pod
//! (`adoption`). Time and API results come in, decisions go out; the API calls themselves are
//! `elect::lease_api`'s.

pub mod adoption;
pub mod candidate;
pub mod identity;
pub mod record;
pub mod timing;

pub use candidate::{Candidate, StopReason, Term, Transition};
pub use record::{LeaseRecord, Observed};
pub use timing::Timing;
