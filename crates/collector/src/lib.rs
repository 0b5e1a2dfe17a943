//! causeway's collector: finds CUDA libraries, attaches the BPF probes, polls the ring buffer on
//! one thread (which owns the skeleton), and feeds the trace store through a writer thread.
//!
//! Entry points for the binary: [`run_trace`] with [`TraceArgs`] (`causeway trace`) and
//! [`check`] (`causeway check`).

mod attach;
pub mod calibrate;
pub mod check;
pub mod cost;
pub mod discover;
pub mod elfsyms;
mod error;
mod estimate;
pub mod hold;
pub mod host;
mod insitu;
pub mod kernels;
pub mod live;
pub mod nvtx;
pub mod overhead_control;
mod places;
mod poll;
mod probe_mode;
pub mod python;
mod recorder;
mod sampling;
mod segments;
mod sink;
mod stacks;
mod trace;
mod trim;
mod tuning;
mod unwind;
mod windows;

pub use causeway_bpf::load::DEFAULT_RINGBUF_BYTES;
pub use check::{CheckReport, check};
pub use error::CollectorError;
pub use probe_mode::ProbeMode;
pub use segments::{SegmentHandle, SegmentPolicy};
pub use sink::OnStore;
pub use trace::{
    DEFAULT_HOLD_TIMEOUT, DEFAULT_OVERHEAD_BUDGET, DEFAULT_SAMPLE_DUTY_PCT, InSituSummary,
    MapAttach, MapHookSummary, OpSummary, OverheadSummary, PythonSummary, SIGKILL_LOSS_BOUND,
    SegmentsSummary, TraceArgs, TraceHooks, TraceSummary, parse_budget, parse_duty,
    parse_probe_mode, run_trace, run_trace_with,
};
