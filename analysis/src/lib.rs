//! Exact statistics, causal chains and detectors over a causeway trace. The foundation issue
//! provides exact statistics and time windows; the analysis issue adds chains and detectors.

pub mod chains;
pub mod stats;
pub mod window;

pub use chains::{Chain, ChainQuery, Severity, TimelineItem, stored_chains};
pub use stats::{OffCpu, OpStats, StatsQuery, TraceStats, trace_stats};
pub use window::{TimeError, TimeRef, Window, WindowSpec};
