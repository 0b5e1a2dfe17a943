//! `get_trace_stats` and `get_causal_chains`: the handlers behind `causeway stats` and the
//! chains an agent reads first, over the analysis crate.

use causeway_analysis::{Chain, ChainQuery, StatsQuery, TraceStats, trace_stats};
use causeway_store::Reader;
use causeway_store::sanitize::sanitize_with;
use serde::Serialize;

use crate::context::Context;
use crate::error::ToolError;
use crate::params::{ChainsParams, StatsParams, page, parse_cursor, window};

/// Default and largest page of chains.
pub const DEFAULT_TOP_N: usize = 5;

/// The analysis query of `get_trace_stats` arguments.
pub fn stats_query(p: &StatsParams) -> Result<StatsQuery, ToolError> {
    Ok(StatsQuery {
        pid: p.pid,
        node: p.node.clone(),
        window: window(&p.since, &p.from, &p.until)?,
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

/// Result of `get_causal_chains`.
#[derive(Debug, Clone, Serialize)]
pub struct ChainsResult {
    /// This page of chains, best first.
    pub chains: Vec<Chain>,
    /// All chains found.
    pub total: usize,
    /// `engine` or `stored`.
    pub origin: &'static str,
    /// Cursor of the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Every chain of a trace, ranked, for `get_causal_chains`: the stored chains of an imported
/// trace, else the analysis engine's (the same engine `causeway explain` runs).
pub fn chains_for(
    reader: &Reader,
    q: &ChainQuery,
) -> Result<(Vec<Chain>, &'static str), ToolError> {
    let all = ChainQuery {
        top_n: None,
        ..q.clone()
    };
    // Chains recorded in the file (imported reference traces) are returned as stored; traces
    // without any (recordings, demos) get the analysis engine's.
    let stored = causeway_analysis::stored_chains(reader, &all)?;
    if !stored.is_empty() {
        return Ok((stored.into_iter().map(sanitize_chain).collect(), "stored"));
    }
    let found = causeway_analysis::explain(reader, &all)?;
    Ok((
        found.chains.into_iter().map(sanitize_chain).collect(),
        "engine",
    ))
}

/// `get_causal_chains`.
pub fn get_causal_chains(ctx: &Context, p: &ChainsParams) -> Result<ChainsResult, ToolError> {
    let q = ChainQuery {
        window: window(&p.since, &p.from, &p.until)?,
        pid: p.pid,
        node: p.node.clone(),
        top_n: None,
    };
    let offset = parse_cursor(&p.cursor)?;
    let size = p.top_n.map_or(DEFAULT_TOP_N, |n| n as usize);
    let (chains, origin) = ctx.with_reader(p.trace.as_deref(), |r| chains_for(r, &q))?;
    let total = chains.len();
    let (chains, next_cursor) = page(chains, offset, size);
    Ok(ChainsResult {
        chains,
        total,
        origin,
        next_cursor,
    })
}

/// Chain text can come from an imported file: strip control/bidi characters and cap lengths.
pub(crate) fn sanitize_chain(mut c: Chain) -> Chain {
    let s = |t: &str, n: usize| sanitize_with(t, n);
    c.id = s(&c.id, 80);
    c.detector = s(&c.detector, 80);
    c.summary = s(&c.summary, 400);
    c.root_cause = s(&c.root_cause, 600);
    c.explanation = s(&c.explanation, 2000);
    c.evidence_sql = s(&c.evidence_sql, 2000);
    c.node = s(&c.node, 120);
    c.origin = s(&c.origin, 200);
    c.recommendations = c
        .recommendations
        .iter()
        .take(8)
        .map(|r| s(r, 400))
        .collect();
    c.timeline.truncate(12);
    for t in &mut c.timeline {
        t.layer = s(&t.layer, 40);
        t.op = s(&t.op, 80);
        t.detail = s(&t.detail, 300);
    }
    c
}
