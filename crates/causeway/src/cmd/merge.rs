//! `causeway merge`: the stores of several nodes (or the reference tool's per-node SQLite
//! traces, imported on the way) into one cluster store, with per-source counts and the clock
//! offsets estimated between nodes.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use causeway_import::{ImportOptions, import};
use causeway_store::merge::{MergeReport, merge};

use crate::output::thousands;

/// Arguments of `causeway merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Node stores (causeway .duckdb, or reference-tool SQLite traces) to merge.
    #[arg(required = true, num_args = 2.., value_name = "SRC")]
    pub sources: Vec<PathBuf>,
    /// The merged store to create (never one of the sources).
    #[arg(short, long, value_name = "OUT.duckdb")]
    pub output: PathBuf,
    /// Replace OUT if it exists.
    #[arg(long)]
    pub force: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

fn is_sqlite(p: &Path) -> bool {
    let mut head = [0u8; 16];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == b"SQLite format 3\0"
}

/// Runs `merge`.
pub fn run(args: &MergeArgs) -> Result<()> {
    // Reference SQLite traces become causeway stores first (in a private temporary directory).
    let scratch = tempfile::Builder::new()
        .prefix("causeway-merge-")
        .tempdir()
        .context(causeway_store::Hinted::new(
            "creating a temporary directory for imports",
            "set TMPDIR to a writable directory",
        ))?;
    let mut stores = Vec::with_capacity(args.sources.len());
    for (i, src) in args.sources.iter().enumerate() {
        if is_sqlite(src) {
            let out = scratch.path().join(format!("{i}.duckdb"));
            import(
                std::slice::from_ref(src),
                &out,
                false,
                &ImportOptions::default(),
                &mut |_| {},
            )?;
            stores.push(out);
        } else {
            stores.push(src.clone());
        }
    }
    let mut report = merge(&stores, &args.output, args.force)?;
    for (s, given) in report.sources.iter_mut().zip(&args.sources) {
        s.path = given.clone();
    }
    if args.json {
        return crate::print_json(&report);
    }
    crate::print_text(&render(&report))
}

fn render(r: &MergeReport) -> String {
    let mut o = String::new();
    for s in &r.sources {
        o.push_str(&format!(
            "{}: {} events, node {}; {} new stacks, {} chains, {} sessions\n",
            crate::output::path(&s.path),
            thousands(s.events),
            crate::output::names(&s.nodes),
            s.new_stacks,
            s.chains,
            s.sessions
        ));
    }
    if r.clock_offsets.is_empty() {
        o.push_str("clock offsets: none estimated (no collective calls shared by the nodes)\n");
    }
    for c in &r.clock_offsets {
        o.push_str(&format!(
            "clock offset {} vs {}: {:+.3} ms +- {:.3} ms ({} collectives)\n",
            causeway_store::sanitize::sanitize(&c.node),
            causeway_store::sanitize::sanitize(&c.reference),
            c.offset_ns as f64 / 1e6,
            c.uncertainty_ns as f64 / 1e6,
            c.samples
        ));
    }
    o.push_str(&format!(
        "wrote {} ({} events)\n",
        crate::output::path(&r.out),
        thousands(r.events)
    ));
    o
}
