//! What a report shows, gathered from the functions the other surfaces call: findings and
//! budgets from `findings_for` (explain, get_causal_chains), statistics from `stats_for`
//! (stats, get_trace_stats), stacks from `stacks_for`, facts from `describe_for`, evidence
//! rows through the guarded query path; plus the timeline and histograms of `series`.

use std::time::{Duration, Instant};

use causeway_analysis::cost::Prices;
use causeway_analysis::{
    Budget, Chain, ChainQuery, FindingsQuery, ProcessStats, StatsQuery, TraceStats, Window,
};
use causeway_store::{QueryLimits, Reader};
use causeway_tools::params::{StacksParams, WindowParams};
use causeway_tools::stacks::StacksResult;
use causeway_tools::traces::TraceDescription;
use serde::Serialize;

use crate::error::ReportError;
use crate::series::{self, Histogram, Mark, Timeline};

/// Evidence rows shown per finding.
pub const EVIDENCE_ROWS: u64 = 10;

/// Top stacks shown.
pub const TOP_STACKS: u32 = 10;

/// Time all evidence queries of one report may take together, at least: the findings come
/// worst first, so the worst get their rows; a query that needs longer (a self-join over
/// millions of events) is cut off and shown as such, and the rest are not run. A trace whose
/// findings took longer to compute gives its evidence as long again (see [`evidence_budget`]).
pub const EVIDENCE_BUDGET: Duration = Duration::from_secs(1);

/// The evidence budget of a report whose findings and statistics took `analysis`: a large
/// trace's evidence queries scan as many rows as its findings did, and a page without the rows
/// its findings cite is worth less than one that takes twice as long.
pub fn evidence_budget(analysis: Duration) -> Duration {
    EVIDENCE_BUDGET.max(analysis)
}

/// Slowest steps whose budgets are shown side by side.
pub const SLOWEST_STEPS: u32 = 5;

/// Nodes given their own row in the per-node view.
pub const MAX_NODES: usize = 32;

/// Everything one page shows (serialised into the page, and served as JSON to the live page).
#[derive(Debug, Clone, Serialize)]
pub struct ReportData {
    /// causeway version that built it.
    pub version: &'static str,
    /// When it was built, or last found current by the live page's cache (ns since the epoch).
    pub generated_ns: i64,
    /// The trace's name (its file name).
    pub trace: String,
    /// The window and filters asked for.
    pub query: WindowParams,
    /// The window analysed.
    pub window: Window,
    /// Ranked findings, worst first: `explain`'s order.
    pub findings: Vec<Chain>,
    /// The rows behind each finding (its evidence SQL, run through the guard).
    pub evidence: Vec<Evidence>,
    /// What each finding costs, in the words `explain` prints ("" where it has no cost).
    pub costs: Vec<String>,
    /// What each finding costs per training step, in the words `explain` prints ("" where the
    /// process recorded no steps).
    pub per_steps: Vec<String>,
    /// Time budgets of every GPU-feeding process and thread.
    pub budgets: Vec<Budget>,
    /// GPU time per device: measured on the device timeline where the trace has one, beside
    /// the host-side estimate.
    pub devices: Vec<causeway_analysis::device::DeviceTime>,
    /// Training steps (`steps`, get_steps): step time over the run, the slowest steps' budgets.
    pub steps: causeway_analysis::steps::Steps,
    /// The engine's caveats.
    pub notes: Vec<String>,
    /// Per-process p50/p99 of GPU ops with imbalance warnings (straggler comparison).
    pub per_process: Vec<ProcessStats>,
    /// `stats`: per-op counts and percentiles, off-CPU, drops, overhead, top kernels.
    pub stats: TraceStats,
    /// Activity over the window, with findings and stalls marked.
    pub timeline: Timeline,
    /// Latency distributions per op.
    pub histograms: Vec<Histogram>,
    /// Ops with durations left out of `histograms` (the cap).
    pub histograms_left_out: usize,
    /// Top stacks by total time.
    pub stacks: StacksResult,
    /// Nodes, processes, sources, drops and sessions of the trace.
    pub facts: TraceDescription,
    /// One row per node, when the window has several.
    pub nodes: Vec<NodeRow>,
    /// Milliseconds spent building this.
    pub build_ms: f64,
}

/// The rows behind one finding.
#[derive(Debug, Clone, Serialize)]
pub struct Evidence {
    /// The chain's id.
    pub chain_id: String,
    /// Column names.
    pub columns: Vec<String>,
    /// The first rows.
    pub rows: Vec<Vec<serde_json::Value>>,
    /// More rows exist than are shown.
    pub truncated: bool,
    /// Why the query could not run, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One node's totals in the window (per-node view and straggler comparison).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NodeRow {
    /// Node name.
    pub node: String,
    /// Events stored.
    pub events: u64,
    /// GPU-library calls stored.
    pub gpu_calls: u64,
    /// Time inside GPU-library calls (ns).
    pub gpu_ns: i64,
    /// Time in synchronisation calls (ns).
    pub sync_ns: i64,
    /// Off-CPU time of traced threads (ns).
    pub off_cpu_ns: i64,
    /// Events lost.
    pub drops: u64,
    /// Findings about this node.
    pub findings: usize,
}

fn gpu_totals(s: &TraceStats) -> (u64, i64, i64) {
    s.ops
        .iter()
        .filter(|o| causeway_analysis::opsets::is_gpu_source(&o.source))
        .fold((0, 0, 0), |(n, t, sync), o| {
            let is_sync = causeway_analysis::opsets::is_sync(&o.op);
            (
                n + o.count,
                t.saturating_add(o.total_ns),
                sync.saturating_add(if is_sync { o.total_ns } else { 0 }),
            )
        })
}

/// Runs a finding's evidence SQL through sqlguard and the read-only connection, as `query`
/// would, within what is left of the report's evidence `budget` by `deadline`; a refusal,
/// failure or lack of time is shown with the finding instead of failing the report.
fn evidence(r: &Reader, c: &Chain, budget: Duration, deadline: Instant) -> Evidence {
    let mut e = Evidence {
        chain_id: c.id.clone(),
        columns: Vec::new(),
        rows: Vec::new(),
        truncated: false,
        error: None,
    };
    if c.evidence_sql.trim().is_empty() {
        return e;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_millis(20) {
        e.error = Some(format!(
            "not run: the report's {} ms for evidence went to the findings above; run the SQL with causeway query",
            budget.as_millis()
        ));
        return e;
    }
    let limits = QueryLimits {
        timeout: left,
        max_bytes: 64 * 1024,
        max_rss_bytes: None,
    };
    match causeway_tools::sql::query_for(r, &c.evidence_sql, Some(EVIDENCE_ROWS), &limits) {
        Ok(q) => {
            e.columns = q.columns.into_iter().map(|c| c.name).collect();
            e.rows = q.rows;
            e.truncated = q.truncated || e.rows.len() as u64 >= EVIDENCE_ROWS;
        }
        Err(err) => e.error = Some(err.message()),
    }
    e
}

/// Where a finding shows on the timeline: the first evidence row's `timestamp`, if any.
fn finding_mark(c: &Chain, e: &Evidence, start_ns: i64) -> Option<Mark> {
    let col = e.columns.iter().position(|c| c == "timestamp")?;
    let ts = e.rows.iter().filter_map(|r| r.get(col)?.as_i64()).min()?;
    Some(Mark {
        t: ts.saturating_sub(start_ns) as f64 / 1e9,
        kind: "finding",
        id: c.id.clone(),
        label: format!("{} {}", c.severity.as_str(), c.detector),
    })
}

/// The file name shown as the trace's name.
fn trace_name(r: &Reader) -> String {
    r.path()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| r.path().display().to_string())
}

/// Builds the report of `q` (window, pid, node) on one trace, its findings priced at `prices`.
pub fn build(r: &Reader, q: &WindowParams, prices: &Prices) -> Result<ReportData, ReportError> {
    let started = Instant::now();
    let spec = q.spec()?;
    let findings = causeway_tools::stats::findings_for(
        r,
        &FindingsQuery {
            chains: ChainQuery {
                window: spec,
                pid: q.pid,
                node: q.node.clone(),
                top_n: None,
                prices: prices.clone(),
            },
            stored: false,
            per_process: true,
        },
    )?;
    let stats_q = StatsQuery {
        pid: q.pid,
        node: q.node.clone(),
        window: spec,
    };
    let stats = causeway_tools::stats::stats_for(r, &stats_q)?;
    let chains = findings.explain.chains;
    let budget = evidence_budget(started.elapsed());
    let deadline = Instant::now() + budget;
    let evidence: Vec<Evidence> = chains
        .iter()
        .map(|c| evidence(r, c, budget, deadline))
        .collect();

    let mut timeline =
        series::timeline(r, &stats, q.pid, q.node.as_deref()).map_err(ReportError::read)?;
    for (c, e) in chains.iter().zip(&evidence) {
        timeline.marks.extend(finding_mark(c, e, timeline.start_ns));
    }
    for b in findings.explain.budgets.iter().filter(|b| b.tid.is_some()) {
        for s in &b.stalls {
            timeline.marks.push(Mark {
                t: s.start_ns.saturating_sub(timeline.start_ns) as f64 / 1e9,
                kind: "stall",
                id: format!("{}/{}", b.pid, b.tid.unwrap_or(0)),
                label: format!("stall {} ms", s.duration_ns / 1_000_000),
            });
        }
    }
    let (histograms, histograms_left_out) =
        series::histograms(r, &stats, q.pid, q.node.as_deref()).map_err(ReportError::read)?;
    let stacks = causeway_tools::stacks::stacks_for(
        r,
        &StacksParams {
            window: q.clone(),
            limit: Some(TOP_STACKS),
            ..StacksParams::default()
        },
    )?;
    let name = trace_name(r);
    let facts = causeway_tools::traces::describe_for(r, &name)?;
    // The steps get_steps gives, less the explain run over each slowest step (one analysis
    // each, too slow for a page that refreshes).
    let steps = causeway_analysis::steps::steps(
        r,
        &causeway_analysis::steps::StepQuery {
            window: spec,
            pid: q.pid,
            node: q.node.clone(),
            slowest: SLOWEST_STEPS as usize,
            explain_slowest: false,
        },
    )
    .map_err(ReportError::read)?;

    let mut nodes = Vec::new();
    if stats.nodes.len() > 1 {
        for node in stats.nodes.iter().take(MAX_NODES) {
            let s = causeway_tools::stats::stats_for(
                r,
                &StatsQuery {
                    node: Some(node.clone()),
                    ..stats_q.clone()
                },
            )?;
            let (gpu_calls, gpu_ns, sync_ns) = gpu_totals(&s);
            nodes.push(NodeRow {
                node: node.clone(),
                events: s.events,
                gpu_calls,
                gpu_ns,
                sync_ns,
                off_cpu_ns: s.off_cpu.total_ns,
                drops: s.drops.get("total").copied().unwrap_or(0),
                findings: chains.iter().filter(|c| &c.node == node).count(),
            });
        }
    }
    Ok(ReportData {
        version: env!("CARGO_PKG_VERSION"),
        generated_ns: causeway_store::now_ns(),
        trace: name,
        query: q.clone(),
        // stats' window: for a store of counters only (collect) it spans the counters.
        window: stats.window,
        costs: chains
            .iter()
            .map(|c| {
                c.cost
                    .as_ref()
                    .map_or(String::new(), causeway_analysis::cost::line)
            })
            .collect(),
        per_steps: chains
            .iter()
            .map(|c| {
                c.per_step
                    .as_ref()
                    .map_or(String::new(), causeway_analysis::step_cost::line)
            })
            .collect(),
        findings: chains,
        evidence,
        budgets: findings.explain.budgets,
        devices: findings.explain.devices,
        steps,
        notes: findings.explain.notes,
        per_process: findings.explain.per_process.unwrap_or_default(),
        stats,
        timeline,
        histograms,
        histograms_left_out,
        stacks,
        facts,
        nodes,
        build_ms: started.elapsed().as_secs_f64() * 1e3,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_demo::{Scenario, write_scenario};

    #[test]
    fn evidence_runs_within_the_budget_and_past_it_says_why_it_did_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpu.duckdb");
        write_scenario(&path, Scenario::CpuContention, false).unwrap();
        let r = Reader::open(&path).unwrap();
        let d = build(&r, &WindowParams::default(), &Default::default()).unwrap();
        let c = d
            .findings
            .iter()
            .find(|c| c.detector == "cpu_contention")
            .expect("the scenario's finding");
        let ran = evidence(&r, c, EVIDENCE_BUDGET, Instant::now() + EVIDENCE_BUDGET);
        assert!(ran.error.is_none() && !ran.rows.is_empty(), "{ran:?}");
        let spent = evidence(&r, c, EVIDENCE_BUDGET, Instant::now());
        assert!(spent.rows.is_empty(), "{spent:?}");
        assert!(
            spent
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with("not run")),
            "{spent:?}"
        );
    }

    #[test]
    fn a_trace_slow_to_analyse_gets_as_long_for_its_evidence() {
        assert_eq!(evidence_budget(Duration::from_millis(30)), EVIDENCE_BUDGET);
        assert_eq!(
            evidence_budget(Duration::from_millis(2_700)),
            Duration::from_millis(2_700)
        );
    }
}
