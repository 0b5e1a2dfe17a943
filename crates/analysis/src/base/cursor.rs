//! Per-thread state of the GPU-call pass ([`crate::timeline`]): a small reorder buffer that
//! releases calls in start order (to the gaps and to the budget's per-thread state), the gaps of
//! at least 1 ms between released calls in the window, and the run of launches in the current
//! second.

use std::collections::VecDeque;

/// A gap is a wait when it lasts at least this long (also the fallback's bucket width).
pub const MIN_GAP_NS: i64 = 1_000_000;

/// A gap between two consecutive GPU calls of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// Process (of the call after the gap).
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// End of the call before (ns).
    pub start: i64,
    /// Start of the call after (ns).
    pub end: i64,
}

/// Launches of one thread in one second of the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchSecond {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Second since the window start.
    pub sec: i64,
    /// Launches.
    pub launches: i64,
}

/// Calls a thread may have out of stored time order before the pass gives up on it.
pub const REORDER_ROWS: usize = 4096;

/// One GPU call as the pass sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// Process.
    pub pid: u32,
    /// Op id.
    pub op: u16,
    /// Start (ns).
    pub start: i64,
    /// End (ns).
    pub end: i64,
    /// arg0 (bytes for copies).
    pub arg0: i64,
    /// arg1 (the copy direction).
    pub arg1: i64,
}

/// Per thread: calls held back to restore time order, the last call released, and the open
/// launch-count run.
#[derive(Debug)]
pub struct Cursor {
    /// The thread.
    pub tid: u32,
    /// Window start: calls before it (read for the budget's nesting) make no gaps.
    from: i64,
    pending: VecDeque<Call>,
    /// The last call released in the window (gaps start at its end).
    last: Option<Call>,
    /// Start of the last call released.
    released: i64,
    run: Option<LaunchSecond>,
    /// Bounds of the run's second (ns), so most launches skip the division.
    run_ns: (i64, i64),
}

impl Cursor {
    /// A thread with no call seen yet; gaps are recorded between calls from `from` on.
    pub fn new(tid: u32, from: i64) -> Cursor {
        Cursor {
            tid,
            from,
            pending: VecDeque::new(),
            last: None,
            released: i64::MIN,
            run: None,
            run_ns: (0, 0),
        }
    }

    /// Takes a call in stored order; false when it is older than a call already released.
    /// Released calls go to `sink` in start order (ties in stored order).
    pub fn push(&mut self, c: Call, gaps: &mut Vec<Gap>, sink: &mut impl FnMut(Call)) -> bool {
        if c.start < self.released {
            return false;
        }
        match self.pending.back() {
            Some(b) if c.start < b.start => {
                let at = self.pending.partition_point(|x| x.start <= c.start);
                self.pending.insert(at, c);
            }
            _ => self.pending.push_back(c),
        }
        if self.pending.len() > REORDER_ROWS {
            self.release(gaps, sink);
        }
        true
    }

    /// Releases the oldest held call, recording the gap before it.
    fn release(&mut self, gaps: &mut Vec<Gap>, sink: &mut impl FnMut(Call)) {
        let Some(c) = self.pending.pop_front() else {
            return;
        };
        if c.start >= self.from {
            if let Some(l) = self.last
                && c.start - l.end >= MIN_GAP_NS
            {
                gaps.push(Gap {
                    pid: c.pid,
                    tid: self.tid,
                    start: l.end,
                    end: c.start,
                });
            }
            self.last = Some(c);
        }
        self.released = c.start;
        sink(c);
    }

    /// Counts a launch starting at `start` (seconds counted from `from`).
    pub fn count_launch(&mut self, pid: u32, start: i64, from: i64, out: &mut Vec<LaunchSecond>) {
        if let Some(run) = &mut self.run
            && run.pid == pid
            && start >= self.run_ns.0
            && start < self.run_ns.1
        {
            run.launches += 1;
            return;
        }
        let sec = (start - from) / 1_000_000_000;
        out.extend(self.run.take());
        self.run = Some(LaunchSecond {
            pid,
            tid: self.tid,
            sec,
            launches: 1,
        });
        let lo = from + sec * 1_000_000_000;
        self.run_ns = (lo, lo + 1_000_000_000);
    }

    /// Releases every held call and closes the launch run.
    pub fn finish(
        &mut self,
        gaps: &mut Vec<Gap>,
        launches: &mut Vec<LaunchSecond>,
        sink: &mut impl FnMut(Call),
    ) {
        while !self.pending.is_empty() {
            self.release(gaps, sink);
        }
        launches.extend(self.run.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(start: i64, end: i64) -> Call {
        Call {
            pid: 1,
            op: 3,
            start,
            end,
            arg0: 0,
            arg1: 0,
        }
    }

    fn drop_call(_: Call) {}

    #[test]
    fn calls_before_the_window_are_released_but_make_no_gap() {
        let mut c = Cursor::new(4, 10_000_000);
        let (mut gaps, mut seen) = (Vec::new(), Vec::new());
        let mut sink = |x: Call| seen.push(x.start);
        for (s, e) in [
            (0, 100),
            (5_000_000, 5_000_100),
            (12_000_000, 12_000_100),
            (20_000_000, 20_000_100),
        ] {
            assert!(c.push(call(s, e), &mut gaps, &mut sink));
        }
        c.finish(&mut gaps, &mut Vec::new(), &mut sink);
        assert_eq!(seen, [0, 5_000_000, 12_000_000, 20_000_000]);
        let got: Vec<(i64, i64)> = gaps.iter().map(|g| (g.start, g.end)).collect();
        assert_eq!(got, [(12_000_100, 20_000_000)]);
    }

    #[test]
    fn restores_order_within_the_buffer_and_records_gaps() {
        let mut c = Cursor::new(7, 0);
        let mut gaps = Vec::new();
        // Stored order: 0, 5ms (out of order), 2ms, then in order.
        assert!(c.push(call(0, 100), &mut gaps, &mut drop_call));
        assert!(c.push(call(5_000_000, 5_000_100), &mut gaps, &mut drop_call));
        assert!(c.push(call(2_000_000, 2_000_100), &mut gaps, &mut drop_call));
        let mut launches = Vec::new();
        c.finish(&mut gaps, &mut launches, &mut drop_call);
        let got: Vec<(i64, i64)> = gaps.iter().map(|g| (g.start, g.end)).collect();
        assert_eq!(got, [(100, 2_000_000), (2_000_100, 5_000_000)]);
        assert!(gaps.iter().all(|g| g.tid == 7 && g.pid == 1));
    }

    #[test]
    fn refuses_a_call_older_than_one_released() {
        let mut c = Cursor::new(1, 0);
        let mut gaps = Vec::new();
        for i in 0..=REORDER_ROWS as i64 {
            assert!(c.push(call(10 + i, 11 + i), &mut gaps, &mut drop_call));
        }
        // The first call (start 10) has been released: start 5 cannot be placed any more.
        assert!(!c.push(call(5, 6), &mut gaps, &mut drop_call));
        assert!(
            c.push(call(11, 12), &mut gaps, &mut drop_call),
            "ties and later starts still fit"
        );
    }

    #[test]
    fn counts_launches_per_second_and_process() {
        let mut c = Cursor::new(3, 0);
        let mut out = Vec::new();
        let s = 1_000_000_000;
        for (pid, t) in [(1, 10), (1, s - 1), (1, s), (2, s + 5), (1, 3 * s + 1)] {
            c.count_launch(pid, 100 + t, 100, &mut out);
        }
        c.finish(&mut Vec::new(), &mut out, &mut drop_call);
        let got: Vec<(u32, i64, i64)> = out.iter().map(|l| (l.pid, l.sec, l.launches)).collect();
        assert_eq!(got, [(1, 0, 2), (1, 1, 1), (2, 1, 1), (1, 3, 1)]);
    }
}
