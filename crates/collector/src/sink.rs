//! The writer thread: the only owner of the store `Writer`. It receives event batches over a
//! bounded channel (the poll thread never blocks on it) and control messages over an unbounded
//! one, appends, ticks the time-bounded flush, and completes the file at the end.

use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use causeway_store::catalog::op_by_id;
use causeway_store::{
    Event, Frame, HistogramBucket, InSituRow, KernelName, LibraryAttach, ModeSwitch, OpCount,
    OverheadWindow, ProbeCost, ProcessInfo, SampledWindow, SessionInfo, SessionRow, TaskName,
    Writer, WriterOptions,
};
use crossbeam_channel::{Receiver, Sender, bounded, never, select, unbounded};
use tracing::{debug, error, warn};

use crate::error::CollectorError;
use crate::segments::{Replay, Segments};

/// Event batches in flight between the poll and writer threads (each up to `BATCH` events).
pub const CHANNEL_BATCHES: usize = 256;
/// Largest batch the poll thread sends.
pub const BATCH: usize = 4096;

/// Why events or calls were lost: the `drops.kind` the collector stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropKind {
    /// The BPF ring buffer had no room for a record.
    RingbufFull,
    /// The channel from the poll thread to the writer was full.
    ChannelFull,
    /// A held process was let go before its libraries' probes were attached.
    HoldTimeout,
    /// Calls recorded with a stack but without their Python frames (thread state not found,
    /// frames that did not read as code objects, an unsupported CPython).
    PythonFrames,
}

impl DropKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            DropKind::RingbufFull => "ringbuf_full",
            DropKind::ChannelFull => "channel_full",
            DropKind::HoldTimeout => "hold_timeout",
            DropKind::PythonFrames => "python_frames",
        }
    }
}

/// Rare messages that must not be dropped.
#[derive(Debug)]
pub enum Ctl {
    /// Insert or update a process row.
    Process(ProcessInfo),
    /// Insert or update a cgroup row (container, pod).
    Cgroup(causeway_store::CgroupInfo),
    /// Count lost events.
    Drop {
        /// Why.
        kind: DropKind,
        /// The op, when known.
        op: Option<u16>,
        /// How many.
        count: u64,
        /// Free text.
        detail: String,
    },
    /// In-kernel counters and histograms of one window.
    Counts(Vec<OpCount>, Vec<HistogramBucket>),
    /// A symbolised user stack (hash as stored in events.stack_hash, frames innermost first).
    Stack(i64, Vec<Frame>),
    /// The CPython frames of a stack (same hash), innermost first.
    PyStack(i64, causeway_store::PythonStack),
    /// Calibrated probe costs.
    Costs(Vec<ProbeCost>),
    /// Probe-mode switches.
    Modes(Vec<ModeSwitch>),
    /// Overhead controller windows.
    Overhead(Vec<OverheadWindow>),
    /// Attached time of sampled ops per counts window.
    Sampled(Vec<SampledWindow>),
    /// In-situ costs of sampled ops' probes.
    InSitu(Vec<InSituRow>),
    /// When tracing began for processes and libraries.
    Attach(Vec<LibraryAttach>),
    /// Kernel names.
    Kernels(Vec<KernelName>),
    /// Names of tasks that are not traced but took a traced thread's CPU.
    Tasks(Vec<TaskName>),
    /// NVTX ranges of the traced command (nvtx.rs): never dropped, like the other messages.
    Ranges(Vec<causeway_store::Range>),
    /// Steps found among the NVTX ranges, at the end of the recording.
    Steps(Vec<causeway_store::Step>),
}

/// Receives the readers of the live store as soon as it exists (live serving).
pub type OnStore = Box<dyn FnOnce(Vec<causeway_store::SharedReader>) + Send>;

/// What the writer thread did.
#[derive(Debug, Default, Clone, Copy)]
pub struct SinkStats {
    /// Events written to the store.
    pub written: u64,
    /// Events lost in batches the store could not append (stored as a `write_failed` drop).
    pub write_failed: u64,
    /// Times the writer reopened the store ([`Writer::maybe_reopen`]).
    pub reopens: u64,
    /// Segments closed (rolling segments only).
    pub segments_closed: u64,
    /// Closed segments deleted by retention.
    pub segments_deleted: u64,
}

/// The poll thread's handle on the writer thread.
#[derive(Debug)]
pub struct Sink {
    /// Event batches (bounded: `try_send` only).
    pub data: Sender<Vec<Event>>,
    /// Control messages.
    pub ctl: Sender<Ctl>,
    join: JoinHandle<Result<SinkStats, CollectorError>>,
}

impl Sink {
    /// Creates the store file and starts the writer thread.
    pub fn start(
        path: PathBuf,
        opts: WriterOptions,
        session: SessionInfo,
        json: bool,
        on_store: Option<OnStore>,
        segments: Option<Segments>,
    ) -> Result<Sink, CollectorError> {
        let writer = Writer::create(&path, opts).map_err(|source| CollectorError::Store {
            path: path.clone(),
            source: Box::new(source),
        })?;
        if let Some(f) = on_store {
            f(writer.live_readers().map_err(store_err(&path))?);
        }
        let (data, data_rx) = bounded(CHANNEL_BATCHES);
        let (ctl, ctl_rx) = unbounded();
        let join = std::thread::Builder::new()
            .name("causeway-writer".into())
            .spawn(move || run(writer, path, session, data_rx, ctl_rx, json, segments))
            .map_err(|source| CollectorError::Os {
                what: "starting the writer thread",
                source,
            })?;
        Ok(Sink { data, ctl, join })
    }

    /// Closes the channels and waits until the file is complete.
    pub fn finish(self) -> Result<SinkStats, CollectorError> {
        drop(self.data);
        drop(self.ctl);
        self.join
            .join()
            .map_err(|_| CollectorError::WriterPanicked)?
    }
}

fn store_err(path: &std::path::Path) -> impl Fn(causeway_store::StoreError) -> CollectorError + '_ {
    move |source| CollectorError::Store {
        path: path.to_path_buf(),
        source: Box::new(source),
    }
}

/// Keeps what a new segment must repeat.
fn remember(r: &mut Replay, msg: &Ctl) {
    match msg {
        Ctl::Process(p) => r.process(p),
        Ctl::Cgroup(c) => r.cgroup(c),
        Ctl::Stack(hash, frames) => r.stack(*hash, frames),
        Ctl::PyStack(hash, py) => r.python(*hash, py),
        Ctl::Costs(rows) => r.costs(rows),
        Ctl::Modes(rows) => r.modes(rows),
        Ctl::Attach(rows) => r.attach(rows),
        Ctl::Kernels(rows) => r.kernels(rows),
        Ctl::Tasks(rows) => r.tasks(rows),
        Ctl::Drop { .. }
        | Ctl::Counts(..)
        | Ctl::Overhead(_)
        | Ctl::Sampled(_)
        | Ctl::InSitu(_)
        | Ctl::Ranges(_)
        | Ctl::Steps(_) => {}
    }
}

fn json_line(out: &mut impl std::io::Write, e: &Event) {
    let op = op_by_id(e.op_id).map(|o| o.name).unwrap_or("unknown");
    let v = serde_json::json!({
        "timestamp": e.timestamp, "duration": e.duration, "pid": e.pid, "tid": e.tid,
        "comm": e.comm, "op": op, "arg0": e.arg0, "arg1": e.arg1, "ret_code": e.ret_code,
        "stack_hash": e.stack_hash,
    });
    // A closed stdout (e.g. `| head`) must not stop the recording.
    let _ = writeln!(out, "{v}");
}

/// The longest the writer thread waits for a message: until the next commit is due, at most
/// 200 ms.
fn idle_wait(w: &Writer) -> Duration {
    let most = Duration::from_millis(200);
    w.flush_due_in().map_or(most, |d| d.min(most))
}

fn run(
    mut w: Writer,
    path: PathBuf,
    session: SessionInfo,
    data: Receiver<Vec<Event>>,
    ctl: Receiver<Ctl>,
    json: bool,
    mut segments: Option<Segments>,
) -> Result<SinkStats, CollectorError> {
    let err = store_err(&path);
    let sid = w.begin_session(&session).map_err(&err)?;
    let mut replay = segments.is_some().then(Replay::default);
    if let Some(segs) = segments.as_mut() {
        segs.prepare_next(w.options());
    }
    let mut stats = SinkStats::default();
    let mut append_failed = false;
    let (mut data_open, mut ctl_open) = (true, true);
    let stdout = std::io::stdout();
    let (no_data, no_ctl) = (never(), never());
    while data_open || ctl_open {
        // A closed channel is swapped for one that never fires, so select does not spin on it.
        let (d, c) = (
            if data_open { &data } else { &no_data },
            if ctl_open { &ctl } else { &no_ctl },
        );
        select! {
            recv(d) -> batch => match batch {
                Ok(batch) => {
                    if let Some(r) = replay.as_mut() {
                        r.events(&batch);
                    }
                    let mut out = json.then(|| stdout.lock());
                    for e in &batch {
                        // A failed batch write is counted by the writer (`lost`), which stores
                        // it as a `write_failed` drop when it finishes.
                        if let Err(e) = w.append(e) {
                            if !append_failed {
                                error!(error = %e, "writing an event batch failed");
                            }
                            append_failed = true;
                        }
                        if let Some(out) = out.as_mut() {
                            json_line(out, e);
                        }
                    }
                    // Frees DuckDB's metadata of the row groups written so far, when due;
                    // the start-up code the new database ran is given back too (trim.rs).
                    let reopens = w.reopens();
                    w = w.maybe_reopen().map_err(&err)?;
                    if w.reopens() > reopens {
                        let released = crate::trim::release_pages_of(causeway_store::duckdb_code_address());
                        debug!(mib = released >> 20, "DuckDB pages released after reopening the store");
                    }
                }
                Err(_) => { data_open = false; }
            },
            recv(c) -> msg => match msg {
                Ok(msg) => {
                    if let Some(r) = replay.as_mut() {
                        remember(r, &msg);
                    }
                    let res = match msg {
                        Ctl::Process(p) => w.upsert_process(&p),
                        Ctl::Cgroup(c) => { let node = w.node().to_string(); w.add_cgroups(&node, &[c]) }
                        Ctl::Drop { kind, op, count, detail } => w.record_drop(kind.as_str(), op, count, &detail),
                        Ctl::Counts(counts, hist) => w.record_op_counts(&counts).and_then(|()| w.record_histogram(&hist)),
                        Ctl::Stack(hash, frames) => w.add_stack(hash, &frames),
                        Ctl::PyStack(hash, py) => w.add_python_stack(hash, &py),
                        Ctl::Costs(costs) => w.record_probe_costs(&costs),
                        Ctl::Modes(switches) => w.record_mode_switches(&switches),
                        Ctl::Overhead(rows) => w.record_overhead(&rows),
                        Ctl::Sampled(rows) => w.record_sampled(&rows),
                        Ctl::InSitu(rows) => w.record_in_situ(&rows),
                        Ctl::Attach(rows) => w.record_library_attach(&rows),
                        Ctl::Kernels(rows) => w.record_kernels(&rows),
                        Ctl::Tasks(rows) => w.record_tasks(&rows),
                        Ctl::Ranges(rows) => w.add_ranges(&rows),
                        Ctl::Steps(rows) => w.add_steps(&rows),
                    };
                    if let Err(e) = res {
                        warn!(error = %e, "writing trace metadata failed");
                    }
                }
                Err(_) => { ctl_open = false; }
            },
            // Wakes for the flush bound itself, so a quiet stretch after a burst is committed
            // on time too.
            default(idle_wait(&w)) => {}
        }
        if let Err(e) = w.tick() {
            warn!(error = %e, "periodic flush failed");
        }
        if let (Some(segs), Some(r)) = (segments.as_mut(), replay.as_mut())
            && segs.due()
        {
            w.end_session(sid, causeway_store::now_ns()).map_err(&err)?;
            w = segs.rotate(w)?;
            let node = w.node().to_string();
            w.add_session(&SessionRow {
                session_id: sid,
                node,
                stopped_ns: 0,
                info: session.clone(),
            })
            .map_err(&err)?;
            if let Err(e) = r.write(&mut w) {
                warn!(error = %e, "repeating processes and stacks into the new segment failed");
            }
        }
    }
    if let Some(segs) = &segments {
        stats.segments_closed = segs.closed;
        stats.segments_deleted = segs.deleted;
    }
    w.end_session(sid, causeway_store::now_ns()).map_err(&err)?;
    // Flush first so that the last batch's failure is counted too; finish stores the drop.
    if let Err(e) = w.flush() {
        error!(error = %e, "writing the last event batch failed");
    }
    stats.written = w.written();
    stats.write_failed = w.lost();
    stats.reopens = w.reopens();
    w.finish().map_err(&err)?;
    if let Some(segs) = segments.as_mut() {
        segs.close_last()?;
        stats.segments_closed = segs.closed;
    }
    Ok(stats)
}
