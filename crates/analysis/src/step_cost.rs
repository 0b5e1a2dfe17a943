//! What a finding costs per training step: its time lost spread over the steps its process
//! recorded (ProfilerStep#N, NVTX) in the part of the window the finding is about, beside the
//! average step ("the DataLoader adds 69 ms to a 175 ms step").

use std::collections::BTreeSet;

use causeway_store::{Reader, StoreError, duckdb};
use serde::{Deserialize, Serialize};

use crate::base::errors::duck;
use crate::chains::Chain;
use crate::counts::lit;
use crate::fmt::dur;
use crate::window::{DEVICE_SCHEMA, Window};

/// A finding's time lost per step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerStep {
    /// Steps of the process in the finding's part of the window, the first and last maybe in
    /// part (its longest series).
    pub steps: u64,
    /// Where they come from: profiler or nvtx.
    pub source: String,
    /// The finding's time lost per step (ns): the time lost over the steps' time in the part
    /// of the window (`in_window_ns`), times the average step (`step_ns` / `steps`).
    pub lost_per_step_ns: i64,
    /// The median step (ns).
    pub median_step_ns: i64,
    /// The steps' time in all (ns), the first and last whole.
    pub step_ns: i64,
    /// The steps' time inside the part of the window (ns): the time lost never exceeds it.
    pub in_window_ns: i64,
    /// The rows behind `steps`, `median_step_ns` and `step_ns`.
    pub evidence_sql: String,
}

/// Fewer steps are no "per step".
const MIN_STEPS: u64 = 3;

/// Per series of annotated steps (profiler, NVTX) inside a range: not the inferred ones a
/// recording or an import stores, whose boundaries are the cadence's guess (within 1% of a
/// step where the loop copies a batch, half a step off where it does not).
const SERIES_SQL: &str = "SELECT pid::UBIGINT, tid::UBIGINT, source, count(*)::UBIGINT AS n,
  median(end_ns - start_ns)::BIGINT, sum(end_ns - start_ns)::BIGINT,
  sum(least(end_ns, $2) - greatest(start_ns, $1))::BIGINT
FROM steps WHERE node = $3 AND end_ns > $1 AND start_ns < $2 AND end_ns > start_ns AND source <> 'inferred'
GROUP BY pid, tid, source ORDER BY n DESC, 1, 2, 3";

/// One series: (pid, tid, source, steps, median ns, total ns, ns inside the range).
type Series = (u64, u64, String, u64, i64, i64, i64);

/// Adds [`PerStep`] to every chain about one process that recorded steps: the chain's scope
/// names it, or it is the only process on the chain's node that recorded any.
pub fn attach(r: &Reader, w: &Window, chains: &mut [Chain]) -> Result<(), StoreError> {
    if r.schema_version() < DEVICE_SCHEMA || chains.is_empty() {
        return Ok(());
    }
    let mut stmt = r.prepare_trusted(SERIES_SQL)?;
    for c in chains.iter_mut() {
        let node = c.scope.as_ref().map_or(c.node.clone(), |s| s.node.clone());
        if node.is_empty() || c.time_lost_ns <= 0 {
            continue;
        }
        let (from, until) = c
            .scope
            .as_ref()
            .and_then(|s| s.during)
            .unwrap_or((w.from_ns, w.until_ns));
        let series: Vec<Series> = stmt
            .query_map(duckdb::params![from, until, node], causeway_store::row)
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "reading the steps behind a finding"))?;
        let pid = match &c.scope {
            Some(s) => u64::from(s.pid),
            None => {
                let pids: BTreeSet<u64> = series.iter().map(|s| s.0).collect();
                match pids.into_iter().collect::<Vec<_>>().as_slice() {
                    [one] => *one,
                    _ => continue,
                }
            }
        };
        // the process's longest series (the query's order)
        let Some((pid, tid, source, n, median, total, inside)) =
            series.into_iter().find(|s| s.0 == pid && s.3 >= MIN_STEPS)
        else {
            continue;
        };
        // a finding spread over threads or processes can lose more than one series holds
        if inside <= 0 || c.time_lost_ns > inside {
            continue;
        }
        // the loss as a share of the steps' time where it was measured, of an average step
        let per_step = c.time_lost_ns as f64 / inside as f64 * (total as f64 / n as f64);
        c.per_step = Some(PerStep {
            steps: n,
            lost_per_step_ns: per_step.round() as i64,
            median_step_ns: median,
            step_ns: total,
            in_window_ns: inside,
            evidence_sql: format!(
                "SELECT count(*) AS steps, median(end_ns - start_ns)::BIGINT AS median_step_ns, sum(end_ns - start_ns) AS step_ns, sum(least(end_ns, {until}) - greatest(start_ns, {from})) AS in_window_ns FROM steps WHERE node = {} AND pid = {pid} AND tid = {tid} AND source = {} AND end_ns > {from} AND start_ns < {until} AND end_ns > start_ns",
                lit(&node),
                lit(&source)
            ),
            source,
        });
    }
    Ok(())
}

/// "69.00 ms of the average 175.00 ms step (178 nvtx steps, median 160.00 ms)": both
/// averages over the same steps, so the share is the finding's share of the steps' time.
pub fn line(p: &PerStep) -> String {
    format!(
        "{} of the average {} step ({} {} steps, median {})",
        dur(p.lost_per_step_ns),
        dur(p.step_ns / p.steps.max(1) as i64),
        p.steps,
        p.source,
        dur(p.median_step_ns)
    )
}
