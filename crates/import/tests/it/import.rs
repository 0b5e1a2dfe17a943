//! Import of every reference-trace vintage in ../shared/investigations, checked against the
//! published figures, and the importer's handling of bad input.

use causeway_analysis::{StatsQuery, trace_stats};
use causeway_hint::Hint as _;
use causeway_import::{ImportError, ImportOptions, import};
use causeway_store::Reader;

use crate::shared;

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
            ..ImportOptions::default()
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
    assert!(err.hint().is_some(), "error has a hint: {msg}");
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

    assert!(expect_failure(dir.path()).contains("is a directory without a PyTorch profiler trace"));

    // A FIFO would block the open forever.
    let fifo = dir.path().join("pipe.db");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let t = std::time::Instant::now();
    assert!(expect_failure(&fifo).contains("is a FIFO"));
    assert!(t.elapsed() < std::time::Duration::from_secs(2));

    // The right tables with the wrong column types: a schema problem, said as such.
    let typed = dir.path().join("typed.db");
    {
        let c = rusqlite::Connection::open(&typed).unwrap();
        c.execute_batch(
            "CREATE TABLE events(timestamp INTEGER, pid INTEGER, tid INTEGER, source INTEGER,
                                 op INTEGER, duration TEXT);
             INSERT INTO events VALUES (1700000000000000000, 1, 1, 1, 3, 'slow');",
        )
        .unwrap();
    }
    let msg = expect_failure(&typed);
    assert!(
        msg.contains("column duration holds Text values") && msg.contains("different schema"),
        "{msg}"
    );
}

/// A copy of the vLLM trace whose events table has `rows` added (values as SQL).
fn vllm_copy_with(dir: &std::path::Path, rows: &[&str]) -> std::path::PathBuf {
    let src = dir.join("edited.db");
    std::fs::copy(shared("vllm-37343-logprobs-amplification.db"), &src).unwrap();
    let mut perms = std::fs::metadata(&src).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&src, perms).unwrap();
    let c = rusqlite::Connection::open(&src).unwrap();
    for r in rows {
        c.execute(
            &format!("INSERT INTO events (timestamp, pid, tid, source, op, duration) VALUES ({r})"),
            [],
        )
        .unwrap();
    }
    src
}

/// Impossible values are skipped or clamped, counted in `drops`, and never reach analysis as
/// an overflow or a conversion error.
#[test]
fn out_of_range_values_are_skipped_or_clamped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let t = 1_774_000_000_000_000_000i64;
    let src = vllm_copy_with(
        dir.path(),
        &[
            &format!("{t}, 37343, 37343, 1, 3, 9223372036854775807"),
            &format!("{t}, 37343, 37343, 1, 3, 9223372036854775807"),
            &format!("{t}, 37343, 37343, 1, 3, -5000"),
            &format!("{t}, -1, 7, 1, 3, 1000"),
            &format!("{t}, 7, 99999999999, 1, 3, 1000"),
            "-5, 7, 7, 1, 3, 1000",
        ],
    );
    let out = dir.path().join("out.duckdb");
    let reports = import(&[src], &out, false, &ImportOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(reports[0].invalid, 3, "{reports:?}");
    assert_eq!(reports[0].events, 10_869 + 3);
    let r = Reader::open(&out).unwrap();
    let drops = |kind: &'static str| -> i64 {
        let sql: &'static str = match kind {
            "import_invalid" => {
                "SELECT sum(count)::BIGINT FROM drops WHERE kind = 'import_invalid'"
            }
            _ => "SELECT sum(count)::BIGINT FROM drops WHERE kind = 'clamped'",
        };
        r.prepare_trusted(sql)
            .unwrap()
            .query_row([], |row| row.get(0))
            .unwrap()
    };
    assert_eq!(drops("import_invalid"), 3);
    assert_eq!(drops("clamped"), 3);
    let s = trace_stats(&r, &StatsQuery::default()).unwrap();
    let launch = op(&s, "cudaLaunchKernel");
    assert_eq!(launch.count, 553);
    assert_eq!(launch.max_ns, causeway_store::MAX_EVENT_DURATION_NS);
    assert!(launch.mean_ns > 0.0, "{launch:?}");
    causeway_analysis::explain(&r, &causeway_analysis::ChainQuery::default()).unwrap();
}

/// A WAL-mode source with a write-ahead log still beside it: its last writes are imported,
/// and nothing is created or changed beside the source (a read-only medium would do).
#[test]
fn a_wal_source_is_read_whole_without_writing_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = vllm_copy_with(dir.path(), &[]);
    let side = dir.path().join("side");
    std::fs::create_dir(&side).unwrap();
    {
        let c = rusqlite::Connection::open(&src).unwrap();
        let mode: String = c
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        c.execute_batch("PRAGMA wal_autocheckpoint=0").unwrap();
        c.execute(
            "INSERT INTO events (timestamp, pid, tid, source, op, duration)
             VALUES (1774000000000000000, 37343, 37343, 1, 3, 777)",
            [],
        )
        .unwrap();
        // The recording machine's view while it writes: the file and its log, copied aside.
        std::fs::copy(&src, side.join("edited.db")).unwrap();
        let mut wal = src.as_os_str().to_owned();
        wal.push("-wal");
        std::fs::copy(&wal, side.join("edited.db-wal")).unwrap();
    }
    let before: Vec<(String, Vec<u8>)> = listing(&side);
    let out = dir.path().join("out.duckdb");
    let reports = import(
        &[side.join("edited.db")],
        &out,
        false,
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(
        reports[0].events, 10_870,
        "the row only in the log came along"
    );
    assert_eq!(
        listing(&side),
        before,
        "nothing was written beside the source"
    );
    // Without a log: opened immutable, nothing created either.
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    std::fs::copy(
        shared("vllm-37343-logprobs-amplification.db"),
        plain.join("v.db"),
    )
    .unwrap();
    let before = listing(&plain);
    import(
        &[plain.join("v.db")],
        &dir.path().join("out2.duckdb"),
        false,
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(listing(&plain), before);
}

/// Every file of a directory with its bytes.
fn listing(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
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

/// A copy of the vLLM trace with per-minute counters for pid 72801's cudaMemcpyAsync: each
/// bucket's calls `calls_per_event` x the events the file holds there (counted here with
/// SQLite, apart from the importer), and a `stored` column of 6, as the held-out trace of
/// issue 50 had. Returns the file and the events per bucket.
fn vllm_with_counters(
    dir: &std::path::Path,
    calls_per_event: f64,
) -> (std::path::PathBuf, Vec<(i64, i64)>) {
    let src = vllm_copy_with(dir, &[]);
    let c = rusqlite::Connection::open(&src).unwrap();
    let buckets: Vec<(i64, i64)> = c
        .prepare(
            "SELECT timestamp - timestamp % 60000000000, count(*) FROM events
             WHERE pid = 72801 AND source = 1 AND op = 7 GROUP BY 1 ORDER BY 1",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(buckets.len() >= 2, "{buckets:?}");
    for (b, n) in &buckets {
        c.execute(
            "INSERT INTO event_aggregates (bucket, source, op, pid, count, stored, sum_dur)
             VALUES (?1, 1, 7, 72801, ?2, 6, 0)",
            rusqlite::params![b, (*n as f64 * calls_per_event).round() as i64],
        )
        .unwrap();
    }
    (src, buckets)
}

/// Issue 50: a headline 112x too large, because the engine scaled the stored copies by the
/// source's counters over its `stored` column (6) instead of the events the file held. Stored is
/// counted from the events; the counters are kept where they can be right and said where not.
#[test]
fn the_sources_stored_column_never_scales_a_figure() {
    let dir = tempfile::tempdir().unwrap();
    let (src, buckets) = vllm_with_counters(dir.path(), 2.0);
    let events: i64 = buckets.iter().map(|b| b.1).sum();
    let out = dir.path().join("out.duckdb");
    let reports = import(&[src], &out, false, &ImportOptions::default(), &mut |_| {}).unwrap();
    assert!(reports[0].counter_doubts.is_empty(), "{reports:?}");
    let r = Reader::open(&out).unwrap();
    let (stored, calls): (i64, i64) = r
        .prepare_trusted(
            "SELECT sum(stored)::BIGINT, sum(calls)::BIGINT FROM op_counts c JOIN ops o USING (op_id)
             WHERE o.op = 'cudaMemcpyAsync' AND c.pid = 72801",
        )
        .unwrap()
        .query_row([], causeway_store::row)
        .unwrap();
    assert_eq!((stored, calls), (events, 2 * events));
    let e = causeway_analysis::explain(&r, &causeway_analysis::ChainQuery::default()).unwrap();
    let broken = causeway_analysis::invariants::check(&r, &e).unwrap();
    assert!(broken.is_empty(), "{broken:#?}");
    let pid = StatsQuery {
        pid: Some(72801),
        ..StatsQuery::default()
    };
    let s = trace_stats(&r, &pid).unwrap();
    let copies = op(&s, "cudaMemcpyAsync");
    assert_eq!(
        (copies.count, copies.counted_calls),
        (events as u64, Some(2 * events as u64))
    );
}

/// Counters below the events they cover cannot be right: said, and not used.
#[test]
fn counters_below_the_stored_events_are_said_and_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let (src, buckets) = vllm_with_counters(dir.path(), 0.3);
    let events: i64 = buckets.iter().map(|b| b.1).sum();
    let out = dir.path().join("out.duckdb");
    let reports = import(&[src], &out, false, &ImportOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(reports[0].counter_doubts.len(), 1, "{reports:?}");
    assert!(
        reports[0].counter_doubts[0].contains("pid 72801 cudaMemcpyAsync"),
        "{reports:?}"
    );
    let r = Reader::open(&out).unwrap();
    let s = trace_stats(
        &r,
        &StatsQuery {
            pid: Some(72801),
            ..StatsQuery::default()
        },
    )
    .unwrap();
    let copies = op(&s, "cudaMemcpyAsync");
    assert_eq!((copies.count, copies.counted_calls), (events as u64, None));
}
