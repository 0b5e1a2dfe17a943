//! `causeway stats`: the CLI twin of the MCP tool `get_trace_stats`.

use std::path::PathBuf;

use anyhow::Result;
use causeway_analysis::{StatsQuery, WindowSpec, trace_stats};
use causeway_store::Reader;

/// Time window and filters shared by the analysis commands.
#[derive(Debug, Clone, clap::Args)]
pub struct WindowArgs {
    /// Only the last DURATION of the trace (anchored to its end), e.g. 5m, 30s.
    #[arg(long, value_name = "DURATION", conflicts_with_all = ["from", "until"])]
    pub since: Option<String>,
    /// Window start: ns since epoch, RFC 3339, +DURATION after the trace start, -DURATION before its end.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub from: Option<String>,
    /// Window end (same forms as --from).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub until: Option<String>,
    /// Only this process.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Only this node.
    #[arg(long)]
    pub node: Option<String>,
}

impl WindowArgs {
    /// The same window as the MCP tools take it.
    pub fn to_params(&self) -> causeway_tools::params::WindowParams {
        causeway_tools::params::WindowParams {
            since: self.since.clone(),
            from: self.from.clone(),
            until: self.until.clone(),
            pid: self.pid,
            node: self.node.clone(),
        }
    }

    /// The analysis query these arguments describe.
    pub fn to_query(&self) -> Result<StatsQuery> {
        Ok(StatsQuery {
            pid: self.pid,
            node: self.node.clone(),
            window: WindowSpec::from_args(
                self.since.as_deref(),
                self.from.as_deref(),
                self.until.as_deref(),
            )?,
        })
    }
}

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
    let stats = trace_stats(&reader, &args.window.to_query()?)?;
    if args.json {
        return crate::print_json(&stats);
    }
    crate::print_text(&causeway_tools::print::stats(
        &stats,
        causeway_tools::print::Audience::Person,
    ))
}
