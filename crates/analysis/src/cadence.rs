//! Training steps inferred from the feeding thread's cadence, for traces without step
//! annotations: a training loop makes the same GPU calls in the same order every step, so the
//! sequence of its calls repeats with a period of one step's calls. The period is taken from
//! the calls that recur at a fixed distance in calls (the loss's `.item()` sync, the optimizer's
//! memset) and kept where the sequence matches itself shifted by it. Each step then starts
//! before the cycle's first host-to-device copy (the batch going to the device, which a loop
//! does first: on the Kineto traces here 0.3-2.4% of the profiler's step after `prof.step()`),
//! or, in a cycle without one, where the loop is idle longest (the data fetch between the
//! optimizer's last call and the next forward). The longest idle gap alone was 20-48% of a step
//! off the profiler's boundaries on those traces: a host stall mid-step (17 ms of a 216-ms step)
//! was longer than the loop's turn.

use std::collections::HashMap;

/// Fewest calls to look for a cadence in.
const MIN_CALLS: usize = 30;
/// Fewest calls in a step: shorter periods are a layer's repetition, not a step.
const MIN_PERIOD: usize = 4;
/// Occurrences of an anchor call needed (three make two whole cycles).
const MIN_ANCHORS: usize = 3;
/// An anchor's distances in calls agree within this share of their median (exactly, for a
/// period under ten calls).
const GAP_TOLERANCE: f64 = 0.05;
/// Share of an anchor's distances that must agree.
const REGULAR: f64 = 0.8;
/// Periods scoring within this of the best are as good: the shortest of them is the step.
const SCORE_SLACK: f64 = 0.01;
/// Steps between extra calls (a logged loss, an evaluation) that the cadence still sees
/// through to the step.
const MAX_EVERY: usize = 16;
/// Calls compared when scoring a period.
const SCORE_SAMPLE: usize = 50_000;
/// A cadence is reported when the sequence matches itself shifted by the period this well.
const MIN_SCORE: f64 = 0.8;

/// One GPU call of the feeding thread: start, end, op id, whether it copies host to device.
pub type Call = (i64, i64, u16, bool);

/// Steps found in a thread's calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Cadence {
    /// Calls per step (the period).
    pub calls_per_step: usize,
    /// The op that recurs once per step and fixes the cycles.
    pub anchor: u16,
    /// Each step's start and end (ns), in order.
    pub steps: Vec<(i64, i64)>,
    /// How well the sequence repeats with the period (share of calls equal to the call one
    /// period later, 0-1), times the share of anchor distances that agree: the confidence.
    pub confidence: f64,
}

fn median(mut v: Vec<usize>) -> usize {
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

fn near(g: usize, med: usize) -> bool {
    let tol = (med as f64 * GAP_TOLERANCE).round() as usize;
    g.abs_diff(med) <= tol
}

/// Share of calls equal to the call `p` later (over at most [`SCORE_SAMPLE`] calls).
fn score(ops: &[u16], p: usize) -> f64 {
    if p == 0 || p >= ops.len() {
        return 0.0;
    }
    let n = (ops.len() - p).min(SCORE_SAMPLE);
    let same = (0..n).filter(|&i| ops[i] == ops[i + p]).count();
    same as f64 / n as f64
}

/// Infers steps from one thread's GPU calls, sorted by start. None when the calls do not
/// repeat with a period of at least [`MIN_PERIOD`] calls and [`MIN_ANCHORS`] cycles.
pub fn infer(calls: &[Call]) -> Option<Cadence> {
    infer_with(calls, MIN_PERIOD, MIN_CALLS)
}

/// [`infer`] over the calls of the ops a sampling recorder stored every call of (its others
/// are a sample, whose gaps break the sequence): the few ops left (a batch copy, a sync, the
/// optimizer's memset) repeat with a period of one call and more, and layers no longer repeat
/// among them.
pub fn infer_complete(calls: &[Call]) -> Option<Cadence> {
    infer_with(calls, 1, MIN_ANCHORS * 2)
}

fn infer_with(calls: &[Call], min_period: usize, min_calls: usize) -> Option<Cadence> {
    let n = calls.len();
    if n < min_calls {
        return None;
    }
    let ops: Vec<u16> = calls.iter().map(|c| c.2).collect();
    let mut at: HashMap<u16, Vec<usize>> = HashMap::new();
    for (i, &o) in ops.iter().enumerate() {
        at.entry(o).or_default().push(i);
    }
    // Anchors: ops that recur at a steady distance in calls.
    let mut anchors: Vec<(usize, u16, f64)> = Vec::new();
    for (&op, pos) in &at {
        if pos.len() < MIN_ANCHORS {
            continue;
        }
        let gaps: Vec<usize> = pos.windows(2).map(|w| w[1] - w[0]).collect();
        let med = median(gaps.clone());
        if med < min_period {
            continue;
        }
        let agree = gaps.iter().filter(|&&g| near(g, med)).count() as f64 / gaps.len() as f64;
        if agree >= REGULAR {
            anchors.push((med, op, agree));
        }
    }
    if anchors.is_empty() {
        return None;
    }
    // The period: the best-matching shift; of those as good, the shortest.
    let mut periods: Vec<usize> = anchors.iter().map(|a| a.0).collect();
    periods.sort_unstable();
    periods.dedup();
    let scored: Vec<(usize, f64)> = periods.iter().map(|&p| (p, score(&ops, p))).collect();
    let best = scored.iter().map(|s| s.1).fold(0.0, f64::max);
    if best < MIN_SCORE {
        return None;
    }
    let (mut period, mut s) = *scored.iter().find(|s| s.1 >= best - SCORE_SLACK)?;
    // A multiple of the step matches best where some steps add calls every k steps (a loss
    // logged every 10th step): a shorter candidate that divides it k times at most and still
    // matches well is the step (a layer's calls divide a step many more times).
    while let Some(&(q, sq)) = scored.iter().find(|c| {
        c.0 < period && period % c.0 == 0 && period / c.0 <= MAX_EVERY && c.1 >= MIN_SCORE
    }) {
        period = q;
        s = sq;
    }
    // The anchor of that period that recurs least often (an op that also runs in some steps'
    // extra work, such as a copy for a checkpoint or a logged `.item()`, recurs more), then most
    // steadily, then the lowest op id.
    let &(_, anchor, agree) = anchors.iter().filter(|a| a.0 == period).min_by(|a, b| {
        at[&a.1]
            .len()
            .cmp(&at[&b.1].len())
            .then(b.2.total_cmp(&a.2))
            .then(a.1.cmp(&b.1))
    })?;
    let pos = &at[&anchor];
    // Cycles start at the anchor's occurrences at the period's distance.
    let starts: Vec<usize> = pos
        .windows(2)
        .filter(|w| near(w[1] - w[0], period))
        .map(|w| w[0])
        .collect();
    if starts.len() + 1 < MIN_ANCHORS {
        return None;
    }
    // The idle gap after each offset of the cycle, median over the cycles.
    let gap = |i: usize| calls[i + 1].0 - calls[i].1;
    let median_gap = |off: usize| {
        let mut g: Vec<i64> = starts
            .iter()
            .filter(|&&a| a + off + 1 < n)
            .map(|&a| gap(a + off))
            .collect();
        g.sort_unstable();
        g.get(g.len().saturating_sub(1) / 2).copied()
    };
    let mut best_off = 0;
    let mut best_gap = i64::MIN;
    for off in 0..period {
        if let Some(m) = median_gap(off)
            && m > best_gap
        {
            best_gap = m;
            best_off = off;
        }
    }
    // The step boundary: before the cycle's first host-to-device copy where it has one, else
    // after the offset with the longest gap.
    if let Some(h) = first_batch_copy(calls, &starts, period) {
        best_off = (h + period - 1) % period;
        best_gap = median_gap(best_off).unwrap_or(0);
    }
    // Boundaries: after every occurrence of the anchor (once per step, also in a cycle with
    // extra calls: a checkpoint's copies), the end of the call at the longest gap's offset,
    // where it comes before the next occurrence; and the cycle before the first one and after
    // the last, where the trace holds all their calls.
    let mut bounds: Vec<i64> = pos
        .iter()
        .enumerate()
        .filter(|&(k, &a)| a + best_off < n && pos.get(k + 1).is_none_or(|&b| a + best_off < b))
        .map(|(_, &a)| calls[a + best_off].1)
        .collect();
    bounds.dedup();
    let typical_gap = best_gap.max(0);
    if let Some(&a) = pos.first()
        && a + best_off + 1 >= period
    {
        // The previous cycle's boundary call is before the trace: its step starts one typical
        // gap before the cycle's first call.
        let first = a + best_off + 1 - period;
        bounds.insert(0, calls[first].0 - typical_gap);
    }
    let last = pos.last().copied().unwrap_or(0);
    if last + best_off + period < n {
        bounds.push(calls[last + best_off + period].1);
    }
    bounds.sort_unstable();
    bounds.dedup();
    let steps: Vec<(i64, i64)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
    if steps.len() + 1 < MIN_ANCHORS {
        return None;
    }
    Some(Cadence {
        calls_per_step: period,
        anchor,
        steps,
        confidence: (s * agree * 1000.0).round() / 1000.0,
    })
}

/// The offset in the cycle of its first host-to-device copy: of the offsets where most cycles
/// copy host to device, the one after the longest run (around the cycle) without such a copy.
/// None where no offset does.
fn first_batch_copy(calls: &[Call], starts: &[usize], period: usize) -> Option<usize> {
    let copies: Vec<usize> = (0..period)
        .filter(|&off| {
            let (mut yes, mut all) = (0usize, 0usize);
            for &a in starts {
                if let Some(c) = calls.get(a + off) {
                    all += 1;
                    yes += usize::from(c.3);
                }
            }
            all > 0 && yes * 2 > all
        })
        .collect();
    let last = *copies.last()?;
    // Distance from the previous copying offset, around the cycle: the first copy of the step
    // follows the longest stretch of calls without one.
    let mut prev = last;
    copies
        .iter()
        .map(|&off| {
            let run = (off + period - prev) % period;
            prev = off;
            (if run == 0 { period } else { run }, off)
        })
        .max_by_key(|&(run, off)| (run, std::cmp::Reverse(off)))
        .map(|(_, off)| off)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loop of `steps` steps: a data fetch (`fetch` ns idle), then forward launches (op 1,
    /// 1 µs each, 1 µs apart), a loss read (op 2), backward launches, an optimizer memset (op 3).
    fn looped(steps: usize, fetch: i64) -> (Vec<Call>, Vec<i64>) {
        let mut calls = Vec::new();
        let mut starts = Vec::new();
        let mut t = 1_000_000i64;
        for _ in 0..steps {
            starts.push(t);
            t += fetch;
            for k in 0..20 {
                let op = if k == 10 { 2 } else { 1 };
                calls.push((t, t + 1_000, op, false));
                t += 2_000;
            }
            calls.push((t, t + 1_000, 3, false));
            t += 1_000;
        }
        (calls, starts)
    }

    #[test]
    fn a_loop_s_steps_start_at_its_data_fetch() {
        let (calls, starts) = looped(10, 500_000);
        let c = infer(&calls).expect("a cadence");
        assert_eq!(c.calls_per_step, 21);
        // Every step: its start is the previous step's last call's end (the first one a
        // typical fetch before its first call).
        assert_eq!(c.steps.len(), 10, "{:?}", c.steps);
        for (i, s) in c.steps.iter().enumerate() {
            assert!(
                (s.0 - starts[i]).abs() <= 1_000,
                "step {i}: {} vs {}",
                s.0,
                starts[i]
            );
        }
        assert!(c.confidence > 0.9, "{}", c.confidence);
    }

    #[test]
    fn a_step_starts_before_its_batch_copy_even_where_a_stall_mid_step_is_longer() {
        // Each step: a 0.5-ms fetch, the batch copied host to device (op 4), 10 launches, a
        // 2-ms host stall (a logged metric, an optimizer's CPU work), 10 launches, a memset.
        let mut calls = Vec::new();
        let mut starts = Vec::new();
        let mut t = 1_000_000i64;
        for _ in 0..10 {
            starts.push(t);
            t += 500_000;
            calls.push((t, t + 5_000, 4, true));
            t += 6_000;
            for k in 0..20 {
                calls.push((t, t + 1_000, 1, false));
                t += if k == 9 { 2_000_000 } else { 2_000 };
            }
            calls.push((t, t + 1_000, 3, false));
            t += 1_000;
        }
        let c = infer(&calls).expect("a cadence");
        assert_eq!(c.calls_per_step, 22);
        assert_eq!(c.steps.len(), 10, "{:?}", c.steps);
        for (i, s) in c.steps.iter().enumerate() {
            assert!(
                (s.0 - starts[i]).abs() <= 1_000,
                "step {i} starts at {}, the design's at {}",
                s.0,
                starts[i]
            );
        }
        // Without the copy the longest gap, mid-step, is taken for the boundary.
        let plain: Vec<Call> = calls.iter().map(|c| (c.0, c.1, c.2, false)).collect();
        let p = infer(&plain).expect("a cadence");
        assert!(
            p.steps
                .iter()
                .all(|s| starts.iter().all(|&d| (s.0 - d).abs() > 100_000)),
            "{:?}",
            p.steps
        );
    }

    #[test]
    fn calls_without_a_cadence_give_none() {
        // Ops drawn by a xorshift generator: no period.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let calls: Vec<Call> = (0..400)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (i * 1000, i * 1000 + 500, (x % 13) as u16, false)
            })
            .collect();
        assert_eq!(infer(&calls), None);
        assert_eq!(infer(&calls[..10]), None);
    }
}
