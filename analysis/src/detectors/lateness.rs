//! Collective lateness, the straggler signal of synchronous jobs: all ranks step at the pace of
//! the slowest, so launch rates look alike, but the slow rank reaches each collective last and
//! barely waits in the synchronisation after it while its peers wait for it. Clock-free: the
//! waits are durations on each node's own clock.
//!
//! Trigger: >= 3 nodes with collectives (the busiest collective-calling process per node; the
//! k-th collective of every node is the same step). Per step, a node whose wait after the
//! collective is a low outlier among the peers (robust z >= 3.5 by MAD and >= 25% under the
//! median) is late. The straggler is the node late most often; it is reported when, from some
//! step on, it is late in >= 4 of the next 5 steps and in >= 60% of all later steps. "Since"
//! is that step's completion time.
//! Time lost: the sum over its late steps of how much later it arrived than the median rank
//! (every peer idles that long). Local cause: its collective-calling thread's off-CPU time per
//! step after the onset (and the task that ran instead), when it explains at least half of the
//! lateness.

use std::collections::BTreeMap;

use causeway_store::StoreError;

use super::straggler::outlier;
use super::{Finding, Input, d, severity, step};
use crate::chains::Chain;
use crate::facts::duck;

const WAITS_SQL: &str = "
WITH c AS (
  SELECT node, pid, tid, timestamp AS t FROM event_data
  WHERE op_id IN (SELECT op_id FROM ops WHERE op IN ('ncclAllReduce', 'ncclBroadcast', 'ncclReduce', 'ncclAllGather', 'ncclReduceScatter'))
    AND timestamp BETWEEN ? AND ?),
s AS (
  SELECT node, tid, timestamp AS t, duration AS d FROM event_data
  WHERE op_id IN (SELECT op_id FROM ops WHERE op IN ('cudaStreamSynchronize', 'cudaDeviceSynchronize', 'cudaEventSynchronize', 'cuStreamSynchronize', 'cuCtxSynchronize'))
    AND timestamp BETWEEN ? AND ?),
w AS (
  SELECT c.node, c.pid, c.tid, c.t, s.d AS wait, s.t + s.d AS done
  FROM c ASOF JOIN s ON c.node = s.node AND c.tid = s.tid AND s.t >= c.t),
busiest AS (
  SELECT node, arg_max(pid, n) AS pid FROM (SELECT node, pid, count(*) AS n FROM w GROUP BY ALL) GROUP BY node)
SELECT w.node, w.tid, w.wait, w.done
FROM w JOIN busiest b ON b.node = w.node AND b.pid = w.pid
ORDER BY w.node, w.t";

const OFF_CPU_SQL: &str = "
SELECT coalesce(sum(duration), 0)::BIGINT, coalesce(sum(duration) FILTER (WHERE arg1 = 0), 0)::BIGINT,
       coalesce(mode(arg0), 0)::BIGINT
FROM event_data WHERE op_id = 100 AND node = ? AND tid = ? AND timestamp BETWEEN ? AND ?";

/// One node's collective-calling thread and its (wait after the collective, completion) per step.
type Waits = (u32, Vec<(i64, i64)>);

/// Steps that must mostly be late right after the onset.
const ONSET_STEPS: usize = 5;
/// Of those, how many must be late.
const ONSET_LATE: usize = 4;
/// Share of all later steps that must be late.
const LATER_SHARE: f64 = 0.6;

fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// The onset of a persistent straggler: (node index, first late step).
fn onset(late: &[Option<usize>], nodes: usize) -> Option<(usize, usize)> {
    let mut counts = vec![0usize; nodes];
    for i in late.iter().flatten() {
        counts[*i] += 1;
    }
    let (cand, _) = counts.iter().enumerate().max_by_key(|c| *c.1)?;
    let is = |k: usize| late[k] == Some(cand);
    (0..late.len().saturating_sub(ONSET_STEPS)).find_map(|k0| {
        let first = (k0..k0 + ONSET_STEPS).filter(|&k| is(k)).count();
        let later = (k0..late.len()).filter(|&k| is(k)).count();
        (is(k0) && first >= ONSET_LATE && later as f64 >= LATER_SHARE * (late.len() - k0) as f64)
            .then_some((cand, k0))
    })
}

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Option<Chain>, StoreError> {
    let ctx = inp.ctx;
    // Peers are needed: single- and two-node traces (most) skip the two scans below.
    if ctx.nodes.len() < 3 {
        return Ok(None);
    }
    let (from, until) = (ctx.window.from_ns, ctx.window.until_ns);
    let rows: Vec<(String, u32, i64, i64)> = ctx
        .r
        .prepare_trusted(WAITS_SQL)?
        .query_map(
            causeway_store::duckdb::params![from, until, from, until],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(ctx.r, "pairing collectives with their waits"))?;
    let mut per: BTreeMap<String, Waits> = BTreeMap::new();
    for (node, tid, wait, done) in rows {
        let e = per.entry(node).or_insert((tid, Vec::new()));
        e.1.push((wait, done));
    }
    let nodes: Vec<(&String, &Waits)> = per.iter().collect();
    if nodes.len() < 3 {
        return Ok(None);
    }
    let steps = nodes.iter().map(|n| n.1.1.len()).min().unwrap_or(0);
    if steps < ONSET_STEPS * 2 {
        return Ok(None);
    }
    let mut late: Vec<Option<usize>> = Vec::with_capacity(steps);
    let mut lateness: Vec<i64> = Vec::with_capacity(steps);
    let mut stamps: Vec<i64> = Vec::with_capacity(steps);
    for k in 0..steps {
        let waits: Vec<i64> = nodes.iter().map(|n| n.1.1[k].0).collect();
        let xs: Vec<f64> = waits.iter().map(|w| *w as f64).collect();
        let med = median(waits.clone());
        let i = outlier(&xs, false);
        late.push(i);
        lateness.push(i.map_or(0, |i| med - waits[i]));
        stamps.push(median(nodes.iter().map(|n| n.1.1[k].1).collect()));
    }
    let Some((who, k0)) = onset(&late, nodes.len()) else {
        return Ok(None);
    };
    let (node, (tid, _)) = (nodes[who].0.clone(), nodes[who].1);
    let late_steps: Vec<usize> = (k0..steps).filter(|&k| late[k] == Some(who)).collect();
    let lost: i64 = late_steps.iter().map(|&k| lateness[k]).sum();
    let typical = median(late_steps.iter().map(|&k| lateness[k]).collect());
    let since = stamps[k0];
    let since_s = (since - from) as f64 / 1e9;
    let share = late_steps.len() as f64 / (steps - k0) as f64 * 100.0;
    let (off, preempted, by): (i64, i64, i64) = ctx
        .r
        .prepare_trusted(OFF_CPU_SQL)?
        .query_row(
            causeway_store::duckdb::params![node, tid, since, until],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .map_err(duck(ctx.r, "reading the straggler's off-CPU time"))?;
    let per_step_off = off / (steps - k0).max(1) as i64;
    let cause = if per_step_off * 2 >= typical {
        format!(
            "its collective-calling thread (tid {tid}) is off the CPU {} per step since then ({} of it preempted; most often by pid {by})",
            d(per_step_off),
            d(preempted / (steps - k0).max(1) as i64)
        )
    } else {
        format!(
            "its thread (tid {tid}) stays on the CPU ({} off-CPU per step): the extra time is its own compute or GPU work",
            d(per_step_off)
        )
    };
    let peers = nodes.len() - 1;
    Ok(Some(
        Finding {
            detector: "straggler",
            node: node.clone(),
            time_lost_ns: lost,
            severity: severity(lost, (until - from).max(1)),
            summary: format!(
                "{node} reaches each collective {} after its {peers} peers since +{since_s:.1}s ({share:.0}% of {} steps): {cause}",
                d(typical),
                steps - k0
            ),
            root_cause: format!(
                "Cross-node straggler: {node} arrives late at the collectives and the whole synchronous job waits for it; locally, {cause}"
            ),
            explanation: format!(
                "From step {k0} (+{since_s:.1}s) on, {node}'s wait after its collectives is a low outlier by median absolute deviation among {} nodes in {} of {} steps: it arrives a median {} after the median rank, so its {peers} peers idle that long at every collective ({} in all). Launch rates stay alike because every rank steps at the straggler's pace.",
                nodes.len(),
                late_steps.len(),
                steps - k0,
                d(typical),
                d(lost)
            ),
            timeline: vec![
                step("NODE", &node, format!("late by {} per step since +{since_s:.1}s", d(typical)), lost),
                step("HOST", "sched_switch", cause.clone(), per_step_off),
                step("NCCL", "ncclAllReduce", format!("{peers} peers wait in the sync after each collective"), lost),
            ],
            recommendations: vec![
                format!("Inspect {node} from +{since_s:.0}s: causeway explain --db TRACE --node {node} --from +{since_s:.0}s (CPU contention, throttling, thermals)."),
                format!("Drain {node} (or move its rank to a spare) until it keeps pace; its peers lose {} per step meanwhile.", d(typical)),
            ],
            evidence_sql: format!(
                "SELECT node, count(*) AS waits, median(duration) AS median_wait_ns, min(duration) AS min_wait_ns FROM events WHERE op IN ('cudaStreamSynchronize', 'cudaDeviceSynchronize') AND timestamp >= {since} GROUP BY node ORDER BY median_wait_ns"
            ),
        }
        .into_chain(),
    ))
}

#[cfg(test)]
mod tests {
    use super::onset;

    #[test]
    fn onset_needs_persistence() {
        let mut late = vec![None; 40];
        late[3] = Some(2);
        late[9] = Some(1);
        assert_eq!(onset(&late, 4), None, "isolated late steps are noise");
        for l in late.iter_mut().skip(20) {
            *l = Some(2);
        }
        late[27] = None;
        assert_eq!(onset(&late, 4), Some((2, 20)));
    }
}
