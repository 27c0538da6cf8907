//! One process group of the app: spawning it, signalling and reaping it, stopping it with a
//! deadline, and the Idle / Running / Stopping lifecycle that the grant-following child, the
//! serving instance and the standby share. Nothing here knows about grants.

pub mod child;
pub mod instance;
pub mod stop;
