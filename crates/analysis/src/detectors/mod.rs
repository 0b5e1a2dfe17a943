//! Detectors: one small unit per pathology, each with a documented trigger, thresholds,
//! severity rule and recommendation text. They read the shared facts (per-thread totals,
//! per-call attribution, launch rates, host waits) and return chains; the engine ranks them.
//!
//! Severity rule (all detectors unless their file says otherwise): the share of the node's
//! traced span the chain's estimated time lost represents: HIGH >= 10%, MEDIUM >= 2%, LOW below.

pub mod allocator_churn;
pub mod cold_start;
pub mod cpu_contention;
pub mod dataloader_starvation;
pub mod device_idle;
pub mod feeding_stall;
pub mod gpu_bound;
pub mod gpu_contention;
pub mod host_bound;
pub mod host_memory_pressure;
pub mod io_stall;
pub mod lateness;
pub mod memory_fragmentation;
pub mod network_wait;
pub mod slow_copies;
pub mod straggler;
pub mod sync_storm;
pub mod throughput_drop;
pub mod waits;

use causeway_store::StoreError;

use crate::attribution::{OffCpuSplit, ThreadAttribution};
use crate::chains::{Chain, Severity, TimelineItem};
use crate::facts::Ctx;
use crate::fmt::dur;
use crate::rates::RateSeries;

/// Everything a detector may read.
#[derive(Debug)]
pub struct Input<'a> {
    /// Facts.
    pub ctx: &'a Ctx<'a>,
    /// Per-call attribution.
    pub attr: &'a [ThreadAttribution],
    /// Where off-CPU time went.
    pub split: &'a OffCpuSplit,
    /// Launch rates per launching thread.
    pub rates: &'a [RateSeries],
    /// Host waits of threads (gaps, own I/O).
    pub waits: &'a [waits::ThreadWaits],
    /// Time budgets of the GPU-calling threads and processes.
    pub budgets: &'a [crate::budget::Budget],
    /// Memory reclaim per thread.
    pub reclaims: &'a [host_memory_pressure::Reclaim],
    /// GPU time per device, measured where the trace has a device timeline.
    pub devices: &'a [crate::device::DeviceTime],
}

/// A detector's entry point.
pub type DetectFn = fn(&Input<'_>) -> Result<Vec<Chain>, StoreError>;

/// Every detector, by stable name.
pub const ALL: [(&str, DetectFn); 17] = [
    ("cpu_contention", cpu_contention::detect),
    ("dataloader_starvation", dataloader_starvation::detect),
    ("sync_storm", sync_storm::detect),
    ("memory_fragmentation", memory_fragmentation::detect),
    ("io_stall", io_stall::detect),
    ("network_wait", network_wait::detect),
    ("host_memory_pressure", host_memory_pressure::detect),
    ("throughput_drop", throughput_drop::detect),
    ("cold_start", cold_start::detect),
    ("gpu_contention", gpu_contention::detect),
    ("straggler", straggler::detect),
    ("feeding_stall", feeding_stall::detect),
    ("host_bound", host_bound::detect),
    ("slow_copies", slow_copies::detect),
    ("allocator_churn", allocator_churn::detect),
    ("gpu_bound", gpu_bound::detect),
    ("device_idle", device_idle::detect),
];

/// The common severity rule.
pub fn severity(time_lost_ns: i64, span_ns: i64) -> Severity {
    let share = time_lost_ns as f64 / span_ns.max(1) as f64;
    if share >= 0.10 {
        Severity::High
    } else if share >= 0.02 {
        Severity::Medium
    } else {
        Severity::Low
    }
}

/// Percentage with one decimal.
pub fn pct(part: i64, whole: i64) -> String {
    format!("{:.1}%", part as f64 * 100.0 / whole.max(1) as f64)
}

/// One timeline step.
pub fn step(layer: &str, op: &str, detail: String, duration_ns: i64) -> TimelineItem {
    TimelineItem {
        layer: layer.into(),
        op: op.into(),
        detail,
        duration_ns,
    }
}

/// What a detector found, before it becomes a chain.
#[derive(Debug, Clone)]
pub struct Finding {
    /// Detector name.
    pub detector: &'static str,
    /// Node.
    pub node: String,
    /// Estimated time lost (ns).
    pub time_lost_ns: i64,
    /// Severity (use [`severity`] unless the detector documents otherwise).
    pub severity: Severity,
    /// One line.
    pub summary: String,
    /// The cause.
    pub root_cause: String,
    /// Cause and effect with numbers.
    pub explanation: String,
    /// Steps.
    pub timeline: Vec<TimelineItem>,
    /// Fixes.
    pub recommendations: Vec<String>,
    /// SQL behind it.
    pub evidence_sql: String,
}

impl Finding {
    /// The chain (id assigned by the engine after ranking).
    pub fn into_chain(self) -> Chain {
        Chain {
            id: String::new(),
            detector: self.detector.into(),
            severity: self.severity,
            summary: self.summary,
            root_cause: self.root_cause,
            explanation: self.explanation,
            timeline: self.timeline,
            recommendations: self.recommendations,
            evidence_sql: self.evidence_sql,
            time_lost_ns: self.time_lost_ns,
            node: self.node,
            detected_ns: 0,
            origin: "engine".into(),
            call_sites: None,
            scope: None,
            cost: None,
            per_step: None,
        }
    }
}

pub use crate::counts::lit;

/// The common part of evidence queries over one thread's GPU calls as its budget counts them:
/// `r`, each op's scale (the process's counted / stored calls where its probes were sampled),
/// and `g`, the thread's GPU calls with `nested` set for those inside an earlier call (a runtime
/// call's own driver call: left out, as the budget leaves them out).
pub fn budget_calls_cte(
    ctx: &Ctx<'_>,
    node: &str,
    pid: u32,
    tid: u32,
    scaling: crate::budget::Scaling,
) -> String {
    use crate::budget::Scaling;
    let (from, until) = (ctx.window.from_ns, ctx.window.until_ns);
    let cov = || crate::counts::coverage_ctes(from, until, Some(node), Some(pid));
    // `scale` scales counts (and bytes), `time_scale` times: the unstored calls' time bounded
    // by the budget's factor where the counted calls would overfill the span.
    let r = match scaling {
        Scaling::Full => format!(
            "{}, r AS (SELECT o.op, c.scale, c.scale AS time_scale FROM coverage c JOIN ops o USING (op_id))",
            cov()
        ),
        Scaling::Bounded(f) => format!(
            "{}, r AS (SELECT o.op, c.scale, 1 + (c.scale - 1) * {f} AS time_scale FROM coverage c JOIN ops o USING (op_id))",
            cov()
        ),
        // No op of the thread is scaled (every call stored, or the estimate refused).
        Scaling::None => "r AS (SELECT op, 1.0 AS scale, 1.0 AS time_scale FROM ops)".to_string(),
    };
    let node = lit(node);
    format!(
        "WITH {r}, g AS (SELECT op, arg0, arg1, timestamp, duration, coalesce(max(timestamp + duration) OVER (ORDER BY timestamp, duration DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) >= timestamp + duration, false) AS nested FROM events WHERE node = {node} AND tid = {tid} AND source IN ('CUDA', 'DRIVER', 'GRAPH', 'NCCL'))"
    )
}

/// One thread's GPU calls matching `which` (a predicate on `g.op`, `g.arg1`) per op and copy
/// direction, as its budget counts them: stored calls and time, and `calls` and `scaled_ns`
/// scaled by the op's sampling; a summary's time for them is the sum of `scaled_ns`.
pub fn scaled_calls_sql(
    ctx: &Ctx<'_>,
    node: &str,
    pid: u32,
    tid: u32,
    scaling: crate::budget::Scaling,
    which: &str,
) -> String {
    format!(
        "{} SELECT g.op, CASE WHEN g.op LIKE '%Memcpy%' THEN g.arg1 END AS direction, count(*) AS stored_calls, round(count(*) * any_value(coalesce(r.scale, 1)))::BIGINT AS calls, sum(g.duration) AS stored_ns, round(sum(g.duration) * any_value(coalesce(r.time_scale, 1)))::BIGINT AS scaled_ns, median(g.duration) AS p50_ns FROM g LEFT JOIN r ON r.op = g.op WHERE NOT g.nested AND {which} GROUP BY ALL ORDER BY scaled_ns DESC",
        budget_calls_cte(ctx, node, pid, tid, scaling)
    )
}

/// CTEs that compute a process's GPU idle estimate as the time budget does
/// ([`crate::budget`]): from each call that drained the GPU (a sync, a synchronous copy, a
/// free) to the next call of the process that gave it work (a launch, an asynchronous copy or
/// memset, a collective), counted from its first launch in the window, once per next work (from
/// the first drain before it). `gpu_idle` is one row: `idle_ns` (the estimate) and
/// `idle_long_ns` (of it, stretches of a second or more). Where GPU probes were sampled (the
/// node's stretches, as literals), a drain whose next work falls in one is not measured, and
/// the short stretches measured stand for it.
pub fn gpu_idle_ctes(ctx: &Ctx<'_>, node: &str, pid: u32) -> String {
    let drains = causeway_store::catalog::OPS
        .iter()
        .filter(|o| crate::budget::pass::is_drain(o))
        .map(|o| lit(o.name))
        .collect::<Vec<_>>()
        .join(", ");
    let launches = crate::opsets::LAUNCH_NAMES.map(lit).join(", ");
    let (from, until) = (ctx.window.from_ns, ctx.window.until_ns);
    let sampled: Vec<String> = (ctx.sampled.get(node).into_iter().flatten())
        .map(|(a, b)| format!("({a}<ws AND {b}>e)"))
        .collect();
    let unmeasured = if sampled.is_empty() {
        "false".to_string()
    } else {
        sampled.join(" OR ")
    };
    let long = crate::budget::LONG_IDLE_NS;
    format!(
        "gi AS (SELECT timestamp t, timestamp+duration e, op IN ({drains}) drain, op IN ({launches}) OR op LIKE '%Async' OR source='NCCL' work, op IN ({launches}) launch FROM events WHERE node={} AND pid={pid} AND source IN ('CUDA','DRIVER','GRAPH','NCCL') AND timestamp BETWEEN {from} AND {until}), \
         gs AS (SELECT k, drain, min(CASE WHEN work THEN k END) OVER (ORDER BY k, work ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) ws FROM (SELECT e k, true drain, false work FROM gi WHERE drain UNION ALL SELECT t, false, true FROM gi WHERE work)), \
         gd AS (SELECT ws, min(k) e FROM gs WHERE drain AND ws>k AND k>=(SELECT min(t) FROM gi WHERE launch) GROUP BY ws), \
         gn AS (SELECT least(ws, {until})-e ns, {unmeasured} u FROM gd), \
         gc AS (SELECT coalesce(sum(ns) FILTER (WHERE NOT u AND ns>={long}), 0) l, coalesce(sum(ns) FILTER (WHERE NOT u AND ns<{long}), 0) s, count(*) FILTER (WHERE NOT u AND ns<{long}) m, count(*) FILTER (WHERE u) x FROM gn), \
         gpu_idle AS (SELECT (l+CASE WHEN m>0 THEN s*(m+x)//m ELSE 0 END)::BIGINT idle_ns, l::BIGINT idle_long_ns FROM gc)",
        lit(node)
    )
}

/// The rows of a detector's own evidence-shaped query (`sql`, at most `max_rows`), run through
/// the guard as an agent runs the evidence, so that the figures it gives are the evidence's;
/// None, with a warning naming `what`, when the query is refused or does not run (a reader
/// under a memory or time limit).
pub fn guarded_rows(
    ctx: &Ctx<'_>,
    sql: &str,
    max_rows: Option<u64>,
    what: &str,
) -> Option<Vec<Vec<serde_json::Value>>> {
    let g = match causeway_sqlguard::guard(sql, ctx.r.policy(), max_rows) {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(error = %e.reason, "{what}: the query was refused");
            return None;
        }
    };
    match ctx.r.query(&g, &causeway_store::QueryLimits::default()) {
        Ok(res) => Some(res.rows),
        Err(e) => {
            tracing::warn!(error = %e, "{what}: the query did not run");
            None
        }
    }
}

/// Where a sched_switch row's off-CPU interval starts, in evidence SQL: at its timestamp, or,
/// on an imported node whose rows are stamped at switch-in ([`crate::convention`]), its
/// timestamp less its duration.
pub fn off_start(ctx: &Ctx<'_>, node: &str) -> &'static str {
    if ctx.resume_convention(node) {
        "(timestamp - duration)"
    } else {
        "timestamp"
    }
}

/// CTEs selecting a process's slow GPU calls as the engine's pass does ([`crate::timeline`],
/// [`crate::attribution`]): not a synchronisation, at least 1 ms and 10x the op's nearest-rank
/// p50 in the process over the window. `sc` holds them (`id`, `tid`, `op`, `a`, `b`, `p50`, and
/// `warmup`: before the process's warm-up end, its first GPU call that is not a sync plus a
/// second or a twentieth of its GPU activity, whichever is longer), `pe` the process's events in
/// the window, and `sw` the switches of `tid` (`a`, `b`, `ran` the task that ran next, `st` the
/// run state, 2 where unknown).
pub fn slow_calls_ctes(ctx: &Ctx<'_>, node: &str, pid: u32, tid: u32) -> String {
    use crate::attribution::{SLOW_MIN_NS, SLOW_P50_FACTOR};
    let n = lit(node);
    let (from, until) = (ctx.window.from_ns, ctx.window.until_ns);
    let syncs = crate::opsets::SYNC_OPS.map(lit).join(", ");
    format!(
        "pe AS (SELECT * FROM events WHERE node = {n} AND pid = {pid} AND timestamp BETWEEN {from} AND {until}), \
q AS (SELECT op, quantile_disc(duration, 0.5) p50 FROM pe WHERE op <> 'sched_switch' GROUP BY op), \
pg AS (SELECT * FROM pe WHERE source IN ('CUDA', 'DRIVER', 'GRAPH', 'NCCL') AND op NOT IN ({syncs})), \
sc AS (SELECT row_number() OVER (ORDER BY g.timestamp) id, g.tid, g.op, g.timestamp a, g.timestamp + g.duration b, q.p50, g.timestamp < (SELECT min(timestamp) + greatest(1000000000, (max(timestamp) - min(timestamp)) // 20) FROM pg) warmup FROM pg g JOIN q ON q.op = g.op WHERE g.duration >= greatest({SLOW_MIN_NS}, {SLOW_P50_FACTOR} * q.p50)), \
sw AS (SELECT {s} a, {s} + duration b, arg0 ran, coalesce(arg1, 2) st FROM events WHERE node = {n} AND tid = {tid} AND op = 'sched_switch')",
        s = off_start(ctx, node)
    )
}

/// The thread budgets (not the process totals) of GPU-calling threads.
pub fn thread_budgets<'a>(
    inp: &'a Input<'_>,
) -> impl Iterator<Item = &'a crate::budget::Budget> + 'a {
    inp.budgets
        .iter()
        .filter(|b| b.tid.is_some() && b.span_ns > 0)
}

/// The part of a thread's span after start-up: from when it launched steadily
/// ([`crate::facts::Ctx::steady_from`]) to its last event. Rate and share thresholds use it, so
/// that seconds of imports and model construction at the start of a short trace do not dilute
/// the loop.
pub fn steady_span_ns(ctx: &crate::facts::Ctx<'_>, node: &str, pid: u32, tid: u32) -> Option<i64> {
    let t = ctx
        .threads
        .iter()
        .find(|t| t.node == node && t.pid == pid && t.tid == tid)?;
    let from = ctx
        .steady_from(node, tid)
        .map_or(t.first_ns, |f| f.max(t.first_ns));
    Some((t.last_ns - from).max(1))
}

/// [`steady_span_ns`] of a thread's budget, else its span.
pub fn steady_span(ctx: &crate::facts::Ctx<'_>, b: &crate::budget::Budget) -> i64 {
    b.tid
        .and_then(|tid| steady_span_ns(ctx, &b.node, b.pid, tid))
        .map_or(b.span_ns, |s| s.min(b.span_ns))
}

/// "its span", or "its span after start-up" where the steady span is shorter.
pub fn span_words(steady: i64, span: i64) -> &'static str {
    if steady < span {
        "its span after start-up"
    } else {
        "its span"
    }
}

/// Human duration (re-exported for detectors).
pub fn d(ns: i64) -> String {
    dur(ns)
}

/// Whether a thread name is a kernel thread or the tracer itself (never the workload).
pub fn is_system_thread(comm: &str) -> bool {
    const PREFIXES: [&str; 9] = [
        "jbd2/",
        "kworker",
        "ksoftirqd",
        "kswapd",
        "migration/",
        "rcu_",
        "ingero",
        "causeway",
        "irq/",
    ];
    PREFIXES.iter().any(|p| comm.starts_with(p))
}

/// Whether a finding's time lost is a cell of its evidence rows or the sum of one of their
/// columns (within 0.5%: the engine's sums of scaled values round differently), for the findings
/// whose evidence query computes it from the trace (all but `throughput_drop`, the rate-outlier
/// `straggler` and the reclaim-only `host_memory_pressure`); None for the others. The corpus
/// and the lab check it on every such finding.
pub fn loss_in_rows(
    detector: &str,
    summary: &str,
    time_lost_ns: i64,
    rows: &[Vec<serde_json::Value>],
) -> Option<bool> {
    let computed = match detector {
        "allocator_churn"
        | "slow_copies"
        | "io_stall"
        | "gpu_contention"
        | "cpu_contention"
        | "cold_start"
        | "host_bound"
        | "feeding_stall"
        | "memory_fragmentation"
        | "sync_storm"
        | "gpu_bound" => true,
        "dataloader_starvation" | "network_wait" | "host_memory_pressure" => {
            summary.contains("waiting for input")
        }
        "straggler" => summary.contains("reaches each collective"),
        _ => false,
    };
    if !computed {
        return None;
    }
    let ns = time_lost_ns as f64;
    let (cells, sums, _) = cells_sums_counts(rows);
    Some(
        cells
            .iter()
            .chain(&sums)
            .any(|v| (v - ns).abs() <= 0.005 * ns.abs().max(1.0)),
    )
}

/// The numeric cells of evidence rows, and each numeric column's sum and count of values.
fn cells_sums_counts(rows: &[Vec<serde_json::Value>]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let width = rows.first().map_or(0, Vec::len);
    let cells = rows
        .iter()
        .flatten()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    let (mut sums, mut counts) = (Vec::new(), Vec::new());
    for i in 0..width {
        let col: Vec<f64> = rows
            .iter()
            .filter_map(|r| r.get(i).and_then(serde_json::Value::as_f64))
            .collect();
        if !col.is_empty() {
            sums.push(col.iter().sum());
            counts.push(col.len() as f64);
        }
    }
    (cells, sums, counts)
}

/// The counts and durations of a summary as (value, unit, text), the unit "" for a count:
/// percentages, ratios and rates (derived from them and the span) and identifiers (after "tid",
/// "pid", "GPU", "rank") are left out. Written by hand: the rule looks behind a number, which the
/// `regex` crate does not do.
fn summary_figures(summary: &str) -> Vec<(f64, &'static str, String)> {
    // A unit that is a prefix of another comes after it.
    const UNITS: [&str; 10] = [
        "times a second",
        "GB/s",
        "GiB",
        "ns",
        "us",
        "ms",
        "/s",
        "%",
        "x",
        "s",
    ];
    let b = summary.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let ends =
        |rest: &str| !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() || (i > 0 && (word(b[i - 1]) || matches!(b[i - 1], b'+' | b'.')))
        {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b',') {
            i += 1;
        }
        if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        }
        let number = &summary[start..i];
        let after = summary[i..].trim_start_matches(' ');
        let spaced = after.len() < summary.len() - i;
        let (unit, end) = match UNITS
            .iter()
            .find(|u| after.strip_prefix(**u).is_some_and(ends))
        {
            Some(u) => (*u, summary.len() - after.len() + u.len()),
            None if ends(&summary[i..]) => ("", i),
            None => continue,
        };
        // Ids, not figures; "thread N" is how Kineto names a thread (`thread 4515 (python3.8)`).
        if ["tid ", "pid ", "GPU ", "rank ", "thread "]
            .iter()
            .any(|p| summary[..start].ends_with(p))
        {
            continue;
        }
        // "1654 syncs/s" and "one per 4.4 launches" are rates.
        let rate_after = spaced
            && after.split_once("/s").is_some_and(|(w, rest)| {
                (1..=20).contains(&w.len())
                    && w.bytes()
                        .all(|c| c.is_ascii_lowercase() || c == b' ' || c == b'-')
                    && !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            });
        let unit = if unit.is_empty() && (rate_after || summary[..start].ends_with("one per ")) {
            "/s"
        } else {
            unit
        };
        if let Ok(v) = number.replace(',', "").parse::<f64>() {
            out.push((v, unit, summary[start..end].to_string()));
        }
    }
    out
}

/// The counts and durations of a finding's summary that are not among its evidence rows: a
/// cell (a column's maximum or minimum is one), or a column's sum or count (a duration within
/// 0.6% or half its last printed digit, a count exactly). The corpus and the lab require none on every finding.
pub fn figures_not_in_rows(summary: &str, rows: &[Vec<serde_json::Value>]) -> Vec<String> {
    let (mut cand, sums, counts) = cells_sums_counts(rows);
    cand.extend(sums);
    cand.extend(counts);
    let scale = |u: &str| match u {
        "ns" => Some(1.0),
        "us" => Some(1e3),
        "ms" => Some(1e6),
        "s" => Some(1e9),
        "" => Some(0.0),
        _ => None,
    };
    summary_figures(summary)
        .into_iter()
        .filter(|(v, u, text)| {
            let Some(k) = scale(u) else {
                return false;
            };
            if k == 0.0 {
                return !cand.iter().any(|c| (c - v).abs() < 0.5);
            }
            let ns = v * k;
            let decimals = text
                .split(' ')
                .next()
                .and_then(|n| n.split_once('.'))
                .map_or(0, |(_, d)| d.len());
            let last = k * 10f64.powi(-(decimals as i32)) / 2.0 * 1.01;
            !cand
                .iter()
                .any(|c| (c - ns).abs() <= (ns.abs() * 0.006).max(last))
        })
        .map(|(_, _, text)| text)
        .collect()
}

#[cfg(test)]
mod figure_tests {
    use serde_json::json;

    use super::{figures_not_in_rows, summary_figures};

    #[test]
    fn counts_and_durations_are_figures_and_the_rest_is_not() {
        let s = "vm rank 3 reaches each collective 4.72 ms after its 3 peers since +1.6s (74% of 597 steps): tid 25625, 1654 syncs/s, one per 4.4 launches, 2.0x, 10 slow calls, 1.00 s";
        let got: Vec<(f64, &str)> = summary_figures(s).iter().map(|f| (f.0, f.1)).collect();
        assert_eq!(
            got,
            [
                (4.72, "ms"),
                (3.0, ""),
                (74.0, "%"),
                (597.0, ""),
                (1654.0, "/s"),
                (4.4, "/s"),
                (2.0, "x"),
                (10.0, ""),
                (1.0, "s")
            ]
        );
    }

    #[test]
    fn a_figure_is_a_cell_or_a_columns_sum_or_count() {
        let rows = vec![
            vec![json!("a"), json!(4_722_496), json!(2)],
            vec![json!("b"), json!(1_000_000), json!(1)],
        ];
        // 4.72 ms a cell, 5.72 ms the column's sum, 3 its sum, 2 a count of rows; a thread
        // named by its id (an imported trace's thread name) is no figure.
        assert!(figures_not_in_rows("4.72 ms, 5.72 ms, 3 and 2", &rows).is_empty());
        assert!(
            figures_not_in_rows("thread 4515 (python3.8) (tid 4515) waited 3", &rows).is_empty()
        );
        assert_eq!(
            figures_not_in_rows("4.80 ms and 7", &rows),
            ["4.80 ms", "7"]
        );
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use causeway_store::{Event, Reader, Writer, WriterOptions};

    use crate::chains::{Chain, ChainQuery};
    use causeway_demo::{Scenario, write_scenario};

    /// Writes a demo scenario to a temporary store, explains it, and returns the chains of one
    /// detector.
    pub fn chains_of(s: Scenario, healthy: bool, detector: &str) -> Vec<Chain> {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("t.duckdb");
        write_scenario(&p, s, healthy).expect("demo trace");
        let r = Reader::open(&p).expect("reader");
        let e = crate::engine::explain(&r, &ChainQuery::default()).expect("explain");
        e.chains
            .into_iter()
            .filter(|c| c.detector == detector)
            .collect()
    }

    /// One event of python3, pid and tid 10 (the hand-written stores' workload thread).
    pub fn ev(timestamp: i64, duration: i64, op: &str, arg0: i64, arg1: i64) -> Event {
        Event {
            timestamp,
            duration,
            pid: 10,
            tid: 10,
            comm: "python3".into(),
            op_id: causeway_demo::model::op(op),
            arg0,
            arg1,
            ..Event::default()
        }
    }

    /// Writes a store with `write`, then explains it.
    pub fn explain_written(write: impl FnOnce(&mut Writer)) -> crate::engine::Explain {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("t.duckdb");
        let mut w = Writer::create(&p, WriterOptions::default()).expect("writer");
        write(&mut w);
        w.finish().expect("finish");
        let r = Reader::open(&p).expect("reader");
        crate::engine::explain(&r, &ChainQuery::default()).expect("explain")
    }
}
