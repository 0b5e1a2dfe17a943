//! `causeway stats`: the CLI twin of the MCP tool `get_trace_stats`.

use std::path::PathBuf;

use anyhow::Result;
use causeway_store::Reader;

use crate::cli::WindowArgs;

/// Arguments of `causeway stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// The trace store.
    #[arg(long, value_name = "TRACE.duckdb")]
    pub db: PathBuf,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Print JSON (stable shape, see docs/cli.md).
    #[arg(long)]
    pub json: bool,
}

/// Runs `stats`.
pub fn run(args: &StatsArgs) -> Result<()> {
    let reader = Reader::open(&args.db)?;
    // The function get_trace_stats calls.
    let stats = causeway_tools::stats::stats_for(&reader, &args.window.to_query()?)?;
    if args.json {
        return crate::print_json(&stats);
    }
    crate::print_text(&causeway_tools::print::stats(
        &stats,
        causeway_tools::print::Audience::Person,
    ))
}
