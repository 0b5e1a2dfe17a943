//! Import benchmark (`cargo bench -p causeway-import --bench import`): import time of the vLLM
//! reference trace, best of 3, when ../shared/investigations is beside the repository.

// A benchmark's figures are its output: printing them to stdout is the point.
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::time::Instant;

use causeway_import::{ImportOptions, import};

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let vllm = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/investigations/vllm-37343-logprobs-amplification.db");
    if vllm.exists() {
        let mut best = f64::MAX;
        for i in 0..3 {
            let out = dir.path().join(format!("vllm{i}.duckdb"));
            let started = Instant::now();
            import(
                std::slice::from_ref(&vllm),
                &out,
                false,
                &ImportOptions::default(),
                &mut |_| {},
            )
            .unwrap();
            best = best.min(started.elapsed().as_secs_f64());
        }
        println!(
            "import of the vLLM trace (10,869 events, 1.3 MB): {:.3} s (best of 3)",
            best
        );
    } else {
        println!("import: skipped, {} not found", vllm.display());
    }
}
