//! `memory_fragmentation`: GPU allocations get slower over the run and/or are not given back
//! (caching allocator churn after `empty_cache`, fragmentation, leaks).
//!
//! Trigger: a process with >= 20 allocation calls (cudaMalloc, cuMemAlloc, managed variants)
//! whose p50 in the last third of them is >= 3x the first third and >= 200 us (latency climb),
//! or whose allocations never freed (by pointer, where pointers were recorded) amount to >= 20%
//! of calls and >= 1 GiB and go on into the last quarter of the process's span (memory
//! allocated at start-up and kept, like weights and optimizer state, is not a leak). A driver
//! allocation nested in a runtime one is counted once.
//! Time lost: the allocation time above the first third's p50. Severity: the common rule.
//! Recommendation: stop calling empty_cache per step, reuse buffers, set allocator options.

use std::collections::HashMap;
use std::sync::LazyLock;

use causeway_store::StoreError;
use causeway_store::duckdb;

use super::{Finding, Input, d, lit, severity, step};
use crate::base::errors::duck;
use crate::chains::Chain;
use crate::fmt::bytes;
use crate::opsets::named;

/// GPU allocation calls.
const ALLOC_OPS: [&str; 4] = causeway_ops::names(causeway_ops::Class::Alloc);
/// A process needs this many allocation calls to be examined.
const MIN_ALLOCS: u64 = 20;

/// Per process: allocation calls (a driver allocation inside the runtime's, from tools that
/// probe both, is the same one), the p50 of the first and last third, their time, and those
/// never freed. Parameters: $1 and $2 the window, $3 the pid (-1: all), $4 the node ('': all).
static ALLOC_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH a AS (
  SELECT node, pid, timestamp, duration, arg0, arg1,
         coalesce(max(timestamp + duration) OVER (
           PARTITION BY node, tid ORDER BY timestamp, duration DESC
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), -1) >= timestamp + duration AS nested
  FROM event_data
  WHERE {}
    AND timestamp BETWEEN $1 AND $2 AND ($3::BIGINT < 0 OR pid = $3::BIGINT) AND ($4::VARCHAR = '' OR node = $4::VARCHAR)),
m AS (
  SELECT node, pid, timestamp, duration, arg0, arg1,
         ntile(3) OVER (PARTITION BY node, pid ORDER BY timestamp) AS third
  FROM a WHERE NOT nested),
f AS (
  SELECT DISTINCT node, pid, arg0 AS ptr FROM event_data
  WHERE {} AND timestamp BETWEEN $1 AND $2 AND arg0 <> 0)
SELECT m.node, m.pid, count(*)::BIGINT AS calls,
       quantile_disc(m.duration, 0.5) FILTER (WHERE m.third = 1) AS first_third_p50_ns,
       quantile_disc(m.duration, 0.5) FILTER (WHERE m.third = 3) AS last_third_p50_ns,
       (CASE WHEN sum(m.duration) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(m.duration) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(m.duration) END)::BIGINT AS total_ns,
       count(*) FILTER (WHERE f.ptr IS NULL AND m.arg1 <> 0)::BIGINT AS never_freed,
       coalesce((CASE WHEN sum(m.arg0) FILTER (WHERE f.ptr IS NULL AND m.arg1 <> 0) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(m.arg0) FILTER (WHERE f.ptr IS NULL AND m.arg1 <> 0) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(m.arg0) FILTER (WHERE f.ptr IS NULL AND m.arg1 <> 0) END), 0)::BIGINT AS never_freed_bytes,
       count(*) FILTER (WHERE m.arg1 <> 0)::BIGINT AS with_pointer,
       coalesce(max(m.timestamp) FILTER (WHERE f.ptr IS NULL AND m.arg1 <> 0), 0)::BIGINT AS last_never_freed
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
    type Row = (String, u32, i64, i64, i64, i64, i64, i64, i64, i64);
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
    for (node, pid, n, early, late, total, unfreed, unfreed_bytes, with_ptr, last_unfreed) in rows {
        let climb = late >= early.max(1).saturating_mul(3) && late >= 200_000;
        // Only allocations whose pointer was recorded can be matched with a free (imported
        // traces store none). Weights, optimizer state and the caching allocator's blocks are
        // allocated once and kept to the end: a leak keeps allocating into the last quarter.
        let (first, last) = ctx
            .threads
            .iter()
            .filter(|t| t.node == node && t.pid == pid)
            .fold((i64::MAX, i64::MIN), |(a, b), t| {
                (a.min(t.first_ns), b.max(t.last_ns))
            });
        let still_growing =
            last_unfreed >= first.saturating_add((last.saturating_sub(first)) / 4 * 3);
        let leak = with_ptr > 0
            && unfreed.saturating_mul(5) >= n
            && unfreed_bytes >= 1 << 30
            && still_growing;
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
                summary: if climb {
                    format!("GPU allocation p50 of {comm} (pid {pid}) climbed {} -> {} over {n} calls; {} never freed", d(early), d(late), bytes(unfreed_bytes))
                } else {
                    format!("{unfreed} GPU allocations of {comm} (pid {pid}), {}, were never freed (of {n} calls)", bytes(unfreed_bytes))
                },
                root_cause: "GPU memory fragmentation: allocations go back to the driver every step and get slower as free memory fragments; part of it is never released".into(),
                explanation: format!(
                    "{comm} (pid {pid}) made {n} GPU allocation calls (a driver allocation inside a runtime one counted once) and {frees} frees in the window. The median allocation took {} in the first third of the calls and {} in the last third ({:.1}x), {} in total, {} above the early median. {}",
                    d(early), d(late), late as f64 / early.max(1) as f64, d(total), d(lost),
                    if with_ptr == 0 {
                        "The trace records no allocation pointers, so allocations cannot be matched with frees.".to_string()
                    } else {
                        format!("{unfreed} allocations ({}) have no matching free.", bytes(unfreed_bytes))
                    }
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
                // The detector's own query for this process: the summary's figures are
                // calls, first_third_p50_ns, last_third_p50_ns and never_freed_bytes, the time
                // lost above_early_ns; timestamp (the last allocation never freed) places it.
                evidence_sql: format!(
                    "SELECT *, total_ns - calls * first_third_p50_ns AS above_early_ns, nullif(last_never_freed, 0) AS timestamp FROM ({})",
                    ALLOC_SQL
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                        .replace("$1", &ctx.window.from_ns.to_string())
                        .replace("$2", &ctx.window.until_ns.to_string())
                        .replace("$3", &pid.to_string())
                        .replace("$4", &lit(&node))
                        .replace("event_data", "events")
                ),
            }
            .into_chain()
            .at(crate::sites::Scope::process(&node, pid, &[crate::budget::CallClass::Alloc, crate::budget::CallClass::Free], "allocations and frees")),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::detectors::testutil::chains_of;
    use causeway_demo::Scenario;

    #[test]
    fn fires_on_climbing_allocation_latency() {
        let c = chains_of(Scenario::MemoryFragmentation, false, "memory_fragmentation");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(c[0].summary.contains("climbed"), "{}", c[0].summary);
    }

    /// An imported-style trace: 100 runtime allocations of 32 MiB, each with the driver's
    /// allocation inside it, no pointers recorded, latency falling slightly (213 -> 203 us).
    fn nested_without_pointers() -> Vec<crate::chains::Chain> {
        use causeway_store::{Event, Reader, Writer, WriterOptions};

        use causeway_demo::model::op;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.duckdb");
        let mut w = Writer::create(&p, WriterOptions::default()).unwrap();
        w.set_node("n1", "imported:ref.db", "").unwrap();
        for i in 0..100i64 {
            let at = 1_000_000_000 + i * 10_000_000;
            let d = 213_000 - i * 100;
            let ev = |ts, d, name: &str| Event {
                timestamp: ts,
                duration: d,
                pid: 1,
                tid: 1,
                op_id: op(name),
                arg0: 32 << 20,
                ..Event::default()
            };
            w.append(&ev(at, d, "cudaMalloc")).unwrap();
            w.append(&ev(at + 1_000, d - 5_000, "cuMemAlloc")).unwrap();
            w.append(&ev(at + 2_000_000, 10_000, "cudaLaunchKernel"))
                .unwrap();
        }
        w.finish().unwrap();
        let r = Reader::open(&p).unwrap();
        crate::engine::explain(&r, &crate::chains::ChainQuery::default())
            .unwrap()
            .chains
            .into_iter()
            .filter(|c| c.detector == "memory_fragmentation")
            .collect()
    }

    #[test]
    fn no_leak_without_pointers_and_no_climb_when_latency_falls() {
        let c = nested_without_pointers();
        assert!(c.is_empty(), "{c:#?}");
    }

    #[test]
    fn steady_balanced_allocations_are_fine() {
        assert!(chains_of(Scenario::MemoryFragmentation, true, "memory_fragmentation").is_empty());
    }
}
