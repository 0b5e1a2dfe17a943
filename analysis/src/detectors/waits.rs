//! Host waits shared by the input-side detectors: for launching threads, the gaps of at least
//! 1 ms between consecutive GPU calls and how much of them the thread slept (blocked off-CPU),
//! outside stretches where GPU probes were sampled (there, calls were made but not stored);
//! for every thread, the off-CPU time that overlaps its *own* block I/O requests.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use causeway_store::StoreError;
use causeway_store::duckdb;
use serde::Serialize;

use crate::facts::Ctx;
use crate::intervals::{Span, overlaps, sort};
use crate::opsets;
use crate::scan::columns;
use crate::switches::Off;

/// Waits of one thread.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ThreadWaits {
    /// Node.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Gaps >= 1 ms between GPU calls (launching threads only).
    pub gaps: u64,
    /// Their total length (ns).
    pub gap_ns: i64,
    /// Blocked (sleeping) off-CPU time inside those gaps (ns).
    pub blocked_in_gaps_ns: i64,
    /// Off-CPU time overlapping the thread's own block I/O (ns).
    pub io_wait_ns: i64,
    /// Block I/O requests the thread issued.
    pub io_requests: u64,
}

static IO_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT pid::BIGINT, tid::BIGINT, timestamp, duration FROM event_data
         WHERE (?::BOOLEAN OR node = ?) AND timestamp BETWEEN ? AND ? AND (?::BIGINT < 0 OR pid = ?::BIGINT)
           AND {}",
        opsets::IO.as_str()
    )
});

/// Computes [`ThreadWaits`] for the window of `ctx`.
pub fn host_waits(ctx: &Ctx<'_>) -> Result<Vec<ThreadWaits>, StoreError> {
    let (r, w) = (ctx.r, ctx.window);
    let mut by: BTreeMap<(String, u32, u32), ThreadWaits> = BTreeMap::new();
    for node in &ctx.nodes {
        let mut feeders: Vec<u32> = ctx
            .feeders()
            .iter()
            .filter(|t| &t.node == node)
            .map(|t| t.tid)
            .collect();
        feeders.sort_unstable();
        feeders.dedup();
        if !feeders.is_empty() {
            gaps(ctx, node, &feeders, &mut by)?;
        }
        let [pid, tid, ts, dur] = columns::<4>(
            r,
            IO_SQL.as_str(),
            duckdb::params![ctx.only_node, node, w.from_ns, w.until_ns, ctx.pid, ctx.pid],
            "measuring waits on block I/O",
        )?;
        let mut io: BTreeMap<u32, Vec<Span<()>>> = BTreeMap::new();
        let mut requests: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        for i in 0..pid.len() {
            let (p, t) = (pid[i] as u32, tid[i] as u32);
            *requests.entry((p, t)).or_default() += 1;
            io.entry(t).or_default().push(Span {
                start: ts[i],
                end: ts[i] + dur[i],
                data: (),
            });
        }
        let mut waited: HashMap<u32, i64> = HashMap::new();
        for (t, mut v) in io {
            sort(&mut v);
            let mut ns = 0;
            overlaps(&v, ctx.switches.of(node, t), |_, _, ov| ns += ov);
            waited.insert(t, ns);
        }
        for ((p, t), n) in requests {
            let ns = waited.get(&t).copied().unwrap_or(0);
            let off = ctx
                .threads
                .iter()
                .find(|x| &x.node == node && x.tid == t && x.pid == p)
                .map_or(ns, |x| x.off_ns);
            let e = by
                .entry((node.clone(), p, t))
                .or_insert_with(|| ThreadWaits {
                    node: node.clone(),
                    pid: p,
                    tid: t,
                    ..ThreadWaits::default()
                });
            e.io_requests = n;
            // Requests in flight together must not count the same sleep twice.
            e.io_wait_ns = ns.min(off);
        }
    }
    Ok(by.into_values().collect())
}

/// Gaps of >= 1 ms between the GPU calls of the launching threads `tids` of `node`, and the
/// blocked off-CPU time inside them.
fn gaps(
    ctx: &Ctx<'_>,
    node: &str,
    tids: &[u32],
    by: &mut BTreeMap<(String, u32, u32), ThreadWaits>,
) -> Result<(), StoreError> {
    let Some(timeline) = ctx.timelines.get(node) else {
        return Ok(());
    };
    let mut per_tid: BTreeMap<u32, Vec<Span<()>>> = BTreeMap::new();
    let mut totals: BTreeMap<(u32, u32), (u64, i64)> = BTreeMap::new();
    for g in timeline
        .gaps
        .iter()
        .filter(|g| tids.binary_search(&g.tid).is_ok() && !ctx.sampled(node, g.start, g.end))
    {
        let e = totals.entry((g.pid, g.tid)).or_default();
        e.0 += 1;
        e.1 += g.end - g.start;
        per_tid.entry(g.tid).or_default().push(Span {
            start: g.start,
            end: g.end,
            data: (),
        });
    }
    let mut blocked: HashMap<u32, i64> = HashMap::new();
    for (t, mut v) in per_tid {
        sort(&mut v);
        let sleeps: Vec<Span<Off>> = ctx
            .switches
            .of(node, t)
            .iter()
            .filter(|x| x.data.state == 1)
            .copied()
            .collect();
        let mut ns = 0;
        overlaps(&v, &sleeps, |_, _, ov| ns += ov);
        blocked.insert(t, ns);
    }
    for ((p, t), (n, ns)) in totals {
        let e = by
            .entry((node.to_string(), p, t))
            .or_insert_with(|| ThreadWaits {
                node: node.to_string(),
                pid: p,
                tid: t,
                ..ThreadWaits::default()
            });
        e.gaps = n;
        e.gap_ns = ns;
        e.blocked_in_gaps_ns = blocked.get(&t).copied().unwrap_or(0).min(ns);
    }
    Ok(())
}
