//! `causeway explain`: the incident report (ranked causal chains with timeline, root cause and
//! fix), the CLI twin of `get_causal_chains`.

use causeway_hint::Hint as _;
use std::path::PathBuf;

use anyhow::Result;
use causeway_analysis::{ChainQuery, FindingsQuery};
use causeway_store::Reader;

use crate::cli::WindowArgs;

/// Arguments of `causeway explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The trace store (or --nodes).
    #[arg(
        long,
        value_name = "TRACE.duckdb",
        required_unless_present = "nodes",
        conflicts_with = "nodes"
    )]
    pub db: Option<PathBuf>,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Add per-op p50/p99 per process, with imbalance warnings.
    #[arg(long)]
    pub per_process: bool,
    /// At most this many chains (1-20; get_causal_chains' `limit`); default: all.
    #[arg(long, visible_alias = "top", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=20))]
    pub limit: Option<u32>,
    /// Start at this chain: the cursor a previous page printed.
    #[arg(long, requires = "limit")]
    pub cursor: Option<String>,
    /// Also show the chains stored in the file (imported from another tool, or sent by nodes):
    /// their claims, labelled, never ranked with causeway's findings.
    #[arg(long)]
    pub stored: bool,
    /// Show only the time budgets: where each GPU-calling thread's and process's time went
    /// (inside GPU calls by class, outside them, preemptors, stalls).
    #[arg(long, conflicts_with_all = ["stored", "per_process"])]
    pub breakdown: bool,
    /// Print JSON: {"chains": [...], "budgets": [...], ...} carrying everything the text shows
    /// (what get_causal_chains returns, unpaged).
    #[arg(long)]
    pub json: bool,
    /// Print only the evidence SQL of finding N (its rank in the report), ready for
    /// `causeway query`.
    #[arg(long, value_name = "N", conflicts_with_all = ["json", "breakdown", "limit"],
          value_parser = clap::value_parser!(u32).range(1..))]
    pub evidence: Option<u32>,
    /// Print every finding's evidence SQL in the report (by default a pointer to --evidence N).
    #[arg(short = 'v', long)]
    pub verbose: bool,
    #[command(flatten)]
    pub fleet: crate::cli::FleetArgs,
}

/// Runs `explain`.
pub fn run(args: &ExplainArgs) -> Result<()> {
    if args.fleet.given() {
        return run_fleet(args);
    }
    let Some(db) = &args.db else {
        anyhow::bail!("give --db TRACE.duckdb or --nodes");
    };
    let reader = Reader::open(db)?;
    let w = args.window.to_query()?;
    let q = FindingsQuery {
        chains: ChainQuery {
            window: w.window,
            pid: w.pid,
            node: w.node,
            top_n: None,
            prices: crate::prices::load()?,
        },
        stored: args.stored,
        per_process: args.per_process,
    };
    // The function get_causal_chains calls.
    let mut f = causeway_tools::stats::findings_for(&reader, &q).map_err(|e| {
        anyhow::anyhow!(causeway_store::Hinted::new(
            e.message(),
            e.hint().unwrap_or_default()
        ))
    })?;
    if let Some(n) = args.evidence {
        let suffix = format!("-{n}");
        let Some(c) = f.explain.chains.iter().find(|c| c.id.ends_with(&suffix)) else {
            anyhow::bail!(causeway_store::Hinted::new(
                format!(
                    "--evidence {n}: the report has {} finding{}",
                    f.explain.chains.len(),
                    if f.explain.chains.len() == 1 { "" } else { "s" }
                ),
                "give the rank printed as #N in `causeway explain` with the same window"
            ));
        };
        return crate::print_text(&format!("{}\n", c.evidence_sql));
    }
    let mut next_cursor = None;
    if let Some(limit) = args.limit {
        let offset = causeway_tools::params::parse_cursor(&args.cursor).map_err(|e| {
            anyhow::anyhow!(causeway_store::Hinted::new(
                format!("--cursor: {}", e.message()),
                e.hint().unwrap_or_default()
            ))
        })?;
        let all = std::mem::take(&mut f.explain.chains);
        (f.explain.chains, next_cursor) = causeway_tools::params::page(all, offset, limit as usize);
    }
    if args.breakdown {
        if args.json {
            return crate::print_json(&f.explain.budgets);
        }
        return crate::print_text(&causeway_tools::print::explain::budgets(
            &f.explain.budgets,
            f.explain.window.from_ns,
        ));
    }
    if args.json {
        return crate::print_json(&f);
    }
    crate::print_text(&causeway_tools::print::explain::findings(
        &f,
        next_cursor.as_deref(),
        args.verbose,
    ))
}

/// `explain --nodes`: every node's chains (`get_causal_chains` through its query API), ranked
/// together by time lost, each with the node that reported it; silent nodes are warnings.
fn run_fleet(args: &ExplainArgs) -> Result<()> {
    // `top_n`, not `limit`: nodes running a causeway from before `limit` still answer.
    let mut params = serde_json::json!({"top_n": args.limit.unwrap_or(20)});
    let w = &args.window;
    for (k, v) in [
        ("since", &w.since),
        ("from", &w.from),
        ("until", &w.until),
        ("node", &w.node),
    ] {
        if let Some(v) = v {
            params[k] = serde_json::json!(v);
        }
    }
    if let Some(pid) = w.pid {
        params["pid"] = serde_json::json!(pid);
    }
    let (answers, fanout_ms) =
        causeway_client::fleet::run_blocking(&args.fleet.fleet()?, "get_causal_chains", &params)?;
    let chains = causeway_tools::fleet::merge_chains(&answers, args.limit.map(|n| n as usize));
    let warnings = causeway_tools::fleet::warnings(&answers);
    let nodes: Vec<serde_json::Value> = answers
        .iter()
        .map(|a| {
            serde_json::json!({"node": a.node, "ok": a.ok, "ms": a.ms,
                "clock_offset_ns": a.clock_offset_ns, "clock_uncertainty_ns": a.clock_uncertainty_ns})
        })
        .collect();
    if args.json {
        crate::print_json(&serde_json::json!({
            "chains": chains, "nodes": nodes, "warnings": warnings, "fanout_ms": fanout_ms,
        }))?;
    } else {
        let o = causeway_tools::print::fleet::explain_nodes(answers.len(), &chains, &warnings);
        crate::print_text(&o)?;
    }
    if answers.iter().all(|a| !a.ok) {
        let e = causeway_tools::fleet::none_answered(&answers);
        anyhow::bail!(causeway_store::Hinted::new(
            e.message(),
            e.hint().unwrap_or_default()
        ));
    }
    Ok(())
}
