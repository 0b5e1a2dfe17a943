//! The `causeway` binary: the command-line interface for people, and (with `mcp`) the
//! read-only MCP server for agents. Every command is a thin layer over the library crates.

mod cli;
mod cmd;
mod output;
mod prices;
mod settings;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use crate::cli::{Cli, Command};

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAUSEWAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()))
        .init();
}

/// Writes data to stdout; a closed pipe (e.g. `| head`) is not an error. Everything passes the
/// sanitiser's final pass (our own colour codes excepted), whoever rendered it.
pub(crate) fn print_text(s: &str) -> Result<()> {
    let s = output::sanitize_terminal(s);
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// Writes pretty JSON and a newline to stdout.
pub(crate) fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    let mut v = serde_json::to_value(v)?;
    causeway_store::sanitize::sanitize_json(&mut v);
    let mut s = serde_json::to_string_pretty(&v)?;
    s.push('\n');
    print_text(&s)
}

/// For commands that write a file through a temporary sibling (import, merge, export, demo,
/// report): on SIGINT, SIGTERM or SIGHUP the unfinished file is removed before the process
/// exits, so an interrupted run leaves nothing behind.
fn remove_unfinished_on_signals() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let removed = causeway_store::remove_unfinished();
            eprintln!("causeway: interrupted; removed {removed} unfinished file(s)");
            // No exit handlers: DuckDB's may run while another thread is inside it.
            signal_hook::low_level::exit(128 + sig);
        }
    });
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    if matches!(
        cli.command,
        Command::Import(_)
            | Command::Merge(_)
            | Command::Export(_)
            | Command::Demo(_)
            | Command::Report(_)
    ) {
        remove_unfinished_on_signals();
    }
    let result = match &cli.command {
        Command::Import(a) => cmd::import::run(a),
        Command::Merge(a) => cmd::merge::run(a),
        Command::Stats(a) => cmd::stats::run(a),
        Command::Query(a) => cmd::query::run(a),
        Command::Explain(a) => cmd::explain::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Export(a) => cmd::export::run(a),
        Command::Fleet(a) => cmd::fleet::run(a),
        Command::Mcp(a) => cmd::mcp::run(a),
        Command::Serve(a) => cmd::mcp::run_serve(a),
        Command::Collect(a) => cmd::collect::run(a),
        Command::Stacks(a) => cmd::stacks::run(a),
        Command::Steps(a) => cmd::steps::run(a),
        Command::Diff(a) => cmd::diff::run(a),
        Command::Traces(a) => cmd::traces::run_traces(a),
        Command::Describe(a) => cmd::traces::run_describe(a),
        Command::Selftest(a) => cmd::traces::run_selftest(a),
        Command::Trace(a) => cmd::trace::run(a),
        Command::Agent(a) => cmd::agent::run(a),
        Command::Check(a) => match cmd::check::run(a) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = format!("{e}");
            for cause in e.chain().skip(1) {
                let c = cause.to_string();
                if !msg.contains(&c) {
                    msg.push_str(&format!(": {c}"));
                }
            }
            eprintln!("error: {}", causeway_store::sanitize::sanitize_text(&msg));
            // Hints are data on the error types (and on `Hinted`, for errors built in place),
            // never parsed out of messages.
            if let Some(h) = causeway_hint::of(&e) {
                eprintln!("hint: {}", causeway_store::sanitize::sanitize_text(&h));
            }
            ExitCode::FAILURE
        }
    }
}
