//! Exact trace statistics (what `causeway stats` and `get_trace_stats` return): per (source, op)
//! counts and nearest-rank percentiles over every stored event in a window, host off-CPU totals,
//! calls counted in the kernel but not stored, and drop counters.

use std::collections::BTreeMap;

use causeway_store::duckdb;
use causeway_store::{Reader, StoreError};
use serde::Serialize;

use crate::base::errors::duck;
use crate::probe_overhead::{Overhead, modes_in_window, overhead};
use crate::window::{Window, WindowSpec};

// Op ids written into this file's SQL as literals.
causeway_ops::sql_id!("sched_switch", 100);

/// What to compute statistics over.
#[derive(Debug, Clone, Default)]
pub struct StatsQuery {
    /// Only this process.
    pub pid: Option<u32>,
    /// Only this node.
    pub node: Option<String>,
    /// Time window (anchored to the trace end).
    pub window: WindowSpec,
}

/// Statistics of one (source, op).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OpStats {
    /// Source name (CUDA, DRIVER, HOST, ...).
    pub source: String,
    /// Op name.
    pub op: String,
    /// Stored events in the window.
    pub count: u64,
    /// Nearest-rank 50th percentile of duration (ns).
    pub p50_ns: i64,
    /// Nearest-rank 95th percentile (ns).
    pub p95_ns: i64,
    /// Nearest-rank 99th percentile (ns).
    pub p99_ns: i64,
    /// Largest duration (ns).
    pub max_ns: i64,
    /// Mean duration (ns).
    pub mean_ns: f64,
    /// Sum of durations (ns).
    pub total_ns: i64,
    /// `exact` (every call stored), `stored_only` (the kernel counted more calls than were
    /// stored: percentiles cover the stored ones), `histogram_estimate` (no stored events;
    /// estimated from the kernel's log2 histograms, upper bucket bounds) or `none` (no call was
    /// timed: the op ran entry-only; percentiles are 0).
    pub percentiles: &'static str,
    /// Calls counted in the kernel, when that count is known and differs from `count`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counted_calls: Option<u64>,
    /// Calls counted without a measured duration (entry-only probe mode), when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untimed_calls: Option<u64>,
    /// Probe modes the op ran in during the window, when not only `full`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_modes: Option<Vec<String>>,
    /// The counted calls include estimates: the op ran in sampled probe mode (its probes were
    /// attached part of the time; `probe_sampling` has the attached time per window).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub calls_estimated: bool,
}

/// Off-CPU time of traced threads (sched_switch), split by why they were off the CPU.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct OffCpu {
    /// Context switches.
    pub switches: u64,
    /// Total off-CPU time (ns).
    pub total_ns: i64,
    /// Off-CPU while runnable: preempted by another task (ns).
    pub preempted_ns: i64,
    /// Off-CPU while sleeping/blocked, voluntarily (ns).
    pub blocked_ns: i64,
    /// Off-CPU with unknown state, e.g. imported reference traces (ns).
    pub unknown_state_ns: i64,
}

/// What `stats` returns.
#[derive(Debug, Clone, Serialize)]
pub struct TraceStats {
    /// Events in the window.
    pub events: u64,
    /// First event timestamp in the window (ns), 0 if none.
    pub first_ns: i64,
    /// Last event timestamp in the window (ns), 0 if none.
    pub last_ns: i64,
    /// The whole trace's first event (ns).
    pub trace_first_ns: i64,
    /// The whole trace's last event (ns).
    pub trace_last_ns: i64,
    /// The window used (inclusive bounds).
    pub window: Window,
    /// Process filter, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Nodes in the window.
    pub nodes: Vec<String>,
    /// Per (source, op), in catalogue order of sources, busiest op first.
    pub ops: Vec<OpStats>,
    /// Host off-CPU totals.
    pub off_cpu: OffCpu,
    /// Lost events by kind, plus `total`.
    pub drops: BTreeMap<String, u64>,
    /// What causeway's probes cost the traced processes (recordings with the overhead
    /// controller only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead: Option<Overhead>,
    /// Processes whose calls before some moment are not in the trace (coverage.rs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The kernels whose launches cost the most host time (named launches only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<crate::kernels::KernelStats>,
    /// Traced processes that ran in a container or pod, with its names and their GPUs.
    pub placed: Vec<crate::placement::PlacedProcess>,
}

// The event queries read the physical `event_rows` (ids, no names) rather than the `event_data`
// view: they need no names, and the view's joins made `stats` over 10M events ~25% dearer. A node
// filter is resolved to its node_id first: -1 = every node, -2 = a node not in the file.
/// Kernels listed by `stats`.
const TOP_KERNELS: usize = 10;
/// Containerised processes listed in `stats` (the rest are in `processes` and `cgroups`).
const TOP_PLACED: usize = 20;

const NODE_ID_SQL: &str = "SELECT coalesce(max(node_id), -2)::BIGINT FROM nodes WHERE node = ?";

const OPS_SQL: &str = "
WITH g AS (
    SELECT op_id,
           count(*)::BIGINT AS n,
           quantile_disc(duration, [0.5, 0.95, 0.99]) AS q,
           max(duration) AS mx,
           avg(duration)::DOUBLE AS mean,
           (CASE WHEN sum(duration) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(duration) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(duration) END)::BIGINT AS total,
           min(timestamp) AS first,
           max(timestamp) AS last
    FROM event_rows
    WHERE timestamp BETWEEN ? AND ?
      AND (?::BIGINT < 0 OR pid = ?::BIGINT)
      AND (?::BIGINT = -1 OR node_id = ?::BIGINT)
    GROUP BY op_id
)
SELECT s.source_id, o.source, o.op, g.n, g.q[1], g.q[2], g.q[3], g.mx, g.mean, g.total, g.first, g.last, g.op_id
FROM g JOIN ops o ON o.op_id = g.op_id JOIN sources s ON s.source = o.source
ORDER BY s.source_id, g.n DESC, o.op";

pub(crate) const OFF_CPU_SQL: &str = "
SELECT count(*)::BIGINT,
       coalesce((CASE WHEN sum(duration) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(duration) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(duration) END), 0)::BIGINT,
       coalesce((CASE WHEN sum(duration) FILTER (WHERE arg1 = 0) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(duration) FILTER (WHERE arg1 = 0) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(duration) FILTER (WHERE arg1 = 0) END), 0)::BIGINT,
       coalesce((CASE WHEN sum(duration) FILTER (WHERE arg1 = 1) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(duration) FILTER (WHERE arg1 = 1) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(duration) FILTER (WHERE arg1 = 1) END), 0)::BIGINT,
       coalesce((CASE WHEN sum(duration) FILTER (WHERE arg1 NOT IN (0, 1)) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(duration) FILTER (WHERE arg1 NOT IN (0, 1)) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(duration) FILTER (WHERE arg1 NOT IN (0, 1)) END), 0)::BIGINT
FROM event_rows
WHERE op_id = 100 AND timestamp BETWEEN ? AND ?
  AND (?::BIGINT < 0 OR pid = ?::BIGINT)
  AND (?::BIGINT = -1 OR node_id = ?::BIGINT)";

const HIST_SQL: &str = "
SELECT log2_bucket, (CASE WHEN sum(count) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(count) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(count) END)::BIGINT
FROM op_histograms
WHERE op_id = ? AND window_end_ns >= ? AND window_start_ns <= ?
  AND (?::BIGINT < 0 OR pid = ?::BIGINT)
  AND (?::VARCHAR = '' OR node = ?::VARCHAR)
GROUP BY ALL ORDER BY 1";

const TIMED_SQL: &str = "
SELECT op_id, (CASE WHEN sum(count) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(count) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(count) END)::BIGINT FROM op_histograms
WHERE window_end_ns >= ? AND window_start_ns <= ?
  AND (?::BIGINT < 0 OR pid = ?::BIGINT)
  AND (?::VARCHAR = '' OR node = ?::VARCHAR)
GROUP BY op_id";

const DROPS_SQL: &str = "
SELECT kind, (CASE WHEN sum(count) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(count) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(count) END)::BIGINT FROM drops
WHERE (?::VARCHAR = '' OR node = ?::VARCHAR)
GROUP BY kind ORDER BY kind";

// Nodes with events in the window, or (stores of counters only, e.g. `causeway collect`'s)
// with kernel counts overlapping it.
const NODES_SQL: &str = "
SELECT node FROM nodes
WHERE (node_id IN (SELECT DISTINCT node_id FROM event_rows WHERE timestamp BETWEEN $1 AND $2)
       OR node IN (SELECT DISTINCT node FROM op_counts WHERE window_end_ns >= $1 AND window_start_ns <= $2))
  AND ($3::VARCHAR = '' OR node = $3::VARCHAR)
ORDER BY node";

// The span of a store without events: its kernel counts' windows (a collected cluster store
// holds counters and histograms only).
const COUNTS_SPAN_SQL: &str = "SELECT coalesce(min(window_start_ns), 0)::BIGINT, coalesce(max(window_end_ns), 0)::BIGINT FROM op_counts";

/// Nearest-rank percentile from a log2 histogram: the upper bound of the bucket holding rank
/// ceil(p * n). An estimate, labelled so by callers.
fn histogram_percentile(buckets: &[(u8, u64)], p_permille: u64) -> i64 {
    let n: u64 = buckets.iter().map(|b| b.1).sum();
    if n == 0 {
        return 0;
    }
    let rank = (p_permille * n).div_ceil(1000).max(1);
    let mut seen = 0;
    for (b, c) in buckets {
        seen += c;
        if seen >= rank {
            return 1i64.checked_shl(*b as u32 + 1).unwrap_or(i64::MAX) - 1;
        }
    }
    0
}

/// The query's filters as the SQL takes them.
struct Scope {
    /// The window, resolved against the trace's span.
    window: Window,
    /// The process, or -1 for every process.
    pid: i64,
    /// The node, or '' for every node.
    node: String,
    /// The node's id: -1 = every node, -2 = a node not in the file.
    node_id: i64,
}

/// What the stored events say: one row per (source, op) with events in the window.
struct Stored {
    ops: Vec<OpStats>,
    /// Events in the window.
    events: u64,
    /// Their first and last timestamps (`i64::MAX`, `i64::MIN` when there are none).
    first: i64,
    last: i64,
    /// Each op's row in `ops`.
    index: BTreeMap<u16, usize>,
}

/// Computes [`TraceStats`] for `q` over the store behind `r`.
pub fn trace_stats(r: &Reader, q: &StatsQuery) -> Result<TraceStats, StoreError> {
    crate::findings::check_filter(r, q.window, q.pid, q.node.as_deref())?;
    let (first, last) = trace_bounds(r)?;
    let s = scope(r, q, first, last)?;
    let Stored {
        mut ops,
        events,
        first: wfirst,
        last: wlast,
        index,
    } = stored_ops(r, &s)?;
    add_counted(r, q, &s, &mut ops, &index)?;
    // Only recordings with the overhead controller have the kernel's histograms and probe
    // modes (imports carry counts without them).
    let overhead = overhead(r, &s.window, s.pid, &s.node)?;
    if let Some(oh) = &overhead {
        mark_untimed(r, &s, &mut ops)?;
        mark_probe_modes(oh, s.window.from_ns, &mut ops);
    }
    let off_cpu = off_cpu(r, &s)?;
    let drops = drops(r, &s.node)?;
    let nodes = nodes(r, &s)?;
    let window = s.window;
    let notes = crate::coverage::notes(r, &window, q.pid, q.node.as_deref())?;
    let kernels = crate::kernels::top(r, &window, q.pid, q.node.as_deref(), TOP_KERNELS)?;
    let placed = crate::placement::placed(r, &window, q.pid, q.node.as_deref(), TOP_PLACED)?;
    Ok(TraceStats {
        placed,
        notes,
        kernels,
        events,
        first_ns: if events > 0 { wfirst } else { 0 },
        last_ns: if events > 0 { wlast } else { 0 },
        trace_first_ns: first,
        trace_last_ns: last,
        window,
        pid: q.pid,
        nodes,
        ops,
        off_cpu,
        drops,
        overhead,
    })
}

/// The trace's first and last timestamps: its events', or for a store without events (a
/// collected cluster store holds counters and histograms only) its kernel counts' windows.
fn trace_bounds(r: &Reader) -> Result<(i64, i64), StoreError> {
    let (total, first, last) = crate::window::trace_span(r)?;
    if total == 0 {
        r.prepare_trusted(COUNTS_SPAN_SQL)?
            .query_row([], causeway_store::row)
            .map_err(duck(r, "reading the span of the kernel counts"))
    } else {
        Ok((first, last))
    }
}

/// `q`'s window resolved against the trace's span (`first`..`last`), and its filters as the
/// SQL takes them (the node looked up once, so the event queries need no join).
fn scope(r: &Reader, q: &StatsQuery, first: i64, last: i64) -> Result<Scope, StoreError> {
    let window = q.window.resolve(first, last);
    let pid: i64 = q.pid.map_or(-1, i64::from);
    let node = q.node.clone().unwrap_or_default();
    let node_id: i64 = if node.is_empty() {
        -1
    } else {
        r.prepare_trusted(NODE_ID_SQL)?
            .query_row([&node], |row| row.get(0))
            .map_err(duck(r, "looking up the node"))?
    };
    Ok(Scope {
        window,
        pid,
        node,
        node_id,
    })
}

/// Exact per-op statistics over the stored events in the window, and their count and span.
fn stored_ops(r: &Reader, s: &Scope) -> Result<Stored, StoreError> {
    let mut ops = Vec::new();
    let mut events = 0u64;
    let (mut wfirst, mut wlast) = (i64::MAX, i64::MIN);
    let mut stored_ids = BTreeMap::new();
    let mut st = r.prepare_trusted(OPS_SQL)?;
    let mut rows = st
        .query(duckdb::params![
            s.window.from_ns,
            s.window.until_ns,
            s.pid,
            s.pid,
            s.node_id,
            s.node_id
        ])
        .map_err(duck(r, "computing op statistics"))?;
    while let Some(row) = rows.next().map_err(duck(r, "reading op statistics"))? {
        let g = |i: usize| -> Result<i64, StoreError> {
            row.get::<_, i64>(i)
                .map_err(duck(r, "reading op statistics"))
        };
        let count = g(3)? as u64;
        events += count;
        wfirst = wfirst.min(g(10)?);
        wlast = wlast.max(g(11)?);
        let op_id: u16 = row.get(12).map_err(duck(r, "reading op statistics"))?;
        stored_ids.insert(op_id, ops.len());
        ops.push(OpStats {
            source: row.get(1).map_err(duck(r, "reading op statistics"))?,
            op: row.get(2).map_err(duck(r, "reading op statistics"))?,
            count,
            p50_ns: g(4)?,
            p95_ns: g(5)?,
            p99_ns: g(6)?,
            max_ns: g(7)?,
            mean_ns: row.get(8).map_err(duck(r, "reading op statistics"))?,
            total_ns: g(9)?,
            percentiles: "exact",
            counted_calls: None,
            untimed_calls: None,
            probe_modes: None,
            calls_estimated: false,
        });
    }
    Ok(Stored {
        ops,
        events,
        first: wfirst,
        last: wlast,
        index: stored_ids,
    })
}

/// Folds in the calls the kernel or the source counted (crate::counts, the one source of these
/// figures): marks the ops of `ops` (rows by op id in `stored_ids`) whose stored rows are
/// fewer, and adds the ops seen only there, estimated from their histograms.
fn add_counted(
    r: &Reader,
    q: &StatsQuery,
    s: &Scope,
    ops: &mut Vec<OpStats>,
    stored_ids: &BTreeMap<u16, usize>,
) -> Result<(), StoreError> {
    let node = &s.node;
    let cov = crate::counts::coverage(
        r,
        &s.window,
        (!node.is_empty()).then_some(node.as_str()),
        q.pid,
    )?;
    let mut per_op: BTreeMap<u16, (u64, i64)> = BTreeMap::new();
    for c in &cov {
        let e = per_op.entry(c.op_id).or_default();
        e.0 = e.0.saturating_add(c.calls);
        if c.stored == 0 {
            e.1 = e.1.saturating_add(c.counted_ns);
        }
    }
    let rows = per_op.into_iter().filter_map(|(op_id, (calls, total_ns))| {
        let o = causeway_store::catalog::op_by_id(op_id)?;
        Some((
            o.source.name().to_string(),
            o.name.to_string(),
            op_id,
            calls as i64,
            total_ns,
        ))
    });
    for (source, op, op_id, calls, total_ns) in rows {
        let calls = calls as u64;
        match stored_ids.get(&op_id) {
            Some(&i) if calls > ops[i].count => {
                ops[i].counted_calls = Some(calls);
                ops[i].percentiles = "stored_only";
            }
            Some(_) => {}
            None if calls > 0 => {
                ops.push(counted_only(r, s, source, op, op_id, calls, total_ns)?);
            }
            None => {}
        }
    }
    Ok(())
}

/// The statistics of an op with counted calls but no stored events: percentiles estimated
/// from the kernel's log2 histograms (upper bucket bounds), or none without a timed call.
fn counted_only(
    r: &Reader,
    s: &Scope,
    source: String,
    op: String,
    op_id: u16,
    calls: u64,
    total_ns: i64,
) -> Result<OpStats, StoreError> {
    let mut hs = r.prepare_trusted(HIST_SQL)?;
    let buckets: Vec<(u8, u64)> = hs
        .query_map(
            duckdb::params![
                op_id,
                s.window.from_ns,
                s.window.until_ns,
                s.pid,
                s.pid,
                s.node,
                s.node
            ],
            |row| Ok((row.get::<_, u8>(0)?, row.get::<_, i64>(1)? as u64)),
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading histograms"))?;
    let max_bucket = buckets.last().map(|b| b.0);
    let timed: u64 = buckets.iter().map(|b| b.1).sum();
    Ok(OpStats {
        source,
        op,
        count: 0,
        p50_ns: histogram_percentile(&buckets, 500),
        p95_ns: histogram_percentile(&buckets, 950),
        p99_ns: histogram_percentile(&buckets, 990),
        max_ns: max_bucket.map_or(0, |b| {
            1i64.checked_shl(b as u32 + 1).unwrap_or(i64::MAX) - 1
        }),
        // Over the timed calls; imported counts carry durations without histograms.
        mean_ns: total_ns as f64 / if timed > 0 { timed } else { calls } as f64,
        total_ns,
        percentiles: if timed > 0 {
            "histogram_estimate"
        } else {
            "none"
        },
        counted_calls: Some(calls),
        untimed_calls: None,
        probe_modes: None,
        calls_estimated: false,
    })
}

/// Sets each call op's calls counted without a duration (entry-only mode): its counted calls
/// beyond those in the kernel's histograms.
fn mark_untimed(r: &Reader, s: &Scope, ops: &mut [OpStats]) -> Result<(), StoreError> {
    let counted: BTreeMap<&str, u64> = ops
        .iter()
        .filter_map(|o| o.counted_calls.map(|c| (o.op.as_str(), c)))
        .collect();
    let timed: BTreeMap<u16, i64> = r
        .prepare_trusted(TIMED_SQL)?
        .query_map(
            duckdb::params![
                s.window.from_ns,
                s.window.until_ns,
                s.pid,
                s.pid,
                s.node,
                s.node
            ],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading histogram totals"))?;
    let mut untimed = BTreeMap::new();
    for o in ops.iter() {
        let Some(&calls) = counted.get(o.op.as_str()) else {
            continue;
        };
        let Some(op) = causeway_store::catalog::op_by_name(&o.op) else {
            continue;
        };
        let is_call = !matches!(o.source.as_str(), "HOST" | "IO" | "TCP" | "NET");
        let t = timed.get(&op.id).copied().unwrap_or(0).max(0) as u64;
        if is_call && calls > t {
            untimed.insert(o.op.clone(), calls - t);
        }
    }
    for o in ops {
        o.untimed_calls = untimed.get(&o.op).copied();
    }
    Ok(())
}

/// Sets each op's probe modes in the window from `from_ns` on, and whether its counted calls
/// include estimates (it ran sampled).
fn mark_probe_modes(oh: &Overhead, from_ns: i64, ops: &mut [OpStats]) {
    let modes = modes_in_window(&oh.switches, from_ns);
    for o in ops {
        o.probe_modes = modes.get(&o.op).cloned();
        o.calls_estimated = o
            .probe_modes
            .as_ref()
            .is_some_and(|m| m.iter().any(|m| m == "sampled"));
    }
}

/// The traced threads' off-CPU totals in the window (sched_switch), by why they were off.
fn off_cpu(r: &Reader, s: &Scope) -> Result<OffCpu, StoreError> {
    r.prepare_trusted(OFF_CPU_SQL)?
        .query_row(
            duckdb::params![
                s.window.from_ns,
                s.window.until_ns,
                s.pid,
                s.pid,
                s.node_id,
                s.node_id
            ],
            |row| {
                Ok(OffCpu {
                    switches: row.get::<_, i64>(0)? as u64,
                    total_ns: row.get(1)?,
                    preempted_ns: row.get(2)?,
                    blocked_ns: row.get(3)?,
                    unknown_state_ns: row.get(4)?,
                })
            },
        )
        .map_err(duck(r, "computing off-CPU totals"))
}

/// Lost events by kind over the whole trace (of `node`, '' for every node), plus `total`.
fn drops(r: &Reader, node: &str) -> Result<BTreeMap<String, u64>, StoreError> {
    let mut drops = BTreeMap::new();
    let mut drop_total = 0u64;
    let mut st = r.prepare_trusted(DROPS_SQL)?;
    let rows: Vec<(String, i64)> = st
        .query_map(duckdb::params![node, node], causeway_store::row)
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading drop counters"))?;
    for (k, n) in rows {
        drop_total += n as u64;
        drops.insert(k, n as u64);
    }
    drops.insert("total".into(), drop_total);
    Ok(drops)
}

/// The nodes with events or kernel counts in the window (only the filter's node, if any).
fn nodes(r: &Reader, s: &Scope) -> Result<Vec<String>, StoreError> {
    r.prepare_trusted(NODES_SQL)?
        .query_map(
            duckdb::params![s.window.from_ns, s.window.until_ns, s.node],
            |row| row.get(0),
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "listing nodes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_percentiles_use_bucket_upper_bounds() {
        // 90 calls in [1024, 2048), 10 calls in [1 Mi, 2 Mi).
        let b = [(10u8, 90u64), (20u8, 10u64)];
        assert_eq!(histogram_percentile(&b, 500), 2047);
        assert_eq!(histogram_percentile(&b, 900), 2047);
        assert_eq!(histogram_percentile(&b, 950), (1 << 21) - 1);
        assert_eq!(histogram_percentile(&[], 500), 0);
    }
}
