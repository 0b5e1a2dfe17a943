//! `causeway trace` and `causeway check` end to end: the real binary records a stand-in CUDA
//! workload (built from ../collector/tests/standin at test time) and `causeway query` reads it.
//! Needs root like every BPF test (CI is root); CAUSEWAY_SKIP_BPF_TESTS=1 skips explicitly.

use std::path::Path;
use std::process::Command;

use crate::common::{causeway, ok};

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("run cc");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the stand-in libcudart.so.12, libcuda.so.1 and the workload into `dir`.
pub fn standin(dir: &Path) -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../collector/tests/standin");
    let s = |n: &str| src.join(n).to_string_lossy().into_owned();
    let o = |n: &str| dir.join(n).to_string_lossy().into_owned();
    cc(&[
        "-O1",
        "-shared",
        "-fPIC",
        "-Wl,-soname,libcudart.so.12",
        "-o",
        &o("libcudart.so.12"),
        &s("cudart.c"),
    ]);
    cc(&[
        "-O1",
        "-shared",
        "-fPIC",
        "-Wl,-soname,libcuda.so.1",
        "-o",
        &o("libcuda.so.1"),
        &s("cuda.c"),
    ]);
    std::os::unix::fs::symlink("libcudart.so.12", dir.join("libcudart.so")).unwrap();
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
    cc(&[
        "-O1",
        "-o",
        &o("workload"),
        &s("workload.c"),
        "-L",
        &o(""),
        "-lcudart",
        "-lcuda",
        "-lpthread",
        "-Wl,-rpath,$ORIGIN",
    ]);
    o("workload")
}

#[test]
fn trace_records_a_command_and_query_reads_it() {
    if std::env::var("CAUSEWAY_SKIP_BPF_TESTS").as_deref() == Ok("1") {
        return;
    }
    assert!(
        is_root(),
        "causeway trace needs root (CI is root); set CAUSEWAY_SKIP_BPF_TESTS=1 to skip explicitly"
    );
    let dir = tempfile::tempdir().unwrap();
    let workload = standin(dir.path());
    let db = dir.path().join("t.duckdb");
    let out = dir.path().join("out.txt");
    let db_s = db.to_str().unwrap();
    let summary = ok(&[
        "trace",
        "--db",
        db_s,
        "--",
        &workload,
        "calls",
        out.to_str().unwrap(),
    ]);
    let summary: serde_json::Value =
        serde_json::from_str(&summary).expect("trace prints its summary as JSON");
    assert_eq!(summary["command_exit"], 0);
    assert_eq!(summary["ringbuf_drops"], 0);
    let rows = ok(&[
        "query",
        "--db",
        db_s,
        "--json",
        "SELECT count(*) AS n FROM events WHERE op = 'cudaLaunchKernel'",
    ]);
    assert!(rows.contains("100"), "{rows}");
}

#[test]
fn check_reports_the_kernel_as_json() {
    let out = causeway(&["check", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["kernel"].as_str().is_some_and(|k| !k.is_empty()));
    assert!(
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == "btf")
    );
}
