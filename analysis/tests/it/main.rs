//! The analysis crate's one integration-test binary: the labelled investigations corpus with its
//! accuracy table, snapshots of the explain report, and evidence SQL under the guard.

// The figures / accuracy table printed on stdout are this target's output.
#![allow(clippy::print_stdout)]

mod corpus;
mod device;
mod diff;
mod input;
mod invariants;
mod placement;
mod segments;
mod snapshots;
mod steps;
mod straggler;
