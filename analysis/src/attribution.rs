//! Per-call attribution: for every slow CUDA/driver call (not a synchronisation, whose job is
//! to wait), the off-CPU intervals of the *same thread* that overlap it, split by run state
//! (preempted / blocked / unknown) and by the task that ran instead. Off-CPU time of threads
//! outside their calls is reported separately and never blamed on the GPU path.
//!
//! The overlap join is bucketed (1 ms buckets, equi-join on node, tid and bucket), so it scales
//! with the number of slow calls and switches rather than their product.

use std::collections::BTreeMap;

use causeway_store::StoreError;
use causeway_store::duckdb;
use serde::Serialize;

use crate::facts::{Ctx, duck};

/// A call is slow when it takes at least this long ...
pub const SLOW_MIN_NS: i64 = 1_000_000;
/// ... and at least this many times its op's p50 in the same process.
pub const SLOW_P50_FACTOR: i64 = 10;

/// Attribution of one thread's slow calls (outside or inside the warm-up phase).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ThreadAttribution {
    /// Node.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Whether these calls fall in the process's warm-up (first second of GPU calls).
    pub warmup: bool,
    /// Slow calls.
    pub slow_calls: u64,
    /// Their total duration (ns).
    pub slow_ns: i64,
    /// Slow calls with off-CPU time inside.
    pub with_off_cpu: u64,
    /// Off-CPU time inside slow calls (ns).
    pub off_inside_ns: i64,
    /// ... of which preempted while runnable (ns).
    pub preempted_ns: i64,
    /// ... of which blocked/sleeping (ns).
    pub blocked_ns: i64,
    /// ... of which in an unknown state (ns).
    pub unknown_ns: i64,
    /// Slow calls by op.
    pub ops: BTreeMap<String, u64>,
    /// Tasks that ran while the thread was preempted inside slow calls: (pid, ns), largest first.
    pub ran_instead: Vec<(u32, i64)>,
}

const ATTR_SQL: &str = "
WITH gpu AS (SELECT op_id, op FROM ops WHERE source IN ('CUDA', 'DRIVER', 'GRAPH', 'NCCL')
             AND op NOT IN ('cudaStreamSynchronize', 'cudaDeviceSynchronize', 'cuCtxSynchronize', 'cuStreamSynchronize', 'cudaEventSynchronize')),
calls AS (
  SELECT e.node, e.pid, e.tid, e.seq, e.op_id, e.timestamp, e.duration
  FROM event_data e
  WHERE e.op_id IN (SELECT op_id FROM gpu) AND e.timestamp BETWEEN $1 AND $2
    AND ($3::BIGINT < 0 OR e.pid = $3::BIGINT) AND ($4::VARCHAR = '' OR e.node = $4::VARCHAR)),
warm AS (SELECT node, pid, min(timestamp) + greatest(1000000000, (max(timestamp) - min(timestamp)) // 20) AS warm_end
         FROM calls GROUP BY ALL),
p AS (SELECT node, pid, op_id, quantile_disc(duration, 0.5) p50 FROM calls GROUP BY ALL),
slow AS (
  SELECT c.node, c.pid, c.tid, c.seq, c.op_id, c.timestamp AS s, c.timestamp + c.duration AS f, c.duration,
         c.timestamp < w.warm_end AS warmup
  FROM calls c JOIN p USING (node, pid, op_id) JOIN warm w USING (node, pid)
  WHERE c.duration >= greatest($5::BIGINT, $6::BIGINT * p.p50)),
sw AS (
  SELECT e.node, e.tid, e.seq, e.arg0, e.arg1, e.duration,
         e.timestamp - CASE WHEN position(chr(31) || e.node || chr(31) IN $7::VARCHAR) > 0 THEN e.duration ELSE 0 END AS s
  FROM event_data e JOIN (SELECT DISTINCT node, tid FROM slow) k ON k.node = e.node AND k.tid = e.tid
  WHERE e.op_id = 100 AND e.timestamp BETWEEN $1 - 60000000000 AND $2 + 60000000000),
cb AS (SELECT *, unnest(range(s // 1000000, f // 1000000 + 1)) AS b FROM slow),
sb AS (SELECT *, unnest(range(s // 1000000, (s + duration) // 1000000 + 1)) AS b FROM sw),
pairs AS (
  SELECT cb.node, cb.pid, cb.tid, cb.seq AS cseq, cb.warmup, sb.arg0, sb.arg1,
         least(cb.f, sb.s + sb.duration) - greatest(cb.s, sb.s) AS ov
  FROM cb JOIN sb ON cb.node = sb.node AND cb.tid = sb.tid AND cb.b = sb.b
  WHERE sb.s < cb.f AND sb.s + sb.duration > cb.s
    AND cb.b = greatest(cb.s // 1000000, sb.s // 1000000)),
per_call AS (SELECT node, tid, cseq, sum(ov) AS ov FROM pairs GROUP BY ALL)
SELECT 'call' AS kind, s.node, s.pid, s.tid, s.warmup, o.op AS op, -1::BIGINT AS arg0, -1::BIGINT AS arg1,
       count(*)::BIGINT AS n, sum(s.duration)::BIGINT AS ns, count(pc.cseq)::BIGINT AS with_off
FROM slow s JOIN ops o ON o.op_id = s.op_id
LEFT JOIN per_call pc ON pc.node = s.node AND pc.tid = s.tid AND pc.cseq = s.seq
GROUP BY ALL
UNION ALL
SELECT 'off', node, pid, tid, warmup, '', arg0, arg1, count(*)::BIGINT, sum(ov)::BIGINT, 0::BIGINT
FROM pairs GROUP BY ALL
ORDER BY 1, 2, 3, 4, 5, 6, 7, 8";

/// Runs the attribution over the window of `ctx`; one entry per (thread, warm-up phase).
pub fn attribute(ctx: &Ctx<'_>) -> Result<Vec<ThreadAttribution>, StoreError> {
    let r = ctx.r;
    type Row = (
        String,
        String,
        u32,
        u32,
        bool,
        String,
        i64,
        i64,
        i64,
        i64,
        i64,
    );
    let rows: Vec<Row> = r
        .prepare_trusted(ATTR_SQL)?
        .query_map(
            duckdb::params![
                ctx.window.from_ns,
                ctx.window.until_ns,
                ctx.pid,
                ctx.node,
                SLOW_MIN_NS,
                SLOW_P50_FACTOR,
                ctx.resume_nodes
            ],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                    row.get(7)?,
                    row.get(8)?,
                    row.get(9)?,
                    row.get(10)?,
                ))
            },
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "attributing off-CPU time to slow calls"))?;
    let mut by: BTreeMap<(String, u32, u32, bool), ThreadAttribution> = BTreeMap::new();
    for (kind, node, pid, tid, warmup, op, arg0, arg1, n, ns, with_off) in rows {
        let a = by
            .entry((node.clone(), pid, tid, warmup))
            .or_insert_with(|| ThreadAttribution {
                node,
                pid,
                tid,
                warmup,
                ..ThreadAttribution::default()
            });
        if kind == "call" {
            a.slow_calls += n as u64;
            a.slow_ns += ns;
            a.with_off_cpu += with_off as u64;
            *a.ops.entry(op).or_default() += n as u64;
        } else {
            a.off_inside_ns += ns;
            match arg1 {
                0 => {
                    a.preempted_ns += ns;
                    let pid = arg0.clamp(0, i64::from(u32::MAX)) as u32;
                    match a.ran_instead.iter_mut().find(|x| x.0 == pid) {
                        Some(x) => x.1 += ns,
                        None => a.ran_instead.push((pid, ns)),
                    }
                }
                1 => a.blocked_ns += ns,
                _ => a.unknown_ns += ns,
            }
        }
    }
    let mut out: Vec<ThreadAttribution> = by.into_values().collect();
    for a in &mut out {
        a.ran_instead
            .sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        a.ran_instead.truncate(5);
    }
    Ok(out)
}

/// Trace-wide summary of where off-CPU time went, for the notes and explanations.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OffCpuSplit {
    /// All off-CPU time of traced threads (ns).
    pub total_ns: i64,
    /// Inside slow GPU calls of launching threads (ns).
    pub inside_slow_calls_ns: i64,
    /// Of launching threads, outside their slow calls (ns).
    pub feeders_elsewhere_ns: i64,
    /// Of threads that made no GPU call: not blamed on the GPU path (ns).
    pub non_gpu_threads_ns: i64,
    /// The largest non-GPU thread: (pid, tid, comm, ns).
    pub largest_non_gpu: Option<(u32, u32, String, i64)>,
}

/// Splits the off-CPU time of the window between slow calls, feeders and other threads.
pub fn split(ctx: &Ctx<'_>, attr: &[ThreadAttribution]) -> OffCpuSplit {
    let mut s = OffCpuSplit::default();
    for t in &ctx.threads {
        s.total_ns += t.off_ns;
        if t.gpu_calls == 0 {
            s.non_gpu_threads_ns += t.off_ns;
            if s.largest_non_gpu.as_ref().is_none_or(|l| t.off_ns > l.3) && t.off_ns > 0 {
                s.largest_non_gpu = Some((t.pid, t.tid, t.comm.clone(), t.off_ns));
            }
        }
    }
    s.inside_slow_calls_ns = attr.iter().map(|a| a.off_inside_ns).sum();
    let feeders: i64 = ctx
        .threads
        .iter()
        .filter(|t| t.gpu_calls > 0)
        .map(|t| t.off_ns)
        .sum();
    s.feeders_elsewhere_ns = (feeders - s.inside_slow_calls_ns).max(0);
    s
}
