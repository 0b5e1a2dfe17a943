//! `causeway query`: read-only SQL through the guard and a locked-down connection.

use causeway_hint::Hint as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use causeway_store::{QueryLimits, QueryResult};

use causeway_tools::print::Audience;
use causeway_tools::print::sql::{node_line, sql};

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
    pub fleet: crate::cli::FleetArgs,
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
    crate::print_text(&sql(&result, Audience::Person))
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
        let mut text = sql(&merged, Audience::Person);
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
