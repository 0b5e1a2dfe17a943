//! `causeway query`: read-only SQL through the guard and a locked-down connection.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use causeway_store::{QueryLimits, QueryResult};

use crate::output::{Align, table};

/// Arguments of `causeway query`.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// The trace store (or --nodes).
    #[arg(
        long,
        value_name = "TRACE.duckdb",
        required_unless_present = "nodes",
        conflicts_with = "nodes"
    )]
    pub db: Option<PathBuf>,
    #[command(flatten)]
    pub fleet: crate::fleet::FleetArgs,
    /// One read-only query (SELECT, WITH, FROM-first, VALUES). Tables: see `causeway query --db T "FROM schema_columns"`.
    pub sql: String,
    /// Most rows to return (default 1,000, at most 10,000).
    #[arg(long)]
    pub limit: Option<u64>,
    /// Interrupt the query after this many seconds.
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
    /// Print JSON: {columns, rows, truncated, ...}.
    #[arg(long)]
    pub json: bool,
}

/// Runs `query`.
pub fn run(args: &QueryArgs) -> Result<()> {
    if args.fleet.given() {
        return run_fleet(args);
    }
    let Some(db) = &args.db else {
        anyhow::bail!("give --db TRACE.duckdb or --nodes");
    };
    let limits = QueryLimits {
        timeout: Duration::from_secs(args.timeout.max(1)),
        ..QueryLimits::default()
    };
    // The function run_sql calls: guarded, on its own thread, answered within the time limit
    // and 0.75 s even when DuckDB ignores its interrupt.
    let ctx = causeway_tools::Context::new(db.clone(), Vec::new());
    let result = ctx
        .run_guarded(None, &args.sql, args.limit, &limits)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.json {
        return crate::print_json(&result);
    }
    crate::print_text(&render(&result))
}

/// The human rendering.
pub fn render(r: &QueryResult) -> String {
    let headers: Vec<(&str, Align)> = r
        .columns
        .iter()
        .map(|c| {
            let numeric = r
                .rows
                .first()
                .and_then(|row| row.get(headers_index(r, &c.name)))
                .is_some_and(|v| v.is_number());
            (
                c.name.as_str(),
                if numeric { Align::Right } else { Align::Left },
            )
        })
        .collect();
    let rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|v| match v {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Null => "NULL".into(),
                    other => other.to_string(),
                })
                .collect()
        })
        .collect();
    let mut out = table(&headers, &rows);
    out.push_str(&format!(
        "({} row{}",
        r.rows.len(),
        if r.rows.len() == 1 { "" } else { "s" }
    ));
    if let Some(why) = &r.truncated_reason {
        out.push_str(&format!("; truncated: {why}"));
    }
    out.push_str(")\n");
    out
}

fn headers_index(r: &QueryResult, name: &str) -> usize {
    r.columns.iter().position(|c| c.name == name).unwrap_or(0)
}

/// `query --nodes`: the same guarded query on every node, rows merged with a node column;
/// nodes that did not answer are listed as warnings. Fails only when no node answered.
fn run_fleet(args: &QueryArgs) -> Result<()> {
    let mut params = serde_json::json!({"sql": args.sql});
    if let Some(l) = args.limit {
        params["limit"] = serde_json::json!(l.min(1000));
    }
    let (answers, fanout_ms) = crate::fleet::run_blocking(&args.fleet, "run_sql", &params)?;
    let (columns, rows, truncated) = causeway_tools::fleet::merge_sql(&answers);
    let merged = QueryResult {
        columns: columns
            .into_iter()
            .filter_map(|c| serde_json::from_value(c).ok())
            .collect(),
        rows,
        truncated,
        truncated_reason: None,
        elapsed_ms: answers.iter().map(|a| a.ms).fold(0.0, f64::max),
    };
    let warnings = causeway_tools::fleet::warnings(&answers);
    if args.json {
        crate::print_json(&serde_json::json!({
            "columns": merged.columns, "rows": merged.rows, "truncated": merged.truncated,
            "fanout_ms": fanout_ms,
            "nodes": answers, "warnings": warnings,
        }))?;
    } else {
        let mut text = render(&merged);
        for a in &answers {
            text.push_str(&match (a.ok, a.clock_offset_ns) {
                (true, Some(off)) => format!(
                    "node {}: {:.1} ms, clock offset {:+.3} ms +- {:.3} ms\n",
                    a.node,
                    a.ms,
                    off as f64 / 1e6,
                    a.clock_uncertainty_ns.unwrap_or(0) as f64 / 1e6
                ),
                (true, None) => format!("node {}: {:.1} ms\n", a.node, a.ms),
                (false, _) => format!(
                    "warning: node {} did not answer: {}\n",
                    a.node,
                    a.warning.as_deref().unwrap_or("")
                ),
            });
        }
        crate::print_text(&text)?;
    }
    if answers.iter().all(|a| !a.ok) {
        anyhow::bail!(
            "no node answered\nhint: {}",
            warnings.first().cloned().unwrap_or_default()
        );
    }
    Ok(())
}
