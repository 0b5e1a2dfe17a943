//! GPU time measured on the device's own timeline (`gpu_activity`, from imported profiler
//! traces), beside the host-side estimate the engine makes without it: per device of each
//! process, busy (the union of its kernels, copies and memsets), split into compute,
//! communication and memory work, per stream, and every idle stretch with the host-side reason
//! for it, read from what the thread that launched the next work was doing meanwhile.
//!
//! The host-side estimate is a range: at least the idle the host proves (from a call that
//! drained the device to the next that gave it work, [`crate::budget`]), at most the window
//! less the time the host proves the device busy (its syncs). Where no call
//! waited for the device the host cannot tell busy from idle, and says so.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use causeway_store::catalog::{self, Class, SYNCS_SQL, Source};
use causeway_store::duckdb;
use causeway_store::{Reader, StoreError};
use serde::Serialize;

use crate::base::errors::duck;
use crate::budget::{Budget, CallClass};
use crate::counts::lit;
use crate::facts::Ctx;
use crate::window::DEVICE_SCHEMA;

/// A host-side range narrower than this (percentage points of the window) is a known estimate.
pub const KNOWN_RANGE_PP: f64 = 10.0;

/// What a wait call costs when the device is already idle (ns): a wait shorter than this does
/// not prove the device busy.
const WAIT_OVERHEAD_NS: i64 = 10_000;

/// One stream of a device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamTime {
    /// Stream id as the source numbers it.
    pub stream: i64,
    /// Union of its activity in the window (ns).
    #[serde(skip_serializing_if = "is_zero")]
    pub busy_ns: i64,
    /// Kernels run.
    pub kernels: i64,
    /// Copies run.
    pub copies: i64,
    /// Memsets run.
    pub memsets: i64,
}

/// Idle time of a device for one reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleReason {
    /// Whom the device waited for: `host` (the next work was not launched yet), `dependency`
    /// (it was launched before the device fell idle, and waited on something else: an event
    /// or stream wait, a node of its CUDA graph, a collective's peers), `unknown` (its
    /// launching call is not in the trace), `end` (no work after it in the window).
    pub waiting_for: String,
    /// What the launching thread was doing meanwhile (for `host`): `input pipeline`, `sync`,
    /// `copy`, `collective`, `allocation`, `CPU ops` or `outside profiled ops`; else the same as
    /// `waiting_for`.
    pub reason: String,
    /// For `CPU ops`: the outermost op the thread was in (beneath the profiler's step).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// Idle stretches that contributed.
    pub gaps: i64,
    /// Idle time (ns).
    pub ns: i64,
}

/// GPU time of one device of one process: measured where a device timeline exists, the
/// host-side estimate always.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceTime {
    /// Node.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// Its rank, where the trace says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<i32>,
    /// CUDA device ordinal (None without a device timeline).
    pub device: Option<i64>,
    /// The analysed window (ns).
    pub window_ns: i64,
    /// First start and last end of the device's activity in the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_ns: Option<i64>,
    /// See `first_ns`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_ns: Option<i64>,
    /// Kernels, copies and memsets in the window.
    #[serde(skip_serializing_if = "is_zero")]
    pub activities: i64,
    /// Union of the device's activity in the window (ns).
    pub busy_ns: i64,
    /// Union of its compute kernels (neither copies, memsets nor communication).
    #[serde(skip_serializing_if = "is_zero")]
    pub compute_ns: i64,
    /// Union of its communication kernels (NCCL).
    #[serde(skip_serializing_if = "is_zero")]
    pub communication_ns: i64,
    /// Union of its copies and memsets.
    #[serde(skip_serializing_if = "is_zero")]
    pub memory_ns: i64,
    /// Busy with no compute kernel running: `busy_ns - compute_ns`.
    #[serde(skip_serializing_if = "is_zero")]
    pub non_compute_ns: i64,
    /// Idle share of the window, measured (None without a device timeline).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_idle_measured_pct: Option<f64>,
    /// Idle share of the device's own span (first start to last end), measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_idle_pct: Option<f64>,
    /// The host-side estimate of the idle share of the window: what the host proves (drained
    /// to next work).
    pub gpu_idle_estimated_pct: f64,
    /// The most the idle share can be from what the host sees: the window less its waits for
    /// the device.
    pub gpu_idle_estimated_max_pct: f64,
    /// Whether the host-side range is narrow enough to be an answer ([`KNOWN_RANGE_PP`]).
    pub estimate_known: bool,
    /// Per stream, busiest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamTime>,
    /// Measured idle by reason, largest first; sums to `window_ns - busy_ns`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub idle: Vec<IdleReason>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl DeviceTime {
    /// Measured idle (ns), where a device timeline exists.
    pub fn idle_ns(&self) -> Option<i64> {
        self.device.map(|_| (self.window_ns - self.busy_ns).max(0))
    }

    /// Idle the device spent waiting for its host (ns).
    pub fn host_wait_ns(&self) -> i64 {
        self.idle
            .iter()
            .filter(|r| r.waiting_for == "host")
            .map(|r| r.ns)
            .sum()
    }
}

/// The activity the measured figures count: kernels, copies and memsets (a `sync` row is the
/// device waiting, not working) of the node, clipped to the window, under a pid filter.
/// Parameters: $1 node, $2 and $3 the window, $4 the pid (-1: any).
const ACTIVITY_CTE: &str = "a AS (SELECT pid, device, stream, kind, greatest(start_ns, $2) AS s, least(end_ns, $3) AS e, correlation, \
CASE WHEN kind IN ('memcpy', 'memset') THEN 'memory' WHEN lower(name) LIKE '%nccl%' THEN 'communication' ELSE 'compute' END AS cls \
FROM gpu_activity WHERE node = $1 AND kind <> 'sync' AND end_ns > $2 AND start_ns <= $3 AND end_ns >= start_ns AND ($4 < 0 OR pid = $4))";

/// Busy time per device: each interval adds what it reaches past every earlier one's end (a
/// union without building it). Columns: pid, device, activities, first, last, busy, compute,
/// communication, memory.
pub static BUSY_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {ACTIVITY_CTE}, \
u AS (SELECT pid, device, cls, s, e, \
max(e) OVER (PARTITION BY pid, device ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev, \
max(e) OVER (PARTITION BY pid, device, cls ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_cls FROM a) \
SELECT pid::BIGINT AS pid, device::BIGINT AS device, count(*)::BIGINT AS activities, min(s) AS first_ns, max(e) AS last_ns, \
sum(greatest(0, e - greatest(s, coalesce(prev, s))))::BIGINT AS busy_ns, \
coalesce(sum(greatest(0, e - greatest(s, coalesce(prev_cls, s)))) FILTER (WHERE cls = 'compute'), 0)::BIGINT AS compute_ns, \
coalesce(sum(greatest(0, e - greatest(s, coalesce(prev_cls, s)))) FILTER (WHERE cls = 'communication'), 0)::BIGINT AS communication_ns, \
coalesce(sum(greatest(0, e - greatest(s, coalesce(prev_cls, s)))) FILTER (WHERE cls = 'memory'), 0)::BIGINT AS memory_ns \
FROM u GROUP BY pid, device ORDER BY pid, device"
    )
});

/// Busy time and work per stream. Columns: pid, device, stream, busy, kernels, copies, memsets.
pub static STREAMS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {ACTIVITY_CTE}, \
u AS (SELECT pid, device, stream, kind, s, e, max(e) OVER (PARTITION BY pid, device, stream ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev FROM a) \
SELECT pid::BIGINT AS pid, device::BIGINT AS device, stream::BIGINT AS stream, sum(greatest(0, e - greatest(s, coalesce(prev, s))))::BIGINT AS busy_ns, \
count(*) FILTER (WHERE kind = 'kernel')::BIGINT AS kernels, count(*) FILTER (WHERE kind = 'memcpy')::BIGINT AS copies, \
count(*) FILTER (WHERE kind = 'memset')::BIGINT AS memsets FROM u GROUP BY ALL ORDER BY pid, device, busy_ns DESC, stream"
    )
});

/// The time buckets that turn the overlap of idle stretches and host ranges into an equality
/// join: a stretch and a range that each touch fewer than [`BUCKETS`] buckets meet in the
/// first bucket both touch (counted there once); longer ones, few, are joined by overlap alone.
/// A hash join on the thread alone compared every stretch with every range of its thread
/// (seconds on a 2 s trace).
const BUCKET_NS: i64 = 1_000_000;
/// See [`BUCKET_NS`].
const BUCKETS: i64 = 4;

/// Every idle stretch of a device in the window and why (work that starts at the same instant
/// is ordered by its correlation, then stream, so the one that ends a stretch is the same on
/// every run), one row per (pid, device, whom it
/// waited for, reason, detail) with the stretches and their time. A stretch runs from the end
/// of all earlier work (or the window's start) to the next work's start; the next work's
/// launching call (through `correlations`) says whom the device waited for: the host while
/// the call had not started yet, then a dependency. The host's part is split by what the
/// launching thread was in, first match wins: a DataLoader op, a sync call, a copy call, a
/// collective (op or NCCL call), an allocation or free, any other op (named by the outermost one beneath the
/// profiler's step), else outside profiled ops. After the last work: `end`. The rows sum to the
/// window less the busy time; a first row per device (`all`) gives their total.
pub static IDLE_SQL: LazyLock<String> = LazyLock::new(|| {
    let copies = catalog::OPS
        .iter()
        .filter(|o| o.class == Class::Copy)
        .map(|o| lit(o.name))
        .collect::<Vec<_>>()
        .join(", ");
    let allocs = catalog::OPS
        .iter()
        .filter(|o| matches!(CallClass::of(o.id, 0), CallClass::Alloc | CallClass::Free))
        .map(|o| lit(o.name))
        .collect::<Vec<_>>()
        .join(", ");
    let nccl = catalog::OPS
        .iter()
        .filter(|o| o.source == Source::Nccl)
        .map(|o| lit(o.name))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "WITH {ACTIVITY_CTE}, \
o AS (SELECT pid, device, s, e, correlation, cls, coalesce(max(e) OVER (PARTITION BY pid, device ORDER BY s, e, correlation NULLS FIRST, stream, cls ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), $2) AS prev FROM a), \
lc AS (SELECT c.pid, c.correlation, min(ev.timestamp) AS ls, arg_min(ev.tid, ev.timestamp) AS tid, arg_min(ev.op, ev.timestamp) AS op FROM correlations c JOIN events ev ON ev.node = c.node AND ev.seq = c.seq WHERE c.node = $1 AND ($4 < 0 OR c.pid = $4) GROUP BY ALL), \
h AS (SELECT o.pid, o.device, o.prev AS gs, o.s AS ge, o.cls, lc.tid, lc.ls, lc.op, CASE WHEN lc.ls > o.prev THEN least(o.s, lc.ls) ELSE o.prev END AS he FROM o LEFT JOIN lc ON lc.pid = o.pid AND lc.correlation = o.correlation WHERE o.s > o.prev), \
st AS (SELECT DISTINCT tid FROM steps WHERE node = $1 AND ($4 < 0 OR pid = $4) AND source <> 'inferred'), \
hw0 AS (SELECT pid, device, gs, he, tid, gs // {B} AS b0, he // {B} AS b1 FROM h WHERE h.he > h.gs), \
r0 AS (SELECT pid, tid, name, start_ns, end_ns, start_ns // {B} AS b0, end_ns // {B} AS b1, \
CASE WHEN name LIKE 'enumerate(DataLoader)%' THEN 'input' WHEN name LIKE 'nccl:%' OR name LIKE 'c10d::%' OR name = 'record_param_comms' THEN 'collective' \
WHEN name NOT LIKE 'ProfilerStep#%' AND (depth = 0 OR (depth = 1 AND tid IN (SELECT tid FROM st))) THEN 'top' END AS cat \
FROM ranges WHERE node = $1 AND ($4 < 0 OR pid = $4) AND end_ns > $2 AND start_ns < $3 AND tid IN (SELECT tid FROM hw0)), \
hs AS (SELECT hw0.*, b0 + i AS b FROM hw0, range(0, {K}) t(i) WHERE b1 - b0 < {K} AND i <= b1 - b0), \
rs AS (SELECT r0.*, b0 + i AS b FROM r0, range(0, {K}) t(i) WHERE b1 - b0 < {K} AND i <= b1 - b0), \
pairs AS (\
SELECT hs.pid, hs.device, hs.gs, hs.he, rs.name, rs.cat, rs.start_ns, rs.end_ns FROM hs JOIN rs ON rs.pid = hs.pid AND rs.tid = hs.tid AND rs.b = hs.b \
WHERE rs.start_ns < hs.he AND rs.end_ns > hs.gs AND hs.b = greatest(rs.b0, hs.b0) \
UNION ALL SELECT w.pid, w.device, w.gs, w.he, r.name, r.cat, r.start_ns, r.end_ns FROM hw0 w JOIN r0 r ON r.pid = w.pid AND r.tid = w.tid \
WHERE w.b1 - w.b0 >= {K} AND r.start_ns < w.he AND r.end_ns > w.gs \
UNION ALL SELECT w.pid, w.device, w.gs, w.he, r.name, r.cat, r.start_ns, r.end_ns FROM hw0 w JOIN r0 r ON r.pid = w.pid AND r.tid = w.tid \
WHERE w.b1 - w.b0 < {K} AND r.b1 - r.b0 >= {K} AND r.start_ns < w.he AND r.end_ns > w.gs), \
rg AS (SELECT pid, device, gs, name, cat, least(end_ns, he) - greatest(start_ns, gs) AS ov FROM pairs), \
cg AS (SELECT h.pid, h.device, h.gs, CASE WHEN ev.op IN ({SYNCS_SQL}) THEN 'sync' WHEN ev.op IN ({copies}) THEN 'copy' WHEN ev.op IN ({allocs}) THEN 'alloc' ELSE 'collective' END AS cat, \
least(ev.timestamp + ev.duration, h.he) - greatest(ev.timestamp, h.gs) AS ov \
FROM h JOIN events ev ON ev.node = $1 AND ev.pid = h.pid AND ev.tid = h.tid AND ev.timestamp < h.he AND ev.timestamp + ev.duration > h.gs \
WHERE h.he > h.gs AND (ev.op IN ({SYNCS_SQL}) OR ev.op IN ({copies}) OR ev.op IN ({nccl}) OR ev.op IN ({allocs}))), \
rov AS (SELECT pid, device, gs, sum(ov) FILTER (WHERE cat = 'input') AS in_ov, sum(ov) FILTER (WHERE cat = 'collective') AS coll_r, \
sum(ov) FILTER (WHERE cat = 'top') AS top_ov, arg_max(name, lpad(ov::VARCHAR, 20, '0') || name) FILTER (WHERE cat = 'top') AS phase FROM rg GROUP BY ALL), \
coc AS (SELECT pid, device, gs, sum(ov) FILTER (WHERE cat = 'sync') AS sync_ov, sum(ov) FILTER (WHERE cat = 'copy') AS copy_ov, sum(ov) FILTER (WHERE cat = 'collective') AS coll_c, sum(ov) FILTER (WHERE cat = 'alloc') AS alloc_ov FROM cg GROUP BY ALL), \
p AS (SELECT h.pid, h.device, h.gs, h.ge, h.he, h.ls, h.op, h.cls, CASE WHEN h.ls IS NULL THEN 0 ELSE h.he - h.gs END AS hw, \
coalesce(rov.in_ov, 0) AS in_ov, coalesce(coc.sync_ov, 0) AS sync_ov, coalesce(coc.copy_ov, 0) AS copy_ov, greatest(coalesce(rov.coll_r, 0), coalesce(coc.coll_c, 0)) AS coll_ov, coalesce(coc.alloc_ov, 0) AS alloc_ov, coalesce(rov.top_ov, 0) AS top_ov, coalesce(rov.phase, '') AS phase \
FROM h LEFT JOIN rov USING (pid, device, gs) LEFT JOIN coc USING (pid, device, gs)), \
p1 AS (SELECT *, least(hw, in_ov) AS t_input FROM p), \
p2 AS (SELECT *, least(hw - t_input, sync_ov) AS t_sync FROM p1), \
p3 AS (SELECT *, least(hw - t_input - t_sync, copy_ov) AS t_copy FROM p2), \
p4 AS (SELECT *, least(hw - t_input - t_sync - t_copy, coll_ov) AS t_coll FROM p3), \
p5a AS (SELECT *, least(hw - t_input - t_sync - t_copy - t_coll, alloc_ov) AS t_alloc FROM p4), \
p5 AS (SELECT *, least(hw - t_input - t_sync - t_copy - t_coll - t_alloc, top_ov) AS t_top FROM p5a), \
parts AS (\
SELECT pid, device, 'host' AS waiting_for, 'input pipeline' AS reason, '' AS detail, t_input AS ns FROM p5 \
UNION ALL SELECT pid, device, 'host', 'sync', '', t_sync FROM p5 \
UNION ALL SELECT pid, device, 'host', 'copy', '', t_copy FROM p5 \
UNION ALL SELECT pid, device, 'host', 'collective', '', t_coll FROM p5 \
UNION ALL SELECT pid, device, 'host', 'allocation', '', t_alloc FROM p5 \
UNION ALL SELECT pid, device, 'host', 'CPU ops', phase, t_top FROM p5 \
UNION ALL SELECT pid, device, 'host', 'outside profiled ops', '', hw - t_input - t_sync - t_copy - t_coll - t_alloc - t_top FROM p5 \
UNION ALL SELECT pid, device, CASE WHEN ls IS NULL THEN 'unknown' ELSE 'dependency' END, CASE WHEN ls IS NULL THEN 'launch not in the trace' WHEN op LIKE '%GraphLaunch%' THEN 'work of a CUDA graph waited' WHEN cls = 'communication' THEN 'a collective waited (peers or another stream)' ELSE 'queued work waited (an event or stream wait)' END, '', ge - gs - hw FROM p5 \
UNION ALL SELECT pid, device, 'end', 'after the last work', '', $3 - max(e) FROM a GROUP BY pid, device) \
SELECT pid::BIGINT AS pid, device::BIGINT AS device, coalesce(waiting_for, 'all') AS waiting_for, coalesce(reason, 'all idle') AS reason, coalesce(detail, '') AS detail, \
count(*)::BIGINT AS gaps, sum(ns)::BIGINT AS ns, ($3 - $2)::BIGINT AS window_ns \
FROM parts WHERE ns > 0 GROUP BY GROUPING SETS ((pid, device, waiting_for, reason, detail), (pid, device)) \
ORDER BY pid, device, grouping(waiting_for) DESC, ns DESC, reason, detail",
        B = BUCKET_NS,
        K = BUCKETS,
    )
});

const RANK_SQL: &str = "SELECT node, pid::BIGINT, max(rank)::BIGINT FROM processes WHERE rank IS NOT NULL GROUP BY ALL";

type Key = (u32, i64);

/// The device time of every process with a budget (and every device it has a timeline of),
/// in the context's window: measured where the trace has a device timeline, the host-side
/// estimate from `budgets` always.
pub fn device_times(ctx: &Ctx<'_>, budgets: &[Budget]) -> Result<Vec<DeviceTime>, StoreError> {
    let r = ctx.r;
    let w = ctx.window;
    let window_ns = (w.until_ns - w.from_ns).max(0);
    let pid = ctx.pid;
    let ranks = ranks(r)?;
    let mut out = Vec::new();
    for node in &ctx.nodes {
        let measured = if r.schema_version() >= DEVICE_SCHEMA {
            measure(r, node, w.from_ns, w.until_ns, pid)?
        } else {
            BTreeMap::new()
        };
        let procs: Vec<&Budget> = budgets
            .iter()
            .filter(|b| b.tid.is_none() && &b.node == node)
            .collect();
        let mut pids: Vec<u32> = procs.iter().map(|b| b.pid).collect();
        pids.extend(measured.keys().map(|k| k.0));
        pids.sort_unstable();
        pids.dedup();
        for p in pids {
            let budget = procs.iter().find(|b| b.pid == p);
            let (lo, hi) = estimate(budget.copied(), window_ns);
            let base = DeviceTime {
                node: node.clone(),
                pid: p,
                rank: ranks.get(&(node.clone(), i64::from(p))).copied(),
                device: None,
                window_ns,
                first_ns: None,
                last_ns: None,
                activities: 0,
                busy_ns: 0,
                compute_ns: 0,
                communication_ns: 0,
                memory_ns: 0,
                non_compute_ns: 0,
                gpu_idle_measured_pct: None,
                span_idle_pct: None,
                gpu_idle_estimated_pct: lo,
                gpu_idle_estimated_max_pct: hi,
                estimate_known: hi - lo <= KNOWN_RANGE_PP,
                streams: Vec::new(),
                idle: Vec::new(),
            };
            let mine: Vec<&DeviceTime> = measured
                .range((p, i64::MIN)..=(p, i64::MAX))
                .map(|(_, d)| d)
                .collect();
            if mine.is_empty() {
                out.push(base);
                continue;
            }
            for m in mine {
                out.push(DeviceTime {
                    rank: base.rank,
                    gpu_idle_estimated_pct: lo,
                    gpu_idle_estimated_max_pct: hi,
                    estimate_known: base.estimate_known,
                    ..m.clone()
                });
            }
        }
    }
    Ok(out)
}

/// The host-side range of the idle share (percent of the window): what the host proves idle,
/// and the window less what it proves busy (its syncs, less a sync's own cost).
fn estimate(b: Option<&Budget>, window_ns: i64) -> (f64, f64) {
    let Some(b) = b else {
        return (0.0, 100.0);
    };
    let w = window_ns.max(1) as f64;
    let lo = b.gpu_idle_estimate_ns.clamp(0, window_ns);
    // Syncs only: a device-to-host copy's call also waits for whatever its stream waits on
    // (an event of another stream, a collective's peers) with the device idle. Where imports
    // know the copies' direction, 30 pageable copies of a100-rank0-of-16 held the host 758 ms
    // for 0.1 ms of copying while its device was idle 64% of the window.
    let Some(sync) = b.class(crate::CallClass::Sync) else {
        return (pct(lo as f64, w), 100.0);
    };
    let (waits, waiting_ns) = (sync.calls, sync.total_ns);
    let busy = (waiting_ns
        - i64::try_from(waits)
            .unwrap_or(i64::MAX)
            .saturating_mul(WAIT_OVERHEAD_NS))
    .clamp(0, window_ns - lo);
    (pct(lo as f64, w), pct((window_ns - busy) as f64, w))
}

fn pct(part: f64, whole: f64) -> f64 {
    (1000.0 * part / whole).round() / 10.0
}

fn ranks(r: &Reader) -> Result<BTreeMap<(String, i64), i32>, StoreError> {
    let rows: Vec<(String, i64, i64)> = r
        .prepare_trusted(RANK_SQL)?
        .query_map([], causeway_store::row)
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading the ranks of processes"))?;
    Ok(rows
        .into_iter()
        .filter_map(|(n, p, k)| Some(((n, p), i32::try_from(k).ok()?)))
        .collect())
}

/// The measured figures of every (pid, device) of `node` with activity in the window.
fn measure(
    r: &Reader,
    node: &str,
    from: i64,
    until: i64,
    pid: i64,
) -> Result<BTreeMap<Key, DeviceTime>, StoreError> {
    let mut out: BTreeMap<Key, DeviceTime> = measure_busy(r, node, from, until, pid)?
        .into_iter()
        .map(|d| ((d.pid, d.device.unwrap_or(-1)), d))
        .collect();
    if !out.is_empty() {
        add_streams_and_idle(r, node, from, until, pid, &mut out)?;
    }
    Ok(out)
}

/// The busy figures alone ([`BUSY_SQL`]), one per (pid, device) with activity in the window.
fn measure_busy(
    r: &Reader,
    node: &str,
    from: i64,
    until: i64,
    pid: i64,
) -> Result<Vec<DeviceTime>, StoreError> {
    type Busy = (i64, i64, i64, i64, i64, i64, i64, i64, i64);
    let busy: Vec<Busy> = r
        .prepare_trusted(BUSY_SQL.as_str())?
        .query_map(duckdb::params![node, from, until, pid], causeway_store::row)
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "measuring device busy time"))?;
    let window_ns = (until - from).max(0);
    let mut out = Vec::new();
    for (p, device, activities, first, last, busy, compute, comm, memory) in busy {
        let Ok(p) = u32::try_from(p) else { continue };
        let w = window_ns.max(1) as f64;
        let span = (last - first).max(1) as f64;
        out.push(DeviceTime {
            node: node.to_string(),
            pid: p,
            rank: None,
            device: Some(device),
            window_ns,
            first_ns: Some(first),
            last_ns: Some(last),
            activities,
            busy_ns: busy,
            compute_ns: compute,
            communication_ns: comm,
            memory_ns: memory,
            non_compute_ns: (busy - compute).max(0),
            gpu_idle_measured_pct: Some(pct((window_ns - busy).max(0) as f64, w)),
            span_idle_pct: Some(pct(((last - first) - busy).max(0) as f64, span)),
            gpu_idle_estimated_pct: 0.0,
            gpu_idle_estimated_max_pct: 100.0,
            estimate_known: false,
            streams: Vec::new(),
            idle: Vec::new(),
        });
    }
    Ok(out)
}

fn add_streams_and_idle(
    r: &Reader,
    node: &str,
    from: i64,
    until: i64,
    pid: i64,
    out: &mut BTreeMap<Key, DeviceTime>,
) -> Result<(), StoreError> {
    let streams: Vec<(i64, i64, i64, i64, i64, i64, i64)> = r
        .prepare_trusted(STREAMS_SQL.as_str())?
        .query_map(duckdb::params![node, from, until, pid], causeway_store::row)
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "measuring stream busy time"))?;
    for (p, device, stream, busy_ns, kernels, copies, memsets) in streams {
        if let Some(d) = u32::try_from(p)
            .ok()
            .and_then(|p| out.get_mut(&(p, device)))
        {
            d.streams.push(StreamTime {
                stream,
                busy_ns,
                kernels,
                copies,
                memsets,
            });
        }
    }
    type Row = (i64, i64, String, String, String, i64, i64, i64);
    let idle: Vec<Row> = r
        .prepare_trusted(IDLE_SQL.as_str())?
        .query_map(duckdb::params![node, from, until, pid], causeway_store::row)
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "explaining device idle time"))?;
    for (p, device, waiting_for, reason, detail, gaps, ns, _) in idle {
        if waiting_for == "all" {
            continue;
        }
        if let Some(d) = u32::try_from(p)
            .ok()
            .and_then(|p| out.get_mut(&(p, device)))
        {
            d.idle.push(IdleReason {
                waiting_for,
                reason,
                detail,
                gaps,
                ns,
            });
        }
    }
    Ok(())
}

/// [`IDLE_SQL`] for one process's devices in a window, as evidence: the detector's own query,
/// so every figure it prints comes back from these rows.
pub fn idle_evidence(node: &str, pid: u32, from: i64, until: i64) -> String {
    evidence(&IDLE_SQL, node, pid, from, until)
}

/// `sql` (parameters $1 node, $2 from, $3 until, $4 pid) with its parameters written in.
fn evidence(sql: &str, node: &str, pid: u32, from: i64, until: i64) -> String {
    // The node last: its literal is not searched for the others.
    sql.replace("$2", &from.to_string())
        .replace("$3", &until.to_string())
        .replace("$4", &pid.to_string())
        .replace("$1", &lit(node))
}

/// The DataLoader's share of a process's steps in a window, as one row shaped like
/// [`IDLE_SQL`]'s (so that it stands among them in an evidence query): the steps (`gaps`), the
/// mean time per step inside `enumerate(DataLoader)` ranges on the step's thread (`ns`) and
/// the mean step (`window_ns`). No row where no step holds a DataLoader range.
pub const INPUT_SHARE_SQL: &str = "WITH s AS (SELECT DISTINCT tid, start_ns, end_ns FROM steps WHERE node = $1 AND pid = $4 AND start_ns < $3 AND end_ns > $2 AND source <> 'inferred'), \
dl AS (SELECT s.tid, s.start_ns, sum(least(r.end_ns, s.end_ns) - greatest(r.start_ns, s.start_ns)) AS ns, min(r.name) AS name FROM s JOIN ranges r \
ON r.node = $1 AND r.pid = $4 AND r.tid = s.tid AND r.start_ns < s.end_ns AND r.end_ns > s.start_ns AND r.name LIKE 'enumerate(DataLoader)%' GROUP BY ALL) \
SELECT $4::BIGINT AS pid, NULL::BIGINT AS device, 'step' AS waiting_for, 'input pipeline per step' AS reason, min(dl.name) AS detail, count(*)::BIGINT AS gaps, \
round(avg(coalesce(dl.ns, 0)))::BIGINT AS ns, round(avg(s.end_ns - s.start_ns))::BIGINT AS window_ns FROM s LEFT JOIN dl USING (tid, start_ns) HAVING count(dl.ns) > 0";

/// The DataLoader's share of a process's steps ([`INPUT_SHARE_SQL`]'s row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputShare {
    /// The DataLoader range's name (`enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`).
    pub name: String,
    /// Steps in the window.
    pub steps: i64,
    /// Mean time per step in the DataLoader (ns).
    pub input_ns: i64,
    /// Mean step (ns).
    pub step_ns: i64,
}

/// The DataLoader's share of `pid`'s steps in `[from, until]`, where its steps hold DataLoader
/// ranges.
pub fn input_share(
    r: &Reader,
    node: &str,
    pid: u32,
    from: i64,
    until: i64,
) -> Result<Option<InputShare>, StoreError> {
    type Row = (i64, Option<i64>, String, String, String, i64, i64, i64);
    let rows: Vec<Row> = r
        .prepare_trusted(INPUT_SHARE_SQL)?
        .query_map(duckdb::params![node, from, until, pid], causeway_store::row)
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "measuring the DataLoader's share of the steps"))?;
    Ok(rows
        .into_iter()
        .next()
        .map(|(_, _, _, _, name, steps, input_ns, step_ns)| InputShare {
            name,
            steps,
            input_ns,
            step_ns,
        }))
}

/// [`INPUT_SHARE_SQL`] for one process in a window, as evidence.
pub fn input_share_evidence(node: &str, pid: u32, from: i64, until: i64) -> String {
    evidence(INPUT_SHARE_SQL, node, pid, from, until)
}

/// Busy time of `pid`'s devices in `[from, until]` on the device timeline, as (busy, window)
/// in ns; None where the trace has no device timeline for it there.
pub fn busy_in(
    r: &Reader,
    node: &str,
    pid: u32,
    from: i64,
    until: i64,
) -> Result<Option<(i64, i64)>, StoreError> {
    if r.schema_version() < DEVICE_SCHEMA {
        return Ok(None);
    }
    let m = measure_busy(r, node, from, until, i64::from(pid))?;
    // Several devices: the busiest one says whether the process kept the GPU working.
    Ok(m.into_iter()
        .map(|d| d.busy_ns)
        .max()
        .map(|b| (b, (until - from).max(0))))
}
