//! `causeway demo`: writes a realistic synthetic trace for a scenario through the collector's
//! store writer (no root, no GPU) and prints the explain report for it.

use std::path::PathBuf;

use anyhow::{Result, anyhow};
use causeway_analysis::demo::{Scenario, write_scenario};
use causeway_analysis::report::render_text;
use causeway_analysis::{ChainQuery, ExplainOptions, explain_with};
use causeway_store::Reader;

/// Arguments of `causeway demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Scenario to generate (see --list).
    #[arg(value_name = "SCENARIO", default_value = "incident")]
    pub scenario: String,
    /// Keep the trace here (default: a temporary file, removed afterwards).
    #[arg(long, value_name = "OUT.duckdb")]
    pub db: Option<PathBuf>,
    /// Replace --db if it exists.
    #[arg(long)]
    pub force: bool,
    /// Generate the scenario's healthy baseline (same workload, no pathology).
    #[arg(long)]
    pub healthy: bool,
    /// Add per-process statistics to the report.
    #[arg(long)]
    pub per_process: bool,
    /// List the scenarios and exit.
    #[arg(long)]
    pub list: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

fn generate_and_explain(
    path: &std::path::Path,
    scenario: Scenario,
    args: &DemoArgs,
    temporary: bool,
) -> Result<(
    causeway_analysis::demo::DemoSummary,
    causeway_analysis::Explain,
)> {
    let summary = causeway_store::write_atomically(path, args.force || temporary, |t| {
        write_scenario(t, scenario, args.healthy)
    })
    .map_err(|e| {
        let e = e.to_string();
        if e.contains("hint:") {
            anyhow!("cannot write the demo trace: {e}")
        } else {
            anyhow!("cannot write the demo trace: {e}\nhint: pass --db with a path in an existing, writable directory")
        }
    })?;
    tracing::info!(events = summary.events, nodes = summary.nodes, path = %path.display(), "demo trace written");
    let reader = Reader::open(path)?;
    let e = explain_with(
        &reader,
        &ChainQuery::default(),
        ExplainOptions {
            per_process: args.per_process,
        },
    )?;
    Ok((summary, e))
}

/// Runs `demo`.
pub fn run(args: &DemoArgs) -> Result<()> {
    if args.list {
        let mut s = String::new();
        for sc in Scenario::ALL {
            s.push_str(&format!("{:<22} {}\n", sc.name(), sc.description()));
        }
        return crate::print_text(&s);
    }
    let scenario = Scenario::parse(&args.scenario).ok_or_else(|| {
        anyhow!(
            "unknown demo scenario '{}'\nhint: one of {}; `causeway demo --list` describes them",
            args.scenario,
            Scenario::ALL.map(|s| s.name()).join(", ")
        )
    })?;
    let (path, temporary) = match &args.db {
        Some(p) => (p.clone(), false),
        None => (
            std::env::temp_dir().join(format!(
                "causeway-demo-{}-{}.duckdb",
                std::process::id(),
                scenario.name()
            )),
            true,
        ),
    };
    let result = generate_and_explain(&path, scenario, args, temporary);
    if temporary {
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(path.with_extension("duckdb.wal"));
    }
    let (summary, e) = result?;
    if args.json {
        return crate::print_json(&e);
    }
    let mut text = format!(
        "demo scenario {}{}: {} events on {} node(s){}\n\n",
        scenario.name(),
        if args.healthy {
            " (healthy baseline)"
        } else {
            ""
        },
        summary.events,
        summary.nodes,
        args.db
            .as_ref()
            .map(|p| format!(", kept in {}", p.display()))
            .unwrap_or_default()
    );
    text.push_str(&render_text(&e));
    crate::print_text(&text)
}
