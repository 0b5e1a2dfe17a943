//! Per-thread state of the GPU-call pass ([`crate::timeline`]): a small reorder buffer that
//! releases calls in start order, the gaps of at least 1 ms between released calls, and the
//! run of launches in the current second.

use std::collections::VecDeque;

use crate::timeline::{Gap, LaunchSecond, MIN_GAP_NS};

/// Calls a thread may have out of stored time order before the pass gives up on it.
pub const REORDER_ROWS: usize = 4096;

/// One GPU call as the pass sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// Process.
    pub pid: u32,
    /// Start (ns).
    pub start: i64,
    /// End (ns).
    pub end: i64,
}

/// Per thread: calls held back to restore time order, the last call released, and the open
/// launch-count run.
#[derive(Debug)]
pub struct Cursor {
    /// The thread.
    pub tid: u32,
    pending: VecDeque<Call>,
    last: Option<Call>,
    run: Option<LaunchSecond>,
    /// Bounds of the run's second (ns), so most launches skip the division.
    run_ns: (i64, i64),
}

impl Cursor {
    /// A thread with no call seen yet.
    pub fn new(tid: u32) -> Cursor {
        Cursor {
            tid,
            pending: VecDeque::new(),
            last: None,
            run: None,
            run_ns: (0, 0),
        }
    }

    /// Takes a call in stored order; false when it is older than a call already released.
    pub fn push(&mut self, c: Call, gaps: &mut Vec<Gap>) -> bool {
        if self.last.is_some_and(|l| c.start < l.start) {
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
            self.release(gaps);
        }
        true
    }

    /// Releases the oldest held call, recording the gap before it.
    fn release(&mut self, gaps: &mut Vec<Gap>) {
        let Some(c) = self.pending.pop_front() else {
            return;
        };
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
    pub fn finish(&mut self, gaps: &mut Vec<Gap>, launches: &mut Vec<LaunchSecond>) {
        while !self.pending.is_empty() {
            self.release(gaps);
        }
        launches.extend(self.run.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(start: i64, end: i64) -> Call {
        Call { pid: 1, start, end }
    }

    #[test]
    fn restores_order_within_the_buffer_and_records_gaps() {
        let mut c = Cursor::new(7);
        let mut gaps = Vec::new();
        // Stored order: 0, 5ms (out of order), 2ms, then in order.
        assert!(c.push(call(0, 100), &mut gaps));
        assert!(c.push(call(5_000_000, 5_000_100), &mut gaps));
        assert!(c.push(call(2_000_000, 2_000_100), &mut gaps));
        let mut launches = Vec::new();
        c.finish(&mut gaps, &mut launches);
        let got: Vec<(i64, i64)> = gaps.iter().map(|g| (g.start, g.end)).collect();
        assert_eq!(got, [(100, 2_000_000), (2_000_100, 5_000_000)]);
        assert!(gaps.iter().all(|g| g.tid == 7 && g.pid == 1));
    }

    #[test]
    fn refuses_a_call_older_than_one_released() {
        let mut c = Cursor::new(1);
        let mut gaps = Vec::new();
        for i in 0..=REORDER_ROWS as i64 {
            assert!(c.push(call(10 + i, 11 + i), &mut gaps));
        }
        // The first call (start 10) has been released: start 5 cannot be placed any more.
        assert!(!c.push(call(5, 6), &mut gaps));
        assert!(
            c.push(call(11, 12), &mut gaps),
            "ties and later starts still fit"
        );
    }

    #[test]
    fn counts_launches_per_second_and_process() {
        let mut c = Cursor::new(3);
        let mut out = Vec::new();
        let s = 1_000_000_000;
        for (pid, t) in [(1, 10), (1, s - 1), (1, s), (2, s + 5), (1, 3 * s + 1)] {
            c.count_launch(pid, 100 + t, 100, &mut out);
        }
        c.finish(&mut Vec::new(), &mut out);
        let got: Vec<(u32, i64, i64)> = out.iter().map(|l| (l.pid, l.sec, l.launches)).collect();
        assert_eq!(got, [(1, 0, 2), (1, 1, 1), (2, 1, 1), (1, 3, 1)]);
    }
}
