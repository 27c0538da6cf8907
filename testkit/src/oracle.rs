//! The single-writer oracles: what the tests judge "never two leaders" by. Each reads who held
//! what when from its own source — the grants in the pods' flag files ([`grants`]), the
//! leader-mode runs of the recording app ([`runs`]), the Lease tenures in the node's audit log
//! (`node::audit`) — into stretches with an owner, and one rule judges them all:
//! [`overlaps`], two stretches of different owners at once.

pub mod grants;
pub mod runs;

/// One stretch of single-writer work: who, from when, until when (`None`: still going, for
/// ever as far as the oracle knows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stretch<K, T> {
    pub owner: K,
    pub start: T,
    pub end: Option<T>,
}

/// Every pair `(i, j)`, `i < j`, of stretches of different owners that overlap: each starts
/// before the other ends. Touching (one ends when the other starts) is no overlap.
pub fn overlaps<K: PartialEq, T: Ord + Copy>(stretches: &[Stretch<K, T>]) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    for (i, a) in stretches.iter().enumerate() {
        for (j, b) in stretches.iter().enumerate().skip(i + 1) {
            let a_before_b_ends = b.end.is_none_or(|end| a.start < end);
            let b_before_a_ends = a.end.is_none_or(|end| b.start < end);
            if a.owner != b.owner && a_before_b_ends && b_before_a_ends {
                found.push((i, j));
            }
        }
    }
    found
}
