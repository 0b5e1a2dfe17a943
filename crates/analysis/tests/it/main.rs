//! The analysis crate's one integration-test binary: the labelled investigations corpus with its
//! accuracy table, snapshots of the engine's chains, and evidence SQL under the guard.

// The figures / accuracy table printed on stdout are this target's output.
#![allow(clippy::print_stdout)]

mod corpus;
mod device;
mod diff;
mod house;
mod input;
mod invariants;
mod segments;
mod snapshots;
mod steps;
mod straggler;

/// The figures of `c`'s summary that its evidence rows do not hold (none: the evidence gives
/// them back), its evidence run through the guard as an agent runs it.
pub fn figures_missing(r: &causeway_store::Reader, c: &causeway_analysis::Chain) -> Vec<String> {
    let g = causeway_sqlguard::guard(&c.evidence_sql, r.policy(), None)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", c.id, c.evidence_sql));
    let rows = r
        .query(&g, &causeway_store::QueryLimits::default())
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", c.id, c.evidence_sql));
    causeway_analysis::detectors::figures_not_in_rows(&c.summary, &rows.rows)
}
