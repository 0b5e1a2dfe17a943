//! `causeway mcp`: serves a trace read-only to MCP clients over stdio (default) or streamable
//! HTTP (`--listen ADDR`), with a bearer token required off loopback and optional TLS; with
//! `--live`, records a new trace in the same process and serves it while it grows.

use causeway_hint::Hint as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use causeway_collector::{TraceArgs, TraceHooks};
use causeway_tools::Context;

use causeway_serve as mcp;

/// How the HTTP transport is exposed (shared by `mcp --listen` and `trace --listen`).
#[derive(Debug, Clone, clap::Args)]
pub struct HttpFlags {
    /// File holding the bearer token (else $CAUSEWAY_TOKEN); required off loopback.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// TLS certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM); needs --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// With TLS: require client certificates signed by this CA (PEM): mutual TLS.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Extra allowed browser Origin, e.g. https://inspector.example:443 (repeatable).
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// Extra allowed Host header name (repeatable; default off loopback: any, token required).
    #[arg(long, value_name = "HOST")]
    pub allow_host: Vec<String>,
    /// Largest HTTP request body in bytes (a larger declared body is answered 413 at once).
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_body: usize,
    /// Open HTTP connections served at once (more are answered 503); at most the process's
    /// open-files limit less 128.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub max_connections: usize,
    /// MCP sessions at once (a new session beyond it is answered 503; initializes arriving
    /// together may pass it by their number); idle sessions close after 5 minutes.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_sessions: usize,
    /// MCP sessions one client (peer address) holds at once; more are answered 503.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_sessions_per_client: usize,
    /// A session no request used after its `initialize` closes after this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub unused_session_timeout: Duration,
    /// Time a client has to send a request's headers; also how long an idle connection stays.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub header_timeout: Duration,
    /// Time a client has to send a whole request body (408 after it).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub body_timeout: Duration,
}

/// Limits of the SQL agents and scripts send (`run_sql`, the query API).
#[derive(Debug, Clone, clap::Args)]
pub struct QueryFlags {
    /// Time limit of one query; a query that ignores its interrupt is answered 0.75 s later
    /// and abandoned.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub query_timeout: Duration,
    /// DuckDB memory limit of the connections serving queries (e.g. 512MB, 2GB); a query is
    /// also stopped when the server's memory passes its size at start plus this plus 1 GiB.
    #[arg(long, value_name = "SIZE", default_value = "2GB")]
    pub query_memory: String,
}

impl QueryFlags {
    /// `ctx` with these limits.
    pub fn apply(&self, ctx: Context) -> Result<Context> {
        let Some(bytes) = causeway_store::guarded::parse_size(&self.query_memory) else {
            bail!(causeway_store::Hinted::new(
                format!("--query-memory '{}' is not a size", self.query_memory),
                "write it as DuckDB takes it, e.g. 512MB or 2GB"
            ));
        };
        if self.query_timeout.is_zero() {
            bail!(causeway_store::Hinted::new(
                "--query-timeout must be more than 0",
                "e.g. --query-timeout 10s"
            ));
        }
        let limits = causeway_store::QueryLimits {
            timeout: self.query_timeout,
            max_rss_bytes: Some(causeway_store::guarded::rss_ceiling_for(bytes)),
            ..causeway_tools::sql::agent_limits()
        };
        let options = causeway_store::ReaderOptions {
            memory_limit: self.query_memory.clone(),
            threads: 1,
        };
        Ok(ctx.with_sql_limits(limits).with_reader_options(options))
    }
}

/// What to record with `--live` (the `causeway trace` options; others keep their defaults).
#[derive(Debug, Clone, clap::Args)]
pub struct LiveFlags {
    /// Record a new trace into --db (root) and serve it while it grows.
    #[arg(long)]
    pub live: bool,
    /// With --live: trace this process (and its children) instead of every CUDA process.
    #[arg(long, requires = "live", conflicts_with = "command")]
    pub pid: Option<u32>,
    /// With --live: stop recording after this long (the server keeps answering).
    #[arg(long, requires = "live", value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// With --live: node name stored with every row.
    #[arg(long, requires = "live")]
    pub node: Option<String>,
    /// With --live: do not record host events.
    #[arg(long, requires = "live")]
    pub no_host: bool,
    /// With --live: also probe NCCL.
    #[arg(long, requires = "live")]
    pub nccl: bool,
    /// With --live: command to start and trace (after `--`).
    #[arg(last = true, value_name = "COMMAND", requires = "live")]
    pub command: Vec<String>,
}

/// Arguments of `causeway mcp`.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// The trace store to serve (opened read-only, never written); with --live, the one to create.
    /// Optional with --nodes (a fleet front-end).
    #[arg(long, value_name = "TRACE.duckdb", required_unless_present = "nodes")]
    pub db: Option<PathBuf>,
    /// Serve streamable HTTP on this address instead of stdio, e.g. 127.0.0.1:8765 (--http is
    /// the old spelling).
    #[arg(long = "listen", visible_alias = "http", value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// More traces agents may open by name: every *.duckdb here (repeatable; default: ./investigations).
    #[arg(long, value_name = "DIR")]
    pub traces_dir: Vec<PathBuf>,
    #[command(flatten)]
    pub http_flags: HttpFlags,
    #[command(flatten)]
    pub query: QueryFlags,
    #[command(flatten, next_help_heading = "Live recording")]
    pub live: LiveFlags,
    /// Fleet: with --nodes, agents also get `query_fleet` over these serving nodes (the bearer
    /// token sent to them is this server's, from --token-file or $CAUSEWAY_TOKEN).
    #[command(flatten, next_help_heading = "Fleet")]
    pub fleet: crate::cli::FleetConn,
}

/// The default trace path of a fleet front-end started without --db: tools that need a local
/// trace fail with this name in their error.
const NO_LOCAL_TRACE: &str = "(no local trace: started with --nodes and no --db)";

fn token(flags: &HttpFlags) -> Result<Option<String>> {
    let token = causeway_client::fleet::read_token(flags.token_file.as_deref())?;
    if let Some(t) = &token
        && t.len() < 16
    {
        bail!(causeway_store::Hinted::new(
            "the bearer token is shorter than 16 characters",
            "generate one with `openssl rand -hex 32`"
        ));
    }
    Ok(token)
}

/// The HTTP options for `addr`; refuses a non-loopback address without a token.
pub fn http_options(addr: SocketAddr, flags: &HttpFlags) -> Result<mcp::http::HttpOptions> {
    let token = token(flags)?;
    if !addr.ip().is_loopback() && token.is_none() {
        bail!(causeway_store::Hinted::new(
            format!("refusing to serve {addr} without a bearer token"),
            "set CAUSEWAY_TOKEN or pass --token-file FILE (a loopback address such as 127.0.0.1 needs none)"
        ));
    }
    Ok(mcp::http::HttpOptions {
        addr,
        token,
        tls: flags.tls_cert.clone().zip(flags.tls_key.clone()),
        client_ca: flags.tls_client_ca.clone(),
        allowed_origins: flags.allow_origin.clone(),
        allowed_hosts: flags.allow_host.clone(),
        max_body_bytes: flags.max_body,
        max_connections: flags.max_connections,
        max_sessions: flags.max_sessions,
        max_sessions_per_client: flags.max_sessions_per_client,
        unused_session_timeout: flags.unused_session_timeout,
        header_timeout: flags.header_timeout,
        body_timeout: flags.body_timeout,
    })
}

/// The tool context of `mcp` (and of the CLI twins): the trace plus the traces directories,
/// with the collector's machine inspection for `get_check` and the configured prices.
pub fn context(db: &std::path::Path, traces_dirs: &[PathBuf]) -> anyhow::Result<Context> {
    let dirs = if traces_dirs.is_empty() {
        vec![PathBuf::from("investigations")]
    } else {
        traces_dirs.to_vec()
    };
    Ok(Context::new(db.to_path_buf(), dirs)
        .with_checker(super::check::checker())
        .with_prices(crate::prices::load()?))
}

/// A multi-threaded runtime for the server (tool calls run on its blocking pool).
pub use causeway_client::runtime;

/// Serves HTTP until Ctrl-C (or `until` resolves), announcing the bound address on stderr.
pub async fn serve_http(
    ctx: Arc<Context>,
    opts: mcp::http::HttpOptions,
    what: &'static str,
    until: impl std::future::Future<Output = ()>,
) -> Result<()> {
    tokio::select! {
        r = mcp::http::serve(ctx, opts, |bound| {
            // The one line a supervisor (or a test) waits for; stderr, never stdout.
            eprintln!("causeway {what}: listening on {bound}");
        }) => r,
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = until => Ok(()),
    }
}

/// The thread recording a live trace; joins with the recording's summary.
pub type Recorder = std::thread::JoinHandle<
    Result<causeway_collector::TraceSummary, causeway_collector::CollectorError>,
>;

/// Starts recording `args` on a thread and returns once the store exists, with its live reader
/// installed in `ctx`, the stop flag, and the recording thread.
pub fn start_live_recording(
    ctx: &Arc<Context>,
    args: TraceArgs,
) -> Result<(Arc<AtomicBool>, Recorder)> {
    start_live_recording_with(ctx, args, None)
}

/// [`start_live_recording`], into rolling segments when `segments` is given (the agent).
pub fn start_live_recording_with(
    ctx: &Arc<Context>,
    args: TraceArgs,
    segments: Option<causeway_collector::SegmentHandle>,
) -> Result<(Arc<AtomicBool>, Recorder)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let live_ctx = ctx.clone();
    let store_ready = ready_tx.clone();
    let rolling = segments.is_some().then(|| args.db.clone());
    let hooks = TraceHooks {
        stop: Some(stop.clone()),
        on_store: Some(Box::new(move |readers| {
            match rolling {
                // Segments: the readers serve the data directory, the trace's name.
                Some(dir) => live_ctx.insert_readers_as(dir, readers),
                None => live_ctx.insert_readers(readers),
            }
            let _ = store_ready.send(());
        })),
        // Serving starts once calls are recorded: an answer never predates the probes.
        on_ready: Some(Box::new(move || {
            let _ = ready_tx.send(());
        })),
        segments,
        // Its queries run in the recording's database: its memory is theirs and the writer's.
        query_memory: Some(ctx.reader_options().memory_limit.clone()),
    };
    let recorder = std::thread::Builder::new()
        .name("causeway-recorder".into())
        .spawn(move || causeway_collector::run_trace_with(&args, hooks))
        .context("starting the recording thread")?;
    // The store first, then the probes.
    if ready_rx.recv().and_then(|()| ready_rx.recv()).is_err() {
        // The recorder ended before creating the store or attaching: its error says why.
        return match recorder.join() {
            Ok(Err(e)) => Err(e.into()),
            Ok(Ok(_)) => bail!("the recording ended before its store was created"),
            Err(_) => bail!("the recording thread panicked"),
        };
    }
    Ok((stop, recorder))
}

fn live_trace_args(args: &McpArgs, db: PathBuf) -> TraceArgs {
    let mut t = TraceArgs::with_db(db);
    let l = &args.live;
    t.pid = l.pid;
    t.duration = l.duration;
    t.node = l.node.clone();
    t.no_host = l.no_host;
    t.nccl = l.nccl;
    t.command = l.command.clone();
    // Over stdio our stdin/stdout are the MCP stream: keep the traced command off them.
    t.stdio_is_protocol = args.http.is_none();
    t
}

/// Runs `mcp`.
pub fn run(args: &McpArgs) -> Result<()> {
    let db = args
        .db
        .clone()
        .unwrap_or_else(|| PathBuf::from(NO_LOCAL_TRACE));
    let mut ctx = args.query.apply(context(&db, &args.traces_dir)?)?;
    if !args.fleet.nodes.is_empty() {
        let token = causeway_client::fleet::read_token(args.http_flags.token_file.as_deref())?;
        ctx = ctx.with_fleet(causeway_client::fleet::handle(args.fleet.fleet(token)?));
    }
    let ctx = Arc::new(ctx);
    let http = args
        .http
        .map(|addr| http_options(addr, &args.http_flags))
        .transpose()?;
    let recording = if args.live.live {
        let Some(db) = args.db.clone() else {
            bail!("--live records into --db: give the file to create");
        };
        Some(start_live_recording(&ctx, live_trace_args(args, db))?)
    } else if args.db.is_none() {
        None
    } else {
        // Open the trace now: a wrong --db fails before a client connects, and the first tool
        // call does not pay for opening DuckDB.
        ctx.with_reader(None, |_| Ok(())).map_err(|e| {
            anyhow::anyhow!(causeway_store::Hinted::new(
                e.message(),
                e.hint().unwrap_or_default()
            ))
        })?;
        None
    };
    let runtime = runtime()?;
    let served = match http {
        None => runtime.block_on(mcp::serve_stdio(ctx)),
        Some(opts) => runtime.block_on(serve_http(ctx, opts, "mcp", std::future::pending())),
    };
    if let Some((stop, recorder)) = recording {
        // The client is gone: end the recording and leave a complete file.
        stop.store(true, Ordering::Relaxed);
        let summary = recorder
            .join()
            .map_err(|_| anyhow::anyhow!("the recording thread panicked"))??;
        tracing::info!(events = summary.events_written, db = %summary.db.display(), "live recording complete");
        eprintln!(
            "causeway mcp: recorded {} events into {}",
            summary.events_written,
            summary.db.display()
        );
    }
    served
}

/// Arguments of `causeway serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The recorded trace to serve (opened read-only).
    #[arg(long, value_name = "TRACE.duckdb")]
    pub db: PathBuf,
    /// Address to listen on, e.g. 0.0.0.0:8765 (a token is required off loopback).
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// More traces agents may open by name: every *.duckdb here (repeatable).
    #[arg(long, value_name = "DIR")]
    pub traces_dir: Vec<PathBuf>,
    #[command(flatten)]
    pub http_flags: HttpFlags,
    #[command(flatten)]
    pub query: QueryFlags,
}

/// Runs `serve`: MCP, the query API (`/api/v1/tools/{name}`, `/api/v1/time`) and `/metrics`
/// over HTTP for a recorded trace, until Ctrl-C.
pub fn run_serve(args: &ServeArgs) -> Result<()> {
    let opts = http_options(args.listen, &args.http_flags)?;
    let ctx = Arc::new(args.query.apply(context(&args.db, &args.traces_dir)?)?);
    ctx.with_reader(None, |_| Ok(())).map_err(|e| {
        anyhow::anyhow!(causeway_store::Hinted::new(
            e.message(),
            e.hint().unwrap_or_default()
        ))
    })?;
    runtime()?.block_on(serve_http(ctx, opts, "serve", std::future::pending()))
}
