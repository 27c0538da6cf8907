//! The election, the pure core of `elect`: a state machine over Lease observations
//! (`candidate`), the Lease records it reads and writes (`record`), the timing rules (`timing`),
//! holder identities (`identity`), adoption by a restarted elector of its own pod
//! (`adoption`), and what a holder says about its term on the Lease (`report`). Time and API results come in, decisions go out; the API calls themselves are
//! `elect::lease_api`'s.

pub mod adoption;
pub mod candidate;
pub mod identity;
pub mod record;
pub mod report;
pub mod timing;

pub use candidate::{Candidate, HandoverCause, StopReason, Term, Transition, Vacancy};
pub use record::{LeaseRecord, Observed};
pub use timing::Timing;
