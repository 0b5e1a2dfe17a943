//! The one estimate of a sampled op's calls, used both for what is stored (poll.rs, the counts
//! rows) and for what the overhead controller decides on (windows.rs): the calls counted while
//! the probes were attached, scaled up by the time they were attached in the window.

use std::collections::{BTreeMap, BTreeSet};

/// What estimating a sampled op's calls needs from the recording.
pub trait SampledTime {
    /// The time sampling kept `op`'s probes detached from the start of the trace to `now_ns`,
    /// and the part of it spent switching (attaching or detaching the links), in ns.
    fn detached_and_switching_ns(&self, op: u16, now_ns: i64) -> (i64, i64);
    /// How much faster `pid` runs while `op`'s probes are detached, once measured (insitu.rs).
    fn speedup(&self, op: u16, pid: u32) -> Option<f64>;
    /// Every op sampled now or before, counted or not yet.
    fn sampled_ops(&self) -> Vec<u16> {
        Vec::new()
    }
    /// Whether `op` is in sampled mode now.
    fn is_sampled(&self, _op: u16) -> bool {
        false
    }
    /// [`SampledTime::detached_and_switching_ns`] between `from_ns` and `to_ns`, both in the
    /// past: what cuts a process's own part out of a window.
    fn between(&self, op: u16, from_ns: i64, to_ns: i64) -> (i64, i64) {
        let (d0, w0) = self.detached_and_switching_ns(op, from_ns);
        let (d1, w1) = self.detached_and_switching_ns(op, to_ns);
        (d1 - d0, w1 - w0)
    }
}

/// How long an op's probes were attached in one window, and the detached time spent switching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Attached time in the window (ns).
    pub observed_ns: i64,
    /// Detached time spent switching (ns).
    pub switching_ns: i64,
}

/// Calls made in a window of `window_ns` where `counted` were counted while the probes were
/// attached for `seen.observed_ns` (sampled mode): the counted calls scaled up to the window.
/// The detached part goes at `speedup` times the attached rate (insitu.rs: a thread the probes
/// slow calls faster without them), except the `switching_ns` of it spent attaching or
/// detaching the links, when the probes still slow the thread: at the attached rate. Exact (the
/// count itself) when the probes stayed attached; an op detached all window long has no
/// estimate and keeps its count (0).
pub fn made(counted: u64, seen: Seen, window_ns: i64, speedup: f64) -> f64 {
    if seen.observed_ns >= window_ns || seen.observed_ns <= 0 {
        counted as f64
    } else {
        counted as f64 * at_attached_rate_ns(seen, window_ns, speedup) / seen.observed_ns as f64
    }
}

/// Calls made in a window where the probes stayed detached (a slice longer than what is left
/// of the trace, or than a window cut short by a mode switch): at `rate`, the calls per
/// attached ns last counted, over the window as [`made`] weighs it.
pub fn carried(rate: f64, seen: Seen, window_ns: i64, speedup: f64) -> f64 {
    rate * at_attached_rate_ns(seen, window_ns, speedup)
}

/// The window's length in time at the attached rate: the attached time, the switching (when
/// the probes still slow the thread) and the rest of the detached time `speedup` times.
fn at_attached_rate_ns(seen: Seen, window_ns: i64, speedup: f64) -> f64 {
    let observed = seen.observed_ns.clamp(0, window_ns);
    let switching = seen.switching_ns.clamp(0, window_ns - observed);
    let detached = (window_ns - observed - switching) as f64 * speedup + switching as f64;
    observed as f64 + detached
}

/// [`made`], rounded: what a counts row stores.
pub fn estimate(counted: u64, seen: Seen, window_ns: i64, speedup: f64) -> u64 {
    made(counted, seen, window_ns, speedup).round() as u64
}

/// A process's own part of the window (`start`, `end`) with `whole` attached time: from when it
/// was born (exec or fork) to when it died, where either fell inside the window, and the probes'
/// attached time in that part. Its calls were made only then: attached time outside it would
/// dilute (after its exit) or inflate (before its start) its estimate.
pub fn own_part(
    whole: Seen,
    (start, end): (i64, i64),
    (born, died): (Option<i64>, Option<i64>),
    op: u16,
    sampling: &impl SampledTime,
) -> (Seen, i64) {
    let lo = born.map_or(start, |t| t.clamp(start, end));
    let hi = died.map_or(end, |t| t.clamp(lo, end));
    if (lo, hi) == (start, end) {
        return (whole, end - start);
    }
    let (detached, switching) = sampling.between(op, lo, hi);
    let span = hi - lo;
    let observed_ns = (span - detached).clamp(0, span);
    let seen = Seen {
        observed_ns,
        switching_ns: switching.clamp(0, span - observed_ns),
    };
    (seen, span)
}

/// The detached time per op at the end of the last window, to cut the next one from the
/// cumulative figures. Each reader of counts (the stored rows, the controller) keeps its own:
/// their windows differ.
#[derive(Debug, Default)]
pub struct Windowed {
    prev: BTreeMap<u16, (i64, i64)>,
}

impl Windowed {
    /// The window of `window_ns` ending at `end_ns`: for each of `ops` (and every op sampled
    /// before) whose probes were ever detached, how long they were attached in it. Ops
    /// missing from the result were attached all window long.
    pub fn window(
        &mut self,
        ops: impl IntoIterator<Item = u16>,
        end_ns: i64,
        window_ns: i64,
        sampling: &impl SampledTime,
    ) -> BTreeMap<u16, Seen> {
        // The sampled ops without a call counted yet too (sampled from the start, detached
        // first): their detached time is cut from the windows before their first calls.
        let ops: BTreeSet<u16> = ops
            .into_iter()
            .chain(self.prev.keys().copied())
            .chain(sampling.sampled_ops())
            .collect();
        let mut out = BTreeMap::new();
        for op in ops {
            let (total, switched) = sampling.detached_and_switching_ns(op, end_ns);
            if total > 0 {
                let (prev, prev_switched) =
                    self.prev.insert(op, (total, switched)).unwrap_or((0, 0));
                let seen = Seen {
                    observed_ns: (window_ns - (total - prev)).clamp(0, window_ns),
                    switching_ns: switched - prev_switched,
                };
                out.insert(op, seen);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn seen(observed_ns: i64, switching_ns: i64) -> Seen {
        Seen {
            observed_ns,
            switching_ns,
        }
    }

    #[test]
    fn counts_scale_with_the_attached_time_and_the_speedup() {
        // Attached a tenth of the window: ten times the calls.
        assert_eq!(estimate(100, seen(S / 10, 0), S, 1.0), 1_000);
        // Twice as fast while detached: the detached 0.9 s make 1,800 calls.
        assert_eq!(estimate(100, seen(S / 10, 0), S, 2.0), 1_900);
        // 0.1 s of the detached time spent switching, at the attached rate.
        assert_eq!(estimate(100, seen(S / 10, S / 10), S, 2.0), 1_800);
        // Attached all along, or never: the count itself.
        assert_eq!(estimate(123, seen(S, 0), S, 2.0), 123);
        assert_eq!(estimate(0, seen(0, 0), S, 2.0), 0);
    }

    #[test]
    fn a_window_detached_throughout_goes_at_the_last_attached_rate() {
        // 1,000 calls a second attached: a detached second, 0.1 s of it switching, twice as
        // fast for the rest.
        let rate = 1_000.0 / S as f64;
        assert!((carried(rate, seen(0, S / 10), S, 2.0) - 1_900.0).abs() < 1e-6);
        assert!((carried(rate, seen(0, 0), S / 2, 1.0) - 500.0).abs() < 1e-6);
    }

    struct Detached(BTreeMap<u16, (i64, i64)>);

    impl SampledTime for Detached {
        fn detached_and_switching_ns(&self, op: u16, _now_ns: i64) -> (i64, i64) {
            self.0.get(&op).copied().unwrap_or((0, 0))
        }
        fn speedup(&self, _op: u16, _pid: u32) -> Option<f64> {
            None
        }
    }

    #[test]
    fn a_process_that_exits_or_starts_inside_a_window_is_estimated_over_its_own_part() {
        struct Slices(crate::sampling::Sampler);
        impl SampledTime for Slices {
            fn detached_and_switching_ns(&self, op: u16, now_ns: i64) -> (i64, i64) {
                self.0.detached_and_switching_ns(op, now_ns)
            }
            fn speedup(&self, _op: u16, _pid: u32) -> Option<f64> {
                None
            }
            fn between(&self, op: u16, from_ns: i64, to_ns: i64) -> (i64, i64) {
                self.0.between(op, from_ns, to_ns)
            }
        }
        let ms = S / 1000;
        // 2% duty: attached 0-50 ms, detached from 50 ms until 3 s (settled at 60 ms), attached
        // 3.00-3.05 s, then detached to the end of the 5 s window.
        let mut s = crate::sampling::Sampler::new(1);
        s.start(3, 0.02, 0);
        s.switched(3, false, 50 * ms, 50 * ms, 0.02);
        s.settled(3, 60 * ms);
        s.switched(3, true, 3 * S, 3 * S, 0.02);
        s.switched(3, false, 3050 * ms, 3050 * ms, 0.02);
        s.settled(3, 3060 * ms);
        let s = Slices(s);
        let whole = seen(100 * ms, 20 * ms);
        let w = (0, 5 * S);
        assert_eq!(own_part(whole, w, (None, None), 3, &s), (whole, 5 * S));
        // Exited at 2 s: attached only its first 50 ms.
        assert_eq!(
            own_part(whole, w, (None, Some(2 * S)), 3, &s),
            (seen(50 * ms, 10 * ms), 2 * S)
        );
        // Started at 1 s and exited at 2.5 s: never attached, so its calls go at the rate
        // last counted (a window detached all along for it).
        assert_eq!(
            own_part(whole, w, (Some(S), Some(5 * S / 2)), 3, &s),
            (seen(0, 0), 3 * S / 2)
        );
        // Started at 2 s: the second slice only.
        assert_eq!(
            own_part(whole, w, (Some(2 * S), None), 3, &s),
            (seen(50 * ms, 10 * ms), 3 * S)
        );
        // Born before the window and died after it: the whole window.
        assert_eq!(
            own_part(whole, w, (Some(-S), Some(6 * S)), 3, &s),
            (whole, 5 * S)
        );
    }

    #[test]
    fn windows_are_cut_from_the_cumulative_detached_time() {
        let mut w = Windowed::default();
        let mut d = Detached(BTreeMap::from([(3, (S / 2, S / 10))]));
        let first = w.window([3, 4], S, S, &d);
        assert_eq!(first, BTreeMap::from([(3, seen(S / 2, S / 10))]));
        // The next second op 3 was detached 0.8 s more; op 3 is still followed when the
        // caller no longer names it.
        d.0.insert(3, (13 * S / 10, S / 5));
        let second = w.window([4], 2 * S, S, &d);
        assert_eq!(second, BTreeMap::from([(3, seen(S / 5, S / 10))]));
    }
}
