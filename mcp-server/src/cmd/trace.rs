//! `causeway trace`: records with the collector; with `--listen ADDR` the same process also
//! serves MCP over streamable HTTP from the growing store (live investigation), and with
//! `--otlp-endpoint URL` it pushes OTLP metrics from the growing store while it records.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use causeway_collector::TraceArgs;

use super::mcp::{HttpFlags, context, http_options, runtime, serve_http, start_live_recording};

/// Arguments of `causeway trace`.
#[derive(Debug, clap::Args)]
pub struct TraceCmd {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Also serve MCP, the query API and /metrics over HTTP on ADDR while recording (e.g.
    /// 127.0.0.1:8765; --serve is the old spelling).
    #[arg(long = "listen", visible_alias = "serve", value_name = "ADDR")]
    pub serve: Option<SocketAddr>,
    #[command(flatten, next_help_heading = "Serving (with --listen)")]
    pub http: HttpFlags,
    #[command(flatten, next_help_heading = "OTLP push (with --otlp-endpoint)")]
    pub otlp: crate::flags::PushFlags,
}

fn finish(args: &TraceCmd, summary: &causeway_collector::TraceSummary) -> Result<()> {
    if args.trace.json {
        Ok(())
    } else {
        crate::print_json(summary)
    }
}

/// Runs `trace`: the summary goes to stdout as JSON unless events stream there (`--json`).
pub fn run(args: &TraceCmd) -> Result<()> {
    let push = args.otlp.target()?;
    if args.serve.is_none() && push.is_none() {
        let summary = causeway_collector::run_trace(&args.trace)?;
        return finish(args, &summary);
    }
    let opts = args
        .serve
        .map(|a| http_options(a, &args.http))
        .transpose()?;
    let ctx = Arc::new(context(&args.trace.db, &[]));
    let (stop, recorder) = start_live_recording(&ctx, args.trace.clone())?;
    let pushed = Arc::new(AtomicBool::new(false));
    let pusher = push
        .map(|t| {
            causeway_client::otlp_push::live::spawn_pusher(
                ctx.clone(),
                t,
                args.otlp.otlp_interval,
                pushed.clone(),
            )
        })
        .transpose()?;
    let Some(opts) = opts else {
        let summary = recorder
            .join()
            .map_err(|_| anyhow::anyhow!("the recording thread panicked"));
        pushed.store(true, Ordering::Relaxed);
        if let Some(p) = pusher {
            let _ = p.join();
        }
        return finish(args, &summary??);
    };
    let runtime = runtime()?;
    // Serve until the recording ends (duration, Ctrl-C, the command's exit): the server and
    // the recorder share the process, and the finished file can be served by `causeway mcp`.
    let done = Arc::new(tokio::sync::Notify::new());
    let watcher = {
        let done = done.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let r = recorder.join();
            stop.store(true, Ordering::Relaxed);
            done.notify_one();
            r
        })
    };
    let served = runtime.block_on(serve_http(ctx, opts, "trace", {
        let done = done.clone();
        async move { done.notified().await }
    }));
    stop.store(true, Ordering::Relaxed);
    let summary = watcher
        .join()
        .and_then(|r| r)
        .map_err(|_| anyhow::anyhow!("the recording thread panicked"))??;
    pushed.store(true, Ordering::Relaxed);
    if let Some(p) = pusher {
        let _ = p.join();
    }
    served?;
    finish(args, &summary)
}
