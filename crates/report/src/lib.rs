//! The self-contained HTML report of a trace (`causeway report`, and the live page every
//! serve address has at `/`): findings, time budgets, a zoomable timeline, latency
//! distributions, top kernels and stacks, and the trace's facts, built from the same
//! functions `explain` and `stats` call, with uPlot and the page script inlined.

pub mod data;
pub mod error;
pub mod html;
pub mod series;

use std::path::Path;
use std::time::Instant;

use causeway_store::{Reader, StoreError};
use causeway_tools::params::WindowParams;

pub use data::{ReportData, build};
pub use error::ReportError;
pub use html::{LIVE_DATA_PATH, Mode, content_security_policy, data_json, render};

/// What writing a report did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Written {
    /// Size of the file (bytes).
    pub bytes: usize,
    /// Time to gather the data and render the page (ms), writing excluded.
    pub build_ms: f64,
}

/// Builds the report of `q` on `reader` (findings priced at `prices`) and writes it to `out` atomically (a temporary
/// sibling renamed into place); an existing `out` is replaced only with `force`.
pub fn write_file(
    reader: &Reader,
    q: &WindowParams,
    prices: &causeway_analysis::cost::Prices,
    out: &Path,
    force: bool,
) -> Result<Written, ReportError> {
    let started = Instant::now();
    let page = render(&build(reader, q, prices)?, Mode::File);
    let build_ms = started.elapsed().as_secs_f64() * 1e3;
    causeway_store::write_atomically(out, force, |tmp| {
        std::fs::write(tmp, page.as_bytes()).map_err(|source| StoreError::Io {
            path: tmp.to_path_buf(),
            action: "writing the report",
            source,
        })
    })
    .map_err(ReportError::Write)?;
    Ok(Written {
        bytes: page.len(),
        build_ms,
    })
}
