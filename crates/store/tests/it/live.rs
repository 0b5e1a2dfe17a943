//! A reader on a live writer's database: it sees rows as batches commit, cannot change the
//! configuration, and the writer keeps writing and finishes a complete file.

use causeway_store::{Event, Reader, Writer, WriterOptions};

use crate::reader::run;

fn launch(i: i64) -> Event {
    Event {
        timestamp: 1_000_000_000 + i * 1_000,
        duration: 1_000,
        pid: 42,
        tid: 43,
        comm: "python3".into(),
        op_id: 3,
        ..Event::default()
    }
}

/// A new store `live.duckdb` in `dir` and its writer (node `n`).
fn writer(dir: &std::path::Path) -> (std::path::PathBuf, Writer) {
    let path = dir.join("live.duckdb");
    let w = Writer::create(
        &path,
        WriterOptions {
            node: "n".into(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    (path, w)
}

#[test]
fn live_reader_sees_committed_batches_while_the_writer_records() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut w) = writer(dir.path());
    let r = w.live_reader().unwrap();
    let r = r.lock().unwrap();
    assert!(r.is_live());
    let count = |r: &Reader| run(r, "SELECT count(*) AS n FROM events").unwrap().rows[0][0].clone();
    assert_eq!(count(&r), serde_json::json!(0));
    for i in 0..500 {
        w.append(&launch(i)).unwrap();
    }
    w.flush().unwrap();
    assert_eq!(count(&r), serde_json::json!(500));
    // The configuration of the shared instance is locked: no outside query can loosen it.
    assert!(
        !crate::common::can_loosen(&r),
        "SET succeeded on a live reader"
    );
    // A guarded query runs in a transaction that is rolled back: the reader leaves no
    // transaction open, so the writer keeps committing.
    for i in 500..1_000 {
        w.append(&launch(i)).unwrap();
    }
    w.flush().unwrap();
    assert_eq!(count(&r), serde_json::json!(1_000));
    w.finish().unwrap();
    drop(r);
    let after = Reader::open(&path).unwrap();
    assert_eq!(count(&after), serde_json::json!(1_000));
}

/// Finishing while a live reader queries the store (as `trace --otlp-endpoint`'s pusher does
/// when the recording ends) leaves a complete file. Once, under load, the final checkpoint
/// failed with "Cannot CHECKPOINT: there are other write transactions active"; `finish` now
/// retries it for a while instead of failing the recording.
#[test]
fn finish_while_a_live_reader_queries() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut w) = writer(dir.path());
    for i in 0..100 {
        w.append(&launch(i)).unwrap();
    }
    w.flush().unwrap();
    let r = w.live_reader().unwrap();
    let (started, wait) = std::sync::mpsc::channel();
    let reading = std::thread::spawn(move || {
        let r = r.lock().unwrap();
        let mut st = r
            .prepare_trusted(
                "SELECT count(*) FROM event_rows, range(5000000) a WHERE a.range % 7 = 3",
            )
            .unwrap();
        started.send(()).unwrap();
        st.query_row([], |row| row.get::<_, i64>(0)).unwrap()
    });
    wait.recv().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    w.finish().expect("the checkpoint waits for the reader");
    assert!(reading.join().unwrap() > 0);
    let r = Reader::open(&path).unwrap();
    assert_eq!(
        run(&r, "SELECT count(*) AS n FROM events").unwrap().rows[0][0],
        serde_json::json!(100)
    );
}

/// Heavy grouping over every segment: what a report asks of a served agent.
const HEAVY: &str = "SELECT arg0, quantile_disc(duration, 0.5)::BIGINT, count(*) \
                     FROM events GROUP BY arg0";

/// A served recording whose readers' queries take the DuckDB memory its writer needs (a
/// report over 30 segments in the writer's limit) loses no event: the writer stops their
/// queries and writes its transaction again. Before, the batch was lost (`write_failed`).
#[test]
fn readers_that_take_the_memory_do_not_cost_the_recording_events() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let dir = tempfile::tempdir().unwrap();
    let mut timeline = Vec::new();
    let mut ts = 0;
    for s in 0..30 {
        let p = dir.path().join(format!("seg-{s:04}.duckdb"));
        let mut w = Writer::create(&p, WriterOptions::default()).unwrap();
        for _ in 0..20_000 {
            w.append(&Event {
                arg0: ts % 5_000,
                duration: ts * 7_919 % 100_000,
                ..launch(ts)
            })
            .unwrap();
            ts += 1;
        }
        w.finish().unwrap();
        timeline.push(p);
    }
    let before = ts;
    let mut w = Writer::create(
        &dir.path().join("open.duckdb"),
        WriterOptions {
            node: "n".into(),
            memory_limit: Some("32MB".into()),
            threads: Some(1),
            reopen_rows: causeway_store::REOPEN_ROWS,
            timeline,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let held = w.live_readers().unwrap();
    let readers: Vec<_> = held
        .iter()
        .cloned()
        .map(|r| {
            let (stop, failed) = (stop.clone(), failed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let g = r.lock().unwrap();
                    let ran = g.prepare_trusted(HEAVY).map(|mut st| {
                        st.query_map([], |row| row.get::<_, i64>(0))
                            .and_then(Iterator::collect::<duckdb::Result<Vec<_>>>)
                    });
                    if !matches!(ran, Ok(Ok(_))) {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    drop(g);
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            })
        })
        .collect();
    for _ in 0..40 {
        for _ in 0..5_000 {
            w.append(&launch(ts)).unwrap();
            ts += 1;
        }
        w.flush().unwrap();
        w = w.maybe_reopen().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for t in readers {
        t.join().unwrap();
    }
    assert_eq!(w.lost(), 0, "events lost to a reader's query");
    // A stopped query leaves its reader able to answer the next one.
    for r in w.live_readers().unwrap().iter().chain(&held) {
        let g = r.lock().unwrap();
        assert!(
            g.prepare_trusted("SELECT count(*) > 0 FROM events")
                .unwrap()
                .query_row([], |row| row.get::<_, bool>(0))
                .unwrap()
        );
    }
    assert!(
        failed.load(Ordering::Relaxed) > 0,
        "the readers' queries never ran short of memory: the test shows nothing"
    );
    let path = w.path().to_path_buf();
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    let n = run(&r, "SELECT count(*), count(DISTINCT seq) FROM events").unwrap();
    assert_eq!(n.rows[0][0], serde_json::json!(ts - before));
    assert_eq!(n.rows[0][1], serde_json::json!(ts - before));
}
