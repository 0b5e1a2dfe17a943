//! In-situ cost of a sampled op's probes, measured on the traced job itself. While a sampled op's
//! probes are attached, a job they slow makes its other CUDA calls (syncs, copies, the launches of
//! ops not sampled: its steps) at a lower rate than while they are detached. That difference
//! over the attached time is the time the job lost; divided by the op's probe hits then, the time
//! lost per hit. The controller's calibrated costs (calibrate.rs) come from tiny functions of the
//! collector: a real job's code and data footprint, deeper stacks (`--stacks` walks them) and
//! another CPU can make a hit cost more (3-4x on an H100 host, docs/benchmarks.md). Where this
//! measurement says so with confidence, the controller scales the op's costs by it.
//!
//! Progress is what the kernel counts: the calls of every probed op not sampled (exact in every
//! other mode). Segments are cut at each switch of the op's probes and leave out the time links
//! take to come or go (a detach waits for RCU grace periods). Each rate is a ratio estimate over
//! its segments with a standard error from their spread, so a job with regular steps is measured
//! within tens of seconds, and a bursty one only once its rates settle.
//!
//! Pure bookkeeping (unit-tested below); reading the counts is the caller's (recorder.rs).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::ProbeMode;
use causeway_bpf::abi::{Stat, StatKey};
use causeway_store::InSituRow;

use crate::overhead_control::{Controller, is_call_op};
use crate::tuning::{
    CONFIDENCE_SDS, MIN_FOR_COSTS, MIN_FOR_COUNTS, MIN_SEGMENT_NS, SPEEDUP_BOUNDS,
};

/// Cumulative counts at one instant, per (pid, op): (calls, probe hits = calls + nested entries).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts(pub BTreeMap<(u32, u16), (u64, u64)>);

impl Counts {
    /// The counts of probed calls in the kernel's counters.
    pub fn of(stats: &HashMap<StatKey, Stat>) -> Counts {
        Counts(
            stats
                .iter()
                .filter(|(k, _)| is_call_op(k.op))
                .map(|(k, s)| ((k.pid, k.op), (s.calls, s.calls + s.nested)))
                .collect(),
        )
    }

    /// Calls of the progress ops of `pid` made between `self` and `later`: ops not
    /// `excluded` (the sampled ops at either end), seen at both ends.
    fn progress(&self, later: &Counts, pid: u32, excluded: &BTreeSet<u16>) -> u64 {
        self.0
            .range((pid, 0)..=(pid, u16::MAX))
            .filter(|((_, op), _)| !excluded.contains(op))
            .filter_map(|(k, (calls, _))| Some(later.0.get(k)?.0.saturating_sub(*calls)))
            .sum()
    }

    fn hits(&self, pid: u32, op: u16) -> u64 {
        self.0.get(&(pid, op)).map_or(0, |c| c.1)
    }
}

/// Sums over segments of one kind, for a ratio estimate of the progress rate and its error.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sums {
    segments: u64,
    /// Σ duration (s), Σ progress calls, and the squares and cross products.
    d: f64,
    n: f64,
    dd: f64,
    nn: f64,
    nd: f64,
}

impl Sums {
    fn add(&mut self, secs: f64, n: u64) {
        let n = n as f64;
        self.segments += 1;
        self.d += secs;
        self.n += n;
        self.dd += secs * secs;
        self.nn += n * n;
        self.nd += n * secs;
    }

    /// Progress calls per second.
    fn rate(&self) -> f64 {
        self.n / self.d
    }

    /// Relative standard error of [`Sums::rate`] (ratio estimator, residuals of the segments).
    fn rel_se(&self) -> f64 {
        let k = self.segments as f64;
        let r = self.rate();
        let resid = (self.nn - 2.0 * r * self.nd + r * r * self.dd).max(0.0);
        let mean_d = self.d / k;
        (resid / (k * (k - 1.0))).sqrt() / mean_d / r
    }
}

#[derive(Debug, Clone, Default)]
struct PerPid {
    on: Sums,
    off: Sums,
    /// Probe hits of the op while attached.
    on_hits: u64,
    /// The ops left out of progress (the sampled ones, this op among them): segments are only
    /// comparable while it stays the same, so a change starts the sums again.
    excluded: BTreeSet<u16>,
}

#[derive(Debug, Clone)]
struct Open {
    start_ns: i64,
    attached: bool,
    at: Counts,
    sampled: BTreeSet<u16>,
}

/// What one op's probes cost its busiest process, measured in situ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InSitu {
    /// The process (the one with the most probe hits of the op while attached).
    pub pid: u32,
    /// Time measured with the probes attached / detached (ns).
    pub attached_ns: i64,
    /// See `attached_ns`.
    pub detached_ns: i64,
    /// Progress calls per second while attached / detached.
    pub attached_rate: f64,
    /// See `attached_rate`.
    pub detached_rate: f64,
    /// Probe hits of the op while attached.
    pub hits: u64,
    /// Share of the job's progress lost while attached (1 - attached / detached rate).
    pub slowdown: f64,
    /// Its standard error.
    pub slowdown_se: f64,
}

impl InSitu {
    /// Time lost per probe hit (ns), point estimate.
    pub fn lost_ns_per_hit(&self) -> f64 {
        self.slowdown * self.attached_ns as f64 / self.hits.max(1) as f64
    }

    /// Time lost per probe hit (ns), [`CONFIDENCE_SDS`] standard errors below the estimate.
    pub fn lost_ns_per_hit_low(&self) -> f64 {
        (self.slowdown - CONFIDENCE_SDS * self.slowdown_se) * self.attached_ns as f64
            / self.hits.max(1) as f64
    }
}

/// Attached and detached segments of every sampled op.
#[derive(Debug, Default)]
pub struct Meter {
    open: BTreeMap<u16, Open>,
    sums: BTreeMap<(u16, u32), PerPid>,
}

impl Meter {
    /// Whether `op` has a segment open.
    pub fn is_open(&self, op: u16) -> bool {
        self.open.contains_key(&op)
    }

    /// Opens a segment of `op` at `now_ns` (its probes attached or not), once a switch is done;
    /// `sampled` are the ops sampled now, whose calls are not progress.
    pub fn begin(
        &mut self,
        op: u16,
        attached: bool,
        now_ns: i64,
        counts: &Counts,
        sampled: &BTreeSet<u16>,
    ) {
        self.open.insert(
            op,
            Open {
                start_ns: now_ns,
                attached,
                at: counts.clone(),
                sampled: sampled.clone(),
            },
        );
    }

    /// Closes `op`'s open segment at `now_ns`, before its probes switch.
    pub fn end(&mut self, op: u16, now_ns: i64, counts: &Counts, sampled: &BTreeSet<u16>) {
        let Some(o) = self.open.remove(&op) else {
            return;
        };
        let ns = now_ns - o.start_ns;
        if ns < MIN_SEGMENT_NS {
            return;
        }
        // Sampled at either end, and the op itself.
        let mut excluded = o.sampled.clone();
        excluded.extend(sampled);
        excluded.insert(op);
        let pids: BTreeSet<u32> = o.at.0.keys().map(|(p, _)| *p).collect();
        for pid in pids {
            let n = o.at.progress(counts, pid, &excluded);
            let s = self.sums.entry((op, pid)).or_default();
            if s.excluded != excluded {
                *s = PerPid {
                    excluded: excluded.clone(),
                    ..PerPid::default()
                };
            }
            if o.attached {
                s.on.add(ns as f64 / 1e9, n);
                s.on_hits += counts.hits(pid, op).saturating_sub(o.at.hits(pid, op));
            } else {
                s.off.add(ns as f64 / 1e9, n);
            }
        }
    }

    /// Forgets `op`'s open segment (it left sampled mode); what it measured is kept.
    pub fn stop(&mut self, op: u16) {
        self.open.remove(&op);
    }

    /// Ops with a segment open.
    pub fn open_ops(&self) -> Vec<u16> {
        self.open.keys().copied().collect()
    }

    /// The measurement of `op` in its busiest process, once there is enough of it.
    pub fn estimate(&self, op: u16) -> Option<InSitu> {
        let (&(_, pid), _) = self
            .sums
            .range((op, 0)..=(op, u32::MAX))
            .max_by_key(|(_, s)| s.on_hits)?;
        self.estimate_in(op, pid, MIN_FOR_COSTS)
    }

    /// How much faster `pid` progresses while `op`'s probes are detached than while attached
    /// (detached / attached rate, at most [`SPEEDUP_BOUNDS`]'s upper end), once measured. A
    /// thread bound by its own CPU makes its calls (the sampled op's too) faster by as much: the
    /// calls made while detached are estimated with it (poll.rs). Probes never speed a job up,
    /// so a measured slowdown within [`CONFIDENCE_SDS`] standard errors of none is noise or a
    /// change of phase (a loop starting inside one segment), and the speedup is 1.
    pub fn speedup(&self, op: u16, pid: u32) -> Option<f64> {
        self.estimate_in(op, pid, MIN_FOR_COUNTS).map(|e| {
            if e.slowdown - CONFIDENCE_SDS * e.slowdown_se > 0.0 {
                (e.detached_rate / e.attached_rate).clamp(SPEEDUP_BOUNDS.0, SPEEDUP_BOUNDS.1)
            } else {
                1.0
            }
        })
    }

    /// The measurement of `op` in `pid`, once there is `enough` of it (segments, progress calls).
    fn estimate_in(&self, op: u16, pid: u32, (segments, progress): (u64, f64)) -> Option<InSitu> {
        let s = self.sums.get(&(op, pid))?;
        let enough = |x: &Sums| x.segments >= segments && x.n >= progress;
        if !enough(&s.on) || !enough(&s.off) || s.on_hits == 0 {
            return None;
        }
        let q = s.on.rate() / s.off.rate();
        Some(InSitu {
            pid,
            attached_ns: (s.on.d * 1e9) as i64,
            detached_ns: (s.off.d * 1e9) as i64,
            attached_rate: s.on.rate(),
            detached_rate: s.off.rate(),
            hits: s.on_hits,
            slowdown: 1.0 - q,
            slowdown_se: q * s.on.rel_se().hypot(s.off.rel_se()),
        })
    }
}

/// The ops `ctl` samples now.
pub fn sampled_ops(ctl: &Controller) -> BTreeSet<u16> {
    ctl.reduced()
        .filter(|(_, m)| *m == ProbeMode::Sampled)
        .map(|(op, _)| op)
        .collect()
}

impl Meter {
    /// Hands every op's measurement so far to the controller (its lower bound); returns the
    /// rows to store, at `now_ns`.
    pub fn update(&self, ctl: &mut Controller, now_ns: i64) -> Vec<InSituRow> {
        let ops: BTreeSet<u16> = self.sums.keys().map(|(op, _)| *op).collect();
        let mut rows = Vec::new();
        for op in ops {
            let Some(e) = self.estimate(op) else {
                continue;
            };
            ctl.set_measured(op, e.lost_ns_per_hit_low());
            rows.push(InSituRow {
                ts_ns: now_ns,
                op_id: op,
                pid: e.pid,
                attached_ns: e.attached_ns,
                detached_ns: e.detached_ns,
                attached_rate: e.attached_rate,
                detached_rate: e.detached_rate,
                hits: e.hits,
                slowdown: e.slowdown,
                slowdown_se: e.slowdown_se,
                lost_ns_per_hit: e.lost_ns_per_hit(),
                calibrated_ns_per_hit: ctl.calibrated(op, ProbeMode::Full),
                factor: ctl.factor(op),
            });
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;
    const LAUNCH: u16 = 7;
    const SYNC: u16 = 9;

    /// A CPU-bound loop on pid 1: each step makes 100 launches and one sync; a step takes
    /// `step_ns`, plus `hit_ns` per launch while the launch probes are attached. Sampled
    /// with slices of 100 ms attached and 400-600 ms detached, for `secs`.
    fn run(step_ns: f64, hit_ns: f64, secs: i64) -> Meter {
        let mut m = Meter::default();
        let sampled = BTreeSet::from([LAUNCH]);
        let (mut t, mut steps, mut launches, mut hits) = (0i64, 0.0f64, 0u64, 0u64);
        let counts = |steps: f64, launches: u64, hits: u64| {
            Counts(BTreeMap::from([
                ((1, LAUNCH), (hits, hits)),
                ((1, SYNC), (steps as u64, steps as u64)),
                ((2, SYNC), (5, 5)),
                ((1, 8), (launches, launches)),
            ]))
        };
        let mut on = true;
        let mut i = 0;
        while t < secs * 1000 * MS {
            m.begin(LAUNCH, on, t, &counts(steps, launches, hits), &sampled);
            let len = if on {
                100 * MS
            } else {
                (400 + (i * 37) % 200) * MS
            };
            let step = step_ns + if on { 100.0 * hit_ns } else { 0.0 };
            let made = len as f64 / step;
            steps += made;
            if on {
                hits += (made * 100.0) as u64;
            }
            t += len;
            m.end(LAUNCH, t, &counts(steps, launches, hits), &sampled);
            // The switch itself, left out.
            t += 5 * MS;
            steps += 5.0 * MS as f64 / step_ns;
            launches += 1;
            on = !on;
            i += 1;
        }
        m
    }

    #[test]
    fn the_time_lost_per_hit_is_measured_from_the_progress_rates() {
        // 5 ms steps, 2 us per hit: attached, a step takes 5.2 ms (3.8% slower).
        let e = run(5e6, 2_000.0, 60).estimate(LAUNCH).unwrap();
        assert_eq!(e.pid, 1);
        assert!((e.slowdown - 0.2 / 5.2).abs() < 0.004, "{e:?}");
        assert!(
            (e.lost_ns_per_hit() - 2_000.0).abs() < 200.0,
            "{}",
            e.lost_ns_per_hit()
        );
        assert!(e.lost_ns_per_hit_low() < e.lost_ns_per_hit());
        assert!(e.lost_ns_per_hit_low() > 1_000.0, "{e:?}");
        // About 99 attached slices of 100 ms in 60 s.
        assert!((e.attached_ns as f64 / 1e9 - 9.9).abs() < 0.2, "{e:?}");
    }

    #[test]
    fn the_measured_slowdown_is_the_speedup_of_the_detached_calls() {
        let m = run(5e6, 2_000.0, 60);
        let g = |m: &Meter, op, pid| m.speedup(op, pid).unwrap();
        assert!((g(&m, LAUNCH, 1) - 5.2 / 5.0).abs() < 0.005);
        // Not measured (another process, another op, too soon); no loss: about 1.
        assert_eq!(m.speedup(LAUNCH, 2), None);
        assert_eq!(m.speedup(SYNC, 1), None);
        assert_eq!(run(5e6, 2_000.0, 1).speedup(LAUNCH, 1), None);
        assert!(run(5e6, 2_000.0, 3).estimate(LAUNCH).is_none());
        assert!(g(&run(5e6, 2_000.0, 3), LAUNCH, 1) > 1.02);
        assert!((g(&run(5e6, 0.0, 60), LAUNCH, 1) - 1.0).abs() < 0.005);
    }

    #[test]
    fn probes_that_cost_nothing_measure_no_loss() {
        let e = run(5e6, 0.0, 60).estimate(LAUNCH).unwrap();
        assert!(e.slowdown.abs() < 0.01, "{e:?}");
        assert!(e.lost_ns_per_hit_low() <= 0.0, "{e:?}");
    }

    #[test]
    fn too_little_measured_is_no_estimate() {
        assert_eq!(run(5e6, 2_000.0, 3).estimate(LAUNCH), None);
        // Steps so long that a slice holds hardly any progress.
        assert_eq!(run(2e9, 2_000.0, 60).estimate(LAUNCH), None);
        assert_eq!(Meter::default().estimate(LAUNCH), None);
    }

    /// Closes one segment of op 3 on pid 1 of `ms` with `progress` calls each of ops 1 and 2,
    /// with `sampled` sampled.
    fn segment(m: &mut Meter, attached: bool, ms: i64, progress: u64, sampled: &BTreeSet<u16>) {
        let c0 = Counts(BTreeMap::from([
            ((1, 1), (0, 0)),
            ((1, 2), (0, 0)),
            ((1, 3), (0, 0)),
        ]));
        let n = (progress, progress);
        let hits = if attached { (10, 10) } else { (0, 0) };
        let c1 = Counts(BTreeMap::from([((1, 1), n), ((1, 2), n), ((1, 3), hits)]));
        m.begin(3, attached, 0, &c0, sampled);
        m.end(3, ms * MS, &c1, sampled);
    }

    #[test]
    fn a_slowdown_within_the_noise_is_no_speedup() {
        let none = BTreeSet::from([3]);
        // The loop starts inside the first detached segment (no progress there): the detached
        // rate looks lower, which probes cannot cause.
        let mut m = Meter::default();
        segment(&mut m, false, 700, 0, &none);
        for _ in 0..3 {
            segment(&mut m, true, 100, 30, &none);
            segment(&mut m, false, 900, 270, &none);
        }
        assert_eq!(m.speedup(3, 1), Some(1.0));
        // Attached slices 10% slower on average, but as spread as that.
        let mut m = Meter::default();
        for n in [30, 20, 31] {
            segment(&mut m, true, 100, n, &none);
            segment(&mut m, false, 900, 270, &none);
        }
        assert_eq!(m.speedup(3, 1), Some(1.0));
        // Attached slices 5% slower, steadily: believed.
        let mut m = Meter::default();
        for _ in 0..3 {
            segment(&mut m, true, 105, 30, &none);
            segment(&mut m, false, 900, 270, &none);
        }
        let g = m.speedup(3, 1).unwrap();
        assert!((g - 1.05).abs() < 0.01, "{g}");
    }

    #[test]
    fn progress_measured_over_other_ops_starts_again_when_they_change() {
        // Op 2 counted as progress in the first segments, sampled (not progress) after: the
        // rates before and after are not comparable (half as much progress a second), so only
        // the later segments count.
        let mut m = Meter::default();
        for _ in 0..3 {
            segment(&mut m, true, 100, 30, &BTreeSet::from([3]));
            segment(&mut m, false, 900, 270, &BTreeSet::from([3]));
        }
        assert_eq!(m.sums[&(3, 1)].on.segments, 3);
        segment(&mut m, true, 100, 30, &BTreeSet::from([2, 3]));
        let s = &m.sums[&(3, 1)];
        assert_eq!((s.on.segments, s.off.segments), (1, 0));
        assert_eq!(s.excluded, BTreeSet::from([2, 3]));
        assert_eq!(m.speedup(3, 1), None);
    }

    #[test]
    fn sampled_ops_and_short_segments_are_not_progress() {
        let mut m = Meter::default();
        let c0 = Counts(BTreeMap::from([((1, 1), (0, 0)), ((1, 2), (0, 0))]));
        let c1 = Counts(BTreeMap::from([((1, 1), (10, 10)), ((1, 2), (50, 60))]));
        // Op 2 is sampled at the end only: its calls are left out.
        m.begin(2, true, 0, &c0, &BTreeSet::new());
        m.end(2, 5 * MS, &c1, &BTreeSet::from([2]));
        assert!(m.sums.is_empty(), "a 5 ms segment is left out");
        m.begin(3, true, 0, &c0, &BTreeSet::new());
        m.end(3, 50 * MS, &c1, &BTreeSet::from([2]));
        let s = &m.sums[&(3, 1)];
        assert_eq!((s.on.n, s.on.segments, s.on_hits), (10.0, 1, 0));
        m.begin(2, true, 0, &c0, &BTreeSet::new());
        assert!(m.is_open(2));
        m.stop(2);
        assert!(!m.is_open(2) && m.open_ops().is_empty());
    }
}
