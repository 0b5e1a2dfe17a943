//! Imports PyTorch profiler (Kineto) traces, Chrome trace-event JSON plain or gzipped: runtime
//! and driver calls into `events` (catalogue op names, correlation ids in `correlations`), the
//! device's kernels, copies and memsets into `gpu_activity`, CPU ops and annotations into
//! `ranges`, `ProfilerStep#N` into `steps`, `distributedInfo` into the session's and events'
//! rank. docs/import.md has the mapping.
//!
//! Each file is read twice, both times as a stream of blocks split into events ([`split`]): a
//! first pass scans it for the top-level keys (some profilers write `baseTimeNanoseconds`, which
//! every timestamp needs, after the events), the thread names and the profiled process, and
//! checks its structure and caps before anything is written; the second parses and maps every
//! event.

mod bounded;
mod load;
pub(crate) mod map;
mod parse;
mod python;
mod split;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use bounded::{Breach, Container, JsonLimits, sniff};
use parse::{Header, Id, Meta};
use split::{Fault, Parts, Scanned, Splitter, Stop};

use crate::ImportError;

/// What can go wrong reading a Kineto trace.
#[derive(Debug, thiserror::Error)]
pub enum KinetoError {
    /// The JSON ends before the document does (a profiler killed while writing, a partial copy).
    #[error("{path}: truncated JSON: the document ends early ({detail})")]
    Truncated {
        /// The source file.
        path: PathBuf,
        /// Where.
        detail: String,
    },
    /// Not valid JSON.
    #[error("{path}: not valid JSON ({detail})")]
    Malformed {
        /// The source file.
        path: PathBuf,
        /// The parser's message, with line and column.
        detail: String,
    },
    /// Valid JSON, but not a trace.
    #[error("{path}: not a PyTorch profiler trace ({why})")]
    UnknownSchema {
        /// The source file.
        path: PathBuf,
        /// What is missing.
        why: String,
    },
    /// A limit that keeps a hostile file from taking the machine was reached.
    #[error("{path}: {breach}")]
    Limit {
        /// The source file.
        path: PathBuf,
        /// Which limit.
        breach: Breach,
    },
    /// The gzip stream is damaged.
    #[error("{path}: damaged gzip data ({detail})")]
    Gzip {
        /// The source file.
        path: PathBuf,
        /// The decoder's message.
        detail: String,
    },
    /// A directory given as a source holds no trace.
    #[error("{path}: is a directory without a PyTorch profiler trace (*.json, *.json.gz) in it")]
    EmptyDirectory {
        /// The directory.
        path: PathBuf,
    },
}

impl causeway_hint::Hint for KinetoError {
    /// What to do about it.
    fn hint(&self) -> Option<String> {
        Some(
            match self {
                Self::Truncated { .. } => "copy the file again, or export the trace again: torch.profiler writes it when the profiling window closes",
                Self::Malformed { .. } => "import takes the JSON torch.profiler writes (export_chrome_trace, tensorboard_trace_handler); check what wrote this file",
                Self::UnknownSchema { .. } => "a PyTorch profiler trace is a JSON object with a traceEvents array (Chrome trace-event format)",
                Self::Limit { breach: Breach::TooLarge { .. }, .. } => "a real trace of that size is unlikely: check the file's origin, or split the profiling window (schedule with fewer active steps)",
                Self::Limit { .. } => "profilers do not write such JSON: check the file's origin",
                Self::Gzip { .. } => "copy the file again; `gzip -t FILE` checks it",
                Self::EmptyDirectory { .. } => "give the directory torch.profiler wrote the ranks' traces to, or the files themselves",
            }
            .to_string(),
        )
    }
}

causeway_hint::register!(KinetoError);

/// What the Kineto importer found in one file, beside [`crate::SourceReport`]'s counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KinetoReport {
    /// `distributedInfo.rank`.
    pub rank: Option<i64>,
    /// `distributedInfo.world_size`.
    pub world_size: Option<i64>,
    /// The profiled process (the pid of its runtime calls).
    pub pid: Option<u32>,
    /// Runtime and driver calls in the file (stored as events, or skipped for an op unknown to
    /// the catalogue, or invalid).
    pub runtime_calls: u64,
    /// Kernels stored in `gpu_activity`.
    pub kernels: u64,
    /// Copies stored in `gpu_activity`.
    pub memcpys: u64,
    /// Memsets stored in `gpu_activity`.
    pub memsets: u64,
    /// Device-side synchronisations stored in `gpu_activity`.
    pub syncs: u64,
    /// Host ranges stored in `ranges`.
    pub ranges: u64,
    /// Steps stored in `steps`.
    pub steps: u64,
    /// Ranges written out of start order on their thread (their depth counts only the ranges
    /// open as far as seen).
    pub ranges_out_of_order: u64,
    /// Events of kinds the store does not hold, by `ph/cat` (flows, instants, metadata, GPU-side
    /// annotations, ...).
    pub not_imported: std::collections::BTreeMap<String, u64>,
}

/// A Kineto trace, checked and ready to import.
#[derive(Debug)]
pub struct KinetoTrace {
    path: PathBuf,
    container: Container,
    limits: JsonLimits,
    header: Header,
    /// Elements of `traceEvents`.
    events: u64,
    /// The profiled process: the pid with the most runtime calls (then CPU ops).
    pid: Option<u32>,
    /// Thread names from metadata events, by (pid, tid).
    threads: HashMap<(i64, i64), String>,
    /// Process names from metadata events, by pid.
    processes: HashMap<i64, String>,
    /// The direction of each device copy (`Memcpy HtoD ...`), by correlation id: the runtime
    /// call that queued it does not say.
    copy_directions: HashMap<i64, i64>,
    /// The `python_function` ranges of each thread (traces recorded with Python stacks).
    python: python::PythonRanges,
}

/// Most thread and process names kept from metadata events.
const MAX_NAMES: usize = 1 << 16;
/// Most copy directions kept (a copy past these is stored without its direction).
const MAX_COPIES: usize = 1 << 21;

/// The first pass: the header, names, the profiled process, and a count of the events.
#[derive(Default)]
struct Scan {
    header: Header,
    events: u64,
    calls_by_pid: HashMap<i64, (u64, u64)>,
    threads: HashMap<(i64, i64), String>,
    processes: HashMap<i64, String>,
    copy_directions: HashMap<i64, i64>,
    python: python::PythonRanges,
}

impl Scan {
    /// Keeps a `python_function` range (a frame of a trace recorded with Python stacks) for the
    /// stacks of the calls made inside it; one without valid times or ids is left out.
    fn python_range(&mut self, scanned: &Scanned<'_>) {
        let Ok((ev, _)) = parse::parse_event(scanned.json) else {
            return;
        };
        let id = |i: &Option<Id>| {
            i.as_ref()
                .and_then(Id::num)
                .and_then(|v| u32::try_from(v).ok())
        };
        let start = ev.ts.and_then(|t| parse::micros_to_ns(t.get()));
        let dur = ev.dur.and_then(|d| parse::micros_to_ns(d.get()));
        if let (Some(pid), Some(tid), Some(name), Some(start), Some(dur)) =
            (id(&ev.pid), id(&ev.tid), ev.name.as_deref(), start, dur)
        {
            self.python
                .push(pid, tid, name, start, start.saturating_add(dur));
        }
    }
}

impl Parts for Scan {
    const SCANNED: bool = true;

    fn header(&mut self, key: &str, value: &[u8]) -> Result<(), Stop> {
        Ok(parse::header_value(&mut self.header, key, value)?)
    }

    fn events_found(&mut self) {
        self.header.has_events = true;
    }

    fn parse(&mut self, _: &[u8]) -> Result<usize, Stop> {
        unreachable!("the first pass scans")
    }

    fn scanned(&mut self, scanned: &Scanned<'_>) -> Result<(), Stop> {
        let ev = Meta::of(scanned)?;
        self.events += 1;
        let pid = ev.pid.as_ref().and_then(Id::num);
        match (ev.ph.as_deref(), ev.cat.as_deref(), ev.name.as_deref()) {
            (Some("M"), _, Some(what @ ("thread_name" | "process_name"))) => {
                let (Some(pid), Some(name)) = (pid, ev.args_name()) else {
                    return Ok(());
                };
                if what == "thread_name" {
                    let tid = ev.tid.as_ref().and_then(Id::num).unwrap_or(0);
                    if self.threads.len() < MAX_NAMES {
                        self.threads.insert((pid, tid), name);
                    }
                } else if self.processes.len() < MAX_NAMES {
                    self.processes.insert(pid, name);
                }
            }
            (_, Some("gpu_memcpy"), Some(name)) => {
                let direction = map::copy_direction(name);
                let correlation = direction.and_then(|_| ev.args()?.correlation);
                if let (Some(d), Some(c)) = (direction, correlation)
                    && self.copy_directions.len() < MAX_COPIES
                {
                    self.copy_directions.insert(c, d);
                }
            }
            (_, Some("cuda_runtime" | "cuda_driver"), _) => {
                if let Some(pid) = pid {
                    self.calls_by_pid.entry(pid).or_default().0 += 1;
                }
            }
            (ph, Some(cat @ ("cpu_op" | "user_annotation" | "python_function")), _) => {
                if let Some(pid) = pid {
                    self.calls_by_pid.entry(pid).or_default().1 += 1;
                }
                if ph == Some("X") && cat == "python_function" {
                    self.python_range(scanned);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl KinetoTrace {
    /// Reads `path` through once (bounded by `limits`): its header, names and profiled process;
    /// fails on anything that is not a whole Kineto trace, before anything is written.
    pub fn open(
        path: &Path,
        container: Container,
        limits: JsonLimits,
    ) -> Result<KinetoTrace, ImportError> {
        let mut scan = Scan::default();
        read(path, container, limits, &mut scan)?;
        let header = std::mem::take(&mut scan.header);
        scan.python.finish(header.base_ns.unwrap_or(0));
        if !header.has_events {
            return Err(KinetoError::UnknownSchema {
                path: path.to_path_buf(),
                why: "valid JSON without a traceEvents array".into(),
            }
            .into());
        }
        let pid = scan
            .calls_by_pid
            .iter()
            .filter(|(p, _)| (0..=crate::skips::MAX_PID).contains(*p))
            .max_by_key(|(p, n)| (**n, std::cmp::Reverse(**p)))
            .map(|(p, _)| *p as u32);
        Ok(KinetoTrace {
            path: path.to_path_buf(),
            container,
            limits,
            header,
            events: scan.events,
            pid,
            threads: scan.threads,
            processes: scan.processes,
            copy_directions: scan.copy_directions,
            python: scan.python,
        })
    }

    /// Elements of `traceEvents`.
    pub fn event_count(&self) -> u64 {
        self.events
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The node its rows get: `--node`, else the host the profiler named, else the file's name
    /// without its trace suffixes.
    pub fn default_node(&self, opts: &crate::ImportOptions) -> String {
        if let Some(n) = &opts.node {
            return n.clone();
        }
        if let Some(h) = self
            .header
            .host_name
            .as_ref()
            .filter(|h| !h.trim().is_empty())
        {
            return h.trim().to_string();
        }
        let name = self
            .path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut stem = name.as_str();
        for suffix in [".gz", ".json", ".pt.trace", ".trace"] {
            stem = stem.strip_suffix(suffix).unwrap_or(stem);
        }
        if stem.is_empty() {
            "imported".into()
        } else {
            stem.to_string()
        }
    }
}

/// Reads the whole document at `path` into `parts` (parts that stop the walk keep why: the
/// error returned then only says that it stopped).
fn read<P: Parts>(
    path: &Path,
    container: Container,
    limits: JsonLimits,
    parts: &mut P,
) -> Result<(), ImportError> {
    let reader =
        bounded::open(path, container, limits).map_err(|source| ImportError::Unreadable {
            path: path.to_path_buf(),
            source,
        })?;
    Splitter::new(reader, limits)
        .walk(parts)
        .map_err(|fault| classify(path, fault))
}

/// Why the walk stopped, as what was wrong with the file.
fn classify(path: &Path, fault: Fault) -> ImportError {
    let path = path.to_path_buf();
    let err = match fault {
        Fault::Stopped => KinetoError::UnknownSchema {
            path,
            why: "the import stopped".into(),
        },
        Fault::Io(io) => {
            if let Some(breach) = bounded::breach(&io) {
                KinetoError::Limit { path, breach }
            } else if io.kind() == std::io::ErrorKind::UnexpectedEof {
                KinetoError::Truncated {
                    path,
                    detail: "the gzip stream ends early".into(),
                }
            } else if matches!(
                io.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput
            ) {
                KinetoError::Gzip {
                    path,
                    detail: io.to_string(),
                }
            } else {
                return ImportError::Unreadable { path, source: io };
            }
        }
        Fault::Limit(breach) => KinetoError::Limit { path, breach },
        Fault::Truncated(detail) => KinetoError::Truncated { path, detail },
        Fault::Malformed(detail) => KinetoError::Malformed { path, detail },
        Fault::Schema(why) => KinetoError::UnknownSchema { path, why },
    };
    err.into()
}
