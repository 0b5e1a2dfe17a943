//! Rates over time and change points: kernel launches per second of every launching thread
//! (from the shared GPU-call timeline), and the single split of that series that best separates two
//! levels (a launch-rate drop), decided on segment medians so one burst second cannot fake it.

use std::collections::BTreeSet;

use causeway_store::StoreError;
use serde::Serialize;

use crate::facts::Ctx;
use crate::opsets::LAUNCH_NAMES;
use crate::probe_overhead::{ModeSwitch, mode_switches};

/// Launches per second of one thread.
#[derive(Debug, Clone, Serialize)]
pub struct RateSeries {
    /// Node.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Start of second 0 (ns).
    pub start_ns: i64,
    /// Launches in each second from the thread's first to its last active second.
    pub per_second: Vec<u32>,
    /// Best change point, if the series is long enough.
    pub change: Option<ChangePoint>,
}

/// Where a series changes level.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChangePoint {
    /// Index of the first second of the second segment.
    pub at_second: usize,
    /// Median launches/s before.
    pub before_median: f64,
    /// 25th percentile (nearest rank) of launches/s before: the level was sustained if high.
    pub before_low: f64,
    /// Median launches/s after.
    pub after_median: f64,
    /// A launch op's probe mode changed away from full mode between the series' start and one
    /// second after the change point ("cudaLaunchKernel full -> sampled"): from then on fewer
    /// launches were stored as events, so the stored rate fell while the calls went on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_mode: Option<String>,
}

/// The switches of `node`'s launch ops away from full mode up to `until_ns`: from each on, fewer
/// launches were stored as events than were made, so stored launch rates say less than the
/// calls (the launch-rate listing, throughput_drop and straggler take them into account).
pub fn launch_switches_away(
    ctx: &Ctx<'_>,
    until_ns: i64,
    node: &str,
) -> Result<Vec<ModeSwitch>, StoreError> {
    Ok(mode_switches(ctx.r, until_ns, node)?
        .into_iter()
        .filter(|m| LAUNCH_NAMES.contains(&m.op.as_str()) && m.to != "full")
        .collect())
}

/// Minimum seconds on each side of a change point.
pub const MIN_SEGMENT_S: usize = 3;

/// Per-second launch series of every launching thread in the window: from the thread's first
/// second with any event (of any process using a launching thread's tid) to its last second
/// with a launch.
pub fn launch_rates(ctx: &Ctx<'_>) -> Result<Vec<RateSeries>, StoreError> {
    let from = ctx.window.from_ns;
    let mut out: Vec<RateSeries> = Vec::new();
    for node in &ctx.nodes {
        let tids: BTreeSet<u32> = ctx
            .feeders()
            .iter()
            .filter(|t| &t.node == node)
            .map(|t| t.tid)
            .collect();
        let Some(timeline) = ctx.timelines.get(node) else {
            continue;
        };
        let spans = ctx
            .spans
            .range((node.clone(), 0, 0)..=(node.clone(), u32::MAX, u32::MAX));
        for ((_, pid, tid), (first, last)) in spans {
            if !tids.contains(tid) {
                continue;
            }
            let (first_sec, last_sec) = (
                (first - from) / 1_000_000_000,
                (last - from) / 1_000_000_000,
            );
            let mut per_second = vec![0u32; (last_sec - first_sec + 1).max(1) as usize];
            let at = timeline
                .launches
                .partition_point(|l| (l.pid, l.tid) < (*pid, *tid));
            for l in timeline.launches[at..]
                .iter()
                .take_while(|l| (l.pid, l.tid) == (*pid, *tid))
            {
                if let Some(x) = per_second.get_mut((l.sec - first_sec).max(0) as usize) {
                    *x = l.launches.clamp(0, i64::from(u32::MAX)) as u32;
                }
            }
            // The seconds after its last launch are a loop that ended (a program saving,
            // sleeping or exiting; a server without requests), not a lower rate.
            per_second.truncate(per_second.iter().rposition(|&x| x > 0).map_or(1, |i| i + 1));
            out.push(RateSeries {
                node: node.clone(),
                pid: *pid,
                tid: *tid,
                start_ns: from + first_sec * 1_000_000_000,
                per_second,
                change: None,
            });
        }
    }
    let mut switches = std::collections::HashMap::new();
    for s in &mut out {
        // The last second is usually partial: leave it out of the decision.
        let n = s.per_second.len().saturating_sub(1);
        s.change = change_point(&s.per_second[..n]);
        let Some(c) = s.change.as_mut() else { continue };
        if !switches.contains_key(&s.node) {
            let away = launch_switches_away(ctx, ctx.window.until_ns, &s.node)?;
            switches.insert(s.node.clone(), away);
        }
        let at_ns = s.start_ns + c.at_second as i64 * 1_000_000_000;
        c.probe_mode = switches[&s.node]
            .iter()
            .find(|m| (s.start_ns..=at_ns + 1_000_000_000).contains(&m.ts_ns))
            .map(|m| format!("{} {} -> {}", m.op, m.from, m.to));
    }
    Ok(out)
}

fn lower_quartile(xs: &[u32]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_unstable();
    v.get(v.len().div_ceil(4).saturating_sub(1))
        .map_or(0.0, |&x| f64::from(x))
}

fn median(xs: &[u32]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_unstable();
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        f64::from(v[m])
    } else {
        (f64::from(v[m - 1]) + f64::from(v[m])) / 2.0
    }
}

/// The split maximising |mean difference| * sqrt(k (n - k) / n) (a one-step binary
/// segmentation), with segment medians reported. None if the series is too short.
pub fn change_point(xs: &[u32]) -> Option<ChangePoint> {
    let n = xs.len();
    if n < 2 * MIN_SEGMENT_S {
        return None;
    }
    let total: f64 = xs.iter().map(|&x| f64::from(x)).sum();
    let mut left = 0.0;
    let mut best: Option<(f64, usize)> = None;
    for k in 1..n {
        left += f64::from(xs[k - 1]);
        if k < MIN_SEGMENT_S || n - k < MIN_SEGMENT_S {
            continue;
        }
        let (kf, nf) = (k as f64, n as f64);
        let diff = (left / kf - (total - left) / (nf - kf)).abs();
        let score = diff * (kf * (nf - kf) / nf).sqrt();
        if best.is_none_or(|b| score > b.0) {
            best = Some((score, k));
        }
    }
    let (_, k) = best?;
    let (before, after) = (median(&xs[..k]), median(&xs[k..]));
    // The best split of a flat series is still a split: with the typical second the same on
    // both sides (within 5%), the level did not change and there is nothing to report.
    if (before - after).abs() <= 0.05 * before.max(after) {
        return None;
    }
    Some(ChangePoint {
        probe_mode: None,
        at_second: k,
        before_median: before,
        before_low: lower_quartile(&xs[..k]),
        after_median: after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_level_drop() {
        let xs = [100, 102, 98, 101, 99, 40, 41, 39, 40, 42];
        let c = change_point(&xs).unwrap();
        assert_eq!(c.at_second, 5);
        assert_eq!(c.before_median, 100.0);
        assert_eq!(c.after_median, 40.0);
    }

    #[test]
    fn one_burst_second_is_not_a_level() {
        // vLLM-like: a warm-up burst, then a steady low rate.
        let xs = [0, 0, 0, 0, 0, 1028, 0, 0, 0, 0, 4, 35, 55, 49, 68, 70, 40];
        let c = change_point(&xs).unwrap();
        assert!(c.before_low < 20.0, "{c:?}");
        // vLLM #37343 engine thread: 1,028 launches in 250 ms of warm-up, then ~50/s.
        let xs = [
            523, 505, 0, 0, 0, 0, 0, 0, 0, 4, 1, 61, 50, 60, 78, 50, 41, 40, 37, 42,
        ];
        let c = change_point(&xs).unwrap();
        assert!(c.before_low < 20.0, "{c:?}");
    }

    #[test]
    fn a_flat_series_has_no_change_point() {
        // The healthy demo's loop: 1,320 launches a second, give or take one.
        let xs = [1320, 1321, 1319, 1320, 1322, 1318, 1320, 1321, 1320, 1319];
        assert_eq!(change_point(&xs), None);
        let xs = [1320, 1320, 1320, 1320, 1320, 1000, 1320, 1320, 1320, 1320];
        assert_eq!(change_point(&xs), None, "one slow second is not a level");
    }

    #[test]
    fn short_series_has_no_change_point() {
        assert_eq!(change_point(&[1, 2, 3]), None);
    }
}
