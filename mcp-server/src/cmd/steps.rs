//! `causeway steps`: the CLI twin of the MCP tool `get_steps` (step times, where each step's
//! time went, the slowest steps with their finding, every-Nth slow steps).

use std::path::PathBuf;

use anyhow::Result;
use causeway_store::Reader;
use causeway_tools::params::StepsParams;

/// Arguments of `causeway steps`.
#[derive(Debug, clap::Args)]
pub struct StepsArgs {
    /// The trace store.
    #[arg(long, value_name = "TRACE.duckdb")]
    pub db: PathBuf,
    #[command(flatten)]
    pub window: crate::cmd::stats::WindowArgs,
    /// Slowest steps to explain, each with its budget and finding (0-10).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=10))]
    pub slowest: u32,
    /// Print JSON (the tool's structured result).
    #[arg(long)]
    pub json: bool,
}

/// Runs `steps`.
pub fn run(args: &StepsArgs) -> Result<()> {
    let reader = Reader::open(&args.db)?;
    let p = StepsParams {
        trace: None,
        window: args.window.to_params(),
        slowest: Some(args.slowest),
    };
    let r = causeway_tools::steps::steps_for(&reader, &p)?;
    if args.json {
        return crate::print_json(&r);
    }
    crate::print_text(&causeway_tools::text::steps(
        &r,
        causeway_tools::text::Audience::Person,
    ))
}
