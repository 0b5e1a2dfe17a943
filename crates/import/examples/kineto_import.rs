//! Imports one trace and reports throughput and peak memory, for the benchmark in
//! docs/benchmarks.md: `cargo run -p causeway-import --example kineto_import -- TRACE [OUT]`.
//! Throughput counts the JSON's uncompressed bytes (the file's size for plain JSON).

use std::path::PathBuf;
use std::time::Instant;

use causeway_import::{ImportOptions, import};

/// Peak resident memory of this process (VmHWM), in MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() {
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let Some(src) = args.next() else {
        eprintln!("usage: kineto_import TRACE [OUT.duckdb]");
        std::process::exit(2);
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = args
        .next()
        .unwrap_or_else(|| dir.path().join("bench.duckdb"));
    let bytes = std::fs::metadata(&src).map(|m| m.len()).unwrap_or(0);
    let started = Instant::now();
    let reports = match import(
        std::slice::from_ref(&src),
        &out,
        true,
        &ImportOptions::default(),
        &mut |_| {},
    ) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let secs = started.elapsed().as_secs_f64();
    let r = &reports[0];
    let k = r.kineto.clone().unwrap_or_default();
    eprintln!(
        "{}: {:.1} MB in {secs:.1} s = {:.1} MB/s; peak RSS {:.0} MiB; {} calls stored, {} skipped, {} kernels, {} ranges",
        src.display(),
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / secs,
        peak_rss_mib(),
        r.events,
        r.skipped,
        k.kernels,
        k.ranges
    );
}
