//! Read-only resources for agents: the schema (tables, columns, units, op meanings), the op
//! catalogue, the list of traces, and a template for one trace's summary. Generated from the
//! store's own relation list, column docs and op catalogue, so they cannot drift from the store.

use std::fmt::Write;

use causeway_store::catalog::{OPS, Source};
use causeway_store::schema::{COLUMN_DOCS, RELATIONS};

use crate::context::Context;
use crate::error::ToolError;
use crate::params::{DescribeParams, ListTracesParams};

/// URI of the schema resource.
pub const SCHEMA_URI: &str = "causeway://schema";
/// URI of the op catalogue.
pub const OPS_URI: &str = "causeway://ops";
/// URI of the trace list.
pub const TRACES_URI: &str = "causeway://traces";
/// Template of one trace's summary.
pub const TRACE_TEMPLATE: &str = "causeway://trace/{name}";

/// A fixed resource.
#[derive(Debug, Clone, Copy)]
pub struct ResourceSpec {
    /// URI.
    pub uri: &'static str,
    /// Short name.
    pub name: &'static str,
    /// What it holds.
    pub description: &'static str,
    /// MIME type of its contents.
    pub mime: &'static str,
}

/// The fixed resources, in listing order.
pub const RESOURCES: &[ResourceSpec] = &[
    ResourceSpec {
        uri: SCHEMA_URI,
        name: "schema",
        description: "Tables and columns of a trace with types, units and meanings, for run_sql",
        mime: "text/markdown",
    },
    ResourceSpec {
        uri: OPS_URI,
        name: "ops",
        description: "Every source and op causeway records, with what duration, arg0 and arg1 mean",
        mime: "text/markdown",
    },
    ResourceSpec {
        uri: TRACES_URI,
        name: "traces",
        description: "Traces this server can open (names for the trace argument)",
        mime: "application/json",
    },
];

/// The resource template for one trace's summary (`describe_trace` as JSON).
pub const TEMPLATE: ResourceSpec = ResourceSpec {
    uri: TRACE_TEMPLATE,
    name: "trace",
    description: "Summary of one trace by name: span, nodes, processes, events per source, drops",
    mime: "application/json",
};

/// Reads a resource: its MIME type and text.
pub fn read(ctx: &Context, uri: &str) -> Result<(&'static str, String), ToolError> {
    match uri {
        SCHEMA_URI => Ok(("text/markdown", schema_markdown(ctx))),
        OPS_URI => Ok(("text/markdown", ops_markdown())),
        TRACES_URI => {
            let r = crate::traces::list_traces(ctx, &ListTracesParams::default())?;
            Ok(("application/json", to_json(&r)))
        }
        _ => {
            let Some(name) = uri.strip_prefix("causeway://trace/") else {
                return Err(ToolError::failed(
                    format!(
                        "no resource {}",
                        causeway_store::sanitize::sanitize_with(uri, 120)
                    ),
                    "resources/list and resources/templates/list show the URIs",
                ));
            };
            let p = DescribeParams {
                trace: Some(name.to_string()),
            };
            let d = crate::traces::describe_trace(ctx, &p)?;
            Ok(("application/json", to_json(&d)))
        }
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// Column (name, type) pairs per relation, read from the default trace's `schema_columns`.
fn column_types(ctx: &Context) -> Vec<(String, String, String)> {
    const SQL: &str =
        "SELECT table_name, column_name, type FROM schema_columns ORDER BY table_name";
    ctx.with_reader(None, |r| {
        let mut st = r.prepare_trusted(SQL)?;
        let rows = st
            .query_map([], causeway_store::row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        Ok(rows.unwrap_or_default())
    })
    .unwrap_or_default()
}

/// The schema resource: every relation the SQL guard allows, its columns, units and meanings.
pub fn schema_markdown(ctx: &Context) -> String {
    let types = column_types(ctx);
    let mut o = String::from(
        "# causeway trace schema\n\nTimes are ns since the Unix epoch, durations ns. `events` is the main view: \
         filter by name (`WHERE op = 'cudaLaunchKernel'`, `source = 'HOST'`). Join `stack_frames`/`stacks` on \
         `stack_hash`. What duration/arg0/arg1 mean per op: causeway://ops (or `FROM ops`). Example:\n\n\
         `SELECT op, count(*) AS calls, quantile_disc(duration, 0.99) / 1e3 AS p99_us FROM events GROUP BY op ORDER BY calls DESC`\n",
    );
    for rel in RELATIONS {
        let _ = writeln!(o, "\n## {rel}");
        let mut cols: Vec<(String, String)> = types
            .iter()
            .filter(|(t, _, _)| t == rel)
            .map(|(_, c, ty)| (c.clone(), ty.clone()))
            .collect();
        if cols.is_empty() {
            cols = COLUMN_DOCS
                .iter()
                .filter(|(t, ..)| t == rel)
                .map(|(_, c, ..)| (c.to_string(), String::new()))
                .collect();
        }
        for (col, ty) in cols {
            let doc = COLUMN_DOCS.iter().find(|(t, c, ..)| t == rel && *c == col);
            let _ = write!(o, "- {col}");
            if !ty.is_empty() {
                let _ = write!(o, " {ty}");
            }
            if let Some((_, _, unit, meaning)) = doc {
                if !unit.is_empty() {
                    let _ = write!(o, " [{unit}]");
                }
                let _ = write!(o, ": {meaning}");
            }
            o.push('\n');
        }
    }
    o
}

/// The op catalogue resource.
pub fn ops_markdown() -> String {
    let mut o = String::from(
        "# causeway op catalogue\n\nevents.op names by source; duration, arg0 and arg1 meanings per op.\n",
    );
    for src in Source::ALL {
        let _ = writeln!(o, "\n## {} — {}", src.name(), src.description());
        for op in OPS.iter().filter(|op| op.source == src) {
            let _ = write!(
                o,
                "- {}: {}. duration: {}; arg0: {}; arg1: {}",
                op.name, op.description, op.duration, op.arg0, op.arg1
            );
            if !op.reference_name.is_empty() {
                let _ = write!(o, " (reference tool: {})", op.reference_name);
            }
            o.push('\n');
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_resource_lists_every_op() {
        let md = ops_markdown();
        for op in OPS {
            assert!(
                md.contains(&format!("- {}: ", op.name)),
                "{} missing",
                op.name
            );
        }
        assert!(md.contains("## HOST"));
    }
}
