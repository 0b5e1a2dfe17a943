//! `causeway collect`: the cluster store. Receives OTLP from many agents (OTLP/HTTP next to MCP
//! on --listen, OTLP/gRPC on --grpc-listen; a bearer token is required), writes one DuckDB
//! store through the single ingest writer, and serves the MCP tools, the query API and
//! /metrics over that store while it grows. Ctrl-C commits what is queued and leaves a
//! complete file.

use causeway_hint::Hint as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use causeway_ingest::{Ingest, IngestOptions, IngestStats};
use causeway_store::WriterOptions;
use causeway_store::received::CollectedStore;
use serde::Serialize;

use super::mcp::{HttpFlags, context, http_options, runtime};
use causeway_serve::http::OtlpRoutes;
use causeway_serve::otlp_receive::{GrpcReceiver, grpc_tls, serve_grpc};

/// Arguments of `causeway collect`.
#[derive(Debug, clap::Args)]
pub struct CollectArgs {
    /// Address for OTLP/HTTP (POST /v1/metrics, /v1/logs), MCP, the query API and /metrics.
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// The cluster store to write (created, or extended when it exists).
    #[arg(long, value_name = "CLUSTER.duckdb")]
    pub db: PathBuf,
    /// Also receive OTLP/gRPC on this address (e.g. 0.0.0.0:4317).
    #[arg(long, value_name = "ADDR")]
    pub grpc_listen: Option<SocketAddr>,
    /// Largest OTLP request body in bytes (HTTP body, gRPC message).
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20)]
    pub max_otlp_body: usize,
    /// Points and records waiting for the writer before senders are told to retry (503 /
    /// UNAVAILABLE).
    #[arg(long, value_name = "ITEMS", default_value_t = 1_000_000)]
    pub queue_items: u64,
    /// DuckDB memory limit of the store (writer and the tools' queries share it); DuckDB's own
    /// default, 80% of RAM, would let its block cache grow with the store. Requests being
    /// decoded hold at most as much again together (more are told to retry).
    #[arg(long, value_name = "SIZE", default_value = "1GB")]
    pub memory_limit: String,
    #[command(flatten)]
    pub http_flags: HttpFlags,
}

/// What `collect` prints on stdout when it stops.
#[derive(Debug, Serialize)]
struct CollectSummary {
    db: PathBuf,
    #[serde(flatten)]
    stats: IngestStats,
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async {
                match term.as_mut() {
                    Some(t) => { t.recv().await; }
                    None => std::future::pending::<()>().await,
                }
            } => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// Runs `collect` until Ctrl-C (or SIGTERM).
pub fn run(args: &CollectArgs) -> Result<()> {
    let opts = http_options(args.listen, &args.http_flags)?;
    let Some(token) = opts.token.clone() else {
        bail!(causeway_store::Hinted::new(
            "causeway collect needs a bearer token: agents send data to it",
            "set CAUSEWAY_TOKEN or pass --token-file FILE (generate one with `openssl rand -hex 32`); agents send it as `Authorization: Bearer <token>`"
        ));
    };
    let f = &args.http_flags;
    let grpc_tls = grpc_tls(
        f.tls_cert.as_deref(),
        f.tls_key.as_deref(),
        f.tls_client_ca.as_deref(),
    )?;
    let writer_opts = WriterOptions {
        node: "collector".into(),
        memory_limit: Some(args.memory_limit.clone()),
        // A cluster store collects for weeks: without reopening, DuckDB's metadata of every
        // row group of metric points written would stay in memory.
        reopen_rows: causeway_store::REOPEN_ROWS,
        ..WriterOptions::default()
    };
    let store = if args.db.exists() {
        CollectedStore::open(&args.db, writer_opts)
    } else {
        CollectedStore::create(&args.db, writer_opts)
    }
    .map_err(|e| {
        if e.hint().is_some() {
            anyhow::Error::new(e)
        } else {
            anyhow::anyhow!(causeway_store::Hinted::new(
                e.to_string(),
                "--db must be a causeway store or a new file, --memory-limit a size such as 1GB"
            ))
        }
    })?;
    let ctx = Arc::new(context(&args.db, &[])?);
    ctx.insert_readers(store.live_readers()?);
    let ingest = Arc::new(
        Ingest::start(
            store,
            IngestOptions {
                max_queued_items: args.queue_items,
                ..IngestOptions::default()
            },
        )
        .context("starting the ingest writer")?,
    );
    let Some(limit) = causeway_store::guarded::parse_size(&args.memory_limit) else {
        bail!(causeway_store::Hinted::new(
            format!("--memory-limit '{}' is not a size", args.memory_limit),
            "e.g. 1GB or 512MB"
        ));
    };
    let budget = causeway_ingest::MemoryBudget::new(limit);
    // One request of the largest body must fit the budget alone; a gRPC message is reserved
    // at its largest before it is decoded, so four fit at once.
    let max_body = args.max_otlp_body.min(budget.largest_body() as usize);
    if max_body < args.max_otlp_body {
        tracing::warn!(
            max_body,
            "--max-otlp-body is more than --memory-limit can decode: lowered"
        );
    }
    let admission = causeway_serve::otlp_receive::GrpcAdmission {
        budget: budget.clone(),
        max_message: max_body.min((budget.largest_body() / 4) as usize),
    };
    let routes = OtlpRoutes {
        ingest: ingest.clone(),
        budget,
        max_body_bytes: max_body,
    };
    let receiver = GrpcReceiver {
        ingest: ingest.clone(),
        token: Arc::from(token.as_str()),
    };
    let served: Result<()> = runtime()?.block_on(async {
        let http = causeway_serve::http::serve_with(ctx, opts, Some(routes), |bound| {
            // The line a supervisor (or a test) waits for; stderr, never stdout.
            eprintln!("causeway collect: listening on {bound}");
        });
        let grpc = async {
            match args.grpc_listen {
                Some(addr) => {
                    serve_grpc(addr, receiver, grpc_tls, admission, |b| {
                        eprintln!("causeway collect: OTLP/gRPC listening on {b}")
                    })
                    .await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = http => r,
            r = grpc => r,
            _ = shutdown_signal() => Ok(()),
        }
    });
    // Whatever ended the servers: commit what is queued and close the file cleanly.
    let stats = ingest.shutdown()?;
    tracing::info!(
        stored = stats.stored_items,
        busy = stats.requests_busy,
        "collect stopped"
    );
    eprintln!(
        "causeway collect: stored {} points and records in {} ({} requests refused busy, {} invalid, {} unauthorized)",
        stats.stored_items,
        args.db.display(),
        stats.requests_busy,
        stats.requests_invalid,
        stats.requests_unauthorized
    );
    crate::print_json(&CollectSummary {
        db: args.db.clone(),
        stats,
    })?;
    served
}
