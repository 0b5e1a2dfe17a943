//! `get_steps` (CLI `causeway steps`): the trace's training steps, their step times and where
//! each step's time went, the slowest steps with the finding that explains each, and slow steps
//! that come back every Nth step (`causeway_analysis::steps`).

use causeway_analysis::steps::{DEFAULT_SLOWEST, StepQuery, Steps, steps};
use causeway_store::Reader;

use crate::context::Context;
use crate::error::ToolError;
use crate::params::StepsParams;

/// The steps of one trace: the function `causeway steps` and `get_steps` share.
pub fn steps_for(reader: &Reader, p: &StepsParams) -> Result<Steps, ToolError> {
    let spec = p.window.spec()?;
    causeway_analysis::check_filter(reader, spec, p.window.pid, p.window.node.as_deref())?;
    let q = StepQuery {
        window: spec,
        pid: p.window.pid,
        node: p.window.node.clone(),
        slowest: p.slowest.map_or(DEFAULT_SLOWEST, |n| n as usize),
        explain_slowest: true,
    };
    Ok(steps(reader, &q)?)
}

/// `get_steps`.
pub fn get_steps(ctx: &Context, p: &StepsParams) -> Result<Steps, ToolError> {
    ctx.with_reader(p.trace.as_deref(), |r| steps_for(r, p))
}
