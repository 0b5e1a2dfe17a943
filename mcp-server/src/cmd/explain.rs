//! `causeway explain`: the incident report (ranked causal chains with timeline, root cause and
//! fix), the CLI twin of `get_causal_chains`.

use std::path::PathBuf;

use anyhow::Result;
use causeway_analysis::report::render_text;
use causeway_analysis::{ChainQuery, ExplainOptions, explain_with};
use causeway_store::Reader;

use crate::cmd::stats::WindowArgs;

/// Arguments of `causeway explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The trace store.
    #[arg(long, value_name = "TRACE.duckdb")]
    pub db: PathBuf,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Add per-op p50/p99 per process, with imbalance warnings.
    #[arg(long)]
    pub per_process: bool,
    /// At most this many chains.
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Print JSON: {"chains": [...], ...} carrying everything the text shows.
    #[arg(long)]
    pub json: bool,
}

/// Runs `explain`.
pub fn run(args: &ExplainArgs) -> Result<()> {
    let reader = Reader::open(&args.db)?;
    let w = args.window.to_query()?;
    let q = ChainQuery {
        window: w.window,
        pid: w.pid,
        node: w.node,
        top_n: args.top,
    };
    let e = explain_with(
        &reader,
        &q,
        ExplainOptions {
            per_process: args.per_process,
        },
    )?;
    if args.json {
        return crate::print_json(&e);
    }
    crate::print_text(&render_text(&e))
}
