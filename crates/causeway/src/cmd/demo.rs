//! `causeway demo`: writes a realistic synthetic trace for a scenario through the collector's
//! store writer (no root, no GPU) and prints the explain report for it (the CLI twin of the
//! `run_demo` tool: both call `causeway_tools::demo::generate`).

use anyhow::Result;
use causeway_analysis::ExplainOptions;
use causeway_demo::Scenario;
use causeway_hint::Hint as _;
use causeway_tools::demo::{generate, scenario};

/// Arguments of `causeway demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Scenario to generate (see --list).
    #[arg(value_name = "SCENARIO", default_value = "incident")]
    pub scenario: String,
    /// Keep the trace: -o/--output OUT.duckdb (default: a temporary file, removed afterwards).
    #[command(flatten)]
    pub out: crate::cli::OutputArgs,
    /// Replace the output if it exists.
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

/// Runs `demo`.
pub fn run(args: &DemoArgs) -> Result<()> {
    if args.list {
        let mut s = String::new();
        for sc in Scenario::ALL {
            s.push_str(&format!("{:<22} {}\n", sc.name(), sc.description()));
        }
        return crate::print_text(&s);
    }
    let scenario = scenario(&args.scenario).map_err(|e| {
        anyhow::anyhow!(causeway_store::Hinted::new(
            e.message(),
            format!(
                "{}; `causeway demo --list` describes them",
                e.hint().unwrap_or_default()
            )
        ))
    })?;
    let kept = args.out.path("demo");
    let (path, temporary) = match &kept {
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
    let result = generate(
        &path,
        scenario,
        args.healthy,
        args.force || temporary,
        ExplainOptions {
            per_process: args.per_process,
        },
    );
    if temporary {
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(path.with_extension("duckdb.wal"));
    }
    let run = result?;
    let (summary, e) = (run.summary, run.explain);
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
        kept.as_ref()
            .map(|p| format!(", kept in {}", p.display()))
            .unwrap_or_default()
    );
    text.push_str(&causeway_tools::print::explain::report(&e, false));
    crate::print_text(&text)
}
