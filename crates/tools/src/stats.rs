//! `get_trace_stats` and `get_causal_chains`: the handlers behind `causeway stats` and the
//! chains an agent reads first, over the analysis crate.

use causeway_analysis::{
    Chain, ChainQuery, Findings, FindingsQuery, StatsQuery, TraceStats, trace_stats,
};
use causeway_store::Reader;
use serde::Serialize;

use crate::context::Context;
use crate::error::ToolError;
use crate::params::{ChainsParams, StatsParams, page, parse_cursor};

/// Default and largest page of chains.
pub const DEFAULT_LIMIT: usize = 5;

/// The analysis query of `get_trace_stats` arguments.
pub fn stats_query(p: &StatsParams) -> Result<StatsQuery, ToolError> {
    Ok(StatsQuery {
        pid: p.window.pid,
        node: p.window.node.clone(),
        window: p.window.spec()?,
    })
}

/// Statistics of one trace: the function `causeway stats` and `get_trace_stats` share.
pub fn stats_for(reader: &Reader, q: &StatsQuery) -> Result<TraceStats, ToolError> {
    Ok(trace_stats(reader, q)?)
}

/// `get_trace_stats`.
pub fn get_trace_stats(ctx: &Context, p: &StatsParams) -> Result<TraceStats, ToolError> {
    let q = stats_query(p)?;
    ctx.with_reader(p.trace.as_deref(), |r| stats_for(r, &q))
}

/// Result of `get_causal_chains`: a page of the findings `causeway explain` prints.
#[derive(Debug, Clone, Serialize)]
pub struct ChainsResult {
    /// This page of the engine's findings, best first.
    pub chains: Vec<Chain>,
    /// Findings in all.
    pub total: usize,
    /// Where the time of each GPU-calling process and thread went.
    pub budgets: Vec<causeway_analysis::Budget>,
    /// GPU time per device with a device timeline: measured, beside the host-side estimate.
    pub devices: Vec<causeway_analysis::device::DeviceTime>,
    /// Caveats.
    pub notes: Vec<String>,
    /// Those chains, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored_chains: Option<Vec<Chain>>,
    /// Cursor of the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The findings of a trace: the function `causeway explain`, `get_causal_chains`, the
/// exports and fleet chains share.
pub fn findings_for(reader: &Reader, q: &FindingsQuery) -> Result<Findings, ToolError> {
    Ok(causeway_analysis::findings(reader, q)?)
}

/// `get_causal_chains`.
pub fn get_causal_chains(ctx: &Context, p: &ChainsParams) -> Result<ChainsResult, ToolError> {
    let q = FindingsQuery {
        chains: ChainQuery {
            window: p.window.spec()?,
            pid: p.window.pid,
            node: p.window.node.clone(),
            top_n: None,
            prices: ctx.prices().clone(),
        },
        stored: p.stored.unwrap_or(false),
        per_process: false,
    };
    let offset = parse_cursor(&p.cursor)?;
    let size = p.limit.map_or(DEFAULT_LIMIT, |n| n as usize);
    let f = ctx.with_reader(p.trace.as_deref(), |r| findings_for(r, &q))?;
    let total = f.explain.chains.len();
    let (chains, next_cursor) = page(f.explain.chains, offset, size);
    Ok(ChainsResult {
        chains,
        total,
        budgets: f.explain.budgets,
        // Without a device timeline the host-side estimate is the budget's gpu_idle_estimate_ns
        // already: an agent's context is the scarce resource.
        devices: f
            .explain
            .devices
            .into_iter()
            .filter(|d| d.device.is_some())
            .collect(),
        notes: f.explain.notes,
        stored_chains: f.stored_chains.map(|mut v| {
            v.truncate(size);
            v
        }),
        next_cursor,
    })
}
