//! causeway's servers: the read-only MCP server (the rmcp handler over the tools registry,
//! prompts and resources) over stdio or streamable HTTP, the query API, `/metrics` and the
//! live web report (`/`) beside it, and the OTLP receiver of `causeway collect`. Nothing here writes to stdout except the
//! stdio transport itself; logs go to stderr through tracing.

pub mod api;
pub mod handler;
pub mod http;
pub mod limits;
pub mod otlp_receive;
pub mod page;
pub mod report_cache;
pub mod sessions;

use std::sync::Arc;

use anyhow::Result;
use causeway_tools::Context;
use rmcp::ServiceExt;

pub use handler::CausewayServer;

/// Serves MCP over stdin/stdout until the client closes the stream.
pub async fn serve_stdio(ctx: Arc<Context>) -> Result<()> {
    let server = CausewayServer::new(ctx)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("MCP handshake on stdio failed: {e}"))?;
    tracing::info!("MCP over stdio");
    let reason = server.waiting().await?;
    tracing::info!(?reason, "MCP stdio session ended");
    Ok(())
}
