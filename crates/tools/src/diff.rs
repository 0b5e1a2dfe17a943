//! `compare_traces` (CLI `causeway diff`): two runs compared step for step, the difference in
//! step time split into the budget's buckets and the ops that changed
//! (`causeway_analysis::diff`). Each side is read from its own trace, then compared; runs
//! without steps are compared over equal windows of their busiest GPU-calling thread.

use causeway_analysis::diff::{Diff, NoSteps, Side, compare, side, window_side, window_width};
use causeway_analysis::steps::{Feeder, StepQuery, feeder};
use causeway_hint::Hint as _;
use causeway_store::Reader;

use crate::context::Context;
use crate::error::ToolError;
use crate::params::DiffParams;

/// The name a trace goes by in the answer: its file name without the extension (the name
/// `list_traces` gives it).
fn name_of(r: &Reader) -> String {
    let p = r.path();
    p.file_stem()
        .or_else(|| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// Where one side's trace is read: an open reader (the CLI) or the server's pool (the tool).
pub trait Open {
    /// Runs `f` on the side's reader.
    fn read<T>(&self, f: impl FnOnce(&Reader) -> Result<T, ToolError>) -> Result<T, ToolError>;
}

impl Open for Reader {
    fn read<T>(&self, f: impl FnOnce(&Reader) -> Result<T, ToolError>) -> Result<T, ToolError> {
        f(self)
    }
}

/// A trace of the server's context, by name.
struct InContext<'a>(&'a Context, &'a str);

impl Open for InContext<'_> {
    fn read<T>(&self, f: impl FnOnce(&Reader) -> Result<T, ToolError>) -> Result<T, ToolError> {
        self.0.with_reader(Some(self.1), f)
    }
}

fn query(reader: &Reader, pid: Option<u32>) -> Result<StepQuery, ToolError> {
    causeway_analysis::check_filter(reader, Default::default(), pid, None)?;
    Ok(StepQuery {
        pid,
        ..StepQuery::default()
    })
}

/// One side's steps: the series with the most (of `pid` when given), or why it has none.
fn stepped(reader: &Reader, pid: Option<u32>) -> Result<Result<Side, NoSteps>, ToolError> {
    let q = query(reader, pid)?;
    Ok(side(reader, &name_of(reader), &q)?)
}

/// One side's busiest GPU-calling thread, read only where the runs cannot be aligned by step.
fn busiest(reader: &Reader, pid: Option<u32>) -> Result<Option<Feeder>, ToolError> {
    let q = query(reader, pid)?;
    Ok(feeder(reader, &q)?)
}

/// The comparison of two runs: what `causeway diff` and `compare_traces` both return. Step by
/// step where both have steps; else both cut into equal windows of their busiest GPU-calling
/// thread's time.
pub fn compare_runs(
    base: &impl Open,
    base_pid: Option<u32>,
    new: &impl Open,
    new_pid: Option<u32>,
) -> Result<Diff, ToolError> {
    let b = base.read(|r| stepped(r, base_pid))?;
    let n = new.read(|r| stepped(r, new_pid))?;
    let missing = match (b, n) {
        (Ok(b), Ok(n)) => return Ok(compare(&b, &n)),
        (Err(e), _) | (_, Err(e)) => e,
    };
    let fb = base.read(|r| busiest(r, base_pid))?;
    let fnew = new.read(|r| busiest(r, new_pid))?;
    let (Some(fb), Some(fnew)) = (fb, fnew) else {
        return Err(ToolError::failed(
            missing.to_string(),
            missing.hint().unwrap_or_default(),
        ));
    };
    let width = window_width(&fb, &fnew);
    let bw = base.read(|r| Ok(window_side(r, &name_of(r), &fb, width)?))?;
    let nw = new.read(|r| Ok(window_side(r, &name_of(r), &fnew, width)?))?;
    let mut d = compare(&bw, &nw);
    d.notes.insert(
        0,
        format!("{missing} (no ProfilerStep#N, NVTX steps or repeating cadence of GPU calls): both runs compared per window instead"),
    );
    Ok(d)
}

/// `compare_traces`.
pub fn compare_traces(ctx: &Context, p: &DiffParams) -> Result<Diff, ToolError> {
    compare_runs(
        &InContext(ctx, &p.base),
        p.base_pid,
        &InContext(ctx, &p.new),
        p.new_pid,
    )
}
