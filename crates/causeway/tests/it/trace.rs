//! `causeway trace` and `causeway check` end to end: the real binary records a stand-in CUDA
//! workload (built from ../collector/tests/standin at test time) and `causeway query` reads it.
//! Needs root like every BPF test (CI is root); CAUSEWAY_SKIP_BPF_TESTS=1 skips explicitly.

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

/// The collector tests' stand-in builder (one source of truth for the stand-in CUDA libraries
/// and workload), included by path.
#[path = "../../../collector/tests/it/standin.rs"]
#[allow(dead_code)] // these tests use only the workload path
mod standin_build;

/// The stand-in workload (built once per test run, next to its libcudart.so.12 and libcuda.so.1).
pub fn standin() -> String {
    standin_build::get().exe().to_string()
}

/// The stand-in's directory (libcudart.so.12 for a Python program's ctypes).
pub fn standin_dir() -> std::path::PathBuf {
    standin_build::get().dir.clone()
}

/// The stand-in workload with the runtime linked statically (found by all-process tracing).
pub fn standin_static() -> std::path::PathBuf {
    standin_build::get().static_workload.clone()
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
    let workload = standin();
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

pub fn bpf_tests() -> bool {
    if std::env::var("CAUSEWAY_SKIP_BPF_TESTS").as_deref() == Ok("1") {
        return false;
    }
    assert!(
        is_root(),
        "causeway trace needs root (CI is root); set CAUSEWAY_SKIP_BPF_TESTS=1 to skip explicitly"
    );
    true
}

#[test]
fn json_streams_one_event_per_line_and_the_command_output_stays_off_stdout() {
    if !bpf_tests() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workload = standin();
    let db = dir.path().join("t.duckdb");
    // `rate` prints its own figure on stdout: with --json it must go to stderr instead.
    let out = causeway(&[
        "trace",
        "--json",
        "--db",
        db.to_str().unwrap(),
        "--",
        &workload,
        "rate",
        "2000",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let launches: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["op"] == "cudaLaunchKernel")
        .collect();
    assert_eq!(launches.len(), 2000, "{} lines in all", events.len());
    for e in &launches[..3] {
        for field in [
            "timestamp",
            "duration",
            "pid",
            "tid",
            "comm",
            "arg0",
            "arg1",
            "ret_code",
        ] {
            assert!(e.get(field).is_some(), "{field} missing in {e}");
        }
        assert!(e["duration"].as_i64().unwrap() > 0, "{e}");
        assert_eq!(e["arg1"], 1, "grid 1x1x1: {e}");
    }
    assert!(events.iter().any(|e| e["op"] == "process_exit"));
    // The stream and the store agree.
    let n = ok(&[
        "query",
        "--db",
        db.to_str().unwrap(),
        "--json",
        "SELECT count(*) AS n FROM events WHERE op = 'cudaLaunchKernel'",
    ]);
    assert!(n.contains("2000"), "{n}");
}

/// cudaLaunchKernel's line of `stats --json`.
fn launch_stats(v: &serde_json::Value) -> &serde_json::Value {
    v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["op"] == "cudaLaunchKernel")
        .unwrap()
}

#[test]
fn stats_reports_the_probe_overhead_and_the_mode_switch() {
    if !bpf_tests() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workload = standin();
    let db = dir.path().join("t.duckdb");
    let db_s = db.to_str().unwrap();
    // Back-to-back launches for a few seconds (~3 s on these VMs, so the controller's 1 s
    // ticks see them however fast the machine is): far over the default 1% budget; exact
    // counts (entry-only at the cheapest).
    const CALLS: u64 = 600_000;
    ok(&[
        "trace",
        "--db",
        db_s,
        "--exact-counts",
        "--",
        &workload,
        "rate",
        &CALLS.to_string(),
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["stats", "--db", db_s, "--json"])).unwrap();
    let oh = &v["overhead"];
    assert_eq!(oh["budget_pct"], 1.0, "{v}");
    assert!(oh["estimated_pct"].as_f64().unwrap() > 1.0, "{oh}");
    assert_eq!(oh["switches"][0]["op"], "cudaLaunchKernel", "{oh}");
    assert_eq!(oh["switches"][0]["to"], "entry_only", "{oh}");
    assert_eq!(oh["switches"][0]["reason"], "over_budget", "{oh}");
    let launch = launch_stats(&v);
    // Percentiles are labelled as covering the stored calls only; every call is counted.
    assert_eq!(launch["percentiles"], "stored_only", "{launch}");
    assert_eq!(launch["counted_calls"], CALLS, "{launch}");
    let (stored, untimed) = (
        launch["count"].as_u64().unwrap(),
        launch["untimed_calls"].as_u64().unwrap(),
    );
    assert_eq!(stored + untimed, CALLS, "{launch}");
    assert_eq!(
        launch["probe_modes"],
        serde_json::json!(["full", "entry_only"])
    );
    let text = ok(&["stats", "--db", db_s]);
    assert!(
        text.contains("overhead: causeway's probes cost an estimated"),
        "{text}"
    );
    assert!(
        text.contains("cudaLaunchKernel: probe modes full -> entry_only"),
        "{text}"
    );
    assert!(
        text.contains("cudaLaunchKernel full -> entry_only at +"),
        "{text}"
    );
}

#[test]
fn stats_marks_the_counts_of_a_sampled_call_as_estimates_and_shows_its_cost_in_situ() {
    if !bpf_tests() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workload = standin();
    let db = dir.path().join("t.duckdb");
    let db_s = db.to_str().unwrap();
    let steps = dir.path().join("steps.txt");
    // 40,000 launches: 2,500 steps of 16 launches in 5 ms of CPU work and a sync, probes
    // attached 20% of the time. A budget that leaves the syncs (the job's progress) in full
    // mode: at 1% the controller would sample them too.
    ok(&[
        "trace",
        "--db",
        db_s,
        "--overhead-budget",
        "5",
        "--probe-mode",
        "cudaLaunchKernel=sampled",
        "--sample-duty",
        "20",
        "--",
        &workload,
        "steps",
        "2500",
        "16",
        "5000",
        steps.to_str().unwrap(),
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["stats", "--db", db_s, "--json"])).unwrap();
    let launch = launch_stats(&v);
    assert_eq!(launch["calls_estimated"], true, "{launch}");
    assert_eq!(launch["probe_modes"], serde_json::json!(["sampled"]));
    let counted = launch["counted_calls"].as_i64().unwrap();
    assert!((counted - 40_000).abs() < 12_000, "{launch}");
    let text = ok(&["stats", "--db", db_s]);
    assert!(
        text.contains(&format!(
            "~{}",
            causeway_analysis::fmt::thousands(counted as u64)
        )),
        "{text}"
    );
    assert!(text.contains("~N sampled probe mode"), "{text}");
    // What the sampled launches cost the job, measured on it (the syncs are its progress).
    let m = &v["overhead"]["in_situ"][0];
    assert_eq!(m["op"], "cudaLaunchKernel", "{v}");
    assert!(m["lost_ns_per_hit"].as_f64().is_some(), "{m}");
    assert!(m["factor"].as_f64().unwrap() >= 1.0, "{m}");
    assert!(
        text.contains(&format!(
            "  cudaLaunchKernel measured on pid {}: ",
            m["pid"]
        )),
        "{text}"
    );
    assert!(text.contains("% slower while probed (±"), "{text}");
    assert!(
        text.contains(
            "calls made while the probes were detached (estimated) or without a duration"
        ),
        "{text}"
    );
    // A bad duty is refused before anything is written.
    let bad = causeway(&[
        "trace",
        "--db",
        dir.path().join("u.duckdb").to_str().unwrap(),
        "--sample-duty",
        "80",
        "--",
        &workload,
        "rate",
        "10",
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("80 is not a percentage in [2, 50]"), "{err}");
    assert!(!dir.path().join("u.duckdb").exists());
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

/// A recording of a loop without step annotations (the stand-in's `steps` mode: 60 steps of 20
/// launches and 2 ms of CPU work, each ended by a stream sync) stores the steps inferred from
/// its cadence in `steps` (source `inferred`): SQL finds the ones `causeway steps` reports.
#[test]
fn steps_inferred_from_a_recordings_cadence_are_stored_and_queryable() {
    if !bpf_tests() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.duckdb");
    let out = dir.path().join("out.txt");
    let db_s = db.to_str().unwrap();
    let summary = ok(&[
        "trace",
        "--db",
        db_s,
        "--",
        &standin(),
        "steps",
        "60",
        "20",
        "2000",
        out.to_str().unwrap(),
    ]);
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(summary["command_exit"], 0);
    let steps: serde_json::Value =
        serde_json::from_str(&ok(&["steps", "--db", db_s, "--json"])).unwrap();
    let series = steps["series"].as_array().unwrap();
    assert_eq!(series.len(), 1, "{steps}");
    let s = &series[0];
    assert_eq!(s["source"], "inferred", "{steps}");
    let n = s["count"].as_i64().unwrap();
    // 60 by design; the first and last may be cut where the trace lacks their calls.
    assert!((58..=60).contains(&n), "{n} steps: {steps}");
    assert!(
        steps["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x.as_str().unwrap().contains("stored in `steps`")),
        "{steps}"
    );
    let rows = ok(&[
        "query",
        "--db",
        db_s,
        "--json",
        "SELECT count(*), min(end_ns - start_ns), max(end_ns - start_ns) FROM steps WHERE source = 'inferred'",
    ]);
    let v: serde_json::Value = serde_json::from_str(&rows).unwrap();
    assert_eq!(v["rows"][0][0].as_i64(), Some(n), "{rows}");
    // Every step holds its 2 ms of CPU work.
    assert!(v["rows"][0][1].as_i64().unwrap() >= 2_000_000, "{rows}");
}
