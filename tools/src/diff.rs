//! `compare_traces` (CLI `causeway diff`): two runs compared step for step, the difference in
//! step time split into the budget's buckets and the ops that changed
//! (`causeway_analysis::diff`). Each side is read from its own trace, then compared.

use causeway_analysis::diff::{Diff, Side, compare, side};
use causeway_analysis::steps::StepQuery;
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

/// One side of a comparison: the step series with the most steps (of `pid`, when given).
pub fn side_for(reader: &Reader, pid: Option<u32>) -> Result<Side, ToolError> {
    causeway_analysis::check_filter(reader, Default::default(), pid, None)?;
    let q = StepQuery {
        pid,
        ..StepQuery::default()
    };
    side(reader, &name_of(reader), &q)?.map_err(|e| ToolError::failed(e.to_string(), e.hint()))
}

/// The comparison: what `causeway diff` and `compare_traces` both return.
pub fn diff_of(base: &Side, new: &Side) -> Diff {
    compare(base, new)
}

/// `compare_traces`.
pub fn compare_traces(ctx: &Context, p: &DiffParams) -> Result<Diff, ToolError> {
    let base = ctx.with_reader(Some(&p.base), |r| side_for(r, p.base_pid))?;
    let new = ctx.with_reader(Some(&p.new), |r| side_for(r, p.new_pid))?;
    Ok(diff_of(&base, &new))
}
