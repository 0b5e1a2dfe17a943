//! `causeway stacks`: the CLI twin of the MCP tool `get_stacks` (top call stacks by total time).

use std::path::PathBuf;

use anyhow::Result;
use causeway_store::Reader;
use causeway_tools::params::StacksParams;

/// Arguments of `causeway stacks`.
#[derive(Debug, clap::Args)]
pub struct StacksArgs {
    /// The trace store.
    #[arg(long, value_name = "TRACE.duckdb")]
    pub db: PathBuf,
    /// Only calls of this op, e.g. cudaLaunchKernel.
    #[arg(long)]
    pub op: Option<String>,
    /// Only the last DURATION of the trace, e.g. 5m.
    #[arg(long, value_name = "DURATION", conflicts_with_all = ["from", "until"])]
    pub since: Option<String>,
    /// Window start (same forms as `stats --from`).
    #[arg(long, value_name = "TIME")]
    pub from: Option<String>,
    /// Window end.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Only this process.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Most stacks to show.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub limit: u32,
    /// Frames per stack.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_frames: u32,
    /// Print JSON (the tool's structured result).
    #[arg(long)]
    pub json: bool,
}

/// Runs `stacks`.
pub fn run(args: &StacksArgs) -> Result<()> {
    let reader = Reader::open(&args.db)?;
    let p = StacksParams {
        trace: None,
        op: args.op.clone(),
        since: args.since.clone(),
        from: args.from.clone(),
        until: args.until.clone(),
        pid: args.pid,
        limit: Some(args.limit),
        max_frames: Some(args.max_frames),
        cursor: None,
    };
    let r = causeway_tools::stacks::stacks_for(&reader, &p)?;
    if args.json {
        return crate::print_json(&r);
    }
    crate::print_text(&causeway_tools::text::stacks(&r))
}
