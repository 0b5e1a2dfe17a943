//! `causeway query`: read-only SQL through the guard and a locked-down connection.

use causeway_hint::Hint as _;
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
    pub fleet: crate::flags::FleetArgs,
    /// One read-only query (SELECT, WITH, FROM-first, VALUES). Tables: see `causeway query --db T "FROM schema_columns"`.
    pub sql: String,
    /// Most rows to return: 1-10,000 (default 1,000); with --nodes, rows per node, 1-1,000
    /// (default 100, run_sql's `limit`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub limit: Option<u64>,
    /// Interrupt the query after this many seconds (1-3,600).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3_600))]
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
    let result = ctx.run_guarded(None, &args.sql, args.limit, &limits)?;
    if args.json {
        return crate::print_json(&result);
    }
    crate::print_text(&render(&result))
}

/// The human rendering.
pub fn render(r: &QueryResult) -> String {
    let names: Vec<String> = r.columns.iter().map(|c| c.name.clone()).collect();
    render_rows(&names, &r.rows, r.truncated_reason.as_deref())
}

/// Rows under aligned headers (numbers right-aligned), then the row count: `query`,
/// `query --nodes` and `fleet` print their rows through this one function.
pub fn render_rows(
    names: &[String],
    rows: &[Vec<serde_json::Value>],
    truncated: Option<&str>,
) -> String {
    let headers: Vec<(&str, Align)> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let numeric = rows
                .first()
                .and_then(|row| row.get(i))
                .is_some_and(|v| v.is_number());
            (
                name.as_str(),
                if numeric { Align::Right } else { Align::Left },
            )
        })
        .collect();
    let cells: Vec<Vec<String>> = rows
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
    let mut out = table(&headers, &cells);
    out.push_str(&format!(
        "({} row{}",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" }
    ));
    if let Some(why) = truncated {
        out.push_str(&format!("; truncated: {why}"));
    }
    out.push_str(")\n");
    out
}

/// One node's line under a fleet answer: its round trip and clock offset, or why it did not
/// answer.
pub fn node_line(
    node: &str,
    ok: bool,
    ms: f64,
    clock: Option<(i64, i64)>,
    warning: Option<&str>,
) -> String {
    match (ok, clock) {
        (true, Some((off, unc))) => format!(
            "node {node}: {ms:.1} ms, clock offset {:+.3} ms +- {:.3} ms\n",
            off as f64 / 1e6,
            unc as f64 / 1e6
        ),
        (true, None) => format!("node {node}: {ms:.1} ms\n"),
        (false, _) => format!(
            "warning: node {node} did not answer: {}\n",
            warning.unwrap_or("")
        ),
    }
}

/// `query --nodes`: the same guarded query on every node, rows merged with a node column;
/// nodes that did not answer are listed as warnings. Fails only when no node answered.
fn run_fleet(args: &QueryArgs) -> Result<()> {
    let mut params = serde_json::json!({"sql": args.sql});
    if let Some(l) = args.limit {
        if l > 1000 {
            anyhow::bail!(causeway_store::Hinted::new(
                format!("--limit {l} is more rows per node than a node returns (1,000)"),
                "pass --limit 1000 or less with --nodes"
            ));
        }
        params["limit"] = serde_json::json!(l);
    }
    let (answers, fanout_ms) =
        causeway_client::fleet::run_blocking(&args.fleet.fleet()?, "run_sql", &params)?;
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
            let clock = a
                .clock_offset_ns
                .map(|off| (off, a.clock_uncertainty_ns.unwrap_or(0)));
            text.push_str(&node_line(&a.node, a.ok, a.ms, clock, a.warning.as_deref()));
        }
        crate::print_text(&text)?;
    }
    if answers.iter().all(|a| !a.ok) {
        let e = causeway_tools::fleet::none_answered(&answers);
        anyhow::bail!(causeway_store::Hinted::new(
            e.message(),
            e.hint().unwrap_or_default()
        ));
    }
    Ok(())
}
