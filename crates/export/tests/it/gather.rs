//! The incremental gatherer of the live exporters: updated while a recording grows (new events on
//! a node, a second node, more kernel windows), it gives exactly the facts a fresh gather of the
//! whole store gives, and after the first read its cost follows the new events only.

use std::time::Instant;

use causeway_export::gather::{Gatherer, gather};
use causeway_store::{Event, HistogramBucket, OpCount, Writer, WriterOptions};

use crate::fixture::{LAUNCH, MEMCPY, SCHED_SWITCH, SYNC, T0};

fn event(i: i64, pid: u32, op_id: u16) -> Event {
    Event {
        timestamp: T0 + i * 1_000,
        duration: 1_000 + (i * 7919) % 5_000_000,
        pid,
        tid: pid,
        comm: "python3".into(),
        op_id,
        arg0: 4096,
        arg1: i % 3,
        ..Event::default()
    }
}

fn window(w: &mut Writer, k: i64, pid: u32) {
    let (ws, we) = (T0 + k * 1_000_000_000, T0 + (k + 1) * 1_000_000_000);
    w.record_op_counts(&[OpCount {
        pid,
        op_id: LAUNCH,
        window_start_ns: ws,
        window_end_ns: we,
        calls: 10 + k as u64,
        stored: 8,
        total_ns: 50_000,
        bytes: 0,
    }])
    .unwrap();
    w.record_histogram(&[HistogramBucket {
        pid,
        op_id: LAUNCH,
        window_start_ns: ws,
        window_end_ns: we,
        log2_bucket: (12 + k % 3) as u8,
        count: 10 + k as u64,
    }])
    .unwrap();
}

#[test]
fn updates_while_recording_equal_a_fresh_gather() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.duckdb");
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: "gpu-a".into(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let r = w.live_reader().unwrap();
    let r = r.lock().unwrap();
    let mut g = Gatherer::default();
    assert_eq!(g.update(&r).unwrap(), gather(&r).unwrap(), "empty store");

    let ops = [LAUNCH, MEMCPY, SYNC, SCHED_SWITCH];
    let mut i = 0i64;
    for round in 0..4 {
        for _ in 0..2_500 {
            w.append(&event(i, 100 + (i % 2) as u32, ops[(i % 4) as usize]))
                .unwrap();
            i += 1;
        }
        window(&mut w, round, 100);
        if round == 2 {
            // A second node joins (its sequence numbers start at 0 again).
            w.set_node("gpu-b", "recorded", "").unwrap();
            for j in 0..500 {
                w.append(&event(j, 200, ops[(j % 4) as usize])).unwrap();
            }
            window(&mut w, round, 200);
            w.set_node("gpu-a", "recorded", "").unwrap();
        }
        w.flush().unwrap();
        let live = g.update(&r).unwrap();
        let fresh = gather(&r).unwrap();
        assert_eq!(live, fresh, "after round {round}");
        let stored: u64 = live
            .ops
            .values()
            .filter_map(|o| o.stored.as_ref())
            .map(|s| s.count)
            .sum();
        let switches: i64 = live.off_cpu.iter().map(|o| o.switches).sum();
        let extra = if round >= 2 { 500 } else { 0 };
        assert_eq!(stored as i64 + switches, i + extra, "every event once");
    }
    // Nothing new: the same facts again.
    assert_eq!(g.update(&r).unwrap(), gather(&r).unwrap());
    w.finish().unwrap();
}

/// Cost of a push on a long recording: a fresh gather against the incremental update after
/// 100,000 new events, on the same live store.
/// `cargo test --release -p causeway-export --test it gather::incremental_timing -- --ignored --nocapture`
/// (`CAUSEWAY_BENCH_EVENTS`, default 5,000,000 events before the update).
#[test]
#[ignore = "timing; run explicitly"]
fn incremental_timing() {
    let n: i64 = std::env::var("CAUSEWAY_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000_000);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.duckdb");
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: "bench".into(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let ops = [LAUNCH, MEMCPY, SYNC, SCHED_SWITCH];
    for i in 0..n {
        w.append(&event(i, 1_000 + (i % 8) as u32, ops[(i % 4) as usize]))
            .unwrap();
    }
    for k in 0..2_000 {
        window(&mut w, k, 1_000 + (k % 8) as u32);
    }
    w.flush().unwrap();
    let r = w.live_reader().unwrap();
    let r = r.lock().unwrap();
    let mut g = Gatherer::default();
    let t = Instant::now();
    g.update(&r).unwrap();
    let first = t.elapsed().as_secs_f64();
    let (mut full, mut inc) = (f64::MAX, f64::MAX);
    let mut next = n;
    for _ in 0..3 {
        for i in next..next + 100_000 {
            w.append(&event(i, 1_000 + (i % 8) as u32, ops[(i % 4) as usize]))
                .unwrap();
        }
        next += 100_000;
        window(&mut w, next, 1_000);
        w.flush().unwrap();
        let t = Instant::now();
        let a = g.update(&r).unwrap();
        inc = inc.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let b = gather(&r).unwrap();
        full = full.min(t.elapsed().as_secs_f64());
        assert_eq!(a, b);
    }
    eprintln!(
        "{n} events, then 100,000 more per push: full gather {full:.3} s, incremental update {inc:.4} s ({:.0}x less; the first update read everything in {first:.3} s; best of 3)",
        full / inc
    );
    // Why the ranges are written as literals: the newest of the last 100,000 sequence numbers,
    // as a bound parameter and as a literal (DuckDB prunes row groups only for the literal).
    let lo = next - 100_000;
    let (mut param, mut literal) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let t = Instant::now();
        let a: Option<i64> = r
            .prepare_trusted(
                "SELECT max(seq)::BIGINT FROM event_rows WHERE node_id = ? AND seq >= ?",
            )
            .unwrap()
            .query_row(causeway_store::duckdb::params![1, lo], |row| row.get(0))
            .unwrap();
        param = param.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let b: Option<i64> = r
            .prepare_trusted_ints(
                "SELECT max(seq)::BIGINT FROM event_rows WHERE node_id = ? AND seq >= ?",
                &[1, lo],
            )
            .unwrap()
            .query_row([], |row| row.get(0))
            .unwrap();
        literal = literal.min(t.elapsed().as_secs_f64());
        assert!(a.is_some());
        assert_eq!(a, b);
    }
    eprintln!(
        "max(seq) over the last 100,000 of {next} events: bound parameter {:.1} ms, literal {:.1} ms (best of 3)",
        param * 1e3,
        literal * 1e3
    );
    w.finish().unwrap();
}
