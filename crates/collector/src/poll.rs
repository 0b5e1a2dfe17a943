//! Poll-thread state: turns decoded records into store events (wall-clock time, rank, process
//! rows), batches them to the writer without ever blocking, and turns the kernel's exact
//! counters, histograms and drop counts into windowed store rows.

use std::collections::{BTreeMap, HashMap};

use causeway_bpf::abi::{
    DROP_NVTX, DROP_STACK, MAX_OPS, OP_CALIBRATE, RawEvent, RawExec, RawLib, Record, Stat, StatKey,
    sum_percpu,
};
use causeway_bpf::libbpf_rs::{MapCore, MapFlags};
use causeway_bpf::skel::CausewaySkel;
use causeway_ops as ops;
use causeway_store::{Event, HistogramBucket, OpCount, ProcessInfo, SampledWindow};
use crossbeam_channel::TrySendError;
use tracing::warn;

use crate::estimate::{SampledTime, Seen, Windowed, carried, estimate, own_part};
use crate::host;
use crate::kernels::Kernels;
use crate::overhead_control::CpuReading;
use crate::sink::{BATCH, Ctl, DropKind, Sink};
use crate::stacks::Stacks;
use crate::tuning::HOLD_NS;

/// cudaLaunchKernel: its arg0 is the kernel's host stub (or handle), named in kernels.rs.
const OP_CUDA_LAUNCH_KERNEL: u16 = ops::id("cudaLaunchKernel");
/// cudaGetKernel: arg0 a host stub, arg1 the handle CUDA 13 stubs launch with.
const OP_CUDA_GET_KERNEL: u16 = ops::id("cudaGetKernel");
/// Driver launches: arg0 the CUfunction.
const OP_CU_LAUNCH_KERNEL: u16 = ops::id("cuLaunchKernel");
const OP_CU_LAUNCH_KERNEL_EX: u16 = ops::id("cuLaunchKernelEx");
/// cuKernelGetFunction: arg0 the CUkernel, arg1 its CUfunction.
const OP_CU_KERNEL_GET_FUNCTION: u16 = ops::id("cuKernelGetFunction");
/// Process lifecycle ops whose events the poll thread also acts on.
const OP_PROCESS_EXEC: u16 = ops::id("process_exec");
const OP_PROCESS_EXIT: u16 = ops::id("process_exit");
const OP_PROCESS_FORK: u16 = ops::id("process_fork");

/// Reads the kernel's statistics (the collector's own calibration entries left out): each
/// (pid, op) key of `stat_slots` names its slot of the `stats` array.
pub fn read_stats(skel: &CausewaySkel<'_>) -> HashMap<StatKey, Stat> {
    let me = std::process::id();
    let mut out = HashMap::new();
    for key in skel.maps.stat_slots.keys() {
        let Some(k) = StatKey::decode(&key) else {
            continue;
        };
        if k.pid == me || k.op == OP_CALIBRATE {
            continue;
        }
        if let Ok(Some(slot)) = skel.maps.stat_slots.lookup(&key, MapFlags::ANY)
            && let Ok(Some(v)) = skel.maps.stats.lookup(&slot, MapFlags::ANY)
            && let Some(s) = Stat::decode(&v)
        {
            out.insert(k, s);
        }
    }
    out
}

/// Per-op totals over the whole trace, from the kernel's counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OpTotal {
    /// Calls/events counted in the kernel.
    pub calls: u64,
    /// Of which submitted to the ring buffer.
    pub stored: u64,
    /// Calls whose duration was measured.
    pub timed: u64,
    /// Sum of measured durations (ns).
    pub total_ns: u64,
    /// `calls` includes estimated calls (the op was sampled).
    pub estimated: bool,
}

/// A counts row of a sampled op, with what its estimate needs: held back until its process's
/// speedup is measured (at most [`HOLD_NS`]).
#[derive(Debug)]
struct Held {
    /// Calls and bytes as counted while attached.
    row: OpCount,
    /// The probes' attached time in the process's part of the window.
    seen: Seen,
    /// That part: the window, less the time before the process started or after it exited
    /// (ns).
    span_ns: i64,
    /// For a process whose op's probes stayed detached all its part of the window: the calls
    /// and bytes per attached ns last counted.
    rate: Option<Rate>,
}

/// Calls and bytes of one op in one process per ns its probes were attached, in the latest
/// window they were attached at all.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rate {
    calls: f64,
    bytes: f64,
}

impl Held {
    /// The row with its calls and bytes estimated for the process's part of the window
    /// ([`estimate`], or [`carried`] from the last rate).
    fn estimated(self, speedup: f64) -> OpCount {
        let w = self.span_ns.max(1);
        let (calls, bytes) = match self.rate {
            Some(r) => (
                carried(r.calls, self.seen, w, speedup).round() as u64,
                carried(r.bytes, self.seen, w, speedup).round() as u64,
            ),
            None => (
                estimate(self.row.calls, self.seen, w, speedup),
                estimate(self.row.bytes, self.seen, w, speedup),
            ),
        };
        OpCount {
            calls,
            bytes,
            ..self.row
        }
    }
}

/// One window of counts as cut by [`PollState::snapshot`]: its bounds, and per sampled op the
/// time its probes were attached in it (ops missing were attached all window long).
struct Cut<'s, S> {
    start: i64,
    end: i64,
    /// `end - start`, at least 1.
    window_ns: i64,
    observed: BTreeMap<u16, Seen>,
    sampling: &'s S,
}

impl<S: SampledTime> Cut<'_, S> {
    /// The attached time and span of `pid`'s own part of the window for the sampled `op`,
    /// given when processes started (`born`) and exited (`died`) inside it: the attached time
    /// outside its life would dilute (after its exit) or inflate its rate.
    fn own(
        &self,
        born: &HashMap<u32, i64>,
        died: &HashMap<u32, i64>,
        pid: u32,
        op: u16,
    ) -> (Seen, i64) {
        let (b, d) = (born.get(&pid).copied(), died.get(&pid).copied());
        own_part(
            self.observed[&op],
            (self.start, self.end),
            (b, d),
            op,
            self.sampling,
        )
    }

    /// The attached time and span that `k`'s `calls` counted in the window are estimated over:
    /// the whole window for an op never detached, else the process's own part ([`Cut::own`]).
    fn counted_part(
        &self,
        born: &HashMap<u32, i64>,
        died: &HashMap<u32, i64>,
        k: StatKey,
        calls: u64,
    ) -> (Seen, i64) {
        match self.observed.get(&k.op) {
            None => (
                Seen {
                    observed_ns: self.window_ns,
                    switching_ns: 0,
                },
                self.window_ns,
            ),
            // A sampled op's calls were counted while attached: where none of that fell in
            // the process's own part of the window as cut (an exit seen late), the window's.
            Some(&whole) => match self.own(born, died, k.pid, k.op) {
                (seen, _) if seen.observed_ns <= 0 && calls > 0 => (whole, self.window_ns),
                own => own,
            },
        }
    }

    /// The sampled-window rows: per op detached some of the window (or sampled now), its
    /// attached and switching time and the calls counted in it (`sampled`).
    fn sampled_windows(&self, sampled: &BTreeMap<u16, u64>) -> Vec<SampledWindow> {
        let window_ns = self.window_ns;
        self.observed
            .iter()
            // A window wholly attached too while the op is sampled (a short last one).
            .filter(|&(&op, seen)| seen.observed_ns < window_ns || self.sampling.is_sampled(op))
            .map(|(&op, seen)| SampledWindow {
                op_id: op,
                window_start_ns: self.start,
                window_end_ns: self.end,
                observed_ns: seen.observed_ns as u64,
                counted: sampled.get(&op).copied().unwrap_or(0),
                switching_ns: seen.switching_ns.clamp(0, window_ns - seen.observed_ns) as u64,
            })
            .collect()
    }
}

/// The histogram rows of `k` for the window `(start, end)`: per log2 bucket, the timed calls
/// added since the last snapshot (`prev`).
fn hist_rows<'a>(
    k: StatKey,
    s: &'a Stat,
    prev: Option<&'a Stat>,
    (start, end): (i64, i64),
) -> impl Iterator<Item = HistogramBucket> + 'a {
    s.hist.iter().enumerate().filter_map(move |(i, c)| {
        let delta = c.saturating_sub(prev.map(|p| p.hist[i]).unwrap_or(0));
        (delta > 0).then_some(HistogramBucket {
            pid: k.pid,
            op_id: k.op,
            window_start_ns: start,
            window_end_ns: end,
            log2_bucket: i as u8,
            count: delta,
        })
    })
}

/// Everything the poll thread accumulates.
#[derive(Debug)]
pub struct PollState {
    offset_ns: i64,
    batch: Vec<Event>,
    seen: HashMap<u32, Option<i32>>,
    /// Distributed identity (rank, local rank, world size, cluster) read per process, which a
    /// forked child inherits with its parent's environment when it is gone before we look.
    idents: HashMap<u32, Ident>,
    /// Events handed to the writer thread.
    pub sent: u64,
    /// Events lost because the writer channel was full, per op.
    pub channel_drops: BTreeMap<u16, u64>,
    channel_reported: BTreeMap<u16, u64>,
    /// Records that failed to decode.
    pub undecodable: u64,
    prev_stats: HashMap<StatKey, Stat>,
    /// Detached time per sampled op at the last snapshot, to cut this window's from.
    detached: Windowed,
    /// Counts rows of sampled ops waiting for their process's speedup.
    held: Vec<Held>,
    /// Per (pid, op), the rate in the latest window the op's probes were attached in.
    rates: HashMap<(u32, u16), Rate>,
    prev_drops: Vec<u64>,
    /// Ring-buffer reservation failures per op, over the trace.
    pub ring_drops: BTreeMap<u16, u64>,
    /// Kernel counters per op over the trace (all pids).
    pub totals: BTreeMap<u16, OpTotal>,
    window_start_ns: i64,
    /// Pids that produced events, with the time of their latest event (Unix ns).
    pub pids: HashMap<u32, i64>,
    /// Processes that exited: (CPU time in ns, started after the trace), from process_exit.
    pub exits: HashMap<u32, (u64, bool)>,
    /// When processes exec'd or were forked in the current window of counts (Unix ns).
    born: HashMap<u32, i64>,
    /// When processes exited, in this window of counts or the last (Unix ns); a pid born again
    /// is alive.
    died: HashMap<u32, i64>,
    trace_start_ns: i64,
    /// This process (getpid is a system call: not once per event).
    self_pid: u32,
    /// The last event's process and rank.
    last: Option<(u32, Option<i32>)>,
    /// Stack handling, with `--stacks`.
    pub stacks: Option<Stacks>,
    /// Kernel naming (None where its thread could not start).
    pub kernels: Option<Kernels>,
    /// Where processes run (taken when the recording ends).
    pub places: Option<crate::places::Places>,
    /// CUDA libraries mapped by traced processes (the library-load hook), for the recording
    /// loop to attach as soon as the poll returns.
    pub mapped: Vec<RawLib>,
    /// Traced processes that exec'd a new program: (pid, CLOCK_MONOTONIC ns of the exec), for
    /// the recording loop to check for a statically linked runtime.
    pub execs: Vec<(u32, u64)>,
    /// All-process mode: program files exec'd by processes not traced yet, for the recording
    /// loop to check for a statically linked runtime (and mark seen in the kernel).
    pub programs: Vec<RawExec>,
    /// NVTX ranges not sent to the writer yet.
    ranges: Vec<causeway_store::Range>,
    /// NVTX ranges and marks received.
    pub nvtx_ranges: u64,
    /// Outermost NVTX ranges, for the steps sent at the end ([`PollState::finish_nvtx`]).
    nvtx_steps: crate::nvtx::StepFinder,
}

impl PollState {
    /// New state; `offset_ns` converts CLOCK_MONOTONIC to Unix ns; the trace started at
    /// `trace_start_ns` (Unix ns: processes started later are new).
    pub fn new(
        offset_ns: i64,
        trace_start_ns: i64,
        stacks: Option<Stacks>,
        kernels: Option<Kernels>,
        places: crate::places::Places,
    ) -> PollState {
        PollState {
            offset_ns,
            batch: Vec::with_capacity(BATCH),
            seen: HashMap::new(),
            idents: HashMap::new(),
            sent: 0,
            channel_drops: BTreeMap::new(),
            channel_reported: BTreeMap::new(),
            undecodable: 0,
            prev_stats: HashMap::new(),
            detached: Windowed::default(),
            held: Vec::new(),
            rates: HashMap::new(),
            prev_drops: vec![0; MAX_OPS as usize],
            ring_drops: BTreeMap::new(),
            totals: BTreeMap::new(),
            window_start_ns: causeway_store::now_ns(),
            pids: HashMap::new(),
            exits: HashMap::new(),
            born: HashMap::new(),
            died: HashMap::new(),
            trace_start_ns,
            self_pid: std::process::id(),
            last: None,
            stacks,
            kernels,
            places: Some(places),
            mapped: Vec::new(),
            execs: Vec::new(),
            programs: Vec::new(),
            ranges: Vec::new(),
            nvtx_ranges: 0,
            nvtx_steps: crate::nvtx::StepFinder::default(),
        }
    }

    /// What the overhead controller can know about a process's CPU time now.
    pub fn cpu_reading(&self, pid: u32, trace_start_boot_ns: u64) -> CpuReading {
        if let Some(&(cpu_ns, new)) = self.exits.get(&pid) {
            return CpuReading::Exited { cpu_ns, new };
        }
        match host::cpu_and_start(pid) {
            Some((cpu_ns, start)) => CpuReading::Alive {
                cpu_ns,
                new: start >= trace_start_boot_ns,
            },
            None => CpuReading::Unknown,
        }
    }

    /// Handles one ring-buffer record.
    pub fn push_record(&mut self, rec: Record, sink: &Sink) {
        match rec {
            // The collector's own calibration calls are never recorded.
            Record::Event(e) if e.pid == self.self_pid => {}
            Record::Stack(s) if s.pid == self.self_pid => {}
            Record::StackBytes(b) if b.pid == self.self_pid => {}
            Record::Lib(l) if l.pid == self.self_pid => {}
            Record::Exec(x) if x.pid == self.self_pid => {}
            Record::Range(r) if r.pid == self.self_pid => {}
            Record::Range(r) => {
                let row = crate::nvtx::range_row(&r, self.offset_ns);
                self.nvtx_steps.push(&row, &r);
                self.nvtx_ranges += 1;
                self.ranges.push(row);
                if self.ranges.len() >= BATCH {
                    self.flush_ranges(sink);
                }
            }
            Record::Name(n) => {
                if let Some(k) = self.kernels.as_mut() {
                    k.named_handle(n.pid, n.handle, n.name);
                }
            }
            Record::Task(t) => {
                let _ = sink.ctl.send(Ctl::Tasks(vec![causeway_store::TaskName {
                    tid: t.tid,
                    pid: t.tgid,
                    comm: t.comm,
                    first_seen_ns: t.ts as i64 + self.offset_ns,
                }]));
            }
            Record::Event(e) => self.push(e, sink),
            Record::Lib(l) => self.mapped.push(l),
            Record::Exec(x) => self.programs.push(x),
            Record::Stack(s) => {
                if let Some(st) = self.stacks.as_mut() {
                    st.push(s);
                }
            }
            Record::StackBytes(b) => {
                if let Some(st) = self.stacks.as_mut() {
                    st.copied(b);
                }
            }
        }
    }

    /// Converts one event and queues it (sends a full batch).
    fn push(&mut self, raw: RawEvent, sink: &Sink) {
        // Events come in runs from one process: skip the map lookups for a repeat.
        let cached = self.last.filter(|(pid, _)| *pid == raw.pid);
        let rank = match cached
            .map(|(_, r)| r)
            .or_else(|| self.seen.get(&raw.pid).copied())
        {
            Some(r) => r,
            None => {
                let now = causeway_store::now_ns();
                let (mut info, environ) = host::process_facts(raw.pid, &raw.comm, now);
                self.place(&mut info, &environ, sink);
                let rank = info.rank;
                self.idents.insert(raw.pid, Ident::of(&info));
                let _ = sink.ctl.send(Ctl::Process(info));
                self.seen.insert(raw.pid, rank);
                if let Some(st) = self.stacks.as_mut() {
                    st.maps.remember(raw.pid);
                }
                if let Some(k) = self.kernels.as_mut() {
                    k.maps.remember(raw.pid);
                }
                rank
            }
        };
        let timestamp = raw.ts_mono_ns as i64 + self.offset_ns;
        match raw.op {
            // A fork's child is a process of the trace too: record its row while it is alive.
            // What it could not be read for (gone, or a zombie without its environment) is its
            // parent's: a child has its parent's environment, cgroup and open files at fork.
            OP_PROCESS_FORK if raw.arg0 > 0 => {
                let child = raw.arg0 as u32;
                self.born.insert(child, timestamp);
                self.died.remove(&child);
                let parent = self.idents.get(&raw.pid).cloned();
                let mut info = match self.idents.get(&child) {
                    // Its own first event came first: its row is completed, not read again.
                    Some(known) => {
                        let mut info = ProcessInfo {
                            pid: child,
                            first_seen_ns: timestamp,
                            last_seen_ns: timestamp,
                            ..ProcessInfo::default()
                        };
                        known.apply(&mut info);
                        info
                    }
                    None => {
                        let (mut info, environ) =
                            host::process_facts(child, &raw.comm, causeway_store::now_ns());
                        self.place(&mut info, &environ, sink);
                        info
                    }
                };
                let parent = parent.filter(|p| p.fills(&info));
                if let Some(p) = &parent {
                    p.fill(&mut info);
                }
                if parent.is_some() || !self.seen.contains_key(&child) {
                    self.idents.insert(child, Ident::of(&info));
                    self.seen.insert(child, info.rank);
                    let _ = sink.ctl.send(Ctl::Process(info));
                }
            }
            // The process's name is the new program's from here on (the row may have been made
            // from an event before the exec, with the parent's name).
            OP_PROCESS_EXEC => {
                self.execs.push((raw.pid, raw.ts_mono_ns));
                self.born.insert(raw.pid, timestamp);
                self.died.remove(&raw.pid);
                let (mut info, environ) =
                    host::process_facts(raw.pid, &raw.comm, causeway_store::now_ns());
                // The new program may open other GPUs or have been moved to another cgroup.
                self.place(&mut info, &environ, sink);
                info.comm = raw.comm.clone();
                // The new program has the new environment: its rank from here on.
                self.seen.insert(raw.pid, info.rank);
                self.idents.insert(raw.pid, Ident::of(&info));
                self.last = None;
                let _ = sink.ctl.send(Ctl::Process(info));
                if let Some(st) = self.stacks.as_mut() {
                    st.maps.forget(raw.pid);
                    st.forget_unwinder(raw.pid);
                    st.maps.remember(raw.pid);
                    // Another program: its interpreter, if any, is looked for again.
                    if let Some(py) = st.python.as_mut() {
                        py.forget(raw.pid);
                    }
                }
                if let Some(k) = self.kernels.as_mut() {
                    k.maps.forget(raw.pid);
                    k.maps.remember(raw.pid);
                }
            }
            OP_PROCESS_EXIT => {
                let started = timestamp - raw.duration_ns as i64;
                let new = raw.duration_ns > 0 && started >= self.trace_start_ns;
                self.exits.insert(raw.pid, (raw.arg1 as u64, new));
                self.died.insert(raw.pid, timestamp);
                if let Some(st) = self.stacks.as_mut() {
                    st.maps.forget(raw.pid);
                    st.forget_unwinder(raw.pid);
                    // Its kernel entry goes at the next look (a pid may be reused).
                    if let Some(py) = st.python.as_mut() {
                        py.forget(raw.pid);
                        st.py_pending.push(raw.pid);
                    }
                }
                if let Some(k) = self.kernels.as_mut() {
                    k.maps.forget(raw.pid);
                }
            }
            OP_CUDA_LAUNCH_KERNEL | OP_CU_LAUNCH_KERNEL | OP_CU_LAUNCH_KERNEL_EX => {
                if let Some(k) = self.kernels.as_mut() {
                    k.launched(raw.pid, raw.arg0 as u64);
                }
            }
            OP_CUDA_GET_KERNEL => {
                if let Some(k) = self.kernels.as_mut() {
                    k.handle(raw.pid, raw.arg1 as u64, raw.arg0 as u64);
                }
            }
            OP_CU_KERNEL_GET_FUNCTION => {
                if let Some(k) = self.kernels.as_mut() {
                    k.kernel_function(raw.pid, raw.arg0 as u64, raw.arg1 as u64);
                }
            }
            _ => {}
        }
        let end = timestamp + raw.duration_ns as i64;
        if cached.is_none() && raw.op != OP_PROCESS_EXEC {
            self.last = Some((raw.pid, rank));
        }
        let latest = self.pids.entry(raw.pid).or_insert(end);
        *latest = (*latest).max(end);
        self.batch.push(Event {
            timestamp,
            duration: raw.duration_ns as i64,
            pid: raw.pid,
            tid: raw.tid,
            comm: raw.comm,
            op_id: raw.op,
            arg0: raw.arg0,
            arg1: raw.arg1,
            ret_code: raw.ret,
            gpu_id: -1,
            stack_hash: raw.stack_hash as i64,
            cgroup_id: raw.cgroup_id,
            rank,
        });
        if self.batch.len() >= BATCH {
            self.flush(sink);
        }
    }

    /// Hands the NVTX ranges received to the writer.
    fn flush_ranges(&mut self, sink: &Sink) {
        if !self.ranges.is_empty() {
            let rows = std::mem::take(&mut self.ranges);
            let _ = sink.ctl.send(Ctl::Ranges(rows));
        }
    }

    /// At the end of the recording: the last NVTX ranges, and the steps found among them.
    pub fn finish_nvtx(&mut self, sink: &Sink) {
        self.flush_ranges(sink);
        let steps = self.nvtx_steps.steps();
        if !steps.is_empty() {
            let _ = sink.ctl.send(Ctl::Steps(steps));
        }
    }

    /// Hands the queued events to the writer; a full channel counts them as dropped.
    pub fn flush(&mut self, sink: &Sink) {
        self.flush_ranges(sink);
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        let n = batch.len() as u64;
        match sink.data.try_send(batch) {
            Ok(()) => self.sent += n,
            Err(TrySendError::Full(batch)) | Err(TrySendError::Disconnected(batch)) => {
                for e in &batch {
                    *self.channel_drops.entry(e.op_id).or_default() += 1;
                }
            }
        }
    }

    /// When the current window of counts began (Unix ns).
    pub fn window_start_ns(&self) -> i64 {
        self.window_start_ns
    }

    /// Turns the kernel's counters and histograms (`stats`, from [`read_stats`]) and drop counts
    /// into the deltas since the last call, sent as one window of rows, and new drops as drop rows.
    /// The calls of an op whose probes `sampling` detached are estimated ([`estimate`], with
    /// the process's speedup once measured: until then, at most [`HOLD_NS`], its rows are held
    /// back) and its window recorded. The `last` snapshot holds nothing back.
    pub fn snapshot(
        &mut self,
        stats: &HashMap<StatKey, Stat>,
        skel: &CausewaySkel<'_>,
        sink: &Sink,
        sampling: &impl SampledTime,
        last: bool,
    ) {
        let cut = self.cut_window(stats, sampling);
        let mut dark_rows = self.dark_rows(&cut);
        // Taken before this window's rows, which may be held back in turn.
        let waiting = std::mem::take(&mut self.held);
        let (mut counts, hist, sampled) = self.count_rows(stats, &cut, &mut dark_rows, last);
        self.release(waiting, dark_rows, &cut, last, &mut counts);
        if !counts.is_empty() {
            let _ = sink.ctl.send(Ctl::Counts(counts, hist));
        }
        let windows = cut.sampled_windows(&sampled);
        if !windows.is_empty() {
            let _ = sink.ctl.send(Ctl::Sampled(windows));
        }
        // Later windows start after these; a process that exited before this one began has
        // no part in any (its rate went above).
        self.born.retain(|_, &mut t| t > cut.end);
        self.died.retain(|_, &mut t| t > cut.start);
        self.send_ring_drops(skel, sink);
        self.send_channel_drops(sink);
    }

    /// Ends the current window of counts now (the next one starts here): its bounds, and the
    /// time each sampled op's probes were attached in it.
    fn cut_window<'s, S: SampledTime>(
        &mut self,
        stats: &HashMap<StatKey, Stat>,
        sampling: &'s S,
    ) -> Cut<'s, S> {
        let now = causeway_store::now_ns();
        let (start, end) = (self.window_start_ns, now);
        self.window_start_ns = now;
        let window_ns = (end - start).max(1);
        // Time each sampled op's probes were attached in the window.
        let observed = self
            .detached
            .window(stats.keys().map(|k| k.op), end, window_ns, sampling);
        Cut {
            start,
            end,
            window_ns,
            observed,
            sampling,
        }
    }

    /// This window's rows (calls still 0) of the processes whose op's probes stayed detached
    /// all the part of the window they lived: their calls go at the rate last counted
    /// (carried). The others' rates are dropped: theirs are this window's.
    fn dark_rows<S: SampledTime>(&mut self, cut: &Cut<'_, S>) -> BTreeMap<(u32, u16), Held> {
        let own = |pid: u32, op: u16| cut.own(&self.born, &self.died, pid, op);
        self.rates.retain(|&(pid, op), _| {
            cut.observed.contains_key(&op) && {
                let (seen, span) = own(pid, op);
                seen.observed_ns <= 0 && span > 0
            }
        });
        let mut dark_rows: BTreeMap<(u32, u16), Held> = BTreeMap::new();
        for (&(pid, op), &rate) in &self.rates {
            let row = OpCount {
                pid,
                op_id: op,
                window_start_ns: cut.start,
                window_end_ns: cut.end,
                calls: 0,
                stored: 0,
                total_ns: 0,
                bytes: 0,
            };
            let (seen, span_ns) = own(pid, op);
            let rate = Some(rate);
            dark_rows.insert(
                (pid, op),
                Held {
                    row,
                    seen,
                    span_ns,
                    rate,
                },
            );
        }
        dark_rows
    }

    /// This window's counts rows (those still waiting for a speedup go to `self.held`) and
    /// histogram rows, from the deltas of `stats` since the last snapshot, and the calls
    /// counted per sampled op; takes the processes that called after all out of `dark_rows`,
    /// and updates the rates, totals and last stats.
    fn count_rows<S: SampledTime>(
        &mut self,
        stats: &HashMap<StatKey, Stat>,
        cut: &Cut<'_, S>,
        dark_rows: &mut BTreeMap<(u32, u16), Held>,
        last: bool,
    ) -> (Vec<OpCount>, Vec<HistogramBucket>, BTreeMap<u16, u64>) {
        let mut sampled: BTreeMap<u16, u64> = BTreeMap::new();
        let mut counts = Vec::new();
        let mut hist = Vec::new();
        for (&k, s) in stats {
            let prev = self.prev_stats.get(&k);
            let d = |f: fn(&Stat) -> u64| f(s).saturating_sub(prev.map(f).unwrap_or(0));
            let calls = d(|s| s.calls);
            if calls == 0 && d(Stat::timed) == 0 {
                continue;
            }
            let dark = dark_rows.remove(&(k.pid, k.op));
            let (seen, span_ns) = cut.counted_part(&self.born, &self.died, k, calls);
            let ever_detached = cut.observed.contains_key(&k.op);
            if ever_detached {
                *sampled.entry(k.op).or_default() += calls;
            }
            let sampled_now = seen.observed_ns < span_ns;
            let g = if sampled_now {
                cut.sampling.speedup(k.op, k.pid)
            } else {
                Some(1.0)
            };
            let row = OpCount {
                pid: k.pid,
                op_id: k.op,
                window_start_ns: cut.start,
                window_end_ns: cut.end,
                calls,
                stored: d(|s| s.stored),
                total_ns: d(|s| s.total_ns),
                bytes: d(|s| s.bytes),
            };
            let rate = dark.and_then(|h| h.rate).filter(|_| calls == 0);
            if ever_detached && seen.observed_ns > 0 {
                let per_ns = |n: u64| n as f64 / seen.observed_ns as f64;
                let r = Rate {
                    calls: per_ns(row.calls),
                    bytes: per_ns(row.bytes),
                };
                self.rates.insert((k.pid, k.op), r);
            }
            let held = Held {
                row,
                seen,
                span_ns,
                rate,
            };
            let made = match g {
                None if !last => {
                    self.held.push(held);
                    0
                }
                g => {
                    let row = held.estimated(g.unwrap_or(1.0));
                    let made = row.calls;
                    counts.push(row);
                    made
                }
            };
            hist.extend(hist_rows(k, s, prev, (cut.start, cut.end)));
            let t = self.totals.entry(k.op).or_default();
            t.calls += made;
            t.estimated |= sampled_now;
            t.stored += d(|s| s.stored);
            t.timed += d(Stat::timed);
            t.total_ns += d(|s| s.total_ns);
            self.prev_stats.insert(k, s.clone());
        }
        (counts, hist, sampled)
    }

    /// Moves into `counts`, estimated, the rows held back (`waiting`) whose speedup is measured
    /// now or that waited long enough, and this window's rows of processes whose probes stayed
    /// detached (`dark_rows`); the others wait on in `self.held`.
    fn release<S: SampledTime>(
        &mut self,
        waiting: Vec<Held>,
        dark_rows: BTreeMap<(u32, u16), Held>,
        cut: &Cut<'_, S>,
        last: bool,
        counts: &mut Vec<OpCount>,
    ) {
        for h in waiting.into_iter().chain(dark_rows.into_values()) {
            let g = cut.sampling.speedup(h.row.op_id, h.row.pid);
            if g.is_none() && !last && cut.end - h.row.window_end_ns < HOLD_NS {
                self.held.push(h);
                continue;
            }
            let carried = h.rate.is_some();
            let row = h.estimated(g.unwrap_or(1.0));
            let t = self.totals.entry(row.op_id).or_default();
            t.calls += row.calls;
            t.estimated |= carried;
            counts.push(row);
        }
    }

    /// Sends as drop rows the ring-buffer reservation failures the kernel counted per op since
    /// the last snapshot (the collector's calibration left out).
    fn send_ring_drops(&mut self, skel: &CausewaySkel<'_>, sink: &Sink) {
        for op in (0..MAX_OPS).filter(|&op| op != u32::from(OP_CALIBRATE)) {
            let Ok(Some(vals)) = skel
                .maps
                .drops
                .lookup_percpu(&op.to_ne_bytes(), MapFlags::ANY)
            else {
                continue;
            };
            let total = sum_percpu(&vals);
            let delta = total.saturating_sub(self.prev_drops[op as usize]);
            if delta > 0 {
                self.prev_drops[op as usize] = total;
                *self.ring_drops.entry(op as u16).or_default() += delta;
                warn!(
                    op,
                    dropped = delta,
                    "ring buffer full: records dropped (counted; statistics stay exact)"
                );
                let stack = op == DROP_STACK;
                let nvtx = op == DROP_NVTX;
                let _ = sink.ctl.send(Ctl::Drop {
                    kind: DropKind::RingbufFull,
                    op: (!stack && !nvtx).then_some(op as u16),
                    count: delta,
                    detail: if stack {
                        "BPF ring buffer reservation failed: stack records (sent again on the next occurrence)".into()
                    } else if nvtx {
                        "BPF ring buffer reservation failed: NVTX ranges".into()
                    } else {
                        "BPF ring buffer reservation failed".into()
                    },
                });
            }
        }
    }

    /// Sends as drop rows the events lost to a full writer channel since the last report, per op.
    fn send_channel_drops(&mut self, sink: &Sink) {
        for (&op, &n) in &self.channel_drops {
            let reported = self.channel_reported.entry(op).or_default();
            if n > *reported {
                let _ = sink.ctl.send(Ctl::Drop {
                    kind: DropKind::ChannelFull,
                    op: Some(op),
                    count: n - *reported,
                    detail: "writer channel full".into(),
                });
                *reported = n;
            }
        }
    }

    /// Fills in where a process runs (once per process: this runs where its row is made).
    fn place(&mut self, info: &mut ProcessInfo, environ: &[u8], sink: &Sink) {
        if let Some(p) = self.places.as_mut() {
            p.place(info, environ, &sink.ctl);
        }
    }

    /// Sends final process rows (last seen now) for every process that produced events.
    pub fn close_processes(&self, sink: &Sink) {
        for (&pid, &last) in &self.pids {
            // Only last_seen moves; the empty fields keep what the first row stored.
            let info = ProcessInfo {
                pid,
                first_seen_ns: last,
                last_seen_ns: last,
                ..ProcessInfo::default()
            };
            let _ = sink.ctl.send(Ctl::Process(info));
        }
    }
}

/// What a forked child inherits from its parent: its distributed-training identity (from the
/// environment) and where it runs (cgroup, GPU visibility, open device files).
#[derive(Debug, Clone, PartialEq)]
struct Ident {
    rank: Option<i32>,
    local_rank: Option<i32>,
    world_size: Option<i32>,
    cluster: String,
    cgroup_id: u64,
    gpu_visible: String,
    gpu_devices: String,
    memory_limit: u64,
}

impl Ident {
    fn of(p: &ProcessInfo) -> Ident {
        Ident {
            rank: p.rank,
            local_rank: p.local_rank,
            world_size: p.world_size,
            cluster: p.cluster.clone(),
            cgroup_id: p.cgroup_id,
            gpu_visible: p.gpu_visible.clone(),
            gpu_devices: p.gpu_devices.clone(),
            memory_limit: p.memory_limit,
        }
    }

    fn apply(&self, p: &mut ProcessInfo) {
        p.rank = self.rank;
        p.local_rank = self.local_rank;
        p.world_size = self.world_size;
        p.cluster = self.cluster.clone();
        p.cgroup_id = self.cgroup_id;
        p.gpu_visible = self.gpu_visible.clone();
        p.gpu_devices = self.gpu_devices.clone();
        p.memory_limit = self.memory_limit;
    }

    /// Whether `p` lacks something this identity knows.
    fn fills(&self, p: &ProcessInfo) -> bool {
        let mut filled = p.clone();
        self.fill(&mut filled);
        Ident::of(&filled) != Ident::of(p)
    }

    /// Gives `p` what it lacks of this identity (fields read as unknown or empty).
    fn fill(&self, p: &mut ProcessInfo) {
        p.rank = p.rank.or(self.rank);
        p.local_rank = p.local_rank.or(self.local_rank);
        p.world_size = p.world_size.or(self.world_size);
        let text = |mine: &mut String, theirs: &String| {
            if mine.is_empty() {
                mine.clone_from(theirs);
            }
        };
        text(&mut p.cluster, &self.cluster);
        text(&mut p.gpu_visible, &self.gpu_visible);
        text(&mut p.gpu_devices, &self.gpu_devices);
        if p.cgroup_id == 0 {
            p.cgroup_id = self.cgroup_id;
        }
        if p.memory_limit == 0 {
            p.memory_limit = self.memory_limit;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forked_child_read_as_a_zombie_gets_its_parents_place() {
        let parent = ProcessInfo {
            pid: 10,
            rank: Some(3),
            cluster: "job".into(),
            cgroup_id: 77,
            gpu_visible: "CUDA_VISIBLE_DEVICES=2".into(),
            gpu_devices: "/dev/nvidia2".into(),
            ..ProcessInfo::default()
        };
        let parent = Ident::of(&parent);
        // Read after it exited: /proc still has its cgroup, but no environment.
        let mut child = ProcessInfo {
            pid: 11,
            cgroup_id: 77,
            ..ProcessInfo::default()
        };
        assert!(parent.fills(&child));
        parent.fill(&mut child);
        assert_eq!(Ident::of(&child), parent);
        assert!(!parent.fills(&child));
        // What the child was read with stays its own (it may have been moved, or exec'd).
        let mut moved = ProcessInfo {
            pid: 12,
            cgroup_id: 99,
            gpu_visible: "CUDA_VISIBLE_DEVICES=0".into(),
            ..ProcessInfo::default()
        };
        parent.fill(&mut moved);
        assert_eq!(
            (moved.cgroup_id, moved.gpu_visible.as_str(), moved.rank),
            (99, "CUDA_VISIBLE_DEVICES=0", Some(3))
        );
    }
}
