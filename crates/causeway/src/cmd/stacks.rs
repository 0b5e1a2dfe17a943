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
    #[command(flatten)]
    pub window: crate::cli::WindowArgs,
    /// Most stacks to show (1-20).
    #[arg(long, visible_alias = "top", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=20))]
    pub limit: u32,
    /// Start at this stack: the cursor a previous page printed.
    #[arg(long)]
    pub cursor: Option<String>,
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
    let w = &args.window;
    let p = StacksParams {
        trace: None,
        op: args.op.clone(),
        window: w.to_params(),
        limit: Some(args.limit),
        max_frames: Some(args.max_frames),
        cursor: args.cursor.clone(),
    };
    let r = causeway_tools::stacks::stacks_for(&reader, &p)?;
    if args.json {
        return crate::print_json(&r);
    }
    crate::print_text(&causeway_tools::print::stacks(
        &r,
        causeway_tools::print::Audience::Person,
    ))
}
