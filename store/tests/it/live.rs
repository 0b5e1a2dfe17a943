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

#[test]
fn live_reader_sees_committed_batches_while_the_writer_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.duckdb");
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: "n".into(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let r = w.live_reader().unwrap();
    assert!(r.is_live());
    let count = |r: &Reader| run(r, "SELECT count(*) AS n FROM events").unwrap().rows[0][0].clone();
    assert_eq!(count(&r), serde_json::json!(0));
    for i in 0..500 {
        w.append(&launch(i)).unwrap();
    }
    w.flush().unwrap();
    assert_eq!(count(&r), serde_json::json!(500));
    // The configuration of the shared instance is locked: no outside query can loosen it.
    let set = r
        .prepare_trusted("SET enable_external_access = true")
        .and_then(|mut s| {
            s.execute([])
                .map_err(|e| causeway_store::StoreError::Query {
                    message: e.to_string(),
                    hint: String::new(),
                })
        });
    assert!(set.is_err(), "SET succeeded on a live reader");
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
