//! What can go wrong while building or writing a report, each with a hint a person can act on.

use causeway_store::StoreError;
use causeway_tools::ToolError;

/// Why a report could not be built or written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Reading the trace failed (bad window, unknown process or node, store error).
    #[error("cannot build the report: {}", .0.message())]
    Build(#[from] ToolError),
    /// Writing the HTML file failed (existing file, missing directory, I/O).
    #[error("cannot write the report: {0}")]
    Write(StoreError),
}

impl ReportError {
    /// A store error met while reading the trace (not while writing the file).
    pub(crate) fn read(e: StoreError) -> Self {
        ReportError::Build(ToolError::from(e))
    }
}

impl causeway_hint::Hint for ReportError {
    /// What to do about it.
    fn hint(&self) -> Option<String> {
        match self {
            ReportError::Build(e) => e.hint(),
            ReportError::Write(e) => Some(e.hint().unwrap_or_else(|| {
                "write to a directory you can write to, e.g. -o ./report.html".into()
            })),
        }
    }
}

causeway_hint::register!(ReportError);
