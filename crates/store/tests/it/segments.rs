//! Rolling segments: a writer that rotates into a new file keeps its sequence numbers and
//! live readers, the closed file is complete on its own, live readers see the closed files and
//! the open one as one trace (repeated rows once), a directory of segments opens as one trace,
//! and a killed writer's file is sealed.

use causeway_hint::Hint as _;
use std::path::{Path, PathBuf};

use causeway_store::{
    Event, Frame, KernelName, ProcessInfo, Reader, ReaderOptions, Writer, WriterOptions,
};

fn ev(ts: i64, pid: u32) -> Event {
    Event {
        timestamp: ts,
        duration: 1_000,
        pid,
        tid: pid,
        comm: "python3".into(),
        op_id: 1,
        arg0: 0,
        arg1: 0,
        ret_code: 0,
        gpu_id: 0,
        stack_hash: 7,
        cgroup_id: 0,
        rank: None,
    }
}

fn process(pid: u32, last: i64) -> ProcessInfo {
    ProcessInfo {
        pid,
        comm: "python3".into(),
        first_seen_ns: 1,
        last_seen_ns: last,
        ..Default::default()
    }
}

fn frame() -> Vec<Frame> {
    vec![Frame {
        ip: 0x10,
        symbol: "cudaLaunchKernel".into(),
        module: "libcudart.so.12".into(),
        offset: 0,
    }]
}

fn ints(r: &Reader, sql: &'static str) -> Vec<i64> {
    let mut st = r.prepare_trusted(sql).unwrap();
    st.query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Writes `n` events from `start` and the rows every segment repeats.
fn segment_rows(w: &mut Writer, start: i64, n: i64, last_seen: i64) {
    for i in 0..n {
        w.append(&ev(start + i, 10)).unwrap();
    }
    w.upsert_process(&process(10, last_seen)).unwrap();
    w.add_stack(7, &frame()).unwrap();
    w.flush().unwrap();
}

/// Event rows joined with their thread names, as the analysis's trusted queries read them.
const INTERNAL_JOIN: &str = "SELECT count(*) FROM event_rows e JOIN comms c USING (comm_id) \
                             WHERE c.comm = 'python3'";

fn closed_name(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("seg-{i}.duckdb"))
}

#[test]
fn a_rotated_writer_serves_its_segments_as_one_trace() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("open")).unwrap();
    let open0 = dir.path().join("open/seg-0.duckdb");
    let mut w = Writer::create(
        &open0,
        WriterOptions {
            node: "n1".into(),
            ..Default::default()
        },
    )
    .unwrap();
    let live = w.live_readers().unwrap();
    segment_rows(&mut w, 1_000, 100, 5);

    let mut closed = Vec::new();
    for seg in 1..3 {
        let prev_open = dir.path().join(format!("open/seg-{}.duckdb", seg - 1));
        let prev_closed = closed_name(dir.path(), seg - 1);
        closed.push(prev_closed.clone());
        // The second segment is prepared beforehand (the agent's way), the third made at once.
        let next = dir.path().join(format!("open/seg-{seg}.duckdb"));
        let prepared = seg == 1;
        if prepared {
            Writer::prepare(&next, w.options()).unwrap();
        }
        w = w
            .rotate(&next, prepared, closed.clone(), |old| {
                assert_eq!(old, prev_open);
                std::fs::rename(old, &prev_closed)
            })
            .unwrap();
        segment_rows(&mut w, 1_000 + seg as i64 * 1_000, 100, 5 + seg as i64);
    }
    // The live readers: one timeline, the process and stack once, the newest process row.
    let r = live[0].lock().unwrap();
    assert_eq!(ints(&r, "SELECT count(*) FROM events"), vec![300]);
    assert_eq!(
        ints(&r, "SELECT count(DISTINCT seq) FROM events"),
        vec![300],
        "sequence numbers continue across segments"
    );
    assert_eq!(
        ints(&r, "SELECT last_seen_ns FROM processes"),
        vec![7],
        "one process row, the newest segment's"
    );
    assert_eq!(ints(&r, "SELECT count(*) FROM stack_frames"), vec![1]);
    assert_eq!(ints(&r, "SELECT count(*) FROM nodes"), vec![1]);
    assert_eq!(
        ints(&r, INTERNAL_JOIN),
        vec![300],
        "the analysis's own tables too"
    );
    drop(r);

    // Each closed segment is complete on its own.
    for (i, p) in closed.iter().enumerate() {
        let r = Reader::open(p).unwrap();
        assert_eq!(ints(&r, "SELECT count(*) FROM events"), vec![100], "{i}");
        assert_eq!(ints(&r, "SELECT count(*) FROM processes"), vec![1], "{i}");
    }
    w.finish().unwrap();
    drop(live);
    std::fs::rename(
        dir.path().join("open/seg-2.duckdb"),
        closed_name(dir.path(), 2),
    )
    .unwrap();

    // The directory: every closed segment as one trace.
    let r = Reader::open(dir.path()).unwrap();
    assert_eq!(ints(&r, "SELECT count(*) FROM events"), vec![300]);
    assert_eq!(ints(&r, "SELECT min(timestamp) FROM events"), vec![1_000]);
    assert_eq!(ints(&r, "SELECT last_seen_ns FROM processes"), vec![7]);
    assert_eq!(ints(&r, INTERNAL_JOIN), vec![300]);
    let sql = causeway_sqlguard::guard(
        "SELECT op, count(*) FROM events GROUP BY op",
        r.policy(),
        None,
    )
    .unwrap();
    let res = r
        .query(&sql, &causeway_store::QueryLimits::default())
        .unwrap();
    assert_eq!(res.rows.len(), 1);
}

#[test]
fn an_empty_directory_is_an_error_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let e = Reader::open(dir.path()).unwrap_err();
    assert!(e.to_string().contains("no closed segment"), "{e}");
    assert!(e.hint().is_some());
}

#[test]
fn a_killed_writers_file_is_sealed_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.duckdb");
    let mut w = Writer::create(&path, WriterOptions::default()).unwrap();
    let sid = w
        .begin_session(&causeway_store::SessionInfo {
            started_ns: 500,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(sid, 1);
    for i in 0..10 {
        w.append(&ev(1_000 + i, 3)).unwrap();
    }
    w.flush().unwrap();
    // Dropped without finish: what a SIGKILL leaves (the WAL beside the file).
    drop(w);
    Writer::seal(&path).unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(ints(&r, "SELECT count(*) FROM events"), vec![10]);
    assert_eq!(
        ints(&r, "SELECT stopped_ns FROM sessions"),
        vec![1_009 + 1_000],
        "the session ends at its last event"
    );
}

/// The store's own views over many segments read the combined tables: one join over all of
/// them. A union of each segment's `kernel_launches` view held a hash table per segment at
/// once, and counting the launches of 50 segments ran out of a 64 MB limit.
#[test]
fn timeline_views_read_the_combined_tables() {
    let dir = tempfile::tempdir().unwrap();
    let launch = causeway_store::catalog::op_by_name("cudaLaunchKernel")
        .unwrap()
        .id;
    let segments = 50i64;
    for s in 0..segments {
        let mut w = Writer::create(
            &dir.path().join(format!("seg-{s:04}.duckdb")),
            WriterOptions::default(),
        )
        .unwrap();
        for i in 0..100 {
            w.append(&Event {
                op_id: launch,
                arg0: 0x1000 + i % 10,
                ..ev(s * 1_000 + i, 10)
            })
            .unwrap();
        }
        let names: Vec<KernelName> = (0..10u32)
            .map(|k| KernelName {
                pid: 10,
                address: 0x1000 + i64::from(k),
                kernel_id: k + 1,
                name: format!("kernel_{k}"),
                symbol: format!("_Z8kernel_{k}v"),
                module: "libk.so".into(),
            })
            .collect();
        w.record_kernels(&names).unwrap();
        w.finish().unwrap();
    }
    let r = Reader::open_with(
        dir.path(),
        &ReaderOptions {
            memory_limit: "64MB".into(),
            threads: 1,
        },
    )
    .unwrap();
    assert_eq!(
        ints(&r, "SELECT count(*) FROM kernel_launches"),
        vec![segments * 100]
    );
    assert_eq!(
        ints(
            &r,
            "SELECT count(*) FROM kernel_launches WHERE kernel = 'kernel_3' AND arg0 = 4099"
        ),
        vec![segments * 10]
    );
    // Each of the store's views is defined once over the timeline's tables.
    assert_eq!(
        ints(
            &r,
            "SELECT count(*) FROM duckdb_views() WHERE view_name IN \
             ('events', 'event_data', 'kernel_launches', 'stacks') \
             AND database_name = current_database() AND sql NOT LIKE '%UNION%'"
        ),
        vec![4]
    );
}
