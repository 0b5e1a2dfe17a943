//! Test fixtures: the vLLM reference trace imported once per test process, and contexts.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use causeway_tools::Context;

/// The reference trace, from `../shared/investigations` next to the repository.
pub fn shared(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/investigations")
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: these tests read the reference traces from ../shared/investigations",
        p.display()
    );
    p
}

/// The vLLM trace imported into a causeway store (once).
pub fn vllm() -> &'static Path {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("vllm.duckdb");
        causeway_import::import(
            &[shared("vllm-37343-logprobs-amplification.db")],
            &out,
            false,
            &causeway_import::ImportOptions::default(),
            &mut |_| {},
        )
        .unwrap();
        (dir, out)
    })
    .1
}

/// A context serving the vLLM trace, with a test report path inside `report_dir`.
pub fn ctx(report_dir: &Path) -> Context {
    Context::new(vllm().to_path_buf(), vec![]).with_test_report(report_dir.join("report.json"))
}
