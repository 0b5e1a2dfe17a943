//! Training steps, the unit ML engineers think in (`causeway steps`, the MCP tool `get_steps`):
//! every step series the trace holds (a profiler's `ProfilerStep#N`, NVTX ranges), its step
//! times (p50/p90/p99/max, the step-to-step noise), where each step's time went on the thread
//! that ran it, the slowest steps with the finding that explains each, and slow steps that come
//! back every Nth step (checkpoints, logging, evaluation), named by what only they run.
//!
//! A step's budget is a closed partition of its wall time on its thread: each instant goes to
//! the first of waiting for the device (syncs, device-to-host copies), a collective, preempted,
//! another copy, an allocation or free, another GPU call (launches), the input pipeline
//! (DataLoader ops), blocked off the CPU, else host work. The device's busy time in the step is
//! given beside it, measured on the device timeline where the trace has one.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use causeway_store::catalog::{self, Source};
use causeway_store::{Reader, StoreError, duckdb};
use serde::Serialize;

use crate::base::errors::duck;
use crate::budget::CallClass;
use crate::chains::{ChainQuery, Severity};
use crate::counts::lit;
use crate::opsets::op_filter;
use crate::scan::NodeRef;
use crate::switches::Switches;
use crate::window::{DEVICE_SCHEMA, TimeRef, Window, WindowSpec};

/// Steps listed in an answer, over all its series (each gets at least [`MIN_LISTED`]); longer
/// series list evenly spaced steps, so that an agent's response stays within its budget.
pub const LISTED_STEPS: usize = 32;
/// See [`LISTED_STEPS`].
const MIN_LISTED: usize = 4;
/// Series in an answer (a cluster store has one per rank): the ones with the most steps.
pub const MAX_SERIES: usize = 8;

/// Slowest steps reported by default.
pub const DEFAULT_SLOWEST: usize = 5;

/// A slow step is this much over the median at least, and past the noise (below).
const SLOW_OVER_MEDIAN: f64 = 0.2;
/// ... and this many noise levels (the scaled median absolute deviation) over the median.
const SLOW_NOISE_LEVELS: f64 = 5.0;
/// Slow steps needed before a period is claimed.
const PERIODIC_MIN: usize = 3;

/// What `steps` looks at.
#[derive(Debug, Clone, Default)]
pub struct StepQuery {
    /// Steps starting in this window.
    pub window: WindowSpec,
    /// Only this process.
    pub pid: Option<u32>,
    /// Only this node.
    pub node: Option<String>,
    /// How many of the slowest steps to report (0: none).
    pub slowest: usize,
    /// Run `explain` over each of them for the finding that explains it (one analysis per
    /// step: the report leaves it out).
    pub explain_slowest: bool,
}

/// Where one step's time went on its thread (ns); the buckets sum to the step's time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StepBudget {
    /// In DataLoader ops (`enumerate(DataLoader)...`): waiting for input.
    pub input_ns: i64,
    /// Waiting for the device: synchronisations and device-to-host copies.
    pub sync_ns: i64,
    /// In collectives (NCCL calls, c10d/nccl ops).
    pub collective_ns: i64,
    /// Other copies and memsets.
    pub copy_ns: i64,
    /// Device memory allocations and frees.
    pub alloc_ns: i64,
    /// Other GPU calls: kernel and graph launches, events, streams.
    pub launch_ns: i64,
    /// Off the CPU while runnable.
    pub preempted_ns: i64,
    /// Off the CPU, blocked or sleeping (or in an unknown state).
    pub blocked_ns: i64,
    /// On the CPU outside all of the above: Python, the framework, data preparation.
    pub host_ns: i64,
}

/// The buckets' names, in the budget's order.
pub const BUCKETS: [&str; 9] = [
    "input",
    "sync",
    "collective",
    "copy",
    "alloc",
    "launch",
    "preempted",
    "blocked",
    "host",
];

impl StepBudget {
    /// The buckets, named, in [`BUCKETS`] order.
    pub fn parts(&self) -> [(&'static str, i64); 9] {
        [
            ("input", self.input_ns),
            ("sync", self.sync_ns),
            ("collective", self.collective_ns),
            ("copy", self.copy_ns),
            ("alloc", self.alloc_ns),
            ("launch", self.launch_ns),
            ("preempted", self.preempted_ns),
            ("blocked", self.blocked_ns),
            ("host", self.host_ns),
        ]
    }

    /// Their sum (the step's time).
    pub fn sum(&self) -> i64 {
        self.parts().iter().map(|p| p.1).sum()
    }

    fn slot(&mut self, b: Bucket) -> &mut i64 {
        match b {
            Bucket::Input => &mut self.input_ns,
            Bucket::Sync => &mut self.sync_ns,
            Bucket::Collective => &mut self.collective_ns,
            Bucket::Copy => &mut self.copy_ns,
            Bucket::Alloc => &mut self.alloc_ns,
            Bucket::Launch => &mut self.launch_ns,
            Bucket::Preempted => &mut self.preempted_ns,
            Bucket::Blocked => &mut self.blocked_ns,
            Bucket::Host => &mut self.host_ns,
        }
    }
}

/// What a bucket means, for people.
pub fn bucket_meaning(name: &str) -> &'static str {
    match name {
        "input" => "waiting for input (DataLoader)",
        "sync" => "waiting for the GPU (syncs, device-to-host copies)",
        "collective" => "in collectives",
        "copy" => "in other copies",
        "alloc" => "allocating or freeing device memory",
        "launch" => "launching work",
        "preempted" => "preempted",
        "blocked" => "blocked off the CPU",
        _ => "host work (Python, framework)",
    }
}

/// One step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// Its index (ProfilerStep#N: N).
    pub step: i64,
    /// Start (ns since the epoch).
    pub start_ns: i64,
    /// Wall time (ns).
    pub duration_ns: i64,
    /// Where it went on the step's thread.
    pub budget: StepBudget,
    /// The process's devices busy in it (union of kernels, copies and memsets, ns), measured
    /// on the device timeline; None without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_busy_ns: Option<i64>,
}

/// The finding that explains a slow step: the top chain of `explain` over the step alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepFinding {
    /// Chain id (within that step's explain).
    pub id: String,
    /// Detector.
    pub detector: String,
    /// Severity.
    pub severity: Severity,
    /// One line.
    pub summary: String,
    /// Its estimated cost in the step (ns).
    pub time_lost_ns: i64,
}

/// One of the slowest steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlowStep {
    /// The step.
    #[serde(flatten)]
    pub step: Step,
    /// Over the series' median step (ns).
    pub over_median_ns: i64,
    /// Per bucket, this step's time less the median step's (the median of each bucket over
    /// the series), largest first; only buckets that grew.
    pub grew: Vec<(String, i64)>,
    /// The top finding of `explain` over the step's window, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finding: Option<StepFinding>,
    /// Rows behind the step's figures: its GPU calls, DataLoader and collective ranges and
    /// device activity, each with the time that overlaps the step.
    pub evidence_sql: String,
}

/// Slow steps that come back every `every` steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Periodic {
    /// The period, in steps.
    pub every: i64,
    /// The slow steps' indices.
    pub steps: Vec<i64>,
    /// The median slow step less the median of the others (ns).
    pub extra_ns: i64,
    /// The bucket that grew most in them (median over the slow steps less the others').
    pub grew: String,
    /// How much (ns).
    pub grew_ns: i64,
    /// What runs in (nearly) every slow step and (almost) no other: a range or op name, with
    /// its time per slow step (ns, median).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub only_in_slow: Option<(String, i64)>,
    /// What the slow steps probably are: checkpoint, evaluation, logging, or the bucket's
    /// meaning.
    pub what: String,
}

/// The steps of one thread from one source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    /// Node.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// Thread that ran the steps.
    pub tid: u32,
    /// Process name (data from the traced machine).
    pub comm: String,
    /// Rank, where the trace says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<i64>,
    /// profiler, nvtx or inferred.
    pub source: String,
    /// How inferred steps were found (source `inferred`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inferred: Option<Inferred>,
    /// Steps.
    pub count: usize,
    /// Nearest-rank percentiles and extremes of the step time (ns).
    pub p50_ns: i64,
    /// 90th.
    pub p90_ns: i64,
    /// 99th.
    pub p99_ns: i64,
    /// Longest.
    pub max_ns: i64,
    /// Shortest.
    pub min_ns: i64,
    /// Mean.
    pub mean_ns: i64,
    /// Sum.
    pub total_ns: i64,
    /// Step-to-step noise: the median absolute deviation from the median, scaled to a
    /// standard deviation (x1.4826).
    pub noise_ns: i64,
    /// The median step's budget: each bucket's median over the steps (need not sum to p50).
    pub median_budget: StepBudget,
    /// The mean step's budget: each bucket's mean (sums to the mean step, within rounding).
    pub mean_budget: StepBudget,
    /// Median device busy time per step (ns), with a device timeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_busy_p50_ns: Option<i64>,
    /// The slowest steps, slowest first.
    pub slowest: Vec<SlowStep>,
    /// Slow steps that come back every Nth step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub periodic: Option<Periodic>,
    /// The steps, in order: every one, or (`listed`) that many evenly spaced.
    pub steps: Vec<Step>,
    /// When the series has more steps than an answer lists: how many `steps` holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listed: Option<usize>,
    /// The steps' rows (index, start, end, time).
    pub evidence_sql: String,
}

/// Steps inferred from a thread's cadence: what fixed them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inferred {
    /// The call that recurs once per step.
    pub anchor: String,
    /// GPU calls per step.
    pub calls_per_step: usize,
    /// How well the calls repeat with that period (0-1).
    pub confidence: f64,
}

/// What `steps` returns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Steps {
    /// The window: steps starting in it.
    pub window: Window,
    /// One per (node, process, thread, source), the most steps first.
    pub series: Vec<Series>,
    /// What the reader should know.
    pub notes: Vec<String>,
}

const STEPS_SQL: &str = "SELECT node, pid::BIGINT, tid::BIGINT, source, step, start_ns, end_ns FROM steps \
WHERE start_ns BETWEEN $1 AND $2 AND end_ns >= start_ns AND ($3 < 0 OR pid = $3) AND ($4 = '' OR node = $4) \
ORDER BY node, pid, tid, source, start_ns, step";

/// (node, pid, tid, source) of a step series.
type SeriesKey = (String, u32, u32, String);

const STEPS_SPAN_SQL: &str = "SELECT min(start_ns), max(end_ns) FROM steps";

/// GPU calls of one thread overlapping `[$4, $5)`. Parameters: node, pid, tid, from, until.
static CALLS_SQL: LazyLock<String> = LazyLock::new(|| {
    let gpu = op_filter(|o| {
        matches!(
            o.source,
            Source::Cuda | Source::Driver | Source::Graph | Source::Nccl
        )
    });
    format!(
        "SELECT timestamp, timestamp + duration, op_id::BIGINT, arg1 FROM event_data \
WHERE node = $1 AND pid = $2 AND tid = $3 AND {gpu} AND timestamp < $5 AND timestamp + duration > $4"
    )
});

/// The host ranges a step's budget names: DataLoader ops (1) and collectives (2).
const RANGES_SQL: &str = "SELECT start_ns, end_ns, CASE WHEN name LIKE 'enumerate(DataLoader)%' THEN 1 ELSE 2 END::BIGINT FROM ranges \
WHERE node = $1 AND pid = $2 AND tid = $3 AND start_ns < $5 AND end_ns > $4 \
AND (name LIKE 'enumerate(DataLoader)%' OR name LIKE 'nccl:%' OR name LIKE 'c10d::%' OR name = 'record_param_comms')";

const ACTIVITY_SQL: &str = "SELECT start_ns, end_ns FROM gpu_activity \
WHERE node = $1 AND pid = $2 AND kind <> 'sync' AND end_ns >= start_ns AND start_ns < $4 AND end_ns > $3 ORDER BY start_ns";

const HAS_TIMELINE_SQL: &str =
    "SELECT count(*)::BIGINT FROM gpu_activity WHERE node = $1 AND pid = $2";

const COMM_SQL: &str = "SELECT coalesce(max(comm), '') FROM processes WHERE node = $1 AND pid = $2";

const RANK_SQL: &str =
    "SELECT max(rank)::BIGINT FROM processes WHERE node = $1 AND pid = $2 AND rank IS NOT NULL";

/// Ranges (depth <= 2, any thread of the process) starting in `[$3, $4]`: start, end, name.
const MARKS_RANGES_SQL: &str = "SELECT start_ns, end_ns, name FROM ranges \
WHERE node = $1 AND pid = $2 AND depth <= 2 AND name NOT LIKE 'ProfilerStep#%' AND start_ns BETWEEN $3 AND $4";

/// Ops of the process (GPU calls, I/O, syscalls, sockets; not the scheduler's switches and
/// wakeups, which every step has) starting in
/// `[$3, $4]`.
static MARKS_OPS_SQL: LazyLock<String> = LazyLock::new(|| {
    let host = op_filter(|o| !o.name.starts_with("sched_"));
    format!(
        "SELECT timestamp, timestamp + duration, op FROM events \
WHERE node = $1 AND pid = $2 AND {host} AND timestamp BETWEEN $3 AND $4"
    )
});

/// GPU-calling threads of each process in `[$1, $2]`, busiest first.
static FEEDERS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT node, pid::BIGINT, tid::BIGINT, count(*)::BIGINT AS n FROM event_data \
WHERE {GPU} AND timestamp BETWEEN $1 AND $2 AND ($3 < 0 OR pid = $3) AND ($4 = '' OR node = $4) \
GROUP BY ALL ORDER BY 1, 2, 4 DESC, 3",
        GPU = gpu_ops()
    )
});

/// One thread's GPU calls in `[$4, $5]`, in order: start, end, op id.
static THREAD_CALLS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT timestamp, timestamp + duration, op_id::BIGINT, arg1 FROM event_data \
WHERE node = $1 AND pid = $2 AND tid = $3 AND {GPU} AND timestamp BETWEEN $4 AND $5 ORDER BY timestamp, seq",
        GPU = gpu_ops()
    )
});

/// GPU ops of a process the recorder stored only a sample of (a host event counted but not
/// stored, such as page allocations, says nothing about the GPU calls' order).
static SAMPLED_OPS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT op_id::BIGINT FROM op_counts WHERE node = $1 AND pid = $2 AND {} GROUP BY op_id HAVING sum(stored) < sum(calls)",
        gpu_ops()
    )
});

fn gpu_ops() -> String {
    op_filter(|o| {
        matches!(
            o.source,
            Source::Cuda | Source::Driver | Source::Graph | Source::Nccl
        )
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Bucket {
    Sync,
    Collective,
    Preempted,
    Copy,
    Alloc,
    Launch,
    Input,
    Blocked,
    Host,
}

/// Buckets that intervals can claim, in priority order (Host is what none claims).
const CLAIMS: [Bucket; 8] = [
    Bucket::Sync,
    Bucket::Collective,
    Bucket::Preempted,
    Bucket::Copy,
    Bucket::Alloc,
    Bucket::Launch,
    Bucket::Input,
    Bucket::Blocked,
];

fn call_bucket(op: u16, dir: i64) -> Bucket {
    match CallClass::of(op, dir) {
        CallClass::Sync | CallClass::CopyD2h => Bucket::Sync,
        CallClass::Collective => Bucket::Collective,
        CallClass::CopyH2d | CallClass::CopyD2d | CallClass::CopyOther => Bucket::Copy,
        CallClass::Alloc | CallClass::Free => Bucket::Alloc,
        CallClass::Launch | CallClass::Other => Bucket::Launch,
    }
}

/// Every step series in the query's window, with budgets, percentiles, the slowest steps and
/// periodic slow steps.
pub fn steps(r: &Reader, q: &StepQuery) -> Result<Steps, StoreError> {
    let window = steps_window(r, q)?;
    let mut notes = Vec::new();
    if r.schema_version() < DEVICE_SCHEMA {
        notes.push("this trace's schema predates steps (version 13): no step is stored".into());
        return Ok(Steps {
            window,
            series: Vec::new(),
            notes,
        });
    }
    let pid = q.pid.map_or(-1, i64::from);
    let node = q.node.clone().unwrap_or_default();
    let (grouped, stored_inferred) = stored_steps(r, window, pid, &node)?;
    let resume = crate::convention::resume_nodes(r)?;
    let mut series = Vec::new();
    let annotated: std::collections::BTreeSet<(String, u32)> =
        grouped.keys().map(|k| (k.0.clone(), k.1)).collect();
    for ((n, p, t, source), raw) in grouped {
        series.push(one_series(r, q, &resume, &n, p, t, &source, raw)?);
    }
    // Processes that feed a GPU without annotated steps: steps from their cadence.
    for inf in infer_unannotated(r, window, pid, &node, &annotated)? {
        let Inference {
            node: n,
            pid: p,
            tid: t,
            cadence: cad,
            steps: raw,
        } = inf;
        let mut s = one_series(r, q, &resume, &n, p, t, "inferred", raw)?;
        let anchor = catalog::op_by_id(cad.anchor).map_or("?", |o| o.name);
        let stored = if stored_inferred.contains(&(n.clone(), p)) {
            "stored in `steps` with source 'inferred'"
        } else {
            "not stored"
        };
        notes.push(format!(
            "{n} pid {p}: steps inferred from thread {t}'s cadence ({} calls per step, anchored on {anchor}, confidence {:.2}); {stored}",
            cad.calls_per_step, cad.confidence
        ));
        s.evidence_sql = format!(
            "SELECT row_number() OVER (ORDER BY timestamp) AS k, timestamp, duration, timestamp - lag(timestamp) OVER (ORDER BY timestamp) AS since_previous_ns FROM events WHERE node = {} AND pid = {p} AND tid = {t} AND op = {} AND timestamp BETWEEN {} AND {} ORDER BY timestamp",
            lit(&n),
            lit(anchor),
            window.from_ns,
            window.until_ns
        );
        s.inferred = Some(Inferred {
            anchor: anchor.to_string(),
            calls_per_step: cad.calls_per_step,
            confidence: cad.confidence,
        });
        series.push(s);
    }
    series.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.node.cmp(&b.node))
            .then(a.pid.cmp(&b.pid))
            .then(a.tid.cmp(&b.tid))
            .then(a.source.cmp(&b.source))
    });
    if series.len() > MAX_SERIES {
        notes.push(format!(
            "{} more step series not shown: give a pid or node",
            series.len() - MAX_SERIES
        ));
        series.truncate(MAX_SERIES);
    }
    let per = (LISTED_STEPS / series.len().max(1)).max(MIN_LISTED);
    let slowest = if series.len() > 1 {
        (q.slowest / series.len()).max(q.slowest.min(1))
    } else {
        q.slowest
    };
    for s in &mut series {
        s.slowest.truncate(slowest);
        let first = s.steps.first().map(|x| x.step);
        if q.explain_slowest {
            for x in &mut s.slowest {
                x.finding = finding(r, &s.node, s.pid, &x.step, first == Some(x.step.step))?;
            }
        }
        if s.steps.len() > per {
            s.steps = evenly(std::mem::take(&mut s.steps), per);
            s.listed = Some(per);
        }
    }
    if series.is_empty() {
        notes.push("no steps in this window: the trace holds no ProfilerStep#N or NVTX step ranges, and no GPU-calling thread's calls repeat with a step's cadence".into());
    }
    Ok(Steps {
        window,
        series,
        notes,
    })
}

/// The GPU-calling thread with the most calls under `q`, and its active span: what two runs
/// without steps are compared over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feeder {
    /// Node.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Its first GPU call (ns).
    pub from_ns: i64,
    /// The end of its last GPU call (ns).
    pub until_ns: i64,
}

/// The busiest GPU-calling thread's span: [`Feeder`]. Parameters: node, pid, tid, from, until.
static FEEDER_SPAN_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT min(timestamp)::BIGINT, max(timestamp + duration)::BIGINT FROM event_data \
WHERE {GPU} AND node = $1 AND pid = $2 AND tid = $3 AND timestamp BETWEEN $4 AND $5",
        GPU = gpu_ops()
    )
});

/// The busiest GPU-calling thread under `q` (most GPU calls in its window), if any.
pub fn feeder(r: &Reader, q: &StepQuery) -> Result<Option<Feeder>, StoreError> {
    if r.schema_version() < DEVICE_SCHEMA {
        return Ok(None);
    }
    let (_, first, last) = crate::window::trace_span(r)?;
    let window = q.window.resolve(first, last);
    let pid = q.pid.map_or(-1, i64::from);
    let node = q.node.clone().unwrap_or_default();
    let feeders = gpu_threads(r, window, pid, &node)?;
    let Some((n, p, t, _)) = feeders
        .into_iter()
        .max_by(|a, b| a.3.cmp(&b.3).then(b.0.cmp(&a.0)).then(b.1.cmp(&a.1)))
    else {
        return Ok(None);
    };
    let (from, until): (Option<i64>, Option<i64>) = r
        .prepare_trusted(FEEDER_SPAN_SQL.as_str())?
        .query_row(
            duckdb::params![n, p, t, window.from_ns, window.until_ns],
            causeway_store::row,
        )
        .map_err(duck(r, "reading the GPU-calling thread's span"))?;
    Ok(from.zip(until).map(|(from_ns, until_ns)| Feeder {
        node: n,
        pid: p as u32,
        tid: t as u32,
        from_ns,
        until_ns,
    }))
}

/// Equal windows of `width_ns` from the feeder's first call, as many as fit in its span (a
/// trailing partial window is left out), read as a step series (source `window`): the steps'
/// budget over fixed spans of the thread's time, for runs that have no steps.
pub fn windows(r: &Reader, f: &Feeder, width_ns: i64) -> Result<Series, StoreError> {
    let width = width_ns.max(1);
    let n = ((f.until_ns - f.from_ns) / width).max(1);
    let raw: Vec<(i64, i64, i64)> = (0..n)
        .map(|i| (i, f.from_ns + i * width, f.from_ns + (i + 1) * width))
        .collect();
    let resume = crate::convention::resume_nodes(r)?;
    let q = StepQuery::default();
    let mut s = one_series(r, &q, &resume, &f.node, f.pid, f.tid, "window", raw)?;
    s.evidence_sql = format!(
        "SELECT i AS step, {from} + i * {width} AS start_ns, {from} + (i + 1) * {width} AS end_ns, {width} AS duration_ns FROM range(0, {n}) t(i) ORDER BY i",
        from = f.from_ns
    );
    Ok(s)
}

/// The window `steps` answers for: the query's, and for the whole trace every stored step too
/// (a profiler's first step opens before the first call it traced: its DataLoader fetch).
fn steps_window(r: &Reader, q: &StepQuery) -> Result<Window, StoreError> {
    let (_, first, last) = crate::window::trace_span(r)?;
    let mut window = q.window.resolve(first, last);
    if r.schema_version() >= DEVICE_SCHEMA && q.window == WindowSpec::All {
        let (s, e): (Option<i64>, Option<i64>) = r
            .prepare_trusted(STEPS_SPAN_SQL)?
            .query_row([], causeway_store::row)
            .map_err(duck(r, "reading the steps' span"))?;
        window.from_ns = window.from_ns.min(s.unwrap_or(i64::MAX));
        window.until_ns = window.until_ns.max(e.unwrap_or(i64::MIN));
    }
    Ok(window)
}

/// Stored annotated steps in `window` by series, and the (node, pid)s with stored inferred
/// steps: those are inferred again, from the same calls, with what fixed them (anchor,
/// period, confidence).
#[allow(clippy::type_complexity)]
fn stored_steps(
    r: &Reader,
    window: Window,
    pid: i64,
    node: &str,
) -> Result<
    (
        BTreeMap<SeriesKey, Vec<(i64, i64, i64)>>,
        std::collections::BTreeSet<(String, u32)>,
    ),
    StoreError,
> {
    let rows: Vec<(String, i64, i64, String, i64, i64, i64)> = r
        .prepare_trusted(STEPS_SQL)?
        .query_map(
            duckdb::params![window.from_ns, window.until_ns, pid, node],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading steps"))?;
    let mut grouped: BTreeMap<SeriesKey, Vec<(i64, i64, i64)>> = BTreeMap::new();
    let mut stored_inferred = std::collections::BTreeSet::new();
    for (n, p, t, source, step, s, e) in rows {
        if source == "inferred" {
            stored_inferred.insert((n, p as u32));
            continue;
        }
        grouped
            .entry((n, p as u32, t as u32, source))
            .or_default()
            .push((step, s, e));
    }
    Ok((grouped, stored_inferred))
}

/// One process's steps inferred from its busiest GPU-calling thread's cadence.
#[derive(Debug, Clone)]
pub struct Inference {
    pub node: String,
    pub pid: u32,
    pub tid: u32,
    pub cadence: crate::cadence::Cadence,
    /// (index, start, end) of each step.
    pub steps: Vec<(i64, i64, i64)>,
}

/// Steps inferred for every process in `window` (of `pid` where >= 0, of `node` where not
/// empty) that feeds a GPU and is not in `annotated`, from its busiest GPU-calling thread.
fn infer_unannotated(
    r: &Reader,
    window: Window,
    pid: i64,
    node: &str,
    annotated: &std::collections::BTreeSet<(String, u32)>,
) -> Result<Vec<Inference>, StoreError> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (n, p, t, _) in gpu_threads(r, window, pid, node)? {
        let key = (n.clone(), p as u32);
        if annotated.contains(&key) || !seen.insert(key) {
            continue;
        }
        if let Some((cadence, steps)) = inferred(r, &n, p as u32, t as u32, window)? {
            out.push(Inference {
                node: n,
                pid: p as u32,
                tid: t as u32,
                cadence,
                steps,
            });
        }
    }
    Ok(out)
}

/// The steps a recording or an import stores with source `inferred`: those `steps` infers
/// over the whole trace for processes without profiler or NVTX steps, without the budgets
/// and percentiles `steps` adds.
pub fn inferred_to_store(r: &Reader) -> Result<Vec<Inference>, StoreError> {
    if r.schema_version() < DEVICE_SCHEMA {
        return Ok(Vec::new());
    }
    let window = steps_window(r, &StepQuery::default())?;
    let (grouped, _) = stored_steps(r, window, -1, "")?;
    let annotated = grouped.keys().map(|k| (k.0.clone(), k.1)).collect();
    infer_unannotated(r, window, -1, "", &annotated)
}

/// [`FEEDERS_SQL`]'s rows: node, pid, tid and GPU calls of every GPU-calling thread in `window`
/// (of `pid` where >= 0, of `node` where not empty).
fn gpu_threads(
    r: &Reader,
    window: Window,
    pid: i64,
    node: &str,
) -> Result<Vec<(String, i64, i64, i64)>, StoreError> {
    r.prepare_trusted(FEEDERS_SQL.as_str())?
        .query_map(
            duckdb::params![window.from_ns, window.until_ns, pid, node],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading the GPU-calling threads"))
}

/// Steps of one thread inferred from its calls' cadence in the window, as (index, start, end).
#[allow(clippy::type_complexity)]
pub fn inferred(
    r: &Reader,
    node: &str,
    pid: u32,
    tid: u32,
    window: Window,
) -> Result<Option<(crate::cadence::Cadence, Vec<(i64, i64, i64)>)>, StoreError> {
    let calls: Vec<(i64, i64, i64, i64)> = r
        .prepare_trusted(THREAD_CALLS_SQL.as_str())?
        .query_map(
            duckdb::params![
                node,
                i64::from(pid),
                i64::from(tid),
                window.from_ns,
                window.until_ns
            ],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading a thread's GPU calls"))?;
    let calls: Vec<crate::cadence::Call> = calls
        .into_iter()
        .map(|(s, e, o, dir)| {
            let op = o as u16;
            (s, e, op, CallClass::of(op, dir) == CallClass::CopyH2d)
        })
        .collect();
    // In a sampled recording the stored calls of a sampled op are not the loop's: only the
    // ops stored in full keep its order.
    let sampled: Vec<i64> = r
        .prepare_trusted(SAMPLED_OPS_SQL.as_str())?
        .query_map(duckdb::params![node, i64::from(pid)], |row| row.get(0))
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading which ops were sampled"))?;
    let found = if sampled.is_empty() {
        crate::cadence::infer(&calls)
    } else {
        let full: Vec<crate::cadence::Call> = calls
            .iter()
            .copied()
            .filter(|c| !sampled.contains(&i64::from(c.2)))
            .collect();
        crate::cadence::infer_complete(&full)
    };
    Ok(found.map(|c| {
        let raw = c
            .steps
            .iter()
            .enumerate()
            .map(|(i, &(s, e))| (i as i64, s, e))
            .collect();
        (c, raw)
    }))
}

#[allow(clippy::too_many_arguments)]
fn one_series(
    r: &Reader,
    q: &StepQuery,
    resume: &str,
    node: &str,
    pid: u32,
    tid: u32,
    source: &str,
    raw: Vec<(i64, i64, i64)>,
) -> Result<Series, StoreError> {
    let from = raw.iter().map(|s| s.1).min().unwrap_or(0);
    let until = raw.iter().map(|s| s.2).max().unwrap_or(0);
    let (pid_i, tid_i) = (i64::from(pid), i64::from(tid));

    // Intervals that claim the thread's time, by bucket.
    let mut claims: Vec<(i64, i64, Bucket)> = Vec::new();
    let calls: Vec<(i64, i64, i64, i64)> = r
        .prepare_trusted(CALLS_SQL.as_str())?
        .query_map(
            duckdb::params![node, pid_i, tid_i, from, until],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading the steps' GPU calls"))?;
    for (s, e, op, dir) in calls {
        claims.push((s, e, call_bucket(op as u16, dir)));
    }
    let ranges: Vec<(i64, i64, i64)> = r
        .prepare_trusted(RANGES_SQL)?
        .query_map(
            duckdb::params![node, pid_i, tid_i, from, until],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(
            r,
            "reading the steps' DataLoader and collective ranges",
        ))?;
    for (s, e, k) in ranges {
        claims.push((
            s,
            e,
            if k == 1 {
                Bucket::Input
            } else {
                Bucket::Collective
            },
        ));
    }
    let mut sw = Switches::default();
    let nref = NodeRef {
        name: node,
        only: false,
    };
    let w = Window {
        from_ns: from,
        until_ns: until,
    };
    sw.load(
        r,
        &nref,
        w,
        &[tid],
        resume.contains(&format!("\x1f{node}\x1f")),
    )?;
    for o in sw.of(node, tid) {
        let b = if o.data.state == 0 {
            Bucket::Preempted
        } else {
            Bucket::Blocked
        };
        claims.push((o.start, o.end, b));
    }
    let has_timeline: i64 = r
        .prepare_trusted(HAS_TIMELINE_SQL)?
        .query_row(duckdb::params![node, pid_i], |row| row.get(0))
        .map_err(duck(r, "reading the device timeline"))?;
    let busy = if has_timeline > 0 {
        let acts: Vec<(i64, i64)> = r
            .prepare_trusted(ACTIVITY_SQL)?
            .query_map(
                duckdb::params![node, pid_i, from, until],
                causeway_store::row,
            )
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "reading the device timeline"))?;
        Some(crate::intervals::union(acts))
    } else {
        None
    };

    let spans: Vec<(i64, i64)> = raw.iter().map(|s| (s.1, s.2)).collect();
    let (budgets, busy_ns) = sweep(&spans, &claims, busy.as_deref());
    let steps: Vec<Step> = raw
        .iter()
        .enumerate()
        .map(|(i, &(step, s, e))| Step {
            step,
            start_ns: s,
            duration_ns: e - s,
            budget: budgets[i],
            gpu_busy_ns: busy.as_ref().map(|_| busy_ns[i]),
        })
        .collect();

    let mut d: Vec<i64> = steps.iter().map(|s| s.duration_ns).collect();
    d.sort_unstable();
    let p50 = nearest_rank(&d, 0.5);
    let noise = noise_ns(&d, p50);
    let total: i64 = d.iter().sum();
    let count = steps.len();
    let mean = if count > 0 { total / count as i64 } else { 0 };
    let median_budget = bucket_stat(&steps, |v| nearest_rank(v, 0.5));
    let mean_budget = bucket_stat(&steps, |v| {
        if v.is_empty() {
            0
        } else {
            v.iter().sum::<i64>() / v.len() as i64
        }
    });
    let gpu_busy_p50_ns = busy.as_ref().map(|_| {
        let mut b: Vec<i64> = steps.iter().filter_map(|s| s.gpu_busy_ns).collect();
        b.sort_unstable();
        nearest_rank(&b, 0.5)
    });

    let mut order: Vec<usize> = (0..count).collect();
    order.sort_by(|&a, &b| {
        steps[b]
            .duration_ns
            .cmp(&steps[a].duration_ns)
            .then(steps[a].step.cmp(&steps[b].step))
    });
    let mut slowest = Vec::new();
    for &i in order.iter().take(q.slowest) {
        let s = &steps[i];
        slowest.push(SlowStep {
            over_median_ns: s.duration_ns - p50,
            grew: grew(&s.budget, &median_budget),
            finding: None,
            evidence_sql: step_evidence(node, pid, tid, s.start_ns, s.start_ns + s.duration_ns),
            step: s.clone(),
        });
    }
    let periodic = periodic(&steps, p50, noise)
        .map(|p| name_periodic(r, node, pid, &steps, p))
        .transpose()?;

    let comm: String = r
        .prepare_trusted(COMM_SQL)?
        .query_row(duckdb::params![node, pid_i], |row| row.get(0))
        .map_err(duck(r, "reading the process name"))?;
    let rank: Option<i64> = r
        .prepare_trusted(RANK_SQL)?
        .query_row(duckdb::params![node, pid_i], |row| row.get(0))
        .map_err(duck(r, "reading the process's rank"))?;
    Ok(Series {
        node: node.to_string(),
        pid,
        tid,
        comm: causeway_store::sanitize::sanitize(&comm),
        rank,
        source: source.to_string(),
        inferred: None,
        count,
        p50_ns: p50,
        p90_ns: nearest_rank(&d, 0.9),
        p99_ns: nearest_rank(&d, 0.99),
        max_ns: d.last().copied().unwrap_or(0),
        min_ns: d.first().copied().unwrap_or(0),
        mean_ns: mean,
        total_ns: total,
        noise_ns: noise,
        median_budget,
        mean_budget,
        gpu_busy_p50_ns,
        slowest,
        periodic,
        steps,
        listed: None,
        evidence_sql: format!(
            "SELECT step, start_ns, end_ns, end_ns - start_ns AS duration_ns FROM steps WHERE node = {} AND pid = {pid} AND tid = {tid} AND source = {} AND start_ns BETWEEN {} AND {} ORDER BY start_ns, step",
            lit(node),
            lit(source),
            from,
            until,
        ),
    })
}

/// `k` of `v`'s items, evenly spaced, the first and last among them.
fn evenly<T>(v: Vec<T>, k: usize) -> Vec<T> {
    let n = v.len();
    if k >= n || k < 2 {
        return v;
    }
    let keep: std::collections::BTreeSet<usize> = (0..k).map(|i| i * (n - 1) / (k - 1)).collect();
    v.into_iter()
        .enumerate()
        .filter(|(i, _)| keep.contains(i))
        .map(|(_, x)| x)
        .collect()
}

/// Nearest-rank quantile of sorted values (0 when empty).
fn nearest_rank(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let k = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[k - 1]
}

/// The median absolute deviation from `median`, scaled to a standard deviation.
fn noise_ns(sorted: &[i64], median: i64) -> i64 {
    let mut dev: Vec<i64> = sorted.iter().map(|d| (d - median).abs()).collect();
    dev.sort_unstable();
    (nearest_rank(&dev, 0.5) as f64 * 1.4826).round() as i64
}

fn bucket_stat(steps: &[Step], f: impl Fn(&[i64]) -> i64) -> StepBudget {
    let mut out = StepBudget::default();
    for (k, name) in BUCKETS.iter().enumerate() {
        let mut v: Vec<i64> = steps.iter().map(|s| s.budget.parts()[k].1).collect();
        v.sort_unstable();
        let x = f(&v);
        *out.slot(bucket_named(name)) = x;
    }
    out
}

fn bucket_named(name: &str) -> Bucket {
    match name {
        "input" => Bucket::Input,
        "sync" => Bucket::Sync,
        "collective" => Bucket::Collective,
        "copy" => Bucket::Copy,
        "alloc" => Bucket::Alloc,
        "launch" => Bucket::Launch,
        "preempted" => Bucket::Preempted,
        "blocked" => Bucket::Blocked,
        _ => Bucket::Host,
    }
}

fn grew(b: &StepBudget, base: &StepBudget) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = b
        .parts()
        .iter()
        .zip(base.parts())
        .map(|(x, y)| (x.0.to_string(), x.1 - y.1))
        .filter(|x| x.1 > 0)
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}

/// Splits each step's wall time among the buckets (first claiming bucket wins; unclaimed time
/// is host work) and measures the device's busy time in it, in one sweep over every boundary.
/// Steps may overlap: an instant in two steps counts in both.
fn sweep(
    steps: &[(i64, i64)],
    claims: &[(i64, i64, Bucket)],
    busy: Option<&[(i64, i64)]>,
) -> (Vec<StepBudget>, Vec<i64>) {
    // (time, order at equal times: ends before starts, what)
    #[derive(Clone, Copy)]
    enum Ev {
        Claim(Bucket, i32),
        Busy(i32),
        Step(usize, bool),
    }
    let mut evs: Vec<(i64, u8, Ev)> = Vec::with_capacity(2 * (steps.len() + claims.len()));
    for (i, &(s, e)) in steps.iter().enumerate() {
        evs.push((s, 1, Ev::Step(i, true)));
        evs.push((e, 0, Ev::Step(i, false)));
    }
    for &(s, e, b) in claims.iter().filter(|c| c.1 > c.0) {
        evs.push((s, 1, Ev::Claim(b, 1)));
        evs.push((e, 0, Ev::Claim(b, -1)));
    }
    for &(s, e) in busy.unwrap_or(&[]).iter().filter(|c| c.1 > c.0) {
        evs.push((s, 1, Ev::Busy(1)));
        evs.push((e, 0, Ev::Busy(-1)));
    }
    evs.sort_by_key(|e| (e.0, e.1));
    let mut out = vec![StepBudget::default(); steps.len()];
    let mut busy_ns = vec![0i64; steps.len()];
    let mut open = [0i32; 9];
    let mut busy_open = 0i32;
    let mut active: Vec<usize> = Vec::new();
    let mut prev = i64::MIN;
    for (t, _, ev) in evs {
        if !active.is_empty() && t > prev {
            let len = t - prev;
            let b = CLAIMS
                .iter()
                .copied()
                .find(|&b| open[b as usize] > 0)
                .unwrap_or(Bucket::Host);
            for &i in &active {
                *out[i].slot(b) += len;
                if busy_open > 0 {
                    busy_ns[i] += len;
                }
            }
        }
        prev = t;
        match ev {
            Ev::Claim(b, d) => open[b as usize] += d,
            Ev::Busy(d) => busy_open += d,
            Ev::Step(i, true) => active.push(i),
            Ev::Step(i, false) => active.retain(|&x| x != i),
        }
    }
    (out, busy_ns)
}

/// The top finding of `explain` over one step's window (`first`: the series' first step).
fn finding(
    r: &Reader,
    node: &str,
    pid: u32,
    s: &Step,
    first: bool,
) -> Result<Option<StepFinding>, StoreError> {
    let q = ChainQuery {
        window: WindowSpec::Range {
            from: Some(TimeRef::Absolute(s.start_ns)),
            until: Some(TimeRef::Absolute(s.start_ns + s.duration_ns)),
        },
        pid: Some(pid),
        node: Some(node.to_string()),
        top_n: None,
        prices: Default::default(),
    };
    let e = crate::engine::explain(r, &q)?;
    // cold_start reads the window's start as the thread's: true of a run's first step only.
    Ok(e.chains
        .into_iter()
        .find(|c| first || c.detector != "cold_start")
        .map(|c| StepFinding {
            id: c.id,
            detector: c.detector,
            severity: c.severity,
            summary: c.summary,
            time_lost_ns: c.time_lost_ns,
        }))
}

/// SQL whose rows are what one step's figures come from: its thread's GPU calls, DataLoader
/// and collective ranges, and the process's device work, each with its overlap of the step.
fn step_evidence(node: &str, pid: u32, tid: u32, from: i64, until: i64) -> String {
    let n = lit(node);
    format!(
        "SELECT 'call' AS kind, op AS name, count(*) AS n, sum(least(timestamp + duration, {until}) - greatest(timestamp, {from})) AS overlap_ns FROM events \
WHERE node = {n} AND pid = {pid} AND tid = {tid} AND source IN ('CUDA', 'DRIVER', 'GRAPH', 'NCCL') AND timestamp < {until} AND timestamp + duration > {from} GROUP BY op \
UNION ALL SELECT 'range', name, count(*), sum(least(end_ns, {until}) - greatest(start_ns, {from})) FROM ranges \
WHERE node = {n} AND pid = {pid} AND tid = {tid} AND start_ns < {until} AND end_ns > {from} AND (name LIKE 'enumerate(DataLoader)%' OR name LIKE 'nccl:%' OR name LIKE 'c10d::%' OR name = 'record_param_comms') GROUP BY name \
UNION ALL SELECT 'device ' || kind, kind, count(*), sum(least(end_ns, {until}) - greatest(start_ns, {from})) FROM gpu_activity \
WHERE node = {n} AND pid = {pid} AND kind <> 'sync' AND start_ns < {until} AND end_ns > {from} GROUP BY kind ORDER BY 1, 4 DESC"
    )
}

/// Slow steps (past the median by [`SLOW_OVER_MEDIAN`] and [`SLOW_NOISE_LEVELS`] noise
/// levels) at a steady stride (see the chain below).
fn periodic(steps: &[Step], p50: i64, noise: i64) -> Option<Periodic> {
    let limit = p50 as f64 + (p50 as f64 * SLOW_OVER_MEDIAN).max(noise as f64 * SLOW_NOISE_LEVELS);
    let slow: Vec<i64> = steps
        .iter()
        .filter(|s| s.duration_ns as f64 > limit)
        .map(|s| s.step)
        .collect();
    if slow.len() < PERIODIC_MIN || slow.len() * 2 > steps.len() {
        return None;
    }
    // The stride: the median distance between consecutive slow steps. The chain: the slow
    // steps with another slow step one stride away (within a step, or a tenth of the stride: a
    // checkpoint every 1.5 s of steps that vary falls every 9 or 10 steps); at most one slow
    // step in five off it (warm-up, a checkpoint among logging steps), and nine in ten of the
    // chain's own distances one stride.
    let mut gaps: Vec<i64> = slow.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    let every = gaps[(gaps.len() - 1) / 2];
    if every < 2 {
        return None;
    }
    let tol = (every / 10).max(1);
    let near = |d: i64| d.abs_diff(every) as i64 <= tol;
    let on_stride: Vec<i64> = slow
        .iter()
        .copied()
        .filter(|&a| slow.iter().any(|&b| near((a - b).abs())))
        .collect();
    if on_stride.len() < PERIODIC_MIN || (slow.len() - on_stride.len()) * 5 > slow.len() {
        return None;
    }
    let chain: Vec<i64> = on_stride.windows(2).map(|w| w[1] - w[0]).collect();
    if chain.iter().filter(|&&d| near(d)).count() * 10 < chain.len() * 9 {
        return None;
    }
    let in_slow = |s: &Step| on_stride.binary_search(&s.step).is_ok();
    let med = |f: &dyn Fn(&Step) -> i64, slow_side: bool| {
        let mut v: Vec<i64> = steps
            .iter()
            .filter(|s| in_slow(s) == slow_side)
            .map(f)
            .collect();
        v.sort_unstable();
        nearest_rank(&v, 0.5)
    };
    let extra = med(&|s| s.duration_ns, true) - med(&|s| s.duration_ns, false);
    let mut grew_most = ("host".to_string(), i64::MIN);
    for (k, name) in BUCKETS.iter().enumerate() {
        let g = med(&|s| s.budget.parts()[k].1, true) - med(&|s| s.budget.parts()[k].1, false);
        if g > grew_most.1 {
            grew_most = (name.to_string(), g);
        }
    }
    Some(Periodic {
        every,
        steps: on_stride,
        extra_ns: extra,
        grew: grew_most.0.clone(),
        grew_ns: grew_most.1.max(0),
        only_in_slow: None,
        what: bucket_meaning(&grew_most.0).to_string(),
    })
}

/// Names periodic slow steps by what runs in (nearly) all of them and (almost) no other step:
/// a range (any thread of the process, depth <= 2) or an op (a sync, file I/O, a syscall).
fn name_periodic(
    r: &Reader,
    node: &str,
    pid: u32,
    steps: &[Step],
    mut p: Periodic,
) -> Result<Periodic, StoreError> {
    let pid_i = i64::from(pid);
    let from = steps.first().map_or(0, |s| s.start_ns);
    let until = steps
        .iter()
        .map(|s| s.start_ns + s.duration_ns)
        .max()
        .unwrap_or(0);
    let mut marks: Vec<(i64, i64, String)> = r
        .prepare_trusted(MARKS_RANGES_SQL)?
        .query_map(
            duckdb::params![node, pid_i, from, until],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading ranges in the steps"))?;
    let ops: Vec<(i64, i64, String)> = r
        .prepare_trusted(MARKS_OPS_SQL.as_str())?
        .query_map(
            duckdb::params![node, pid_i, from, until],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading host ops in the steps"))?;
    marks.extend(ops);
    // (step, name) -> time in the step, each mark counted in the step it starts in.
    let mut per: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for (s0, e0, name) in marks {
        let k = steps.partition_point(|s| s.start_ns <= s0);
        let Some(st) = k.checked_sub(1).map(|k| &steps[k]) else {
            continue;
        };
        let end = st.start_ns + st.duration_ns;
        if s0 >= end {
            continue;
        }
        *per.entry((st.step, name)).or_default() += e0.min(end) - s0;
    }
    let rows: Vec<(i64, String, i64)> = per.into_iter().map(|((k, n), ns)| (k, n, ns)).collect();
    let others = steps.len().saturating_sub(p.steps.len()).max(1);
    // name -> (slow steps with it, other steps with it, time in slow steps)
    let mut by: BTreeMap<String, (usize, usize, Vec<i64>)> = BTreeMap::new();
    for (step, name, ns) in rows {
        let e = by.entry(name).or_default();
        if p.steps.binary_search(&step).is_ok() {
            e.0 += 1;
            e.2.push(ns);
        } else {
            e.1 += 1;
        }
    }
    let best = by
        .into_iter()
        .filter(|(_, (s, o, _))| *s * 10 >= p.steps.len() * 8 && *o * 10 <= others)
        .map(|(name, (_, _, mut v))| {
            v.sort_unstable();
            (name, nearest_rank(&v, 0.5))
        })
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)));
    let named = |n: &str| {
        let l = n.to_ascii_lowercase();
        if ["save", "checkpoint", "ckpt", "fsync", "sync_file_range"]
            .iter()
            .any(|k| l.contains(k))
        {
            Some("checkpoint")
        } else if ["eval", "valid"].iter().any(|k| l.contains(k)) {
            Some("evaluation")
        } else if ["log", "print", "wandb", "tensorboard", "summary"]
            .iter()
            .any(|k| l.contains(k))
        {
            Some("logging")
        } else {
            None
        }
    };
    if let Some((name, ns)) = best {
        p.what = match named(&name) {
            Some(w) => format!("{w} (only these steps run {name})"),
            None => format!("{} (only these steps run {name})", p.what),
        };
        p.only_in_slow = Some((name, ns));
    } else if p.grew == "blocked" {
        p.what = "blocked off the CPU: a checkpoint or other file I/O, most often".into();
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_claiming_bucket_wins_and_the_rest_is_host_work() {
        // One step [0, 100): a DataLoader range [10, 60) with a sync call [40, 50) inside it,
        // a launch [70, 75), preempted [72, 80); device busy [50, 90).
        let claims = [
            (10, 60, Bucket::Input),
            (40, 50, Bucket::Sync),
            (70, 75, Bucket::Launch),
            (72, 80, Bucket::Preempted),
        ];
        let (b, busy) = sweep(&[(0, 100)], &claims, Some(&[(50, 90)]));
        let b = b[0];
        assert_eq!(b.input_ns, 40);
        assert_eq!(b.sync_ns, 10);
        assert_eq!(b.launch_ns, 2);
        assert_eq!(b.preempted_ns, 8);
        assert_eq!(b.host_ns, 40);
        assert_eq!(b.sum(), 100);
        assert_eq!(busy[0], 40);
    }

    #[test]
    fn overlapping_steps_each_get_the_shared_time() {
        let (b, _) = sweep(&[(0, 10), (5, 20)], &[(0, 20, Bucket::Sync)], None);
        assert_eq!(b[0].sync_ns, 10);
        assert_eq!(b[1].sync_ns, 15);
    }

    fn step(i: i64, ms: i64) -> Step {
        Step {
            step: i,
            start_ns: i * 1_000_000_000,
            duration_ns: ms * 1_000_000,
            budget: StepBudget {
                host_ns: ms * 1_000_000,
                ..StepBudget::default()
            },
            gpu_busy_ns: None,
        }
    }

    #[test]
    fn every_tenth_step_slow_is_periodic_and_one_slow_step_is_not() {
        let steps: Vec<Step> = (0..40)
            .map(|i| step(i, if i % 10 == 3 { 300 } else { 100 + i % 3 }))
            .collect();
        let p = periodic(&steps, 101_000_000, 1_000_000).expect("periodic");
        assert_eq!(p.every, 10);
        assert_eq!(p.steps, vec![3, 13, 23, 33]);
        assert_eq!(p.extra_ns, 199_000_000);
        let one: Vec<Step> = (0..40)
            .map(|i| step(i, if i == 7 { 300 } else { 100 }))
            .collect();
        assert!(periodic(&one, 100_000_000, 0).is_none());
        // A missing slow step at the stride breaks the period.
        let broken: Vec<Step> = (0..40)
            .map(|i| step(i, if i % 10 == 3 && i != 23 { 300 } else { 100 }))
            .collect();
        assert!(periodic(&broken, 100_000_000, 0).is_none());
        // A checkpoint every so many seconds of steps that vary: every 9 or 10 steps.
        let timed: Vec<Step> = (0..50)
            .map(|i| {
                step(
                    i,
                    if [3, 12, 22, 31, 41].contains(&i) {
                        300
                    } else {
                        100
                    },
                )
            })
            .collect();
        let p = periodic(&timed, 100_000_000, 0).expect("about every 9-10 steps");
        assert_eq!((p.every, p.steps.len()), (9, 5));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(nearest_rank(&v, 0.5), 50);
        assert_eq!(nearest_rank(&v, 0.9), 90);
        assert_eq!(nearest_rank(&v, 0.99), 99);
        assert_eq!(nearest_rank(&[7], 0.99), 7);
        assert_eq!(nearest_rank(&[], 0.5), 0);
    }
}
