//! `causeway report`: the self-contained HTML report of a trace (causeway-report), the same
//! page `serve` shows live at `/`.

use causeway_hint::Hint as _;
use std::path::PathBuf;

use anyhow::Result;
use causeway_store::Reader;

use crate::cli::WindowArgs;

/// Arguments of `causeway report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The trace store.
    #[arg(long, value_name = "TRACE.duckdb")]
    pub db: PathBuf,
    #[command(flatten)]
    pub window: WindowArgs,
    /// The HTML file to write (through a temporary sibling, renamed into place when complete).
    // Not `OutputArgs`: its deprecated `--db` spelling of the output would collide with the
    // input `--db` every analysis command takes.
    #[arg(short = 'o', long = "output", value_name = "OUT.html")]
    pub output: PathBuf,
    /// Replace OUT.html if it exists.
    #[arg(long)]
    pub force: bool,
}

/// Runs `report`.
pub fn run(args: &ReportArgs) -> Result<()> {
    let reader = Reader::open(&args.db)?;
    // Validates --since/--from/--until the way the other analysis commands do.
    args.window.to_query()?;
    let prices = crate::prices::load()?;
    let written = causeway_report::write_file(
        &reader,
        &args.window.to_params(),
        &prices,
        &args.output,
        args.force,
    )
    .map_err(|e| {
        anyhow::anyhow!(causeway_store::Hinted::new(
            e.to_string(),
            e.hint().unwrap_or_default()
        ))
    })?;
    eprintln!(
        "wrote {} ({} KB, built in {:.0} ms); open it in a browser, it needs no network",
        args.output.display(),
        written.bytes.div_ceil(1024),
        written.build_ms
    );
    Ok(())
}
