//! One module per CLI command; each is a thin layer over the library crates.

pub mod agent;
pub mod check;
pub mod collect;
pub mod demo;
pub mod diff;
pub mod explain;
pub mod export;
pub mod fleet;
pub mod import;
pub mod mcp;
pub mod merge;
pub mod query;
pub mod report;
pub mod stacks;
pub mod stats;
pub mod steps;
pub mod trace;
pub mod traces;
