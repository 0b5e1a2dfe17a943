//! `cold_start`: the first GPU calls of a process are slow (lazy module loading, context and
//! library handle creation, autotuning), inflating the tail of every later percentile.
//!
//! Trigger: in a process's warm-up phase (its first max(1 s, 5% of its GPU-call span)), >= 3
//! slow calls (>= 1 ms and >= 10x the op's p50; synchronisations excluded) whose excess over
//! the p50 is >= 100 ms, at a density (slow calls per second) of at least 10x the rest of the
//! run.
//! Time lost: the sum of (duration - p50) of those calls, less the time the thread was
//! preempted inside them (that is contention, not initialisation); not reported when the
//! thread slept through most of them (it was waiting for the GPU, not initialising).
//! Second trigger, for kernels first used all through the run (lazy loading of many kernels,
//! JIT compilation of PTX-only modules): per process, the first launch of each kernel (launch
//! arg0, the kernel) has a median >= 10x the op's median launch, and the first
//! launches exceed it by >= [`MIN_FIRST_USE_NS`] in all (no share of the span: a server's first
//! requests pay it, however long it then runs). Time lost: that excess.
//! Severity: the common rule.
//! Recommendation: warm up before taking traffic; load modules eagerly; capture graphs early.

use causeway_store::{StoreError, duckdb};

use super::{Finding, Input, d, lit, pct, severity, step};
use crate::base::errors::duck;
use crate::chains::Chain;

// Op ids written into this file's SQL as literals.
causeway_ops::sql_id!("cudaLaunchKernel", 3);
causeway_ops::sql_id!("cuLaunchKernel", 50);

/// Least excess of first launches over later ones for the first-use trigger (a module with
/// code for the device loads in well under a millisecond per kernel).
pub const MIN_FIRST_USE_NS: i64 = 50_000_000;

/// Per process: first launches of each kernel against later launches.
// One hash aggregation (no sort): each kernel's first launch, then per launch op of a process;
// on the event rows by node id (names joined onto the few groups, not onto every launch).
pub(crate) const FIRST_USE_SQL: &str = "
WITH k AS (
  SELECT node_id, pid, op_id, arg_min(duration, timestamp) AS first_d, count(*) AS n
  FROM event_rows
  WHERE op_id IN (3, 50) AND arg0 <> 0 AND timestamp BETWEEN ? AND ?
    AND (?::BIGINT < 0 OR pid = ?::BIGINT)
    AND (?::VARCHAR = '' OR node_id IN (SELECT node_id FROM nodes WHERE node = ?::VARCHAR))
  GROUP BY node_id, pid, op_id, arg0)
SELECT n.node, pid::BIGINT, op_id::BIGINT, count(*)::BIGINT, median(first_d)::BIGINT,
       sum(first_d)::DOUBLE, (sum(k.n) - count(*))::BIGINT
FROM k JOIN nodes n USING (node_id) GROUP BY n.node, pid, op_id ORDER BY n.node, pid, op_id";

/// Minimum excess time of warm-up calls: tens of milliseconds of first allocations and library
/// handles are every CUDA program's start (30-40 ms for PyTorch on an H200), not a finding.
pub const MIN_LOST_NS: i64 = 100_000_000;

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let mut out = Vec::new();
    // (node, pid) of each chain, so the first-use trigger does not name a process twice.
    let mut named: Vec<(String, u32)> = Vec::new();
    for a in inp.attr.iter().filter(|a| a.warmup && a.slow_calls >= 3) {
        let excess: i64 = a
            .ops
            .iter()
            .map(|(op, n)| *n as i64 * ctx.op(&a.node, a.pid, op).map_or(0, |o| o.p50_ns))
            .sum();
        // Time preempted inside them is contention's (a busy machine), not initialisation.
        let lost = (a.slow_ns - excess - a.preempted_ns).max(0);
        let Some(t) = ctx
            .threads
            .iter()
            .find(|t| t.node == a.node && t.tid == a.tid)
        else {
            continue;
        };
        let span = (t.last_ns - t.first_ns).max(1);
        let warm_len = (span / 20).max(1_000_000_000).min(span);
        let later = inp
            .attr
            .iter()
            .find(|b| !b.warmup && b.node == a.node && b.tid == a.tid)
            .map_or(0, |b| b.slow_calls);
        let dense_warm = a.slow_calls as f64 / warm_len as f64;
        let dense_later = later as f64 / (span - warm_len).max(1) as f64;
        // Calls that slept most of their time were waiting (for the GPU's work, a copy's
        // transfer), not initialising: a GPU-bound first step is not a cold start.
        let waiting = a.blocked_ns.saturating_mul(2) > a.slow_ns;
        if lost < MIN_LOST_NS || dense_warm < 10.0 * dense_later || waiting {
            continue;
        }
        // Where the device's own timeline shows it working through the stretch, the slow
        // calls cost it nothing: a profiler window opened mid-run whose launches blocked on a
        // full queue is a busy GPU, not a cold start.
        let warm_end = t.first_ns.saturating_add(warm_len);
        let measured = crate::device::busy_in(ctx.r, &a.node, a.pid, t.first_ns, warm_end)?;
        if measured.is_some_and(|(busy, w)| busy.saturating_mul(10) >= w.saturating_mul(9)) {
            continue;
        }
        let node_span = ctx.node_span_ns(&a.node);
        let ops: Vec<String> = a.ops.iter().map(|(o, n)| format!("{n} {o}")).collect();
        let s = inp.split;
        let explanation = format!(
            "{} (pid {}, tid {}) made {} slow GPU calls ({}) in its first {} of GPU activity, {} in excess of their ops' medians; the rest of the run had {} such calls. The thread was off the CPU for {} inside them ({} blocked, {} preempted, {} of unknown state), consistent with module loading and initialisation rather than contention. These calls alone set the p99 of their ops. Across the trace, {} of off-CPU time was inside slow GPU calls and {} belonged to threads that made no GPU call{}: that sleeping is not GPU-path time.",
            t.comm,
            a.pid,
            a.tid,
            a.slow_calls,
            ops.join(", "),
            d(warm_len),
            d(lost),
            later,
            d(a.off_inside_ns),
            d(a.blocked_ns),
            d(a.preempted_ns),
            d(a.unknown_ns),
            d(s.inside_slow_calls_ns),
            d(s.non_gpu_threads_ns),
            s.largest_non_gpu
                .as_ref()
                .map(|(pid, tid, comm, ns)| format!(
                    " (largest: {comm} pid {pid} tid {tid}, {} off-CPU outside any CUDA call)",
                    d(*ns)
                ))
                .unwrap_or_default()
        );
        named.push((a.node.clone(), a.pid));
        out.push(
            Finding {
                detector: "cold_start",
                node: a.node.clone(),
                time_lost_ns: lost,
                severity: severity(lost, node_span),
                summary: format!("{} slow GPU calls in the first {} of {} (pid {}) cost {}", a.slow_calls, d(warm_len), t.comm, a.pid, d(lost)),
                root_cause: "Cold start: the first calls load CUDA modules and initialise libraries lazily, so early requests pay for initialisation".into(),
                explanation,
                timeline: vec![
                    step("CUDA", a.ops.keys().next().map_or("cudaLaunchKernel", |s| s.as_str()), format!("{} first-use calls, {} over median", a.slow_calls, d(lost)), a.slow_ns),
                    step("HOST", "sched_switch", format!("{} off-CPU inside them", d(a.off_inside_ns)), a.off_inside_ns),
                ],
                recommendations: vec![
                    "Send warm-up requests (or run a few dummy steps) before taking traffic or starting the timer.".into(),
                    "Load modules at start with CUDA_MODULE_LOADING=EAGER, or capture CUDA graphs during start-up.".into(),
                    "Exclude the warm-up window when judging steady-state latency percentiles (explain --from +2s).".into(),
                ],
                // The thread's slow calls in the warm-up (as the engine selects them), each with
                // its op's p50, and the summary's figures: slow_calls, warm_window_ns (the
                // thread's span / 20, at least a second) and cost_ns (their time less their
                // ops' medians and the time preempted in them).
                evidence_sql: format!(
                    "WITH {}, w AS (SELECT * FROM sc WHERE tid = {tid} AND warmup), p AS (SELECT coalesce(sum(least(sw.b, w.b) - greatest(sw.a, w.a)), 0) ns FROM w JOIN sw ON sw.a < w.b AND sw.b > w.a AND sw.st = 0), th AS (SELECT least(greatest((l - f) // 20, 1000000000), l - f) ns FROM (SELECT min(timestamp) f, max(CASE WHEN op = 'process_exit' THEN timestamp ELSE timestamp + duration END) l FROM pe WHERE tid = {tid})), t AS (SELECT count(*) slow_calls, sum(b - a) slow_ns, sum(b - a) - sum(p50) - (SELECT ns FROM p) cost_ns, (SELECT ns FROM th) warm_window_ns FROM w) SELECT w.a AS timestamp, w.op, w.b - w.a AS duration, w.p50, (SELECT slow_calls FROM t) AS slow_calls, (SELECT cost_ns FROM t) AS cost_ns, (SELECT warm_window_ns FROM t) AS warm_window_ns FROM w ORDER BY w.a LIMIT 50",
                    super::slow_calls_ctes(ctx, &a.node, a.pid, a.tid),
                    tid = a.tid
                ),
            }
            .into_chain()
            .at(
                crate::sites::Scope::thread(&a.node, a.pid, a.tid, &[], "slow GPU calls at the start")
                    .during(t.first_ns, t.first_ns + warm_len)
                    .slower_than(crate::attribution::SLOW_MIN_NS),
            ),
        );
    }
    first_use(inp, &mut out, &mut named)?;
    Ok(out)
}

/// The first-use trigger, for processes the warm-up trigger did not name.
fn first_use(
    inp: &Input<'_>,
    out: &mut Vec<Chain>,
    named: &mut Vec<(String, u32)>,
) -> Result<(), StoreError> {
    let ctx = inp.ctx;
    let rows: Vec<(String, i64, i64, i64, i64, f64, i64)> = ctx
        .r
        .prepare_trusted(FIRST_USE_SQL)?
        .query_map(
            duckdb::params![
                ctx.window.from_ns,
                ctx.window.until_ns,
                ctx.pid,
                ctx.pid,
                ctx.node,
                ctx.node
            ],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(
            ctx.r,
            "comparing first launches of each kernel with later ones",
        ))?;
    for (node, pid, op_id, kernels, first_p50, first_sum, later) in rows {
        let pid = pid as u32;
        // The op's median over all its launches: the first ones are few where it matters.
        let op_name = if op_id == i64::from(causeway_ops::id("cudaLaunchKernel")) {
            "cudaLaunchKernel"
        } else {
            "cuLaunchKernel"
        };
        let later_p50 = ctx.op(&node, pid, op_name).map_or(0, |o| o.p50_ns);
        if named.iter().any(|k| k.0 == node && k.1 == pid) {
            continue;
        }
        let lost = (first_sum - (kernels * later_p50) as f64).max(0.0) as i64;
        if kernels < 3 || later == 0 || first_p50 < 10 * later_p50.max(1) || lost < MIN_FIRST_USE_NS
        {
            continue;
        }
        let span = ctx
            .threads
            .iter()
            .filter(|t| t.node == node && t.pid == pid)
            .map(|t| (t.first_ns, t.last_ns))
            .fold((i64::MAX, i64::MIN), |(a, b), (f, l)| (a.min(f), b.max(l)));
        let span = (span.1 - span.0).max(1);
        let comm = ctx.name(&node, pid);
        named.push((node.clone(), pid));
        out.push(
            Finding {
                detector: "cold_start",
                node: node.clone(),
                time_lost_ns: lost,
                severity: severity(lost, ctx.node_span_ns(&node)),
                summary: format!(
                    "the first launch of each of {kernels} kernels of {comm} (pid {pid}) took {} (median) against {} overall: {} ({} of its span)",
                    d(first_p50),
                    d(later_p50),
                    d(lost),
                    pct(lost, span)
                ),
                root_cause: "Cold start: each kernel's first launch loads (or JIT-compiles) its module lazily, so every new kernel pays for initialisation when it is first used".into(),
                explanation: format!(
                    "{comm} (pid {pid}) launched {kernels} distinct kernels; the first launch of each took {} (median), against {} for its {op_name} calls overall ({later} later launches). The first launches cost {} more than warm ones would. Times this long point at JIT compilation of PTX (the module has no code for this GPU's architecture) or at lazy module loading of many kernels, and they happen whenever a new kernel (a new shape, a new code path) is first used, not only at start.",
                    d(first_p50),
                    d(later_p50),
                    d(lost)
                ),
                timeline: vec![
                    step("CUDA", "cudaLaunchKernel", format!("{kernels} first launches, {} over warm launches", d(lost)), lost),
                    step("GPU", "idle", "waiting for kernels to be loaded or compiled".into(), lost),
                ],
                recommendations: vec![
                    "Ship code for the GPU's architecture (build with its sm_XX in TORCH_CUDA_ARCH_LIST / -gencode) so nothing is JIT-compiled; keep the JIT cache (CUDA_CACHE_PATH, CUDA_CACHE_MAXSIZE) on persistent storage.".into(),
                    "Load modules at start with CUDA_MODULE_LOADING=EAGER and warm up every shape and code path before taking traffic.".into(),
                ],
                // Each kernel's first launch against the op's median over all its launches:
                // the summary's kernels, median first launch and time are the columns kernels,
                // first_p50_ns and excess_ns.
                evidence_sql: format!(
                    "WITH k AS (SELECT arg0 AS kernel, arg_min(duration, timestamp) AS first_ns, count(*) AS launches FROM events WHERE node = {node} AND pid = {pid} AND op = '{op_name}' AND arg0 <> 0 GROUP BY arg0), p AS (SELECT quantile_disc(duration, 0.5) AS p50 FROM events WHERE node = {node} AND pid = {pid} AND op = '{op_name}') SELECT k.kernel, k.first_ns, p.p50 AS all_launches_p50_ns, k.launches, count(*) OVER () AS kernels, median(k.first_ns) OVER () AS first_p50_ns, sum(k.first_ns) OVER () - count(*) OVER () * p.p50 AS excess_ns FROM k, p ORDER BY k.first_ns DESC LIMIT 50",
                    node = lit(&node)
                ),
            }
            .into_chain()
            // A first launch is the slow one: at least ten warm launches long.
            .at(
                crate::sites::Scope::process(&node, pid, &[crate::budget::CallClass::Launch], "slow launches")
                    .slower_than(10 * later_p50.max(1)),
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::detectors::testutil::chains_of;
    use causeway_demo::Scenario;

    #[test]
    fn fires_on_lazy_loading() {
        let c = chains_of(Scenario::ColdStart, false, "cold_start");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(c[0].time_lost_ns > 500_000_000, "{}", c[0].time_lost_ns);
    }

    #[test]
    fn quiet_when_warm_and_under_uniform_preemption() {
        assert!(chains_of(Scenario::ColdStart, true, "cold_start").is_empty());
        assert!(chains_of(Scenario::CpuContention, false, "cold_start").is_empty());
    }
}
