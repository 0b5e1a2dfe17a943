//! `memory_fragmentation`: GPU allocations get slower over the run and/or are not given back
//! (caching allocator churn after `empty_cache`, fragmentation, leaks).
//!
//! Trigger: a process with >= 20 allocation calls (cudaMalloc, cuMemAlloc, managed variants)
//! whose p50 in the last third of them is >= 3x the first third and >= 200 us (latency climb),
//! or whose allocations never freed (by pointer) amount to >= 20% of calls and >= 1 GiB.
//! Time lost: the allocation time above the first third's p50. Severity: the common rule.
//! Recommendation: stop calling empty_cache per step, reuse buffers, set allocator options.

use std::collections::HashMap;
use std::sync::LazyLock;

use causeway_store::StoreError;
use causeway_store::duckdb;

use super::{Finding, Input, d, lit, severity, step};
use crate::chains::Chain;
use crate::facts::duck;
use crate::fmt::bytes;
use crate::opsets::named;

/// GPU allocation calls.
const ALLOC_OPS: [&str; 4] = [
    "cudaMalloc",
    "cuMemAlloc",
    "cudaMallocManaged",
    "cuMemAllocManaged",
];
/// A process needs this many allocation calls to be examined.
const MIN_ALLOCS: u64 = 20;

static ALLOC_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH m AS (
  SELECT node, pid, timestamp, duration, arg0, arg1,
         ntile(3) OVER (PARTITION BY node, pid ORDER BY timestamp) AS third
  FROM event_data
  WHERE {}
    AND timestamp BETWEEN $1 AND $2 AND ($3::BIGINT < 0 OR pid = $3::BIGINT) AND ($4::VARCHAR = '' OR node = $4::VARCHAR)),
f AS (
  SELECT DISTINCT node, pid, arg0 AS ptr FROM event_data
  WHERE {} AND timestamp BETWEEN $1 AND $2)
SELECT m.node, m.pid, count(*)::BIGINT,
       quantile_disc(m.duration, 0.5) FILTER (WHERE m.third = 1),
       quantile_disc(m.duration, 0.5) FILTER (WHERE m.third = 3),
       (CASE WHEN sum(m.duration) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(m.duration) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(m.duration) END)::BIGINT,
       count(*) FILTER (WHERE f.ptr IS NULL)::BIGINT,
       coalesce((CASE WHEN sum(m.arg0) FILTER (WHERE f.ptr IS NULL) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(m.arg0) FILTER (WHERE f.ptr IS NULL) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(m.arg0) FILTER (WHERE f.ptr IS NULL) END), 0)::BIGINT
FROM m LEFT JOIN f ON f.node = m.node AND f.pid = m.pid AND f.ptr = m.arg1
GROUP BY 1, 2 HAVING count(*) >= {MIN_ALLOCS} ORDER BY 1, 2",
        named(&ALLOC_OPS),
        named(&["cudaFree", "cuMemFree"])
    )
});

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    // The query below keeps processes with >= 20 allocations; the op statistics already
    // count them (same window and filters), so most traces skip it.
    let mut allocs: HashMap<(&str, u32), u64> = HashMap::new();
    for o in ctx
        .ops
        .iter()
        .filter(|o| ALLOC_OPS.contains(&o.op.as_str()))
    {
        *allocs.entry((&o.node, o.pid)).or_default() += o.count;
    }
    if allocs.values().all(|&n| n < MIN_ALLOCS) {
        return Ok(Vec::new());
    }
    type Row = (String, u32, i64, i64, i64, i64, i64, i64);
    let rows: Vec<Row> = ctx
        .r
        .prepare_trusted(ALLOC_SQL.as_str())?
        .query_map(
            duckdb::params![ctx.window.from_ns, ctx.window.until_ns, ctx.pid, ctx.node],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(ctx.r, "measuring GPU allocations"))?;
    let mut out = Vec::new();
    for (node, pid, n, early, late, total, unfreed, unfreed_bytes) in rows {
        let climb = late >= early.max(1).saturating_mul(3) && late >= 200_000;
        let leak = unfreed.saturating_mul(5) >= n && unfreed_bytes >= 1 << 30;
        if !climb && !leak {
            continue;
        }
        let lost = total.saturating_sub(n.saturating_mul(early)).max(0);
        let comm = ctx.name(&node, pid);
        let frees: u64 = ["cudaFree", "cuMemFree"]
            .iter()
            .filter_map(|o| ctx.op(&node, pid, o))
            .map(|o| o.count)
            .sum();
        out.push(
            Finding {
                detector: "memory_fragmentation",
                node: node.clone(),
                time_lost_ns: lost,
                severity: severity(lost, ctx.node_span_ns(&node)),
                summary: format!("GPU allocation p50 of {comm} (pid {pid}) climbed {} -> {} over {n} calls; {} never freed", d(early), d(late), bytes(unfreed_bytes)),
                root_cause: "GPU memory fragmentation: allocations go back to the driver every step and get slower as free memory fragments; part of it is never released".into(),
                explanation: format!(
                    "{comm} (pid {pid}) made {n} GPU allocation calls and {frees} frees in the window. The median allocation took {} in the first third of the calls and {} in the last third ({:.1}x), {} in total, {} above the early median. {unfreed} allocations ({}) have no matching free: bytes outstanding keep growing.",
                    d(early), d(late), late as f64 / early.max(1) as f64, d(total), d(lost), bytes(unfreed_bytes)
                ),
                timeline: vec![
                    step("CUDA", "cudaMalloc", format!("p50 {} -> {}", d(early), d(late)), total),
                    step("CUDA", "cudaFree", format!("{frees} frees for {n} allocations; {} outstanding", bytes(unfreed_bytes)), 0),
                ],
                recommendations: vec![
                    "Do not call torch.cuda.empty_cache() in the training loop; let the caching allocator reuse blocks.".into(),
                    "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to limit fragmentation; preallocate fixed-size buffers.".into(),
                    "Find the unreleased allocations (torch.cuda.memory._record_memory_history) if bytes outstanding keep growing.".into(),
                ],
                evidence_sql: format!(
                    "SELECT timestamp, op, duration, arg0 AS bytes, arg1 AS ptr FROM events WHERE node = {} AND pid = {pid} AND op IN ('cudaMalloc', 'cudaFree', 'cuMemAlloc', 'cuMemFree') ORDER BY timestamp LIMIT 200",
                    lit(&node)
                ),
            }
            .into_chain(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::demo::Scenario;
    use crate::detectors::testutil::chains_of;

    #[test]
    fn fires_on_climbing_allocation_latency() {
        let c = chains_of(Scenario::MemoryFragmentation, false, "memory_fragmentation");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(c[0].summary.contains("climbed"), "{}", c[0].summary);
    }

    #[test]
    fn steady_balanced_allocations_are_fine() {
        assert!(chains_of(Scenario::MemoryFragmentation, true, "memory_fragmentation").is_empty());
    }
}
