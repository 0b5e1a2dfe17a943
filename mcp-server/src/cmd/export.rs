//! `causeway export`: writes a trace for existing tools; `--format perfetto` gives Chrome
//! trace-event JSON that ui.perfetto.dev and chrome://tracing open (tracks per node and
//! thread, off-CPU spans, causal chains as flow events).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Result, anyhow};
use causeway_analysis::ChainQuery;
use causeway_export::{ExportError, PerfettoOptions, write_perfetto};
use causeway_store::{Reader, StoreError};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Chrome trace-event JSON (Perfetto UI, chrome://tracing).
    Perfetto,
}

/// Arguments of `causeway export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The trace store to export.
    #[arg(long, value_name = "TRACE.duckdb")]
    pub db: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "perfetto")]
    pub format: Format,
    /// Output file (`-` for stdout); written through a temporary file and renamed.
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// Replace OUT if it exists.
    #[arg(long)]
    pub force: bool,
    /// Most events to export (the earliest are kept; the file says how many were cut).
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub max_events: usize,
    /// Do not draw causal chains.
    #[arg(long)]
    pub no_chains: bool,
}

fn to_store(e: ExportError, out: &std::path::Path) -> StoreError {
    match e {
        ExportError::Store(e) => e,
        ExportError::Write(msg) => StoreError::Io {
            path: out.to_path_buf(),
            action: "writing the export",
            source: std::io::Error::other(msg),
        },
    }
}

/// Runs `export`.
pub fn run(args: &ExportArgs) -> Result<()> {
    let reader = Reader::open(&args.db)?;
    let chains = if args.no_chains {
        Vec::new()
    } else {
        causeway_tools::stats::chains_for(&reader, &ChainQuery::default())
            .map_err(|e| anyhow!("{}\nhint: {}", e.message(), e.hint()))?
            .0
    };
    let opts = PerfettoOptions {
        max_events: args.max_events,
        switch_in_nodes: switch_in_nodes(&reader)?,
        chains,
    };
    let summary = if args.output.as_os_str() == "-" {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let s = write_perfetto(&reader, &opts, &mut out)?;
        out.flush()?;
        s
    } else {
        causeway_store::write_atomically(&args.output, args.force, |tmp| {
            let f = std::fs::File::create(tmp).map_err(|source| StoreError::Io {
                path: tmp.to_path_buf(),
                action: "creating the export",
                source,
            })?;
            let mut out = std::io::BufWriter::new(f);
            let s = write_perfetto(&reader, &opts, &mut out).map_err(|e| to_store(e, tmp))?;
            out.flush().map_err(|source| StoreError::Io {
                path: tmp.to_path_buf(),
                action: "writing the export",
                source,
            })?;
            Ok(s)
        })?
    };
    eprintln!(
        "exported {} events ({} cut), {} node(s), {} thread(s), {} chain(s), {} flow(s){}",
        summary.events,
        summary.events_cut,
        summary.nodes,
        summary.threads,
        summary.chains,
        summary.flows,
        if args.output.as_os_str() == "-" {
            String::new()
        } else {
            format!(" -> {}", args.output.display())
        }
    );
    Ok(())
}

/// Nodes whose sched_switch rows are stamped at switch-in (imported reference traces).
fn switch_in_nodes(r: &Reader) -> Result<BTreeSet<String>> {
    let ctx = causeway_analysis::facts::Ctx::load(r, &ChainQuery::default())?;
    Ok(ctx
        .resume_nodes
        .split('\u{1f}')
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect())
}
