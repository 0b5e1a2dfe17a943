//! How long a report takes to build and how big it is, on the vLLM reference trace imported
//! from ../shared/investigations (or $CAUSEWAY_SHARED_DIR): gathering the data (findings,
//! stats, timeline, histograms, stacks, facts), rendering the page, and writing the file.
//! `cargo bench -p causeway-report --bench report`; `CAUSEWAY_BENCH_RUNS` sets the runs, and
//! `CAUSEWAY_BENCH_STORE=PATH` adds a store of ours (e.g. the 10M-event store the explain bench
//! keeps with `BENCH_DB=PATH cargo bench -p causeway-analysis --bench explain`).

// A benchmark's figures are its output.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::Instant;

use causeway_report::{Mode, build, render, write_file};
use causeway_store::Reader;
use causeway_tools::params::WindowParams;

fn main() {
    let shared = std::env::var_os("CAUSEWAY_SHARED_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/investigations"),
        PathBuf::from,
    );
    let runs: usize = std::env::var("CAUSEWAY_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut stores = Vec::new();
    for name in ["vllm-37343-logprobs-amplification.db", "sample-cluster.db"] {
        let src = shared.join(name);
        assert!(src.exists(), "{} is missing", src.display());
        let db = dir.path().join(name).with_extension("duckdb");
        causeway_import::import(
            &[src],
            &db,
            false,
            &causeway_import::ImportOptions::default(),
            &mut |_| {},
        )
        .expect("import");
        stores.push((name.to_string(), db));
    }
    if let Some(p) = std::env::var_os("CAUSEWAY_BENCH_STORE") {
        let p = PathBuf::from(p);
        stores.push((p.display().to_string(), p));
    }
    for (name, db) in stores {
        let r = Reader::open(&db).expect("open");
        let q = WindowParams::default();
        let (mut best_build, mut best_render, mut best_write) = (f64::MAX, f64::MAX, f64::MAX);
        let mut bytes = 0;
        let out = dir.path().join("report.html");
        for _ in 0..runs {
            let t = Instant::now();
            let d = build(&r, &q, &Default::default()).expect("build");
            let built = t.elapsed().as_secs_f64() * 1e3;
            let page = render(&d, Mode::File);
            let rendered = t.elapsed().as_secs_f64() * 1e3 - built;
            bytes = page.len();
            let t = Instant::now();
            write_file(&r, &q, &Default::default(), &out, true).expect("write");
            let written = t.elapsed().as_secs_f64() * 1e3;
            best_build = best_build.min(built);
            best_render = best_render.min(rendered);
            best_write = best_write.min(written);
        }
        println!(
            "{name}: page {bytes} bytes; best of {runs}: data {best_build:.1} ms, render {best_render:.1} ms, build+render+write {best_write:.1} ms"
        );
    }
}
