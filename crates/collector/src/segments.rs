//! Rolling segments (`causeway agent`): the recording's writer closes its store file after a
//! period or a size and goes on in a new one, within one data directory with retention by age
//! and total size. The open segment lives in `DIR/open/`; a closed one is moved to `DIR/`,
//! complete and readable on its own, because every new segment starts with the rows the later
//! events refer to (processes, cgroups, stacks, kernels, ...), which [`Replay`] remembers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use causeway_store::{
    CgroupInfo, Frame, KernelName, LibraryAttach, ModeSwitch, ProbeCost, ProcessInfo, PythonStack,
    TaskName, Writer,
};
use tracing::{info, warn};

use crate::error::CollectorError;

/// When segments close, how long closed ones are kept, and how much of them the live readers
/// see. Shared with the agent, which changes it on SIGHUP.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentPolicy {
    /// A segment closes after this long.
    pub period: Duration,
    /// ... or once its file passes this size (bytes).
    pub max_bytes: u64,
    /// Closed segments older than this (by when they closed) are deleted.
    pub max_age: Duration,
    /// The oldest closed segments are deleted while all of them together pass this (bytes).
    pub max_total_bytes: u64,
    /// Closed segments that ended within this long are part of the served timeline.
    pub serve_window: Duration,
}

/// The policy, as the agent and the writer thread share it.
pub type SegmentHandle = Arc<RwLock<SegmentPolicy>>;

/// How often the open segment's size is looked at.
const SIZE_CHECK: Duration = Duration::from_secs(1);

/// The data directory and the open segment.
#[derive(Debug)]
pub struct Segments {
    dir: PathBuf,
    policy: SegmentHandle,
    /// The open segment and when it was opened.
    open: PathBuf,
    opened: Instant,
    size_checked: Instant,
    /// The next segment's file, being made off the writer thread ([`Writer::prepare`]).
    prepared: Option<(PathBuf, std::thread::JoinHandle<bool>)>,
    /// Segments closed by this recording.
    pub closed: u64,
    /// Closed segments deleted by retention.
    pub deleted: u64,
}

fn io_err<'a>(
    path: &'a Path,
    what: &'static str,
) -> impl Fn(std::io::Error) -> CollectorError + 'a {
    move |source| CollectorError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}

impl Segments {
    /// Prepares `dir`: seals and closes segments a killed agent left open, applies retention,
    /// and names the first segment to open.
    pub fn start(dir: &Path, policy: SegmentHandle) -> Result<Segments, CollectorError> {
        let open_dir = dir.join("open");
        std::fs::create_dir_all(&open_dir).map_err(io_err(&open_dir, "creating"))?;
        for entry in std::fs::read_dir(&open_dir).map_err(io_err(&open_dir, "listing"))? {
            let p = entry.map_err(io_err(&open_dir, "listing"))?.path();
            if p.extension().is_none_or(|e| e != "duckdb") {
                continue;
            }
            if is_prepared(&p) {
                // A next segment made but never used: nothing in it.
                let _ = std::fs::remove_file(&p);
                continue;
            }
            // A crash or SIGKILL: what it committed is kept, and the next segment is new.
            match Writer::seal(&p) {
                Ok(()) => {
                    let to = closed_path(dir, &p);
                    std::fs::rename(&p, &to).map_err(io_err(&p, "moving a recovered segment"))?;
                    info!(segment = %to.display(), "recovered a segment left open");
                }
                Err(e) => {
                    warn!(segment = %p.display(), error = %e, "a segment left open could not be recovered; it stays in open/")
                }
            }
        }
        let mut s = Segments {
            dir: dir.to_path_buf(),
            policy,
            open: PathBuf::new(),
            opened: Instant::now(),
            size_checked: Instant::now(),
            prepared: None,
            closed: 0,
            deleted: 0,
        };
        s.retain(0);
        s.open = s.next_path();
        Ok(s)
    }

    /// The open segment's file.
    pub fn open_path(&self) -> &Path {
        &self.open
    }

    fn policy(&self) -> SegmentPolicy {
        self.policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A new segment's name: its start in UTC, sortable, unique in the directory.
    fn next_path(&self) -> PathBuf {
        let now = humantime::format_rfc3339_millis(SystemTime::now())
            .to_string()
            .replace([':', '-'], "")
            .replace('.', "_");
        let mut i = 0;
        loop {
            let name = if i == 0 {
                format!("segment-{now}.duckdb")
            } else {
                format!("segment-{now}-{i}.duckdb")
            };
            let p = self.dir.join("open").join(&name);
            if !p.exists() && !self.dir.join(&name).exists() {
                return p;
            }
            i += 1;
        }
    }

    /// Whether the open segment is due to close (its period passed, or its size).
    pub fn due(&mut self) -> bool {
        let policy = self.policy();
        if self.opened.elapsed() >= policy.period {
            return true;
        }
        if self.size_checked.elapsed() < SIZE_CHECK {
            return false;
        }
        self.size_checked = Instant::now();
        file_bytes(&self.open) >= policy.max_bytes
    }

    /// The closed segments the live readers see with the open one.
    pub fn timeline(&self) -> Vec<PathBuf> {
        let window = self.policy().serve_window;
        closed_segments(&self.dir)
            .into_iter()
            .filter(|(_, _, age)| *age <= window)
            .map(|(p, _, _)| p)
            .collect()
    }

    /// Closes the open segment into the data directory and opens the next one, whose live
    /// readers see the timeline with the segment just closed; retention runs first.
    pub fn rotate(&mut self, w: Writer) -> Result<Writer, CollectorError> {
        let t0 = Instant::now();
        // The segment about to close counts: a deleted file that is still attached would keep
        // its space until the next rotation.
        self.retain(file_bytes(&self.open));
        let next = self.next_path();
        let prepared = self.take_prepared(&next);
        let closed = closed_path(&self.dir, &self.open);
        let mut timeline = self.timeline();
        timeline.push(closed.clone());
        let w = w
            .rotate(&next, prepared, timeline, |old| {
                std::fs::rename(old, &closed)
            })
            .map_err(|source| CollectorError::Store {
                path: self.open.clone(),
                source: Box::new(source),
            })?;
        self.closed += 1;
        let ms = t0.elapsed().as_millis();
        info!(closed = %closed.display(), next = %next.display(), prepared, ms, "segment closed");
        self.open = next;
        self.opened = Instant::now();
        self.size_checked = Instant::now();
        self.prepare_next(w.options());
        Ok(w)
    }

    /// Starts making the next segment's file (its schema) on a thread of its own.
    pub fn prepare_next(&mut self, opts: &causeway_store::WriterOptions) {
        let path = self
            .dir
            .join("open")
            .join(format!(".prepared-{}.duckdb", self.closed));
        let _ = std::fs::remove_file(&path);
        let opts = opts.clone();
        let made = path.clone();
        match std::thread::Builder::new()
            .name("causeway-segment".into())
            .spawn(move || match Writer::prepare(&made, &opts) {
                Ok(()) => true,
                Err(e) => {
                    warn!(error = %e, "preparing the next segment failed; it is made at rotation");
                    false
                }
            }) {
            Ok(h) => self.prepared = Some((path, h)),
            Err(e) => warn!(error = %e, "starting the segment thread failed"),
        }
    }

    /// Moves the prepared file to `next`, if it was made: whether it was.
    fn take_prepared(&mut self, next: &Path) -> bool {
        let Some((path, h)) = self.prepared.take() else {
            return false;
        };
        h.join().unwrap_or(false) && std::fs::rename(&path, next).is_ok()
    }

    /// Moves the last segment, complete, among the closed ones (the recording ended).
    pub fn close_last(&mut self) -> Result<(), CollectorError> {
        if let Some((path, h)) = self.prepared.take() {
            let _ = h.join();
            let _ = std::fs::remove_file(&path);
        }
        let closed = closed_path(&self.dir, &self.open);
        std::fs::rename(&self.open, &closed)
            .map_err(io_err(&self.open, "closing the last segment"))?;
        self.closed += 1;
        info!(closed = %closed.display(), "last segment closed");
        Ok(())
    }

    /// Deletes the closed segments past the age or total size of the policy, oldest first;
    /// `closing` bytes are about to join them.
    fn retain(&mut self, closing: u64) {
        let policy = self.policy();
        let segs = closed_segments(&self.dir);
        let mut total: u64 = segs.iter().map(|(_, b, _)| b).sum::<u64>() + closing;
        for (p, bytes, age) in segs {
            if age <= policy.max_age && total <= policy.max_total_bytes {
                continue;
            }
            match std::fs::remove_file(&p) {
                Ok(()) => {
                    total -= bytes;
                    self.deleted += 1;
                    info!(segment = %p.display(), "segment deleted by retention");
                }
                Err(e) => warn!(segment = %p.display(), error = %e, "deleting a segment failed"),
            }
        }
    }
}

/// Whether `p` is a next segment's file made ahead ([`Segments::prepare_next`]).
fn is_prepared(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(".prepared-"))
}

/// Where the open segment `open` goes once closed.
fn closed_path(dir: &Path, open: &Path) -> PathBuf {
    dir.join(open.file_name().unwrap_or_default())
}

/// A store file's size with its write-ahead log.
fn file_bytes(p: &Path) -> u64 {
    let mut wal = p.as_os_str().to_owned();
    wal.push(".wal");
    [p.to_path_buf(), PathBuf::from(wal)]
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum()
}

/// Closed segments, oldest first, with their size and how long ago they closed.
fn closed_segments(dir: &Path) -> Vec<(PathBuf, u64, Duration)> {
    let now = SystemTime::now();
    causeway_store::timeline::segments_in(dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| {
            let m = std::fs::metadata(&p).ok()?;
            let age = now
                .duration_since(m.modified().ok()?)
                .unwrap_or(Duration::ZERO);
            Some((p, m.len(), age))
        })
        .collect()
}

/// The rows a new segment starts with, so that its events' processes, stacks and kernels are
/// in the same file: the latest of each, for processes still running or seen in the last
/// segment.
#[derive(Debug, Default)]
pub struct Replay {
    processes: HashMap<u32, ProcessInfo>,
    cgroups: HashMap<u64, CgroupInfo>,
    stacks: HashMap<i64, Vec<Frame>>,
    python: HashMap<i64, PythonStack>,
    kernels: HashMap<(u32, i64), KernelName>,
    tasks: HashMap<u32, TaskName>,
    attach: Vec<LibraryAttach>,
    costs: Vec<ProbeCost>,
    modes: HashMap<u16, ModeSwitch>,
    /// Pids with a row in the open segment (events, a process row).
    seen: std::collections::HashSet<u32>,
}

impl Replay {
    /// Remembers a process row.
    pub fn process(&mut self, p: &ProcessInfo) {
        self.seen.insert(p.pid);
        self.processes.insert(p.pid, p.clone());
    }
    /// Remembers a cgroup row.
    pub fn cgroup(&mut self, c: &CgroupInfo) {
        self.cgroups.insert(c.cgroup_id, c.clone());
    }
    /// Remembers a stack.
    pub fn stack(&mut self, hash: i64, frames: &[Frame]) {
        self.stacks.entry(hash).or_insert_with(|| frames.to_vec());
    }
    /// Remembers a stack's Python frames.
    pub fn python(&mut self, hash: i64, py: &PythonStack) {
        self.python.entry(hash).or_insert_with(|| py.clone());
    }
    /// Remembers kernel names.
    pub fn kernels(&mut self, rows: &[KernelName]) {
        for k in rows {
            self.kernels.insert((k.pid, k.address), k.clone());
        }
    }
    /// Remembers task names.
    pub fn tasks(&mut self, rows: &[TaskName]) {
        for t in rows {
            self.tasks.entry(t.tid).or_insert_with(|| t.clone());
        }
    }
    /// Remembers library attachments.
    pub fn attach(&mut self, rows: &[LibraryAttach]) {
        self.attach.extend_from_slice(rows);
    }
    /// Remembers the probe costs.
    pub fn costs(&mut self, rows: &[ProbeCost]) {
        self.costs = rows.to_vec();
    }
    /// Remembers each op's latest mode.
    pub fn modes(&mut self, rows: &[ModeSwitch]) {
        for m in rows {
            self.modes.insert(m.op_id, m.clone());
        }
    }
    /// Notes pids with events in the open segment.
    pub fn events(&mut self, batch: &[causeway_store::Event]) {
        // Batches come in runs of one process's events: one lookup per run.
        let mut last = None;
        for e in batch {
            if last != Some(e.pid) {
                self.seen.insert(e.pid);
                last = Some(e.pid);
            }
        }
    }

    /// Forgets processes gone before the open segment, then writes what is kept into the new
    /// segment's writer.
    pub fn write(&mut self, w: &mut Writer) -> causeway_store::Result<()> {
        let seen = std::mem::take(&mut self.seen);
        let keep = |pid: u32| seen.contains(&pid) || Path::new(&format!("/proc/{pid}")).exists();
        self.processes.retain(|pid, _| keep(*pid));
        self.kernels.retain(|(pid, _), _| keep(*pid));
        self.attach.retain(|a| keep(a.pid));
        let node = w.node().to_string();
        for p in self.processes.values() {
            w.upsert_process(p)?;
        }
        let cgroups: Vec<CgroupInfo> = self.cgroups.values().cloned().collect();
        w.add_cgroups(&node, &cgroups)?;
        for (hash, frames) in &self.stacks {
            w.add_stack(*hash, frames)?;
        }
        for (hash, py) in &self.python {
            w.add_python_stack(*hash, py)?;
        }
        let kernels: Vec<KernelName> = self.kernels.values().cloned().collect();
        w.record_kernels(&kernels)?;
        let tasks: Vec<TaskName> = self.tasks.values().cloned().collect();
        w.record_tasks(&tasks)?;
        w.record_library_attach(&self.attach)?;
        w.record_probe_costs(&self.costs)?;
        let modes: Vec<ModeSwitch> = self.modes.values().cloned().collect();
        w.record_mode_switches(&modes)?;
        // Processes kept count as seen again: still running, they belong to the new segment.
        self.seen = self.processes.keys().copied().collect();
        Ok(())
    }
}
