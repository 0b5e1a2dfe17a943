//! One pass over the GPU calls of a node, in stored order and in bounded chunks of rows: the
//! slow calls (for per-call attribution), kernel launches per second (for launch rates), the
//! gaps of at least 1 ms between consecutive calls of a thread (for the gap waits) and the time
//! budget's calls ([`crate::budget::pass`], which also reads the calls of the margin before the
//! window), so the largest class of events is read once instead of once per consumer.
//!
//! Gaps follow calls in start order per thread (the previous call's end to the next start).
//! Stores are written in about time order per thread, so a small reorder buffer per thread
//! ([`crate::cursor`]) restores that order in the pass. When a thread's calls are further out
//! of order than the buffer holds, the node's gaps come from a bucketed query instead: a gap of
//! at least 1 ms separates two starts at least 1 ms apart, so they fall in different 1 ms
//! buckets, the first being the last call of its bucket and the next the first call of the next
//! non-empty one (one row per bucket, then lag() over the buckets).

use std::collections::HashMap;
use std::sync::LazyLock;

use causeway_store::catalog;
use causeway_store::duckdb;
use causeway_store::{Reader, StoreError};

use crate::budget::pass::{CallPass, ThreadCalls};
use crate::cursor::{Call, Cursor};
use crate::opsets::{self, is_gpu_source, is_launch, is_sync};
use crate::scan::NodeRef;
use crate::scan::{columns, for_each_batch};
use crate::switches::MARGIN_NS;
use crate::window::Window;

pub use crate::cursor::{Gap, LaunchSecond, MIN_GAP_NS};

/// A call is slow when it takes at least this long ...
pub const SLOW_MIN_NS: i64 = 1_000_000;
/// ... and at least this many times its op's p50 in the same process.
pub const SLOW_P50_FACTOR: i64 = 10;

/// Rows per chunk of the pass (bounds the memory of one query's result).
pub const CHUNK_ROWS: i64 = 1 << 20;

// Op kinds in the pass's lookup table.
const GPU: u8 = 1;
const LAUNCH: u8 = 2;
const SYNC: u8 = 4;

/// A slow GPU call (not a synchronisation) of a process under the pid filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowCall {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Op id.
    pub op_id: u16,
    /// Start (ns).
    pub start: i64,
    /// End (ns).
    pub end: i64,
    /// Whether it falls in its process's warm-up phase.
    pub warmup: bool,
}

/// What the pass found on one node.
#[derive(Debug, Default)]
pub struct Timeline {
    /// Gaps of at least [`MIN_GAP_NS`] of every thread with GPU calls, by thread then time.
    pub gaps: Vec<Gap>,
    /// Seconds with at least one launch, by (pid, tid, sec).
    pub launches: Vec<LaunchSecond>,
    /// Each launching thread's first kernel launch (ns), from shortly before the window on.
    pub first_launch: HashMap<u32, i64>,
    /// Each launching thread's start of steady launching (ns): its first launch in the first
    /// second whose stored launches reach a tenth of its busiest second's (sampling lowers the
    /// later seconds' counts, never the busiest, which full mode at the start records). Before
    /// it: start-up (imports, model and dataset construction, the odd initialisation kernel).
    pub steady_from: HashMap<u32, i64>,
    /// Slow calls (>= [`SLOW_MIN_NS`] and >= [`SLOW_P50_FACTOR`] x their (pid, op) p50).
    pub slow: Vec<SlowCall>,
}

/// Per-(pid, op) p50 and per-pid warm-up end under the pid filter, to select slow calls.
#[derive(Debug, Default)]
pub struct SlowRule {
    /// pid filter (-1 = all).
    pub pid: i64,
    /// p50 by (pid, op_id).
    pub p50: HashMap<(u32, u16), i64>,
    /// Warm-up end by pid.
    pub warm_end: HashMap<u32, i64>,
}

static CHUNK_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT pid::BIGINT, tid::BIGINT, op_id::BIGINT, timestamp, duration, arg0, arg1
         FROM event_rows
         WHERE rowid BETWEEN ? AND ?
           AND (?::BOOLEAN OR node_id = (SELECT node_id FROM nodes WHERE node = ?))
           AND timestamp BETWEEN ? - {MARGIN_NS} AND ? AND {}",
        opsets::GPU_PREFILTER.as_str()
    )
});

static GAPS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH b AS (
           SELECT tid, timestamp // {MIN_GAP_NS} AS b, min(timestamp) AS f, arg_min(pid, timestamp) AS pid,
                  arg_max(timestamp + duration, timestamp) AS last_end
           FROM event_data WHERE (?::BOOLEAN OR node = ?) AND timestamp BETWEEN ? AND ? AND {}
           GROUP BY ALL)
         SELECT pid::BIGINT, tid::BIGINT, s, f FROM (
           SELECT pid, tid, f, lag(last_end) OVER (PARTITION BY tid ORDER BY b) AS s FROM b)
         WHERE f - s >= {MIN_GAP_NS}",
        opsets::GPU.as_str()
    )
});

/// The physical table behind `event_data` (ids, no names), read by row id in chunks.
const ROWS_SQL: &str = "SELECT count(*) FROM event_rows";

/// Rows in the event table (row ids run from 0; the pass reads past the last one anyway).
pub fn event_rows(r: &Reader) -> Result<i64, StoreError> {
    r.prepare_trusted(ROWS_SQL)?
        .query_row([], |row| row.get(0))
        .map_err(crate::base::errors::duck(r, "counting events"))
}

impl Timeline {
    /// Runs the pass over the GPU calls of `node` in window `w`, feeding `calls` too.
    pub fn load(
        r: &Reader,
        node: &NodeRef<'_>,
        w: Window,
        rows: i64,
        rule: &SlowRule,
        calls: &mut CallPass<'_>,
    ) -> Result<Timeline, StoreError> {
        // Per op id (the SQL filter is a superset of the catalogue's GPU ops).
        let mut kind = vec![0u8; usize::from(u16::MAX) + 1];
        for o in catalog::OPS
            .iter()
            .filter(|o| is_gpu_source(o.source.name()))
        {
            let launch = if is_launch(o.name) { LAUNCH } else { 0 };
            let sync = if is_sync(o.name) { SYNC } else { 0 };
            kind[usize::from(o.id)] = GPU | launch | sync;
        }
        let mut t = Timeline::default();
        let mut cursors: Vec<Cursor> = Vec::new();
        // The budget's state of each cursor's thread (feeding threads only).
        let mut states: Vec<Option<ThreadCalls>> = Vec::new();
        let mut index: HashMap<u32, usize> = HashMap::new();
        let mut in_order = true;
        let mut p50 = ((u32::MAX, u16::MAX), 0i64);
        let mut lo = 0;
        while lo < rows.max(1) {
            // The last chunk is open-ended: row ids past the count are read too.
            let hi = if lo + CHUNK_ROWS >= rows {
                i64::MAX
            } else {
                lo + CHUNK_ROWS - 1
            };
            let mut at = usize::MAX;
            let params = duckdb::params![lo, hi, node.only, node.name, w.from_ns, w.until_ns];
            for_each_batch::<7>(r, CHUNK_SQL.as_str(), params, "reading GPU calls", |cols| {
                let [pid, tid, op, ts, dur, arg0, arg1] = cols;
                for i in 0..pid.len() {
                    let (p, th, o, start, d) = (pid[i], tid[i], op[i], ts[i], dur[i]);
                    let (p, th, o) = (p as u32, th as u32, o as u16);
                    let k = kind[usize::from(o)];
                    if k == 0 {
                        continue;
                    }
                    if cursors.get(at).is_none_or(|c| c.tid != th) {
                        at = *index.entry(th).or_insert_with(|| {
                            cursors.push(Cursor::new(th, w.from_ns));
                            states.push(calls.thread(th));
                            cursors.len() - 1
                        });
                    }
                    let c = &mut cursors[at];
                    let state = &mut states[at];
                    let end = start + d;
                    if let Some(b) = state {
                        calls.read(b, p, o, start);
                    }
                    if in_order {
                        let call = Call {
                            pid: p,
                            op: o,
                            start,
                            end,
                            arg0: arg0[i],
                            arg1: arg1[i],
                        };
                        in_order = c.push(call, &mut t.gaps, &mut |x| {
                            if let Some(b) = state {
                                calls.take(b, x);
                            }
                        });
                    }
                    if k & LAUNCH != 0 {
                        let f = t.first_launch.entry(th).or_insert(start);
                        *f = (*f).min(start);
                    }
                    if start < w.from_ns {
                        continue;
                    }
                    if k & LAUNCH != 0 {
                        c.count_launch(p, start, w.from_ns, &mut t.launches);
                    }
                    if k & SYNC == 0 && d >= SLOW_MIN_NS && rule.keeps(p) {
                        if p50.0 != (p, o) {
                            p50 = ((p, o), rule.p50.get(&(p, o)).copied().unwrap_or(0));
                        }
                        if d >= SLOW_MIN_NS.max(SLOW_P50_FACTOR.saturating_mul(p50.1)) {
                            let warmup = rule.warm_end.get(&p).is_some_and(|&we| start < we);
                            t.slow.push(SlowCall {
                                pid: p,
                                tid: th,
                                op_id: o,
                                start,
                                end,
                                warmup,
                            });
                        }
                    }
                }
            })?;
            lo = hi.saturating_add(1);
        }
        for (c, state) in cursors.iter_mut().zip(states) {
            let mut state = state.filter(|_| in_order);
            c.finish(&mut t.gaps, &mut t.launches, &mut |x| {
                if let Some(b) = &mut state {
                    calls.take(b, x);
                }
            });
            if let Some(b) = state {
                calls.finish_thread(b);
            }
        }
        t.launches.sort_by_key(|l| (l.pid, l.tid, l.sec));
        t.launches.dedup_by(|b, a| {
            let same = (a.pid, a.tid, a.sec) == (b.pid, b.tid, b.sec);
            if same {
                a.launches += b.launches;
            }
            same
        });
        let mut per_tid: HashMap<u32, Vec<(i64, i64)>> = HashMap::new();
        for l in &t.launches {
            per_tid.entry(l.tid).or_default().push((l.sec, l.launches));
        }
        for (tid, mut secs) in per_tid {
            secs.sort_unstable();
            let most = secs.iter().map(|s| s.1).max().unwrap_or(0);
            if let Some(&(sec, _)) = secs.iter().find(|s| s.1.saturating_mul(10) >= most) {
                let from = w.from_ns.saturating_add(sec.saturating_mul(1_000_000_000));
                let first = t.first_launch.get(&tid).copied().unwrap_or(from);
                t.steady_from.insert(tid, first.max(from));
            }
        }
        if !in_order {
            t.gaps = bucketed_gaps(r, node, w)?;
            calls.from_sorted_query(r)?;
        }
        t.gaps.sort_by_key(|g| (g.tid, g.start, g.end, g.pid));
        Ok(t)
    }
}

impl SlowRule {
    fn keeps(&self, pid: u32) -> bool {
        self.pid < 0 || i64::from(pid) == self.pid
    }
}

/// The gaps of `node` for calls not stored in time order.
fn bucketed_gaps(r: &Reader, node: &NodeRef<'_>, w: Window) -> Result<Vec<Gap>, StoreError> {
    let [pid, tid, s, f] = columns::<4>(
        r,
        GAPS_SQL.as_str(),
        duckdb::params![node.only, node.name, w.from_ns, w.until_ns],
        "measuring gaps between GPU calls",
    )?;
    Ok((0..pid.len())
        .map(|i| Gap {
            pid: pid[i] as u32,
            tid: tid[i] as u32,
            start: s[i],
            end: f[i],
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use causeway_store::{Event, Writer, WriterOptions};

    use super::*;
    use causeway_demo::model::op;

    const T0: i64 = 1_700_000_000_000_000_000;

    /// Two launching threads: calls 20-80 us apart, 3-5 ms gaps every 97th call, a 2 ms launch
    /// every 89th.
    fn calls() -> Vec<Event> {
        let mut v = Vec::new();
        for tid in [11u32, 12] {
            let mut t = T0 + i64::from(tid) * 1_000;
            for i in 0..6_000i64 {
                let dur = if i % 89 == 0 {
                    2_000_000
                } else {
                    5_000 + i % 7 * 1_000
                };
                let name = if i % 2 == 0 {
                    "cudaLaunchKernel"
                } else {
                    "cudaMemcpyAsync"
                };
                v.push(Event {
                    timestamp: t,
                    duration: dur,
                    pid: 10,
                    tid,
                    op_id: op(name),
                    ..Event::default()
                });
                t += dur
                    + if i % 97 == 0 {
                        3_000_000 + i * 300
                    } else {
                        20_000 + i % 13 * 5_000
                    };
            }
        }
        v
    }

    fn store(dir: &std::path::Path, name: &str, events: &[Event]) -> Reader {
        let p = dir.join(name);
        let mut w = Writer::create(&p, WriterOptions::default()).unwrap();
        for e in events {
            w.append(e).unwrap();
        }
        w.finish().unwrap();
        Reader::open(&p).unwrap()
    }

    fn expected_gaps(events: &[Event]) -> Vec<Gap> {
        let mut by: BTreeMap<u32, Vec<&Event>> = BTreeMap::new();
        for e in events {
            by.entry(e.tid).or_default().push(e);
        }
        let mut out = Vec::new();
        for (tid, mut v) in by {
            v.sort_by_key(|e| e.timestamp);
            for w in v.windows(2) {
                let (prev_end, next) = (w[0].timestamp + w[0].duration, w[1]);
                if next.timestamp - prev_end >= MIN_GAP_NS {
                    out.push(Gap {
                        pid: next.pid,
                        tid,
                        start: prev_end,
                        end: next.timestamp,
                    });
                }
            }
        }
        out
    }

    fn run(r: &Reader) -> Timeline {
        let w = Window {
            from_ns: T0,
            until_ns: T0 + 1_000_000_000_000,
        };
        let node = causeway_store::default_node_name();
        let rule = SlowRule {
            pid: -1,
            ..SlowRule::default()
        };
        let nref = NodeRef {
            name: &node,
            only: true,
        };
        let switches = crate::switches::Switches::default();
        let mut calls = CallPass::new(r, &nref, w, &[], &switches).unwrap();
        Timeline::load(r, &nref, w, event_rows(r).unwrap(), &rule, &mut calls).unwrap()
    }

    #[test]
    fn gaps_launches_and_slow_calls_whatever_the_stored_order() {
        let dir = tempfile::tempdir().unwrap();
        let events = calls();
        let want = expected_gaps(&events);
        assert!(want.len() > 100, "{}", want.len());
        // In order; locally shuffled (the reorder buffer); reversed (the bucketed query).
        let mut shuffled = events.clone();
        for c in shuffled.chunks_mut(40) {
            c.reverse();
        }
        let mut reversed = events.clone();
        reversed.reverse();
        for (name, ev) in [("a", &events), ("b", &shuffled), ("c", &reversed)] {
            let t = run(&store(dir.path(), name, ev));
            assert_eq!(t.gaps, want, "{name}");
            let launches: i64 = t.launches.iter().map(|l| l.launches).sum();
            assert_eq!(launches, 6_000, "{name}");
            assert!(
                t.launches
                    .windows(2)
                    .all(|w| (w[0].pid, w[0].tid, w[0].sec) < (w[1].pid, w[1].tid, w[1].sec))
            );
            // Without p50s the floor alone applies: every 2 ms call.
            assert_eq!(t.slow.len(), 2 * 6_000usize.div_ceil(89), "{name}");
        }
    }
}
