//! `causeway mcp`: serves a finished trace read-only to MCP clients over stdio (default) or
//! streamable HTTP (`--http ADDR`), with a bearer token required off loopback and optional TLS.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use causeway_tools::Context;

use crate::mcp;

/// Arguments of `causeway mcp`.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// The trace store to serve (opened read-only, never written).
    #[arg(long, value_name = "TRACE.duckdb")]
    pub db: PathBuf,
    /// Serve streamable HTTP on this address instead of stdio, e.g. 127.0.0.1:8765.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// More traces agents may open by name: every *.duckdb here (repeatable; default: ./investigations).
    #[arg(long, value_name = "DIR")]
    pub traces_dir: Vec<PathBuf>,
    /// File holding the bearer token (else $CAUSEWAY_TOKEN); required off loopback.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// TLS certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM); needs --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Extra allowed browser Origin, e.g. https://inspector.example:443 (repeatable).
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// Extra allowed Host header name (repeatable; default off loopback: any, token required).
    #[arg(long, value_name = "HOST")]
    pub allow_host: Vec<String>,
    /// Largest HTTP request body in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_body: usize,
}

fn token(args: &McpArgs) -> Result<Option<String>> {
    let raw = match &args.token_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("{}: cannot read the token file", p.display()))?,
        ),
        None => std::env::var("CAUSEWAY_TOKEN").ok(),
    };
    let token = raw.map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
    if let Some(t) = &token
        && t.len() < 16
    {
        bail!(
            "the bearer token is shorter than 16 characters\nhint: generate one with `openssl rand -hex 32`"
        );
    }
    Ok(token)
}

/// The tool context of `mcp` (and of the CLI twins): the trace plus the traces directories.
pub fn context(db: &std::path::Path, traces_dirs: &[PathBuf]) -> Context {
    let dirs = if traces_dirs.is_empty() {
        vec![PathBuf::from("investigations")]
    } else {
        traces_dirs.to_vec()
    };
    Context::new(db.to_path_buf(), dirs).with_checker(super::check::checker())
}

/// Runs `mcp`.
pub fn run(args: &McpArgs) -> Result<()> {
    let ctx = Arc::new(context(&args.db, &args.traces_dir));
    // Open the trace now: a wrong --db fails before a client connects, and the first tool
    // call does not pay for opening DuckDB.
    ctx.with_reader(None, |_| Ok(()))
        .map_err(|e| anyhow::anyhow!("{}\nhint: {}", e.message(), e.hint()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let Some(addr) = args.http else {
        return runtime.block_on(mcp::serve_stdio(ctx));
    };
    let token = token(args)?;
    if !addr.ip().is_loopback() && token.is_none() {
        bail!(
            "refusing to serve {addr} without a bearer token\nhint: set CAUSEWAY_TOKEN or pass --token-file FILE (a loopback address such as 127.0.0.1 needs none)"
        );
    }
    let opts = mcp::http::HttpOptions {
        addr,
        token,
        tls: args.tls_cert.clone().zip(args.tls_key.clone()),
        allowed_origins: args.allow_origin.clone(),
        allowed_hosts: args.allow_host.clone(),
        max_body_bytes: args.max_body,
    };
    runtime.block_on(async move {
        tokio::select! {
            r = mcp::http::serve(ctx, opts, |bound| {
                // The one line a supervisor (or a test) waits for; stderr, never stdout.
                eprintln!("causeway mcp: listening on {bound}");
            }) => r,
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}
