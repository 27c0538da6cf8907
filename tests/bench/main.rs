//! The bench tier: figures, printed and written to docs/results/, never timed asserts. The
//! side-by-side election benchmark, `supervise`'s own figures and beside k8s-await-election, the
//! warm standby's on the real Passmower, and the fault campaign (whose safety and liveness are
//! asserted).

// Each tier uses its part of the product's side of the kit.
#[allow(dead_code, unused_imports)]
#[path = "../product/mod.rs"]
mod product;

mod bench_election;
mod fault_campaign;
mod standby_bench;
mod supervise_bench;
mod supervisor_peers;
