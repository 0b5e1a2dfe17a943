//! Call stacks in the Perfetto export: a GPU call with a stack carries its Python frames
//! ("file:line function") and native frames ("symbol (module)", demangled), innermost first,
//! as slice args; a stack whose Python frames were cut says so; a call without a stack carries
//! neither; a chain's call sites ride on its slice.

use causeway_analysis::Chain;
use causeway_analysis::sites::{CallSites, Site};
use causeway_export::PerfettoOptions;
use causeway_store::catalog::op_by_name;
use causeway_store::{Event, Frame, PythonFrame, PythonStack, Reader, Writer, WriterOptions};
use serde_json::Value;

use crate::{export, validate};

fn frame(symbol: &str, module: &str) -> Frame {
    Frame {
        ip: 0x10,
        symbol: symbol.into(),
        module: module.into(),
        offset: 0,
    }
}

fn py(function: &str, line: u32) -> PythonFrame {
    PythonFrame {
        file: "/srv/train.py".into(),
        function: function.into(),
        line,
        entry: false,
    }
}

/// Three syncs: from stack 7 (Python and native frames), from stack 8 (Python frames cut at
/// the walk limit, no native frame beyond the runtime), and without a stack.
fn store(dir: &std::path::Path) -> Reader {
    let p = dir.join("stacks.duckdb");
    let mut w = Writer::create(
        &p,
        WriterOptions {
            node: "n".into(),
            ..Default::default()
        },
    )
    .unwrap();
    w.add_stack(
        7,
        &[
            frame("cudaStreamSynchronize", "libcudart.so.12"),
            frame("_ZN2at6native9item_implEv+0x1c", "libtorch_cuda.so"),
        ],
    )
    .unwrap();
    w.add_python_stack(
        7,
        &PythonStack {
            tid: 5,
            status: "ok",
            frames: vec![py("Trainer.step", 87), py("<module>", 120)],
        },
    )
    .unwrap();
    w.add_stack(8, &[frame("cudaStreamSynchronize", "libcudart.so.12")])
        .unwrap();
    w.add_python_stack(
        8,
        &PythonStack {
            tid: 5,
            status: "truncated",
            frames: vec![py("deep", 3)],
        },
    )
    .unwrap();
    let sync = op_by_name("cudaStreamSynchronize").unwrap().id;
    for (i, hash) in [7i64, 8, 0].into_iter().enumerate() {
        w.append(&Event {
            timestamp: 1_000_000 + i as i64 * 1_000,
            duration: 500,
            pid: 5,
            tid: 5,
            comm: "python".into(),
            op_id: sync,
            stack_hash: hash,
            ..Default::default()
        })
        .unwrap();
    }
    w.finish().unwrap();
    Reader::open(&p).unwrap()
}

fn syncs(doc: &Value) -> Vec<&Value> {
    doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "cudaStreamSynchronize" && e["ph"] == "X")
        .collect()
}

#[test]
fn gpu_call_slices_carry_their_python_and_native_frames() {
    let dir = tempfile::tempdir().unwrap();
    let r = store(dir.path());
    let (_, doc) = export(&r, &PerfettoOptions::default());
    validate(&doc);
    let s = syncs(&doc);
    assert_eq!(s.len(), 3);
    let args = &s[0]["args"];
    assert_eq!(
        args["python_frames"],
        serde_json::json!([
            "/srv/train.py:87 Trainer.step",
            "/srv/train.py:120 <module>"
        ]),
        "{args}"
    );
    assert_eq!(
        args["native_frames"],
        serde_json::json!([
            "cudaStreamSynchronize (libcudart.so.12)",
            "at::native::item_impl+0x1c (libtorch_cuda.so)"
        ]),
        "{args}"
    );
    assert!(args.get("python_note").is_none(), "{args}");
    let args = &s[1]["args"];
    assert_eq!(
        args["python_frames"],
        serde_json::json!(["/srv/train.py:3 deep"])
    );
    assert!(
        args["python_note"]
            .as_str()
            .is_some_and(|n| n.contains("cut at the walk limit")),
        "{args}"
    );
    let args = &s[2]["args"];
    assert!(
        args.get("python_frames").is_none() && args.get("native_frames").is_none(),
        "{args}"
    );
}

#[test]
fn a_chain_slice_carries_its_call_sites() {
    let dir = tempfile::tempdir().unwrap();
    let r = store(dir.path());
    let chain = Chain {
        id: "sync_storm-1".into(),
        detector: "sync_storm".into(),
        severity: causeway_analysis::Severity::High,
        summary: "syncs".into(),
        root_cause: String::new(),
        explanation: String::new(),
        timeline: Vec::new(),
        recommendations: Vec::new(),
        evidence_sql: String::new(),
        time_lost_ns: 1,
        node: "n".into(),
        origin: "engine".into(),
        detected_ns: 0,
        call_sites: Some(CallSites {
            evidence_sql: String::new(),
            calls: 3,
            calls_with_stack: 2,
            sites: vec![Site {
                kind: "python".into(),
                site: "/srv/train.py:87".into(),
                detail: "Trainer.step".into(),
                calls: 1,
                total_ns: 500,
            }],
        }),
        scope: None,
        cost: None,
        per_step: None,
    };
    let opts = PerfettoOptions {
        chains: vec![chain],
        ..PerfettoOptions::default()
    };
    let (_, doc) = export(&r, &opts);
    let slice = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["cat"] == "chain" && e["ph"] == "X")
        .unwrap();
    assert_eq!(
        slice["args"]["call_sites"],
        serde_json::json!(["1 of 3: /srv/train.py:87 in Trainer.step"])
    );
}
