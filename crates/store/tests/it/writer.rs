//! The writer: round trip of every column, sequence numbers, batching by size and time, node and
//! thread names interned across nodes and appends, and a store that is readable after the
//! writer is dropped without `finish`, and a writer that reopens its database to free memory.

use causeway_hint::Hint as _;
use std::time::Duration;

use causeway_store::{Event, Frame, ProcessInfo, Reader, Writer, WriterOptions};

fn count(r: &Reader, sql: &'static str) -> i64 {
    r.prepare_trusted(sql)
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap()
}

#[test]
fn events_round_trip_with_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rt.duckdb");
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: "n1".into(),
            ..Default::default()
        },
    )
    .unwrap();
    let ev = Event {
        timestamp: 1_700_000_000_123_456_789,
        duration: 5_000,
        pid: 10,
        tid: 11,
        comm: "pt_data_worker".into(),
        op_id: 7,
        arg0: 4096,
        arg1: 1,
        ret_code: 2,
        gpu_id: 3,
        stack_hash: -99,
        cgroup_id: 1234,
        rank: Some(5),
    };
    w.append(&ev).unwrap();
    w.add_stack(
        -99,
        &[Frame {
            ip: 0x10,
            symbol: "cudaMemcpyAsync+0x2".into(),
            module: "libcudart.so.12".into(),
            offset: 2,
        }],
    )
    .unwrap();
    w.upsert_process(&ProcessInfo {
        pid: 10,
        comm: "python3".into(),
        first_seen_ns: 1,
        last_seen_ns: 2,
        ..Default::default()
    })
    .unwrap();
    w.upsert_process(&ProcessInfo {
        pid: 10,
        last_seen_ns: 9,
        ..Default::default()
    })
    .unwrap();
    w.record_drop("ringbuf_full", Some(3), 17, "test").unwrap();
    w.finish().unwrap();

    let r = Reader::open(&path).unwrap();
    let names: (String, String, String, String) = r
        .prepare_trusted("SELECT id, source, op, comm FROM events")
        .unwrap()
        .query_row([], causeway_store::row)
        .unwrap();
    assert_eq!(
        names,
        (
            "n1:0".into(),
            "CUDA".into(),
            "cudaMemcpyAsync".into(),
            "pt_data_worker".into()
        )
    );
    let values: (i64, i64, i64, i64, i32, i16, i64, i64, Option<i32>) = r
        .prepare_trusted(
            "SELECT timestamp, duration, arg0, arg1, ret_code, gpu_id, stack_hash, cgroup_id::BIGINT, rank FROM events",
        )
        .unwrap()
        .query_row([], causeway_store::row)
        .unwrap();
    assert_eq!(
        values,
        (ev.timestamp, 5_000, 4096, 1, 2, 3, -99, 1234, Some(5))
    );
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM stacks WHERE frames LIKE 'cudaMemcpyAsync+0x2 (libcudart.so.12)%'"
        ),
        1
    );
    assert_eq!(
        count(
            &r,
            "SELECT last_seen_ns FROM processes WHERE pid = 10 AND comm = 'python3'"
        ),
        9
    );
    assert_eq!(count(&r, "SELECT sum(count)::BIGINT FROM drops"), 17);
    assert_eq!(
        count(&r, "SELECT count(*) FROM ops"),
        causeway_store::catalog::OPS.len() as i64
    );
    assert!(
        count(
            &r,
            "SELECT count(*) FROM schema_columns WHERE meaning != ''"
        ) > 30
    );
}

#[test]
fn batches_flush_by_size_and_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.duckdb");
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: "n".into(),
            batch_rows: 100,
            chunk_rows: 100,
            flush_interval: Duration::from_millis(20),
            // A capped DuckDB on one thread that trims its cache after each commit (as the
            // collector's writer runs) still writes every batch.
            memory_limit: Some("32MB".into()),
            threads: Some(1),
            trim_cache: true,
            reopen_rows: 0,
            timeline: Vec::new(),
        },
    )
    .unwrap();
    for i in 0..250 {
        w.append(&Event {
            timestamp: i,
            op_id: 3,
            ..Default::default()
        })
        .unwrap();
    }
    assert_eq!(w.written(), 200, "two full batches were written");
    w.tick().unwrap();
    assert_eq!(w.written(), 200, "the rest waits for the interval");
    std::thread::sleep(Duration::from_millis(30));
    w.tick().unwrap();
    assert_eq!(w.written(), 250);
    w.finish().unwrap();
}

/// Chunks go into DuckDB inside one transaction per batch: a live reader sees whole batches
/// only, and every event once.
#[test]
fn chunks_are_committed_per_batch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.duckdb");
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: "n".into(),
            batch_rows: 100,
            chunk_rows: 30,
            flush_interval: Duration::from_millis(20),
            ..Default::default()
        },
    )
    .unwrap();
    let live = w.live_reader().unwrap();
    let live = live.lock().unwrap();
    let seen = |r: &Reader| count(r, "SELECT count(*) FROM events");
    let mut visible = Vec::new();
    for i in 0..250 {
        w.append(&Event {
            timestamp: i,
            op_id: 3,
            comm: format!("t{}", i / 50),
            ..Default::default()
        })
        .unwrap();
        if i % 30 == 29 {
            visible.push((w.written(), seen(&live)));
        }
    }
    // Chunks of 30 reach DuckDB, the last of a batch only what fills it (10): the transaction
    // commits at exactly 100 events.
    assert_eq!(
        visible,
        [
            (0, 0),
            (0, 0),
            (0, 0),
            (100, 100),
            (100, 100),
            (100, 100),
            (200, 200),
            (200, 200)
        ]
    );
    std::thread::sleep(Duration::from_millis(30));
    w.tick().unwrap();
    assert_eq!((w.written(), seen(&live)), (250, 250));
    drop(live);
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(count(&r, "SELECT count(DISTINCT seq) FROM events"), 250);
    assert_eq!(count(&r, "SELECT count(DISTINCT comm) FROM events"), 5);
}

#[test]
fn appending_continues_sequence_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let path = crate::common::small_store(dir.path(), 5);
    let mut w = Writer::open_append(
        &path,
        WriterOptions {
            node: "t".into(),
            ..Default::default()
        },
    )
    .unwrap();
    w.append(&Event {
        timestamp: 1,
        op_id: 3,
        ..Default::default()
    })
    .unwrap();
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(count(&r, "SELECT max(seq)::BIGINT FROM events"), 5);
    assert_eq!(count(&r, "SELECT count(DISTINCT id) FROM events"), 6);
}

#[test]
fn create_refuses_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = crate::common::small_store(dir.path(), 1);
    let err = Writer::create(&path, WriterOptions::default()).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
}

#[test]
fn flushed_events_survive_a_writer_that_never_finished() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.duckdb");
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: "n".into(),
            batch_rows: 10,
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..25 {
        w.append(&Event {
            timestamp: i,
            op_id: 3,
            ..Default::default()
        })
        .unwrap();
    }
    // Simulates a crash: no finish, no checkpoint; the WAL holds the flushed batches.
    std::mem::forget(w);
    let r = Reader::open(&path).unwrap();
    assert_eq!(count(&r, "SELECT count(*) FROM events"), 20);
}

fn ev(timestamp: i64, comm: &str) -> Event {
    Event {
        timestamp,
        op_id: 3,
        comm: comm.into(),
        ..Default::default()
    }
}

fn rows(r: &Reader, sql: &'static str) -> Vec<(String, String, i64)> {
    let mut st = r.prepare_trusted(sql).unwrap();
    st.query_map([], causeway_store::row)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn node_and_thread_names_are_interned_across_nodes_and_appends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("names.duckdb");
    let opts = |node: &str| WriterOptions {
        node: node.into(),
        batch_rows: 2,
        ..Default::default()
    };
    let mut w = Writer::create(&path, opts("a")).unwrap();
    for (i, comm) in ["python3", "worker", "python3"].into_iter().enumerate() {
        w.append(&ev(i as i64, comm)).unwrap();
    }
    w.set_node("b", "imported:x.db", "").unwrap();
    for (i, comm) in ["worker", "", "nccl"].into_iter().enumerate() {
        w.append(&ev(i as i64, comm)).unwrap();
    }
    w.finish().unwrap();
    let mut w = Writer::open_append(&path, opts("a")).unwrap();
    w.append(&ev(9, "nccl")).unwrap();
    w.append(&ev(10, "tokenizer")).unwrap();
    w.finish().unwrap();

    let r = Reader::open(&path).unwrap();
    assert_eq!(
        rows(
            &r,
            "SELECT node, comm, count(*)::BIGINT FROM events GROUP BY ALL ORDER BY ALL"
        ),
        [
            ("a", "nccl", 1),
            ("a", "python3", 2),
            ("a", "tokenizer", 1),
            ("a", "worker", 1),
            ("b", "", 1),
            ("b", "nccl", 1),
            ("b", "worker", 1),
        ]
        .map(|(n, c, k)| (n.to_string(), c.to_string(), k))
    );
    assert_eq!(
        rows(
            &r,
            "SELECT node, max(id), max(seq)::BIGINT FROM events GROUP BY node ORDER BY node"
        ),
        [("a", "a:4", 4), ("b", "b:2", 2)].map(|(n, i, k)| (n.to_string(), i.to_string(), k))
    );
    // Each name is stored once ('' and four names), whatever node or writer used it first.
    assert_eq!(count(&r, "SELECT count(*) FROM comms"), 5);
    assert_eq!(count(&r, "SELECT count(DISTINCT comm) FROM comms"), 5);
    assert_eq!(count(&r, "SELECT count(DISTINCT node_id) FROM nodes"), 2);
}

#[test]
fn an_older_schema_is_refused_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let path = crate::common::small_store(dir.path(), 3);
    {
        let c = causeway_store::duckdb::Connection::open(&path).unwrap();
        c.execute_batch("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
            .unwrap();
    }
    let err = Writer::open_append(&path, WriterOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("schema version 1 is older") && err.hint().is_some(),
        "{msg}"
    );
    let err = Reader::open(&path).unwrap_err();
    assert!(
        err.to_string().contains("schema version 1 is older"),
        "{err}"
    );
}

#[test]
fn overhead_controller_rows_round_trip() {
    use causeway_store::{ModeSwitch, OverheadWindow, ProbeCost};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("oh.duckdb");
    let mut w = Writer::create(&path, WriterOptions::default()).unwrap();
    let cost = |mode: &str, ns| ProbeCost {
        mode: mode.into(),
        first_insn: "push".into(),
        ns_per_call: ns,
        method: "test".into(),
    };
    w.record_probe_costs(&[cost("full", 14_000.0), cost("entry_only", 6_000.0)])
        .unwrap();
    // A later calibration of the same mode replaces the earlier one.
    w.record_probe_costs(&[cost("full", 13_500.0)]).unwrap();
    w.record_mode_switches(&[ModeSwitch {
        ts_ns: 5,
        op_id: 3,
        mode: "entry_only".into(),
        previous: "full".into(),
        reason: "over_budget".into(),
        overhead_pct: 42.5,
    }])
    .unwrap();
    w.record_overhead(&[OverheadWindow {
        pid: 7,
        window_start_ns: 1,
        window_end_ns: 2,
        cpu_ns: 1_000_000,
        probe_ns: 10_000,
        calls: 3,
        budget_pct: 1.0,
    }])
    .unwrap();
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(r.schema_version(), causeway_store::schema::SCHEMA_VERSION);
    assert_eq!(count(&r, "SELECT count(*) FROM probe_costs"), 2);
    assert_eq!(
        count(
            &r,
            "SELECT ns_per_call::BIGINT FROM probe_costs WHERE mode = 'full'"
        ),
        13_500
    );
    assert_eq!(
        count(
            &r,
            "SELECT op_id FROM probe_modes WHERE mode = 'entry_only' AND reason = 'over_budget'"
        ),
        3
    );
    assert_eq!(
        count(&r, "SELECT sum(probe_ns) FROM probe_overhead"),
        10_000
    );
    // The new tables are documented for agents.
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM schema_columns WHERE table_name = 'probe_overhead' AND unit = 'ns'"
        ),
        2
    );
}

/// DuckDB's cache of written blocks after 1M events with incompressible arguments (~16 MB of
/// blocks), with or without trimming after each commit, and the events stored.
fn cached_after_a_million(trim_cache: bool) -> (i64, i64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trim.duckdb");
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: "n".into(),
            memory_limit: Some("64MB".into()),
            threads: Some(1),
            chunk_rows: 16_384,
            trim_cache,
            ..Default::default()
        },
    )
    .unwrap();
    // A 64-bit mix (splitmix64's finaliser): arguments no compression shrinks.
    let mix = |i: u64| {
        let z = (i ^ (i >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as i64
    };
    for i in 0..1_000_000u64 {
        w.append(&Event {
            timestamp: i as i64,
            op_id: 3,
            arg0: mix(i),
            arg1: mix(!i),
            comm: "t".into(),
            ..Default::default()
        })
        .unwrap();
    }
    w.flush().unwrap();
    let cached = w.cached_block_bytes().unwrap();
    w.finish().unwrap();
    assert!(
        !dir.path().join("trim.duckdb.tmp").exists(),
        "no temporary directory"
    );
    let r = Reader::open(&path).unwrap();
    (cached, count(&r, "SELECT count(*) FROM events"))
}

#[test]
fn a_trimmed_writer_drops_its_cache_of_written_blocks_and_keeps_every_event() {
    let (untrimmed, n_untrimmed) = cached_after_a_million(false);
    let (trimmed, n_trimmed) = cached_after_a_million(true);
    eprintln!("cached blocks after 1M events: {untrimmed} bytes untrimmed, {trimmed} trimmed");
    assert_eq!((n_untrimmed, n_trimmed), (1_000_000, 1_000_000));
    assert!(
        untrimmed > 12 << 20,
        "without trimming the written blocks stay cached: {untrimmed} bytes"
    );
    assert!(
        trimmed <= 8 << 20,
        "trimmed to the 8 MB limit: {trimmed} bytes (untrimmed {untrimmed})"
    );
}

#[test]
fn new_stores_use_64_kib_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blocks.duckdb");
    Writer::create(&path, WriterOptions::default())
        .unwrap()
        .finish()
        .unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(
        count(&r, "SELECT block_size FROM pragma_database_size()"),
        65_536
    );
}

fn reopening(reopen_rows: u64) -> WriterOptions {
    WriterOptions {
        node: "n".into(),
        batch_rows: 100,
        chunk_rows: 25,
        flush_interval: Duration::from_secs(3600),
        memory_limit: Some("32MB".into()),
        threads: Some(1),
        trim_cache: true,
        reopen_rows,
        timeline: Vec::new(),
    }
}

fn numbered(i: i64) -> Event {
    Event {
        timestamp: 1_000 + i,
        duration: i,
        pid: 7,
        tid: 8,
        op_id: 3,
        comm: format!("t{}", i / 70),
        ..Default::default()
    }
}

/// Reopening frees DuckDB's row-group metadata: it happens when due and only with no events
/// transaction open, and loses nothing: events, their order, thread names interned before and
/// after, processes and the node row all carry over.
#[test]
fn a_reopened_writer_keeps_every_event_and_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("re.duckdb");
    let mut w = Writer::create(&path, reopening(250)).unwrap();
    let mut reopened_at = Vec::new();
    for i in 0..1000 {
        w.append(&numbered(i)).unwrap();
        if i == 400 {
            w.upsert_process(&ProcessInfo {
                pid: 7,
                comm: "python3".into(),
                first_seen_ns: 1,
                last_seen_ns: 2,
                ..Default::default()
            })
            .unwrap();
        }
        if (i + 1) % 70 == 0 {
            let before = w.reopens();
            w = w.maybe_reopen().unwrap();
            if w.reopens() > before {
                reopened_at.push(i + 1);
            }
        }
    }
    // Commits come every 100 events, chunks of the next batch go into an open transaction
    // every 25. Due from the commit at 300 (250 asked), but at the 350th event two chunks are
    // in the open transaction: reopened at 420 (commit at 400, no chunk yet). Due again from
    // 700 (300 after 400): reopened there. Due from 1000 on: the check at 980 finds three
    // chunks open.
    assert_eq!(reopened_at, [420, 700]);
    assert_eq!(w.reopens(), 2);
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(count(&r, "SELECT count(*) FROM events"), 1000);
    assert_eq!(count(&r, "SELECT count(DISTINCT seq) FROM events"), 1000);
    // Every event kept its own number, sequence and name (t0..t14, 70 events each).
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM events WHERE seq = duration AND timestamp = 1000 + duration \
             AND comm = 't' || (duration // 70)"
        ),
        1000
    );
    // Each name interned once (comm_id 0 is the empty name).
    assert_eq!(count(&r, "SELECT count(*) FROM comms WHERE comm <> ''"), 15);
    assert_eq!(count(&r, "SELECT count(*) FROM nodes"), 1);
    assert_eq!(
        count(&r, "SELECT count(*) FROM processes WHERE comm = 'python3'"),
        1
    );
}

/// A writer that never reached `reopen_rows`, or has none, keeps its database open.
#[test]
fn a_writer_reopens_only_when_due() {
    let dir = tempfile::tempdir().unwrap();
    for (name, rows) in [("never", 0), ("late", 10_000)] {
        let path = dir.path().join(format!("{name}.duckdb"));
        let mut w = Writer::create(&path, reopening(rows)).unwrap();
        for i in 0..500 {
            w.append(&numbered(i)).unwrap();
            w = w.maybe_reopen().unwrap();
        }
        assert_eq!(w.reopens(), 0, "{name}");
        w.finish().unwrap();
        assert_eq!(
            count(&Reader::open(&path).unwrap(), "SELECT count(*) FROM events"),
            500
        );
    }
}

/// Live readers (`trace --serve`, `mcp --live`) share the writer's database: a reopen takes
/// their connections and gives them new ones on the database opened again, so they see every
/// row before and after, with their configuration still locked. While one is busy (its lock
/// held: a query or a tool call) the reopen waits for a later call instead of for the query.
#[test]
fn live_readers_follow_the_writer_across_reopens_and_a_busy_one_puts_a_reopen_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.duckdb");
    let mut w = Writer::create(&path, reopening(100)).unwrap();
    let a = w.live_reader().unwrap();
    let b = w.live_reader().unwrap();
    let seen =
        |r: &causeway_store::SharedReader| count(&r.lock().unwrap(), "SELECT count(*) FROM events");
    let mut put_off = 0;
    for i in 0..1_000 {
        w.append(&numbered(i)).unwrap();
        if i % 100 == 99 {
            w.flush().unwrap();
            assert_eq!(seen(&a), i + 1, "after {} reopens", w.reopens());
            if i == 499 {
                // A query in progress on `b`: due, but not now.
                let busy = b.lock().unwrap();
                let before = w.reopens();
                w = w.maybe_reopen().unwrap();
                assert_eq!(w.reopens(), before, "reopened under a running query");
                assert_eq!(count(&busy, "SELECT count(*) FROM events"), 500);
                put_off += 1;
                continue;
            }
        }
        w = w.maybe_reopen().unwrap();
    }
    assert_eq!(put_off, 1);
    assert!(w.reopens() >= 8, "{} reopens", w.reopens());
    assert_eq!(seen(&a), 1_000);
    assert_eq!(seen(&b), 1_000);
    assert!(
        !crate::common::can_loosen(&a.lock().unwrap()),
        "the reopened database's configuration is locked"
    );
    // A reader dropped before a reopen is forgotten, the other still follows.
    drop(b);
    for i in 1_000..1_200 {
        w.append(&numbered(i)).unwrap();
        w = w.maybe_reopen().unwrap();
    }
    w.flush().unwrap();
    assert_eq!(seen(&a), 1_200);
    w.finish().unwrap();
    assert_eq!(seen(&a), 1_200, "still readable after the recording ends");
    assert_eq!(
        count(
            &Reader::open(&path).unwrap(),
            "SELECT count(DISTINCT seq) FROM events"
        ),
        1_200
    );
}

/// A reader busy at every reopen (clients querying back to back) must not put the reopen off
/// for ever: after eight put-offs in a row the writer waits for the query to end.
#[test]
fn a_reopen_put_off_eight_times_waits_for_the_busy_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("starved.duckdb");
    let mut w = Writer::create(&path, reopening(100)).unwrap();
    let r = w.live_reader().unwrap();
    for i in 0..100 {
        w.append(&numbered(i)).unwrap();
    }
    w.flush().unwrap();
    let (held, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let busy = {
        let r = r.clone();
        std::thread::spawn(move || {
            let g = r.lock().unwrap();
            held.0.send(()).unwrap();
            release.1.recv().unwrap();
            // Still querying a while after the writer starts waiting.
            std::thread::sleep(Duration::from_millis(300));
            count(&g, "SELECT count(*) FROM events")
        })
    };
    held.1.recv().unwrap();
    for _ in 0..8 {
        w = w.maybe_reopen().unwrap();
        assert_eq!(w.reopens(), 0, "reopened under a running query");
    }
    release.0.send(()).unwrap();
    let t = std::time::Instant::now();
    w = w.maybe_reopen().unwrap();
    assert_eq!(w.reopens(), 1, "the ninth call waits and reopens");
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        busy.join().unwrap(),
        100,
        "the query ran on the old database"
    );
    assert_eq!(
        count(&r.lock().unwrap(), "SELECT count(*) FROM events"),
        100
    );
    w.finish().unwrap();
}

/// Commits smaller than a row group (a moderate event rate: the flush interval comes first)
/// must not fill the writer's memory limit: DuckDB keeps committed rows that are not yet
/// checkpointed in memory until it can spill them. Seen on a 16-core GPU machine at ~25k
/// events/s: "could not allocate block" after some 250k events, then every later commit and
/// the final checkpoint failed. The temporary directory is gone once the writer finishes.
#[test]
fn small_commits_stay_under_the_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    for every in [16_384, 50_000, 80_000] {
        let path = dir.path().join(format!("small-{every}.duckdb"));
        let mut w = Writer::create(
            &path,
            WriterOptions {
                node: "n".into(),
                chunk_rows: 16_384,
                flush_interval: Duration::from_secs(3600),
                memory_limit: Some("32MB".into()),
                threads: Some(1),
                trim_cache: true,
                reopen_rows: 16 * 122_880,
                ..WriterOptions::default()
            },
        )
        .unwrap();
        // Fields with the entropy of real calls (kernel addresses, durations, threads), so that
        // compression does not shrink the rows to nothing.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let total = 800_000;
        for i in 0..total {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.append(&Event {
                timestamp: 1_700_000_000_000_000_000 + i * 40_000 + (x % 1000) as i64,
                duration: (x % 100_000) as i64,
                pid: 949,
                tid: 949 + (x % 8) as u32,
                op_id: 3,
                arg0: (x >> 8) as i64,
                arg1: (x % 4096) as i64,
                comm: "python3".into(),
                ..Default::default()
            })
            .unwrap();
            if (i + 1) % every == 0 {
                if let Err(e) = w.flush() {
                    panic!("commits of {every}: the commit at event {i} failed: {e}");
                }
                w = w.maybe_reopen().unwrap();
            }
        }
        assert_eq!(w.lost(), 0);
        w.finish().unwrap();
        assert!(
            !dir.path()
                .join(format!("small-{every}.duckdb.tmp"))
                .exists()
        );
        let r = Reader::open(&path).unwrap();
        assert_eq!(
            count(&r, "SELECT count(*) FROM events"),
            total,
            "commits of {every}"
        );
    }
}

#[test]
fn typed_bulk_writes_commit_together_or_not_at_all() {
    use causeway_store::{ChainRow, StoreError, SystemSnapshot};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tx.duckdb");
    let mut w = Writer::create(&path, WriterOptions::default()).unwrap();
    let chain = |id: &str| ChainRow {
        chain_id: id.into(),
        node: "n".into(),
        detector: "imported".into(),
        severity: "LOW".into(),
        recommendations: "[]".into(),
        timeline: "[]".into(),
        ..ChainRow::default()
    };
    let snap = SystemSnapshot {
        ts_ns: 1,
        cpu_pct: 50.0,
        ..SystemSnapshot::default()
    };
    // A failure inside the transaction leaves none of its rows.
    let failed: Result<(), StoreError> = w.in_transaction(|w| {
        w.add_chains(&[chain("a")])?;
        w.add_system_snapshots("n", std::slice::from_ref(&snap))?;
        w.add_new_stacks([(7, &[Frame::default()][..])])?;
        // The same stack again breaks its primary key.
        w.add_new_stacks([(7, &[Frame::default()][..])])?;
        Ok(())
    });
    assert!(failed.is_err());
    // A success keeps all of them; a chain id stored twice is kept once.
    w.in_transaction(|w| -> Result<(), StoreError> {
        w.add_chains(&[chain("b"), chain("b")])?;
        w.add_system_snapshots("n", std::slice::from_ref(&snap))
    })
    .unwrap();
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(count(&r, "SELECT count(*) FROM chains"), 1);
    assert_eq!(
        count(&r, "SELECT count(*) FROM chains WHERE chain_id = 'b'"),
        1
    );
    assert_eq!(count(&r, "SELECT count(*) FROM system_snapshots"), 1);
    assert_eq!(count(&r, "SELECT count(*) FROM stack_frames"), 0);
}
