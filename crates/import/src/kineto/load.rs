//! The second pass over a Kineto trace: each event mapped to its store rows and written in
//! batches (events through the writer's own batching, the other tables every few thousand rows).

use std::collections::{BTreeMap, HashMap};

use causeway_store::{
    Correlation, Event, GpuActivity, GpuKind, PythonStack, Range, SessionInfo, Step, Writer,
};

use super::map::{
    AnnotationSteps, Depths, Launched, call_args, call_op, kernel_name, profiler_step,
};
use super::parse::{Header, Id, RawEvent, micros_to_ns, parse_event};
use super::split::{Parts, Scanned, Stop};
use super::{KinetoReport, KinetoTrace};
use crate::skips::Invalid;
use crate::{ImportError, ImportOptions, Progress, SourceReport};

/// Rows of a side table buffered before they are appended.
const BATCH: usize = 8192;

struct Load<'a> {
    w: &'a mut Writer,
    file: &'a KinetoTrace,
    base_ns: i64,
    rank: Option<i32>,
    pid: u32,
    gpu: Vec<GpuActivity>,
    settled: Vec<Range>,
    steps: Vec<Step>,
    /// Steps marked by other annotations, used where the file has no `ProfilerStep#N`.
    annotation_steps: AnnotationSteps,
    correlations: Vec<Correlation>,
    /// The Python stacks of calls, by hash, written once the events are.
    python_stacks: HashMap<i64, PythonStack>,
    depths: Depths,
    skipped: BTreeMap<String, u64>,
    invalid: Invalid,
    report: KinetoReport,
    events: u64,
    first_ns: i64,
    last_ns: i64,
    failed: Option<ImportError>,
    done: &'a mut u64,
    total: u64,
    progress: &'a mut dyn FnMut(Progress),
    index: i64,
    /// The device of the first device row (the rank's GPU).
    device_seen: Option<i16>,
}

impl Load<'_> {
    /// Start and end in ns since the epoch, when the event has valid times.
    fn span(&self, ev: &RawEvent) -> Option<(i64, i64)> {
        let start = micros_to_ns(ev.ts.as_ref()?.get())?.checked_add(self.base_ns)?;
        let dur = match &ev.dur {
            Some(d) => micros_to_ns(d.get())?,
            None => 0,
        };
        let end = start.checked_add(dur)?;
        ((0..=causeway_store::MAX_TIMESTAMP_NS).contains(&start)
            && dur >= 0
            && end <= causeway_store::MAX_TIMESTAMP_NS)
            .then_some((start, end))
    }

    fn host_ids(ev: &RawEvent) -> Option<(u32, u32)> {
        let ok = |id: &Option<Id>| {
            id.as_ref()
                .and_then(Id::num)
                .filter(|v| (0..=crate::skips::MAX_PID).contains(v))
                .map(|v| v as u32)
        };
        Some((ok(&ev.pid)?, ok(&ev.tid)?))
    }

    fn invalid(&mut self, why: String) {
        self.invalid.note(self.index, why);
    }

    fn seen(&mut self, start: i64, end: i64) {
        self.first_ns = self.first_ns.min(start);
        self.last_ns = self.last_ns.max(end);
    }

    fn call(&mut self, ev: RawEvent) -> Result<(), ImportError> {
        self.report.runtime_calls += 1;
        let name = ev.name.as_deref().unwrap_or("");
        let Some(op) = call_op(name) else {
            crate::skips::tally(&mut self.skipped, name, 1);
            return Ok(());
        };
        let (Some((start, end)), Some((pid, tid))) = (self.span(&ev), Self::host_ids(&ev)) else {
            self.invalid(format!("{name} without valid ts, dur, pid or tid"));
            return Ok(());
        };
        self.seen(start, end);
        let args = ev.args.unwrap_or_default();
        let launched = Launched {
            bytes: args.bytes,
            stream: args.stream,
            device: args.device,
            // The device copy queued by the call says which way it went.
            direction: args
                .correlation
                .and_then(|c| self.file.copy_directions.get(&c).copied()),
            grid: None,
        };
        let (arg0, arg1) = call_args(op, &launched);
        let comm = self
            .file
            .threads
            .get(&(i64::from(pid), i64::from(tid)))
            .cloned()
            .unwrap_or_default();
        if let Some(correlation) = args.correlation {
            self.correlations.push(Correlation {
                seq: self.w.next_seq(),
                pid,
                correlation,
            });
        }
        let stack_hash = match self.file.python.stack(pid, tid, start, end) {
            Some((hash, stack)) => {
                self.python_stacks.entry(hash).or_insert(stack);
                hash
            }
            None => 0,
        };
        self.w.append(&Event {
            timestamp: start,
            duration: end - start,
            pid,
            tid,
            comm,
            op_id: op.id,
            arg0,
            arg1,
            ret_code: 0,
            gpu_id: args.device.and_then(|d| i16::try_from(d).ok()).unwrap_or(0),
            stack_hash,
            cgroup_id: 0,
            rank: self.rank,
        })?;
        self.events += 1;
        Ok(())
    }

    fn device(&mut self, ev: RawEvent, kind: GpuKind) -> Result<(), ImportError> {
        let Some((start, end)) = self.span(&ev) else {
            self.invalid(format!("a {} without valid ts or dur", kind.as_str()));
            return Ok(());
        };
        let args = ev.args.unwrap_or_default();
        let device = args
            .device
            .or_else(|| ev.pid.as_ref().and_then(Id::num))
            .and_then(|d| i16::try_from(d).ok());
        let Some(device) = device else {
            self.invalid(format!("a {} without a device", kind.as_str()));
            return Ok(());
        };
        self.seen(start, end);
        self.device_seen.get_or_insert(device);
        let raw_name = ev.name.map(String::from).unwrap_or_default();
        let name = if kind == GpuKind::Kernel {
            kernel_name(&raw_name)
        } else {
            raw_name.clone()
        };
        match kind {
            GpuKind::Kernel => self.report.kernels += 1,
            GpuKind::Memcpy => self.report.memcpys += 1,
            GpuKind::Memset => self.report.memsets += 1,
            GpuKind::Sync => self.report.syncs += 1,
        }
        self.gpu.push(GpuActivity {
            pid: self.pid,
            device,
            stream: args
                .stream
                .or_else(|| ev.tid.as_ref().and_then(Id::num))
                .unwrap_or(0),
            kind,
            name,
            raw_name,
            start_ns: start,
            end_ns: end,
            bytes: args.bytes,
            correlation: args.correlation,
            grid: args.grid,
            block: args.block,
        });
        if self.gpu.len() >= BATCH {
            self.w.add_gpu_activity(&self.gpu)?;
            self.gpu.clear();
        }
        Ok(())
    }

    fn range(&mut self, ev: RawEvent, kind: &'static str) -> Result<(), ImportError> {
        let (Some((start, end)), Some((pid, tid))) = (self.span(&ev), Self::host_ids(&ev)) else {
            self.invalid(format!("a {kind} range without valid ts, dur, pid or tid"));
            return Ok(());
        };
        self.seen(start, end);
        let name = ev.name.map(String::from).unwrap_or_default();
        if matches!(kind, "cpu_op" | "user_annotation")
            && let Some(step) = profiler_step(&name)
        {
            self.steps.push(Step {
                pid,
                tid,
                step,
                start_ns: start,
                end_ns: end,
                source: "profiler",
            });
        }
        let row = Range {
            pid,
            tid,
            name,
            kind,
            start_ns: start,
            end_ns: end,
            depth: 0,
        };
        if kind == "user_annotation" {
            self.annotation_steps.push(row.clone());
        }
        self.depths.push(row, &mut self.settled);
        if self.settled.len() >= BATCH {
            self.flush_ranges()?;
        }
        Ok(())
    }

    fn flush_ranges(&mut self) -> Result<(), ImportError> {
        self.report.ranges += self.settled.len() as u64;
        self.w.add_ranges(&self.settled)?;
        self.settled.clear();
        Ok(())
    }

    /// Writes what is still buffered.
    fn flush(&mut self) -> Result<(), ImportError> {
        self.depths.finish(&mut self.settled);
        self.report.ranges_out_of_order = self.depths.out_of_order;
        self.flush_ranges()?;
        self.w.add_gpu_activity(&self.gpu)?;
        self.gpu.clear();
        // ProfilerStep#N, where the profiler's schedule marked steps, is what people index by.
        if self.steps.is_empty() {
            self.steps = std::mem::take(&mut self.annotation_steps).steps();
        }
        self.report.steps += self.steps.len() as u64;
        self.w.add_steps(&self.steps)?;
        self.steps.clear();
        self.w.flush()?;
        self.w.add_correlations(&self.correlations)?;
        self.correlations.clear();
        Ok(())
    }

    fn map(&mut self, ev: RawEvent) -> Result<(), ImportError> {
        if ev.ph.as_deref() != Some("X") {
            let key = format!(
                "{}/{}",
                ev.ph.as_deref().unwrap_or(""),
                ev.cat.as_deref().unwrap_or("")
            );
            crate::skips::tally(&mut self.report.not_imported, &key, 1);
            return Ok(());
        }
        match ev.cat.as_deref().unwrap_or("") {
            "cuda_runtime" | "cuda_driver" => self.call(ev),
            "kernel" => self.device(ev, GpuKind::Kernel),
            "gpu_memcpy" => self.device(ev, GpuKind::Memcpy),
            "gpu_memset" => self.device(ev, GpuKind::Memset),
            "cuda_sync" => self.device(ev, GpuKind::Sync),
            "cpu_op" => self.range(ev, "cpu_op"),
            "user_annotation" => self.range(ev, "user_annotation"),
            "python_function" => self.range(ev, "python_function"),
            other => {
                let key = format!("X/{other}");
                crate::skips::tally(&mut self.report.not_imported, &key, 1);
                Ok(())
            }
        }
    }
}

impl Parts for Load<'_> {
    const SCANNED: bool = false;

    fn header(&mut self, key: &str, value: &[u8]) -> Result<(), Stop> {
        // Read in the first pass; read again only to follow the document.
        Ok(super::parse::header_value(
            &mut Header::default(),
            key,
            value,
        )?)
    }

    fn events_found(&mut self) {}

    fn scanned(&mut self, _: &Scanned<'_>) -> Result<(), Stop> {
        unreachable!("the second pass parses")
    }

    fn parse(&mut self, avail: &[u8]) -> Result<usize, Stop> {
        let (ev, len) = parse_event(avail)?;
        self.take(ev)?;
        Ok(len)
    }
}

impl Load<'_> {
    fn take(&mut self, ev: RawEvent) -> Result<(), Stop> {
        self.index += 1;
        *self.done += 1;
        if (*self.done).is_multiple_of(4096) {
            (self.progress)(Progress {
                done: *self.done,
                total: self.total,
            });
        }
        self.map(ev).map_err(|e| {
            self.failed = Some(e);
            Stop::Sink
        })
    }
}

impl KinetoTrace {
    /// Maps every event of the file into `w` under its node, then its session and process.
    pub fn copy_into(
        &self,
        w: &mut Writer,
        opts: &ImportOptions,
        done: &mut u64,
        total: u64,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<SourceReport, ImportError> {
        let node = self.default_node(opts);
        let file_name = self
            .path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let origin = format!("imported:{file_name}");
        w.set_node(&node, &origin, "")?;
        let h = &self.header;
        let rank = h.rank.and_then(|r| i32::try_from(r).ok());
        let mut load = Load {
            w,
            file: self,
            base_ns: h.base_ns.unwrap_or(0),
            rank,
            pid: self.pid.unwrap_or(0),
            gpu: Vec::new(),
            settled: Vec::new(),
            steps: Vec::new(),
            annotation_steps: AnnotationSteps::default(),
            correlations: Vec::new(),
            python_stacks: HashMap::new(),
            depths: Depths::default(),
            skipped: BTreeMap::new(),
            invalid: Invalid::default(),
            report: KinetoReport {
                rank: h.rank,
                world_size: h.world_size,
                pid: self.pid,
                ..KinetoReport::default()
            },
            events: 0,
            first_ns: i64::MAX,
            last_ns: i64::MIN,
            failed: None,
            done,
            total,
            progress,
            index: 0,
            device_seen: None,
        };
        // The side tables' rows in one transaction (Writer::begin_bulk), committed before the
        // session and processes below read the file.
        load.w.begin_bulk()?;
        let loaded = super::read(&self.path, self.container, self.limits, &mut load)
            .map_err(|e| load.failed.take().unwrap_or(e))
            .and_then(|()| load.flush());
        if let Err(e) = loaded {
            let _ = load.w.rollback_bulk();
            return Err(e);
        }
        load.w.commit_bulk()?;
        let Load {
            w,
            python_stacks,
            skipped,
            invalid,
            mut report,
            events,
            first_ns,
            last_ns,
            done,
            total,
            progress,
            device_seen,
            ..
        } = load;
        progress(Progress { done: *done, total });
        for (hash, stack) in &python_stacks {
            w.add_python_stack(*hash, stack)?;
        }
        let mut out = SourceReport {
            path: self.path.clone(),
            reference_version: h
                .schema_version
                .map(|v| format!("kineto schemaVersion {v}"))
                .unwrap_or_default(),
            nodes: vec![node.clone()],
            events,
            ..SourceReport::default()
        };
        out.invalid = invalid.store(w, &origin, |first| format!("traceEvents[{}]", first - 1))?;
        out.skipped += crate::skips::record_skipped(w, &origin, &skipped)?;
        if first_ns <= last_ns {
            let gpu_model = h
                .devices
                .iter()
                .find(|(id, _)| Some(*id) == device_seen.map(i64::from))
                .or(h.devices.first())
                .map(|(_, n)| n.clone())
                .unwrap_or_default();
            let session = w.begin_session(&SessionInfo {
                started_ns: first_ns,
                gpu_model,
                tool_version: out.reference_version.clone(),
                rank,
                world_size: h.world_size.and_then(|r| i32::try_from(r).ok()),
                origin: origin.clone(),
                ..SessionInfo::default()
            })?;
            w.end_session(session, last_ns)?;
            out.sessions = 1;
        }
        for mut p in w.processes_in_events(&node)? {
            if let Some(name) = self.processes.get(&i64::from(p.pid)) {
                p.comm = name.clone();
            }
            p.rank = rank;
            p.world_size = h.world_size.and_then(|r| i32::try_from(r).ok());
            w.upsert_process_of(&node, &p)?;
            out.processes += 1;
        }
        report.not_imported.retain(|_, n| *n > 0);
        out.kineto = Some(report);
        Ok(out)
    }
}
