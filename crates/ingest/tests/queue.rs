//! The ingest queue over a real DuckDB file: group commits answer every submitter after the
//! commit, a full queue refuses instead of dropping, shutdown commits what is queued, the store
//! reopened on the way loses nothing.

use std::sync::Arc;
use std::sync::mpsc::channel;

use causeway_ingest::received::{CollectedStore, MetricPoint, Received};
use causeway_ingest::{Ingest, IngestOptions, SubmitError};
use causeway_store::{Reader, WriterOptions};

fn rows(n: usize) -> Received {
    let resource: Arc<str> = Arc::from("{}");
    let metric: Arc<str> = Arc::from("m");
    Received {
        points: (0..n)
            .map(|i| MetricPoint {
                node: "n".into(),
                resource: resource.clone(),
                scope: Arc::from(""),
                metric: metric.clone(),
                unit: Arc::from(""),
                kind: "gauge",
                attributes: "{}".into(),
                time_ns: i as i64,
                value: Some(1.0),
                ..MetricPoint::default()
            })
            .collect(),
        ..Received::default()
    }
}

#[test]
fn a_full_queue_refuses_and_nothing_accepted_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.duckdb");
    // Reopened every 500 points on the way (as `collect` does every 16 row groups).
    let opts = WriterOptions {
        reopen_rows: 500,
        ..WriterOptions::default()
    };
    let store = CollectedStore::create(&path, opts).unwrap();
    let ingest = Ingest::start(
        store,
        IngestOptions {
            max_queued_items: 1_000,
            max_batch_items: 10_000,
        },
    )
    .unwrap();
    let (tx, rx) = channel();
    let mut accepted = 0u64;
    let mut busy = 0u64;
    for _ in 0..200 {
        let tx = tx.clone();
        match ingest.submit(rows(400), Box::new(move |r| tx.send(r).unwrap())) {
            Ok(()) => accepted += 1,
            Err(SubmitError::Busy { .. }) => busy += 1,
            Err(e) => panic!("{e}"),
        }
    }
    drop(tx);
    assert!(
        busy > 0,
        "200 x 400 points cannot all fit a 1,000-point queue at once"
    );
    let stats = ingest.shutdown().unwrap();
    let answered: Vec<_> = rx.iter().collect();
    assert_eq!(answered.len() as u64, accepted);
    assert!(answered.iter().all(Result::is_ok));
    assert_eq!(stats.requests_busy, busy);
    assert_eq!(stats.stored_items, accepted * 400);
    eprintln!("{accepted} accepted, {} reopens", stats.store_reopens);
    // A commit holds at most the 1,000 queued points: at most 499 + 1,000 between reopens.
    assert!(
        stats.store_reopens >= accepted * 400 / 1_500 && stats.store_reopens > 0,
        "{} reopens for {} points",
        stats.store_reopens,
        accepted * 400
    );
    let r = Reader::open(&path).unwrap();
    let n: i64 = r
        .prepare_trusted("SELECT count(*) FROM metric_points")
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap();
    assert_eq!(n as u64, accepted * 400);
    assert_eq!(
        ingest.submit(rows(1), Box::new(|_| {})),
        Err(SubmitError::Closed)
    );
}
