//! Exact statistics, causal chains and detectors over a causeway trace: the foundation's exact
//! statistics and time windows, and the causal engine (per-call attribution, rates and change
//! points, detectors, ranked chains) with the demo scenarios that exercise it.

pub mod attribution;
pub mod base;
pub mod budget;
pub mod cadence;
pub mod chains;
pub mod convention;
pub mod cost;
pub mod coverage;
pub mod derive;
pub mod detectors;
pub mod device;
pub mod diff;
pub mod engine;
pub mod facts;
pub mod findings;
pub mod invariants;
pub mod kernels;
pub mod placement;
pub mod probe_overhead;
pub mod rates;
pub mod sites;
pub mod stats;
pub mod step_cost;
pub mod steps;
pub mod timeline;

// The ground floor's modules keep their paths (`causeway_analysis::window`, `crate::scan`).
pub use base::{counts, cursor, fmt, intervals, opsets, scan, switches, window};
pub use budget::{Budget, CallClass};
pub use chains::{Chain, ChainQuery, Severity, TimelineItem, stored_chains};
pub use engine::{Explain, ExplainOptions, ProcessStats, explain, explain_with};
pub use findings::{Findings, FindingsQuery, check_filter, findings};
pub use probe_overhead::{ModeSwitch, Overhead};
pub use stats::{OffCpu, OpStats, StatsQuery, TraceStats, trace_stats};
pub use window::{TimeError, TimeRef, Window, WindowSpec};
