//! causeway's exports for existing tools: Perfetto / Chrome trace-event JSON ([`perfetto`]) and
//! the Prometheus text exposition served at `/metrics` ([`prometheus`]).
//! Everything is read through the store's locked-down [`causeway_store::Reader`].

pub mod perfetto;
pub mod prometheus;

pub use perfetto::{PerfettoOptions, PerfettoSummary, write_perfetto};

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Reading the trace failed.
    #[error(transparent)]
    Store(#[from] causeway_store::StoreError),
    /// Writing the output failed.
    #[error("cannot write the export: {0}\nhint: check the output path and free space")]
    Write(String),
}
