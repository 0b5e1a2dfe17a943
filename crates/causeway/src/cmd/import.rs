//! `causeway import`: reference-tool SQLite traces, Nsight Systems SQLite exports and PyTorch
//! profiler (Kineto) traces into a new causeway store (docs/import.md).

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Result;
use causeway_import::{ImportOptions, SourceReport, import};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::output::thousands;

/// Arguments of `causeway import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// Traces to import, told apart by content: reference-tool trace databases (SQLite),
    /// Nsight Systems exports (`nsys export --type sqlite`), PyTorch profiler traces (Kineto
    /// JSON, plain or gzipped), or directories of per-rank profiler traces.
    #[arg(required = true, value_name = "SRC")]
    pub sources: Vec<PathBuf>,
    #[command(flatten)]
    pub out: crate::cli::OutputArgs,
    /// Node name for every imported event (default: the name recorded in the file, else its stem).
    #[arg(long)]
    pub node: Option<String>,
    /// Replace OUT if it exists.
    #[arg(long)]
    pub force: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the import and prints what was imported per source.
pub fn run(args: &ImportArgs) -> Result<()> {
    let Some(db) = args.out.path("import") else {
        anyhow::bail!(causeway_store::Hinted::new(
            "give the store to create",
            "causeway import SRC -o NEW.duckdb"
        ));
    };
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("importing {bar:30} {pos}/{len} events ({per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let opts = ImportOptions {
        node: args.node.clone(),
        ..ImportOptions::default()
    };
    let started = std::time::Instant::now();
    let reports = import(&args.sources, &db, args.force, &opts, &mut |p| {
        bar.set_length(p.total);
        bar.set_position(p.done);
    })?;
    bar.finish_and_clear();
    crate::cmd::trace::store_inferred_steps(&db);
    tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, db = %db.display(), "import finished");
    if args.json {
        crate::print_json(&serde_json::json!({
            "db": db,
            "sources": reports,
        }))?;
        return Ok(());
    }
    let mut out = String::new();
    for r in &reports {
        out.push_str(&describe(r));
    }
    out.push_str(&format!("wrote {}\n", crate::output::path(&db)));
    crate::print_text(&out)
}

fn describe(r: &SourceReport) -> String {
    let mut s = format!(
        "{}: {} events, node {}",
        crate::output::path(&r.path),
        thousands(r.events),
        crate::output::names(&r.nodes)
    );
    s.push_str(&format!(
        "; {} stacks, {} chains, {} sessions, {} processes, {} snapshots",
        r.stacks, r.chains, r.sessions, r.processes, r.snapshots
    ));
    if let Some(k) = &r.kineto {
        s.push_str(&format!(
            "; {} kernels, {} copies, {} memsets, {} ranges, {} steps",
            thousands(k.kernels),
            thousands(k.memcpys),
            thousands(k.memsets),
            thousands(k.ranges),
            thousands(k.steps)
        ));
        if let (Some(rank), Some(world)) = (k.rank, k.world_size) {
            s.push_str(&format!("; rank {rank} of {world}"));
        }
    }
    if let Some(n) = &r.nsys {
        s.push_str(&format!(
            "; {} kernels, {} copies, {} memsets, {} syncs, {} NVTX ranges, {} OS runtime ranges",
            thousands(n.kernels),
            thousands(n.memcpys),
            thousands(n.memsets),
            thousands(n.syncs),
            thousands(n.nvtx_ranges),
            thousands(n.osrt_ranges)
        ));
        if n.session_start_ns.is_none() {
            s.push_str("; the export has no session start (TARGET_INFO_SESSION_START_TIME): times are ns since the capture began");
        }
    }
    if r.skipped > 0 {
        s.push_str(&format!(
            "; {} events skipped (unknown ops, counted in drops)",
            thousands(r.skipped)
        ));
    }
    if r.invalid > 0 {
        s.push_str(&format!(
            "; {} events skipped for an impossible timestamp, pid or tid (counted in drops as import_invalid)",
            thousands(r.invalid)
        ));
    }
    s.push('\n');
    for d in &r.counter_doubts {
        s.push_str(&format!("  counters: {d}\n"));
    }
    s
}
