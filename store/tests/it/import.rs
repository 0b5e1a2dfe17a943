//! Import of every reference-trace vintage in ../shared/investigations, checked against the
//! published figures, and the importer's handling of bad input.

use causeway_analysis::{StatsQuery, trace_stats};
use causeway_store::Reader;
use causeway_store::import::{ImportError, ImportOptions, import};

use crate::common::shared;

fn import_one(src: &str, out: &std::path::Path) {
    import(
        &[shared(src)],
        out,
        false,
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
}

fn op<'a>(s: &'a causeway_analysis::TraceStats, name: &str) -> &'a causeway_analysis::OpStats {
    s.ops
        .iter()
        .find(|o| o.op == name)
        .unwrap_or_else(|| panic!("no op {name}"))
}

#[test]
fn vllm_trace_matches_published_figures() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("vllm.duckdb");
    import_one("vllm-37343-logprobs-amplification.db", &out);
    let r = Reader::open(&out).unwrap();
    let s = trace_stats(&r, &StatsQuery::default()).unwrap();
    assert_eq!(s.events, 10_869);
    assert_eq!(op(&s, "sched_switch").count, 7_757);
    let launch = op(&s, "cudaLaunchKernel");
    assert_eq!(launch.count, 550);
    assert_eq!(launch.p50_ns, 20_300, "published p50 20 us");
    assert_eq!(
        (launch.p99_ns as f64 / 100.0).round() / 10.0,
        5_079.4,
        "published p99 5,079 us"
    );
    let sync = op(&s, "cudaDeviceSynchronize");
    assert_eq!(sync.count, 10);
    assert_eq!((sync.p50_ns as f64 / 100.0).round() / 10.0, 19.7);
    assert_eq!((sync.p99_ns as f64 / 100.0).round() / 10.0, 4_721.0);
    assert_eq!(op(&s, "cudaMemcpyAsync").count, 734);
    assert_eq!(op(&s, "cuLaunchKernel").count, 1_672);
    assert_eq!(s.drops.get("total"), Some(&0));
    // Everything the reference file holds besides events came along.
    let count = |sql: &'static str| -> i64 {
        r.prepare_trusted(sql)
            .unwrap()
            .query_row([], |row| row.get(0))
            .unwrap()
    };
    assert_eq!(
        count("SELECT count(DISTINCT stack_hash) FROM stack_frames"),
        110
    );
    assert_eq!(count("SELECT count(*) FROM chains"), 6);
    assert_eq!(count("SELECT count(*) FROM sessions"), 1);
    assert_eq!(count("SELECT count(*) FROM system_snapshots"), 52);
    assert_eq!(count("SELECT count(*) FROM cgroups"), 3);
    assert_eq!(count("SELECT count(*) FROM cgroup_schedstat"), 36);
    assert!(
        count("SELECT count(*) FROM events WHERE comm = 'VLLM::EngineCor'") > 0,
        "thread names come from process_names"
    );
}

#[test]
fn node_traces_import_with_their_node_names() {
    let dir = tempfile::tempdir().unwrap();
    for (file, node) in [
        ("sample-gpu-node-01.db", "gpu-node-01"),
        ("sample-gpu-node-02.db", "gpu-node-02"),
        ("sample-gpu-node-03.db", "gpu-node-03"),
    ] {
        let out = dir.path().join(format!("{node}.duckdb"));
        import_one(file, &out);
        let r = Reader::open(&out).unwrap();
        let s = trace_stats(&r, &StatsQuery::default()).unwrap();
        assert_eq!(s.events, 200, "{file}");
        assert_eq!(s.nodes, vec![node.to_string()], "{file}");
    }
}

#[test]
fn cluster_trace_keeps_three_nodes_and_unique_ids() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cluster.duckdb");
    import_one("sample-cluster.db", &out);
    let r = Reader::open(&out).unwrap();
    let s = trace_stats(&r, &StatsQuery::default()).unwrap();
    assert_eq!(s.events, 600);
    assert_eq!(s.nodes, vec!["gpu-node-01", "gpu-node-02", "gpu-node-03"]);
    let (n, distinct): (i64, i64) = r
        .prepare_trusted("SELECT count(*), count(DISTINCT id) FROM events")
        .unwrap()
        .query_row([], causeway_store::row)
        .unwrap();
    assert_eq!(n, distinct);
    let chains: i64 = r
        .prepare_trusted("SELECT count(DISTINCT node) FROM chains")
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap();
    assert_eq!(chains, 3);
}

#[test]
fn several_sources_into_one_store_and_node_override() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("two.duckdb");
    import(
        &[
            shared("sample-gpu-node-01.db"),
            shared("sample-gpu-node-02.db"),
        ],
        &out,
        false,
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    let r = Reader::open(&out).unwrap();
    let s = trace_stats(&r, &StatsQuery::default()).unwrap();
    assert_eq!(s.events, 400);
    assert_eq!(s.nodes.len(), 2);

    let out2 = dir.path().join("renamed.duckdb");
    import(
        &[shared("sample-gpu-node-03.db")],
        &out2,
        false,
        &ImportOptions {
            node: Some("rack7-b".into()),
        },
        &mut |_| {},
    )
    .unwrap();
    let s = trace_stats(&Reader::open(&out2).unwrap(), &StatsQuery::default()).unwrap();
    assert_eq!(s.nodes, vec!["rack7-b"]);
}

#[test]
fn refuses_to_overwrite_without_force_and_replaces_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.duckdb");
    std::fs::write(&out, b"precious").unwrap();
    let err = import(
        &[shared("sample-gpu-node-01.db")],
        &out,
        false,
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    import(
        &[shared("sample-gpu-node-01.db")],
        &out,
        true,
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert!(Reader::open(&out).is_ok());
}

fn expect_failure(src: &std::path::Path) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never.duckdb");
    let err = import(
        &[src.to_path_buf()],
        &out,
        false,
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(!out.exists(), "a failed import left {}", out.display());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&src.display().to_string()),
        "error names the file: {msg}"
    );
    assert!(msg.contains("hint:"), "error has a hint: {msg}");
    msg
}

#[test]
fn bad_input_is_named_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.db");
    std::fs::write(&text, "just some text, not a database\n").unwrap();
    assert!(expect_failure(&text).contains("not an SQLite database"));

    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    assert!(expect_failure(&empty).contains("not an SQLite database"));

    let missing = dir.path().join("missing.db");
    assert!(expect_failure(&missing).contains("cannot read"));

    let other = dir.path().join("other.db");
    {
        let c = rusqlite::Connection::open(&other).unwrap();
        c.execute_batch(
            "CREATE TABLE users(id INTEGER, name TEXT); INSERT INTO users VALUES (1, 'x');",
        )
        .unwrap();
    }
    assert!(expect_failure(&other).contains("not a trace database"));

    // A real trace cut in half.
    let full = std::fs::read(shared("vllm-37343-logprobs-amplification.db")).unwrap();
    let cut = dir.path().join("truncated.db");
    std::fs::write(&cut, &full[..full.len() / 2]).unwrap();
    let msg = expect_failure(&cut);
    assert!(msg.contains("damaged or truncated"), "{msg}");

    assert!(expect_failure(dir.path()).contains("cannot read"));
}

#[test]
fn a_bad_second_source_fails_the_whole_import() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.db");
    std::fs::write(&bad, "nope").unwrap();
    let out = dir.path().join("out.duckdb");
    let err = import(
        &[shared("sample-gpu-node-01.db"), bad.clone()],
        &out,
        false,
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(matches!(err, ImportError::NotSqlite { .. }), "{err}");
    assert!(!out.exists());
}
