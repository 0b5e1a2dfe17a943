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
//! Pure bookkeeping (unit-tested below); attaching and detaching is the caller's (recorder.rs).

use std::collections::BTreeMap;

use crate::tuning::{DUTY_MAX, DUTY_MIN, MAX_PERIOD_NS, MIN_ON_NS, MIN_PERIOD_NS};

#[derive(Debug, Clone)]
struct OpState {
    duty: f64,
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
            rng: seed | 1,
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

    /// Starts sampling `op` (its probes attached at `now_ns`) with `duty`, or changes the duty
    /// of an op already sampled (from its next slice on).
    pub fn sample(&mut self, op: u16, duty: f64, now_ns: i64) {
        let duty = duty.clamp(DUTY_MIN, DUTY_MAX);
        if let Some(s) = self.ops.get_mut(&op) {
            s.duty = duty;
            return;
        }
        let until_ns = now_ns + self.slice_ns(duty, true);
        self.ops.insert(
            op,
            OpState {
                duty,
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
            *self.detached_ns.entry(op).or_default() += now_ns - s.since_ns;
        }
        !s.attached
    }

    /// The duty of a sampled op.
    #[cfg(test)]
    pub fn duty(&self, op: u16) -> Option<f64> {
        self.ops.get(&op).map(|s| s.duty)
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
    /// ([`Sampler::settled`]) is spent switching too.
    pub fn switched(&mut self, op: u16, attached: bool, began_ns: i64, at_ns: i64) {
        let Some(s) = self.ops.get(&op).cloned() else {
            return;
        };
        if attached {
            self.settled(op, began_ns);
            *self.switching_ns.entry(op).or_default() += (at_ns - began_ns).max(0);
        } else {
            self.settling.insert(op, at_ns);
        }
        if !s.attached {
            *self.detached_ns.entry(op).or_default() += at_ns - s.since_ns;
        }
        let until_ns = at_ns + self.slice_ns(s.duty, attached);
        self.ops.insert(
            op,
            OpState {
                attached,
                since_ns: at_ns,
                until_ns,
                ..s
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
            *self.switching_ns.entry(op).or_default() += (at_ns - since).max(0);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    /// Runs the schedule for `secs` in 1 ms steps, switching at once; returns the detached time.
    fn run(s: &mut Sampler, op: u16, secs: i64) -> i64 {
        let mut now = 0;
        while now < secs * S {
            for (o, attach) in s.due(now) {
                s.switched(o, attach, now, now);
            }
            now += 1_000_000;
        }
        s.detached_ns(op, now)
    }

    #[test]
    fn the_attached_share_follows_the_duty() {
        for duty in [0.02, 0.05, 0.1, 0.3] {
            let mut s = Sampler::new(7);
            s.sample(3, duty, 0);
            let detached = run(&mut s, 3, 200);
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
        // The duty is kept in bounds.
        let mut s = Sampler::new(1);
        s.sample(3, 0.001, 0);
        assert_eq!(s.duty(3), Some(DUTY_MIN));
        s.sample(3, 0.9, 0);
        assert_eq!(s.duty(3), Some(DUTY_MAX));
    }

    #[test]
    fn detached_slices_are_jittered() {
        let mut s = Sampler::new(42);
        s.sample(3, 0.1, 0);
        let mut offs = Vec::new();
        let mut now = 0;
        while offs.len() < 20 {
            for (o, attach) in s.due(now) {
                s.switched(o, attach, now, now);
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
        s.sample(3, 0.1, 0);
        // Detach from 100 ms: the links are gone at 150 ms.
        s.switched(3, false, 100 * ms, 100 * ms);
        assert_eq!(s.switching_ns(3, 120 * ms), 20 * ms);
        s.settled(3, 150 * ms);
        assert_eq!(s.switching_ns(3, 800 * ms), 50 * ms);
        // An attach from 900 ms, in place at 910 ms.
        s.switched(3, true, 900 * ms, 910 * ms);
        assert_eq!(s.switching_ns(3, S), 60 * ms);
        assert_eq!(s.detached_ns(3, S), 810 * ms);
        // An attach while the old links are still going (never done by the recorder) ends the
        // detach's switching where the attach begins; stopping ends it too.
        s.switched(3, false, 1010 * ms, 1010 * ms);
        s.switched(3, true, 1030 * ms, 1040 * ms);
        assert_eq!(s.switching_ns(3, 2 * S), 90 * ms);
        s.switched(3, false, 1140 * ms, 1140 * ms);
        s.stop(3, 1150 * ms);
        assert_eq!(s.switching_ns(3, 3 * S), 100 * ms);
        assert_eq!(s.detached_ns(3, 3 * S), 850 * ms);
    }

    #[test]
    fn stopping_keeps_the_detached_time_and_says_whether_to_attach() {
        let mut s = Sampler::new(3);
        s.sample(3, 0.1, 0);
        // Attached until 0.1 s, then detached.
        assert_eq!(s.due(S / 20), vec![]);
        assert_eq!(s.due(S / 10), vec![(3, false)]);
        s.switched(3, false, S / 10, S / 10);
        assert!(s.is_detached(3));
        assert_eq!(s.detached_ns(3, S / 2), 4 * S / 10);
        assert!(s.stop(3, S / 2));
        assert_eq!(s.duty(3), None);
        assert_eq!(s.detached_ns(3, 10 * S), 4 * S / 10);
        // An op stopped while attached needs nothing.
        s.sample(4, 0.1, S);
        assert!(!s.stop(4, S + 1));
        assert_eq!(s.detached_ns(4, 2 * S), 0);
    }
}
