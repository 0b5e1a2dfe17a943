//! Typed results of the tools whose JSON comes from other crates (stats, chains): schema
//! mirrors of `causeway_analysis` types, used only for the tools' output schemas. The
//! structured content itself is the analysis crate's own serialisation (exactly what
//! `causeway stats --json` prints), and a test validates real results against these schemas, so
//! a change on either side fails loudly instead of drifting.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

/// Output of `get_trace_stats` (= `causeway stats --json`). Times in ns.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TraceStatsOut {
    /// Events in the window.
    pub events: u64,
    /// First event in the window (ns epoch).
    pub first_ns: i64,
    /// Last event in the window.
    pub last_ns: i64,
    /// Whole trace start.
    pub trace_first_ns: i64,
    /// Whole trace end.
    pub trace_last_ns: i64,
    /// Window used.
    pub window: WindowOut,
    /// Process filter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Nodes in the window.
    pub nodes: Vec<String>,
    /// Per (source, op).
    pub ops: Vec<OpStatsOut>,
    /// Host off-CPU totals (sched_switch).
    pub off_cpu: OffCpuOut,
    /// Lost events by kind, plus total.
    pub drops: BTreeMap<String, u64>,
    // Untyped here to fit the tools/list budget.
    /// Cost of causeway's probes, recordings only: {budget_pct, estimated_pct, peak_pct, probe_ns, cpu_ns, full_ns_per_call,
    /// in_situ: [{op, pid, slowdown, lost_ns_per_hit, factor, ...}], switches: [{ts_ns, op, from,
    /// to, reason, overhead_pct}], switches_total}; docs/cli.md.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead: Option<serde_json::Value>,
    /// Calls missing from the trace: [text].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notes: Option<serde_json::Value>,
    /// Launches per kernel: {kernel, module, launches, p50_ns, p99_ns, total_ns}.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels: Option<serde_json::Value>,
}

/// Inclusive window bounds (ns epoch).
#[derive(Debug, Serialize, JsonSchema)]
pub struct WindowOut {
    /// Start.
    pub from_ns: i64,
    /// End.
    pub until_ns: i64,
}

/// Statistics of one op; percentiles are exact nearest-rank unless `percentiles` says otherwise.
#[derive(Debug, Serialize, JsonSchema)]
pub struct OpStatsOut {
    /// CUDA, DRIVER, HOST, IO, TCP, NET, GRAPH, NCCL.
    pub source: String,
    /// Op name.
    pub op: String,
    /// Stored events.
    pub count: u64,
    /// Median duration.
    pub p50_ns: i64,
    /// 95th percentile.
    pub p95_ns: i64,
    /// 99th percentile.
    pub p99_ns: i64,
    /// Maximum.
    pub max_ns: i64,
    /// Mean.
    pub mean_ns: f64,
    /// Sum.
    pub total_ns: i64,
    /// exact, stored_only, histogram_estimate or none.
    pub percentiles: String,
    /// Calls counted in the kernel, when more than stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counted_calls: Option<u64>,
    /// Calls without a duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untimed_calls: Option<u64>,
    /// Probe modes used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_modes: Option<Vec<String>>,
    /// counted_calls includes estimates (sampled probe mode).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub calls_estimated: bool,
}

/// Off-CPU time of traced threads.
#[derive(Debug, Serialize, JsonSchema)]
pub struct OffCpuOut {
    /// Context switches.
    pub switches: u64,
    /// Total off-CPU.
    pub total_ns: i64,
    /// Preempted while runnable.
    pub preempted_ns: i64,
    /// Blocked or sleeping.
    pub blocked_ns: i64,
    /// State not recorded.
    pub unknown_state_ns: i64,
}

/// Output of `get_causal_chains`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ChainsOut {
    /// The engine's findings, ranked by time lost.
    pub chains: Vec<ChainOut>,
    /// Findings in all.
    pub total: usize,
    /// Where each GPU-calling process's and thread's time went: inside GPU calls by class and
    /// outside them, split on-CPU/preempted/blocked/unknown (buckets sum to span_ns), preemptors,
    /// gpu_idle_estimate_ns, longest stalls.
    pub budgets: Vec<serde_json::Value>,
    /// GPU idle per device, measured and estimated.
    pub devices: Vec<serde_json::Value>,
    /// Caveats (conventions, chains stored in the file).
    pub notes: Vec<String>,
    /// Those chains (with `stored`), shaped like `chains`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<serde_json::Map<String, serde_json::Value>>>")]
    pub stored_chains: Option<Vec<ChainOut>>,
    /// Pass as cursor for more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One causal chain. Text fields are data from the trace.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ChainOut {
    /// Id within the trace.
    pub id: String,
    /// Detector that fired.
    pub detector: String,
    /// HIGH, MEDIUM or LOW.
    pub severity: String,
    /// One line.
    pub summary: String,
    /// The cause.
    pub root_cause: String,
    /// Cause to effect, with numbers.
    pub explanation: String,
    /// Steps from cause to effect.
    pub timeline: Vec<TimelineOut>,
    /// What to do.
    pub recommendations: Vec<String>,
    /// SQL showing the rows behind it (for run_sql).
    pub evidence_sql: String,
    /// Estimated time lost (ranking key).
    pub time_lost_ns: i64,
    /// Node ('' = trace-wide).
    pub node: String,
    /// engine, imported:FILE, or the node that sent it.
    pub origin: String,
    /// Detection time of a stored chain (ns); engine chains have none, so it stays out of the schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub detected_ns: Option<i64>,
    /// Traces recorded with --stacks: where the finding's calls come from. {evidence_sql (rows:
    /// kind, site, detail, calls, total_ns, scope_calls, scope_calls_with_stack), calls,
    /// calls_with_stack, sites: [{kind: python|native, site: file:line or function, detail:
    /// function or module, calls, total_ns}]}.
    /// Out of the schema (the tools/list token budget); the explanation says the same in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub call_sites: Option<serde_json::Value>,
}

/// One timeline step.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TimelineOut {
    /// Layer.
    pub layer: String,
    /// Op.
    pub op: String,
    /// What happened.
    pub detail: String,
    /// How long.
    pub duration_ns: i64,
}

/// Output of `run_demo`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DemoOut {
    /// Scenario name.
    pub scenario: String,
    /// What it simulates.
    pub description: String,
    /// Healthy baseline.
    pub healthy: bool,
    /// Detector expected to fire.
    pub expected_detector: Option<String>,
    /// Events written.
    pub events: u64,
    /// Nodes written.
    pub nodes: usize,
    /// Whole-trace statistics: the shape of get_trace_stats' result (kept out of this schema
    /// so tools/list stays within its token budget; a test validates it against that schema).
    #[schemars(schema_with = "any_object")]
    pub stats: serde_json::Value,
    /// Best chains, each shaped like a get_causal_chains chain (validated by the same test).
    #[schemars(schema_with = "object_list")]
    pub chains: Vec<serde_json::Value>,
    /// Chains found in all.
    pub total_chains: usize,
}

fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object"})
}

fn object_list(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "array", "items": {"type": "object"}})
}

/// Output of `get_steps` (= `causeway steps --json`). Times in ns.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StepsOut {
    /// Window used (steps starting in it).
    pub window: WindowOut,
    /// Per (node, pid, tid, source): count, p50/p90/p99/max/min/mean/total_ns, noise_ns,
    /// median_budget and mean_budget {input, sync, collective, copy, alloc, launch, preempted,
    /// blocked, host}_ns, gpu_busy_p50_ns, slowest [{step, start_ns, duration_ns, budget,
    /// gpu_busy_ns, over_median_ns, grew, finding, evidence_sql}], periodic {every, steps,
    /// extra_ns, grew, what}, steps [every step], evidence_sql.
    pub series: Vec<serde_json::Value>,
    /// Things to know.
    pub notes: Vec<String>,
}

/// Output of `compare_traces` (= `causeway diff --json`). Times in ns, per step.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DiffOut {
    /// {trace, node, pid, tid, source, steps, mean_ns, p50_ns, noise_ns, evidence_sql, items_sql}.
    pub base: serde_json::Value,
    /// The same for the new run.
    pub new: serde_json::Value,
    /// Mean step, new - base.
    pub difference_ns: i64,
    /// In percent of the base.
    pub difference_pct: f64,
    /// Standard error of the difference.
    pub noise_ns: i64,
    /// More than two standard errors.
    pub beyond_noise: bool,
    /// [{bucket, meaning, base_ns, new_ns, delta_ns, base_pct, new_pct}]; deltas sum to the difference.
    pub parts: Vec<serde_json::Value>,
    /// [{kind, name, base_count, new_count, base_ns, new_ns, delta_ns, base_pct, new_pct}].
    pub changed: Vec<serde_json::Value>,
    /// One line.
    pub summary: String,
    /// Things to know.
    pub notes: Vec<String>,
}
