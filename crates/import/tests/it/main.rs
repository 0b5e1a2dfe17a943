//! Integration tests of the importer: every reference-trace vintage in ../shared, checked
//! against the published figures, the Kineto traces and Nsight Systems exports against their
//! sources, the reference node traces merged against their cluster file, and its handling of
//! bad input.

mod import;
mod kineto;
mod merge;
mod nsys;

use std::path::{Path, PathBuf};

/// `../shared/investigations` next to the repository, where the reference traces are.
pub fn shared(name: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/investigations");
    let p = root.join(name);
    assert!(
        p.exists(),
        "{} is missing: these tests read the reference traces from ../shared/investigations",
        p.display()
    );
    p
}

/// Imports `src` alone into a new store at `out` with the default options: its report.
pub fn import_one(src: &Path, out: &Path) -> causeway_import::SourceReport {
    let mut reports = causeway_import::import(
        &[src.to_path_buf()],
        out,
        false,
        &causeway_import::ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    reports.remove(0)
}
