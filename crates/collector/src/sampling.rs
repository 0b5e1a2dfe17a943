//! Duty-cycled attachment (probe mode `sampled`): a sampled op's probes are attached for a share
//! of the time (its duty) and detached otherwise, so its calls trap only while they are attached.
//! This schedules the attached and detached slices and keeps the time each op spent detached,
//! from which the calls made while detached are estimated (counted / attached share of a window).
//!
//! An attached slice lasts duty x period, with the period chosen so that a slice is at least
//! `MIN_ON_NS` (tuning.rs) (a few steps of a training loop) and a window of counts (5 s) holds at least
//! two periods. The detached slice after it is jittered (0.5-1.5x its mean) so that a workload
//! with a period of its own is not sampled at the same phase every time.
//!
//! The duty itself is the controller's (its plan table, overhead_control.rs): each switch passes
//! the op's current duty, so a new duty takes effect from the next slice on.
//!
//! Pure bookkeeping (unit-tested below); attaching and detaching is the caller's (recorder.rs).

use std::collections::{BTreeMap, VecDeque};

use crate::tuning::{MAX_PERIOD_NS, MIN_ON_NS, MIN_PERIOD_NS, SAMPLING_HISTORY_NS};

#[derive(Debug, Clone)]
struct OpState {
    attached: bool,
    /// When the current slice started (ns).
    since_ns: i64,
    /// When the current slice ends (ns).
    until_ns: i64,
}

/// The schedule of every sampled op, and the detached time of every op ever sampled.
#[derive(Debug)]
pub struct Sampler {
    ops: BTreeMap<u16, OpState>,
    /// Detached time of finished detached slices, per op (ns).
    detached_ns: BTreeMap<u16, i64>,
    /// The part of it spent switching (ns): the links going in before an attached slice, and
    /// going out after one. The probes slow the job then (the return probes go in first and
    /// out last), though the calls are not counted.
    switching_ns: BTreeMap<u16, i64>,
    /// Ops whose links are going out, since when (ns).
    settling: BTreeMap<u16, i64>,
    /// The finished detached and switching intervals of the last [`SAMPLING_HISTORY_NS`] per
    /// op, (from, to, switching): what cuts a process's own part of a window out of it
    /// ([`Sampler::between`]; a process that starts or exits inside a window).
    history: BTreeMap<u16, VecDeque<(i64, i64, bool)>>,
    rng: u64,
}

/// The period for `duty` (ns).
fn period_ns(duty: f64) -> i64 {
    ((MIN_ON_NS as f64 / duty) as i64).clamp(MIN_PERIOD_NS, MAX_PERIOD_NS)
}

impl Sampler {
    /// No op sampled; `seed` drives the jitter.
    pub fn new(seed: u64) -> Sampler {
        Sampler {
            ops: BTreeMap::new(),
            detached_ns: BTreeMap::new(),
            switching_ns: BTreeMap::new(),
            settling: BTreeMap::new(),
            history: BTreeMap::new(),
            // splitmix64's finaliser: xorshift's first draws from close seeds (start times
            // a few seconds apart) would be close too.
            rng: {
                let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) | 1
            },
        }
    }

    /// A uniform draw in [0.5, 1.5). xorshift64: the jitter needs no quality beyond not
    /// repeating, not worth a dependency.
    fn jitter(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        0.5 + (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    fn slice_ns(&mut self, duty: f64, attached: bool) -> i64 {
        let period = period_ns(duty) as f64;
        if attached {
            (period * duty) as i64
        } else {
            (period * (1.0 - duty) * self.jitter()) as i64
        }
    }

    /// Starts sampling `op` (its probes attached at `now_ns`, for a slice of `duty`); nothing
    /// for an op already sampled, whose next slices follow the duty passed to
    /// [`Sampler::switched`].
    pub fn start(&mut self, op: u16, duty: f64, now_ns: i64) {
        if self.ops.contains_key(&op) {
            return;
        }
        let until_ns = now_ns + self.slice_ns(duty, true);
        self.ops.insert(
            op,
            OpState {
                attached: true,
                since_ns: now_ns,
                until_ns,
            },
        );
    }

    /// Stops sampling `op` at `now_ns`; true when its probes are detached now (the caller
    /// attaches them).
    pub fn stop(&mut self, op: u16, now_ns: i64) -> bool {
        self.settled(op, now_ns);
        let Some(s) = self.ops.remove(&op) else {
            return false;
        };
        if !s.attached {
            self.closed(op, s.since_ns, now_ns, false);
        }
        !s.attached
    }

    /// Keeps a finished detached (or, `switching`, switching) interval of `op`.
    fn closed(&mut self, op: u16, from_ns: i64, to_ns: i64, switching: bool) {
        let total = if switching {
            &mut self.switching_ns
        } else {
            &mut self.detached_ns
        };
        *total.entry(op).or_default() += (to_ns - from_ns).max(0);
        let h = self.history.entry(op).or_default();
        while h
            .front()
            .is_some_and(|&(_, to, _)| to < to_ns - SAMPLING_HISTORY_NS)
        {
            h.pop_front();
        }
        h.push_back((from_ns, to_ns, switching));
    }

    /// Whether `op` is sampled.
    pub fn is_sampled(&self, op: u16) -> bool {
        self.ops.contains_key(&op)
    }

    /// The ops sampled now or before.
    pub fn ops(&self) -> Vec<u16> {
        let ops: std::collections::BTreeSet<u16> = self
            .ops
            .keys()
            .chain(self.detached_ns.keys())
            .copied()
            .collect();
        ops.into_iter().collect()
    }

    /// Whether `op` is sampled and between its attached slices.
    pub fn is_detached(&self, op: u16) -> bool {
        self.ops.get(&op).is_some_and(|s| !s.attached)
    }

    /// The sampled ops whose slice has ended at `now_ns`: (op, attach) where attach says
    /// which way it must go. The caller switches each and reports it with [`Sampler::switched`].
    pub fn due(&self, now_ns: i64) -> Vec<(u16, bool)> {
        self.ops
            .iter()
            .filter(|(_, s)| s.until_ns <= now_ns)
            .map(|(&op, s)| (op, !s.attached))
            .collect()
    }

    /// When the next slice ends (ns), if any op is sampled.
    pub fn next_due_ns(&self) -> Option<i64> {
        self.ops.values().map(|s| s.until_ns).min()
    }

    /// Records that `op`'s probes were attached or detached. An attach ran from `began_ns` to
    /// `at_ns`, when the links were in place: time spent switching. A detach starts at `at_ns`
    /// (`began_ns` is the same), when the links start to go; the time until they are gone
    /// ([`Sampler::settled`]) is spent switching too. The next slice's length follows `duty`,
    /// the op's duty now.
    pub fn switched(&mut self, op: u16, attached: bool, began_ns: i64, at_ns: i64, duty: f64) {
        let Some(OpState {
            attached: was_attached,
            since_ns,
            ..
        }) = self.ops.get(&op).cloned()
        else {
            return;
        };
        if attached {
            self.settled(op, began_ns);
            self.closed(op, began_ns, at_ns, true);
        } else {
            self.settling.insert(op, at_ns);
        }
        if !was_attached {
            self.closed(op, since_ns, at_ns, false);
        }
        let until_ns = at_ns + self.slice_ns(duty, attached);
        self.ops.insert(
            op,
            OpState {
                attached,
                since_ns: at_ns,
                until_ns,
            },
        );
    }

    /// The time `op`'s probes were detached by sampling, from the start of the trace to `now_ns`.
    pub fn detached_ns(&self, op: u16, now_ns: i64) -> i64 {
        let open = self
            .ops
            .get(&op)
            .filter(|s| !s.attached)
            .map_or(0, |s| (now_ns - s.since_ns).max(0));
        self.detached_ns.get(&op).copied().unwrap_or(0) + open
    }

    /// Records that the links of a detached `op` were all gone at `at_ns`.
    pub fn settled(&mut self, op: u16, at_ns: i64) {
        if let Some(since) = self.settling.remove(&op) {
            self.closed(op, since, at_ns, true);
        }
    }

    /// The part of [`Sampler::detached_ns`] spent switching (attaching or detaching `op`'s
    /// links), from the start of the trace to `now_ns`.
    pub fn switching_ns(&self, op: u16, now_ns: i64) -> i64 {
        let open = self.settling.get(&op).map_or(0, |&t| (now_ns - t).max(0));
        self.switching_ns.get(&op).copied().unwrap_or(0) + open
    }

    /// Both: ([`Sampler::detached_ns`], [`Sampler::switching_ns`]), what an estimate needs.
    pub fn detached_and_switching_ns(&self, op: u16, now_ns: i64) -> (i64, i64) {
        (self.detached_ns(op, now_ns), self.switching_ns(op, now_ns))
    }

    /// Both, between `from_ns` and `to_ns` (up to [`SAMPLING_HISTORY_NS`] back), with the
    /// slices still open counted up to `to_ns`.
    pub fn between(&self, op: u16, from_ns: i64, to_ns: i64) -> (i64, i64) {
        let overlap = |a: i64, b: i64| (b.min(to_ns) - a.max(from_ns)).max(0);
        let (mut detached, mut switching) = (0, 0);
        for &(a, b, sw) in self.history.get(&op).into_iter().flatten() {
            *(if sw { &mut switching } else { &mut detached }) += overlap(a, b);
        }
        if let Some(s) = self.ops.get(&op).filter(|s| !s.attached) {
            detached += overlap(s.since_ns, to_ns);
        }
        if let Some(&since) = self.settling.get(&op) {
            switching += overlap(since, to_ns);
        }
        (detached, switching)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuning::{DUTY_MAX, DUTY_MIN};

    const S: i64 = 1_000_000_000;

    /// Runs the schedule at `duty` for `secs` in 1 ms steps, switching at once; returns the
    /// detached time.
    fn run(s: &mut Sampler, op: u16, duty: f64, secs: i64) -> i64 {
        let mut now = 0;
        while now < secs * S {
            for (o, attach) in s.due(now) {
                s.switched(o, attach, now, now, duty);
            }
            now += 1_000_000;
        }
        s.detached_ns(op, now)
    }

    #[test]
    fn the_attached_share_follows_the_duty() {
        for duty in [0.02, 0.05, 0.1, 0.3] {
            let mut s = Sampler::new(7);
            s.start(3, duty, 0);
            let detached = run(&mut s, 3, duty, 200);
            let share = 1.0 - detached as f64 / (200 * S) as f64;
            assert!(
                (share - duty).abs() < duty * 0.15,
                "duty {duty}: attached {share}"
            );
        }
    }

    #[test]
    fn slices_are_long_enough_and_every_counts_window_holds_two_periods() {
        assert_eq!(period_ns(0.02), 2_500_000_000);
        assert_eq!(period_ns(0.5), S);
        for duty in [DUTY_MIN, 0.05, DUTY_MAX] {
            assert!((period_ns(duty) as f64 * duty) as i64 >= MIN_ON_NS);
        }
    }

    #[test]
    fn a_new_duty_takes_effect_from_the_next_slice() {
        let mut s = Sampler::new(9);
        s.start(3, 0.02, 0);
        // Starting again changes nothing: the first slice is 2% of a 2.5 s period.
        s.start(3, 0.5, 0);
        assert_eq!(s.next_due_ns(), Some(S / 20));
        // The controller raised the duty to 50%: the next attached slice is half of a 1 s period.
        s.switched(3, false, S / 20, S / 20, 0.5);
        let back = s.next_due_ns().unwrap();
        s.switched(3, true, back, back, 0.5);
        assert_eq!(s.next_due_ns(), Some(back + S / 2));
    }

    #[test]
    fn detached_slices_are_jittered() {
        let mut s = Sampler::new(42);
        s.start(3, 0.1, 0);
        let mut offs = Vec::new();
        let mut now = 0;
        while offs.len() < 20 {
            for (o, attach) in s.due(now) {
                s.switched(o, attach, now, now, 0.1);
                if !attach {
                    offs.push(s.next_due_ns().unwrap() - now);
                }
            }
            now += 1_000_000;
        }
        offs.sort_unstable();
        // Duty 10%: a 1 s period, detached 0.9 s on average, 0.45-1.35 s.
        assert!(offs[0] < offs[19] - 3 * S / 10, "{offs:?}");
        assert!(
            offs.iter()
                .all(|&o| (450_000_000..1_350_000_000).contains(&o)),
            "{offs:?}"
        );
    }

    #[test]
    fn the_time_spent_switching_is_kept_apart_within_the_detached_time() {
        let ms = S / 1000;
        let mut s = Sampler::new(5);
        s.start(3, 0.1, 0);
        // Detach from 100 ms: the links are gone at 150 ms.
        s.switched(3, false, 100 * ms, 100 * ms, 0.1);
        assert_eq!(s.switching_ns(3, 120 * ms), 20 * ms);
        s.settled(3, 150 * ms);
        assert_eq!(s.switching_ns(3, 800 * ms), 50 * ms);
        // An attach from 900 ms, in place at 910 ms.
        s.switched(3, true, 900 * ms, 910 * ms, 0.1);
        assert_eq!(s.switching_ns(3, S), 60 * ms);
        assert_eq!(s.detached_ns(3, S), 810 * ms);
        // An attach while the old links are still going (never done by the recorder) ends the
        // detach's switching where the attach begins; stopping ends it too.
        s.switched(3, false, 1010 * ms, 1010 * ms, 0.1);
        s.switched(3, true, 1030 * ms, 1040 * ms, 0.1);
        assert_eq!(s.switching_ns(3, 2 * S), 90 * ms);
        s.switched(3, false, 1140 * ms, 1140 * ms, 0.1);
        s.stop(3, 1150 * ms);
        assert_eq!(s.switching_ns(3, 3 * S), 100 * ms);
        assert_eq!(s.detached_ns(3, 3 * S), 850 * ms);
    }

    #[test]
    fn the_detached_time_between_two_past_moments_is_cut_from_the_slices_kept() {
        let ms = S / 1000;
        let mut s = Sampler::new(5);
        s.start(3, 0.1, 0);
        s.switched(3, false, 100 * ms, 100 * ms, 0.1);
        s.settled(3, 150 * ms);
        s.switched(3, true, 900 * ms, 910 * ms, 0.1);
        s.switched(3, false, 1010 * ms, 1010 * ms, 0.1);
        // Detached 100-910 ms (switching 100-150 and 900-910) and from 1010 ms on, the links
        // still going out.
        assert_eq!(s.between(3, 0, 2 * S), (1800 * ms, 1050 * ms));
        assert_eq!(s.between(3, 120 * ms, 905 * ms), (785 * ms, 35 * ms));
        assert_eq!(s.between(3, 910 * ms, 1010 * ms), (0, 0));
        assert_eq!(s.between(3, 1000 * ms, 1100 * ms), (90 * ms, 90 * ms));
        // The whole trace: what the cumulative figures say.
        assert_eq!(
            s.between(3, 0, 3 * S),
            s.detached_and_switching_ns(3, 3 * S)
        );
        // Intervals older than the history are let go as new ones close.
        s.settled(3, 1020 * ms);
        s.switched(3, true, 200 * S, 200 * S, 0.1);
        assert_eq!(s.between(3, 0, S), (0, 0));
        assert_eq!(s.between(3, 199 * S, 200 * S), (S, 0));
    }

    #[test]
    fn stopping_keeps_the_detached_time_and_says_whether_to_attach() {
        let mut s = Sampler::new(3);
        s.start(3, 0.1, 0);
        // Attached until 0.1 s, then detached.
        assert_eq!(s.due(S / 20), vec![]);
        assert_eq!(s.due(S / 10), vec![(3, false)]);
        s.switched(3, false, S / 10, S / 10, 0.1);
        assert!(s.is_detached(3));
        assert_eq!(s.detached_ns(3, S / 2), 4 * S / 10);
        assert!(s.stop(3, S / 2));
        assert!(!s.is_sampled(3));
        assert_eq!(s.detached_ns(3, 10 * S), 4 * S / 10);
        // An op stopped while attached needs nothing.
        s.start(4, 0.1, S);
        assert!(!s.stop(4, S + 1));
        assert_eq!(s.detached_ns(4, 2 * S), 0);
    }
}
