//! `causeway fleet`: the CLI twin of the `query_fleet` MCP tool (the same function, through the
//! same registry): one question to every serving node, answers merged with a node column.

use causeway_hint::Hint as _;
use std::path::PathBuf;

use anyhow::Result;
use causeway_tools::Context;
use causeway_tools::fleet::FleetAction;

/// Arguments of `causeway fleet`.
#[derive(Debug, clap::Args)]
pub struct FleetCmdArgs {
    /// sql, stats (per-op rows with slow-node outliers), chains (ranked together) or overview.
    #[arg(value_enum)]
    pub action: Action,
    /// For sql: one read-only query, run on every node.
    pub sql: Option<String>,
    #[command(flatten)]
    pub fleet: crate::cli::FleetArgs,
    /// Rows per node (sql, default 100) or chains in all (chains, default 5).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Last DURATION of each trace (stats, chains), e.g. 30s.
    #[arg(long)]
    pub since: Option<String>,
    /// Print the tool's structured JSON.
    #[arg(long)]
    pub json: bool,
}

/// The actions, as the CLI spells them.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Action {
    /// Guarded SQL on every node.
    Sql,
    /// Per-node stats.
    Stats,
    /// Chains of every node, ranked together.
    Chains,
    /// Per-node health.
    Overview,
}

impl From<Action> for FleetAction {
    fn from(a: Action) -> FleetAction {
        match a {
            Action::Sql => FleetAction::Sql,
            Action::Stats => FleetAction::Stats,
            Action::Chains => FleetAction::Chains,
            Action::Overview => FleetAction::Overview,
        }
    }
}

/// Runs `fleet`.
pub fn run(args: &FleetCmdArgs) -> Result<()> {
    if !args.fleet.given() {
        anyhow::bail!(causeway_store::Hinted::new(
            "give the nodes to ask",
            "--nodes host:port,host:port"
        ));
    }
    let ctx = Context::new(PathBuf::from("(fleet)"), Vec::new())
        .with_fleet(causeway_client::fleet::handle(args.fleet.fleet()?));
    let mut params = serde_json::json!({ "action": FleetAction::from(args.action) });
    for (k, v) in [("sql", &args.sql), ("since", &args.since)] {
        if let Some(v) = v {
            params[k] = serde_json::json!(v);
        }
    }
    if let Some(l) = args.limit {
        params["limit"] = serde_json::json!(l);
    }
    let aud = causeway_tools::print::Audience::Person;
    let out = causeway_tools::call_for(&ctx, "query_fleet", params, aud).map_err(|e| {
        anyhow::anyhow!(causeway_store::Hinted::new(
            e.message(),
            e.hint().unwrap_or_default()
        ))
    })?;
    if args.json {
        return crate::print_json(&out.structured);
    }
    crate::print_text(&out.text)
}
