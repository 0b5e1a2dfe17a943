//! Collective lateness, the straggler signal of synchronous jobs: all ranks step at the pace of
//! the slowest, so launch rates look alike, but the slow rank reaches each collective last and
//! barely waits in it or in the synchronisation after it while its peers wait for it (NCCL
//! returns from the call and waits on the device, seen in the next sync; a collective that
//! rendezvous on the host waits inside the call: a member's wait is both). Clock-free: the
//! waits are durations on each node's own clock. A member's wait is what it spent waiting for
//! its peers: the time in the collective and the sync after it, less what its thread spent
//! waiting for a CPU there (run-queue latency after a wake-up, preemption), which a rank
//! starved of CPU spends after the others have released it.
//!
//! Members are ranks: every (node, process) that calls collectives (at least half as many as
//! the busiest one), so 8 ranks on one node are 8 members, and a rank is named by its node and,
//! when a node has several, its `RANK` (else its pid). The k-th collective of every member is
//! the same step.
//!
//! With >= 3 members (peer-relative): per step, a member whose wait after the collective is a
//! low outlier among the peers (robust z >= 3.5 by MAD and >= 25% under the median, or below
//! every peer's wait by >= 25% of the median: with few ranks the MAD is the peers' own spread)
//! is late. On one node (one clock) the late member of a step is the one entering the
//! collective last, by at least a quarter of the median member's time in the collective and the
//! sync: its peers' own waits for a CPU after the release, on a busy machine, would otherwise
//! make them look late too.
//! The straggler is the member late most often; it is reported when, from some step on, it is
//! late in >= 4 of the next 5 steps and in >= 60% of all later steps (or, where a busy machine
//! makes every rank late now and then, in >= a third of them and at least twice as often as
//! any other member, where tasks outside the job, not its peers, preempted it).
//! "Since" is that step's
//! completion time. Time lost: the sum over its late steps of how much later it arrived than
//! the median rank (every peer idles that long).
//!
//! With 1 or 2 members there are no peers to compare with, so each falls back to its own
//! baseline: the job's step time (collective cadence) against the median of its first
//! [`BASELINE_STEPS`] steps; a step >= 15% slower is slow, with the same persistence rule for
//! the onset. The slow member is the one whose wait after the collectives shrank the most
//! against its own baseline (it now arrives last); alone, it is the member itself. Time lost:
//! the sum of the slow steps' excess over the baseline.
//!
//! Local cause (both): the member's collective-calling thread's off-CPU time per step after the
//! onset (and the task that ran instead), when it explains at least half of the lateness.

use std::collections::BTreeMap;

use causeway_store::StoreError;
use causeway_store::catalog::{COLLECTIVES_SQL, SYNCS_SQL};

use super::straggler::outlier;
use super::{Finding, Input, d, severity, step};
use crate::base::errors::duck;
use crate::chains::Chain;
use crate::intervals::{Span, overlaps};
use crate::switches::MARGIN_NS;

// Op ids written into this file's SQL as literals.
causeway_ops::sql_id!("sched_switch", 100);
causeway_ops::sql_id!("sched_wakeup", 101);

static WAITS_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "
WITH c AS (
  SELECT node, pid, tid, timestamp AS t, duration AS cd FROM event_data
  WHERE op_id IN (SELECT op_id FROM ops WHERE op IN ({COLLECTIVES_SQL}))
    AND timestamp BETWEEN ? AND ?),
s AS (
  SELECT node, tid, timestamp AS t, duration AS d FROM event_data
  WHERE op_id IN (SELECT op_id FROM ops WHERE op IN ({SYNCS_SQL}))
    AND timestamp BETWEEN ? AND ?),
w AS (
  SELECT c.node, c.pid, c.tid, c.t, c.cd + s.d AS wait, s.t + s.d AS done, c.t + c.cd AS ce, s.t AS st
  FROM c ASOF JOIN s ON c.node = s.node AND c.tid = s.tid AND s.t >= c.t),
members AS (SELECT node, pid, count(*) AS n FROM w GROUP BY ALL),
keep AS (SELECT node, pid FROM members WHERE n * 2 >= (SELECT max(n) FROM members))
SELECT w.node, w.pid, w.tid, w.wait, w.done, p.rank, w.t, w.ce, w.st
FROM w JOIN keep k ON k.node = w.node AND k.pid = w.pid
LEFT JOIN processes p ON p.node = w.node AND p.pid = w.pid
ORDER BY w.node, w.pid, w.t"
    )
});

/// Run-queue latencies after the wake-ups of one thread (the last part of a sleep, spent
/// waiting for a CPU).
pub(crate) const RUN_QUEUE_SQL: &str = "
SELECT timestamp, duration FROM event_data
WHERE op_id = 101 AND duration > 0 AND node = ? AND tid = ? AND timestamp BETWEEN ? AND ?
ORDER BY timestamp";

pub(crate) const OFF_CPU_SQL: &str = "
SELECT coalesce((CASE WHEN sum(duration) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(duration) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(duration) END), 0)::BIGINT, coalesce((CASE WHEN sum(duration) FILTER (WHERE arg1 = 0) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(duration) FILTER (WHERE arg1 = 0) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(duration) FILTER (WHERE arg1 = 0) END), 0)::BIGINT,
       coalesce(mode(arg0), 0)::BIGINT
FROM event_data WHERE op_id = 100 AND node = ? AND tid = ? AND timestamp BETWEEN ? AND ?";

/// One member (rank): its node, pid, RANK if known, collective-calling thread and
/// (wait after the collective, completion) per step.
struct Member {
    node: String,
    pid: u32,
    rank: Option<i32>,
    tid: u32,
    steps: Vec<(i64, i64)>,
    /// Per step, the time its thread waited for a CPU in the collective and the sync.
    cpu: Vec<i64>,
    /// Per step, when it entered the collective, and its time in the collective and the sync
    /// (its CPU waits included).
    entry: Vec<i64>,
    call: Vec<i64>,
}

/// A member's wait parts, two per step (in the collective, in the sync after it).
type WaitSpans = Vec<Span<()>>;

/// The members by (node, pid), each with its wait parts.
type ByMember = BTreeMap<(String, u32), (Member, WaitSpans)>;

/// Steps that must mostly be late right after the onset.
const ONSET_STEPS: usize = 5;
/// Of those, how many must be late.
const ONSET_LATE: usize = 4;
/// Share of all later steps that must be late.
const LATER_SHARE: f64 = 0.6;
/// Or, on a busy machine where every rank waits for a CPU now and then: this share of the
/// later steps, at least [`DOMINANCE`] times as many as any other member's late steps (a
/// starved rank of 4 was late in 44% of 600 steps on a loaded 2-core machine, its peers in 4-19%;
/// on the healthy twin every rank was late in 12-20%).
/// That weaker share counts only over at least half the job's steps: a healthy 4-rank lab job,
/// three ranks sharing a core, once had one of them late in 56 of its last 164 steps of 600;
/// and only for a rank kept from its CPU by tasks outside the job (another time, 154 of
/// its last 412 steps, preempted by two peers on its core: the placement's turn-taking).
const BUSY_SHARE: f64 = 1.0 / 3.0;
const DOMINANCE: usize = 2;
/// Late steps from the onset on, at least: fewer are a hiccup or a job's last steps (a healthy
/// 4-rank lab job once had one rank late in 13 of its last 16 steps, 0.1 s of 4 s).
const MIN_LATE_STEPS: usize = 20;
/// Steps whose median step time is a member's own baseline (fewer than 3 members).
const BASELINE_STEPS: usize = 20;
/// A step this much slower than the baseline is slow (fewer than 3 members).
const SLOWDOWN: f64 = 0.15;

fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// The onset of a persistent straggler: (member index, first late step).
fn onset(late: &[Option<usize>], members: usize) -> Option<(usize, usize)> {
    let mut counts = vec![0usize; members];
    for i in late.iter().flatten() {
        counts[*i] += 1;
    }
    let (cand, _) = counts.iter().enumerate().max_by_key(|c| *c.1)?;
    let is = |k: usize| late[k] == Some(cand);
    (0..late.len().saturating_sub(ONSET_STEPS)).find_map(|k0| {
        if !is(k0) || (k0..k0 + ONSET_STEPS).filter(|&k| is(k)).count() < ONSET_LATE {
            return None;
        }
        let mut after = vec![0usize; members];
        for i in late[k0..].iter().flatten() {
            after[*i] += 1;
        }
        let later = after[cand];
        let share = later as f64 / (late.len() - k0) as f64;
        let others = (0..members).filter(|&i| i != cand).map(|i| after[i]);
        let dominant = others.max().unwrap_or(0) * DOMINANCE <= later;
        let most_of_the_run = (late.len() - k0) * 2 >= late.len();
        (later >= MIN_LATE_STEPS
            && (share >= LATER_SHARE || (share >= BUSY_SHARE && dominant && most_of_the_run)))
            .then_some((cand, k0))
    })
}

/// What was found, before the local cause is looked up.
struct Late {
    /// Index of the straggling member.
    who: usize,
    /// First late step.
    k0: usize,
    /// Its late steps from k0.
    late_steps: usize,
    /// Steps from k0.
    steps_after: usize,
    /// Time lost in all, and typically per late step.
    lost: i64,
    typical: i64,
    /// Completion time of step k0.
    since: i64,
    /// The baseline step time (own-baseline mode only).
    baseline: Option<i64>,
}

/// The member whose wait is below every peer's by at least a quarter of the median wait, if
/// any: with few ranks the MAD is the peers' own spread (ranks sharing a CPU reach the
/// rendezvous in turn), which hides one that all of them wait for.
fn below_all(waits: &[i64], med: i64) -> Option<usize> {
    let mut order: Vec<usize> = (0..waits.len()).collect();
    order.sort_by_key(|&i| waits[i]);
    let (first, second) = (waits[order[0]], waits[*order.get(1)?]);
    (med > 0 && (second - first) * 4 >= med).then_some(order[0])
}

/// Step `k`'s last member to enter the collective and how long after the median member, when
/// that is at least a quarter of the median member's time in the collective and the sync.
fn last_in(members: &[Member], k: usize) -> Option<(usize, i64)> {
    let entries: Vec<i64> = members.iter().map(|m| m.entry[k]).collect();
    let last = (0..members.len()).max_by_key(|&i| entries[i])?;
    let by = entries[last] - median(entries);
    let call = median(members.iter().map(|m| m.call[k]).collect());
    (by > 0 && by * 4 >= call).then_some((last, by))
}

/// Peer-relative: the member that is persistently late. On one node (one clock) that is the
/// member entering the collectives last; across nodes, a low outlier of the waits.
fn by_peers(members: &[Member], steps: usize, stamps: &[i64], one_clock: bool) -> Option<Late> {
    let mut late: Vec<Option<usize>> = Vec::with_capacity(steps);
    let mut lateness: Vec<i64> = Vec::with_capacity(steps);
    for k in 0..steps {
        if one_clock {
            let l = last_in(members, k);
            late.push(l.map(|l| l.0));
            lateness.push(l.map_or(0, |l| l.1));
            continue;
        }
        let waits: Vec<i64> = members.iter().map(|m| m.steps[k].0).collect();
        let xs: Vec<f64> = waits.iter().map(|w| *w as f64).collect();
        let med = median(waits.clone());
        let i = outlier(&xs, false).or_else(|| below_all(&waits, med));
        late.push(i);
        lateness.push(i.map_or(0, |i| med - waits[i]));
    }
    let (who, k0) = onset(&late, members.len())?;
    let late_steps: Vec<usize> = (k0..steps).filter(|&k| late[k] == Some(who)).collect();
    Some(Late {
        who,
        k0,
        late_steps: late_steps.len(),
        steps_after: steps - k0,
        lost: late_steps
            .iter()
            .map(|&k| lateness[k])
            .fold(0, i64::saturating_add),
        typical: median(late_steps.iter().map(|&k| lateness[k]).collect()),
        since: stamps[k0],
        baseline: None,
    })
}

/// Own baseline (1 or 2 members): the job's steps got persistently slower than its first
/// steps; the member whose waits shrank the most is the one now arriving last.
fn by_own_baseline(members: &[Member], steps: usize, stamps: &[i64]) -> Option<Late> {
    if steps < BASELINE_STEPS + 1 + ONSET_STEPS * 2 {
        return None;
    }
    // Step k's time: from the previous completion to this one (k >= 1).
    let step_ns = |k: usize| stamps[k] - stamps[k - 1];
    let baseline = median((1..=BASELINE_STEPS).map(step_ns).collect());
    if baseline <= 0 {
        return None;
    }
    let limit = baseline as f64 * (1.0 + SLOWDOWN);
    let mut late: Vec<Option<usize>> = vec![None; steps];
    for (k, l) in late.iter_mut().enumerate().skip(BASELINE_STEPS + 1) {
        if step_ns(k) as f64 >= limit {
            *l = Some(0);
        }
    }
    let (_, k0) = onset(&late, 1)?;
    let slow: Vec<usize> = (k0..steps).filter(|&k| late[k].is_some()).collect();
    let excess: Vec<i64> = slow.iter().map(|&k| step_ns(k) - baseline).collect();
    // Who arrives last now: the largest drop of the median wait against its own baseline.
    let who = (0..members.len())
        .max_by_key(|&i| {
            let m = &members[i];
            let before = median((1..=BASELINE_STEPS).map(|k| m.steps[k].0).collect());
            let after = median(slow.iter().map(|&k| m.steps[k].0).collect());
            before - after
        })
        .unwrap_or(0);
    Some(Late {
        who,
        k0,
        late_steps: slow.len(),
        steps_after: steps - k0,
        lost: excess.iter().copied().fold(0, i64::saturating_add),
        typical: median(excess),
        since: stamps[k0],
        baseline: Some(baseline),
    })
}

/// Per wait part (`spans`, in step order), the time the member's thread waited for a CPU in
/// it: run-queue latency after a wake-up, or preempted. A rank starved of CPU sleeps in the
/// rendezvous only briefly but waits for a CPU after the release, so its call lasts as long as
/// its peers'; only the rest is waiting for the other ranks.
fn cpu_waits(
    ctx: &crate::facts::Ctx<'_>,
    m: &Member,
    spans: &[Span<()>],
    from: i64,
    until: i64,
) -> Result<Vec<i64>, StoreError> {
    let rows: Vec<(i64, i64)> = ctx
        .r
        .prepare_trusted(RUN_QUEUE_SQL)?
        .query_map(
            causeway_store::duckdb::params![m.node, m.tid, from - MARGIN_NS, until],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(ctx.r, "reading run-queue latencies"))?;
    let mut waiting: Vec<Span<()>> = rows
        .into_iter()
        .map(|(t, d)| Span {
            start: t,
            end: t + d,
            data: (),
        })
        .chain(
            ctx.switches
                .of(&m.node, m.tid)
                .iter()
                .filter(|o| o.data.state == 0)
                .map(|o| Span {
                    start: o.start,
                    end: o.end,
                    data: (),
                }),
        )
        .collect();
    waiting.sort_by_key(|s| s.start);
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| spans[i].start);
    let sorted: Vec<Span<usize>> = order
        .iter()
        .map(|&i| Span {
            start: spans[i].start,
            end: spans[i].end.max(spans[i].start),
            data: i,
        })
        .collect();
    let mut out = vec![0i64; spans.len()];
    overlaps(&sorted, &waiting, |a, _, ns| out[a.data] += ns);
    Ok(out)
}

/// Whether tasks outside the job kept `m`'s collective-calling thread from its CPU from `since`
/// on ([`from_outside`] over its preemptions), against the time its peers lost (`lost`).
fn kept_by_outside(
    ctx: &crate::facts::Ctx<'_>,
    m: &Member,
    members: &[Member],
    since: i64,
    until: i64,
    lost: i64,
) -> bool {
    let peers: std::collections::HashSet<i64> = ctx
        .threads
        .iter()
        .filter(|t| {
            t.node == m.node
                && t.pid != m.pid
                && members.iter().any(|x| x.node == m.node && x.pid == t.pid)
        })
        .map(|t| i64::from(t.tid))
        .collect();
    from_outside(
        ctx.switches
            .of(&m.node, m.tid)
            .iter()
            .filter(|o| o.data.state == 0 && o.start >= since && o.start < until)
            .map(|o| (o.data.ran, o.end - o.start)),
        &peers,
        lost,
    )
}

/// Whether the preemptions `(ran, ns)` were mostly by tasks other than `peers`, and at least 1%
/// of `lost`: the idle task counts for neither (a runnable thread switched out for idle was
/// moved, not kept from a CPU). Under outside load a starved rank's waits for a CPU are mostly
/// run-queue latency, which names no task, so its preemptions are a sample of who ran instead
/// (one loaded run: 114 ms preempted against 1.68 s lost).
fn from_outside(
    preempted: impl Iterator<Item = (i64, i64)>,
    peers: &std::collections::HashSet<i64>,
    lost: i64,
) -> bool {
    let (by_peers, outside) =
        preempted
            .filter(|(ran, _)| *ran != 0)
            .fold((0i64, 0i64), |(p, o), (ran, ns)| {
                if peers.contains(&ran) {
                    (p.saturating_add(ns), o)
                } else {
                    (p, o.saturating_add(ns))
                }
            });
    outside > by_peers && outside.saturating_mul(100) >= lost
}

/// The peer-relative finding's evidence, the detector's steps redone in SQL: per rank, its
/// collectives paired with the sync after each (the k-th of every rank is step k), each step's
/// wait for the peers (both calls, less the thread's waits for a CPU in them), and per step the
/// late rank (a low outlier of the waits by the MAD, else the lowest by a quarter of the
/// median). Per rank from step `k0` on: steps, late steps, the median and sum of how much later
/// than the median rank it arrived in them, its median wait for a CPU, and its thread's
/// off-CPU and preempted time per step since `since`: the summary's figures, the straggler's row.
/// On one node (`one_clock`) the late rank of a step is the last to enter the collective, by at
/// least a quarter of the median rank's time in the collective and the sync.
fn by_peers_evidence(from: i64, until: i64, k0: usize, since: i64, one_clock: bool) -> String {
    let late = if one_clock {
        "v4 AS (SELECT *, t - ts[len(ts) // 2 + 1] AS lateness, t = max(t) OVER (PARTITION BY k) AND t > ts[len(ts) // 2 + 1] AND (t - ts[len(ts) // 2 + 1]) * 4 >= rs[len(rs) // 2 + 1] late \
FROM (SELECT *, list_sort(list(t) OVER (PARTITION BY k)) ts, list_sort(list(cd + sd) OVER (PARTITION BY k)) rs FROM v))"
    } else {
        "v1 AS (SELECT *, median(wait) OVER (PARTITION BY k) mf, list_sort(list(wait) OVER (PARTITION BY k)) ws FROM v), \
v2 AS (SELECT *, ws[len(ws) // 2 + 1] med, median(abs(wait - mf)) OVER (PARTITION BY k) mad FROM v1), \
v3 AS (SELECT *, mf - wait > 0 AND mf - wait >= 0.25 * abs(mf) AND (mad = 0 OR 0.6745 * (mf - wait) / mad >= 3.5) o FROM v2), \
v4 AS (SELECT *, med - wait AS lateness, CASE WHEN bool_or(o) OVER (PARTITION BY k) THEN o AND mf - wait = max(mf - wait) FILTER (WHERE o) OVER (PARTITION BY k) ELSE med > 0 AND (ws[2] - ws[1]) * 4 >= med AND wait = ws[1] END late FROM v3)"
    };
    format!(
        "WITH c AS (SELECT node, pid, tid, timestamp t, duration cd FROM events WHERE op IN ({COLLECTIVES_SQL}) AND timestamp BETWEEN {from} AND {until}), \
s AS (SELECT node, tid, timestamp st, duration sd FROM events WHERE op IN ({SYNCS_SQL}) AND timestamp BETWEEN {from} AND {until}), \
cs AS (SELECT c.*, (SELECT min(st) FROM s WHERE s.node = c.node AND s.tid = c.tid AND s.st >= c.t) st FROM c), \
w0 AS (SELECT cs.*, (SELECT max(sd) FROM s WHERE s.node = cs.node AND s.tid = cs.tid AND s.st = cs.st) sd FROM cs WHERE st IS NOT NULL), \
n AS (SELECT node, pid, count(*) n FROM w0 GROUP BY ALL), \
x AS (SELECT node, tid, timestamp a, timestamp + duration b FROM events WHERE ((op = 'sched_wakeup' AND duration > 0) OR (op = 'sched_switch' AND arg1 = 0)) AND timestamp BETWEEN {from} - {MARGIN_NS} AND {until}), \
w AS (SELECT w0.*, row_number() OVER (PARTITION BY w0.node, w0.pid ORDER BY w0.t) - 1 k, coalesce((SELECT sum(least(x.b, w0.t + w0.cd) - greatest(x.a, w0.t)) FROM x WHERE x.node = w0.node AND x.tid = w0.tid AND x.a < w0.t + w0.cd AND x.b > w0.t), 0) + coalesce((SELECT sum(least(x.b, w0.st + w0.sd) - greatest(x.a, w0.st)) FROM x WHERE x.node = w0.node AND x.tid = w0.tid AND x.a < w0.st + w0.sd AND x.b > w0.st), 0) cpu FROM w0 JOIN n USING (node, pid) WHERE n.n * 2 >= (SELECT max(n) FROM n)), \
v AS (SELECT *, greatest(cd + sd - cpu, 0) wait FROM w WHERE k < (SELECT min(n) FROM n WHERE n * 2 >= (SELECT max(n) FROM n))), \
{late}, \
r AS (SELECT node, pid, any_value(tid) tid, count(*) steps_after, count(*) FILTER (WHERE late) late_steps, list_sort(list(lateness) FILTER (WHERE late)) ls, sum(lateness) FILTER (WHERE late) lost_ns, list_sort(list(cpu)) cl FROM v4 WHERE k >= {k0} GROUP BY ALL) \
SELECT r.node, r.pid, p.rank, r.tid, steps_after, late_steps, ls[len(ls) // 2 + 1] typical_lateness_ns, lost_ns, cl[len(cl) // 2 + 1] median_cpu_wait_ns, \
(SELECT coalesce(sum(duration), 0) FROM events e WHERE e.node = r.node AND e.tid = r.tid AND e.op = 'sched_switch' AND e.timestamp BETWEEN {since} AND {until}) // steps_after off_cpu_per_step_ns, \
(SELECT coalesce(sum(duration), 0) FROM events e WHERE e.node = r.node AND e.tid = r.tid AND e.op = 'sched_switch' AND e.arg1 = 0 AND e.timestamp BETWEEN {since} AND {until}) // steps_after preempted_per_step_ns \
FROM r LEFT JOIN processes p ON p.node = r.node AND p.pid = r.pid ORDER BY late_steps DESC, r.node, r.pid"
    )
}

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Option<Chain>, StoreError> {
    let ctx = inp.ctx;
    // Most traces call no collective: they skip the scans below.
    if !calls_collectives(ctx) {
        return Ok(None);
    }
    let (from, until) = (ctx.window.from_ns, ctx.window.until_ns);
    let members = members(ctx, from, until)?;
    let steps = members.iter().map(|m| m.steps.len()).min().unwrap_or(0);
    if members.is_empty() || steps < ONSET_STEPS * 2 {
        return Ok(None);
    }
    let one_node = members.iter().all(|x| x.node == members[0].node);
    let Some(l) = straggler(&members, steps, one_node) else {
        return Ok(None);
    };
    let m = &members[l.who];
    if taking_turns(ctx, m, &members, &l, until) {
        return Ok(None);
    }
    let node = m.node.clone();
    let label = label(&members, m);
    let since_s = (l.since - from) as f64 / 1e9;
    let (cause, per_step_off) = local_cause(ctx, m, &l, steps, until)?;
    let t = match l.baseline {
        None => by_peers_texts(&l, &label, &cause, members.len(), one_node, since_s),
        Some(base) => by_own_baseline_texts(&l, base, &label, &cause, members.len(), since_s),
    };
    let (typical, lost) = (l.typical, l.lost);
    Ok(Some(
        Finding {
            detector: "straggler",
            node: node.clone(),
            time_lost_ns: lost,
            severity: severity(lost, (until - from).max(1)),
            summary: t.summary,
            root_cause: t.root_cause,
            explanation: t.explanation,
            timeline: vec![
                step("NODE", &label, format!("late by {} per step since +{since_s:.1}s", d(typical)), lost),
                step("HOST", "sched_switch", cause.clone(), per_step_off),
                step("NCCL", "ncclAllReduce", t.wait_step, lost),
            ],
            recommendations: vec![
                format!("Inspect {label} from +{since_s:.0}s: causeway explain --db TRACE --node {node} --pid {} --from +{since_s:.0}s (CPU contention, throttling, thermals).", m.pid),
                format!("Drain {label} (or move its rank to a spare) until it keeps pace; the job loses {} per step meanwhile.", d(typical)),
            ],
            evidence_sql: evidence_sql(&l, from, until, one_node),
        }
        .into_chain(),
    ))
}

/// Whether the trace counted any call of a collective.
fn calls_collectives(ctx: &crate::facts::Ctx<'_>) -> bool {
    let collectives: Vec<&str> = COLLECTIVES_SQL
        .split(',')
        .map(|s| s.trim().trim_matches('\''))
        .collect();
    ctx.ops
        .iter()
        .any(|o| o.count > 0 && collectives.contains(&o.op.as_str()))
}

/// Each member's collectives in the window paired with the sync after each, by (node, pid):
/// per step its wait (CPU waits still in), completion, entry and time in the calls, and the
/// wait's two parts as spans.
fn read_members(
    ctx: &crate::facts::Ctx<'_>,
    from: i64,
    until: i64,
) -> Result<ByMember, StoreError> {
    type Row = (String, u32, u32, i64, i64, Option<i32>, i64, i64, i64);
    let rows: Vec<Row> = ctx
        .r
        .prepare_trusted(WAITS_SQL.as_str())?
        .query_map(
            causeway_store::duckdb::params![from, until, from, until],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(ctx.r, "pairing collectives with their waits"))?;
    let mut per: ByMember = BTreeMap::new();
    for (node, pid, tid, wait, done, rank, ct, ce, st) in rows {
        let (m, spans) = per.entry((node.clone(), pid)).or_insert_with(|| {
            let m = Member {
                node,
                pid,
                rank,
                tid,
                steps: Vec::new(),
                cpu: Vec::new(),
                entry: Vec::new(),
                call: Vec::new(),
            };
            (m, Vec::new())
        });
        m.steps.push((wait, done));
        m.entry.push(ct);
        m.call.push(wait);
        // The wait's two parts: inside the collective, then inside the sync after it.
        spans.push(Span {
            start: ct,
            end: ce,
            data: (),
        });
        spans.push(Span {
            start: st,
            end: done,
            data: (),
        });
    }
    Ok(per)
}

/// The members in (node, pid) order, each step's wait less the time its thread waited for a
/// CPU in it (kept per step in `cpu`).
fn members(ctx: &crate::facts::Ctx<'_>, from: i64, until: i64) -> Result<Vec<Member>, StoreError> {
    let per = read_members(ctx, from, until)?;
    let mut members = Vec::with_capacity(per.len());
    for (mut m, spans) in per.into_values() {
        let cpu = cpu_waits(ctx, &m, &spans, from, until)?;
        for (k, s) in m.steps.iter_mut().enumerate() {
            let c = cpu[2 * k] + cpu[2 * k + 1];
            s.0 = (s.0 - c).max(0);
            m.cpu.push(c);
        }
        members.push(m);
    }
    Ok(members)
}

/// The persistently late member over the first `steps` steps, if any: against its peers with
/// 3 or more members, else against the job's own baseline.
fn straggler(members: &[Member], steps: usize, one_node: bool) -> Option<Late> {
    let stamps: Vec<i64> = (0..steps)
        .map(|k| median(members.iter().map(|m| m.steps[k].1).collect()))
        .collect();
    if members.len() >= 3 {
        by_peers(members, steps, &stamps, one_node)
    } else {
        by_own_baseline(members, steps, &stamps)
    }
}

/// Whether the peer-relative finding `l` for `m` is only ranks taking turns: late in no more
/// than the busy machine's share of the steps, and not kept from its CPU by tasks outside the
/// job.
fn taking_turns(
    ctx: &crate::facts::Ctx<'_>,
    m: &Member,
    members: &[Member],
    l: &Late,
    until: i64,
) -> bool {
    // Late in only the busy machine's share of the steps, but not kept from its CPU by tasks
    // outside the job: ranks sharing a CPU by the job's placement, one of which is last in
    // turn (healthy lab twins, three ranks on one core: 404 ms of rank 2's 446 ms preempted by
    // ranks 0 and 1; another time 170 us preempted in all, mostly for the idle task, against
    // 649 ms lost), not a rank slowed by something else.
    l.baseline.is_none()
        && (l.late_steps as f64) < LATER_SHARE * l.steps_after as f64
        && !kept_by_outside(ctx, m, members, l.since, until, l.lost)
}

/// How findings name `m`: its node, and its rank (else its pid) when the node has several.
fn label(members: &[Member], m: &Member) -> String {
    let node = &m.node;
    if members.iter().filter(|x| x.node == m.node).count() > 1 {
        match m.rank {
            Some(r) => format!("{node} rank {r}"),
            None => format!("{node} pid {}", m.pid),
        }
    } else {
        node.clone()
    }
}

/// The local cause of `l` from its onset on: the sentence naming it, and `m`'s
/// collective-calling thread's off-CPU time per step (the cause when it explains at least
/// half of the typical lateness).
fn local_cause(
    ctx: &crate::facts::Ctx<'_>,
    m: &Member,
    l: &Late,
    steps: usize,
    until: i64,
) -> Result<(String, i64), StoreError> {
    let (node, tid) = (&m.node, m.tid);
    let (off, preempted, by): (i64, i64, i64) = ctx
        .r
        .prepare_trusted(OFF_CPU_SQL)?
        .query_row(
            causeway_store::duckdb::params![node, tid, l.since, until],
            causeway_store::row,
        )
        .map_err(duck(ctx.r, "reading the straggler's off-CPU time"))?;
    let per_step_off = off / l.steps_after.max(1) as i64;
    let cpu_wait = median(m.cpu[l.k0..steps].to_vec());
    let cause = if per_step_off * 2 >= l.typical {
        format!(
            "its collective-calling thread (tid {tid}) is off the CPU {} per step since then ({} of it preempted, a median {} a step waiting for a CPU in its collectives; the task that ran instead most often: {} (tid {by}))",
            d(per_step_off),
            d(preempted / l.steps_after.max(1) as i64),
            d(cpu_wait),
            ctx.name(node, by as u32)
        )
    } else {
        format!(
            "its thread (tid {tid}) stays on the CPU ({} off-CPU per step): the extra time is its own compute or GPU work",
            d(per_step_off)
        )
    };
    Ok((cause, per_step_off))
}

/// A finding's sentences.
struct Texts {
    summary: String,
    root_cause: String,
    explanation: String,
    /// What the peers' step of the timeline says.
    wait_step: String,
}

/// The sentences of the peer-relative finding `l` for `label` among `ranks` ranks.
fn by_peers_texts(
    l: &Late,
    label: &str,
    cause: &str,
    ranks: usize,
    one_node: bool,
    since_s: f64,
) -> Texts {
    let share = l.late_steps as f64 / l.steps_after as f64 * 100.0;
    let (k0, typical, lost) = (l.k0, l.typical, l.lost);
    let peers = ranks - 1;
    Texts {
        summary: format!(
            "{label} reaches each collective {} after its {peers} peers since +{since_s:.1}s ({share:.0}% of {} steps): {cause}",
            d(typical),
            l.steps_after
        ),
        root_cause: format!(
            "{}: {label} arrives late at the collectives and the whole synchronous job waits for it; locally, {cause}",
            if one_node {
                "Straggler rank"
            } else {
                "Cross-node straggler"
            }
        ),
        explanation: format!(
            "From step {k0} (+{since_s:.1}s) on, {label} {} among {} ranks in {} of {} steps: it arrives a median {} after the median rank, so its {peers} peers idle that long at every collective ({} in all). Launch rates stay alike because every rank steps at the straggler's pace.",
            if one_node {
                "enters the collective last, by at least a quarter of the median rank's time in it and the sync after it,"
            } else {
                "has the shortest wait for its peers (in its collectives and the syncs after them, less its waits for a CPU there), a low outlier"
            },
            ranks,
            l.late_steps,
            l.steps_after,
            d(typical),
            d(lost)
        ),
        wait_step: format!("{peers} peers wait in the sync after each collective"),
    }
}

/// The sentences of the own-baseline finding `l` (baseline step time `base`) for `label`
/// among `ranks` ranks (1 or 2).
fn by_own_baseline_texts(
    l: &Late,
    base: i64,
    label: &str,
    cause: &str,
    ranks: usize,
    since_s: f64,
) -> Texts {
    let share = l.late_steps as f64 / l.steps_after as f64 * 100.0;
    let (k0, typical, lost) = (l.k0, l.typical, l.lost);
    let peers = ranks - 1;
    let alone = if peers == 0 {
        "the only rank traced".to_string()
    } else {
        "1 peer: too few to compare, so against its own baseline".to_string()
    };
    Texts {
        summary: format!(
            "{label} slowed the job's steps by {} (+{:.0}% over its own baseline of {}) since +{since_s:.1}s ({share:.0}% of {} steps; {alone}): {cause}",
            d(typical),
            typical as f64 / base as f64 * 100.0,
            d(base),
            l.steps_after
        ),
        root_cause: format!(
            "Straggler against its own baseline: {label}'s steps take {} longer than its first {BASELINE_STEPS}, and a synchronous job goes at its slowest rank's pace; locally, {cause}",
            d(typical)
        ),
        explanation: format!(
            "With {} rank(s) there are no 3 peers to compare, so each is compared with its own first {BASELINE_STEPS} steps (median step {}). From step {k0} (+{since_s:.1}s) on, {} of {} steps are at least {:.0}% slower (typically by {}, {} in all){}.",
            ranks,
            d(base),
            l.late_steps,
            l.steps_after,
            SLOWDOWN * 100.0,
            d(typical),
            d(lost),
            if peers > 0 {
                format!(
                    "; {label}'s wait after the collectives shrank the most, so it is the rank arriving last"
                )
            } else {
                String::new()
            }
        ),
        wait_step: if peers > 0 {
            "its peer waits in the sync after each collective".to_string()
        } else {
            "every step ends later".to_string()
        },
    }
}

/// The finding's evidence SQL: the peer-relative steps redone, or per rank its time in the
/// collectives since the onset.
fn evidence_sql(l: &Late, from: i64, until: i64, one_node: bool) -> String {
    match l.baseline {
        None => by_peers_evidence(from, until, l.k0, l.since, one_node),
        // Per rank since the onset: time in the collectives, the part of it spent
        // waiting for a CPU, and the rest (waiting for the peers).
        Some(_) => format!(
            "WITH c AS (SELECT node, pid, tid, rank, timestamp AS t, duration AS d FROM events WHERE op IN ({COLLECTIVES_SQL}) AND timestamp >= {since}), w AS (SELECT c.*, coalesce((SELECT sum(least(x.timestamp + x.duration, c.t + c.d) - greatest(x.timestamp, c.t)) FROM events x WHERE x.node = c.node AND x.tid = c.tid AND (x.op = 'sched_wakeup' OR (x.op = 'sched_switch' AND x.arg1 = 0)) AND x.timestamp < c.t + c.d AND x.timestamp + x.duration > c.t), 0) AS cpu_wait FROM c) SELECT node, pid, any_value(rank) AS rank, count(*) AS collectives, median(d) AS median_in_call_ns, median(cpu_wait) AS median_cpu_wait_ns, median(d - cpu_wait) AS median_wait_for_peers_ns FROM w GROUP BY node, pid ORDER BY median_wait_for_peers_ns",
            since = l.since
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::{below_all, from_outside, onset};

    #[test]
    fn one_rank_below_every_peer_is_late() {
        // Three ranks sharing a CPU wait 2.4-3.9 ms, spread too widely for the MAD; the one
        // they all wait for waits 0.15 ms.
        let waits = [2_400_000, 2_800_000, 3_900_000, 150_000];
        assert_eq!(below_all(&waits, 2_600_000), Some(3));
        // Ranks in turn on one CPU: the lowest is barely below the next.
        let even = [94_000, 173_000, 62_000, 1_530_000];
        assert_eq!(below_all(&even, 133_000), None);
    }

    #[test]
    fn onset_needs_persistence() {
        let mut late = vec![None; 50];
        late[3] = Some(2);
        late[9] = Some(1);
        assert_eq!(onset(&late, 4), None, "isolated late steps are noise");
        for l in late.iter_mut().skip(20) {
            *l = Some(2);
        }
        late[27] = None;
        assert_eq!(onset(&late, 4), Some((2, 20)));
    }

    #[test]
    fn on_a_busy_machine_the_rank_late_most_often_by_far_is_the_straggler() {
        // Per 10 steps: the starved rank 3 late in 4, ranks 0 and 1 in one each (every rank
        // waits for a CPU now and then on a loaded machine).
        let pattern = [
            Some(3),
            Some(3),
            Some(0),
            Some(3),
            Some(3),
            Some(1),
            None,
            None,
            None,
            None,
        ];
        let late: Vec<Option<usize>> = pattern.iter().copied().cycle().take(600).collect();
        assert_eq!(onset(&late, 4), Some((3, 0)));
        // The healthy twin: each rank late in about a fifth of the steps, none dominant.
        let even = [
            Some(0),
            Some(3),
            None,
            Some(1),
            Some(2),
            Some(3),
            None,
            Some(0),
            Some(2),
            Some(1),
        ];
        let late: Vec<Option<usize>> = even.iter().copied().cycle().take(600).collect();
        assert_eq!(onset(&late, 4), None);
    }

    #[test]
    fn a_few_late_steps_at_the_end_are_no_straggler() {
        // The healthy lab job's tail: late in 13 of its last 16 steps of 600.
        let mut late = vec![None; 600];
        for k in (584..600).filter(|k| ![585, 590, 597].contains(k)) {
            late[k] = Some(3);
        }
        assert_eq!(onset(&late, 4), None);
        for l in late.iter_mut().skip(560) {
            *l = Some(3);
        }
        assert_eq!(
            onset(&late, 4),
            Some((3, 560)),
            "40 late steps are a straggler"
        );
    }

    #[test]
    fn preempted_by_its_peers_or_for_the_idle_task_is_not_from_outside() {
        // The healthy twin's rank 2 (its recording): 276 ms by rank 0, 128 ms by rank 1, 42 ms
        // by others, 190 ms lost; another healthy twin's rank 3: switched out for the idle task,
        // 170 us in all, 649 ms lost.
        let peers: std::collections::HashSet<i64> = [16573, 16574, 16576].into();
        let healthy = [
            (16573, 275_729_056),
            (16574, 127_864_716),
            (15, 23_968_906),
            (11478, 17_869_200),
        ];
        assert!(!from_outside(healthy.into_iter(), &peers, 190_000_000));
        let migrated = [(0, 150_000), (16574, 19_800)];
        assert!(!from_outside(migrated.into_iter(), &peers, 649_000_000));
        assert!(
            !from_outside(std::iter::empty(), &peers, 1),
            "never preempted: not from outside"
        );
        // The problem twin's rank 3 under gzip; and under gzip and two busy loops, where its
        // waits for a CPU were mostly run-queue latency: 114 ms preempted against 1.68 s lost.
        let starved = [
            (9801, 900_000_000),
            (16573, 40_000_000),
            (16574, 30_000_000),
        ];
        assert!(from_outside(starved.into_iter(), &peers, 2_000_000_000));
        let loaded = [(9801, 60_000_000), (31337, 44_000_000), (16574, 10_000_000)];
        assert!(from_outside(loaded.into_iter(), &peers, 1_678_000_000));
    }

    #[test]
    fn a_third_of_the_last_steps_is_no_straggler_but_a_third_of_the_run_is() {
        // The healthy lab twin that flaked: rank 2 of three sharing a core late in 56 of the
        // last 164 steps of 600 (in runs of 4 of 5 at the onset, then 1 in 3), its peers never.
        let mut late = vec![None; 600];
        let tail = |late: &mut Vec<Option<usize>>, from: usize| {
            for (i, l) in late.iter_mut().enumerate().skip(from) {
                let k = i - from;
                *l = (k < 5 && k != 3 || k >= 5 && k.is_multiple_of(3)).then_some(2);
            }
        };
        tail(&mut late, 436);
        let n = late.iter().flatten().count();
        assert!((56..=58).contains(&n), "{n}");
        assert_eq!(onset(&late, 4), None);
        // The same pattern over the last 300 steps (half the run): a busy machine's straggler.
        let mut late = vec![None; 600];
        tail(&mut late, 300);
        assert_eq!(onset(&late, 4), Some((2, 300)));
    }
}
