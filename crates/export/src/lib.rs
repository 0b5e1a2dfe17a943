//! causeway's exports for existing tools: Perfetto / Chrome trace-event JSON ([`perfetto`]),
//! the Prometheus text exposition served at `/metrics` ([`prometheus`]) and OTLP metrics and
//! logs ([`otlp`]); both metric exports read the same [`gather`]ed facts.
//! Everything is read through the store's locked-down [`causeway_store::Reader`].

pub mod gather;
pub mod otlp;
pub mod perfetto;
pub mod prometheus;
pub mod stacks;

pub use perfetto::{PerfettoOptions, PerfettoSummary, write_perfetto};

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Reading the trace failed.
    #[error(transparent)]
    Store(#[from] causeway_store::StoreError),
    /// Writing the output failed.
    #[error("cannot write the export: {0}")]
    Write(String),
}

impl causeway_hint::Hint for ExportError {
    /// What to do about it, when there is a fix.
    fn hint(&self) -> Option<String> {
        match self {
            Self::Write(..) => Some("check the output path and free space".to_string()),
            Self::Store(e) => e.hint(),
        }
    }
}

causeway_hint::register!(ExportError);

/// Maps a DuckDB error of a compiled-in query to the store's error, naming the file and action.
pub(crate) fn duck<'r>(
    r: &'r causeway_store::Reader,
    action: &'static str,
) -> impl Fn(causeway_store::duckdb::Error) -> causeway_store::StoreError + 'r {
    move |source| causeway_store::StoreError::Duck {
        path: r.path().to_path_buf(),
        action,
        source,
    }
}
