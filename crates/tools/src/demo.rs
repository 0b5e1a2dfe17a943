//! `run_demo` and `causeway demo`: writes a synthetic scenario through the collector's store
//! writer into a real DuckDB file, then runs the same statistics and engine an agent gets from
//! `get_trace_stats` and `get_causal_chains`. One function serves the tool and the command.

use causeway_hint::Hint as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use causeway_analysis::{Chain, ChainQuery, Explain, ExplainOptions, TraceStats, explain_with};
use causeway_demo::{DemoSummary, Scenario, write_scenario};
use causeway_store::Reader;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::error::ToolError;
use crate::stats::{DEFAULT_LIMIT, stats_for};

/// Arguments of `run_demo`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DemoParams {
    /// Scenario.
    #[serde(default = "default_scenario")]
    #[schemars(schema_with = "scenario_schema")]
    pub scenario: String,
    /// The scenario's healthy twin (no chain expected).
    pub healthy: Option<bool>,
}

fn default_scenario() -> String {
    Scenario::Incident.name().to_string()
}

fn scenario_schema(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
    json_schema!({"type": "string", "enum": names})
}

/// One generated and analysed scenario.
#[derive(Debug)]
pub struct DemoRun {
    /// What was generated.
    pub scenario: Scenario,
    /// The healthy baseline was generated.
    pub healthy: bool,
    /// Events and nodes written.
    pub summary: DemoSummary,
    /// Whole-trace statistics (what `get_trace_stats` returns).
    pub stats: TraceStats,
    /// The engine's report (what `get_causal_chains` and `explain` return).
    pub explain: Explain,
}

/// Result of `run_demo`.
#[derive(Debug, Serialize)]
pub struct DemoResult {
    /// Scenario name.
    pub scenario: &'static str,
    /// What the scenario simulates.
    pub description: &'static str,
    /// The healthy baseline was generated.
    pub healthy: bool,
    /// The detector expected to fire (none for healthy runs).
    pub expected_detector: Option<&'static str>,
    /// Events written.
    pub events: u64,
    /// Nodes written.
    pub nodes: usize,
    /// Whole-trace statistics.
    pub stats: TraceStats,
    /// The best chains, ranked.
    pub chains: Vec<Chain>,
    /// Chains found in all.
    pub total_chains: usize,
}

/// Parses a scenario name; the error lists the names.
pub fn scenario(name: &str) -> Result<Scenario, ToolError> {
    Scenario::parse(name).ok_or_else(|| ToolError::InvalidArgument {
        field: "/scenario".into(),
        rule: format!(
            "unknown demo scenario '{}'",
            causeway_store::sanitize::sanitize_with(name, 40)
        ),
        hint: format!("one of {}", Scenario::ALL.map(|s| s.name()).join(", ")),
    })
}

/// Writes `scenario` into a new store at `path` (replacing it when `replace`, never leaving a
/// half-written file), then computes its statistics and chains.
pub fn generate(
    path: &Path,
    scenario: Scenario,
    healthy: bool,
    replace: bool,
    opts: ExplainOptions,
) -> Result<DemoRun, ToolError> {
    let summary =
        causeway_store::write_atomically(path, replace, |t| write_scenario(t, scenario, healthy))
            .map_err(|e| {
            let hint = e
                .hint()
                .unwrap_or_else(|| "give a path in an existing, writable directory".into());
            ToolError::failed(format!("cannot write the demo trace: {e}"), hint)
        })?;
    tracing::info!(events = summary.events, nodes = summary.nodes, path = %path.display(), "demo trace written");
    let reader = Reader::open(path)?;
    let stats = stats_for(&reader, &Default::default())?;
    let explain = explain_with(&reader, &ChainQuery::default(), opts)?;
    Ok(DemoRun {
        scenario,
        healthy,
        summary,
        stats,
        explain,
    })
}

/// Demos a server runs at once: each writes and analyses a trace of its own (tens of MB and a
/// core), so a burst of them would starve every other tool call.
pub const MAX_CONCURRENT_DEMOS: usize = 2;

/// Demos running in this process.
static RUNNING_DEMOS: AtomicUsize = AtomicUsize::new(0);

/// A demo's place among the [`MAX_CONCURRENT_DEMOS`], given back when dropped.
struct DemoSlot;

impl DemoSlot {
    fn take() -> Result<DemoSlot, ToolError> {
        RUNNING_DEMOS
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_CONCURRENT_DEMOS).then_some(n + 1)
            })
            .map(|_| DemoSlot)
            .map_err(|n| {
                ToolError::failed(
                    format!("busy: {n} demos are already running"),
                    "retry in a few seconds; a demo takes a second or two",
                )
            })
    }
}

impl Drop for DemoSlot {
    fn drop(&mut self) {
        RUNNING_DEMOS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `run_demo`: generates the scenario in a private temporary directory (removed afterwards);
/// at most [`MAX_CONCURRENT_DEMOS`] at once, others are refused as busy.
pub fn run_demo(p: &DemoParams) -> Result<DemoResult, ToolError> {
    let s = scenario(&p.scenario)?;
    let _slot = DemoSlot::take()?;
    let healthy = p.healthy.unwrap_or(false);
    let dir = tempfile::Builder::new()
        .prefix("causeway-demo-")
        .tempdir()
        .map_err(|e| {
            ToolError::failed(
                format!("cannot create a temporary directory for the demo trace: {e}"),
                "set TMPDIR to a writable directory with some free space",
            )
        })?;
    let run = generate(
        &dir.path().join(format!("{}.duckdb", s.name())),
        s,
        healthy,
        false,
        ExplainOptions::default(),
    )?;
    let total_chains = run.explain.chains.len();
    Ok(DemoResult {
        scenario: s.name(),
        description: s.description(),
        healthy,
        expected_detector: if healthy { None } else { s.expected_detector() },
        events: run.summary.events,
        nodes: run.summary.nodes,
        stats: run.stats,
        chains: run
            .explain
            .chains
            .into_iter()
            .take(DEFAULT_LIMIT)
            .map(causeway_analysis::Chain::sanitized)
            .collect(),
        total_chains,
    })
}
