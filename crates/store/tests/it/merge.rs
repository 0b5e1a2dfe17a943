//! `merge`: node stores combine into one with every row and node intact, stacks deduplicated,
//! clock offsets estimated from collective completions and recorded (raw timestamps kept), and
//! bad input is refused without leaving a file behind.

use causeway_hint::Hint as _;
use std::path::{Path, PathBuf};

use causeway_store::catalog::op_by_name;
use causeway_store::merge::merge;
use causeway_store::{Event, Frame, Reader, SampledWindow, StoreError, Writer, WriterOptions};

const STEP: i64 = 100_000_000;
const T0: i64 = 1_700_000_000_000_000_000;

/// A node of a synchronous data-parallel job: per step an all-reduce then a stream sync that
/// returns when the collective completes, at the same true moment on every node; `clock_ns` is
/// how far this node's clock is ahead. Every node also shares one call stack.
fn node_store(dir: &Path, node: &str, clock_ns: i64, steps: i64) -> PathBuf {
    let path = dir.join(format!("{node}.duckdb"));
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: node.into(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let allreduce = op_by_name("ncclAllReduce").unwrap().id;
    let sync = op_by_name("cudaStreamSynchronize").unwrap().id;
    let launch = op_by_name("cudaLaunchKernel").unwrap().id;
    let local = |t: i64| t + clock_ns;
    w.add_stack(
        77,
        &[Frame {
            ip: 0x1000,
            symbol: "train_step".into(),
            module: "train.py".into(),
            offset: 0,
        }],
    )
    .unwrap();
    for k in 0..steps {
        // Each node reaches the collective at its own pace; completion is shared.
        let jitter = ((k * 7919 + node.len() as i64 * 104_729) % 61 - 30) * 1_000;
        let done = T0 + (k + 1) * STEP + jitter / 10;
        let entry = T0 + k * STEP + 60_000_000 + jitter;
        let ev = |ts: i64, duration: i64, op_id: u16| Event {
            timestamp: local(ts),
            duration,
            pid: 10,
            tid: 11,
            comm: "python3".into(),
            op_id,
            stack_hash: 77,
            ..Event::default()
        };
        w.append(&ev(T0 + k * STEP + 1_000_000, 8_000, launch))
            .unwrap();
        w.append(&ev(entry, 40_000, allreduce)).unwrap();
        w.append(&ev(entry + 50_000, done - entry - 50_000, sync))
            .unwrap();
    }
    // The launches were sampled in the first 5 s.
    w.record_sampled(&[SampledWindow {
        op_id: launch,
        window_start_ns: local(T0),
        window_end_ns: local(T0 + 5_000_000_000),
        observed_ns: 1_000_000_000,
        counted: 100,
        switching_ns: 40_000_000,
    }])
    .unwrap();
    w.finish().unwrap();
    path
}

#[test]
fn nodes_merge_with_every_row_and_their_clock_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let a = node_store(dir.path(), "node-a", 0, 120);
    let b = node_store(dir.path(), "node-b", 3_000_000, 120);
    let c = node_store(dir.path(), "node-c", -2_000_000, 120);
    let out = dir.path().join("cluster.duckdb");
    let report = merge(&[a.clone(), b.clone(), c.clone()], &out, false).unwrap();
    assert_eq!(report.events, 3 * 360);
    assert_eq!(report.sources.iter().map(|s| s.events).sum::<u64>(), 1080);
    assert_eq!(report.sources[0].new_stacks, 1);
    assert_eq!(
        report.sources[1].new_stacks, 0,
        "the shared stack is stored once"
    );
    let offsets: Vec<(String, i64, i64)> = report
        .clock_offsets
        .iter()
        .map(|o| (o.node.clone(), o.offset_ns, o.uncertainty_ns))
        .collect();
    assert_eq!(offsets.len(), 3, "{offsets:?}");
    assert_eq!(offsets[0], ("node-a".into(), 0, 0));
    assert!((offsets[1].1 - 3_000_000).abs() < 20_000, "{offsets:?}");
    assert!((offsets[2].1 + 2_000_000).abs() < 20_000, "{offsets:?}");
    assert!(offsets[1].2 < 20_000, "{offsets:?}");

    let r = Reader::open(&out).unwrap();
    let stored: Vec<(String, Option<i64>)> = r
        .prepare_trusted("SELECT node, clock_offset_ns FROM nodes ORDER BY node")
        .unwrap()
        .query_map([], causeway_store::row)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(stored.len(), 3);
    assert_eq!(stored[1].1, Some(offsets[1].1));
    // Raw timestamps are kept: node-b's first launch is still 3 ms ahead.
    let first_b: i64 = r
        .prepare_trusted("SELECT min(timestamp) FROM events WHERE node = 'node-b'")
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap();
    assert_eq!(first_b, T0 + 1_000_000 + 3_000_000);
    let ids: i64 = r
        .prepare_trusted("SELECT count(DISTINCT id) FROM events")
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap();
    assert_eq!(ids, 1080, "event ids stay unique across nodes");
}

/// A node recorded before schema 6 has no `probe_sampling.switching_ns`: its rows merge with 0
/// beside a newer node's.
#[test]
fn a_node_store_older_than_a_column_merges_with_its_default() {
    let dir = tempfile::tempdir().unwrap();
    let a = node_store(dir.path(), "node-a", 0, 10);
    let b = node_store(dir.path(), "node-b", 0, 10);
    {
        let c = causeway_store::duckdb::Connection::open(&a).unwrap();
        c.execute_batch(
            "ALTER TABLE probe_sampling DROP COLUMN switching_ns;
             DELETE FROM schema_columns WHERE column_name = 'switching_ns';
             UPDATE meta SET value = '5' WHERE key = 'schema_version'",
        )
        .unwrap();
    }
    assert_eq!(Reader::open(&a).unwrap().schema_version(), 5);
    let out = dir.path().join("cluster.duckdb");
    merge(&[a, b], &out, false).unwrap();
    let r = Reader::open(&out).unwrap();
    let rows: Vec<(String, i64, i64, i64)> = r
        .prepare_trusted(
            "SELECT node, observed_ns, counted, switching_ns FROM probe_sampling ORDER BY node",
        )
        .unwrap()
        .query_map([], causeway_store::row)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        rows,
        vec![
            ("node-a".into(), 1_000_000_000, 100, 0),
            ("node-b".into(), 1_000_000_000, 100, 40_000_000),
        ]
    );
}

#[test]
fn bad_merges_are_refused_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = node_store(dir.path(), "node-a", 0, 5);
    let a2 = dir.path().join("copy-of-a.duckdb");
    std::fs::copy(&a, &a2).unwrap();
    let out = dir.path().join("out.duckdb");
    let e = merge(&[a.clone(), a2.clone()], &out, false).unwrap_err();
    assert!(matches!(e, StoreError::Conflict { .. }), "{e}");
    assert!(
        e.to_string().contains("node 'node-a'") && e.hint().is_some(),
        "{e}"
    );
    assert!(!out.exists(), "nothing is left behind");
    let leftovers = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|f| f.file_name().to_string_lossy().contains(".tmp-"))
        .count();
    assert_eq!(leftovers, 0);
    let b = node_store(dir.path(), "node-b", 0, 5);
    let e = merge(&[a.clone(), b.clone()], &a, true).unwrap_err();
    assert!(e.to_string().contains("one of the sources"), "{e}");
    let e = merge(std::slice::from_ref(&a), &out, false).unwrap_err();
    assert!(e.to_string().contains("at least two"), "{e}");
    let e = merge(&[a, dir.path().join("missing.duckdb")], &out, false).unwrap_err();
    assert!(matches!(e, StoreError::Missing { .. }), "{e}");
}
