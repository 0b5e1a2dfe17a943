//! `causeway trace --otlp-endpoint`: a thread that pushes cumulative OTLP metrics from the
//! live store every interval while the recording runs, then metrics and the causal chains
//! (logs) once more at the end; a failed push is a warning, never the end of the recording.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};

use super::Target;

/// The pushes of one recording, counted for the log line at the end.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    ok: u64,
    failed: u64,
}

/// Pushes the cumulative metrics of the recording; `gatherer` reads only what was recorded
/// since the previous push.
fn push_metrics_now(
    rt: &tokio::runtime::Runtime,
    ctx: &causeway_tools::Context,
    gatherer: &mut causeway_export::gather::Gatherer,
    target: &Target,
    tally: &mut Tally,
) {
    let req = ctx.with_reader(None, |r| {
        Ok(causeway_export::otlp::metrics_from(
            &gatherer.update(r)?,
            causeway_store::now_ns(),
        ))
    });
    let outcome = match req {
        Ok(req) => rt.block_on(target.push_metrics(req)),
        Err(e) => Err(anyhow!("{}", e.message())),
    };
    match outcome {
        Ok(p) => {
            tally.ok += 1;
            tracing::debug!(bytes = p.bytes, rejected = p.rejected, endpoint = %target.url, "pushed OTLP metrics");
        }
        Err(e) => {
            tally.failed += 1;
            tracing::warn!(endpoint = %target.url, "OTLP metrics push failed (recording goes on): {e:#}");
        }
    }
}

/// Starts the thread that pushes metrics from the live trace in `ctx` every `interval` until
/// `done` is set, then pushes metrics and the chains (logs) once more and ends.
pub fn spawn_pusher(
    ctx: Arc<causeway_tools::Context>,
    target: Target,
    interval: Duration,
    done: Arc<std::sync::atomic::AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    use std::sync::atomic::Ordering;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the OTLP push runtime")?;
    std::thread::Builder::new()
        .name("causeway-otlp".into())
        .spawn(move || {
            let mut tally = Tally::default();
            let mut gatherer = causeway_export::gather::Gatherer::default();
            let mut next = std::time::Instant::now() + interval;
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                if std::time::Instant::now() >= next {
                    push_metrics_now(&rt, &ctx, &mut gatherer, &target, &mut tally);
                    next = std::time::Instant::now() + interval;
                }
            }
            push_metrics_now(&rt, &ctx, &mut gatherer, &target, &mut tally);
            let logs = ctx.with_reader(None, |r| {
                Ok(causeway_export::otlp::logs_request(
                    r,
                    &causeway_export::otlp::LogsOptions {
                        prices: ctx.prices().clone(),
                        ..causeway_export::otlp::LogsOptions::default()
                    },
                )?)
            });
            let outcome = match logs {
                Ok(req) => rt.block_on(target.push_logs(req)).map(|_| ()),
                Err(e) => Err(anyhow!("{}", e.message())),
            };
            match outcome {
                Ok(()) => tally.ok += 1,
                Err(e) => {
                    tally.failed += 1;
                    tracing::warn!(endpoint = %target.url, "OTLP logs push failed: {e:#}");
                }
            }
            tracing::info!(ok = tally.ok, failed = tally.failed, endpoint = %target.url, "OTLP pushes done");
            eprintln!(
                "causeway trace: {} OTLP push(es) to {}, {} failed",
                tally.ok + tally.failed,
                target.url,
                tally.failed
            );
        })
        .context("starting the OTLP push thread")
}
