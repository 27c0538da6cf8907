//! How grants reach the supervisor and which it obeys: the flag file it follows, the loopback
//! toggle it is pushed to, the elector's token that ties an object to its elector, and the
//! obedience state (the last object obeyed, the ack, what mode is owed now).

pub mod follow;
pub mod obedience;
pub mod toggle;
pub mod trust;
