//! One module per CLI command; each is a thin layer over the library crates.

pub mod import;
pub mod query;
pub mod stats;
