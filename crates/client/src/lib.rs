//! causeway's clients of other machines: the fleet fan-out (one query-API request to every
//! serving node, clock offsets estimated) and the OTLP sender (`export --format otlp`,
//! `trace --otlp-endpoint`). Both speak HTTP through hyper and rustls.

pub mod fleet;
pub mod otlp_push;

use anyhow::{Context as _, Result};

/// The async runtime of a command that talks to other machines (and of the servers): two
/// worker threads, I/O and timers on.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}
