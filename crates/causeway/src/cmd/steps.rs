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
    pub window: crate::cli::WindowArgs,
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
    crate::print_text(&causeway_tools::print::steps(
        &r,
        causeway_tools::print::Audience::Person,
    ))
}

/// Stores in `db`'s `steps` table (source `inferred`) the steps `causeway steps` infers from the
/// cadence of every process that fed a GPU without annotated steps, after a recording or an
/// import: SQL over `steps` then finds them as it finds NVTX and profiler steps, and `steps`
/// answers the same (it infers them again from the same calls). Returns how many were stored.
pub fn store_inferred(db: &std::path::Path) -> Result<usize> {
    let mut found: Vec<(String, Vec<causeway_store::Step>)> = Vec::new();
    {
        let reader = Reader::open(db)?;
        // A step outside the trace (longer than it, or a trace's length before its first event
        // or after its last) ends at a call whose duration was clamped (a source's impossible
        // value), not where the loop turned: not stored. The first step may open before the
        // first call (a typical fetch earlier).
        let (_, first, last) = causeway_analysis::window::trace_span(&reader)?;
        let longest = last.saturating_sub(first).max(0);
        for inf in causeway_analysis::steps::inferred_to_store(&reader)? {
            let rows = inf
                .steps
                .into_iter()
                .filter(|&(_, start_ns, end_ns)| {
                    start_ns >= first.saturating_sub(longest)
                        && end_ns.saturating_sub(start_ns) <= longest
                        && end_ns <= last.saturating_add(longest)
                })
                .map(|(step, start_ns, end_ns)| causeway_store::Step {
                    pid: inf.pid,
                    tid: inf.tid,
                    step,
                    start_ns,
                    end_ns,
                    source: "inferred",
                })
                .collect();
            found.push((inf.node, rows));
        }
    }
    if found.is_empty() {
        return Ok(0);
    }
    let mut w = causeway_store::Writer::open_derived(db)?;
    let mut stored = 0;
    for (node, rows) in &found {
        w.add_steps_on(node, rows)?;
        stored += rows.len();
    }
    w.finish()?;
    Ok(stored)
}
