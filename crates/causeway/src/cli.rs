//! The command line: the commands (each command's own arguments are beside its code in `cmd/`)
//! and the options several commands share, with their resolution into the library crates'
//! types: the window (`--since/--from/--until/--pid/--node`), the output file (`-o`), the fleet
//! (`--nodes` with TLS and token) and OTLP push (`--otlp-endpoint`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use causeway_analysis::{StatsQuery, WindowSpec};
use causeway_client::fleet::{Fleet, read_token, tls_config};
use causeway_client::otlp_push::{Protocol, Target};
use clap::{Parser, Subcommand};

use crate::cmd;

/// Explains why GPU workloads are slow: eBPF traces of CUDA, driver, NCCL and host events in a
/// DuckDB trace store, causal analysis, and a read-only MCP server for agents.
#[derive(Debug, Parser)]
#[command(name = "causeway", version, about, long_about = None, arg_required_else_help = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
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

/// Time window and filters shared by the analysis commands.
#[derive(Debug, Clone, clap::Args)]
pub struct WindowArgs {
    /// Only the last DURATION of the trace (anchored to its end), e.g. 5m, 30s.
    #[arg(long, value_name = "DURATION", conflicts_with_all = ["from", "until"])]
    pub since: Option<String>,
    /// Window start: ns since epoch, RFC 3339, +DURATION after the trace start, -DURATION before its end.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub from: Option<String>,
    /// Window end (same forms as --from).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub until: Option<String>,
    /// Only this process.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Only this node.
    #[arg(long)]
    pub node: Option<String>,
}

impl WindowArgs {
    /// The same window as the MCP tools take it.
    pub fn to_params(&self) -> causeway_tools::params::WindowParams {
        causeway_tools::params::WindowParams {
            since: self.since.clone(),
            from: self.from.clone(),
            until: self.until.clone(),
            pid: self.pid,
            node: self.node.clone(),
        }
    }

    /// The analysis query these arguments describe.
    pub fn to_query(&self) -> Result<StatsQuery> {
        Ok(StatsQuery {
            pid: self.pid,
            node: self.node.clone(),
            window: WindowSpec::from_args(
                self.since.as_deref(),
                self.from.as_deref(),
                self.until.as_deref(),
            )?,
        })
    }
}

/// The file a command writes: `-o/--output` for every command that writes one (import, demo,
/// merge, export). `--db` was import's and demo's spelling; it still works, with a warning.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputArgs {
    /// The file to write (through a temporary sibling, renamed into place when complete).
    #[arg(short = 'o', long = "output", value_name = "OUT.duckdb")]
    pub output: Option<std::path::PathBuf>,
    /// Deprecated spelling of -o/--output.
    #[arg(
        long = "db",
        hide = true,
        conflicts_with = "output",
        value_name = "OUT.duckdb"
    )]
    pub db: Option<std::path::PathBuf>,
}

impl OutputArgs {
    /// The path given, warning once on stderr when it came as `--db`.
    pub fn path(&self, command: &str) -> Option<std::path::PathBuf> {
        if let Some(db) = &self.db {
            eprintln!(
                "warning: `causeway {command} --db` is deprecated: it names the output, so use -o/--output"
            );
            return Some(db.clone());
        }
        self.output.clone()
    }
}

/// Where the fleet is and how to reach it (shared by `query`/`explain`/`fleet --nodes` and
/// `mcp --nodes`, whose token option is the server's own).
#[derive(Debug, Clone, clap::Args)]
pub struct FleetConn {
    /// Ask these serving nodes (`causeway serve`, `trace --listen`) in parallel:
    /// comma-separated `https://host:port` or `host:port`; results carry each node.
    #[arg(long, value_delimiter = ',', value_name = "NODES")]
    pub nodes: Vec<String>,
    /// With --nodes: CA certificate(s) to trust for https nodes (PEM).
    #[arg(long, value_name = "PEM", requires = "nodes")]
    pub ca_cert: Option<PathBuf>,
    /// With --nodes: client certificate for mTLS (PEM); needs --client-key.
    #[arg(long, value_name = "PEM", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// With --nodes: the client certificate's key (PEM).
    #[arg(long, value_name = "PEM", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// With --nodes: give up on a node after this long (e.g. 5s).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub node_timeout: Duration,
}

impl FleetConn {
    /// The fleet these options describe with `token` (reads the TLS files).
    pub fn fleet(&self, token: Option<String>) -> Result<Fleet> {
        let tls = match &self.ca_cert {
            Some(ca) => Some(Arc::new(tls_config(
                ca,
                self.client_cert.as_ref().zip(self.client_key.as_ref()),
            )?)),
            None => None,
        };
        Ok(Fleet {
            nodes: self.nodes.clone(),
            token,
            tls,
            timeout: self.node_timeout,
        })
    }
}

/// The fleet options of the client commands (`query`, `explain`, `fleet`).
#[derive(Debug, Clone, clap::Args)]
pub struct FleetArgs {
    #[command(flatten)]
    pub conn: FleetConn,
    /// With --nodes: file holding the bearer token (else $CAUSEWAY_TOKEN).
    #[arg(long, value_name = "FILE", requires = "nodes")]
    pub token_file: Option<PathBuf>,
}

impl FleetArgs {
    /// Whether --nodes was given.
    pub fn given(&self) -> bool {
        !self.conn.nodes.is_empty()
    }

    /// The fleet these options describe (reads the token and TLS files).
    pub fn fleet(&self) -> Result<Fleet> {
        self.conn.fleet(read_token(self.token_file.as_deref())?)
    }
}

/// OTLP transport, as the CLI spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (the collector's port 4318).
    Http,
    /// OTLP/gRPC (the collector's port 4317).
    Grpc,
}

impl From<OtlpProtocol> for Protocol {
    fn from(p: OtlpProtocol) -> Protocol {
        match p {
            OtlpProtocol::Http => Protocol::Http,
            OtlpProtocol::Grpc => Protocol::Grpc,
        }
    }
}

/// `causeway trace` options: push OTLP metrics while recording.
#[derive(Debug, Clone, clap::Args)]
pub struct PushFlags {
    /// Push cumulative OTLP metrics to this receiver every --otlp-interval while recording,
    /// and metrics and causal chains (logs) once more at the end; a failed push is a warning.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// OTLP transport.
    #[arg(long, value_enum, default_value = "http", requires = "otlp_endpoint")]
    pub otlp_protocol: OtlpProtocol,
    /// Time between pushes.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s", requires = "otlp_endpoint")]
    pub otlp_interval: Duration,
    /// File holding the receiver's bearer token (else $CAUSEWAY_TOKEN).
    #[arg(long, value_name = "FILE", requires = "otlp_endpoint")]
    pub otlp_token_file: Option<std::path::PathBuf>,
    /// CA certificate(s) to trust for an https receiver (PEM).
    #[arg(long, value_name = "PEM", requires = "otlp_endpoint")]
    pub otlp_ca_cert: Option<std::path::PathBuf>,
}

impl PushFlags {
    /// The receiver these flags name, if any (reads the token and CA files now).
    pub fn target(&self) -> Result<Option<Target>> {
        let Some(url) = &self.otlp_endpoint else {
            return Ok(None);
        };
        if self.otlp_interval < Duration::from_millis(100) {
            bail!(causeway_store::Hinted::new(
                format!("--otlp-interval {:?} is too short", self.otlp_interval),
                "use 1s or more, e.g. --otlp-interval 10s"
            ));
        }
        let timeout = self
            .otlp_interval
            .clamp(Duration::from_secs(1), Duration::from_secs(10));
        Ok(Some(Target::new(
            url,
            self.otlp_protocol.into(),
            read_token(self.otlp_token_file.as_deref())?,
            self.otlp_ca_cert.as_deref(),
            timeout,
        )?))
    }
}
