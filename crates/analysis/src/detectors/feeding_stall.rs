//! `feeding_stall`: the thread that feeds the GPU stops making GPU calls for a long stretch
//! while it is not asleep: it computes on the host (Python scheduling, detokenisation, data
//! preparation) or is off the CPU in an unknown state, and the GPU gets no work from it.
//!
//! Trigger (from the thread's time budget): a stall (no GPU call for >= 100 ms) of at least
//! [`MIN_STALL_NS`] in which the thread was blocked (sleeping, its state known) for under half
//! the time — a thread that sleeps is waiting for input, the network, the disk or a request, and
//! those detectors or nothing own it — and such stalls make up >= 10% of the thread's span
//! after start-up.
//! Stalls before the thread launches steadily (its first second with a tenth of the launches
//! of its busiest second) are start-up (imports, model and dataset construction, library
//! loading, lazy CUDA initialisation), not feeding: the same in a healthy run, and left to
//! `cold_start` and the notes.
//! Time lost: the length of those stalls. Severity: the common rule.
//! Recommendation: profile the host side in the stall's window; move the work off the
//! feeding thread or overlap it with GPU work.

use causeway_store::StoreError;

use super::{Finding, Input, d, lit, pct, severity, step, thread_budgets};
use crate::chains::Chain;

/// Shortest stall that counts.
pub const MIN_STALL_NS: i64 = 1_000_000_000;

/// Notes for the stalls left out as start-up: per thread, how long it went without a GPU call
/// before it launched steadily.
pub fn startup_notes(
    ctx: &crate::facts::Ctx<'_>,
    budgets: &[crate::budget::Budget],
) -> Vec<String> {
    let mut out = Vec::new();
    for b in budgets.iter().filter(|b| b.tid.is_some() && b.span_ns > 0) {
        let tid = b.tid.unwrap_or_default();
        let Some(f) = ctx.steady_from(&b.node, tid) else {
            continue;
        };
        let before: i64 = b
            .stalls
            .iter()
            .filter(|s| s.duration_ns >= MIN_STALL_NS && s.start_ns < f)
            .map(|s| s.duration_ns)
            .sum();
        if before > 0 {
            out.push(format!(
                "start-up: {} (tid {tid}) made no GPU call for {} before it launched steadily from +{} (imports, model and data construction, library loading); not counted as a feeding stall",
                b.comm,
                d(before),
                d(f - ctx.window.from_ns)
            ));
        }
    }
    out
}

/// The stalls redone from the trace as the budget finds them ([`crate::budget`]: the thread's
/// longest gaps of at least 100 ms between GPU calls outside sampled stretches, within its span,
/// split by its off-CPU intervals), kept as this detector keeps them (a second or more, asleep
/// under half of it, after start-up): per stall its length and split, and the totals the summary
/// gives (`total_on_cpu_ns`, `total_off_cpu_ns`); `timestamp` and `duration` place each stall
/// (the Perfetto export draws its flow there).
fn evidence(ctx: &crate::facts::Ctx<'_>, b: &crate::budget::Budget, steady: Option<i64>) -> String {
    use crate::budget::{STALL_MIN_NS, STALLS_PER_THREAD};
    let (node, tid) = (lit(&b.node), b.tid.unwrap_or_default());
    let (from, until) = (ctx.window.from_ns, ctx.window.until_ns);
    let (lo, hi) = ctx
        .threads
        .iter()
        .find(|t| t.node == b.node && t.tid == tid)
        .map_or((from, until), |t| {
            (t.first_ns.max(from), t.last_ns.min(until))
        });
    let unsampled: String = (ctx.sampled.get(&b.node).into_iter().flatten())
        .map(|(x, y)| format!(" AND NOT (s<{y} AND e>{x})"))
        .collect();
    format!(
        "WITH c AS (SELECT timestamp a, timestamp + duration b FROM events WHERE node = {node} AND tid = {tid} AND source IN ('CUDA', 'DRIVER', 'GRAPH', 'NCCL') AND timestamp BETWEEN {from} AND {until}), \
g0 AS (SELECT greatest(s, {lo}) s, least(e, {hi}) e FROM (SELECT lag(b) OVER (ORDER BY a) s, a e FROM c) WHERE e - s >= {STALL_MIN_NS}{unsampled}), \
g AS (SELECT s, e FROM (SELECT *, row_number() OVER (ORDER BY e - s DESC, s) r FROM g0 WHERE e > s) WHERE r <= {STALLS_PER_THREAD}), \
x AS (SELECT {s} xa, {s} + duration xb, coalesce(arg1, 2) st FROM events WHERE node = {node} AND tid = {tid} AND op = 'sched_switch'), \
o AS (SELECT g.s, x.st, least(x.xb, g.e) - greatest(x.xa, g.s) ov FROM g JOIN x ON x.xa < g.e AND x.xb > g.s), \
p AS (SELECT g.s AS timestamp, g.e - g.s AS duration, coalesce(sum(ov) FILTER (WHERE st = 0), 0) preempted_ns, coalesce(sum(ov) FILTER (WHERE st = 1), 0) asleep_ns, coalesce(sum(ov) FILTER (WHERE st NOT IN (0, 1)), 0) unknown_ns FROM g LEFT JOIN o ON o.s = g.s GROUP BY ALL), \
q AS (SELECT *, greatest(duration - preempted_ns - asleep_ns - unknown_ns, 0) on_cpu_ns FROM p WHERE duration >= {MIN_STALL_NS} AND asleep_ns * 2 < duration AND timestamp >= {}) \
SELECT *, sum(on_cpu_ns) OVER () total_on_cpu_ns, sum(preempted_ns + asleep_ns + unknown_ns) OVER () total_off_cpu_ns, sum(duration) OVER () total_stall_ns FROM q ORDER BY duration DESC, timestamp",
        steady.unwrap_or(i64::MIN),
        s = super::off_start(ctx, &b.node)
    )
}

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let mut out = Vec::new();
    for b in thread_budgets(inp) {
        let tid = b.tid.unwrap_or_default();
        let steady = ctx.steady_from(&b.node, tid);
        let stalls: Vec<_> = b
            .stalls
            .iter()
            .filter(|s| {
                s.duration_ns >= MIN_STALL_NS
                    && s.blocked_ns * 2 < s.duration_ns
                    && steady.is_none_or(|f| s.start_ns >= f)
            })
            .collect();
        let lost: i64 = stalls.iter().map(|s| s.duration_ns).sum();
        let span = super::steady_span(ctx, b);
        if stalls.is_empty() || (lost as f64) < 0.10 * span as f64 {
            continue;
        }
        let sum = |f: fn(&crate::budget::Stall) -> i64| stalls.iter().map(|s| f(s)).sum::<i64>();
        let (cpu, pre, blk, unk) = (
            sum(|s| s.on_cpu_ns),
            sum(|s| s.preempted_ns),
            sum(|s| s.blocked_ns),
            sum(|s| s.unknown_ns),
        );
        let first = stalls[0];
        let at = first.start_ns - ctx.window.from_ns;
        let listed = stalls
            .iter()
            .map(|s| {
                format!(
                    "{} from +{} ({} on the CPU, {} preempted, {} asleep, {} off the CPU in an unknown state)",
                    d(s.duration_ns),
                    d(s.start_ns - ctx.window.from_ns),
                    d(s.on_cpu_ns),
                    d(s.preempted_ns),
                    d(s.blocked_ns),
                    d(s.unknown_ns)
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let unknown_note = if unk > 0 {
            " The trace does not say why the thread was off the CPU for part of it (an imported trace stores no task state), so that part is reported as unknown, not as contention."
        } else {
            ""
        };
        out.push(
            Finding {
                detector: "feeding_stall",
                node: b.node.clone(),
                time_lost_ns: lost,
                severity: severity(lost, ctx.node_span_ns(&b.node)),
                summary: format!(
                    "{} (tid {tid}) made no GPU call for {} from +{} ({} of {}): {} on the CPU, {} off it",
                    b.comm,
                    d(first.duration_ns),
                    d(at),
                    pct(lost, span),
                    super::span_words(span, b.span_ns),
                    d(cpu),
                    d(pre + blk + unk)
                ),
                root_cause: "Feeding stall: the thread that launches the GPU's work spends a long stretch on host-side work (or off the CPU) instead of launching, so the GPU has nothing to do".into(),
                explanation: format!(
                    "{} (pid {}, tid {tid}) makes this process's GPU calls ({} of them in the window) but made none during {}. Its stalls: {listed}. Over its {} span it spent {} on the CPU outside GPU calls. It was not sleeping on input, disk or the network for most of these stretches (those would be another finding), so the host side itself is the bottleneck.{unknown_note}",
                    b.comm,
                    b.pid,
                    b.inside.iter().map(|i| i.estimated_calls()).sum::<u64>(),
                    d(lost),
                    d(b.span_ns),
                    d(b.outside.on_cpu_ns),
                ),
                timeline: vec![
                    step("HOST", "on_cpu", format!("host work outside GPU calls during the stalls, {}", d(cpu)), cpu),
                    step("HOST", "sched_switch", format!("off the CPU during the stalls: {} preempted, {} asleep, {} unknown", d(pre), d(blk), d(unk)), pre + blk + unk),
                    step("GPU", "idle", "no work from the feeding thread".into(), lost),
                ],
                recommendations: vec![
                    format!(
                        "See what the thread runs in that window: `causeway stacks --db TRACE --pid {} --from +{:.1}s --until +{:.1}s` (recorded with --stacks), or `py-spy record --pid {}` while it happens.",
                        b.pid,
                        at as f64 / 1e9,
                        (at + first.duration_ns) as f64 / 1e9,
                        b.pid
                    ),
                    "Move host-side work (scheduling, detokenisation, logprob/sampling post-processing, data preparation) off the thread that launches, or overlap it with GPU work (asynchronous scheduling, CUDA graphs).".into(),
                ],
                evidence_sql: evidence(ctx, b, steady),
            }
            .into_chain()
            // Where the thread went back to launching: the code right after the host work.
            .at(
                crate::sites::Scope::thread(&b.node, b.pid, tid, &[], "GPU calls that ended a stall")
                    .at_times(stalls.iter().map(|s| s.start_ns + s.duration_ns).collect()),
            ),
        );
    }
    Ok(out)
}
