//! `--on-change=leader-instance`: the serving instance that runs whatever the grant says, the
//! leader instance beside it and what it needs — its ports moved out of the way, the pipe on
//! which it says it listens, the warm standby started ahead of a promotion, the promotion check
//! of Passmower's clients, and its own health probe; and the checks of its flags.

pub mod converge;
pub mod health;
pub mod listening;
pub mod options;
pub mod port_map;
pub mod serving;
pub mod standby;
