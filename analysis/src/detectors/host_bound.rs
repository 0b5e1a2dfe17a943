//! `host_bound`: the thread that feeds the GPU computes on the host between its GPU calls
//! (Python, data preparation on the main thread, logging, per-step bookkeeping) for longer than
//! the GPU needs to run what it launched, step after step, so the GPU waits for the host: a
//! host-bound input pipeline or training loop. The gaps are short (tens of milliseconds), so no
//! one of them is a feeding stall; together they are most of the run.
//!
//! Trigger (from the thread's time budget, over its span after start-up): the thread was on the
//! CPU outside GPU calls, or preempted there, for >= 40% of it (start-up and stretches of a
//! second or more without a GPU call, [`super::feeding_stall`]'s, left out), it spent under
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
        let host = (b.outside.on_cpu_ns - left_cpu).max(0);
        // The whole sync or copy, not its blocked part: a real GPU's sync spins on the CPU.
        let waiting = b.waiting_ns();
        let idle = (b.gpu_idle_estimate_ns - b.gpu_idle_long_ns).max(0);
        // Preempted outside calls, the thread wanted the CPU for its host work too: that part
        // is contention's to claim (cpu_contention), the rest is this finding's.
        let preempted = (b.outside.preempted_ns - left_preempted).max(0);
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
        if (wanted as f64) < MIN_HOST_SHARE * span as f64
            || waiting * 2 >= wanted
            || (idle as f64) < MIN_IDLE_SHARE * span as f64
            || (lost as f64) < MIN_LOST_SHARE * span as f64
        {
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
                evidence_sql: format!(
                    "SELECT gap_from, gap_ns FROM (SELECT timestamp + duration AS gap_from, lead(timestamp) OVER (ORDER BY timestamp) - timestamp - duration AS gap_ns FROM events WHERE node = {} AND tid = {tid} AND source IN ('CUDA', 'DRIVER', 'GRAPH', 'NCCL')) WHERE gap_ns >= 1000000 ORDER BY gap_ns DESC LIMIT 50",
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
