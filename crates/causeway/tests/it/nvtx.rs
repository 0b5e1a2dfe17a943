//! NVTX ranges through the binary: `causeway trace -- PROG` hands an NVTX v3 caller
//! (crates/collector/tests/nvtx/prog.c) the injection library, `causeway steps` shows its repeated
//! outermost ranges as NVTX steps, and a command whose environment names its own injection
//! library keeps it. Needs root like every BPF test.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::ok;
use crate::trace::bpf_tests;

fn build_prog(dir: &Path) -> PathBuf {
    let exe = dir.join("nvtx-prog");
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../collector/tests/nvtx/prog.c"
    );
    let out = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(src)
        .args(["-ldl", "-lpthread"])
        .output()
        .expect("running cc (install build-essential)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn count(db: &str, sql: &str) -> i64 {
    let out = ok(&["query", "--db", db, "--json", sql]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["rows"][0][0]
        .as_i64()
        .unwrap_or_else(|| panic!("{sql}: {out}"))
}

#[test]
fn trace_records_nvtx_ranges_and_steps_shows_them() {
    if !bpf_tests() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prog = build_prog(dir.path());
    let db = dir.path().join("t.duckdb");
    let db_s = db.to_str().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["trace", "--db", db_s, "--", prog.to_str().unwrap(), "run"])
        .env_remove("NVTX_INJECTION64_PATH")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["command_exit"], 0);
    assert_eq!(summary["nvtx_ranges"], 20);
    assert_eq!(summary["ringbuf_drops"], 0);
    assert_eq!(
        count(db_s, "SELECT count(*) FROM ranges WHERE kind = 'nvtx'"),
        19
    );
    let steps: serde_json::Value =
        serde_json::from_str(&ok(&["steps", "--db", db_s, "--json"])).unwrap();
    let series = steps["series"].as_array().unwrap();
    let nvtx: Vec<_> = series.iter().filter(|s| s["source"] == "nvtx").collect();
    assert_eq!(nvtx.len(), 1, "{steps}");
    assert_eq!(nvtx[0]["count"], 3, "{steps}");
}

#[test]
fn a_tracer_environment_naming_an_injection_library_is_kept() {
    if !bpf_tests() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prog = build_prog(dir.path());
    let db = dir.path().join("t.duckdb");
    let seen = dir.path().join("seen.txt");
    let own = "/nonexistent/their-nvtx-injection.so";
    let out = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["trace", "--db", db.to_str().unwrap(), "--"])
        .arg(&prog)
        .args(["env", seen.to_str().unwrap()])
        .env("NVTX_INJECTION64_PATH", own)
        .env("CAUSEWAY_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), own);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["nvtx_ranges"], 0);
    assert!(
        stderr.contains("NVTX ranges are not recorded"),
        "said at info level: {stderr}"
    );
}
