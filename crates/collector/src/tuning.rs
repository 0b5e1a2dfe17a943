//! Every tuning constant of the recorder, the overhead controller, sampling, the in-situ meter
//! and calibration, in one place, each with why it has its value. Measurements behind them are
//! in docs/benchmarks.md.

// Recording loop (recorder.rs).

/// Longest wait for ring-buffer data: producers submit without wakeups, so the loop polls on a
/// timer; 50 ms keeps the poll thread under 1% of a core when idle.
pub const POLL_MAX_NS: i64 = 50_000_000;
/// Shortest wait, when a sampled op's slice ends sooner: below 1 ms the loop would spin.
pub const POLL_MIN_NS: i64 = 1_000_000;
/// Wait while a detached op's links are going: its detached segment starts once they are gone,
/// and a late start would shorten what the in-situ meter measures.
pub const POLL_SETTLING_NS: i64 = 2_000_000;
/// Small batches are held this long before they go to the writer, so that a fast-waking ring
/// does not flood the channel.
pub const FLUSH_EVERY_MS: u64 = 100;
/// The overhead controller's window and the live summary's refresh.
pub const TICK_EVERY_S: u64 = 1;
/// Counter snapshots (counts, histograms, drops) every this many ticks: finer windows cost
/// rows, coarser ones blur the sampled ops' estimates.
pub const SNAPSHOT_TICKS: u64 = 5;
/// Rescan of /proc/PID/maps for libraries the hook missed (or all of them without the hook).
pub const RESCAN_EVERY_S: u64 = 1;
/// The same in all-process mode, where each rescan reads every process's maps.
pub const RESCAN_EVERY_ALL_S: u64 = 2;
/// Longest wait for old links to go before an op leaving sampled mode is attached again; past
/// it, attaching anyway risks counting some calls twice rather than stalling the loop. A links
/// list takes tens of ms to go (RCU grace periods).
pub const DETACH_WAIT_MAX_S: u64 = 5;

// Overhead controller (overhead_control.rs).

/// Act only when the worst process is above the budget; aim this far below it, so that one
/// noisy window does not bounce an op back and forth.
pub const MARGIN: f64 = 0.8;
/// Move an op back to a more detailed mode only while every process is below this share of the
/// budget.
pub const UPGRADE_BELOW: f64 = 0.5;
/// An op keeps a mode at least this long before it is moved back (ns).
pub const MIN_DWELL_NS: i64 = 10_000_000_000;
/// Only ops that make up at least this share of the worst process's probe time are reduced.
pub const HOT_SHARE: f64 = 0.05;
/// Over budget, the cheapest ops that together cost less than this share of the budget keep
/// their mode: reducing them could not bring the process back under it, and their exact counts
/// are the progress the in-situ meter needs.
pub const EXEMPT_SHARE_OF_BUDGET: f64 = 0.1;
/// Over budget, the host's waits for the GPU (synchronisations and host/device copies) go no
/// lower than aggregate, which keeps their kernel histograms, while together they cost at most
/// this share of the budget, taken of the window's wall time where the process used less CPU
/// (a process waiting for the GPU hardly runs): a long wait that no stored call covers is found
/// from those histograms (gpu_bound), and an entry-only or sampled wait leaves the engine none.
pub const WAIT_SHARE_OF_BUDGET: f64 = 0.5;
/// Probe time below this share of one core (per window) is reported but never acted on: a
/// process that hardly runs would otherwise lose the durations of its rare calls for nothing.
pub const SIGNIFICANT_SHARE_OF_CORE: f64 = 0.001;
/// The most the in-situ measurement may scale an op's calibrated costs by.
pub const MAX_FACTOR: f64 = 10.0;
/// An op the controller does not sample, estimated to cost a process at least this share of
/// the budget, is sampled once to measure its cost on the job: calibration can be several times
/// low on a real job, and cheaper ops could not push the job far over the budget even then.
pub const CHECK_SHARE_OF_BUDGET: f64 = 0.25;
/// Checks start this long into the trace (ns): the modes have settled, and a short job, whose
/// counts stay exact, is not checked at all.
pub const CHECK_AFTER_NS: i64 = 30_000_000_000;
/// The duty of an op under check: half its calls are still counted and timed.
pub const CHECK_DUTY: f64 = DUTY_MAX;
/// A check that has measured nothing by then ends (ns): the job's progress was too irregular.
pub const CHECK_MAX_NS: i64 = 120_000_000_000;
/// Calls per second of its other (not sampled) ops a process needs for a check: they are the
/// progress the in-situ meter compares.
pub const CHECK_MIN_PROGRESS_PER_S: f64 = 20.0;

// Sampled mode (sampling.rs).

/// The shortest attached slice (ns): a few steps of a training loop.
pub const MIN_ON_NS: i64 = 50_000_000;
/// Shortest period (ns): each period attaches and detaches links once, tens of ms each.
pub const MIN_PERIOD_NS: i64 = 1_000_000_000;
/// Longest period (ns): a 5 s counts window holds at least two.
pub const MAX_PERIOD_NS: i64 = 2_500_000_000;
/// Least duty: below 2% a 2.5 s period would hold less than [`MIN_ON_NS`].
pub const DUTY_MIN: f64 = 0.02;
/// Most duty: above 50% sampling saves less than entry-only mode does.
pub const DUTY_MAX: f64 = 0.5;
/// The duty a sampled op gets when forced with `--probe-mode OP=sampled`.
pub const DEFAULT_DUTY: f64 = 0.1;

// In-situ meter (insitu.rs).

/// Segments shorter than this are left out (ns): a few steps at least.
pub const MIN_SEGMENT_NS: i64 = 10_000_000;
/// Segments and progress calls of each kind (attached, detached) before an estimate the
/// controller acts on.
pub const MIN_FOR_COSTS: (u64, f64) = (8, 100.0);
/// The same before the speedup that estimated counts use: a point estimate whose noise averages
/// out over windows, while waiting longer holds the first windows' counts back longer.
pub const MIN_FOR_COUNTS: (u64, f64) = (3, 30.0);
/// The detached / attached progress rate believed: outside it, noise or a phase change.
pub const SPEEDUP_BOUNDS: (f64, f64) = (1.0, 5.0);
/// Standard errors the slowdown's lower bound stays below its point estimate.
pub const CONFIDENCE_SDS: f64 = 2.0;

// Estimated counts (poll.rs).

/// How long a sampled op's counts row waits for its process's speedup (ns), then is estimated
/// at the attached rate: the meter needs 3 slices of each kind, 3-8 s; a process with no other
/// calls never has one.
pub const HOLD_NS: i64 = 20_000_000_000;

/// How far back a sampled op's detached intervals are kept (ns): a process's part of a window
/// is cut when the window ends (5 s, longer on a busy machine), never later.
pub const SAMPLING_HISTORY_NS: i64 = 120_000_000_000;

// Calibration (calibrate.rs).

/// Calls timed per measurement on an emulated first instruction (about 1 us each).
pub const CALLS_FAST: u64 = 2000;
/// Calls timed on a single-stepped one (about 20 us each): fewer, for the same time.
pub const CALLS_SLOW: u64 = 150;
/// Calls before each measurement, not timed: caches and branch predictors warm.
pub const WARMUP: u64 = 20;
/// Interleaved rounds; each cost is the smallest of its rounds (least disturbed by other load).
pub const ROUNDS: usize = 3;
