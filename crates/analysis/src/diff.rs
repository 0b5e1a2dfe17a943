//! Two runs compared step for step (`causeway diff`, the MCP tool `compare_traces`): the
//! difference in mean step time, split into the step budget's buckets (the parts sum to the
//! difference: each is the difference of that bucket's mean, and the buckets sum to the step),
//! the GPU calls, kernels and CPU ops whose time per step changed most, and the noise level
//! from the step-to-step spread of both runs, so that a run against itself says "no difference
//! beyond noise". Each side is read on its own ([`side`]), so the two may come from different
//! sources: a causeway recording against a profiler import of the same job.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use causeway_store::{Reader, StoreError, duckdb};
use serde::Serialize;

use crate::base::errors::duck;
use crate::counts::lit;
use crate::fmt::dur;
use crate::steps::{BUCKETS, Feeder, Series, StepQuery, bucket_meaning, steps};

/// Changed ops, kernels and CPU ops reported.
pub const CHANGED: usize = 10;

/// A difference is beyond noise past this many standard errors.
const NOISE_LEVELS: f64 = 2.0;

/// One run's steps and what ran in them, per step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// The trace (file name).
    pub trace: String,
    /// The step series compared (the one with the most steps).
    pub series: Series,
    /// Time per step of every GPU call op, kernel and CPU op in the steps.
    #[serde(skip)]
    pub items: BTreeMap<(String, String), Item>,
    /// Rows behind `items`.
    #[serde(skip)]
    pub items_sql: String,
}

/// Totals of one named thing over a side's steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Item {
    /// How many.
    pub count: i64,
    /// Their time overlapping the steps (ns).
    pub ns: i64,
}

/// One figure per step on both sides and its change.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PerStep {
    /// Mean per step in the base run (ns).
    pub base_ns: i64,
    /// Mean per step in the new run (ns).
    pub new_ns: i64,
    /// new - base (ns).
    pub delta_ns: i64,
    /// Share of the base's mean step (percent).
    pub base_pct: f64,
    /// Share of the new run's mean step.
    pub new_pct: f64,
}

impl PerStep {
    fn of(base_ns: i64, new_ns: i64, base_mean: i64, new_mean: i64) -> PerStep {
        PerStep {
            base_ns,
            new_ns,
            delta_ns: new_ns - base_ns,
            base_pct: pct(base_ns, base_mean),
            new_pct: pct(new_ns, new_mean),
        }
    }
}

/// One bucket's part of the difference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Part {
    /// The bucket (input, sync, collective, copy, alloc, launch, preempted, blocked, host).
    pub bucket: String,
    /// What it means.
    pub meaning: String,
    /// Its mean per step on each side.
    #[serde(flatten)]
    pub per_step: PerStep,
}

/// A GPU call op, kernel or CPU op whose time per step changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// `gpu call` (a runtime/driver/NCCL call on the step's thread), `kernel` (device work of
    /// the process: kernels, copies, memsets by name), `cpu op` (a profiler range on the step's
    /// thread).
    pub kind: String,
    /// Its name.
    pub name: String,
    /// How many per step, base.
    pub base_count: f64,
    /// How many per step, new.
    pub new_count: f64,
    /// Its time per step on each side.
    #[serde(flatten)]
    pub per_step: PerStep,
}

/// One side as the answer describes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideOut {
    /// The trace.
    pub trace: String,
    /// Node, process, thread and source of the steps.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// profiler, nvtx or inferred.
    pub source: String,
    /// Steps.
    pub steps: usize,
    /// Mean step (ns).
    pub mean_ns: i64,
    /// Median step (ns).
    pub p50_ns: i64,
    /// Step-to-step noise (ns).
    pub noise_ns: i64,
    /// Device busy per step, median, where the trace has a device timeline (ns).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_busy_p50_ns: Option<i64>,
    /// The steps' rows.
    pub evidence_sql: String,
    /// The rows behind the changed ops: per kind and name, count and time in the steps.
    pub items_sql: String,
}

/// What `diff` returns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    /// The base run.
    pub base: SideOut,
    /// The new run.
    pub new: SideOut,
    /// Mean step, new - base (ns).
    pub difference_ns: i64,
    /// In percent of the base's mean step.
    pub difference_pct: f64,
    /// The standard error of that difference, from both runs' step-to-step noise (ns).
    pub noise_ns: i64,
    /// Whether the difference is beyond noise (more than two standard errors).
    pub beyond_noise: bool,
    /// The difference by bucket, largest change first; the deltas sum to `difference_ns`
    /// (within a nanosecond per bucket of rounding).
    pub parts: Vec<Part>,
    /// The GPU calls, kernels and CPU ops whose time per step changed most.
    pub changed: Vec<Change>,
    /// What the runs were compared per: `step`, or, for runs without steps, a window of the
    /// busiest GPU-calling thread's time (`1.00 s window`), equal on both sides.
    pub unit: String,
    /// One line: "+36.00 ms per step (+25.7%): +35.00 ms input (...), ...".
    pub summary: String,
    /// What the reader should know.
    pub notes: Vec<String>,
}

/// Why two runs cannot be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{trace} has no training steps to compare")]
pub struct NoSteps {
    /// The trace without steps.
    pub trace: String,
}

impl causeway_hint::Hint for NoSteps {
    /// What to do about it.
    fn hint(&self) -> Option<String> {
        Some({
            "diff compares runs step by step: give it PyTorch profiler traces or Nsight Systems exports with ProfilerStep ranges (causeway import), or recordings with NVTX step ranges; `causeway steps --db T` shows a trace's steps"
        }.to_string())
    }
}

causeway_hint::register!(NoSteps);

/// The steps of `$1..$4` starting in `[$5, $6]`, from the `steps` table.
const STEPS_CTE: &str = "SELECT node, pid, tid, start_ns, end_ns FROM steps WHERE node = $1 AND pid = $2 AND tid = $3 AND source = $4 AND start_ns BETWEEN $5 AND $6";

/// GPU calls on the step thread, device work of the process and CPU ops (depth <= 1) on the
/// step thread, by the step (`s`) they start in: kind, name, count, time overlapping the step.
/// The range that is the step itself (a profiler's `ProfilerStep#N`, an NVTX `step N`: a name
/// per step) is not an op in it.
const ITEMS_BODY: &str = "SELECT 'gpu call' AS kind, e.op AS name, count(*)::BIGINT AS n, sum(least(e.timestamp + e.duration, s.end_ns) - e.timestamp)::BIGINT AS ns \
FROM s JOIN events e ON e.node = s.node AND e.pid = s.pid AND e.tid = s.tid AND e.timestamp >= s.start_ns AND e.timestamp < s.end_ns \
WHERE e.source IN ('CUDA', 'DRIVER', 'GRAPH', 'NCCL') GROUP BY ALL \
UNION ALL SELECT 'kernel', g.name, count(*)::BIGINT, sum(least(g.end_ns, s.end_ns) - g.start_ns)::BIGINT \
FROM s JOIN gpu_activity g ON g.node = s.node AND g.pid = s.pid AND g.start_ns >= s.start_ns AND g.start_ns < s.end_ns \
WHERE g.kind <> 'sync' GROUP BY ALL \
UNION ALL SELECT 'cpu op', r.name, count(*)::BIGINT, sum(least(r.end_ns, s.end_ns) - r.start_ns)::BIGINT \
FROM s JOIN ranges r ON r.node = s.node AND r.pid = s.pid AND r.tid = s.tid AND r.start_ns >= s.start_ns AND r.start_ns < s.end_ns \
WHERE r.depth <= 1 AND r.name NOT LIKE 'ProfilerStep#%' AND NOT (r.start_ns = s.start_ns AND r.end_ns = s.end_ns) GROUP BY ALL";

/// What ran in the stored steps: parameters node, pid, tid, source, from, until.
static ITEMS_SQL: LazyLock<String> =
    LazyLock::new(|| format!("WITH s AS ({STEPS_CTE}) {ITEMS_BODY}"));

/// What ran in equal windows of `$7` ns from `$5` (the first window's start) to `$6` (the
/// last's): the same parameters and the width.
static WINDOW_ITEMS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH s AS (SELECT $1 AS node, $2 AS pid, $3 AS tid, $5 + i * $7 AS start_ns, $5 + (i + 1) * $7 AS end_ns \
FROM range(0, ($6 - $5) // $7 + 1) t(i) WHERE $4 = 'window') {ITEMS_BODY}"
    )
});

/// Reads one run: its step series with the most steps under `q`, and what ran in its steps.
pub fn side(r: &Reader, trace: &str, q: &StepQuery) -> Result<Result<Side, NoSteps>, StoreError> {
    let q = StepQuery {
        slowest: 0,
        ..q.clone()
    };
    let found = steps(r, &q)?;
    let Some(series) = found.series.into_iter().next() else {
        return Ok(Err(NoSteps {
            trace: trace.to_string(),
        }));
    };
    with_items(r, trace, series, None).map(Ok)
}

/// Reads one run over equal windows of its busiest GPU-calling thread (`feeder`, `windows`):
/// for runs without steps, both sides cut with the same width.
pub fn window_side(r: &Reader, trace: &str, f: &Feeder, width_ns: i64) -> Result<Side, StoreError> {
    let series = crate::steps::windows(r, f, width_ns)?;
    with_items(r, trace, series, Some(width_ns))
}

/// The window width two runs without steps are compared over: a second where both threads
/// ran at least five, else a fifth of the shorter span.
pub fn window_width(a: &Feeder, b: &Feeder) -> i64 {
    let span = (a.until_ns - a.from_ns).min(b.until_ns - b.from_ns).max(1);
    if span >= 5 * WINDOW_NS {
        WINDOW_NS
    } else {
        (span / 5).max(1)
    }
}

/// The preferred window when runs without steps are compared (ns).
const WINDOW_NS: i64 = 1_000_000_000;

/// What ran in a series' steps, or in its windows of `width` ns.
fn with_items(
    r: &Reader,
    trace: &str,
    series: Series,
    width: Option<i64>,
) -> Result<Side, StoreError> {
    let from = series.steps.first().map_or(0, |s| s.start_ns);
    let until = series.steps.last().map_or(0, |s| s.start_ns);
    let sql = if width.is_some() {
        WINDOW_ITEMS_SQL.as_str()
    } else {
        ITEMS_SQL.as_str()
    };
    let (node, pid, tid) = (
        series.node.clone(),
        i64::from(series.pid),
        i64::from(series.tid),
    );
    let mut stmt = r.prepare_trusted(sql)?;
    let rows: Vec<(String, String, i64, i64)> = match width {
        Some(w) => stmt.query_map(
            duckdb::params![node, pid, tid, series.source, from, until, w],
            causeway_store::row,
        ),
        None => stmt.query_map(
            duckdb::params![node, pid, tid, series.source, from, until],
            causeway_store::row,
        ),
    }
    .and_then(|rows| rows.collect())
    .map_err(duck(r, "reading what ran in the steps"))?;
    let mut items = BTreeMap::new();
    for (kind, name, n, ns) in rows {
        let e: &mut Item = items.entry((kind, name)).or_default();
        e.count += n;
        e.ns += ns;
    }
    // The guard takes `range` with literal bounds: the window count, written in.
    let items_sql = sql
        .replace("($6 - $5) // $7 + 1", &series.count.to_string())
        .replace("$1", &lit(&series.node))
        .replace("$2", &series.pid.to_string())
        .replace("$3", &series.tid.to_string())
        .replace("$4", &lit(&series.source))
        .replace("$5", &from.to_string())
        .replace("$6", &until.to_string())
        .replace("$7", &width.unwrap_or(0).to_string());
    Ok(Side {
        trace: trace.to_string(),
        series,
        items,
        items_sql,
    })
}

fn out(s: &Side) -> SideOut {
    let x = &s.series;
    SideOut {
        trace: s.trace.clone(),
        node: x.node.clone(),
        pid: x.pid,
        tid: x.tid,
        source: x.source.clone(),
        steps: x.count,
        mean_ns: x.mean_ns,
        p50_ns: x.p50_ns,
        noise_ns: x.noise_ns,
        gpu_busy_p50_ns: x.gpu_busy_p50_ns,
        evidence_sql: x.evidence_sql.clone(),
        items_sql: s.items_sql.clone(),
    }
}

fn pct(ns: i64, of: i64) -> f64 {
    if of <= 0 {
        return 0.0;
    }
    (ns as f64 * 1000.0 / of as f64).round() / 10.0
}

/// Compares two runs: the difference of the mean step, its parts and what changed.
pub fn compare(base: &Side, new: &Side) -> Diff {
    let (b, n) = (&base.series, &new.series);
    let difference = n.mean_ns - b.mean_ns;
    let se = ((b.noise_ns as f64).powi(2) / b.count.max(1) as f64
        + (n.noise_ns as f64).powi(2) / n.count.max(1) as f64)
        .sqrt();
    let beyond = (difference.abs() as f64) > NOISE_LEVELS * se;
    let mut parts: Vec<Part> = b
        .mean_budget
        .parts()
        .iter()
        .zip(n.mean_budget.parts())
        .map(|(x, y)| Part {
            bucket: x.0.to_string(),
            meaning: bucket_meaning(x.0).to_string(),
            per_step: PerStep::of(x.1, y.1, b.mean_ns, n.mean_ns),
        })
        .collect();
    parts.sort_by(|x, y| {
        y.per_step
            .delta_ns
            .abs()
            .cmp(&x.per_step.delta_ns.abs())
            .then(
                BUCKETS
                    .iter()
                    .position(|k| *k == x.bucket)
                    .cmp(&BUCKETS.iter().position(|k| *k == y.bucket)),
            )
    });

    let (nb, nn) = (b.count.max(1) as f64, n.count.max(1) as f64);
    let keys: std::collections::BTreeSet<&(String, String)> =
        base.items.keys().chain(new.items.keys()).collect();
    let mut changed: Vec<Change> = keys
        .into_iter()
        .map(|k| {
            let x = base.items.get(k).copied().unwrap_or_default();
            let y = new.items.get(k).copied().unwrap_or_default();
            let (bns, nns) = ((x.ns as f64 / nb) as i64, (y.ns as f64 / nn) as i64);
            Change {
                kind: k.0.clone(),
                name: k.1.clone(),
                base_count: (x.count as f64 / nb * 10.0).round() / 10.0,
                new_count: (y.count as f64 / nn * 10.0).round() / 10.0,
                per_step: PerStep::of(bns, nns, b.mean_ns, n.mean_ns),
            }
        })
        .filter(|c| c.per_step.delta_ns != 0)
        .collect();
    changed.sort_by(|x, y| {
        y.per_step
            .delta_ns
            .abs()
            .cmp(&x.per_step.delta_ns.abs())
            .then(x.kind.cmp(&y.kind))
            .then(x.name.cmp(&y.name))
    });

    let mut notes = Vec::new();
    if b.source != n.source {
        notes.push(format!(
            "the runs' steps come from different sources ({} and {}): their boundaries may differ by what each source counts as a step",
            b.source, n.source
        ));
    }
    if (b.gpu_busy_p50_ns.is_some()) != (n.gpu_busy_p50_ns.is_some()) {
        notes.push(
            "only one run has a device timeline: kernels are compared where both have one".into(),
        );
    }
    let windows = b.source == WINDOW && n.source == WINDOW;
    let (unit, se, beyond) = if windows {
        let (se, beyond) = window_noise(b, n, &parts);
        notes.push(format!(
            "compared per {} window of each run's busiest GPU-calling thread: the windows are equal, so the parts show where that thread's time moved; a part is beyond noise where it moved more than two standard errors of its window-to-window spread",
            dur(b.mean_ns)
        ));
        (format!("{} window", dur(b.mean_ns)), se, beyond)
    } else {
        ("step".to_string(), se, beyond)
    };
    let summary = if windows {
        window_summary(
            &unit,
            beyond,
            &parts,
            &changed,
            &base.items,
            &new.items,
            b.count,
            n.count,
        )
    } else {
        summary(difference, b.mean_ns, se, beyond, &parts, &changed)
    };
    changed.truncate(CHANGED);
    Diff {
        base: out(base),
        new: out(new),
        difference_ns: difference,
        difference_pct: pct(difference, b.mean_ns),
        noise_ns: se.round() as i64,
        beyond_noise: beyond,
        parts,
        changed,
        unit,
        summary,
        notes,
    }
}

/// The source of a step series cut into equal windows.
const WINDOW: &str = "window";

/// For windows: the largest standard error of a bucket's mean difference (from its
/// window-to-window spread on both sides), and whether any part moved beyond two of its own.
fn window_noise(b: &Series, n: &Series, parts: &[Part]) -> (f64, bool) {
    let spread = |x: &Series, k: usize| -> f64 {
        let v: Vec<f64> = x
            .steps
            .iter()
            .map(|s| s.budget.parts()[k].1 as f64)
            .collect();
        let m = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let var = v.iter().map(|y| (y - m).powi(2)).sum::<f64>() / (v.len().max(2) - 1) as f64;
        var / v.len().max(1) as f64
    };
    let mut worst = 0.0f64;
    let mut beyond = false;
    for p in parts {
        let Some(k) = BUCKETS.iter().position(|x| *x == p.bucket) else {
            continue;
        };
        let se = (spread(b, k) + spread(n, k)).sqrt();
        worst = worst.max(se);
        beyond |=
            (p.per_step.delta_ns.abs() as f64) > NOISE_LEVELS * se && p.per_step.delta_ns != 0;
    }
    (worst, beyond)
}

/// Kernel launches (and graph launches) per window: the runs' throughput where they have no
/// steps.
fn launches(items: &BTreeMap<(String, String), Item>, windows: usize) -> f64 {
    let n: i64 = items
        .iter()
        .filter(|((kind, name), _)| kind == "gpu call" && crate::opsets::is_launch(name))
        .map(|(_, i)| i.count)
        .sum();
    n as f64 / windows.max(1) as f64
}

#[allow(clippy::too_many_arguments)]
fn window_summary(
    unit: &str,
    beyond: bool,
    parts: &[Part],
    changed: &[Change],
    base: &BTreeMap<(String, String), Item>,
    new: &BTreeMap<(String, String), Item>,
    nb: usize,
    nn: usize,
) -> String {
    let (lb, ln) = (launches(base, nb), launches(new, nn));
    let rate = if lb > 0.0 {
        format!(
            "; kernel launches per window {lb:.1} -> {ln:.1} ({:+.1}%)",
            (ln - lb) * 100.0 / lb
        )
    } else {
        String::new()
    };
    if !beyond {
        return format!("no steps to align: per {unit}, no part moved beyond noise{rate}");
    }
    let moved: Vec<String> = parts
        .iter()
        .filter(|p| p.per_step.delta_ns != 0)
        .take(3)
        .map(|p| part_line(p, changed, "window"))
        .collect();
    format!("no steps to align: per {unit}, {}{rate}", moved.join(", "))
}

/// "+5.00 ms input (enumerate(DataLoader)... 16% -> 40% of the step)": a part, named by the
/// changed item that best names the bucket's change, when one does.
fn part_line(p: &Part, changed: &[Change], of: &str) -> String {
    let named = changed
        .iter()
        .find(|c| {
            names(&p.bucket, c) && c.per_step.delta_ns.signum() == p.per_step.delta_ns.signum()
        })
        .map(|c| {
            format!(
                " ({} {:.0}% -> {:.0}% of the {of})",
                c.name, c.per_step.base_pct, c.per_step.new_pct
            )
        })
        .unwrap_or_default();
    format!("{} {}{named}", signed(p.per_step.delta_ns), p.bucket)
}

/// Whether a changed item belongs to a bucket (the op or range whose time the bucket counts).
fn names(bucket: &str, c: &Change) -> bool {
    let n = c.name.to_ascii_lowercase();
    let call = c.kind == "gpu call";
    match bucket {
        "input" => c.kind == "cpu op" && n.starts_with("enumerate(dataloader)"),
        "collective" => n.contains("nccl") || n.contains("c10d") || n == "record_param_comms",
        "sync" => call && (n.contains("synchronize") || n.contains("memcpy")),
        "copy" => call && (n.contains("memcpy") || n.contains("memset")),
        "alloc" => call && (n.contains("malloc") || n.contains("free") || n.contains("memalloc")),
        "launch" => call && n.contains("launch"),
        "host" => c.kind == "cpu op" && !n.starts_with("enumerate(dataloader)"),
        _ => false,
    }
}

fn signed(ns: i64) -> String {
    if ns >= 0 {
        format!("+{}", dur(ns))
    } else {
        format!("-{}", dur(-ns))
    }
}

fn summary(
    difference: i64,
    base_mean: i64,
    se: f64,
    beyond: bool,
    parts: &[Part],
    changed: &[Change],
) -> String {
    if !beyond {
        return format!(
            "no difference beyond noise: {} per step ({:+.1}%), within the noise of {} (two standard errors of the step-to-step spread)",
            signed(difference),
            pct(difference, base_mean),
            dur((NOISE_LEVELS * se).round() as i64)
        );
    }
    let top: Vec<String> = parts
        .iter()
        .filter(|p| p.per_step.delta_ns != 0 && p.per_step.delta_ns.abs() * 20 >= difference.abs())
        .take(3)
        .map(|p| part_line(p, changed, "step"))
        .collect();
    format!(
        "{} per step ({:+.1}%): {}",
        signed(difference),
        pct(difference, base_mean),
        top.join(", ")
    )
}
