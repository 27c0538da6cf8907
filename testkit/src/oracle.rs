//! The single-writer oracles: what the tests judge "never two leaders" by. Each reads who held
//! what when from its own source — the grants in the pods' flag files, the leader-mode runs of
//! the recording app — into stretches with an owner, and fails on any two owners at once.

pub mod grants;
pub mod runs;
