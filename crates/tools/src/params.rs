//! Typed arguments of every tool. Their JSON Schemas (schemars) are the tools' input schemas,
//! and arguments are validated against them before a handler runs; doc comments become the
//! field descriptions an agent reads, so they stay short (the whole tools/list has a budget).

use causeway_analysis::WindowSpec;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::ToolError;

/// The part of a trace a tool looks at: one struct, flattened into every tool that takes a
/// window (the CLI's twin is `WindowArgs`). Unknown fields are refused by the input schema.
/// The forms a time takes are in get_trace_stats' description (tools/list has a token budget).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct WindowParams {
    /// Last DURATION of the trace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Window start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Window end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Only this process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Only this node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl WindowParams {
    /// The window these arguments describe.
    pub fn spec(&self) -> Result<WindowSpec, ToolError> {
        window(&self.since, &self.from, &self.until)
    }
}

/// Arguments of `get_trace_stats`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct StatsParams {
    /// Trace name (list_traces; default: the server's).
    pub trace: Option<String>,
    #[serde(flatten)]
    pub window: WindowParams,
}

/// Arguments of `get_causal_chains`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ChainsParams {
    /// Trace name.
    pub trace: Option<String>,
    #[serde(flatten)]
    pub window: WindowParams,
    /// Most chains to return (default 5).
    #[schemars(range(min = 1, max = 20))]
    pub limit: Option<u32>,
    /// A previous next_cursor.
    pub cursor: Option<String>,
    /// Also the file's stored chains (other tools' claims).
    pub stored: Option<bool>,
}

/// Arguments of `get_stacks`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct StacksParams {
    /// Trace name.
    pub trace: Option<String>,
    /// Only calls of this op, e.g. cudaLaunchKernel.
    pub op: Option<String>,
    #[serde(flatten)]
    pub window: WindowParams,
    /// Most stacks (default 5).
    #[schemars(range(min = 1, max = 20))]
    pub limit: Option<u32>,
    /// Frames per stack (default 12).
    #[schemars(range(min = 1, max = 64))]
    pub max_frames: Option<u32>,
    /// A previous next_cursor.
    pub cursor: Option<String>,
}

/// Arguments of `get_steps`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct StepsParams {
    /// Trace name.
    pub trace: Option<String>,
    #[serde(flatten)]
    pub window: WindowParams,
    /// Slowest steps to explain (default 5).
    #[schemars(range(min = 0, max = 10))]
    pub slowest: Option<u32>,
}

/// Arguments of `compare_traces`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct DiffParams {
    /// The base run's trace name (list_traces).
    pub base: String,
    /// The new run's trace name.
    pub new: String,
    /// Only this process of the base run.
    pub base_pid: Option<u32>,
    /// Only this process of the new run.
    pub new_pid: Option<u32>,
}

/// Arguments of `run_sql`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqlParams {
    /// One read-only DuckDB query.
    #[schemars(length(min = 1, max = 16384))]
    pub sql: String,
    /// Trace name.
    pub trace: Option<String>,
    /// Most rows (default 100).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
}

/// Arguments of `list_traces`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTracesParams {
    /// A previous next_cursor.
    pub cursor: Option<String>,
}

/// Arguments of `describe_trace`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DescribeParams {
    /// Trace name.
    pub trace: Option<String>,
}

/// Arguments of tools that take none (`get_check`, `get_test_report`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// Builds a window from since/from/until.
pub fn window(
    since: &Option<String>,
    from: &Option<String>,
    until: &Option<String>,
) -> Result<WindowSpec, ToolError> {
    Ok(WindowSpec::from_args(
        since.as_deref(),
        from.as_deref(),
        until.as_deref(),
    )?)
}

/// A cursor is the decimal offset of the next item; anything else is refused with a hint.
pub fn parse_cursor(cursor: &Option<String>) -> Result<usize, ToolError> {
    match cursor.as_deref() {
        None | Some("") => Ok(0),
        Some(c) => c.parse::<usize>().map_err(|_| ToolError::InvalidArgument {
            field: "/cursor".into(),
            rule: "not a cursor this server issued".into(),
            hint: "pass next_cursor (the cursor the previous page gave) unchanged, or leave it out"
                .into(),
        }),
    }
}

/// One page of `items` starting at `offset`, and the cursor of the next page.
pub fn page<T>(items: Vec<T>, offset: usize, size: usize) -> (Vec<T>, Option<String>) {
    let total = items.len();
    let page: Vec<T> = items.into_iter().skip(offset).take(size).collect();
    let next = (offset + page.len() < total).then(|| (offset + page.len()).to_string());
    (page, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_cursors() {
        let (p, next) = page((0..7).collect::<Vec<_>>(), 0, 3);
        assert_eq!((p, next.as_deref()), (vec![0, 1, 2], Some("3")));
        let (p, next) = page((0..7).collect::<Vec<_>>(), 6, 3);
        assert_eq!((p, next), (vec![6], None));
        assert!(parse_cursor(&Some("abc".into())).is_err());
        assert_eq!(parse_cursor(&None).unwrap(), 0);
    }
}
