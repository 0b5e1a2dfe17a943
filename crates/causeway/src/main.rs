//! The `causeway` binary: the command-line interface for people, and (with `mcp`) the
//! read-only MCP server for agents. Every command is a thin layer over the library crates.

mod cmd;
mod flags;
mod output;
mod prices;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// Explains why GPU workloads are slow: eBPF traces of CUDA, driver, NCCL and host events in a
/// DuckDB trace store, causal analysis, and a read-only MCP server for agents.
#[derive(Debug, Parser)]
#[command(name = "causeway", version, about, long_about = None, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Import traces other tools recorded into a causeway store: reference-tool SQLite traces,
    /// Nsight Systems SQLite exports, PyTorch profiler (Kineto) traces.
    Import(cmd::import::ImportArgs),
    /// Merge the stores of several nodes into one cluster store (clock offsets estimated).
    Merge(cmd::merge::MergeArgs),
    /// Per-op counts, exact percentiles, off-CPU totals and drops of a trace.
    Stats(cmd::stats::StatsArgs),
    /// Run one read-only SQL query against a trace.
    Query(cmd::query::QueryArgs),
    /// Explain why the workload was slow: ranked causal chains with timeline, root cause and fix.
    Explain(cmd::explain::ExplainArgs),
    /// Write a self-contained HTML report: findings, time budgets, timeline, latency
    /// distributions, top kernels and stacks, and the trace's facts (no network needed).
    Report(cmd::report::ReportArgs),
    /// Ask every serving node one question (sql, stats, chains, overview); CLI twin of query_fleet.
    Fleet(cmd::fleet::FleetCmdArgs),
    /// Export a trace for other tools: Perfetto / Chrome trace-event JSON, or OTLP metrics and
    /// logs pushed to an OpenTelemetry Collector (or written as protobuf files).
    Export(cmd::export::ExportArgs),
    /// Generate a realistic synthetic trace for a scenario (no root, no GPU) and explain it.
    Demo(cmd::demo::DemoArgs),
    /// Serve a trace read-only to MCP clients (stdio by default, or streamable HTTP).
    Mcp(cmd::mcp::McpArgs),
    /// Serve a recorded trace over HTTP: MCP, the query API (/api/v1) and /metrics.
    Serve(cmd::mcp::ServeArgs),
    /// Receive OTLP from many agents into one cluster store and serve MCP over it (token required).
    Collect(cmd::collect::CollectArgs),
    /// Top call stacks by total time for an op, process and window.
    Stacks(cmd::stacks::StacksArgs),
    /// Training steps: step times, where each step's time went, the slowest steps and why.
    Steps(cmd::steps::StepsArgs),
    /// Compare two runs step for step: why is this run's step slower than that one's.
    Diff(cmd::diff::DiffArgs),
    /// Traces the MCP server can open: the --db trace and the traces directories.
    Traces(cmd::traces::TracesArgs),
    /// One trace: time span, nodes, processes, events per source, drops.
    Describe(cmd::traces::DescribeArgs),
    /// Run every MCP tool once on a trace and write the self-test report.
    Selftest(cmd::traces::SelftestArgs),
    /// Record a trace with eBPF (root): CUDA runtime/driver/NCCL calls and host events; --listen
    /// also serves it over MCP while it records.
    Trace(cmd::trace::TraceCmd),
    /// Record always (root): rolling segments with retention from one config file, serving
    /// and pushing like `trace`; `--check-config` validates the file.
    Agent(cmd::agent::AgentArgs),
    /// Check this machine for tracing: kernel, BTF, privileges, NVIDIA driver, CUDA libraries.
    Check(cmd::check::CheckArgs),
}

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
