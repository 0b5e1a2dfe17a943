//! Foundation benchmark (`cargo bench -p causeway-store --bench foundation`): ingest rate into
//! a DuckDB file, and the per-op statistics of `stats` over the same events versus the same
//! aggregation in SQLite (the reference tool's store) measured in the same run (the import
//! time of the vLLM trace is `cargo bench -p causeway-import --bench import`).
//! CAUSEWAY_BENCH_EVENTS sets the event count (default 10,000,000).

// A benchmark's figures are its output: printing them to stdout is the point.
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::time::Instant;

use causeway_store::{Event, Reader, Writer, WriterOptions};

/// A deterministic mix resembling a training job: launches, copies, syncs, switches.
fn synthetic(i: u64, state: &mut u64) -> Event {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    let r = *state;
    let (op_id, base) = match r % 100 {
        0..=54 => (3u16, 8_000i64),
        55..=74 => (50, 6_000),
        75..=84 => (7, 20_000),
        85..=86 => (5, 400_000),
        _ => (100, 50_000),
    };
    Event {
        timestamp: 1_780_000_000_000_000_000 + (i as i64) * 1_000,
        duration: base + (r >> 40) as i64 % (base * 4),
        pid: 4_000 + (r % 4) as u32,
        tid: 4_000 + (r % 16) as u32,
        comm: if r % 16 < 12 {
            "python3"
        } else {
            "pt_data_worker"
        }
        .to_string(),
        op_id,
        arg0: (r % 1_048_576) as i64,
        arg1: (r % 3) as i64,
        ..Event::default()
    }
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn sqlite_copy(events: u64, path: &Path) -> f64 {
    let mut c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF;
         CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, timestamp INTEGER NOT NULL,
           pid INTEGER NOT NULL, tid INTEGER NOT NULL, source INTEGER NOT NULL, op INTEGER NOT NULL,
           duration INTEGER NOT NULL, gpu_id INTEGER NOT NULL DEFAULT 0, arg0 INTEGER NOT NULL DEFAULT 0,
           arg1 INTEGER NOT NULL DEFAULT 0, ret_code INTEGER NOT NULL DEFAULT 0,
           stack_hash INTEGER NOT NULL DEFAULT 0);
         CREATE INDEX idx_events_timestamp ON events(timestamp);
         CREATE INDEX idx_events_pid ON events(pid);
         CREATE INDEX idx_events_source_op_stack ON events(source, op, stack_hash);",
    )
    .unwrap();
    let started = Instant::now();
    let tx = c.transaction().unwrap();
    {
        let mut st = tx
            .prepare("INSERT INTO events (timestamp, pid, tid, source, op, duration, arg0, arg1) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
            .unwrap();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for i in 0..events {
            let e = synthetic(i, &mut state);
            let source = causeway_store::catalog::op_by_id(e.op_id)
                .unwrap()
                .source
                .id();
            st.execute(rusqlite::params![
                e.timestamp,
                e.pid,
                e.tid,
                source,
                e.op_id,
                e.duration,
                e.arg0,
                e.arg1
            ])
            .unwrap();
        }
    }
    tx.commit().unwrap();
    started.elapsed().as_secs_f64()
}

/// The per-op statistics `stats` computes (the analysis crate's query, a floor up, less its
/// window, pid and node filters): count, nearest-rank p50/p95/p99, max, mean, total.
const DUCKDB_STATS_SQL: &str = "
WITH g AS (
    SELECT op_id,
           count(*)::BIGINT AS n,
           quantile_disc(duration, [0.5, 0.95, 0.99]) AS q,
           max(duration) AS mx,
           avg(duration)::DOUBLE AS mean,
           sum(duration)::BIGINT AS total
    FROM event_rows
    GROUP BY op_id
)
SELECT o.source, o.op, g.n, g.q[1], g.q[2], g.q[3], g.mx, g.mean, g.total
FROM g JOIN ops o ON o.op_id = g.op_id JOIN sources s ON s.source = o.source
ORDER BY s.source_id, g.n DESC, o.op";

/// The same statistics in DuckDB: the time, the ops and the events they count.
fn duckdb_stats(r: &Reader) -> (f64, usize, u64) {
    let started = Instant::now();
    let counts: Vec<i64> = r
        .prepare_trusted(DUCKDB_STATS_SQL)
        .unwrap()
        .query_map([], |row| row.get(2))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let events = counts.iter().sum::<i64>() as u64;
    (started.elapsed().as_secs_f64(), counts.len(), events)
}

/// The same statistics in SQLite: counts, mean, max, total and nearest-rank p50/p95/p99.
fn sqlite_stats(path: &Path) -> (f64, usize) {
    let c = rusqlite::Connection::open(path).unwrap();
    let started = Instant::now();
    let mut st = c
        .prepare(
            "WITH r AS (
               SELECT source, op, duration,
                      ROW_NUMBER() OVER (PARTITION BY source, op ORDER BY duration) AS rn,
                      COUNT(*) OVER (PARTITION BY source, op) AS n
               FROM events)
             SELECT source, op, n, max(duration), avg(duration), sum(duration),
                    max(CASE WHEN rn = (n + 1) / 2 THEN duration END),
                    max(CASE WHEN rn = (95 * n + 99) / 100 THEN duration END),
                    max(CASE WHEN rn = (99 * n + 99) / 100 THEN duration END)
             FROM r GROUP BY source, op",
        )
        .unwrap();
    let rows = st.query_map([], |r| r.get::<_, i64>(2)).unwrap().count();
    (started.elapsed().as_secs_f64(), rows)
}

fn main() {
    let n: u64 = std::env::var("CAUSEWAY_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(10_000_000);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "causeway foundation benchmark: {n} synthetic events, {} CPUs",
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );

    // 1. Ingest through the writer (Arrow batches via the Appender) into a file.
    let path = dir.path().join("bench.duckdb");
    let started = Instant::now();
    let mut opts = WriterOptions {
        node: "bench".into(),
        ..WriterOptions::default()
    };
    if let Some(b) = std::env::var("CAUSEWAY_BENCH_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        opts.batch_rows = b;
    }
    println!("writer batch: {} rows", opts.batch_rows);
    let mut w = Writer::create(&path, opts).unwrap();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..n {
        w.append(&synthetic(i, &mut state)).unwrap();
    }
    w.finish().unwrap();
    let ingest = started.elapsed().as_secs_f64();
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    println!(
        "ingest: {:.2} s, {:.0} events/s, file {:.0} MB, peak RSS {:.0} MB",
        ingest,
        n as f64 / ingest,
        size as f64 / 1e6,
        peak_rss_mb()
    );

    // 2. stats over every event (best of 3, after one warm-up open).
    let r = Reader::open(&path).unwrap();
    let mut best = f64::MAX;
    let mut ops = 0;
    for _ in 0..3 {
        let (secs, op_rows, events) = duckdb_stats(&r);
        best = best.min(secs);
        ops = op_rows;
        assert_eq!(events, n);
    }
    println!("stats (DuckDB): {:.3} s for {ops} ops", best);

    // 3. The same aggregation in SQLite, the reference tool's store.
    let sq = dir.path().join("bench.sqlite");
    let load = sqlite_copy(n, &sq);
    let (sqlite_s, rows) = sqlite_stats(&sq);
    assert_eq!(rows, ops);
    println!(
        "stats (SQLite, same data, same statistics): {:.3} s (load {:.1} s)",
        sqlite_s, load
    );
    println!(
        "ratio: DuckDB stats is {:.1}x faster than SQLite",
        sqlite_s / best
    );
}
