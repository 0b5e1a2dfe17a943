//! Writer memory over a long recording, with and without reopening the database
//! (`cargo bench -p causeway-store --bench reopen [-- ROW_GROUPS]`, default 200).
//!
//! Appends full row groups (122,880 events) of collector-like events with the collector's
//! writer settings (32 MB, one thread, 16,384-event chunks, cache trimmed) and prints, every 20
//! row groups, the process's RSS and glibc's heap in use (DuckDB allocates with malloc), in the
//! same run: first never reopening, then reopening every 16 row groups (the store's
//! `REOPEN_ROWS`), with the time each reopen took. Then both again with a live reader
//! (`trace --serve`, `mcp --live`) that counts the events after every row group, as a client
//! polling the recording would, with the cache kept as the collector keeps it for live readers;
//! before the twelfth pass a writer with a live reader never reopened.
//!
//! `cargo bench -p causeway-store --bench reopen -- cluster [ROW_GROUPS]` (default 200) does the
//! same for the cluster store of `causeway collect`: OTLP sum points committed 8,192 at a time
//! (the OpenTelemetry Collector's batch size), `collect`'s 1 GB memory limit, its MCP server's
//! live reader idle: never reopened (before the thirteenth pass), then reopened every
//! `REOPEN_ROWS` points and records; then reopened with the reader counting the points after
//! every row group, which loads the metadata of every row group it scans.

#![allow(clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use causeway_store::{Event, REOPEN_ROWS, Writer, WriterOptions};

const ROW_GROUP: u64 = 122_880;

/// glibc heap in use (`uordblks`), MiB.
fn heap_mib() -> f64 {
    #[allow(unsafe_code)]
    // SAFETY (unsafe_code allowed for this call only): mallinfo2 takes no argument and only
    // reads the allocator's statistics.
    let m = unsafe { libc::mallinfo2() };
    m.uordblks as f64 / 1048576.0
}

/// Resident set size, MiB.
fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / 1048576.0
}

fn run(dir: &Path, row_groups: u64, reopen_rows: u64, live: bool) {
    let path = dir.join(format!("reopen-{reopen_rows}-{live}.duckdb"));
    let opts = WriterOptions {
        node: "bench".into(),
        memory_limit: Some("32MB".into()),
        threads: Some(1),
        chunk_rows: 16_384,
        trim_cache: !live,
        flush_interval: Duration::from_secs(3600),
        reopen_rows,
        ..Default::default()
    };
    let mut w = Writer::create(&path, opts).expect("creating the store");
    let reader = live.then(|| w.live_reader().expect("a live reader"));
    let mut reopen_ms = Vec::new();
    for i in 0..row_groups * ROW_GROUP {
        let i = i as i64;
        w.append(&Event {
            timestamp: 1_700_000_000_000_000_000 + i * 10_000,
            duration: 1_000 + (i * 7_919) % 5_000,
            pid: 1_000 + (i % 2) as u32,
            tid: 2_000 + (i % 2) as u32,
            comm: "workload".into(),
            op_id: 3,
            arg0: 0x7f00_0000_0000 + (i % 64),
            arg1: 256,
            cgroup_id: 12_345,
            ..Default::default()
        })
        .expect("appending");
        if (i as u64 + 1).is_multiple_of(ROW_GROUP) {
            let (before, t) = (w.reopens(), Instant::now());
            w = w.maybe_reopen().expect("reopening");
            if w.reopens() > before {
                reopen_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let rg = (i as u64 + 1) / ROW_GROUP;
            if let Some(r) = &reader {
                let r = r.lock().expect("the reader");
                let n: i64 = r
                    .prepare_trusted("SELECT count(*) FROM events")
                    .and_then(|mut st| {
                        st.query_row([], |row| row.get(0)).map_err(|e| {
                            causeway_store::StoreError::Query {
                                message: e.to_string(),
                                hint: String::new(),
                            }
                        })
                    })
                    .expect("counting");
                assert!(
                    n as u64 >= (rg - 1) * ROW_GROUP,
                    "the reader sees {n} events"
                );
            }
            if rg.is_multiple_of(20) {
                println!(
                    "  {rg:4} row groups: RSS {:6.1} MiB, heap in use {:6.1} MiB",
                    rss_mib(),
                    heap_mib()
                );
            }
        }
    }
    w.finish().expect("finishing");
    print_reopens(reopen_ms);
}

fn print_reopens(mut reopen_ms: Vec<f64>) {
    if !reopen_ms.is_empty() {
        reopen_ms.sort_by(f64::total_cmp);
        println!(
            "  {} reopens: {:.1} ms median, {:.1}-{:.1} ms",
            reopen_ms.len(),
            reopen_ms[reopen_ms.len() / 2],
            reopen_ms[0],
            reopen_ms[reopen_ms.len() - 1]
        );
    }
}

/// The cluster store (`collect`) committing `row_groups` row groups of points.
fn run_cluster(dir: &Path, row_groups: u64, reopen_rows: u64, counting: bool) {
    use causeway_store::received::{CollectedStore, MetricPoint, Received};
    use std::sync::Arc;
    const BATCH: u64 = 8_192;
    let path = dir.join(format!("cluster-{reopen_rows}-{counting}.duckdb"));
    let opts = WriterOptions {
        node: "collector".into(),
        memory_limit: Some("1GB".into()),
        reopen_rows,
        ..Default::default()
    };
    let mut s = CollectedStore::create(&path, opts).expect("creating the store");
    let reader = s.live_reader().expect("a live reader");
    let resource: Arc<str> = Arc::from("{\"host.name\":\"gpu-node-01\"}");
    let (scope, unit): (Arc<str>, Arc<str>) = (Arc::from("causeway"), Arc::from("1"));
    let metrics: Vec<Arc<str>> = (0..16)
        .map(|m| Arc::from(format!("causeway.op.calls.{m}").as_str()))
        .collect();
    let mut reopen_ms = Vec::new();
    let (mut sent, mut next_report) = (0u64, ROW_GROUP);
    while sent < row_groups * ROW_GROUP {
        let points = (sent..sent + BATCH)
            .map(|i| MetricPoint {
                node: format!("gpu-node-{:02}", i % 8),
                resource: resource.clone(),
                scope: scope.clone(),
                metric: metrics[(i % 16) as usize].clone(),
                unit: unit.clone(),
                kind: "sum",
                monotonic: Some(true),
                temporality: "cumulative",
                attributes: format!("{{\"pid\":{},\"op\":\"cudaLaunchKernel\"}}", 1_000 + i % 64),
                start_ns: 1_700_000_000_000_000_000,
                time_ns: 1_700_000_000_000_000_000 + i as i64 * 1_000_000,
                value: Some((i * 7_919 % 1_000_003) as f64),
                ..Default::default()
            })
            .collect();
        s.store(&Received {
            points,
            ..Default::default()
        })
        .expect("storing");
        sent += BATCH;
        let (before, t) = (s.reopens(), Instant::now());
        s = s.maybe_reopen().expect("reopening");
        if s.reopens() > before {
            reopen_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        if sent >= next_report {
            next_report += ROW_GROUP;
            let rg = sent / ROW_GROUP;
            if counting {
                let n: i64 = reader
                    .lock()
                    .expect("the reader")
                    .prepare_trusted("SELECT count(*) FROM metric_points")
                    .expect("preparing")
                    .query_row([], |row| row.get(0))
                    .expect("counting");
                assert_eq!(n as u64, sent, "the reader sees every committed point");
            }
            if rg.is_multiple_of(20) {
                // DuckDB's own account: blocks it caches (bounded by the memory limit) apart
                // from the rest (metadata and the like, which the limit does not bound).
                let (cached, other): (i64, i64) = reader
                    .lock()
                    .expect("the reader")
                    .prepare_trusted(
                        "SELECT coalesce(sum(memory_usage_bytes) FILTER (tag IN ('BASE_TABLE', 'IN_MEMORY_TABLE')), 0)::BIGINT,
                                coalesce(sum(memory_usage_bytes) FILTER (tag NOT IN ('BASE_TABLE', 'IN_MEMORY_TABLE')), 0)::BIGINT
                         FROM duckdb_memory()",
                    )
                    .expect("preparing")
                    .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))
                    .expect("reading duckdb_memory()");
                println!(
                    "  {rg:4} row groups: RSS {:6.1} MiB, heap in use {:6.1} MiB, DuckDB: table blocks {:6.1} MiB, other {:5.1} MiB",
                    rss_mib(),
                    heap_mib(),
                    cached as f64 / 1048576.0,
                    other as f64 / 1048576.0
                );
            }
        }
    }
    s.finish().expect("finishing");
    print_reopens(reopen_ms);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cluster = args.iter().any(|a| a == "cluster");
    let row_groups = args.iter().find_map(|a| a.parse().ok()).unwrap_or(200);
    let dir = tempfile::tempdir().expect("a temporary directory");
    if cluster {
        println!("cluster store, never reopened (before the thirteenth pass):");
        run_cluster(dir.path(), row_groups, 0, false);
        println!("cluster store, reopened every 16 row groups:");
        run_cluster(dir.path(), row_groups, REOPEN_ROWS, false);
        println!("cluster store, reopened, the reader counting every point after each row group:");
        run_cluster(dir.path(), row_groups, REOPEN_ROWS, true);
        return;
    }
    println!("never reopened:");
    run(dir.path(), row_groups, 0, false);
    println!("reopened every 16 row groups:");
    run(dir.path(), row_groups, REOPEN_ROWS, false);
    println!("with a live reader, never reopened (before the twelfth pass):");
    run(dir.path(), row_groups, 0, true);
    println!("with a live reader, reopened every 16 row groups:");
    run(dir.path(), row_groups, REOPEN_ROWS, true);
}
