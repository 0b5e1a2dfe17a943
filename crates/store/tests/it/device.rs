//! The device tables of schema 13 (`gpu_activity`, `ranges`, `steps`, `correlations`): written in
//! bulk, read through the guard like every table (names sanitised on the way out), joined to the
//! launching call, and carried by `merge`.

use causeway_store::{
    Correlation, Event, GpuActivity, GpuKind, Range, Reader, Step, Writer, WriterOptions,
};
use serde_json::json;

fn store(dir: &std::path::Path, node: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{node}.duckdb"));
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: node.into(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let seq = w.next_seq();
    w.append(&Event {
        timestamp: 1_000,
        duration: 20,
        pid: 7,
        tid: 7,
        op_id: 3,
        ..Event::default()
    })
    .unwrap();
    w.flush().unwrap();
    w.add_correlations(&[Correlation {
        seq,
        pid: 7,
        correlation: 42,
    }])
    .unwrap();
    w.add_gpu_activity(&[GpuActivity {
        pid: 7,
        device: 1,
        stream: 7,
        kind: GpuKind::Kernel,
        name: "k\u{202E}ernel".into(),
        raw_name: "void k(int)".into(),
        start_ns: 1_030,
        end_ns: 1_090,
        bytes: None,
        correlation: Some(42),
        grid: Some([64, 1, 1]),
        block: Some([128, 1, 1]),
    }])
    .unwrap();
    w.add_ranges(&[Range {
        pid: 7,
        tid: 7,
        name: "aten::mm".into(),
        kind: "cpu_op",
        start_ns: 990,
        end_ns: 1_050,
        depth: 1,
    }])
    .unwrap();
    w.add_steps(&[Step {
        pid: 7,
        tid: 7,
        step: 3,
        start_ns: 900,
        end_ns: 2_000,
        source: "profiler",
    }])
    .unwrap();
    w.finish().unwrap();
    path
}

#[test]
fn device_rows_are_read_through_the_guard_and_join_their_launching_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = store(dir.path(), "n1");
    let r = Reader::open(&path).unwrap();
    let res = crate::reader::run(
        &r,
        "SELECT e.op, g.kind, g.name, g.end_ns - g.start_ns AS busy, g.grid_x, g.block_x
         FROM gpu_activity g
         JOIN correlations c ON c.node = g.node AND c.pid = g.pid AND c.correlation = g.correlation
         JOIN events e ON e.node = c.node AND e.seq = c.seq",
    )
    .unwrap();
    // The bidi override a traced process put in a name does not reach the reader.
    assert_eq!(
        res.rows,
        vec![vec![
            json!("cudaLaunchKernel"),
            json!("kernel"),
            json!("k\u{FFFD}ernel"),
            json!(60),
            json!(64),
            json!(128)
        ]]
    );
    let res = crate::reader::run(
        &r,
        "SELECT s.step, count(*) FROM steps s JOIN ranges g ON g.node = s.node AND g.tid = s.tid
         AND g.start_ns >= s.start_ns AND g.end_ns <= s.end_ns GROUP BY ALL",
    )
    .unwrap();
    assert_eq!(res.rows, vec![vec![json!(3), json!(1)]]);
    let res = crate::reader::run(
        &r,
        "SELECT count(*) FROM schema_columns WHERE table_name IN ('gpu_activity', 'ranges', 'steps', 'correlations')",
    )
    .unwrap();
    assert_eq!(res.rows, vec![vec![json!(17 + 8 + 7 + 4)]]);
}

#[test]
fn merge_carries_every_nodes_device_rows() {
    let dir = tempfile::tempdir().unwrap();
    let a = store(dir.path(), "a");
    let b = store(dir.path(), "b");
    let out = dir.path().join("m.duckdb");
    causeway_store::merge::merge(&[a, b], &out, false).unwrap();
    let r = Reader::open(&out).unwrap();
    let res = crate::reader::run(
        &r,
        "SELECT node, count(*) FROM gpu_activity g JOIN correlations c USING (node, pid, correlation)
         JOIN ranges USING (node) JOIN steps USING (node) GROUP BY node ORDER BY node",
    )
    .unwrap();
    assert_eq!(
        res.rows,
        vec![vec![json!("a"), json!(1)], vec![json!("b"), json!(1)]]
    );
}
