//! The nsys export's tables mapped to store rows, each read once as a stream in start order:
//! runtime and driver calls into `events` (and `correlations`), the device tables into
//! `gpu_activity`, NVTX and OS runtime ranges into `ranges`; then drops, session and processes.

use std::collections::{BTreeMap, HashMap};

use causeway_store::catalog::OpInfo;
use causeway_store::{Correlation, Event, GpuActivity, GpuKind, Range, SessionInfo, Writer};
use rusqlite::Row;

use super::schema::{
    self, EVENT_CLASSES, MEM_KINDS, MEMCPY_KINDS, NVTX_DOMAIN_CREATE, NVTX_PUSH_POP,
    NVTX_START_END, NVTX_TYPES, SYNC_TYPES,
};
use super::{NsysReport, NsysTrace, global_pid, global_tid};
use crate::kineto::map::{AnnotationSteps, Depths, Launched, call_args, call_op, kernel_name};
use crate::skips::{Invalid, MAX_PID};
use crate::{ImportError, ImportOptions, Progress, SourceReport};

/// Tables of runtime and driver calls.
const CALL_TABLES: &[&str] = &["CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"];

/// Rows of a side table buffered before they are appended.
const BATCH: usize = 8192;

/// `name` without the API-version suffixes nsys writes (`cudaMemcpy_v3020`,
/// `cudaLaunchKernel_ptsz_v7000`, `cuMemcpyHtoDAsync_v2`): the entry point people call.
fn without_version(name: &str) -> &str {
    let mut n = name;
    while let Some(i) = n.rfind("_v") {
        let digits = &n[i + 2..];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        n = &n[..i];
    }
    n
}

/// The catalogue op of a call nsys names `name`, if it has one.
fn nsys_call_op(name: &str) -> Option<&'static OpInfo> {
    call_op(without_version(name))
}

struct Load<'a> {
    w: &'a mut Writer,
    file: &'a NsysTrace,
    base_ns: i64,
    threads: HashMap<(i64, i64), String>,
    report: NsysReport,
    skipped: BTreeMap<String, u64>,
    invalid: BTreeMap<&'static str, Invalid>,
    events: u64,
    calls_by_pid: HashMap<u32, u64>,
    first_ns: i64,
    last_ns: i64,
    device_seen: Option<i16>,
    done: &'a mut u64,
    total: u64,
    progress: &'a mut dyn FnMut(Progress),
}

impl Load<'_> {
    fn sq<T>(&self, r: rusqlite::Result<T>) -> Result<T, ImportError> {
        r.map_err(|e| crate::sqlite::classify(&self.file.path, e))
    }

    fn tick(&mut self) {
        *self.done += 1;
        if (*self.done).is_multiple_of(4096) {
            (self.progress)(Progress {
                done: *self.done,
                total: self.total,
            });
        }
    }

    fn bad(&mut self, table: &'static str, rowid: i64, why: String) {
        self.invalid.entry(table).or_default().note(rowid, why);
    }

    /// Start and end in ns since the epoch, when valid.
    fn span(&self, start: Option<i64>, end: Option<i64>) -> Option<(i64, i64)> {
        let start = start?.checked_add(self.base_ns)?;
        let end = end?.checked_add(self.base_ns)?;
        ((0..=causeway_store::MAX_TIMESTAMP_NS).contains(&start)
            && start <= end
            && end <= causeway_store::MAX_TIMESTAMP_NS)
            .then_some((start, end))
    }

    fn seen(&mut self, start: i64, end: i64) {
        self.first_ns = self.first_ns.min(start);
        self.last_ns = self.last_ns.max(end);
    }

    /// pid and tid of a global thread id, when both are possible.
    fn host_ids(global: Option<i64>) -> Option<(u32, u32)> {
        let g = global?;
        let (pid, tid) = (global_pid(g), global_tid(g));
        ((0..=MAX_PID).contains(&pid) && (0..=MAX_PID).contains(&tid))
            .then_some((pid as u32, tid as u32))
    }

    /// The SQL of what each call's device rows say, keyed by (process, correlation id).
    fn launched_sql(&self) -> Option<String> {
        let s = &self.file.schema;
        let mut parts = Vec::new();
        for (table, bytes, kind, grid) in [
            (
                "CUPTI_ACTIVITY_KIND_KERNEL",
                "NULL",
                "NULL",
                "t.gridX * t.gridY * t.gridZ",
            ),
            (
                "CUPTI_ACTIVITY_KIND_MEMCPY",
                "t.bytes",
                "t.copyKind",
                "NULL",
            ),
            ("CUPTI_ACTIVITY_KIND_MEMSET", "t.bytes", "NULL", "NULL"),
            (
                "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                "NULL",
                "NULL",
                "NULL",
            ),
        ] {
            if !s.has_col(table, "correlationId") {
                continue;
            }
            let grid = if s.has_col(table, "gridX")
                && s.has_col(table, "gridY")
                && s.has_col(table, "gridZ")
            {
                grid
            } else {
                "NULL"
            };
            let gpid = s.col(table, "t", "globalPid");
            parts.push(format!(
                "SELECT {gpid} >> 24 AS gp, t.correlationId AS c, {bytes} AS bytes, t.streamId AS stream,
                        t.deviceId AS device, {kind} AS kind, {grid} AS grid
                 FROM \"{table}\" t WHERE t.correlationId IS NOT NULL"
            ));
        }
        if parts.is_empty() {
            return None;
        }
        // A graph launch has many device rows: one row per call (bytes summed).
        Some(format!(
            "SELECT gp, c, sum(bytes) AS bytes, min(stream) AS stream, min(device) AS device,
                    min(kind) AS kind, max(grid) AS grid
             FROM ({}) GROUP BY gp, c",
            parts.join(" UNION ALL ")
        ))
    }

    fn calls(&mut self) -> Result<(), ImportError> {
        let file = self.file;
        let s = &file.schema;
        let launched = self.launched_sql();
        // Runtime and driver calls (some nsys versions export the driver's in a table of its
        // own), in one start-ordered stream: column 0 says which table.
        let mut parts = Vec::new();
        for (i, t) in CALL_TABLES.iter().enumerate() {
            if !s.has(t) {
                continue;
            }
            let corr = s.col(t, "r", "correlationId");
            let class = s.col(t, "r", "eventClass");
            let ret = s.col(t, "r", "returnValue");
            let (join, cols) = match (&launched, s.has_col(t, "correlationId")) {
                (Some(sql), true) => (
                    format!(
                        "LEFT JOIN ({sql}) d ON d.c = r.correlationId
                         AND (d.gp IS NULL OR d.gp = r.globalTid >> 24)"
                    ),
                    "d.bytes, d.stream, d.device, d.kind, d.grid",
                ),
                _ => (String::new(), "NULL, NULL, NULL, NULL, NULL"),
            };
            parts.push(format!(
                "SELECT {i}, r.rowid, r.start, r.end, r.globalTid, {corr}, s.value, {class}, {ret}, {cols}
                 FROM {t} r LEFT JOIN StringIds s ON s.id = r.nameId {join}"
            ));
        }
        if parts.is_empty() {
            return Ok(());
        }
        let sql = format!("{} ORDER BY 3, 1, 2", parts.join(" UNION ALL "));
        let classes: HashMap<i64, String> =
            self.sq(s.labels(&file.conn, "ENUM_NSYS_EVENT_CLASS", EVENT_CLASSES, "label"))?;
        let mut st = self.sq(file.conn.prepare(&sql))?;
        let mut rows = self.sq(st.query([]))?;
        let mut correlations = Vec::new();
        while let Some(r) = self.sq(rows.next())? {
            self.tick();
            self.call(r, &classes, &mut correlations)?;
            if correlations.len() >= BATCH {
                self.w.add_correlations(&correlations)?;
                correlations.clear();
            }
        }
        self.w.add_correlations(&correlations)?;
        Ok(())
    }

    fn call(
        &mut self,
        r: &Row<'_>,
        classes: &HashMap<i64, String>,
        correlations: &mut Vec<Correlation>,
    ) -> Result<(), ImportError> {
        let table = usize::try_from(self.sq(r.get::<_, i64>(0))?)
            .ok()
            .and_then(|i| CALL_TABLES.get(i))
            .copied()
            .unwrap_or(CALL_TABLES[0]);
        let rowid: i64 = self.sq(r.get(1))?;
        // Classes other than the runtime's (0) and the driver's (1) are not calls: 67 repeats
        // a call to carry its backtrace.
        if let Some(class) = self.sq(r.get::<_, Option<i64>>(7))?
            && class != 0
            && class != 1
        {
            let label = classes.get(&class).map(String::as_str).unwrap_or("?");
            crate::skips::tally(
                &mut self.report.not_imported,
                &format!("{table}/eventClass {class} ({label})"),
                1,
            );
            return Ok(());
        }
        self.report.runtime_calls += 1;
        let name: Option<String> = self.sq(r.get(6))?;
        let name = name.unwrap_or_default();
        let Some(op) = nsys_call_op(&name) else {
            crate::skips::tally(&mut self.skipped, without_version(&name), 1);
            return Ok(());
        };
        let span = self.span(self.sq(r.get(2))?, self.sq(r.get(3))?);
        let ids = Self::host_ids(self.sq(r.get(4))?);
        let (Some((start, end)), Some((pid, tid))) = (span, ids) else {
            self.bad(
                table,
                rowid,
                format!("{name} without valid start, end or globalTid"),
            );
            return Ok(());
        };
        self.seen(start, end);
        let copy_kind: Option<i64> = self.sq(r.get(12))?;
        let launched = Launched {
            bytes: self.sq(r.get(9))?,
            stream: self.sq(r.get(10))?,
            device: self.sq(r.get(11))?,
            direction: copy_kind.map(schema::copy_direction),
            grid: self.sq(r.get(13))?,
        };
        let (arg0, arg1) = call_args(op, &launched);
        if let Some(correlation) = self.sq(r.get::<_, Option<i64>>(5))? {
            correlations.push(Correlation {
                seq: self.w.next_seq(),
                pid,
                correlation,
            });
        }
        let ret: Option<i64> = self.sq(r.get(8))?;
        self.w.append(&Event {
            timestamp: start,
            duration: end - start,
            pid,
            tid,
            comm: self
                .threads
                .get(&(i64::from(pid), i64::from(tid)))
                .cloned()
                .unwrap_or_default(),
            op_id: op.id,
            arg0,
            arg1,
            ret_code: ret.and_then(|v| i32::try_from(v).ok()).unwrap_or(0),
            gpu_id: launched
                .device
                .and_then(|d| i16::try_from(d).ok())
                .unwrap_or(0),
            stack_hash: 0,
            cgroup_id: 0,
            rank: None,
        })?;
        self.events += 1;
        *self.calls_by_pid.entry(pid).or_default() += 1;
        Ok(())
    }

    /// The process the export profiled: the one with the most calls (device rows without a
    /// globalPid are its).
    fn main_pid(&self) -> u32 {
        self.calls_by_pid
            .iter()
            .max_by_key(|(p, n)| (**n, std::cmp::Reverse(**p)))
            .map(|(p, _)| *p)
            .unwrap_or(0)
    }

    fn device_rows(&mut self, kind: GpuKind) -> Result<(), ImportError> {
        let table: &'static str = match kind {
            GpuKind::Kernel => "CUPTI_ACTIVITY_KIND_KERNEL",
            GpuKind::Memcpy => "CUPTI_ACTIVITY_KIND_MEMCPY",
            GpuKind::Memset => "CUPTI_ACTIVITY_KIND_MEMSET",
            GpuKind::Sync => "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        };
        let file = self.file;
        let s = &file.schema;
        if !s.has(table) {
            return Ok(());
        }
        let c = |col: &str| s.col(table, "t", col);
        // Columns 7-17: name, bytes, three kinds, grid and block (NULL where not this kind's).
        let (name, join, rest) = match kind {
            GpuKind::Kernel => (
                "n.value".to_string(),
                "LEFT JOIN StringIds n ON n.id = t.demangledName",
                format!(
                    "NULL, NULL, NULL, NULL, {}, {}, {}, {}, {}, {}",
                    c("gridX"),
                    c("gridY"),
                    c("gridZ"),
                    c("blockX"),
                    c("blockY"),
                    c("blockZ")
                ),
            ),
            GpuKind::Memcpy => (
                "NULL".into(),
                "",
                format!(
                    "t.bytes, t.copyKind, {}, {}, NULL, NULL, NULL, NULL, NULL, NULL",
                    c("srcKind"),
                    c("dstKind")
                ),
            ),
            GpuKind::Memset => (
                "NULL".into(),
                "",
                format!(
                    "t.bytes, {}, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
                    c("memKind")
                ),
            ),
            GpuKind::Sync => (
                "NULL".into(),
                "",
                format!(
                    "NULL, {}, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
                    c("syncType")
                ),
            ),
        };
        let sql = format!(
            "SELECT t.rowid, t.start, t.end, t.deviceId, t.streamId, {}, {}, {name}, {rest}
             FROM \"{table}\" t {join} ORDER BY t.start, t.rowid",
            c("correlationId"),
            c("globalPid"),
        );
        let copy_kinds =
            self.sq(s.labels(&file.conn, "ENUM_CUDA_MEMCPY_OPER", MEMCPY_KINDS, "label"))?;
        let mem_kinds = self.sq(s.labels(&file.conn, "ENUM_CUDA_MEM_KIND", MEM_KINDS, "label"))?;
        let sync_types =
            self.sq(s.labels(&file.conn, "ENUM_CUPTI_SYNC_TYPE", SYNC_TYPES, "label"))?;
        let label = |map: &HashMap<i64, String>, k: Option<i64>| {
            k.map(|k| map.get(&k).cloned().unwrap_or_else(|| format!("kind {k}")))
        };
        let main_pid = self.main_pid();
        let mut st = self.sq(file.conn.prepare(&sql))?;
        let mut rows = self.sq(st.query([]))?;
        let mut out = Vec::new();
        while let Some(r) = self.sq(rows.next())? {
            self.tick();
            let rowid: i64 = self.sq(r.get(0))?;
            let span = self.span(self.sq(r.get(1))?, self.sq(r.get(2))?);
            let device = self
                .sq(r.get::<_, Option<i64>>(3))?
                .and_then(|d| i16::try_from(d).ok());
            let (Some((start, end)), Some(device)) = (span, device) else {
                self.bad(
                    table,
                    rowid,
                    format!("a {} without valid start, end or deviceId", kind.as_str()),
                );
                continue;
            };
            self.seen(start, end);
            self.device_seen.get_or_insert(device);
            let pid = self
                .sq(r.get::<_, Option<i64>>(6))?
                .map(global_pid)
                .filter(|p| (0..=MAX_PID).contains(p))
                .map_or(main_pid, |p| p as u32);
            let k1: Option<i64> = self.sq(r.get(9))?;
            let k2: Option<i64> = self.sq(r.get(10))?;
            let k3: Option<i64> = self.sq(r.get(11))?;
            let dims = |a: usize| -> Result<Option<[u32; 3]>, ImportError> {
                let mut v = [0u32; 3];
                for (i, d) in v.iter_mut().enumerate() {
                    let x: Option<i64> = self.sq(r.get(a + i))?;
                    let Some(x) = x.and_then(|x| u32::try_from(x).ok()) else {
                        return Ok(None);
                    };
                    *d = x;
                }
                Ok(Some(v))
            };
            let (grid, block) = (dims(12)?, dims(15)?);
            let (name, raw_name) = match kind {
                GpuKind::Kernel => {
                    let raw: Option<String> = self.sq(r.get(7))?;
                    let raw = raw.unwrap_or_default();
                    (kernel_name(&raw), raw)
                }
                GpuKind::Memcpy => {
                    let what = label(&copy_kinds, k1).unwrap_or_default();
                    let n = match (label(&mem_kinds, k2), label(&mem_kinds, k3)) {
                        (Some(src), Some(dst)) => format!("Memcpy {what} ({src} -> {dst})"),
                        _ => format!("Memcpy {what}"),
                    };
                    (n.clone(), n)
                }
                GpuKind::Memset => {
                    let n = match label(&mem_kinds, k1) {
                        Some(m) => format!("Memset ({m})"),
                        None => "Memset".into(),
                    };
                    (n.clone(), n)
                }
                GpuKind::Sync => {
                    let n = label(&sync_types, k1).unwrap_or_else(|| "Sync".into());
                    (n.clone(), n)
                }
            };
            match kind {
                GpuKind::Kernel => self.report.kernels += 1,
                GpuKind::Memcpy => self.report.memcpys += 1,
                GpuKind::Memset => self.report.memsets += 1,
                GpuKind::Sync => self.report.syncs += 1,
            }
            out.push(GpuActivity {
                pid,
                device,
                stream: self.sq(r.get::<_, Option<i64>>(4))?.unwrap_or(0),
                kind,
                name,
                raw_name,
                start_ns: start,
                end_ns: end,
                bytes: self.sq(r.get(8))?,
                correlation: self.sq(r.get(5))?,
                grid,
                block,
            });
            if out.len() >= BATCH {
                self.w.add_gpu_activity(&out)?;
                out.clear();
            }
        }
        self.w.add_gpu_activity(&out)?;
        Ok(())
    }

    /// NVTX ranges and OS runtime calls, in one start-ordered stream so that each range's depth
    /// counts every range open on its thread.
    fn ranges(&mut self) -> Result<(), ImportError> {
        let file = self.file;
        let s = &file.schema;
        let mut parts = Vec::new();
        let mut domains: HashMap<i64, String> = HashMap::new();
        if s.has("NVTX_EVENTS") {
            const T: &str = "NVTX_EVENTS";
            let text = s.col(T, "n", "text");
            let text_id = s.col(T, "n", "textId");
            let domain = s.col(T, "n", "domainId");
            let name = format!("coalesce({text}, x.value)");
            let from = format!("{T} n LEFT JOIN StringIds x ON x.id = {text_id}");
            // Domain names: the text of each domain's creation.
            let mut st = self.sq(file.conn.prepare(&format!(
                "SELECT {domain}, {name} FROM {from} WHERE n.eventType = {NVTX_DOMAIN_CREATE}"
            )))?;
            let found: Vec<(Option<i64>, Option<String>)> = self.sq(st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|rows| rows.collect()))?;
            domains.extend(
                found
                    .into_iter()
                    .filter_map(|(d, n)| Some((d?, n.filter(|n| !n.is_empty())?))),
            );
            // Rows that are not ranges, and ranges never closed, are counted.
            let types =
                self.sq(s.labels(&file.conn, "ENUM_NSYS_EVENT_TYPE", NVTX_TYPES, "name"))?;
            let mut st = self.sq(file.conn.prepare(&format!(
                "SELECT eventType, n.end IS NULL, count(*) FROM {T} n
                 WHERE eventType NOT IN ({NVTX_PUSH_POP}, {NVTX_START_END}) OR n.end IS NULL
                 GROUP BY 1, 2"
            )))?;
            let counts: Vec<(Option<i64>, bool, i64)> = self.sq(st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .and_then(|rows| rows.collect()))?;
            for (ty, open, n) in counts {
                let is_range = matches!(ty, Some(NVTX_PUSH_POP | NVTX_START_END));
                let what = ty
                    .and_then(|t| types.get(&t).cloned())
                    .unwrap_or_else(|| format!("eventType {}", ty.unwrap_or(-1)));
                let key = if is_range && open {
                    format!("{T}/{what} without an end")
                } else {
                    format!("{T}/{what}")
                };
                *self.done += n as u64;
                crate::skips::tally(&mut self.report.not_imported, &key, n as u64);
            }
            parts.push(format!(
                "SELECT 0 AS k, n.rowid, n.start, n.end, n.globalTid, {name}, {domain},
                   n.eventType = {NVTX_PUSH_POP} FROM {from}
                 WHERE n.eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END}) AND n.end IS NOT NULL"
            ));
        }
        if s.has("OSRT_API") {
            parts.push(
                "SELECT 1 AS k, o.rowid, o.start, o.end, o.globalTid, x.value, NULL, 0
                 FROM OSRT_API o LEFT JOIN StringIds x ON x.id = o.nameId"
                    .to_string(),
            );
        }
        if parts.is_empty() {
            return Ok(());
        }
        let sql = format!("{} ORDER BY 3, 1, 2", parts.join(" UNION ALL "));
        let mut st = self.sq(file.conn.prepare(&sql))?;
        let mut rows = self.sq(st.query([]))?;
        let mut depths = Depths::default();
        let mut settled = Vec::new();
        let mut steps = AnnotationSteps::default();
        while let Some(r) = self.sq(rows.next())? {
            self.tick();
            let nvtx = self.sq(r.get::<_, i64>(0))? == 0;
            let (table, kind) = if nvtx {
                ("NVTX_EVENTS", "nvtx")
            } else {
                ("OSRT_API", "osrt")
            };
            let rowid: i64 = self.sq(r.get(1))?;
            let span = self.span(self.sq(r.get(2))?, self.sq(r.get(3))?);
            let ids = Self::host_ids(self.sq(r.get(4))?);
            let (Some((start, end)), Some((pid, tid))) = (span, ids) else {
                self.bad(
                    table,
                    rowid,
                    format!("a {kind} range without valid start, end or globalTid"),
                );
                continue;
            };
            self.seen(start, end);
            let text: Option<String> = self.sq(r.get(5))?;
            let text = text.unwrap_or_default();
            let domain: Option<i64> = self.sq(r.get(6))?;
            let name = match domain.and_then(|d| domains.get(&d)) {
                Some(d) => format!("{d}:{text}"),
                None => text.clone(),
            };
            if nvtx {
                self.report.nvtx_ranges += 1;
                // Push/pop ranges nest on their thread, as the collector's NVTX steps do;
                // torch.profiler's `ProfilerStep#N` emitted as NVTX is one of them.
                if self.sq(r.get::<_, bool>(7))? {
                    steps.push(Range {
                        pid,
                        tid,
                        name: text,
                        kind,
                        start_ns: start,
                        end_ns: end,
                        depth: 0,
                    });
                }
            } else {
                self.report.osrt_ranges += 1;
            }
            depths.push(
                Range {
                    pid,
                    tid,
                    name,
                    kind,
                    start_ns: start,
                    end_ns: end,
                    depth: 0,
                },
                &mut settled,
            );
            if settled.len() >= BATCH {
                self.w.add_ranges(&settled)?;
                settled.clear();
            }
        }
        depths.finish(&mut settled);
        self.w.add_ranges(&settled)?;
        let steps = steps.steps();
        self.w.add_steps(&steps)?;
        self.report.steps = steps.len() as u64;
        self.report.ranges_out_of_order = depths.out_of_order;
        Ok(())
    }
}

impl NsysTrace {
    /// Maps every table the import reads into `w` under the export's node, then its drops,
    /// session and processes.
    pub fn copy_into(
        &self,
        w: &mut Writer,
        opts: &ImportOptions,
        done: &mut u64,
        total: u64,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<SourceReport, ImportError> {
        let sq = |e| crate::sqlite::classify(&self.path, e);
        let node = self.default_node(opts);
        let file_name = self
            .path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let origin = format!("imported:{file_name}");
        w.set_node(&node, &origin, "")?;
        let threads = self.schema.thread_names(&self.conn).map_err(sq)?;
        let processes = self
            .schema
            .process_names(&self.conn, &threads)
            .map_err(sq)?;
        let mut load = Load {
            w,
            file: self,
            base_ns: self.session_start.unwrap_or(0),
            threads,
            report: NsysReport {
                version: self.meta_value("EXPORT_PRODUCT_VERSION"),
                schema_version: self.meta_value("EXPORT_SCHEMA_VERSION"),
                session_start_ns: self.session_start,
                tables: self.rows.clone(),
                not_imported: self.unread.clone(),
                ..NsysReport::default()
            },
            skipped: BTreeMap::new(),
            invalid: BTreeMap::new(),
            events: 0,
            calls_by_pid: HashMap::new(),
            first_ns: i64::MAX,
            last_ns: i64::MIN,
            device_seen: None,
            done,
            total,
            progress,
        };
        load.calls()?;
        for kind in [
            GpuKind::Kernel,
            GpuKind::Memcpy,
            GpuKind::Memset,
            GpuKind::Sync,
        ] {
            load.device_rows(kind)?;
        }
        load.ranges()?;
        load.w.flush()?;
        let main_pid = load.main_pid();
        let Load {
            w,
            skipped,
            invalid,
            report,
            events,
            first_ns,
            last_ns,
            device_seen,
            done,
            total,
            progress,
            ..
        } = load;
        progress(Progress { done: *done, total });
        let mut out = SourceReport {
            path: self.path.clone(),
            reference_version: self.tool_version(),
            nodes: vec![node.clone()],
            events,
            ..SourceReport::default()
        };
        for (table, inv) in &invalid {
            out.invalid += inv.store(w, &origin, |rowid| format!("{table} rowid {rowid}"))?;
        }
        out.skipped += crate::skips::record_skipped(w, &origin, &skipped)?;
        if first_ns <= last_ns {
            let gpu_model = self
                .schema
                .gpu_model(&self.conn, device_seen.map(i64::from), main_pid)
                .map_err(sq)?
                .unwrap_or_default();
            let session = w.begin_session(&SessionInfo {
                started_ns: first_ns,
                hostname: self.host.clone().unwrap_or_default(),
                gpu_model,
                tool_version: out.reference_version.clone(),
                origin: origin.clone(),
                ..SessionInfo::default()
            })?;
            w.end_session(session, last_ns)?;
            out.sessions = 1;
        }
        for mut p in w.processes_in_events(&node)? {
            if let Some(name) = processes.get(&i64::from(p.pid)) {
                p.comm = name.clone();
            }
            w.upsert_process_of(&node, &p)?;
            out.processes += 1;
        }
        out.nsys = Some(report);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nsys_call_names_lose_their_api_version() {
        let name = |n: &str| nsys_call_op(n).map(|o| o.name);
        assert_eq!(name("cudaMemcpy_v3020"), Some("cudaMemcpy"));
        assert_eq!(name("cudaLaunchKernel_v7000"), Some("cudaLaunchKernel"));
        assert_eq!(
            name("cudaLaunchKernel_ptsz_v7000"),
            Some("cudaLaunchKernel")
        );
        assert_eq!(name("cudaMemcpyAsync_ptsz_v7000"), Some("cudaMemcpyAsync"));
        assert_eq!(name("cuMemcpyHtoDAsync_v2"), Some("cuMemcpyAsync"));
        assert_eq!(name("cuMemAlloc_v2"), Some("cuMemAlloc"));
        assert_eq!(
            name("cudaDeviceSynchronize_v3020"),
            Some("cudaDeviceSynchronize")
        );
        assert_eq!(name("cudaHostRegister_v4000"), None);
        assert_eq!(
            without_version("cudaHostRegister_v4000"),
            "cudaHostRegister"
        );
        assert_eq!(
            without_version("cuModuleGetLoadingMode"),
            "cuModuleGetLoadingMode"
        );
        assert_eq!(without_version("f_v"), "f_v");
    }

    #[test]
    fn copies_carry_bytes_and_direction_launches_their_grid() {
        let l = Launched {
            bytes: Some(4096),
            stream: Some(7),
            direction: Some(schema::copy_direction(2)),
            grid: Some(96),
            ..Launched::default()
        };
        let op = |n: &str| nsys_call_op(n).unwrap();
        assert_eq!(call_args(op("cudaMemcpy_v3020"), &l), (4096, 2));
        assert_eq!(call_args(op("cudaStreamSynchronize_v3020"), &l), (7, 0));
        assert_eq!(call_args(op("cudaLaunchKernel_v7000"), &l), (0, 96));
    }
}
