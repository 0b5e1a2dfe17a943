//! Per-call attribution: for every slow CUDA/driver call (not a synchronisation, whose job is
//! to wait), the off-CPU intervals of the *same thread* that overlap it, split by run state
//! (preempted / blocked / unknown) and by the task that ran instead. Off-CPU time of threads
//! outside their calls is reported separately and never blamed on the GPU path.
//!
//! The slow calls come from the shared pass over GPU calls ([`crate::timeline`]) and their
//! overlaps with the thread's off-CPU intervals from a sort-and-sweep join, so the cost follows
//! the slow calls and the pairs found, never the product of calls and switches.

use std::collections::BTreeMap;

use causeway_store::StoreError;
use serde::Serialize;

use crate::facts::Ctx;
use crate::intervals::{Span, overlaps, sort};
use crate::timeline::SlowCall;
pub use crate::timeline::{SLOW_MIN_NS, SLOW_P50_FACTOR};

/// Attribution of one thread's slow calls (outside or inside the warm-up phase).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ThreadAttribution {
    /// Node.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Whether these calls fall in the process's warm-up (first second of GPU calls).
    pub warmup: bool,
    /// Slow calls.
    pub slow_calls: u64,
    /// Their total duration (ns).
    pub slow_ns: i64,
    /// Slow calls with off-CPU time inside.
    pub with_off_cpu: u64,
    /// Off-CPU time inside slow calls (ns).
    pub off_inside_ns: i64,
    /// ... of which preempted while runnable (ns).
    pub preempted_ns: i64,
    /// ... of which blocked/sleeping (ns).
    pub blocked_ns: i64,
    /// ... of which in an unknown state (ns).
    pub unknown_ns: i64,
    /// Slow calls by op.
    pub ops: BTreeMap<String, u64>,
    /// Tasks that ran while the thread was preempted inside slow calls: (pid, ns), largest first.
    pub ran_instead: Vec<(u32, i64)>,
}

/// One slow call as the sweep sees it: its position, to mark the calls with off-CPU time.
type Call = (usize, SlowCall);

/// Runs the attribution over the window of `ctx`; one entry per (thread, warm-up phase).
pub fn attribute(ctx: &Ctx<'_>) -> Result<Vec<ThreadAttribution>, StoreError> {
    let mut by: BTreeMap<(String, u32, u32, bool), ThreadAttribution> = BTreeMap::new();
    let op_name = |id: u16| ctx.op_names.get(&id).map_or("", |(_, op)| op.as_str());
    for node in &ctx.nodes {
        let Some(timeline) = ctx.timelines.get(node) else {
            continue;
        };
        let mut calls: BTreeMap<u32, Vec<Span<Call>>> = BTreeMap::new();
        for c in &timeline.slow {
            let v = calls.entry(c.tid).or_default();
            v.push(Span {
                start: c.start,
                end: c.end,
                data: (0, *c),
            });
        }
        for (tid, mut v) in calls {
            sort(&mut v);
            for (i, c) in v.iter_mut().enumerate() {
                c.data.0 = i;
            }
            // Off-CPU time inside the calls, by (pid, warm-up, ran-instead task, run state).
            let mut off: BTreeMap<(u32, bool, i64, i64), i64> = BTreeMap::new();
            let mut hit = vec![false; v.len()];
            overlaps(&v, ctx.switches.of(node, tid), |c, s, ov| {
                hit[c.data.0] = true;
                let key = (c.data.1.pid, c.data.1.warmup, s.data.ran, s.data.state);
                let e = off.entry(key).or_default();
                *e = e.saturating_add(ov);
            });
            // Slow calls by (pid, warm-up, op): count, time, with off-CPU time inside.
            let mut calls: BTreeMap<(u32, bool, u16), (u64, i64, u64)> = BTreeMap::new();
            for (c, hit) in v.iter().zip(&hit) {
                let c = &c.data.1;
                let e = calls.entry((c.pid, c.warmup, c.op_id)).or_default();
                e.0 += 1;
                e.1 += c.end - c.start;
                e.2 += u64::from(*hit);
            }
            for ((pid, warmup, op), (n, ns, with_off)) in calls {
                let a = entry(&mut by, node, pid, tid, warmup);
                a.slow_calls += n;
                a.slow_ns = a.slow_ns.saturating_add(ns);
                a.with_off_cpu += with_off;
                *a.ops.entry(op_name(op).to_string()).or_default() += n;
            }
            for ((pid, warmup, ran, state), ns) in off {
                let a = entry(&mut by, node, pid, tid, warmup);
                a.off_inside_ns = a.off_inside_ns.saturating_add(ns);
                match state {
                    0 => {
                        a.preempted_ns = a.preempted_ns.saturating_add(ns);
                        let pid = ran.clamp(0, i64::from(u32::MAX)) as u32;
                        match a.ran_instead.iter_mut().find(|x| x.0 == pid) {
                            Some(x) => x.1 += ns,
                            None => a.ran_instead.push((pid, ns)),
                        }
                    }
                    1 => a.blocked_ns = a.blocked_ns.saturating_add(ns),
                    _ => a.unknown_ns = a.unknown_ns.saturating_add(ns),
                }
            }
        }
    }
    let mut out: Vec<ThreadAttribution> = by.into_values().collect();
    for a in &mut out {
        a.ran_instead
            .sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        a.ran_instead.truncate(5);
    }
    Ok(out)
}

fn entry<'m>(
    by: &'m mut BTreeMap<(String, u32, u32, bool), ThreadAttribution>,
    node: &str,
    pid: u32,
    tid: u32,
    warmup: bool,
) -> &'m mut ThreadAttribution {
    by.entry((node.to_string(), pid, tid, warmup))
        .or_insert_with(|| ThreadAttribution {
            node: node.to_string(),
            pid,
            tid,
            warmup,
            ..ThreadAttribution::default()
        })
}

/// Trace-wide summary of where off-CPU time went, for the notes and explanations.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OffCpuSplit {
    /// All off-CPU time of traced threads (ns).
    pub total_ns: i64,
    /// Inside slow GPU calls of launching threads (ns).
    pub inside_slow_calls_ns: i64,
    /// Of launching threads, outside their slow calls (ns).
    pub feeders_elsewhere_ns: i64,
    /// Of threads that made no GPU call: not blamed on the GPU path (ns).
    pub non_gpu_threads_ns: i64,
    /// The largest non-GPU thread: (pid, tid, comm, ns).
    pub largest_non_gpu: Option<(u32, u32, String, i64)>,
}

/// Splits the off-CPU time of the window between slow calls, feeders and other threads.
pub fn split(ctx: &Ctx<'_>, attr: &[ThreadAttribution]) -> OffCpuSplit {
    let mut s = OffCpuSplit::default();
    for t in &ctx.threads {
        s.total_ns = s.total_ns.saturating_add(t.off_ns);
        if t.gpu_calls == 0 {
            s.non_gpu_threads_ns = s.non_gpu_threads_ns.saturating_add(t.off_ns);
            if s.largest_non_gpu.as_ref().is_none_or(|l| t.off_ns > l.3) && t.off_ns > 0 {
                s.largest_non_gpu = Some((t.pid, t.tid, t.comm.clone(), t.off_ns));
            }
        }
    }
    s.inside_slow_calls_ns = attr
        .iter()
        .map(|a| a.off_inside_ns)
        .fold(0, i64::saturating_add);
    let feeders: i64 = ctx
        .threads
        .iter()
        .filter(|t| t.gpu_calls > 0)
        .map(|t| t.off_ns)
        .fold(0, i64::saturating_add);
    s.feeders_elsewhere_ns = feeders.saturating_sub(s.inside_slow_calls_ns).max(0);
    s
}
