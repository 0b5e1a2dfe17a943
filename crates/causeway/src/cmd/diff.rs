//! `causeway diff`: the CLI twin of the MCP tool `compare_traces` (two runs compared step for
//! step: the step-time difference by budget bucket, the ops that changed, the noise level).

use std::path::PathBuf;

use anyhow::Result;
use causeway_store::Reader;

/// Arguments of `causeway diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The base run's trace store.
    #[arg(value_name = "BASE.duckdb")]
    pub base: PathBuf,
    /// The new run's trace store.
    #[arg(value_name = "NEW.duckdb")]
    pub new: PathBuf,
    /// Only this process of the base run.
    #[arg(long)]
    pub base_pid: Option<u32>,
    /// Only this process of the new run.
    #[arg(long)]
    pub new_pid: Option<u32>,
    /// Print JSON (the tool's structured result).
    #[arg(long)]
    pub json: bool,
}

/// Runs `diff`.
pub fn run(args: &DiffArgs) -> Result<()> {
    let d = causeway_tools::diff::compare_runs(
        &Reader::open(&args.base)?,
        args.base_pid,
        &Reader::open(&args.new)?,
        args.new_pid,
    )?;
    if args.json {
        return crate::print_json(&d);
    }
    crate::print_text(&causeway_tools::print::diff(
        &d,
        causeway_tools::print::Audience::Person,
    ))
}
