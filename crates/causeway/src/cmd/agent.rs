//! `causeway agent`: records always, from one TOML file, into rolling segments with retention,
//! serving and pushing like `trace --listen --otlp-endpoint`. `--check-config` validates the
//! file and prints the effective configuration; SIGHUP reloads what can change while it runs
//! (segments, retention, the served window); SIGTERM and SIGINT end it cleanly.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use anyhow::{Result, bail};
use causeway_collector::SegmentPolicy;
use causeway_store::Hinted;
use tracing::{info, warn};

use super::mcp::{context, http_options};
use crate::settings::{AgentConfig, load, restart_only};

/// Arguments of `causeway agent`.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// The configuration file (TOML; docs/agent.md lists every key).
    #[arg(long, value_name = "FILE", default_value = "/etc/causeway/agent.toml")]
    pub config: PathBuf,
    /// Validate the file, print the effective configuration (every default filled in) on
    /// stdout, and exit.
    #[arg(long)]
    pub check_config: bool,
}

/// Reloads the file on SIGHUP: applies segments, retention and serve.window; warns about the
/// rest, which a restart applies.
fn watch_sighup(path: PathBuf, running: AgentConfig, policy: Arc<RwLock<SegmentPolicy>>) {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP]) else {
        warn!("SIGHUP cannot be caught: the configuration is not reloaded");
        return;
    };
    std::thread::Builder::new()
        .name("causeway-sighup".into())
        .spawn(move || {
            for _ in signals.forever() {
                match load(&path) {
                    Ok(new) => {
                        *policy.write().unwrap_or_else(|p| p.into_inner()) = new.policy.clone();
                        if restart_only(&new.config) != restart_only(&running) {
                            warn!(config = %path.display(), "reloaded segments and retention; other changes apply at the next restart");
                        } else {
                            info!(config = %path.display(), ?new.policy, "configuration reloaded");
                        }
                    }
                    Err(e) => warn!(config = %path.display(), error = %e, "reloading the configuration failed; the running one stays"),
                }
            }
        })
        .map(drop)
        .unwrap_or_else(|e| warn!(error = %e, "starting the SIGHUP thread failed"));
}

/// Runs `agent`.
pub fn run(args: &AgentArgs) -> Result<()> {
    let agent = load(&args.config)?;
    if args.check_config {
        let text = toml::to_string_pretty(&agent.config)?;
        return crate::print_text(&text);
    }
    if let Err(e) = std::fs::create_dir_all(&agent.config.data_dir) {
        bail!(Hinted::new(
            format!("data_dir {}: {e}", agent.config.data_dir.display()),
            "create it, or give the agent write access to it"
        ));
    }
    let policy = Arc::new(RwLock::new(agent.policy.clone()));
    watch_sighup(args.config.clone(), agent.config.clone(), policy.clone());
    let mut ctx = context(&agent.trace.db, &[])?;
    if let Some(p) = &agent.config.cost {
        ctx = ctx.with_prices(p.clone());
    }
    let opts = match &agent.serve {
        Some((addr, http, query)) => {
            ctx = query.apply(ctx)?;
            Some(http_options(*addr, http)?)
        }
        None => None,
    };
    let push = match &agent.push {
        Some(p) => p.target()?.map(|t| (t, p.otlp_interval)),
        None => None,
    };
    info!(data_dir = %agent.config.data_dir.display(), "agent recording");
    let summary = super::trace::record(agent.trace, ctx, opts, push, Some(policy), "agent")?;
    crate::print_json(&summary)
}
