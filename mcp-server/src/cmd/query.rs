//! `causeway query`: read-only SQL through the guard and a locked-down connection.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use causeway_store::{QueryLimits, QueryResult, Reader};

use crate::output::{Align, table};

/// Arguments of `causeway query`.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// The trace store.
    #[arg(long, value_name = "TRACE.duckdb")]
    pub db: PathBuf,
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
    let reader = Reader::open(&args.db)?;
    let guarded = causeway_sqlguard::guard(&args.sql, reader.policy(), args.limit)
        .map_err(causeway_store::StoreError::from)?;
    let limits = QueryLimits {
        timeout: Duration::from_secs(args.timeout.max(1)),
        ..QueryLimits::default()
    };
    let result = reader.query(&guarded, &limits)?;
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
