//! The time budget: for every thread that makes GPU calls (and its process), a closed
//! partition of its observed span in the window. Inside GPU calls, by class (launch, copies
//! by direction with bytes and achieved bandwidth, synchronisation, allocation, free,
//! collectives, other), each split into on-CPU, preempted and blocked; outside GPU calls:
//! on-CPU host work, preempted (and by whom), blocked on its own sockets, on its own block
//! I/O, or otherwise. The buckets sum to the span by construction (on-CPU time is what the
//! calls and the off-CPU intervals leave); the span plus the time before the thread's first
//! event and after its last is the window. Plus a host-side estimate of the process's GPU idle
//! time and the longest stalls (no GPU call for a while) with their own split.
//!
//! A thread cannot start a call while it is off the CPU, so every off-CPU interval lies in at
//! most one call: the one that started last before it. The GPU-call pass finds that call for
//! every interval as it goes through the thread's calls in order ([`pass`]), and the socket
//! call and the process's block requests in flight for the others.

pub mod pass;

use std::collections::{BTreeMap, HashMap};

use causeway_store::StoreError;
use causeway_store::catalog::{self, Class, Source};
use serde::Serialize;

use crate::facts::Ctx;
use crate::intervals::{Span, overlaps};

/// A stall is a gap of at least this long between two GPU calls of a feeding thread.
pub const STALL_MIN_NS: i64 = 100_000_000;

/// GPU idle stretches at least this long (start-up, a feeding stall) are counted apart in the
/// idle estimate: measured once, never scaled up for drains whose next work was not measured.
pub const LONG_IDLE_NS: i64 = 1_000_000_000;

/// Stalls reported per thread, longest first.
pub const STALLS_PER_THREAD: usize = 3;

/// The classes of GPU calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallClass {
    /// Kernel and graph launches.
    Launch,
    /// Host-to-device copies.
    CopyH2d,
    /// Device-to-host copies.
    CopyD2h,
    /// Device-to-device and peer copies.
    CopyD2d,
    /// Other copies (host-to-host, unified addressing) and memsets.
    CopyOther,
    /// Synchronisations (the host waits for the GPU).
    Sync,
    /// Device memory allocations.
    Alloc,
    /// Device memory frees.
    Free,
    /// NCCL collectives and point-to-point calls.
    Collective,
    /// Everything else (graph capture, instantiation, ...).
    Other,
}

impl CallClass {
    /// The class of a catalogue op; `dir` is the copy direction (arg1) where it has one.
    pub fn of(op_id: u16, dir: i64) -> CallClass {
        let Some(o) = catalog::op_by_id(op_id) else {
            return CallClass::Other;
        };
        if o.source == Source::Nccl {
            return CallClass::Collective;
        }
        match o.class {
            Class::Launch => CallClass::Launch,
            Class::Sync => CallClass::Sync,
            // Peer copies carry the destination device in arg1, not a direction.
            Class::Copy if o.name.contains("Peer") => CallClass::CopyD2d,
            Class::Copy => match dir {
                1 => CallClass::CopyH2d,
                2 => CallClass::CopyD2h,
                3 => CallClass::CopyD2d,
                _ => CallClass::CopyOther,
            },
            Class::Memset => CallClass::CopyOther,
            Class::Free => CallClass::Free,
            Class::Alloc => CallClass::Alloc,
            _ => CallClass::Other,
        }
    }

    /// Whether the class is a copy.
    pub fn is_copy(self) -> bool {
        matches!(
            self,
            CallClass::CopyH2d | CallClass::CopyD2h | CallClass::CopyD2d | CallClass::CopyOther
        )
    }
}

/// Time inside one class of GPU calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Inside {
    /// The class.
    pub class: Option<CallClass>,
    /// Calls (starting in the window).
    pub calls: u64,
    /// Time in them (ns).
    pub total_ns: i64,
    /// Of which on the CPU.
    pub on_cpu_ns: i64,
    /// Off the CPU while runnable (preempted).
    pub preempted_ns: i64,
    /// Off the CPU, blocked or sleeping.
    pub blocked_ns: i64,
    /// Off the CPU in an unknown state (imported traces).
    pub unknown_ns: i64,
    /// Calls the kernel counted, where more than were stored (sampled probes): the time and
    /// splits above are from the stored calls only; scale by counted / calls to estimate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counted_calls: Option<u64>,
    /// The time with each op's stored calls scaled to its own counted ones (ns): the estimate
    /// where ops of the class were sampled at different rates.
    #[serde(skip)]
    pub scaled_ns: i64,
    /// Bytes moved (copies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<i64>,
    /// Bytes per second of call time (copies): for a synchronous copy the transfer rate; for
    /// an asynchronous one, how fast the call returns (slow when it copies pageable memory
    /// itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_s: Option<f64>,
}

impl Inside {
    /// Estimated time inside the class's calls, scaled to the calls the kernel counted.
    pub fn estimated_total_ns(&self) -> i64 {
        match self.counted_calls {
            Some(_) if self.scaled_ns > self.total_ns => self.scaled_ns,
            Some(c) if self.calls > 0 && c > self.calls => {
                (self.total_ns as f64 * c as f64 / self.calls as f64) as i64
            }
            _ => self.total_ns,
        }
    }

    /// Calls, the kernel's count where larger.
    pub fn estimated_calls(&self) -> u64 {
        self.counted_calls.unwrap_or(0).max(self.calls)
    }
}

/// Time outside GPU calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Outside {
    /// On the CPU: host work (Python, data preparation, the framework).
    pub on_cpu_ns: i64,
    /// Off the CPU while runnable.
    pub preempted_ns: i64,
    /// Blocked inside its own socket calls.
    pub blocked_net_ns: i64,
    /// Blocked while a block I/O request of its process was in flight.
    pub blocked_io_ns: i64,
    /// Blocked otherwise (sleeping, waiting for other threads or processes).
    pub blocked_other_ns: i64,
    /// Off the CPU in an unknown state (imported traces).
    pub unknown_ns: i64,
}

/// Who ran while a thread was preempted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preemptor {
    /// Thread id of the task that ran (0: idle).
    pub tid: u32,
    /// Its process, when it is traced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Its name (data from the traced machine).
    pub name: String,
    /// Preempted time (ns).
    pub ns: i64,
}

/// A stretch without GPU calls on a feeding thread, with where its time went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stall {
    /// Start (ns since the epoch).
    pub start_ns: i64,
    /// Length (ns).
    pub duration_ns: i64,
    /// On the CPU.
    pub on_cpu_ns: i64,
    /// Preempted.
    pub preempted_ns: i64,
    /// Blocked or sleeping.
    pub blocked_ns: i64,
    /// Off the CPU in an unknown state.
    pub unknown_ns: i64,
}

/// The budget of one thread (or, with `tid` = None, of a process: its threads' sums).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Budget {
    /// Node.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// Thread (None for a process total).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// Thread or process name (data from the traced machine).
    pub comm: String,
    /// Where the process ran, when in a container or pod ("pod ml-jobs/trainer-0, container
    /// trainer (containerd 3f1c2a9be4d5)").
    #[serde(skip_serializing_if = "String::is_empty")]
    pub place: String,
    /// The window (ns).
    pub window_ns: i64,
    /// The part of it the thread was seen in: from its first event to its last (ns); the
    /// buckets below sum to it.
    pub span_ns: i64,
    /// GPU calls by class, largest first.
    pub inside: Vec<Inside>,
    /// Outside GPU calls.
    pub outside: Outside,
    /// Who ran while it was preempted (inside and outside calls), largest first (at most 5).
    pub preemptors: Vec<Preemptor>,
    /// Estimated GPU idle time of the process (no outstanding work, from a synchronisation
    /// that drained the device to the next launch or copy): an estimate from the host side.
    pub gpu_idle_estimate_ns: i64,
    /// Of which in idle stretches of at least [`LONG_IDLE_NS`] (start-up, feeding stalls).
    #[serde(skip_serializing_if = "is_zero")]
    pub gpu_idle_long_ns: i64,
    /// The longest stalls (at least 100 ms without a GPU call), longest first; none where GPU
    /// probes were sampled (calls were made there but not all stored).
    pub stalls: Vec<Stall>,
    /// Where fewer events were stored than the kernel counted, which buckets that affects.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub coverage: Vec<String>,
    /// The counted calls would put more time inside GPU calls than the thread's span: no
    /// figure of this thread is scaled (its evidence queries scale by 1 too).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub estimate_refused: bool,
    /// The counted calls put a little more time inside GPU calls than the span holds (at most
    /// [`MAX_OVERSHOOT_PCT`]: the sampled calls were slower than the rest): the factor, in
    /// (0, 1), that scales the unstored calls' time down so that the calls fill the span at
    /// most. Counts stay the kernel's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_bound: Option<f64>,
}

/// How far (percent of the span) the scaled time inside GPU calls may exceed a thread's span
/// and still be bounded to it rather than refused: sampling that caught the slow calls (one
/// lab run under two busy loops: 6.53 s in a 6.48-s span). Counters that claim more are not
/// believed (an import's 112x).
pub const MAX_OVERSHOOT_PCT: i64 = 125;

/// How a budget's figures scale its stored calls to the calls the kernel counted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scaling {
    /// Every figure from the stored calls (all stored, or the estimate refused).
    None,
    /// Counts and times scaled by each op's counted / stored calls.
    Full,
    /// Counts scaled; the unstored calls' time scaled by the factor (in (0, 1)) too.
    Bounded(f64),
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl Budget {
    /// Time inside GPU calls (ns).
    pub fn inside_ns(&self) -> i64 {
        self.inside.iter().map(|i| i.total_ns).sum()
    }

    /// Preempted time, inside and outside calls (ns).
    pub fn preempted_ns(&self) -> i64 {
        self.inside.iter().map(|i| i.preempted_ns).sum::<i64>() + self.outside.preempted_ns
    }

    /// The sum of every bucket (ns): equals `span_ns` for a closed budget.
    pub fn bucket_sum_ns(&self) -> i64 {
        let o = &self.outside;
        self.inside
            .iter()
            .map(|i| i.on_cpu_ns + i.preempted_ns + i.blocked_ns + i.unknown_ns)
            .sum::<i64>()
            + o.on_cpu_ns
            + o.preempted_ns
            + o.blocked_net_ns
            + o.blocked_io_ns
            + o.blocked_other_ns
            + o.unknown_ns
    }

    /// Whether some figure of this budget is scaled from sampled calls (its evidence queries
    /// then carry the scale's definition; otherwise every op's scale is 1).
    pub fn scaled(&self) -> bool {
        self.scaling() != Scaling::None
    }

    /// How its figures scale the stored calls (its evidence queries scale the same way).
    pub fn scaling(&self) -> Scaling {
        if self.estimate_refused || !self.inside.iter().any(|i| i.counted_calls.is_some()) {
            Scaling::None
        } else if let Some(f) = self.time_bound {
            Scaling::Bounded(f)
        } else {
            Scaling::Full
        }
    }

    /// The class row of `class`, if the thread made such calls.
    pub fn class(&self, class: CallClass) -> Option<&Inside> {
        self.inside.iter().find(|i| i.class == Some(class))
    }

    /// Time in synchronisations and device-to-host copies (ns): waiting for the GPU, the whole
    /// call (a real GPU's sync spins on the CPU, the stand-in's sleeps).
    pub fn waiting_ns(&self) -> i64 {
        [CallClass::Sync, CallClass::CopyD2h]
            .into_iter()
            .filter_map(|c| self.class(c))
            .map(|i| i.total_ns)
            .sum()
    }
}

fn gpu_op(o: &catalog::OpInfo) -> bool {
    o.source.is_call()
}

/// Budgets of every thread with GPU calls under the context's pid filter, then one per
/// process (its threads summed), processes first, busiest first.
pub fn budgets(ctx: &Ctx<'_>) -> Result<Vec<Budget>, StoreError> {
    let mut out = Vec::new();
    for node in &ctx.nodes {
        out.extend(node_budgets(ctx, node)?);
    }
    Ok(out)
}

fn node_budgets(ctx: &Ctx<'_>, node: &str) -> Result<Vec<Budget>, StoreError> {
    let w = ctx.window;
    let feeders: Vec<_> = ctx
        .threads
        .iter()
        .filter(|t| t.node == node && t.gpu_calls > 0)
        .collect();
    if feeders.is_empty() {
        return Ok(Vec::new());
    }
    let Some(found) = ctx.budget_calls.get(node) else {
        return Ok(Vec::new());
    };

    // Calls per class.
    let (coverage, ratio) = coverage_notes(ctx, node)?;
    let pid_of: HashMap<u32, u32> = feeders.iter().map(|t| (t.tid, t.pid)).collect();
    let mut inside: HashMap<u32, BTreeMap<CallClass, Inside>> = HashMap::new();
    for c in &found.calls {
        let class = CallClass::of(c.op, c.dir);
        let row = inside
            .entry(c.tid)
            .or_default()
            .entry(class)
            .or_insert_with(|| Inside {
                class: Some(class),
                ..Inside::default()
            });
        row.calls += c.calls.max(0) as u64;
        let x = pid_of
            .get(&c.tid)
            .and_then(|p| ratio.get(&(*p, c.op)))
            .copied()
            .unwrap_or(1.0);
        *row.counted_calls.get_or_insert(0) += (c.calls.max(0) as f64 * x).round() as u64;
        row.total_ns = row.total_ns.saturating_add(c.ns.max(0));
        row.scaled_ns = row
            .scaled_ns
            .saturating_add((c.ns.max(0) as f64 * x) as i64);
        if class.is_copy() {
            *row.bytes.get_or_insert(0) = row.bytes.unwrap_or(0).saturating_add(c.bytes.max(0));
        }
    }

    // Off-CPU time, where it fell.
    let mut outside: HashMap<u32, Outside> = HashMap::new();
    let mut preempted_by: HashMap<u32, HashMap<u32, i64>> = HashMap::new();
    for o in &found.off {
        let t = o.tid;
        if o.state == 0 && o.ran >= 0 {
            *preempted_by
                .entry(t)
                .or_default()
                .entry(o.ran as u32)
                .or_default() += o.off_ns;
        }
        if let Some((op, dir)) = o.call {
            let class = CallClass::of(op, dir);
            let row = inside
                .entry(t)
                .or_default()
                .entry(class)
                .or_insert_with(|| Inside {
                    class: Some(class),
                    ..Inside::default()
                });
            let part = o.in_gpu_ns;
            match o.state {
                0 => row.preempted_ns += part,
                1 => row.blocked_ns += part,
                _ => row.unknown_ns += part,
            }
            // What of the interval ran past the call's end is outside it.
            add_outside(
                outside.entry(t).or_default(),
                o.state,
                o.off_ns - part,
                0,
                0,
            );
        } else {
            add_outside(
                outside.entry(t).or_default(),
                o.state,
                o.off_ns,
                o.in_net_ns,
                o.in_io_ns,
            );
        }
    }
    let idle = &found.idle;

    let threads_of: HashMap<u32, (u32, String)> = ctx
        .threads
        .iter()
        .filter(|t| t.node == node)
        .map(|t| (t.tid, (t.pid, t.comm.clone())))
        .collect();

    let mut out = Vec::new();
    for t in &feeders {
        let lo = t.first_ns.max(w.from_ns);
        let hi = t.last_ns.min(w.until_ns);
        let span = (hi - lo).max(0);
        let mut rows: Vec<Inside> = inside
            .remove(&t.tid)
            .unwrap_or_default()
            .into_values()
            .collect();
        for row in &mut rows {
            row.counted_calls = row.counted_calls.filter(|&c| c > row.calls);
            row.on_cpu_ns =
                (row.total_ns - row.preempted_ns - row.blocked_ns - row.unknown_ns).max(0);
            if let Some(b) = row.bytes
                && row.total_ns > 0
            {
                row.bytes_per_s = Some(b as f64 * 1e9 / row.total_ns as f64);
            }
        }
        rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.class.cmp(&b.class)));
        // A thread cannot be inside GPU calls longer than its span: counters that say so
        // (however plausible each op's alone) are not extrapolated from.
        let mut notes = coverage.get(&t.pid).cloned().unwrap_or_default();
        let scaled_inside: i64 = rows.iter().map(Inside::estimated_total_ns).sum();
        let stored_inside: i64 = rows.iter().map(|r| r.total_ns).sum();
        let over = scaled_inside > span && rows.iter().any(|r| r.counted_calls.is_some());
        // A little over: the unstored calls' time scaled down to what the span leaves them.
        let time_bound = (over
            && stored_inside < span
            && (scaled_inside as i128) * 100 <= (span as i128) * i128::from(MAX_OVERSHOOT_PCT))
        .then(|| (span - stored_inside) as f64 / (scaled_inside - stored_inside) as f64);
        if let Some(f) = time_bound {
            for row in rows.iter_mut().filter(|r| r.counted_calls.is_some()) {
                let extra = row.estimated_total_ns() - row.total_ns;
                row.scaled_ns = row.total_ns + (extra as f64 * f) as i64;
            }
            notes.push(format!(
                "the counted calls would put {} inside GPU calls in a span of {}: the unstored calls' time is scaled by {f:.3} so that the calls fill the span at most (an upper bound; counts are the kernel's)",
                crate::fmt::dur(scaled_inside),
                crate::fmt::dur(span)
            ));
        }
        let estimate_refused = over && time_bound.is_none();
        if estimate_refused {
            for row in &mut rows {
                row.counted_calls = None;
                row.scaled_ns = row.total_ns;
            }
            notes.push(format!(
                "the counted calls would put {} inside GPU calls in a span of {}: not extrapolated, figures from the stored calls",
                crate::fmt::dur(scaled_inside),
                crate::fmt::dur(span)
            ));
        }
        let mut o = outside.remove(&t.tid).unwrap_or_default();
        let used: i64 = rows.iter().map(|r| r.total_ns).sum::<i64>()
            + o.preempted_ns
            + o.blocked_net_ns
            + o.blocked_io_ns
            + o.blocked_other_ns
            + o.unknown_ns;
        o.on_cpu_ns = (span - used).max(0);
        let mut preemptors: Vec<Preemptor> = preempted_by
            .remove(&t.tid)
            .unwrap_or_default()
            .into_iter()
            .map(|(tid, ns)| {
                let (pid, name) = match threads_of.get(&tid) {
                    Some((pid, comm)) => (Some(*pid), comm.clone()),
                    None if tid == 0 => (None, "idle".to_string()),
                    None => match ctx.task(node, tid) {
                        Some((pid, comm)) => (Some(*pid), comm.clone()),
                        None => (None, ctx.name(node, tid)),
                    },
                };
                Preemptor { tid, pid, name, ns }
            })
            .collect();
        preemptors.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
        preemptors.truncate(5);
        out.push(Budget {
            node: node.to_string(),
            pid: t.pid,
            tid: Some(t.tid),
            comm: t.comm.clone(),
            place: ctx.place(node, t.pid),
            window_ns: ctx.window_ns(),
            span_ns: span,
            inside: rows,
            outside: o,
            preemptors,
            gpu_idle_estimate_ns: idle.get(&t.pid).copied().unwrap_or(0),
            gpu_idle_long_ns: found.idle_long.get(&t.pid).copied().unwrap_or(0),
            stalls: stalls(ctx, node, t.tid, lo, hi),
            coverage: notes,
            estimate_refused,
            time_bound,
        });
    }
    let mut procs = processes(&out, ctx, node);
    procs.append(&mut out);
    Ok(procs)
}

fn add_outside(o: &mut Outside, state: i64, off: i64, net: i64, io: i64) {
    let off = off.max(0);
    match state {
        0 => o.preempted_ns += off,
        1 => {
            let net = net.clamp(0, off);
            let io = io.clamp(0, off - net);
            o.blocked_net_ns += net;
            o.blocked_io_ns += io;
            o.blocked_other_ns += off - net - io;
        }
        _ => o.unknown_ns += off,
    }
}

/// The longest gaps between GPU calls of one thread, split by its off-CPU intervals.
fn stalls(ctx: &Ctx<'_>, node: &str, tid: u32, lo: i64, hi: i64) -> Vec<Stall> {
    let Some(tl) = ctx.timelines.get(node) else {
        return Vec::new();
    };
    let mut gaps: Vec<Span<()>> = tl
        .gaps
        .iter()
        .filter(|g| {
            g.tid == tid && g.end - g.start >= STALL_MIN_NS && !ctx.sampled(node, g.start, g.end)
        })
        .map(|g| Span {
            start: g.start.max(lo),
            end: g.end.min(hi),
            data: (),
        })
        .filter(|s| s.end > s.start)
        .collect();
    gaps.sort_by(|a, b| {
        (b.end - b.start)
            .cmp(&(a.end - a.start))
            .then(a.start.cmp(&b.start))
    });
    gaps.truncate(STALLS_PER_THREAD);
    gaps.sort_by_key(|g| g.start);
    let off = ctx.switches.of(node, tid);
    let mut out: Vec<Stall> = gaps
        .iter()
        .map(|g| Stall {
            start_ns: g.start,
            duration_ns: g.end - g.start,
            on_cpu_ns: g.end - g.start,
            preempted_ns: 0,
            blocked_ns: 0,
            unknown_ns: 0,
        })
        .collect();
    overlaps(&gaps, off, |g, o, ns| {
        if let Some(s) = out.iter_mut().find(|s| s.start_ns == g.start) {
            match o.data.state {
                0 => s.preempted_ns += ns,
                1 => s.blocked_ns += ns,
                _ => s.unknown_ns += ns,
            }
            s.on_cpu_ns -= ns;
        }
    });
    for s in &mut out {
        s.on_cpu_ns = s.on_cpu_ns.max(0);
    }
    out.sort_by(|a, b| {
        b.duration_ns
            .cmp(&a.duration_ns)
            .then(a.start_ns.cmp(&b.start_ns))
    });
    out
}

type Coverage = (HashMap<u32, Vec<String>>, HashMap<(u32, u16), f64>);

/// Per process: notes on GPU ops whose events were stored for only part of the calls, and
/// counted / stored per (pid, op) for those.
fn coverage_notes(ctx: &Ctx<'_>, node: &str) -> Result<Coverage, StoreError> {
    let pid = u32::try_from(ctx.pid).ok();
    let only = (!ctx.only_node).then_some(node);
    let rows = crate::counts::coverage(ctx.r, &ctx.window, only, pid)?;
    let mut out: HashMap<u32, Vec<String>> = HashMap::new();
    let mut ratio = HashMap::new();
    for c in rows.iter().filter(|c| c.node == node) {
        let Some(o) = catalog::op_by_id(c.op_id).filter(|o| gpu_op(o)) else {
            continue;
        };
        if c.scaled() {
            ratio.insert((c.pid, c.op_id), c.scale);
        }
        let notes = out.entry(c.pid).or_default();
        let (s, n) = (c.stored, c.calls);
        if c.implausible {
            notes.push(format!(
                "{}: the source's counters say {} calls where the trace holds {s} events: counters not used, figures from the stored calls",
                o.name, c.counted
            ));
        } else if c.refused {
            notes.push(format!(
                "{}: the counted calls ({}) would put more time inside {} than its threads ran: not extrapolated, figures from the {s} stored calls",
                o.name, c.counted, o.name
            ));
        } else if n > 0 && s < n && (n - s) * 100 >= n {
            notes.push(format!(
                "{}: {s} of {n} calls stored ({:.0}%); time inside {} is counted from the stored calls only",
                o.name,
                s as f64 * 100.0 / n as f64,
                o.name
            ));
        }
    }
    out.retain(|_, v| !v.is_empty());
    Ok((out, ratio))
}

/// One budget per process: the sums of its threads' (its span: the union of theirs).
fn processes(threads: &[Budget], ctx: &Ctx<'_>, node: &str) -> Vec<Budget> {
    let mut by: BTreeMap<u32, Budget> = BTreeMap::new();
    for t in threads {
        let p = by.entry(t.pid).or_insert_with(|| Budget {
            node: node.to_string(),
            pid: t.pid,
            tid: None,
            comm: ctx.name(node, t.pid),
            place: ctx.place(node, t.pid),
            window_ns: t.window_ns,
            span_ns: 0,
            inside: Vec::new(),
            outside: Outside::default(),
            preemptors: Vec::new(),
            gpu_idle_estimate_ns: t.gpu_idle_estimate_ns,
            gpu_idle_long_ns: t.gpu_idle_long_ns,
            stalls: Vec::new(),
            coverage: t.coverage.clone(),
            estimate_refused: false,
            time_bound: None,
        });
        p.span_ns += t.span_ns;
        p.estimate_refused |= t.estimate_refused;
        // Its threads' factors differ: the smallest one (process budgets have no evidence
        // query of their own; each thread's has its own factor).
        p.time_bound = match (p.time_bound, t.time_bound) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for row in &t.inside {
            match p.inside.iter_mut().find(|r| r.class == row.class) {
                Some(r) => {
                    r.scaled_ns = r.estimated_total_ns() + row.estimated_total_ns();
                    if row.counted_calls.is_some() || r.counted_calls.is_some() {
                        r.counted_calls = Some(r.estimated_calls() + row.estimated_calls());
                    }
                    r.calls += row.calls;
                    r.total_ns += row.total_ns;
                    r.on_cpu_ns += row.on_cpu_ns;
                    r.preempted_ns += row.preempted_ns;
                    r.blocked_ns += row.blocked_ns;
                    r.unknown_ns += row.unknown_ns;
                    if let Some(b) = row.bytes {
                        *r.bytes.get_or_insert(0) += b;
                    }
                }
                None => p.inside.push(row.clone()),
            }
        }
        let (a, b) = (&mut p.outside, &t.outside);
        a.on_cpu_ns += b.on_cpu_ns;
        a.preempted_ns += b.preempted_ns;
        a.blocked_net_ns += b.blocked_net_ns;
        a.blocked_io_ns += b.blocked_io_ns;
        a.blocked_other_ns += b.blocked_other_ns;
        a.unknown_ns += b.unknown_ns;
        for q in &t.preemptors {
            match p.preemptors.iter_mut().find(|x| x.tid == q.tid) {
                Some(x) => x.ns += q.ns,
                None => p.preemptors.push(q.clone()),
            }
        }
    }
    let mut out: Vec<Budget> = by.into_values().collect();
    for p in &mut out {
        for row in &mut p.inside {
            row.bytes_per_s = row
                .bytes
                .filter(|_| row.total_ns > 0)
                .map(|b| b as f64 * 1e9 / row.total_ns as f64);
        }
        p.inside
            .sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.class.cmp(&b.class)));
        p.preemptors
            .sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
        p.preemptors.truncate(5);
    }
    out.sort_by(|a, b| b.inside_ns().cmp(&a.inside_ns()).then(a.pid.cmp(&b.pid)));
    out
}

#[cfg(test)]
mod tests {
    use causeway_store::OpCount;

    use super::CallClass;
    use crate::detectors::testutil::{ev, explain_written};
    use causeway_demo::model::op;

    /// Two sync ops of one thread, one sampled (a third of its calls stored), the other stored
    /// whole: each is scaled by its own ratio (300 + 200 ms), not by the class's mix (600 ms).
    #[test]
    fn each_op_of_a_class_is_scaled_by_its_own_sampling() {
        const T0: i64 = 1_700_000_000_000_000_000;
        const MS: i64 = 1_000_000;
        let e = explain_written(|w| {
            for i in 0..100 {
                let t = T0 + i * 10 * MS;
                w.append(&ev(t, 20_000, "cudaLaunchKernel", 0, 0)).unwrap();
                w.append(&ev(t + MS, MS, "cudaStreamSynchronize", 0, 0))
                    .unwrap();
                w.append(&ev(t + 3 * MS, 2 * MS, "cudaDeviceSynchronize", 0, 0))
                    .unwrap();
            }
            // The window ends at the last event: one more launch after the last sync.
            w.append(&ev(T0 + 1_000 * MS, 20_000, "cudaLaunchKernel", 0, 0))
                .unwrap();
            let count = |name, calls, stored| OpCount {
                pid: 10,
                op_id: op(name),
                window_start_ns: T0,
                window_end_ns: T0 + 1_000 * MS,
                calls,
                stored,
                ..OpCount::default()
            };
            w.record_op_counts(&[
                count("cudaStreamSynchronize", 300, 100),
                count("cudaDeviceSynchronize", 100, 100),
            ])
            .unwrap();
        });
        let b = e.budgets.iter().find(|b| b.tid == Some(10)).unwrap();
        let sync = b.class(CallClass::Sync).unwrap();
        assert_eq!((sync.calls, sync.estimated_calls()), (200, 400));
        assert_eq!(sync.total_ns, 300 * MS);
        assert_eq!(sync.estimated_total_ns(), 500 * MS);
    }
}
