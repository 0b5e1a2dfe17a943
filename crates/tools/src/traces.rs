//! `list_traces` and `describe_trace` (CLI `causeway traces` / `causeway describe`): which
//! traces this server can open, and for one its time span, nodes, processes, event counts per
//! source and drops.

use std::collections::BTreeMap;

use causeway_store::duckdb::params;
use causeway_store::sanitize::sanitize_with;
use causeway_store::{Reader, StoreError};
use schemars::JsonSchema;
use serde::Serialize;

use crate::context::{Context, TraceEntry};
use crate::error::ToolError;
use crate::params::{DescribeParams, ListTracesParams, page, parse_cursor};

/// Traces per `list_traces` page.
pub const TRACES_PAGE: usize = 50;
/// Processes listed by `describe_trace` (busiest first).
pub const PROCESSES_SHOWN: usize = 15;

/// Output of `list_traces`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TracesResult {
    /// Traces, the default first.
    pub traces: Vec<TraceEntry>,
    /// Pass as cursor for more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `list_traces`.
pub fn list_traces(ctx: &Context, p: &ListTracesParams) -> Result<TracesResult, ToolError> {
    let (traces, next_cursor) = page(ctx.traces(), parse_cursor(&p.cursor)?, TRACES_PAGE);
    Ok(TracesResult {
        traces,
        next_cursor,
    })
}

/// Output of `describe_trace`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TraceDescription {
    /// Trace name.
    pub name: String,
    /// Events stored.
    pub events: u64,
    /// First event (ns epoch); without events, first counter window.
    pub first_ns: i64,
    /// Last event, or counter window end.
    pub last_ns: i64,
    /// Nodes (machines) with their origin.
    pub nodes: Vec<NodeOut>,
    /// Events per source (CUDA, HOST, ...).
    pub sources: BTreeMap<String, u64>,
    /// Busiest processes (data from the traced machine).
    pub processes: Vec<ProcessOut>,
    /// Processes in all.
    pub processes_total: u64,
    /// Lost events by kind, plus total.
    pub drops: BTreeMap<String, u64>,
    /// Stored causal chains.
    pub chains: u64,
    /// Distinct call stacks.
    pub stacks: u64,
    /// Recording sessions.
    pub sessions: u64,
}

/// One node.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct NodeOut {
    /// Node name.
    pub node: String,
    /// recorded, imported:FILE or merged:FILE.
    pub origin: String,
}

/// One process.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ProcessOut {
    /// Node.
    pub node: String,
    /// Process id.
    pub pid: u32,
    /// Name.
    pub comm: String,
    /// Events of the process.
    pub events: u64,
}

// These read the physical `event_rows` and name nodes, comms and ops after grouping: through the
// `event_data` view every one of 10M rows was joined first, several times slower.
const SUMMARY_SQL: &str = "SELECT count(*)::BIGINT,
  coalesce(min(timestamp), (SELECT min(window_start_ns) FROM op_counts), 0),
  coalesce(max(timestamp), (SELECT max(window_end_ns) FROM op_counts), 0),
  (SELECT count(*) FROM chains)::BIGINT, (SELECT count(DISTINCT stack_hash) FROM stack_frames)::BIGINT,
  (SELECT count(*) FROM sessions)::BIGINT, (SELECT count(*) FROM processes)::BIGINT
FROM event_rows";
const NODES_SQL: &str = "SELECT node, origin FROM nodes ORDER BY node";
const SOURCES_SQL: &str = "
SELECT o.source, sum(e.n)::BIGINT
FROM (SELECT op_id, count(*) AS n FROM event_rows GROUP BY op_id) e JOIN ops o ON o.op_id = e.op_id
GROUP BY 1 ORDER BY 1";
const PROCS_SQL: &str = "
WITH g AS (SELECT node_id, pid, count(*)::BIGINT AS n, any_value(comm_id) AS comm_id
           FROM event_rows GROUP BY ALL),
     e AS (SELECT n.node, g.pid, g.n, c.comm AS c
           FROM g JOIN nodes n ON n.node_id = g.node_id JOIN comms c ON c.comm_id = g.comm_id)
SELECT e.node, e.pid, coalesce(nullif(p.comm, ''), e.c, ''), e.n
FROM e LEFT JOIN processes p ON p.node = e.node AND p.pid = e.pid
ORDER BY e.n DESC, e.node, e.pid LIMIT ?";
const DROPS_SQL: &str = "SELECT kind, (CASE WHEN sum(count) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(count) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(count) END)::BIGINT FROM drops GROUP BY kind ORDER BY kind";

/// Describes one open trace: the function `causeway describe` and `describe_trace` share.
pub fn describe_for(reader: &Reader, name: &str) -> Result<TraceDescription, ToolError> {
    let path = reader.path().to_path_buf();
    let duck = |action: &'static str| {
        let path = path.clone();
        move |source| {
            ToolError::from(StoreError::Duck {
                path: path.clone(),
                action,
                source,
            })
        }
    };
    let (events, first_ns, last_ns, chains, stacks, sessions, procs): (
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
    ) = reader
        .prepare_trusted(SUMMARY_SQL)?
        .query_row([], causeway_store::row)
        .map_err(duck("summarising the trace"))?;
    let nodes: Vec<NodeOut> = reader
        .prepare_trusted(NODES_SQL)?
        .query_map([], |r| {
            Ok(NodeOut {
                node: sanitize_with(&r.get::<_, String>(0)?, 120),
                origin: sanitize_with(&r.get::<_, String>(1)?, 200),
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(duck("listing nodes"))?;
    let counts =
        |sql: &'static str, action: &'static str| -> Result<BTreeMap<String, u64>, ToolError> {
            reader
                .prepare_trusted(sql)?
                .query_map([], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
                })
                .and_then(|rows| rows.collect())
                .map_err(duck(action))
        };
    let sources = counts(SOURCES_SQL, "counting events per source")?;
    let mut drops = counts(DROPS_SQL, "reading drop counters")?;
    let total: u64 = drops.values().sum();
    drops.insert("total".into(), total);
    let processes: Vec<ProcessOut> = reader
        .prepare_trusted(PROCS_SQL)?
        .query_map(params![PROCESSES_SHOWN as i64], |r| {
            Ok(ProcessOut {
                node: sanitize_with(&r.get::<_, String>(0)?, 120),
                pid: r.get(1)?,
                comm: sanitize_with(&r.get::<_, String>(2)?, 64),
                events: r.get::<_, i64>(3)?.max(0) as u64,
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(duck("listing processes"))?;
    Ok(TraceDescription {
        name: name.to_string(),
        events: events.max(0) as u64,
        first_ns,
        last_ns,
        nodes,
        sources,
        processes_total: (procs.max(0) as u64).max(processes.len() as u64),
        processes,
        drops,
        chains: chains.max(0) as u64,
        stacks: stacks.max(0) as u64,
        sessions: sessions.max(0) as u64,
    })
}

/// `describe_trace`.
pub fn describe_trace(ctx: &Context, p: &DescribeParams) -> Result<TraceDescription, ToolError> {
    let path = ctx.resolve(p.trace.as_deref())?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    ctx.with_reader(p.trace.as_deref(), |r| describe_for(r, &name))
}
