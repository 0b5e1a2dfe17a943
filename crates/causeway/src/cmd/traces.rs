//! `causeway traces`, `causeway describe` and `causeway selftest`: the CLI twins of the MCP
//! tools `list_traces`, `describe_trace` and `get_test_report` (whose report `selftest` writes).

use causeway_hint::Hint as _;
use std::path::PathBuf;

use anyhow::{Result, bail};
use causeway_tools::params::{DescribeParams, ListTracesParams};
use causeway_tools::print::Audience;

/// Arguments of `causeway traces`.
#[derive(Debug, clap::Args)]
pub struct TracesArgs {
    /// A trace to list first, as the default (what `mcp --db` serves).
    #[arg(long, value_name = "TRACE.duckdb")]
    pub db: Option<PathBuf>,
    /// Directories of traces (repeatable; default: ./investigations).
    #[arg(long, value_name = "DIR")]
    pub traces_dir: Vec<PathBuf>,
    /// Start at this trace: the cursor a previous page printed.
    #[arg(long)]
    pub cursor: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `causeway describe`.
#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// The trace store to describe.
    #[arg(long, value_name = "TRACE.duckdb")]
    pub db: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `causeway selftest`.
#[derive(Debug, clap::Args)]
pub struct SelftestArgs {
    /// The trace to run every tool on.
    #[arg(long, value_name = "TRACE.duckdb")]
    pub db: PathBuf,
    /// Where to write the report (default: $CAUSEWAY_TEST_REPORT, else $XDG_STATE_HOME/causeway/test-report.json).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

fn tool_err(e: causeway_tools::ToolError) -> anyhow::Error {
    anyhow::anyhow!(causeway_store::Hinted::new(
        e.message(),
        e.hint().unwrap_or_default()
    ))
}

/// Runs `traces`.
pub fn run_traces(args: &TracesArgs) -> Result<()> {
    for d in &args.traces_dir {
        if !d.is_dir() {
            bail!(causeway_store::Hinted::new(
                format!("{}: no such directory", d.display()),
                "pass a directory that holds *.duckdb traces to --traces-dir"
            ));
        }
    }
    if let Some(db) = &args.db {
        // The same checks as every command that reads it: missing, SQLite, not a store.
        drop(causeway_store::Reader::open(db)?);
    }
    let db = args.db.clone().unwrap_or_default();
    let ctx = super::mcp::context(&db, &args.traces_dir)?;
    let p = ListTracesParams {
        cursor: args.cursor.clone(),
    };
    let r = causeway_tools::traces::list_traces(&ctx, &p).map_err(tool_err)?;
    if args.json {
        return crate::print_json(&r);
    }
    if r.traces.is_empty() {
        let dirs: Vec<String> = ctx
            .traces_dirs()
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        eprintln!("no traces in {}", dirs.join(", "));
    }
    crate::print_text(&causeway_tools::print::traces(&r, Audience::Person))
}

/// Runs `describe`.
pub fn run_describe(args: &DescribeArgs) -> Result<()> {
    let ctx = super::mcp::context(&args.db, &[])?;
    let r = causeway_tools::traces::describe_trace(&ctx, &DescribeParams::default())
        .map_err(tool_err)?;
    if args.json {
        return crate::print_json(&r);
    }
    crate::print_text(&causeway_tools::print::describe(&r, Audience::Person))
}

/// Runs `selftest`: every tool once on the trace; writes the report `get_test_report` reads.
pub fn run_selftest(args: &SelftestArgs) -> Result<()> {
    let mut ctx = super::mcp::context(&args.db, &[])?;
    if let Some(p) = &args.report {
        ctx = ctx.with_test_report(p.clone());
    }
    let report = causeway_tools::report::run_selftest(&ctx);
    causeway_tools::report::write(&report, ctx.test_report_path()).map_err(tool_err)?;
    tracing::info!(path = %ctx.test_report_path().display(), "self-test report written");
    if args.json {
        crate::print_json(&report)?;
    } else {
        let r = causeway_tools::report::get_test_report(&ctx).map_err(tool_err)?;
        crate::print_text(&causeway_tools::print::test_report(&r, Audience::Person))?;
    }
    if report.failed > 0 {
        bail!(
            "{} of {} self-test cases failed",
            report.failed,
            report.cases.len()
        );
    }
    Ok(())
}
