//! The synthetic workload model behind `causeway demo`: a deterministic random source, event
//! builders with the catalogue's arg semantics, and a training/inference loop whose knobs inject
//! one pathology at a time (preemption, input starvation, sync storms, allocator churn, ...).

use causeway_store::catalog;
use causeway_store::{Event, ProcessInfo};

/// Fixed start of every demo trace (2026-03-20T09:46:40Z), so outputs are reproducible.
pub const T0: i64 = 1_774_000_000_000_000_000;
/// One millisecond in ns.
pub const MS: i64 = 1_000_000;
/// One microsecond in ns.
pub const US: i64 = 1_000;

/// sched_switch arg1: preempted while runnable.
pub const PREEMPTED: i64 = 0;
/// sched_switch arg1: blocked/sleeping.
pub const BLOCKED: i64 = 1;

/// Catalogue id of an op (0 if the name is unknown; a unit test pins every name used here).
pub fn op(name: &str) -> u16 {
    catalog::op_by_name(name).map_or(0, |o| o.id)
}

/// Events and processes of one node, built deterministically.
#[derive(Debug, Clone)]
pub struct Gen {
    /// Events, in generation order (the writer does not need time order).
    pub events: Vec<Event>,
    /// Processes to record.
    pub procs: Vec<ProcessInfo>,
    state: u64,
}

impl Gen {
    /// A generator with a fixed seed.
    pub fn new(seed: u64) -> Gen {
        Gen {
            events: Vec::new(),
            procs: Vec::new(),
            state: seed ^ 0x9E37_79B9_7F4A_7C15,
        }
    }

    /// splitmix64.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi].
    pub fn between(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        lo + (self.next_u64() % (hi - lo + 1) as u64) as i64
    }

    /// `base` +- `pct` percent.
    pub fn jitter(&mut self, base: i64, pct: i64) -> i64 {
        let d = base * pct / 100;
        self.between(base - d, base + d).max(1)
    }

    /// Records a process.
    pub fn process(&mut self, pid: u32, ppid: u32, comm: &str, cmdline: &str) {
        self.procs.push(ProcessInfo {
            pid,
            ppid,
            comm: comm.into(),
            cmdline: cmdline.into(),
            first_seen_ns: T0,
            last_seen_ns: T0,
            ..ProcessInfo::default()
        });
    }

    /// Appends one event.
    #[allow(clippy::too_many_arguments)]
    pub fn ev(&mut self, t: &Thread, ts: i64, dur: i64, op_name: &str, a0: i64, a1: i64) {
        self.events.push(Event {
            timestamp: ts,
            duration: dur,
            pid: t.pid,
            tid: t.tid,
            comm: t.comm.clone(),
            op_id: op(op_name),
            arg0: a0,
            arg1: a1,
            gpu_id: t.gpu,
            ..Event::default()
        });
    }

    /// A thread off the CPU from `ts` for `off` ns (timestamp = switch-out), `next` ran instead.
    pub fn switch(&mut self, t: &Thread, ts: i64, off: i64, next: u32, state: i64) {
        self.ev(t, ts, off, "sched_switch", i64::from(next), state);
    }
}

/// A thread events are attributed to.
#[derive(Debug, Clone)]
pub struct Thread {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub comm: String,
    /// GPU it drives.
    pub gpu: i16,
}

impl Thread {
    /// A thread.
    pub fn new(pid: u32, tid: u32, comm: &str, gpu: i16) -> Thread {
        Thread {
            pid,
            tid,
            comm: comm.into(),
            gpu,
        }
    }
}

/// What a GPU-feeding loop does each step, and which pathology it suffers from.
#[derive(Debug, Clone)]
pub struct Knobs {
    /// Kernel launches per step (alternating cudaLaunchKernel / cuLaunchKernel).
    pub launches: u32,
    /// Host cost of one launch call (ns).
    pub launch_ns: i64,
    /// GPU time of one step's work (ns).
    pub gpu_step_ns: i64,
    /// Stream synchronisations per step (1 = once at the end).
    pub syncs_per_step: u32,
    /// Probability that a launch is preempted by `preempt_by`, and for how long (ns).
    pub preempt: (f64, i64, i64),
    /// The task that preempts.
    pub preempt_by: u32,
    /// Blocked waiting for the next batch before each step (ns), outside any CUDA call.
    pub wait_batch_ns: i64,
    /// Synchronous pageable cudaMemcpy of the batch (ns), 0 = async pinned copy.
    pub sync_memcpy_ns: i64,
    /// cudaMalloc/cudaFree each step: (first latency, last latency, fraction freed).
    pub malloc: Option<(i64, i64, f64)>,
    /// Checkpoint every N ns: (interval, writes, ns per write).
    pub checkpoint: Option<(i64, u32, i64)>,
    /// Blocked in net_recv before each step (ns).
    pub net_wait_ns: i64,
    /// Slow first launches in the first second (lazy module loading), ns each.
    pub cold_launch_ns: i64,
    /// From this offset on, extra host time per launch (Python overhead grows).
    pub slowdown: Option<(i64, i64)>,
    /// ncclAllReduce per step.
    pub nccl: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            launches: 24,
            launch_ns: 8 * US,
            gpu_step_ns: 18 * MS,
            syncs_per_step: 1,
            preempt: (0.0, 0, 0),
            preempt_by: 0,
            wait_batch_ns: 0,
            sync_memcpy_ns: 0,
            malloc: None,
            checkpoint: None,
            net_wait_ns: 0,
            cold_launch_ns: 0,
            slowdown: None,
            nccl: false,
        }
    }
}

/// Runs a GPU-feeding loop on `t` from `start` for `span` ns. Returns the number of steps.
pub fn feed_loop(g: &mut Gen, t: &Thread, start: i64, span: i64, k: &Knobs) -> u64 {
    let end = start + span;
    let mut now = start;
    let mut gpu_free = start;
    let mut steps = 0u64;
    let mut next_ckpt = k.checkpoint.map_or(i64::MAX, |c| start + c.0);
    let mut kernels_seen = 0u32;
    while now < end {
        let progress = (now - start) as f64 / span as f64;
        if k.wait_batch_ns > 0 {
            let w = g.jitter(k.wait_batch_ns, 30);
            g.switch(t, now, w, 0, BLOCKED);
            now += w + 3 * US;
        }
        if k.net_wait_ns > 0 {
            let w = g.jitter(k.net_wait_ns, 40);
            g.ev(t, now, w, "net_recv", 65_536, 17);
            g.switch(t, now + 15 * US, w - 30 * US, 0, BLOCKED);
            now += w + 5 * US;
        }
        if k.sync_memcpy_ns > 0 {
            let w = g.jitter(k.sync_memcpy_ns, 20);
            g.ev(t, now, w, "cudaMemcpy", 12 << 20, 1);
            g.switch(t, now + 20 * US, w - 40 * US, 0, BLOCKED);
            now += w + 4 * US;
        } else {
            let d = g.jitter(25 * US, 30);
            g.ev(t, now, d, "cudaMemcpyAsync", 12 << 20, 1);
            now += d + 3 * US;
        }
        if let Some((first, last, freed)) = k.malloc {
            let lat = first + ((last - first) as f64 * progress) as i64;
            let d = g.jitter(lat, 15);
            let bytes = 64 << 20;
            g.ev(
                t,
                now,
                d,
                "cudaMalloc",
                bytes,
                0x7f00_0000_0000 + steps as i64 * bytes,
            );
            now += d + 3 * US;
            if g.unit() < freed {
                let d = g.jitter(30 * US, 20);
                g.ev(
                    t,
                    now,
                    d,
                    "cudaFree",
                    0x7f00_0000_0000 + steps as i64 * bytes,
                    0,
                );
                now += d + 3 * US;
            }
        }
        let per_launch_gpu = k.gpu_step_ns / i64::from(k.launches.max(1));
        let group = (k.launches / k.syncs_per_step.max(1)).max(1);
        for i in 0..k.launches {
            let name = if i % 2 == 0 {
                "cudaLaunchKernel"
            } else {
                "cuLaunchKernel"
            };
            let mut d = g.jitter(k.launch_ns, 30);
            if let Some((at, extra)) = k.slowdown
                && now - start >= at
            {
                now += extra;
            }
            if k.cold_launch_ns > 0 && kernels_seen < k.launches && now - start < 2_000 * MS {
                // First use of a kernel: the driver loads its module; the thread blocks inside.
                let off = g.jitter(k.cold_launch_ns, 40);
                g.switch(t, now + 30 * US, off, 0, BLOCKED);
                d += off + 60 * US;
                kernels_seen += 1;
            } else if g.unit() < k.preempt.0 {
                let off = g.between(k.preempt.1, k.preempt.2);
                g.switch(t, now + d / 2, off, k.preempt_by, PREEMPTED);
                d += off;
            }
            g.ev(t, now, d, name, 0x5555_0000 + i64::from(i), 1024);
            gpu_free = gpu_free.max(now + d) + per_launch_gpu;
            now += d + 2 * US;
            if (i + 1) % group == 0 && i + 1 < k.launches {
                now = sync(g, t, now, gpu_free);
                if k.syncs_per_step > 1 {
                    // The hidden `.item()`: a 4-byte device-to-host copy after the sync.
                    let d = g.jitter(12 * US, 20);
                    g.ev(t, now, d, "cudaMemcpy", 4, 2);
                    now += d + 30 * US;
                }
            }
        }
        if k.nccl {
            let d = g.jitter(30 * US, 20);
            g.ev(t, now, d, "ncclAllReduce", 100 << 20, 0xc0);
            gpu_free += 2 * MS;
            now += d + 2 * US;
        }
        now = sync(g, t, now, gpu_free);
        if now >= next_ckpt
            && let Some((every, writes, w_ns)) = k.checkpoint
        {
            for _ in 0..writes {
                let w = g.jitter(w_ns, 20);
                g.ev(t, now, w, "block_write", 8 << 20, 259 << 20);
                g.switch(t, now + 10 * US, w - 5 * US, 0, BLOCKED);
                now += w + 20 * US;
            }
            next_ckpt += every;
        }
        now += g.jitter(60 * US, 30);
        steps += 1;
    }
    steps
}

/// A cudaStreamSynchronize that waits until the GPU has drained; the thread sleeps inside.
fn sync(g: &mut Gen, t: &Thread, now: i64, gpu_free: i64) -> i64 {
    let wait = (gpu_free - now).max(4 * US);
    g.ev(t, now, wait, "cudaStreamSynchronize", 0x10, 0);
    if wait > 60 * US {
        g.switch(t, now + 8 * US, wait - 20 * US, 0, BLOCKED);
    }
    now + wait + 3 * US
}

/// A thread that mostly sleeps (an API server, a logger): blocked, never in a CUDA call.
pub fn idle_thread(g: &mut Gen, t: &Thread, start: i64, span: i64, sleep_ns: i64) {
    let mut now = start;
    while now < start + span {
        let s = g.jitter(sleep_ns, 10);
        g.switch(t, now, s, 0, BLOCKED);
        now += s + g.jitter(40 * US, 50);
    }
}

/// DataLoader worker: reads a sample, decodes it, hands it over. `contention` > 0 makes the
/// workers preempt each other (more workers than cores).
pub fn worker_loop(
    g: &mut Gen,
    t: &Thread,
    start: i64,
    span: i64,
    read_ns: i64,
    rival: u32,
    contention: f64,
) {
    let mut now = start;
    while now < start + span {
        let r = g.jitter(read_ns, 30);
        g.ev(t, now, r, "block_read", 1 << 20, 259 << 20);
        g.switch(t, now + 5 * US, r - 10 * US, 0, BLOCKED);
        now += r + 10 * US;
        g.ev(t, now, 0, "mm_page_alloc", 1 << 20, 0);
        let mut work = g.jitter(2 * MS, 30);
        if g.unit() < contention {
            let off = g.jitter(3 * MS, 50);
            g.switch(t, now + work / 2, off, rival, PREEMPTED);
            work += off;
        }
        now += work;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_name_used_exists() {
        for n in [
            "sched_switch",
            "cudaLaunchKernel",
            "cuLaunchKernel",
            "cudaMemcpy",
            "cudaMemcpyAsync",
            "cudaStreamSynchronize",
            "cudaMalloc",
            "cudaFree",
            "block_read",
            "block_write",
            "net_recv",
            "ncclAllReduce",
            "mm_page_alloc",
            "process_fork",
            "process_exit",
            "oom_kill",
            "tcp_retransmit",
        ] {
            assert_ne!(op(n), 0, "{n}");
        }
    }

    #[test]
    fn loop_is_deterministic_and_switches_fit_inside_calls() {
        let t = Thread::new(10, 10, "python3", 0);
        let k = Knobs {
            preempt: (0.5, MS, 2 * MS),
            preempt_by: 99,
            ..Knobs::default()
        };
        let mut a = Gen::new(7);
        let mut b = Gen::new(7);
        feed_loop(&mut a, &t, T0, 200 * MS, &k);
        feed_loop(&mut b, &t, T0, 200 * MS, &k);
        assert_eq!(a.events, b.events);
        let launches: Vec<_> = a
            .events
            .iter()
            .filter(|e| e.op_id == op("cudaLaunchKernel") || e.op_id == op("cuLaunchKernel"))
            .collect();
        let pre: Vec<_> = a
            .events
            .iter()
            .filter(|e| e.op_id == op("sched_switch") && e.arg1 == PREEMPTED)
            .collect();
        assert!(!pre.is_empty());
        for s in pre {
            assert!(launches.iter().any(|c| c.timestamp <= s.timestamp
                && s.timestamp + s.duration <= c.timestamp + c.duration));
        }
    }
}
