//! `causeway query`: read-only SQL through the guard and a locked-down connection.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use causeway_store::{QueryLimits, QueryResult, Reader};

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
    /// Ask these serving nodes instead (`causeway serve`/`trace --serve`), in parallel:
    /// comma-separated `https://host:port` or `host:port`; rows come back with a node column.
    #[arg(long, value_delimiter = ',', value_name = "NODES")]
    pub nodes: Vec<String>,
    /// With --nodes: file holding the bearer token (else $CAUSEWAY_TOKEN).
    #[arg(long, value_name = "FILE", requires = "nodes")]
    pub token_file: Option<PathBuf>,
    /// With --nodes: CA certificate(s) to trust for https nodes (PEM).
    #[arg(long, value_name = "PEM", requires = "nodes")]
    pub ca_cert: Option<PathBuf>,
    /// With --nodes: client certificate for mTLS (PEM); needs --client-key.
    #[arg(long, value_name = "PEM", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// With --nodes: the client certificate's key (PEM).
    #[arg(long, value_name = "PEM", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// With --nodes: give up on a node after this long (e.g. 5s).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub node_timeout: Duration,
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
    if !args.nodes.is_empty() {
        return run_fleet(args);
    }
    let Some(db) = &args.db else {
        anyhow::bail!("give --db TRACE.duckdb or --nodes");
    };
    let reader = Reader::open(db)?;
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

/// `query --nodes`: the same guarded query on every node, rows merged with a node column;
/// nodes that did not answer are listed as warnings. Fails only when no node answered.
fn run_fleet(args: &QueryArgs) -> Result<()> {
    let token = match &args.token_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("{}: cannot read the token file: {e}", p.display()))?,
        ),
        None => std::env::var("CAUSEWAY_TOKEN").ok(),
    }
    .map(|t| t.trim().to_string())
    .filter(|t| !t.is_empty());
    let tls = match &args.ca_cert {
        Some(ca) => Some(std::sync::Arc::new(crate::fleet::tls_config(
            ca,
            args.client_cert.as_ref().zip(args.client_key.as_ref()),
        )?)),
        None => None,
    };
    let fleet = crate::fleet::Fleet {
        nodes: args.nodes.clone(),
        token,
        tls,
        timeout: args.node_timeout,
    };
    let mut params = serde_json::json!({"sql": args.sql});
    if let Some(l) = args.limit {
        params["limit"] = serde_json::json!(l.min(1000));
    }
    let runtime = crate::cmd::mcp::runtime()?;
    let started = std::time::Instant::now();
    let answers = runtime.block_on(crate::fleet::fan_out(&fleet, "run_sql", &params));
    let fanout_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut merged = QueryResult {
        columns: Vec::new(),
        rows: Vec::new(),
        truncated: false,
        truncated_reason: None,
        elapsed_ms: answers.iter().map(|a| a.ms).fold(0.0, f64::max),
    };
    for a in answers.iter().filter(|a| a.ok) {
        let Some(r) = a
            .result
            .as_ref()
            .and_then(|v| serde_json::from_value::<QueryResult>(v.clone()).ok())
        else {
            continue;
        };
        if merged.columns.is_empty() {
            merged.columns.push(causeway_store::ColumnInfo {
                name: "node".into(),
                type_name: "Utf8".into(),
            });
            merged.columns.extend(r.columns.clone());
        }
        merged.truncated |= r.truncated;
        for row in r.rows {
            let mut out = vec![serde_json::Value::String(a.node.clone())];
            out.extend(row);
            merged.rows.push(out);
        }
    }
    let warnings: Vec<String> = answers
        .iter()
        .filter_map(|a| a.warning.as_ref().map(|w| format!("{}: {w}", a.node)))
        .collect();
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
