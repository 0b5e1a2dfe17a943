//! Host waits shared by the input-side detectors: for launching threads, the gaps of at least
//! 1 ms between consecutive GPU calls and how much of them the thread slept (blocked off-CPU);
//! for every thread, the off-CPU time that overlaps its *own* block I/O requests.

use std::collections::BTreeMap;

use causeway_store::StoreError;
use causeway_store::duckdb;
use serde::Serialize;

use crate::facts::{Ctx, duck};

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

const GAPS_SQL: &str = "
WITH f AS (SELECT DISTINCT node, tid FROM event_data
           WHERE op_id IN (SELECT op_id FROM ops WHERE op IN ('cudaLaunchKernel', 'cuLaunchKernel', 'cuLaunchKernelEx', 'cudaGraphLaunch'))
             AND timestamp BETWEEN $1 AND $2 AND ($3::BIGINT < 0 OR pid = $3::BIGINT) AND ($4::VARCHAR = '' OR node = $4::VARCHAR)),
c AS (SELECT e.node, e.pid, e.tid, e.timestamp, e.duration FROM event_data e JOIN f ON f.node = e.node AND f.tid = e.tid
      WHERE e.op_id IN (SELECT op_id FROM ops WHERE source IN ('CUDA', 'DRIVER', 'GRAPH', 'NCCL')) AND e.timestamp BETWEEN $1 AND $2),
g AS (SELECT node, pid, tid, lag(timestamp + duration) OVER (PARTITION BY node, tid ORDER BY timestamp) AS s, timestamp AS f FROM c),
gaps AS (SELECT node, pid, tid, s, f FROM g WHERE f - s >= 1000000),
sw AS (SELECT e.node, e.tid, e.arg1, e.duration AS d,
              e.timestamp - CASE WHEN position(chr(31) || e.node || chr(31) IN $5::VARCHAR) > 0 THEN e.duration ELSE 0 END AS s
       FROM event_data e JOIN f ON f.node = e.node AND f.tid = e.tid
       WHERE e.op_id = 100 AND e.arg1 = 1 AND e.timestamp BETWEEN $1 - 60000000000 AND $2 + 60000000000),
gb AS (SELECT *, unnest(range(s // 1000000, f // 1000000 + 1)) AS b FROM gaps),
sb AS (SELECT *, unnest(range(s // 1000000, (s + d) // 1000000 + 1)) AS b FROM sw),
ov AS (SELECT gb.node, gb.tid, sum(least(gb.f, sb.s + sb.d) - greatest(gb.s, sb.s))::BIGINT AS ns
       FROM gb JOIN sb ON gb.node = sb.node AND gb.tid = sb.tid AND gb.b = sb.b
       WHERE sb.s < gb.f AND sb.s + sb.d > gb.s AND gb.b = greatest(gb.s // 1000000, sb.s // 1000000)
       GROUP BY ALL),
tot AS (SELECT node, pid, tid, count(*)::BIGINT AS n, sum(f - s)::BIGINT AS ns FROM gaps GROUP BY ALL)
SELECT tot.node, tot.pid, tot.tid, tot.n, tot.ns, coalesce(ov.ns, 0)::BIGINT
FROM tot LEFT JOIN ov ON ov.node = tot.node AND ov.tid = tot.tid ORDER BY 1, 2, 3";

const IO_SQL: &str = "
WITH io AS (SELECT node, pid, tid, timestamp AS s, duration AS d FROM event_data
            WHERE op_id IN (SELECT op_id FROM ops WHERE source = 'IO') AND timestamp BETWEEN $1 AND $2
              AND ($3::BIGINT < 0 OR pid = $3::BIGINT) AND ($4::VARCHAR = '' OR node = $4::VARCHAR)),
k AS (SELECT DISTINCT node, tid FROM io),
sw AS (SELECT e.node, e.tid, e.duration AS d,
              e.timestamp - CASE WHEN position(chr(31) || e.node || chr(31) IN $5::VARCHAR) > 0 THEN e.duration ELSE 0 END AS s
       FROM event_data e JOIN k ON k.node = e.node AND k.tid = e.tid
       WHERE e.op_id = 100 AND e.timestamp BETWEEN $1 - 60000000000 AND $2 + 60000000000),
ib AS (SELECT *, unnest(range(s // 1000000, (s + d) // 1000000 + 1)) AS b FROM io),
sb AS (SELECT *, unnest(range(s // 1000000, (s + d) // 1000000 + 1)) AS b FROM sw),
ov AS (SELECT ib.node, ib.tid, sum(least(ib.s + ib.d, sb.s + sb.d) - greatest(ib.s, sb.s))::BIGINT AS ns
       FROM ib JOIN sb ON ib.node = sb.node AND ib.tid = sb.tid AND ib.b = sb.b
       WHERE sb.s < ib.s + ib.d AND sb.s + sb.d > ib.s AND ib.b = greatest(ib.s // 1000000, sb.s // 1000000)
       GROUP BY ALL),
n AS (SELECT node, pid, tid, count(*)::BIGINT AS n FROM io GROUP BY ALL)
SELECT n.node, n.pid, n.tid, n.n, coalesce(ov.ns, 0)::BIGINT FROM n LEFT JOIN ov ON ov.node = n.node AND ov.tid = n.tid
ORDER BY 1, 2, 3";

/// Computes [`ThreadWaits`] for the window of `ctx`.
pub fn host_waits(ctx: &Ctx<'_>) -> Result<Vec<ThreadWaits>, StoreError> {
    let r = ctx.r;
    let p = duckdb::params![
        ctx.window.from_ns,
        ctx.window.until_ns,
        ctx.pid,
        ctx.node,
        ctx.resume_nodes
    ];
    let mut by: BTreeMap<(String, u32, u32), ThreadWaits> = BTreeMap::new();
    let gaps: Vec<(String, u32, u32, i64, i64, i64)> = r
        .prepare_trusted(GAPS_SQL)?
        .query_map(p, |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
            ))
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "measuring gaps between GPU calls"))?;
    for (node, pid, tid, n, ns, blocked) in gaps {
        let w = by
            .entry((node.clone(), pid, tid))
            .or_insert_with(|| ThreadWaits {
                node,
                pid,
                tid,
                ..ThreadWaits::default()
            });
        w.gaps = n as u64;
        w.gap_ns = ns;
        w.blocked_in_gaps_ns = blocked.min(ns);
    }
    let io: Vec<(String, u32, u32, i64, i64)> = r
        .prepare_trusted(IO_SQL)?
        .query_map(p, |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
            ))
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "measuring waits on block I/O"))?;
    for (node, pid, tid, n, ns) in io {
        let off = ctx
            .threads
            .iter()
            .find(|t| t.node == node && t.tid == tid && t.pid == pid)
            .map_or(ns, |t| t.off_ns);
        let w = by
            .entry((node.clone(), pid, tid))
            .or_insert_with(|| ThreadWaits {
                node,
                pid,
                tid,
                ..ThreadWaits::default()
            });
        w.io_requests = n as u64;
        // Requests in flight together must not count the same sleep twice.
        w.io_wait_ns = ns.min(off);
    }
    Ok(by.into_values().collect())
}
