//! Call sites from Python stacks, end to end: a Python program makes a sync storm through
//! ctypes on the stand-in runtime from two known lines (600 syncs from one, 200 from the other,
//! by design), `causeway trace --stacks` records it, and the engine's sync_storm finding cites
//! exactly those lines with those counts, from the rows of its call-site evidence query; the
//! Perfetto export carries each sync's frames. A second program stalls its feeding thread on
//! host work before every step: the feeding_stall finding cites the line each step resumes at,
//! and the sleep after its last step is no throughput drop. A third does 80 ms of host work a
//! step against 5 ms of device work: the host_bound finding cites the same kind of line. On a
//! real PyTorch recording (committed), a `.item()` sync's stack runs from the sync through
//! torch's C++ and the Python frames to `_start`.
//! Needs root like every BPF test; CAUSEWAY_SKIP_BPF_TESTS=1 skips explicitly.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::Value;

use crate::common::{ok, scratch};
use crate::trace::{bpf_tests, standin_dir};

/// The program: `read_loss` syncs every step, `log_metrics` every third step.
const PROGRAM: &str = r#"import ctypes, sys, time
rt = ctypes.CDLL(sys.argv[1])
rt.standinSetSyncDelayMs(1)

class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]

def launch():
    rt.cudaLaunchKernel(None, dim3(1, 1, 1), dim3(32, 1, 1), None, ctypes.c_size_t(0), None)

def read_loss():
    rt.cudaStreamSynchronize(None)

def log_metrics():
    rt.cudaDeviceSynchronize()

for i in range(STEPS):
    launch()
    launch()
    read_loss()
    if i % 3 == 0:
        log_metrics()
time.sleep(2)  # alive while the collector reads its code objects
"#;

/// Steps of the loop: one `read_loss` sync each, a `log_metrics` sync every third.
const STEPS: u64 = 600;
/// Lines of the two syncs (1-based), and of their calls in the loop.
const READ_LOSS_LINE: u32 = 12;
const LOG_METRICS_LINE: u32 = 15;
const LOOP_READ_LOSS: u32 = 20;
const LOOP_LOG_METRICS: u32 = 22;

/// The recording (made once per test binary) and the script's path as the interpreter saw it.
fn recording() -> Option<&'static (PathBuf, String)> {
    static REC: OnceLock<(PathBuf, String)> = OnceLock::new();
    bpf_tests().then(|| {
        REC.get_or_init(|| {
            record(
                "python-sites",
                &PROGRAM.replace("STEPS", &STEPS.to_string()),
            )
        })
    })
}

/// `program` traced with --stacks under CPython 3.12, in a scratch directory of its own.
fn record(name: &str, program: &str) -> (PathBuf, String) {
    {
        let dir = scratch().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("train.py");
        std::fs::write(&script, program).unwrap();
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        let python = format!("{home}/.pyenv/versions/3.12.1/bin/python3");
        assert!(
            std::path::Path::new(&python).exists(),
            "CPython 3.12 is expected at {python}"
        );
        let db = dir.join("t.duckdb");
        let lib = standin_dir().join("libcudart.so.12");
        ok(&[
            "trace",
            "--db",
            db.to_str().unwrap(),
            "--stacks",
            "--overhead-budget",
            "100",
            "--",
            &python,
            script.to_str().unwrap(),
            lib.to_str().unwrap(),
        ]);
        (db, script.to_str().unwrap().to_string())
    }
}

/// A loop with host work on the feeding thread before every step (`HOST_S` on the CPU), then
/// the step's launches: its first from `step` itself, the rest through `launch`, and a sync
/// that waits `SYNC_MS` for the stand-in's "device".
const STEPPING: &str = r#"import ctypes, sys, time
rt = ctypes.CDLL(sys.argv[1])
rt.standinSetSyncDelayMs(SYNC_MS)

class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]

def launch():
    rt.cudaLaunchKernel(None, dim3(1, 1, 1), dim3(32, 1, 1), None, ctypes.c_size_t(0), None)

def prepare_batch():
    t = time.perf_counter()
    while time.perf_counter() - t < HOST_S:
        pass

def step():
    rt.cudaLaunchKernel(None, dim3(1, 1, 1), dim3(32, 1, 1), None, ctypes.c_size_t(0), None)
    for _ in range(LAUNCHES):
        launch()
    rt.cudaStreamSynchronize(None)

for _ in range(STEPS):
    prepare_batch()
    step()
time.sleep(2)  # alive while the collector reads its code objects
"#;

/// The line every step resumes launching at, after its host work.
const RESUME_LINE: u32 = 17;

/// [`STEPPING`] with its host seconds, sync milliseconds, launches and steps.
fn stepping(host_s: f64, sync_ms: u32, launches: u32, steps: u32) -> String {
    STEPPING
        .replace("HOST_S", &host_s.to_string())
        .replace("SYNC_MS", &sync_ms.to_string())
        .replace("LAUNCHES", &launches.to_string())
        .replace("STEPS", &steps.to_string())
}

#[test]
fn a_feeding_stall_cites_the_line_the_thread_resumes_launching_at() {
    if !bpf_tests() {
        return;
    }
    let (db, script) = record("python-stall", &stepping(1.2, 0, 200, 5));
    let db = db.to_str().unwrap();
    let v: Value = serde_json::from_str(&ok(&["explain", "--db", db, "--json"])).unwrap();
    let stall = v["chains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["detector"] == "feeding_stall")
        .unwrap_or_else(|| panic!("no feeding_stall finding: {v:#}"));
    // Each stall the finding lists ended at a step's first launch: every one from that line.
    let cs = &stall["call_sites"];
    let n = cs["calls"].as_u64().unwrap_or(0);
    assert!((3..=4).contains(&n), "{cs:#}");
    assert_eq!(cs["calls_with_stack"], n, "{cs:#}");
    assert_eq!(cs["sites"].as_array().unwrap().len(), 1, "{cs:#}");
    let site = &cs["sites"][0];
    assert_eq!(site["kind"], "python", "{cs:#}");
    assert_eq!(site["site"], format!("{script}:{RESUME_LINE}"), "{cs:#}");
    assert_eq!(site["detail"], "step", "{cs:#}");
    assert!(
        stall["explanation"].as_str().unwrap().contains(&format!(
            "{n} of {n} GPU calls that ended a stall come from {script}:{RESUME_LINE} in step."
        )),
        "{stall:#}"
    );
    // Every step launches the same: the seconds of sleep after the last one are the loop's
    // end, not a drop in its rate.
    assert!(
        v["chains"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["detector"] != "throughput_drop"),
        "{v:#}"
    );
    // The thread is named for the program it runs, not the launcher that held it.
    assert!(
        stall["summary"].as_str().unwrap().starts_with("python3 "),
        "{stall:#}"
    );
}

fn q(db: &str, sql: &str) -> Value {
    let out = ok(&["query", "--db", db, "--json", sql]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["rows"][0][0].clone()
}

#[test]
fn a_sync_storm_cites_the_python_lines_its_syncs_come_from() {
    let Some((db, script)) = recording() else {
        return;
    };
    let db = db.to_str().unwrap();
    // The recording holds every sync with its Python frames (the design's counts).
    assert_eq!(
        q(
            db,
            "SELECT count(*) FROM events e JOIN python_stacks s USING (stack_hash) WHERE e.op IN ('cudaStreamSynchronize', 'cudaDeviceSynchronize') AND s.status = 'ok'"
        ),
        800
    );
    let v: Value = serde_json::from_str(&ok(&["explain", "--db", db, "--json"])).unwrap();
    let storm = v["chains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["detector"] == "sync_storm")
        .unwrap_or_else(|| panic!("no sync_storm finding: {v:#}"));
    let cs = &storm["call_sites"];
    assert_eq!(cs["calls"], 800, "{cs:#}");
    assert_eq!(cs["calls_with_stack"], 800, "{cs:#}");
    let site = |i: usize| {
        let s = &cs["sites"][i];
        (
            s["kind"].as_str().unwrap_or("").to_string(),
            s["site"].as_str().unwrap_or("").to_string(),
            s["detail"].as_str().unwrap_or("").to_string(),
            s["calls"].as_u64().unwrap_or(0),
        )
    };
    let at = |line: u32| format!("{script}:{line}");
    assert_eq!(
        site(0),
        (
            "python".into(),
            at(READ_LOSS_LINE),
            "read_loss".into(),
            STEPS
        )
    );
    assert_eq!(
        site(1),
        (
            "python".into(),
            at(LOG_METRICS_LINE),
            "log_metrics".into(),
            STEPS / 3
        )
    );
    assert_eq!(cs["sites"].as_array().unwrap().len(), 2, "{cs:#}");
    let explanation = storm["explanation"].as_str().unwrap();
    assert!(
        explanation.contains(&format!(
            "600 of 800 syncs come from {} in read_loss, 200 from {} in log_metrics.",
            at(READ_LOSS_LINE),
            at(LOG_METRICS_LINE)
        )),
        "{explanation}"
    );
    // The numbers are the rows of the evidence query, as an agent's run_sql returns them.
    let rows = ok(&[
        "query",
        "--db",
        db,
        "--json",
        cs["evidence_sql"].as_str().unwrap(),
    ]);
    let rows: Value = serde_json::from_str(&rows).unwrap();
    let calls: Vec<i64> = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[3].as_i64().unwrap())
        .collect();
    assert_eq!(calls, [600, 200], "{rows:#}");
    // The MCP server answers with the same function: the same chains, call sites included.
    let mut server = crate::mcp::StdioServer::spawn(
        std::process::Command::new(env!("CARGO_BIN_EXE_causeway")).args(["mcp", "--db", db]),
    );
    server.initialize("2025-11-25");
    let r = server.request(
        "tools/call",
        serde_json::json!({"name": "get_causal_chains", "arguments": {"top_n": 20}}),
    );
    assert_eq!(
        r["result"]["structuredContent"]["chains"], v["chains"],
        "{r}"
    );
    // People read the same: the text output lists the sites.
    let text = ok(&["explain", "--db", db]);
    for (n, line, function) in [
        (600, READ_LOSS_LINE, "read_loss"),
        (200, LOG_METRICS_LINE, "log_metrics"),
    ] {
        assert!(
            text.contains(&format!(" {n}  {} in {function}\n", at(line))),
            "{text}"
        );
    }
    assert!(
        text.contains("call sites (800 of 800 calls with a stack):"),
        "{text}"
    );
}

#[test]
fn the_perfetto_export_carries_each_syncs_python_frames() {
    let Some((db, script)) = recording() else {
        return;
    };
    let out = db.with_file_name("trace.json");
    let _ = std::fs::remove_file(&out);
    ok(&[
        "export",
        "--db",
        db.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let frames_of = |op: &str| -> Vec<Value> {
        doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == op && e["ph"] == "X")
            .map(|e| e["args"].clone())
            .collect()
    };
    for (op, n, inner, line, outer) in [
        (
            "cudaStreamSynchronize",
            STEPS,
            "read_loss",
            READ_LOSS_LINE,
            LOOP_READ_LOSS,
        ),
        (
            "cudaDeviceSynchronize",
            STEPS / 3,
            "log_metrics",
            LOG_METRICS_LINE,
            LOOP_LOG_METRICS,
        ),
    ] {
        let args = frames_of(op);
        assert_eq!(args.len() as u64, n, "{op}");
        let want = serde_json::json!([
            format!("{script}:{line} {inner}"),
            format!("{script}:{outer} <module>")
        ]);
        for a in &args {
            assert_eq!(a["python_frames"], want, "{op}: {a}");
            // The native stack starts at the probed function.
            assert!(
                a["native_frames"][0]
                    .as_str()
                    .is_some_and(|f| f.starts_with(op)),
                "{op}: {a}"
            );
        }
    }
    // The finding's slice names its call sites.
    let chain = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["cat"] == "chain"
                && e["ph"] == "X"
                && e["args"]["id"]
                    .as_str()
                    .is_some_and(|i| i.starts_with("sync_storm"))
        })
        .expect("a sync_storm slice");
    assert_eq!(
        chain["args"]["call_sites"][0],
        format!("600 of 800: {script}:{READ_LOSS_LINE} in read_loss")
    );
}

#[test]
fn a_host_bound_loop_cites_the_line_each_step_resumes_at() {
    if !bpf_tests() {
        return;
    }
    // 80 ms of host work before every step against 5 ms of "device" work.
    let (db, script) = record("python-host-bound", &stepping(0.08, 5, 20, 40));
    let db = db.to_str().unwrap();
    let v: Value = serde_json::from_str(&ok(&["explain", "--db", db, "--json"])).unwrap();
    // Found (a busy machine's preemption can rank a cpu_contention finding above it).
    let top = v["chains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["detector"] == "host_bound")
        .unwrap_or_else(|| panic!("no host_bound finding: {v:#}"));
    // By design every step's 80 ms of host work ends at the step's first launch.
    let cs = &top["call_sites"];
    let site = &cs["sites"][0];
    assert_eq!(site["site"], format!("{script}:{RESUME_LINE}"), "{cs:#}");
    assert_eq!(site["detail"], "step", "{cs:#}");
    assert!(site["calls"].as_u64().unwrap_or(0) >= 35, "{cs:#}");
    // The evidence rows are the gaps the finding speaks of: the longest are the host work's.
    let rows: Value = serde_json::from_str(&ok(&[
        "query",
        "--db",
        db,
        "--json",
        top["evidence_sql"].as_str().unwrap(),
    ]))
    .unwrap();
    let gaps: Vec<i64> = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[1].as_i64().unwrap_or(0))
        .collect();
    assert!(gaps.len() >= 39, "{rows:#}");
    assert!(gaps[..39].iter().all(|&g| g >= 79_000_000), "{gaps:?}");
}

/// `causeway stacks --json` for the stream-sync stacks, with `more` arguments.
fn sync_stacks(db: &str, more: &[&str]) -> Value {
    let mut args = vec![
        "stacks",
        "--db",
        db,
        "--json",
        "--op",
        "cudaStreamSynchronize",
    ];
    args.extend_from_slice(more);
    serde_json::from_str(&ok(&args)).unwrap()
}

/// The stream-sync stack with the most time, up to 64 frames, and its frames as (symbol, module).
fn busiest_sync_stack(db: &str) -> (Value, Vec<(String, String)>) {
    let v = sync_stacks(db, &["--max-frames", "64", "--limit", "1"]);
    let frames = v["stacks"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["symbol"].as_str().unwrap().to_string(),
                f["module"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (v, frames)
}

/// The stack of `read_loss`'s syncs reads as the program ran: the sync, the C code of ctypes
/// and libffi (no frame pointers: unwound with their .eh_frame), then the Python frames where
/// the eval loop ran them, then the interpreter's start, to `_start`; `causeway stacks` and
/// `get_stacks` answer the same.
#[test]
fn python_frames_sit_among_the_native_frames_that_ran_them() {
    let Some((db, script)) = recording() else {
        return;
    };
    let db = db.to_str().unwrap();
    let (v, frames) = busiest_sync_stack(db);
    let at = |s: &str| {
        frames
            .iter()
            .position(|f| f.0.starts_with(s))
            .unwrap_or_else(|| panic!("no {s} in {frames:#?}"))
    };
    assert!(
        frames[0].0.starts_with("cudaStreamSynchronize"),
        "{frames:#?}"
    );
    let (ffi, read_loss, module, eval_code) = (
        at("ffi_call"),
        at("read_loss"),
        at("<module>"),
        at("PyEval_EvalCode"),
    );
    assert!(
        ffi < read_loss && read_loss < module && module < eval_code,
        "{frames:#?}"
    );
    assert_eq!(frames[read_loss].1, format!("{script}:{READ_LOSS_LINE}"));
    assert_eq!(frames[module].1, format!("{script}:{LOOP_READ_LOSS}"));
    // The eval loop's own frame gave its place to the Python frames it ran.
    assert!(
        !frames
            .iter()
            .any(|f| f.0.starts_with("_PyEval_EvalFrameDefault"))
    );
    assert!(
        frames.last().unwrap().0.starts_with("_start"),
        "{frames:#?}"
    );
    // Within the default 12 frames, the Python ones stay, in stack order.
    let short = sync_stacks(db, &[]);
    let names: Vec<&str> = short["stacks"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["symbol"].as_str().unwrap())
        .collect();
    let py: Vec<&&str> = names
        .iter()
        .filter(|n| **n == "read_loss" || **n == "<module>")
        .collect();
    assert_eq!(py, [&"read_loss", &"<module>"], "{names:?}");
    assert!(names[0].starts_with("cudaStreamSynchronize"), "{names:?}");
    // The MCP tool is the same function.
    let mut server = crate::mcp::StdioServer::spawn(
        std::process::Command::new(env!("CARGO_BIN_EXE_causeway")).args(["mcp", "--db", db]),
    );
    server.initialize("2025-11-25");
    let r = server.request(
        "tools/call",
        serde_json::json!({"name": "get_stacks", "arguments": {
            "op": "cudaStreamSynchronize", "max_frames": 64, "limit": 1}}),
    );
    assert_eq!(r["result"]["structuredContent"], v, "{r}");
}

/// The same on real PyTorch, recorded on an H200 (investigations/recorded/sync-storm-stacks: the
/// loop reads gradient norms with `.item()` on line 132 of scripts/gpu/cases.py, by design). A
/// sync's stack reads as PyTorch runs `.item()`: the sync in libcudart, torch's C++ path
/// (libtorch_cuda, libtorch_cpu, libtorch_python: built without frame pointers, unwound from
/// their .eh_frame), the Python frames from line 132 out to `<module>`, then the interpreter's
/// start down to `_start`.
#[test]
fn a_real_pytorch_item_sync_reads_from_torch_through_python_to_start() {
    let db = scratch().join("sync-storm-stacks.duckdb");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../investigations/recorded/sync-storm-stacks.duckdb.gz");
    let mut gz = flate2::read::GzDecoder::new(std::fs::File::open(src).unwrap());
    std::io::copy(&mut gz, &mut std::fs::File::create(&db).unwrap()).unwrap();
    let (v, frames) = busiest_sync_stack(db.to_str().unwrap());
    let at = |s: &str, module: &str| {
        frames
            .iter()
            .position(|f| f.0.starts_with(s) && f.1.ends_with(module))
            .unwrap_or_else(|| panic!("no {s} in {module} in {frames:#?}"))
    };
    let order = [
        at("cudaStreamSynchronize", "libcudart.so.13"),
        at("at::native::_local_scalar_dense_cuda", "libtorch_cuda.so"),
        at("at::native::item", "libtorch_cpu.so"),
        at("torch::autograd::THPVariable_item", "libtorch_python.so"),
        at("case_sync_storm.<locals>.log", "scripts/gpu/cases.py:132"),
        at("<module>", "scripts/gpu/cases.py:225"),
        at("PyEval_EvalCode", "python3.12"),
        at("_start", "python3.12"),
    ];
    assert_eq!(order[0], 0, "{frames:#?}");
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "{order:?} {frames:#?}"
    );
    assert_eq!(order[7], frames.len() - 1, "{frames:#?}");
    assert!(v["stacks"][0]["calls"].as_u64().unwrap() >= 3000, "{v}");
}
