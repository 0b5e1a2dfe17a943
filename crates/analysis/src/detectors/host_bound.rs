//! `host_bound`: the thread that feeds the GPU computes on the host between its GPU calls
//! (Python, data preparation on the main thread, logging, per-step bookkeeping) for longer than
//! the GPU needs to run what it launched, step after step, so the GPU waits for the host: a
//! host-bound input pipeline or training loop. The gaps are short (tens of milliseconds), so no
//! one of them is a feeding stall; together they are most of the run.
//!
//! Trigger (from the thread's time budget, over its span after start-up): the thread was on the
//! CPU outside GPU calls, or preempted there, for >= 40% of it (start-up and stretches of a
//! second or more without a GPU call, [`super::feeding_stall`]'s, left out; the time on the CPU
//! is measured by the evidence query, [`host_ctes`], for threads the budget leaves in), it spent under
//! half of that time in syncs and device-to-host copies (else the GPU is the bottleneck:
//! `gpu_bound`), it made at least [`MIN_CALLS`] GPU calls, its process's GPU sat idle (the
//! budget's host-side estimate, less its idle stretches of a second or more) for >= 25% of the
//! span, and the time lost is >= 10% of it.
//! Time lost: the smaller of the host work on the CPU and that GPU idle time: what overlapping
//! the host work with the GPU's would at most give back. Time preempted is `cpu_contention`'s,
//! not counted again. Severity: the common rule.
//! One finding per process: its threads share the process's GPU idle estimate, so the thread
//! whose host work loses the most speaks for it (PyTorch's autograd thread launches between the
//! main thread's calls too).
//! Call sites: the GPU calls that ended the thread's longest gaps (up to
//! [`crate::sites::MAX_AT`]): where the loop goes back to launching after its host work.

use causeway_store::StoreError;

use super::{Finding, Input, d, lit, pct, severity, span_words, steady_span, step, thread_budgets};
use crate::chains::Chain;
use crate::intervals::{Span, overlaps};
use crate::switches::Off;

/// Least share of the steady span on the CPU outside GPU calls.
pub const MIN_HOST_SHARE: f64 = 0.40;

/// Least share of the steady span the GPU sat idle (the time lost). A small model on a fast
/// GPU idles a little between steps in any loop (11-13% in the corpus's healthy H200 runs):
/// a quarter is where the host, not the model, sets the pace.
pub const MIN_IDLE_SHARE: f64 = 0.25;

/// Least share of the steady span the host work itself (not preemption) takes of that idle
/// time: the time lost.
pub const MIN_LOST_SHARE: f64 = 0.10;

/// Least GPU calls of the thread: a loop, not a few calls at start.
pub const MIN_CALLS: u64 = 100;

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let mut out = Vec::new();
    for b in thread_budgets(inp) {
        let tid = b.tid.unwrap_or_default();
        let calls: u64 = b.inside.iter().map(|i| i.estimated_calls()).sum();
        if calls < MIN_CALLS {
            continue;
        }
        let span = steady_span(ctx, b);
        let steady = ctx.steady_from(&b.node, tid);
        // The thread's gaps between GPU calls where every call was recorded: (length, start, end).
        let all: Vec<(i64, i64, i64)> = ctx
            .timelines
            .get(&b.node)
            .map(|tl| {
                tl.gaps
                    .iter()
                    .filter(|g| g.tid == tid && !ctx.sampled(&b.node, g.start, g.end))
                    .map(|g| (g.end - g.start, g.start, g.end))
                    .collect()
            })
            .unwrap_or_default();
        // Start-up (before the loop's steady state) and stretches of a second or more without
        // a GPU call (a feeding stall's) are not the loop's: the host work and preemption in
        // them and the GPU idle time of long idle stretches are left out.
        let long: Vec<Span<()>> = all
            .iter()
            .filter(|g| g.0 >= super::feeding_stall::MIN_STALL_NS)
            .map(|&(_, start, end)| Span {
                start,
                end,
                data: (),
            })
            .collect();
        let long_ns: i64 = long.iter().map(|g| g.end - g.start).sum();
        let first = ctx
            .threads
            .iter()
            .find(|t| t.node == b.node && t.tid == tid)
            .map(|t| t.first_ns);
        let startup = match (first, steady) {
            (Some(a), Some(f)) if f > a => f - a,
            _ => 0,
        };
        let left_out = left_out(&long, first.unwrap_or(0), startup);
        let (left_cpu, left_preempted) = on_cpu_in(&left_out, ctx.switches.of(&b.node, tid));
        // The whole sync or copy, not its blocked part: a real GPU's sync spins on the CPU.
        let waiting = b.waiting_ns();
        let idle = (b.gpu_idle_estimate_ns - b.gpu_idle_long_ns).max(0);
        // Preempted outside calls, the thread wanted the CPU for its host work too: that part
        // is contention's to claim (cpu_contention), the rest is this finding's.
        let preempted = (b.outside.preempted_ns - left_preempted).max(0);
        // The budget's time on the CPU outside calls, all of the long stretches' taken off: at
        // least the host work after start-up. Only a thread that passes on it is measured.
        let most = (b.outside.on_cpu_ns - on_cpu_in(&long, ctx.switches.of(&b.node, tid)).0).max(0);
        if !passes(most + preempted, waiting, idle, most.min(idle), span) {
            continue;
        }
        let (lo, hi) = (
            steady
                .map_or(first.unwrap_or(0), |f| f.max(first.unwrap_or(0)))
                .max(ctx.window.from_ns),
            ctx.threads
                .iter()
                .find(|t| t.node == b.node && t.tid == tid)
                .map_or(ctx.window.until_ns, |t| t.last_ns.min(ctx.window.until_ns)),
        );
        let ctes = host_ctes(ctx, &b.node, b.pid, tid, lo, hi);
        let host = match measured_host(ctx, &ctes)? {
            Some(h) => h,
            // Not measured (a reader under limits): the budget's, start-up's calls taken off too.
            None => (b.outside.on_cpu_ns - left_cpu).max(0),
        };
        let wanted = host + preempted;
        let lost = host.min(idle);
        tracing::debug!(
            tid,
            span,
            host,
            preempted,
            waiting,
            idle,
            startup,
            long_ns,
            left_cpu,
            "host_bound"
        );
        if !passes(wanted, waiting, idle, lost, span) {
            continue;
        }
        // The loop's gaps, longest first: where its host work sits.
        let mut gaps: Vec<(i64, i64)> = all
            .iter()
            .filter(|g| g.0 < super::feeding_stall::MIN_STALL_NS)
            .filter(|g| steady.is_none_or(|f| g.1 >= f))
            .map(|&(len, _, end)| (len, end))
            .collect();
        gaps.sort_unstable_by(|a, b| b.cmp(a));
        let (longest, median) = (
            gaps.first().map_or(0, |g| g.0),
            gaps.get(gaps.len() / 2).map_or(0, |g| g.0),
        );
        let sampled = if b.coverage.is_empty() {
            ""
        } else {
            " (its GPU calls were sampled part of the time: gaps are counted where every call was recorded)"
        };
        let scope = crate::sites::Scope::thread(
            &b.node,
            b.pid,
            tid,
            &[],
            "GPU calls after the longest gaps",
        )
        .at_times(gaps.iter().map(|g| g.1).collect());
        out.push((
            b.pid,
            Finding {
                detector: "host_bound",
                node: b.node.clone(),
                time_lost_ns: lost,
                severity: severity(lost, ctx.node_span_ns(&b.node)),
                summary: format!(
                    "{} (tid {tid}) computed on the host between its GPU calls for {} of {} ({}) while the GPU sat idle an estimated {}",
                    b.comm,
                    d(host),
                    span_words(span, b.span_ns),
                    pct(host, span),
                    d(idle)
                ),
                root_cause: "Host-bound loop: the thread that launches the GPU's work spends longer on host-side work between its calls (Python, data preparation, logging) than the GPU needs to run them, so the GPU waits for the host every step".into(),
                explanation: format!(
                    "{} (pid {}, tid {tid}) made {calls} GPU calls and, over {} ({}), was on the CPU outside them for {}{}, between calls: {} gaps of 1 ms to 1 s (median {}, longest {}){sampled}. It spent only {} in syncs and device-to-host copies, waiting for the GPU, so the GPU finished its work before the host came back: the process's GPU sat idle an estimated {} (from a call that drained it to the next work). The host work between calls, not the GPU, sets the pace.{}",
                    b.comm,
                    b.pid,
                    span_words(span, b.span_ns),
                    d(span),
                    d(host),
                    if preempted > 0 {
                        format!(" and preempted there for {} more (contention's, not counted here)", d(preempted))
                    } else {
                        String::new()
                    },
                    gaps.len(),
                    d(median),
                    d(longest),
                    d(waiting),
                    d(idle),
                    if long.is_empty() && startup == 0 {
                        String::new()
                    } else {
                        format!(
                            " Left out as not the loop's: start-up ({}) and {} stretch(es) of a second or more without a GPU call ({}), {} on the CPU in all.",
                            d(startup),
                            long.len(),
                            d(long_ns),
                            d(left_cpu)
                        )
                    }
                ),
                timeline: vec![
                    step("HOST", "on_cpu", format!("host work between GPU calls, {} gaps", gaps.len()), host),
                    step("CUDA", "wait", format!("in syncs and device-to-host copies, {}", d(waiting)), waiting),
                    step("GPU", "idle", "waiting for the host (estimated)".into(), idle),
                ],
                recommendations: vec![
                    format!(
                        "See what the thread runs between its calls: `causeway stacks --db TRACE --pid {}` (recorded with --stacks) names the line each step resumes at; `py-spy record --pid {}` samples the host work itself.",
                        b.pid, b.pid
                    ),
                    "Move data loading and preparation off the launching thread (DataLoader with num_workers > 0 and pin_memory=True, prefetching), and keep per-step logging and .item() calls out of the hot loop.".into(),
                    "Cut per-step host cost: larger batches, torch.compile or CUDA graphs (fewer, bigger launches), vectorised preprocessing.".into(),
                ],
                // The thread's longest gaps between GPU calls, each row with the host work
                // and the GPU idle estimate the summary gives (host_ns, loop_gpu_idle_ns).
                evidence_sql: format!(
                    "WITH {ctes} SELECT gap_from, gap_ns, hb.host_ns, gpu_idle.idle_ns - gpu_idle.idle_long_ns AS loop_gpu_idle_ns, gpu_idle.idle_ns AS gpu_idle_ns FROM (SELECT timestamp + duration AS gap_from, lead(timestamp) OVER (ORDER BY timestamp) - timestamp - duration AS gap_ns FROM events WHERE node = {} AND tid = {tid} AND source IN ('CUDA', 'DRIVER', 'GRAPH', 'NCCL')) CROSS JOIN hb CROSS JOIN gpu_idle WHERE gap_ns >= 1000000 ORDER BY gap_ns DESC LIMIT 50",
                    lit(&b.node)
                ),
            }
            .into_chain()
            .at(scope),
        ));
    }
    out.sort_by(|a, b| (&a.1.node, a.0, b.1.time_lost_ns).cmp(&(&b.1.node, b.0, a.1.time_lost_ns)));
    out.dedup_by(|b, a| a.1.node == b.1.node && a.0 == b.0);
    Ok(out.into_iter().map(|(_, c)| c).collect())
}

/// Whether a thread's figures make it host-bound (see the module's trigger).
fn passes(wanted: i64, waiting: i64, idle: i64, lost: i64, span: i64) -> bool {
    (wanted as f64) >= MIN_HOST_SHARE * span as f64
        && waiting * 2 < wanted
        && (idle as f64) >= MIN_IDLE_SHARE * span as f64
        && (lost as f64) >= MIN_LOST_SHARE * span as f64
}

/// The CTEs that measure the summary's figures from the trace: `hb` (one row, `host_ns`: the
/// thread's time in `[lo, hi]`, its span after start-up, that is in none of its GPU calls, its
/// off-CPU intervals and its stretches of a second or more between GPU calls outside sampled
/// stretches: on the CPU between calls) and [`super::gpu_idle_ctes`]'s `gpu_idle`.
fn host_ctes(
    ctx: &crate::facts::Ctx<'_>,
    node: &str,
    pid: u32,
    tid: u32,
    lo: i64,
    hi: i64,
) -> String {
    let n = lit(node);
    let (from, until) = (ctx.window.from_ns, ctx.window.until_ns);
    let long = super::feeding_stall::MIN_STALL_NS;
    let unsampled: String = (ctx.sampled.get(node).into_iter().flatten())
        .map(|(x, y)| format!(" AND NOT (a<{y} AND b>{x})"))
        .collect();
    format!(
        "hc AS (SELECT timestamp a, timestamp+duration b FROM events WHERE node={n} AND tid={tid} AND source IN ('CUDA','DRIVER','GRAPH','NCCL') AND timestamp BETWEEN {from} AND {until}), \
         hl AS (SELECT * FROM (SELECT max(b) OVER (ORDER BY a, b ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) a, a b FROM hc) WHERE b-a>={long}{unsampled}), \
         ho AS (SELECT * FROM (SELECT {s} a, {s}+duration b FROM events WHERE node={n} AND tid={tid} AND op='sched_switch') WHERE a<{hi} AND b>{lo}), \
         hv AS (SELECT greatest(a, {lo}) a, least(b, {hi}) b FROM (SELECT * FROM hc UNION ALL SELECT * FROM hl UNION ALL SELECT * FROM ho) WHERE b>{lo} AND a<{hi} AND b>a), \
         hp AS (SELECT a t, 1 d FROM hv UNION ALL SELECT b, -1 FROM hv UNION ALL SELECT {lo}, 0 UNION ALL SELECT {hi}, 0), \
         hr AS (SELECT t, sum(d) OVER (ORDER BY t, d ROWS UNBOUNDED PRECEDING) k, lead(t) OVER (ORDER BY t, d) t2 FROM hp), \
         hb AS (SELECT coalesce(sum(t2-t) FILTER (WHERE k=0 AND t2>t), 0)::BIGINT host_ns FROM hr), {}",
        super::gpu_idle_ctes(ctx, node, pid),
        s = super::off_start(ctx, node)
    )
}

/// `host_ns` of [`host_ctes`], through the guard as an agent would run the evidence; None when
/// the query does not run (a reader under a memory or time limit).
fn measured_host(ctx: &crate::facts::Ctx<'_>, ctes: &str) -> Result<Option<i64>, StoreError> {
    let sql = format!("WITH {ctes} SELECT host_ns FROM hb");
    Ok(
        super::guarded_rows(ctx, &sql, Some(1), "host_bound: measuring the host work").and_then(
            |rows| {
                rows.first()
                    .and_then(|r| r.first())
                    .and_then(serde_json::Value::as_i64)
            },
        ),
    )
}

/// The union of start-up (`startup` ns from `first`) and the long gaps, sorted and disjoint.
fn left_out(long: &[Span<()>], first: i64, startup: i64) -> Vec<Span<()>> {
    let mut v: Vec<(i64, i64)> = long.iter().map(|g| (g.start, g.end)).collect();
    if startup > 0 {
        v.push((first, first + startup));
    }
    crate::intervals::union(v)
        .into_iter()
        .map(|(start, end)| Span {
            start,
            end,
            data: (),
        })
        .collect()
}

/// Time on the CPU and time preempted of a thread within disjoint sorted spans, from its
/// off-CPU intervals (sorted by start).
fn on_cpu_in(spans: &[Span<()>], off: &[Span<Off>]) -> (i64, i64) {
    let mut on: i64 = spans.iter().map(|s| s.end - s.start).sum();
    let mut preempted = 0;
    overlaps(spans, off, |_, o, ns| {
        on -= ns;
        if o.data.state == 0 {
            preempted += ns;
        }
    });
    (on.max(0), preempted)
}

#[cfg(test)]
mod tests {
    use causeway_store::{QueryLimits, Reader, Writer, WriterOptions};

    use crate::chains::ChainQuery;
    use crate::detectors::testutil::ev;

    const T0: i64 = 1_700_000_000_000_000_000;
    const MS: i64 = 1_000_000;

    /// A loop of 200 steps: 20 ms of host work (every fourth step preempted for 5 ms of it),
    /// 10 launches back to back, a 2 ms sync. Before it, a 400 ms allocation (start-up). By
    /// design the host work between calls after the first launch is 199 x 20 ms less 50 x 5 ms
    /// preempted, 3.73 s (3.75 s had the first step's host work been the loop's), and the GPU
    /// sits idle from each sync to the next launch: 199 x 20 ms, 3.98 s. The allocation is not
    /// host work (the engine once took start-up's calls off the host work too: 3.33 s).
    #[test]
    fn host_work_is_the_loops_time_on_the_cpu_between_calls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("t.duckdb");
        let mut w = Writer::create(&p, WriterOptions::default()).expect("writer");
        let mut t = T0;
        w.append(&ev(t, 400 * MS, "cudaMalloc", 1 << 30, 0))
            .unwrap();
        t += 400 * MS;
        for step in 0..200 {
            if step % 4 == 1 {
                w.append(&ev(t + 5 * MS, 5 * MS, "sched_switch", 99, 0))
                    .unwrap();
            }
            t += 20 * MS;
            for _ in 0..10 {
                w.append(&ev(t, 10_000, "cudaLaunchKernel", 64, 0)).unwrap();
                t += 10_000;
            }
            w.append(&ev(t, 2 * MS, "cudaStreamSynchronize", 0, 0))
                .unwrap();
            t += 2 * MS;
        }
        w.finish().expect("finish");
        let r = Reader::open(&p).expect("reader");
        let e = crate::engine::explain(&r, &ChainQuery::default()).expect("explain");
        let c = e
            .chains
            .iter()
            .find(|c| c.detector == "host_bound")
            .unwrap_or_else(|| panic!("{:#?}", e.chains));
        let g = causeway_sqlguard::guard(&c.evidence_sql, r.policy(), None).unwrap();
        let res = r.query(&g, &QueryLimits::default()).unwrap();
        let col = |name: &str| {
            let i = res.columns.iter().position(|x| x.name == name).unwrap();
            res.rows[0][i].as_i64().unwrap()
        };
        let (host, idle) = (col("host_ns"), col("loop_gpu_idle_ns"));
        // Within 1 ms of 3.73 s, or of 3.75 s where the loop starts with the first step.
        assert!(
            (3_729 * MS..=3_751 * MS).contains(&host),
            "host {host} ns: {}",
            c.summary
        );
        assert!((3_979 * MS..=3_981 * MS).contains(&idle), "idle {idle} ns");
        assert!(
            c.summary.contains(&crate::fmt::dur(host))
                && c.summary.contains(&crate::fmt::dur(idle)),
            "{} ({host}, {idle})",
            c.summary
        );
        assert_eq!(c.time_lost_ns, host.min(idle));
        // The budget's estimate is the query's.
        let b = e
            .budgets
            .iter()
            .find(|b| b.tid == Some(10))
            .expect("the thread's budget");
        assert_eq!(b.gpu_idle_estimate_ns, col("gpu_idle_ns"));
    }
}
