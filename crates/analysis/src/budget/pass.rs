//! The time budget's share of the GPU-call pass ([`crate::timeline`]): per feeding thread, which
//! calls are nested in an earlier call of the thread (a runtime call's own driver call), the
//! totals of the others per (op, direction), and every off-CPU interval attributed to the call
//! it falls in, else to the thread's socket call or its process's block I/O in flight; per
//! process, the GPU idle estimate (from a call that drains the GPU to the next that gives it
//! work, counted from the process's first kernel launch on: before it, the GPU is not in use yet
//! and start-up's copies and syncs are not a loop starving it).
//!
//! The pass releases each thread's calls in start order, so nesting is a running maximum of
//! call ends (calls with equal starts: the longest first, as if sorted by duration descending)
//! and the call an off-CPU interval falls in is the last top-level call that started at or
//! before it: a thread cannot start a call while off the CPU. When the store's calls are too
//! far out of order for the pass, one sorted query feeds the same per-thread state instead.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::LazyLock;

use causeway_store::catalog::{self, Class, OpInfo, Source};
use causeway_store::duckdb;
use causeway_store::{Reader, StoreError};

use crate::cursor::Call;
use crate::intervals::Span;
use crate::intervals::sat;
use crate::opsets::{self, tid_list};
use crate::scan::{NodeRef, for_each_batch};
use crate::switches::{MARGIN_NS, Off, Switches};
use crate::window::Window;

/// GPU calls per (thread, op, direction) starting in the window, nested calls left out (their
/// time is their caller's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallRow {
    /// Thread.
    pub tid: u32,
    /// Op id.
    pub op: u16,
    /// Direction (arg1).
    pub dir: i64,
    /// Calls.
    pub calls: i64,
    /// Time in them, clipped to the window end (ns).
    pub ns: i64,
    /// Sum of arg0 (bytes for copies).
    pub bytes: i64,
}

/// Off-CPU time of one thread per (run state, task that ran, call it fell in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffRow {
    /// Thread.
    pub tid: u32,
    /// 0 preempted, 1 blocked, 2 unknown.
    pub state: i64,
    /// The task that ran instead (arg0 of the switch).
    pub ran: i64,
    /// (op, direction) of the GPU call the intervals started in, if any.
    pub call: Option<(u16, i64)>,
    /// Off-CPU time, clipped to the window (ns).
    pub off_ns: i64,
    /// Of which before the call's end.
    pub in_gpu_ns: i64,
    /// Outside GPU calls: of which inside the thread's socket call.
    pub in_net_ns: i64,
    /// Outside GPU and socket calls: of which while a block I/O request of the process was in
    /// flight.
    pub in_io_ns: i64,
}

/// What the pass found on one node for the budget.
#[derive(Debug, Default)]
pub struct NodeCalls {
    /// Top-level GPU calls.
    pub calls: Vec<CallRow>,
    /// Off-CPU time, where it fell.
    pub off: Vec<OffRow>,
    /// GPU idle estimate per process (ns).
    pub idle: HashMap<u32, i64>,
    /// Of which in stretches of at least [`super::LONG_IDLE_NS`] (ns).
    pub idle_long: HashMap<u32, i64>,
}

/// Calls that drain the GPU: synchronisations, frees, and synchronous copies (named: the
/// synchronous peer copy is not counted as one).
pub fn is_drain(o: &OpInfo) -> bool {
    matches!(o.class, Class::Sync | Class::Free)
        || matches!(o.name, "cudaMemcpy" | "cudaMemcpy2D" | "cuMemcpy")
}

/// Calls that give the GPU work: launches, copies and memsets (a synchronous copy gives it
/// work when it starts and drains it when it returns: counting only its end idled the device
/// through every synchronous host-to-device copy, 4 pp over the measured idle on a real nsys
/// trace), collectives.
pub fn is_work(o: &OpInfo) -> bool {
    matches!(o.class, Class::Launch | Class::Copy | Class::Memset) || o.source == Source::Nccl
}

/// Socket calls, block I/O requests and draining calls of the node (read before the pass).
static AUX_SQL: LazyLock<String> = LazyLock::new(|| {
    let net = opsets::op_filter(|o| o.source == Source::Net);
    let drain = opsets::op_filter(is_drain);
    format!(
        "SELECT op_id::BIGINT, pid::BIGINT, tid::BIGINT, timestamp, timestamp + duration
         FROM event_data
         WHERE (?::BOOLEAN OR node = ?) AND timestamp BETWEEN ? - {MARGIN_NS} AND ?
           AND ({net} OR {io} OR {drain})",
        io = opsets::IO.as_str()
    )
});

/// The feeding threads' GPU calls in the order the nesting needs, for stores whose calls the
/// pass cannot put in order.
static SORTED_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT tid::BIGINT, pid::BIGINT, op_id::BIGINT, timestamp, timestamp + duration, arg0, arg1
         FROM event_data
         WHERE (?::BOOLEAN OR node = ?) AND {}
           AND timestamp BETWEEN ? - {MARGIN_NS} AND ?
           AND list_contains(string_split(?, ',')::UINTEGER[], tid)
         ORDER BY tid, timestamp, duration DESC",
        opsets::GPU.as_str()
    )
});

/// Block I/O requests of one process, sorted by start, with the latest end so far.
#[derive(Debug, Default)]
struct Io {
    starts: Vec<i64>,
    reach: Vec<i64>,
}

/// Drain ends of one process, sorted, and per slot (works with exactly `j` drain ends at or
/// before their start) the earliest work start.
#[derive(Debug, Default)]
struct Idle {
    ends: Vec<i64>,
    first_work: Vec<i64>,
    first_launch: i64,
}

/// What every thread's state reads.
#[derive(Debug)]
struct Shared {
    w: Window,
    io: HashMap<u32, Io>,
}

/// The pass's state for one node.
#[derive(Debug)]
pub struct CallPass<'a> {
    node: &'a NodeRef<'a>,
    feeders: HashSet<u32>,
    switches: &'a Switches,
    shared: Shared,
    net: HashMap<u32, Rc<[(i64, i64)]>>,
    idle: Vec<Idle>,
    idle_of: HashMap<u32, usize>,
    /// Per op id: whether it gives the GPU work.
    work: Vec<bool>,
    /// Per op id: whether it launches a kernel.
    launch: Vec<bool>,
    done: HashSet<u32>,
    out: NodeCalls,
}

/// (run state, task that ran, the call's op and direction).
type OffKey = (i64, i64, Option<(u16, i64)>);

/// One feeding thread's state: the call being held (equal starts), the latest call end, the
/// last top-level call, and its off-CPU intervals not yet attributed.
#[derive(Debug)]
pub struct ThreadCalls<'a> {
    tid: u32,
    off: &'a [Span<Off>],
    next_off: usize,
    net: Rc<[(i64, i64)]>,
    next_net: usize,
    held: Option<Call>,
    reach: i64,
    top: Option<Call>,
    totals: Vec<((u16, i64), [i128; 3])>,
    offs: HashMap<OffKey, [i128; 4]>,
    /// (pid, index in the idle table) of the last work call, and its slot.
    idle_at: Option<(u32, Option<usize>, usize)>,
}

impl<'a> CallPass<'a> {
    /// Prepares the pass over `node` for the feeding threads `feeders` (reads the node's socket
    /// calls, block I/O and draining calls).
    pub fn new(
        r: &Reader,
        node: &'a NodeRef<'a>,
        w: Window,
        feeders: &[u32],
        switches: &'a Switches,
    ) -> Result<CallPass<'a>, StoreError> {
        let feeders: HashSet<u32> = feeders.iter().copied().collect();
        let mut work = vec![false; usize::from(u16::MAX) + 1];
        let mut launch = vec![false; usize::from(u16::MAX) + 1];
        let mut kind = vec![0u8; usize::from(u16::MAX) + 1];
        for o in catalog::OPS.iter() {
            work[usize::from(o.id)] = is_work(o);
            launch[usize::from(o.id)] = o.class == Class::Launch;
            kind[usize::from(o.id)] = if o.source == Source::Net {
                1
            } else if o.source == Source::Io {
                2
            } else if is_drain(o) {
                3
            } else {
                0
            };
        }
        let mut net: HashMap<u32, Vec<(i64, i64)>> = HashMap::new();
        let mut io: HashMap<u32, Vec<(i64, i64)>> = HashMap::new();
        let mut drains: HashMap<u32, Vec<i64>> = HashMap::new();
        if !feeders.is_empty() {
            let params = duckdb::params![node.only, node.name, w.from_ns, w.until_ns];
            for_each_batch::<5>(
                r,
                AUX_SQL.as_str(),
                params,
                "reading socket calls, block I/O and draining GPU calls",
                |[op, pid, tid, s, e]| {
                    for i in 0..op.len() {
                        let (p, t) = (pid[i] as u32, tid[i] as u32);
                        match kind[op[i] as u16 as usize] {
                            1 if feeders.contains(&t) => {
                                net.entry(t).or_default().push((s[i], e[i]));
                            }
                            2 => io.entry(p).or_default().push((s[i], e[i])),
                            3 if feeders.contains(&t) && s[i] >= w.from_ns => {
                                drains.entry(p).or_default().push(e[i]);
                            }
                            _ => {}
                        }
                    }
                },
            )?;
        }
        let net = net
            .into_iter()
            .map(|(t, mut v)| {
                v.sort_unstable();
                (t, Rc::from(v))
            })
            .collect();
        let io = io
            .into_iter()
            .map(|(p, mut v)| {
                v.sort_unstable();
                let mut reach = Vec::with_capacity(v.len());
                let mut m = i64::MIN;
                for &(_, e) in &v {
                    m = m.max(e);
                    reach.push(m);
                }
                let starts = v.into_iter().map(|(s, _)| s).collect();
                (p, Io { starts, reach })
            })
            .collect();
        let mut idle = Vec::new();
        let mut idle_of = HashMap::new();
        for (p, mut ends) in drains {
            ends.sort_unstable();
            idle_of.insert(p, idle.len());
            idle.push(Idle {
                first_work: vec![i64::MAX; ends.len() + 1],
                ends,
                first_launch: i64::MAX,
            });
        }
        Ok(CallPass {
            node,
            feeders,
            switches,
            shared: Shared { w, io },
            net,
            idle,
            idle_of,
            work,
            launch,
            done: HashSet::new(),
            out: NodeCalls::default(),
        })
    }

    /// The state of thread `tid`, if it is a feeding thread.
    pub fn thread(&self, tid: u32) -> Option<ThreadCalls<'a>> {
        if !self.feeders.contains(&tid) {
            return None;
        }
        let switches: &'a Switches = self.switches;
        Some(ThreadCalls {
            tid,
            off: switches.of(self.node.name, tid),
            next_off: 0,
            net: self.net.get(&tid).cloned().unwrap_or_else(|| Rc::from([])),
            next_net: 0,
            held: None,
            reach: -1,
            top: None,
            totals: Vec::new(),
            offs: HashMap::new(),
            idle_at: None,
        })
    }

    /// A call as read (any order): counts it as work for its process's idle estimate.
    #[inline]
    pub fn read(&mut self, t: &mut ThreadCalls<'_>, pid: u32, op: u16, start: i64) {
        if !self.work[usize::from(op)] || start < self.shared.w.from_ns {
            return;
        }
        let (idx, hint) = match t.idle_at {
            Some((p, idx, hint)) if p == pid => (idx, hint),
            _ => (self.idle_of.get(&pid).copied(), 0),
        };
        let Some(i) = idx else {
            t.idle_at = Some((pid, None, 0));
            return;
        };
        let d = &mut self.idle[i];
        if self.launch[usize::from(op)] {
            d.first_launch = d.first_launch.min(start);
        }
        // Calls of a thread come in about time order: the last slot usually fits.
        let fits =
            (hint == 0 || d.ends[hint - 1] <= start) && d.ends.get(hint).is_none_or(|&e| e > start);
        let j = if fits {
            hint
        } else {
            d.ends.partition_point(|&e| e <= start)
        };
        d.first_work[j] = d.first_work[j].min(start);
        t.idle_at = Some((pid, Some(i), j));
    }

    /// A call in start order (ties in any order).
    #[inline]
    pub fn take(&self, t: &mut ThreadCalls<'_>, c: Call) {
        t.take(c, &self.shared);
    }

    /// Closes a thread's state.
    pub fn finish_thread(&mut self, mut t: ThreadCalls<'_>) {
        t.flush_held(&self.shared);
        t.resolve_before(i64::MAX, &self.shared);
        self.done.insert(t.tid);
        for ((op, dir), [n, ns, bytes]) in t.totals {
            self.out.calls.push(CallRow {
                tid: t.tid,
                op,
                dir,
                calls: sat(n),
                ns: sat(ns),
                bytes: sat(bytes),
            });
        }
        for ((state, ran, call), [off, gpu, net, io]) in t.offs {
            self.out.off.push(OffRow {
                tid: t.tid,
                state,
                ran,
                call,
                off_ns: sat(off),
                in_gpu_ns: sat(gpu),
                in_net_ns: sat(net),
                in_io_ns: sat(io),
            });
        }
    }

    /// Feeds every feeding thread from one sorted query (the pass could not order the calls).
    pub fn from_sorted_query(&mut self, r: &Reader) -> Result<(), StoreError> {
        if self.feeders.is_empty() {
            return Ok(());
        }
        let mut tids: Vec<u32> = self.feeders.iter().copied().collect();
        tids.sort_unstable();
        let w = self.shared.w;
        let list = tid_list(tids.iter().copied());
        let params = duckdb::params![self.node.only, self.node.name, w.from_ns, w.until_ns, list];
        let mut cur: Option<ThreadCalls<'a>> = None;
        let mut finished = Vec::new();
        for_each_batch::<7>(
            r,
            SORTED_SQL.as_str(),
            params,
            "reading GPU calls in order",
            |[tid, pid, op, s, e, a0, a1]| {
                for i in 0..tid.len() {
                    let th = tid[i] as u32;
                    if cur.as_ref().is_none_or(|c| c.tid != th) {
                        finished.extend(cur.take());
                        cur = self.thread(th);
                    }
                    if let Some(c) = &mut cur {
                        let call = Call {
                            pid: pid[i] as u32,
                            op: op[i] as u16,
                            start: s[i],
                            end: e[i],
                            arg0: a0[i],
                            arg1: a1[i],
                        };
                        c.take(call, &self.shared);
                    }
                }
            },
        )?;
        finished.extend(cur);
        for t in finished {
            self.finish_thread(t);
        }
        Ok(())
    }

    /// The node's results; feeding threads without a call read get their off-CPU intervals
    /// attributed outside calls.
    /// Ends the pass. `sampled`: the node's stretches where GPU probes were sampled; a drain
    /// whose next work falls there is not measured (that work may not be stored), and the
    /// idle of the measured drains stands for theirs.
    pub fn finish(mut self, sampled: &[(i64, i64)]) -> NodeCalls {
        let mut rest: Vec<u32> = self.feeders.difference(&self.done).copied().collect();
        rest.sort_unstable();
        for tid in rest {
            if let Some(t) = self.thread(tid) {
                self.finish_thread(t);
            }
        }
        let until = self.shared.w.until_ns;
        for (&pid, &i) in &self.idle_of {
            let d = &mut self.idle[i];
            // The first work at or after each drain: the minimum over the slots from its own.
            for j in (0..d.first_work.len() - 1).rev() {
                d.first_work[j] = d.first_work[j].min(d.first_work[j + 1]);
            }
            // Idle stretches of a second or more (start-up, a feeding stall) count as measured,
            // once; the short ones stand for the drains whose next work was not measured.
            let (mut short, mut long) = (0i128, 0i128);
            let (mut measured, mut unmeasured) = (0i128, 0i128);
            let mut last_ws = None;
            for (k, &e) in d.ends.iter().enumerate() {
                let ws = d.first_work[k + 1];
                // Several drains before the same work idle the GPU once: from the first.
                if ws != i64::MAX && ws > e && e >= d.first_launch && last_ws != Some(ws) {
                    last_ws = Some(ws);
                    if crate::probe_overhead::in_sampled(sampled, e, ws) {
                        unmeasured += 1;
                        continue;
                    }
                    let ns = i128::from(ws.min(until)) - i128::from(e);
                    if ns >= i128::from(super::LONG_IDLE_NS) {
                        long += ns;
                    } else {
                        short += ns;
                        measured += 1;
                    }
                }
            }
            if measured > 0 || long > 0 {
                let scaled = if measured > 0 {
                    short * (measured + unmeasured) / measured
                } else {
                    0
                };
                self.out.idle.insert(pid, sat(long + scaled));
                self.out.idle_long.insert(pid, sat(long));
            }
        }
        self.out
    }
}

impl ThreadCalls<'_> {
    fn take(&mut self, c: Call, s: &Shared) {
        match self.held {
            // Equal starts: the longest is the caller, the others are nested in it.
            Some(h) if h.start == c.start => {
                if c.end > h.end {
                    self.held = Some(c);
                }
            }
            Some(_) => {
                self.flush_held(s);
                self.held = Some(c);
            }
            None => self.held = Some(c),
        }
    }

    fn flush_held(&mut self, s: &Shared) {
        let Some(c) = self.held.take() else {
            return;
        };
        let nested = self.reach >= c.end;
        self.reach = self.reach.max(c.end);
        if nested {
            return;
        }
        self.resolve_before(c.start, s);
        self.top = Some(c);
        if c.start >= s.w.from_ns {
            let key = (c.op, c.arg1);
            let at = match self.totals.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None => {
                    self.totals.push((key, [0; 3]));
                    self.totals.len() - 1
                }
            };
            let t = &mut self.totals[at].1;
            t[0] += 1;
            t[1] += i128::from(c.end.min(s.w.until_ns) - c.start);
            t[2] += i128::from(c.arg0);
        }
    }

    /// Attributes the off-CPU intervals starting (clipped to the window) before `limit` to the
    /// current top-level call.
    fn resolve_before(&mut self, limit: i64, s: &Shared) {
        let w = s.w;
        while let Some(o) = self.off.get(self.next_off) {
            let (a, b) = (o.start.max(w.from_ns), o.end.min(w.until_ns));
            if b > a && a >= limit {
                break;
            }
            self.next_off += 1;
            if b <= a {
                continue;
            }
            let state = if matches!(o.data.state, 0 | 1) {
                o.data.state
            } else {
                2
            };
            if let Some(c) = self.top
                && c.end > a
            {
                let e = self
                    .offs
                    .entry((state, o.data.ran, Some((c.op, c.arg1))))
                    .or_default();
                e[0] += i128::from(b - a);
                e[1] += i128::from(c.end.min(b) - a);
                continue;
            }
            // The socket call that started last at or before the interval (the longest of
            // equal starts).
            while self.net.get(self.next_net).is_some_and(|n| n.0 <= a) {
                self.next_net += 1;
            }
            let net_end = self.next_net.checked_sub(1).map(|i| self.net[i].1);
            let (in_net, in_io) = match net_end {
                Some(ne) if ne > a => (ne.min(b) - a, 0),
                _ => {
                    let reach = s.io.get(&o.data.pid).and_then(|io| {
                        let k = io.starts.partition_point(|&x| x <= a);
                        k.checked_sub(1).map(|k| io.reach[k])
                    });
                    match reach {
                        Some(r) if r > a => (0, r.min(b) - a),
                        _ => (0, 0),
                    }
                }
            };
            let e = self.offs.entry((state, o.data.ran, None)).or_default();
            e[0] += i128::from(b - a);
            e[2] += i128::from(in_net);
            e[3] += i128::from(in_io);
        }
    }
}

#[cfg(test)]
mod tests {
    use causeway_store::{Event, Writer, WriterOptions};

    use super::*;
    use crate::chains::ChainQuery;
    use crate::facts::Ctx;
    use crate::window::WindowSpec;
    use causeway_demo::model::op;

    const T0: i64 = 1_700_000_000_000_000_000;

    fn ev(tid: u32, name: &str, ts: i64, dur: i64, arg0: i64, arg1: i64) -> Event {
        Event {
            timestamp: ts,
            duration: dur,
            pid: 10,
            tid,
            op_id: op(name),
            arg0,
            arg1,
            ..Event::default()
        }
    }

    /// Two feeding threads: launches with their own driver call nested, copies both ways,
    /// equal-start pairs, syncs, preemptions inside and after calls, socket calls and the
    /// process's block I/O (from a third thread).
    fn events() -> Vec<Event> {
        let mut v = Vec::new();
        for tid in [11u32, 12] {
            let mut t = T0 + i64::from(tid) * 1_000;
            for i in 0..3_000i64 {
                let d = 20_000 + i % 7 * 3_000;
                match i % 6 {
                    0 | 1 => {
                        v.push(ev(tid, "cudaLaunchKernel", t, d, 0, 0));
                        v.push(ev(tid, "cuLaunchKernel", t + 1_000, d - 2_000, 0, 0));
                    }
                    2 => v.push(ev(tid, "cudaMemcpyAsync", t, d, 4096 * i, 1 + i % 2)),
                    3 => {
                        // Equal starts: the longer is the caller.
                        v.push(ev(tid, "cudaMemcpy", t, d / 2, 100, 2));
                        v.push(ev(tid, "cudaMemcpy", t, d, 200, 2));
                    }
                    4 => v.push(ev(tid, "cudaStreamSynchronize", t, 3 * d, 0, 0)),
                    _ => v.push(ev(tid, "net_recv", t, 2 * d, 0, 0)),
                }
                if i % 5 == 0 {
                    // Off the CPU from inside the call to past its end.
                    v.push(ev(tid, "sched_switch", t + d / 2, d, 99, i % 3));
                }
                if i % 11 == 0 {
                    v.push(ev(tid, "sched_switch", t + 4 * d, d, 0, 1));
                }
                t += 6 * d;
            }
        }
        for i in 0..300i64 {
            v.push(ev(13, "block_read", T0 + i * 700_000, 300_000, 4096, 0));
        }
        v.sort_by_key(|e| e.timestamp);
        v
    }

    fn store(dir: &std::path::Path, name: &str, events: &[Event]) -> Reader {
        let p = dir.join(name);
        let mut w = Writer::create(&p, WriterOptions::default()).unwrap();
        for e in events {
            w.append(e).unwrap();
        }
        w.finish().unwrap();
        Reader::open(&p).unwrap()
    }

    type Sorted = (Vec<CallRow>, Vec<OffRow>, Vec<(u32, i64)>);

    fn found(r: &Reader, q: &ChainQuery) -> Sorted {
        let ctx = Ctx::load(r, q).unwrap();
        let n = ctx.budget_calls.values().next().unwrap();
        let mut calls = n.calls.clone();
        calls.sort_by_key(|c| (c.tid, c.op, c.dir));
        let mut off = n.off.clone();
        off.sort_by_key(|o| (o.tid, o.state, o.ran, o.call));
        let mut idle: Vec<(u32, i64)> = n.idle.iter().map(|(&p, &i)| (p, i)).collect();
        idle.sort_unstable();
        (calls, off, idle)
    }

    #[test]
    fn the_same_budget_calls_whatever_the_stored_order() {
        let dir = tempfile::tempdir().unwrap();
        let events = events();
        let mut shuffled = events.clone();
        for c in shuffled.chunks_mut(40) {
            c.reverse();
        }
        let mut reversed = events.clone();
        reversed.reverse();
        let stores = [
            store(dir.path(), "a", &events),
            store(dir.path(), "b", &shuffled),
            store(dir.path(), "c", &reversed),
        ];
        let half = ChainQuery {
            window: WindowSpec::Since(90_000_000),
            ..ChainQuery::default()
        };
        for (k, q) in [ChainQuery::default(), half].into_iter().enumerate() {
            let want = found(&stores[0], &q);
            let (calls, off, idle) = &want;
            // Nested driver calls and the shorter of equal starts are their callers' time.
            assert!(
                calls.iter().all(|c| c.op != op("cuLaunchKernel")),
                "{calls:?}"
            );
            let copies: i64 = calls
                .iter()
                .filter(|c| c.op == op("cudaMemcpy"))
                .map(|c| c.calls)
                .sum();
            let launches: i64 = calls
                .iter()
                .filter(|c| c.op == op("cudaLaunchKernel"))
                .map(|c| c.calls)
                .sum();
            if k == 0 {
                // Over the whole trace (the block I/O is in its first half).
                assert_eq!(copies * 2, launches, "{calls:?}");
                assert!(off.iter().any(|o| o.call.is_none() && o.in_io_ns > 0));
            }
            assert!(off.iter().any(|o| o.call.is_some() && o.in_gpu_ns > 0));
            assert!(off.iter().any(|o| o.call.is_none() && o.in_net_ns > 0));
            assert!(idle.iter().any(|&(p, i)| p == 10 && i > 0), "{idle:?}");
            for r in &stores[1..] {
                assert_eq!(found(r, &q), want);
            }
        }
    }
}
