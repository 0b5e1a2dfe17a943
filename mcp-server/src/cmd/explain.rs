//! `causeway explain`: the incident report (ranked causal chains with timeline, root cause and
//! fix), the CLI twin of `get_causal_chains`.

use std::path::PathBuf;

use anyhow::Result;
use causeway_analysis::report::render_text;
use causeway_analysis::{ChainQuery, ExplainOptions, explain_with};
use causeway_store::Reader;

use crate::cmd::stats::WindowArgs;

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
    /// At most this many chains.
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Print JSON: {"chains": [...], ...} carrying everything the text shows.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub fleet: crate::fleet::FleetArgs,
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
    let q = ChainQuery {
        window: w.window,
        pid: w.pid,
        node: w.node,
        top_n: args.top,
    };
    let mut e = explain_with(
        &reader,
        &q,
        ExplainOptions {
            per_process: args.per_process,
        },
    )?;
    if e.chains.is_empty() {
        // A cluster store (`causeway collect`) holds the nodes' chains and counters but no
        // events to analyse: show the chains as stored, as get_causal_chains does.
        let stored = causeway_analysis::stored_chains(&reader, &q)?;
        if !stored.is_empty() {
            e.notes.retain(|n| !n.starts_with("no causal chain"));
            e.notes.push(format!(
                "{} chain(s) stored in the file (sent by the nodes or imported), shown as stored: the analysis found none in its events",
                stored.len()
            ));
            e.chains = stored.into_iter().map(sanitized).collect();
        }
    }
    if args.json {
        return crate::print_json(&e);
    }
    crate::print_text(&render_text(&e))
}

/// `explain --nodes`: every node's chains (`get_causal_chains` through its query API), ranked
/// together by time lost, each with the node that reported it; silent nodes are warnings.
fn run_fleet(args: &ExplainArgs) -> Result<()> {
    let mut params = serde_json::json!({"top_n": args.top.unwrap_or(20).clamp(1, 20)});
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
        crate::fleet::run_blocking(&args.fleet, "get_causal_chains", &params)?;
    let chains = causeway_tools::fleet::merge_chains(&answers, args.top);
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
        let mut o = format!(
            "causeway explain over {} node(s): {} chains, worst first\n",
            answers.len(),
            chains.len()
        );
        for (i, c) in chains.iter().enumerate() {
            let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
            o.push_str(&format!(
                "\n#{} [{}] {} (from {}; {}, {} lost)\n   root cause: {}\n",
                i + 1,
                s("severity"),
                s("summary"),
                s("reported_by"),
                s("detector"),
                causeway_analysis::fmt::dur(c["time_lost_ns"].as_i64().unwrap_or(0)),
                s("root_cause")
            ));
        }
        for w in &warnings {
            o.push_str(&format!("warning: node {w}\n"));
        }
        crate::print_text(&o)?;
    }
    if answers.iter().all(|a| !a.ok) {
        anyhow::bail!(
            "no node answered\nhint: {}",
            warnings.first().cloned().unwrap_or_default()
        );
    }
    Ok(())
}

/// Chain text from a file is data from other machines: strip control characters, cap lengths.
fn sanitized(mut c: causeway_analysis::Chain) -> causeway_analysis::Chain {
    use causeway_store::sanitize::sanitize_with;
    for (field, cap) in [
        (&mut c.summary, 400),
        (&mut c.root_cause, 600),
        (&mut c.explanation, 2000),
        (&mut c.node, 120),
        (&mut c.detector, 80),
    ] {
        *field = sanitize_with(field, cap);
    }
    c.recommendations = c
        .recommendations
        .iter()
        .take(8)
        .map(|r| sanitize_with(r, 400))
        .collect();
    c
}
