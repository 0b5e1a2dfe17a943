//! Window accounting for the overhead controller: from the kernel's cumulative call counts and
//! each process's CPU time, what the probes cost each traced process in one window (calls x cost
//! per call) and over the trace, and the calls made (estimate.rs, for sampled ops). No decisions
//! here (overhead_control.rs makes them).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use causeway_store::OverheadWindow;

use crate::estimate::{SampledTime, Windowed, made};
use crate::overhead_control::is_call_op;

/// CPU time of one traced process, as the caller could read it this window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuReading {
    /// Alive: CPU time so far (ns), and whether it started after the trace did (so all of
    /// that time falls inside the trace).
    Alive {
        /// User + system CPU time (ns).
        cpu_ns: u64,
        /// Started after the trace.
        new: bool,
    },
    /// Exited with this total CPU time (the process_exit event), same meaning of `new`.
    Exited {
        /// User + system CPU time (ns).
        cpu_ns: u64,
        /// Started after the trace.
        new: bool,
    },
    /// Not readable (gone, exit event not seen yet).
    Unknown,
}

/// One process's numbers in one window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessWindow {
    /// Probed calls per op in the window, as the kernel counted them.
    pub calls: BTreeMap<u16, u64>,
    /// Calls made per op in the window: the counts, estimated for the time a sampled op's
    /// probes were detached (the estimate the stored counts use).
    pub made: BTreeMap<u16, f64>,
    /// CPU time in the window (ns).
    pub cpu_ns: u64,
    /// Estimated probe time in the window (ns).
    pub probe_ns: f64,
}

impl ProcessWindow {
    /// Probe time as a share of CPU time, in % (CPU time is at least the probe time, which the
    /// kernel charges to the process; tick-resolution CPU readings can be lower). At most 100:
    /// rounding made a process made of probe time 100.00000000000001%, over a 100% budget.
    pub fn pct(&self) -> f64 {
        let cpu = (self.cpu_ns as f64).max(self.probe_ns);
        if cpu <= 0.0 {
            0.0
        } else {
            (100.0 * self.probe_ns / cpu).min(100.0)
        }
    }
}

/// One window, measured.
#[derive(Debug, Default)]
pub struct Measured {
    /// When it began (ns).
    pub start_ns: i64,
    /// Rows for `probe_overhead`.
    pub rows: Vec<OverheadWindow>,
    /// The processes measured, by pid.
    pub procs: BTreeMap<u32, ProcessWindow>,
}

/// The counters and CPU baselines carried from one window to the next, and the totals.
#[derive(Debug)]
pub struct Windows {
    pub(crate) prev_calls: HashMap<(u32, u16), u64>,
    cpu_base: HashMap<u32, u64>,
    /// Processes whose exit was already measured: the kernel keeps their final counts and the
    /// poll state its exit reading, which must not be counted again in later windows.
    exited: BTreeSet<u32>,
    start_ns: i64,
    /// Sampled ops' detached time at the end of the last window.
    detached: Windowed,
    /// Estimated probe time over the trace (ns), all processes.
    pub probe_ns: f64,
    /// CPU time over the trace (ns), all processes with probed calls.
    pub cpu_ns: u64,
}

impl Windows {
    /// The first window begins at `now_ns`.
    pub fn new(now_ns: i64) -> Windows {
        Windows {
            prev_calls: HashMap::new(),
            cpu_base: HashMap::new(),
            exited: BTreeSet::new(),
            start_ns: now_ns,
            detached: Windowed::default(),
            probe_ns: 0.0,
            cpu_ns: 0,
        }
    }

    /// Ends the window at `now_ns`: `counts` are the kernel's cumulative calls per (pid, op),
    /// `cost` an op's probe time per call counted, `cpu` reads a process's CPU time, `sampling`
    /// says how long sampled ops were attached. A process older than the trace is measured from
    /// its second reading on (the first is its baseline).
    pub fn measure(
        &mut self,
        now_ns: i64,
        counts: &[((u32, u16), u64)],
        cost: impl Fn(u16) -> f64,
        cpu: impl Fn(u32) -> CpuReading,
        sampling: &impl SampledTime,
        budget_pct: f64,
    ) -> Measured {
        let start_ns = std::mem::replace(&mut self.start_ns, now_ns);
        let window_ns = (now_ns - start_ns).max(1);
        let seen = self.detached.window(
            counts.iter().map(|((_, op), _)| *op),
            now_ns,
            window_ns,
            sampling,
        );
        let mut procs: BTreeMap<u32, ProcessWindow> = BTreeMap::new();
        for &((pid, op), total) in counts {
            if !is_call_op(op) {
                continue;
            }
            let prev = self.prev_calls.insert((pid, op), total).unwrap_or(0);
            let w = procs.entry(pid).or_default();
            let d = total.saturating_sub(prev);
            if d > 0 {
                w.calls.insert(op, d);
                let made = match seen.get(&op) {
                    Some(&s) => made(d, s, window_ns, sampling.speedup(op, pid).unwrap_or(1.0)),
                    None => d as f64,
                };
                w.made.insert(op, made);
                w.probe_ns += d as f64 * cost(op);
            }
        }
        let mut out = Measured {
            start_ns,
            ..Measured::default()
        };
        for (pid, mut w) in procs {
            let (now_cpu, new, gone) = match cpu(pid) {
                CpuReading::Alive { cpu_ns, new } => (cpu_ns, new, false),
                CpuReading::Exited { cpu_ns, new } => (cpu_ns, new, true),
                CpuReading::Unknown => continue,
            };
            if gone && !self.exited.insert(pid) {
                continue;
            }
            if !gone && self.exited.remove(&pid) {
                // The pid was reused by a new process: its counters start again.
                self.prev_calls.retain(|(p, _), _| *p != pid);
            }
            let Some(base) = self.cpu_base.get(&pid).copied().or(new.then_some(0)) else {
                self.cpu_base.insert(pid, now_cpu);
                continue;
            };
            if gone {
                self.cpu_base.remove(&pid);
            } else {
                self.cpu_base.insert(pid, now_cpu);
            }
            w.cpu_ns = now_cpu.saturating_sub(base);
            if w.calls.is_empty() && w.cpu_ns == 0 {
                continue;
            }
            self.probe_ns += w.probe_ns;
            self.cpu_ns += w.cpu_ns;
            out.rows.push(OverheadWindow {
                pid,
                window_start_ns: start_ns,
                window_end_ns: now_ns,
                cpu_ns: w.cpu_ns,
                probe_ns: w.probe_ns as u64,
                calls: w.calls.values().sum(),
                budget_pct,
            });
            out.procs.insert(pid, w);
        }
        out
    }

    /// The trace so far: estimated probe time over CPU time of the processes with probed calls (%).
    pub fn overall_pct(&self) -> f64 {
        let cpu = (self.cpu_ns as f64).max(self.probe_ns);
        if cpu <= 0.0 {
            0.0
        } else {
            100.0 * self.probe_ns / cpu
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    /// Op 3's probes detached 0.95 s of the first second; pid 7 runs 1.5x as fast without them.
    struct Sampled;

    impl SampledTime for Sampled {
        fn detached_and_switching_ns(&self, op: u16, _now_ns: i64) -> (i64, i64) {
            if op == 3 { (95 * S / 100, 0) } else { (0, 0) }
        }
        fn speedup(&self, _op: u16, pid: u32) -> Option<f64> {
            (pid == 7).then_some(1.5)
        }
    }

    #[test]
    fn the_window_counts_the_calls_made_as_the_stored_counts_estimate_them() {
        let mut w = Windows::new(0);
        let alive = |_| CpuReading::Alive {
            cpu_ns: S as u64,
            new: true,
        };
        let counts = [((7, 3), 100), ((7, 1), 40), ((8, 3), 100)];
        let m = w.measure(S, &counts, |_| 1_000.0, alive, &Sampled, 1.0);
        // Attached 50 ms: 100 calls then, and 0.95 s x 1.5 at that rate, 2,950 in all.
        assert_eq!(m.procs[&7].made[&3], 2_950.0);
        // Without a measured speedup, the attached rate all along; an op never sampled is exact.
        assert_eq!(m.procs[&8].made[&3], 2_000.0);
        assert_eq!(m.procs[&7].made[&1], 40.0);
        // The probes cost only the calls they trapped.
        assert_eq!(m.procs[&7].probe_ns, 140.0 * 1_000.0);
    }
}
