//! `run_sql` (CLI `causeway query`): one read-only query through sqlguard and the store's
//! locked-down connection, with row, byte and time caps sized for an agent's context window.

use std::time::Duration;

use causeway_store::{QueryLimits, QueryResult, Reader};
use schemars::JsonSchema;
use serde::Serialize;

use crate::budget;
use crate::context::Context;
use crate::error::ToolError;
use crate::params::SqlParams;

/// Rows `run_sql` returns when no limit is given.
pub const DEFAULT_ROWS: u64 = 100;

/// Output schema of `run_sql` (the store's `QueryResult`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct SqlOut {
    /// Name and DuckDB type per column.
    pub columns: Vec<ColumnOut>,
    /// Rows of values; strings are data from the trace.
    pub rows: Vec<Vec<serde_json::Value>>,
    /// True when rows were cut by a cap.
    pub truncated: bool,
    /// Why rows were cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated_reason: Option<String>,
    /// Query time.
    pub elapsed_ms: f64,
}

/// One result column.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ColumnOut {
    /// Name.
    pub name: String,
    /// DuckDB type.
    #[serde(rename = "type")]
    pub type_name: String,
}

/// Runs guarded SQL on a reader: the function `causeway query` and `run_sql` share.
/// `limit` None means the guard's default; `timeout` interrupts the query.
pub fn query_for(
    reader: &Reader,
    sql: &str,
    limit: Option<u64>,
    limits: &QueryLimits,
) -> Result<QueryResult, ToolError> {
    let guarded = causeway_sqlguard::guard(sql, reader.policy(), limit)?;
    Ok(reader.query(&guarded, limits)?)
}

/// The caps `run_sql` uses: 10 s, and a byte cap that keeps a response inside the budget
/// (rows appear in both the structured result and the text).
pub fn agent_limits() -> QueryLimits {
    QueryLimits {
        timeout: Duration::from_secs(10),
        max_bytes: budget::SQL_MAX_BYTES,
        max_rss_bytes: None,
    }
}

/// `run_sql`.
pub fn run_sql(ctx: &Context, p: &SqlParams) -> Result<QueryResult, ToolError> {
    let limit = Some(p.limit.map_or(DEFAULT_ROWS, u64::from));
    ctx.run_guarded(p.trace.as_deref(), &p.sql, limit, ctx.sql_limits())
}
