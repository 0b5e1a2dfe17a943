//! Writing what a profiler recorded beside the host's calls (schema version 13): the device's own
//! timeline (`gpu_activity`), host ranges (`ranges`), training steps (`steps`) and the
//! correlation ids of runtime calls (`correlations`), each appended in bulk.

use duckdb::params;

use crate::error::{DuckContext, Result};
use crate::writer::Writer;

/// What one row of the device's timeline is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuKind {
    /// A kernel.
    Kernel,
    /// A copy (host to device, device to host, device to device, peer).
    Memcpy,
    /// A memset.
    Memset,
    /// A synchronisation the device recorded (stream or event wait).
    Sync,
}

impl GpuKind {
    /// The name stored in `gpu_activity.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuKind::Kernel => "kernel",
            GpuKind::Memcpy => "memcpy",
            GpuKind::Memset => "memset",
            GpuKind::Sync => "sync",
        }
    }
}

/// One kernel, copy, memset or sync as the device ran it (`gpu_activity`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuActivity {
    /// The launching process.
    pub pid: u32,
    /// CUDA device ordinal.
    pub device: i16,
    /// Stream id as the source numbers it.
    pub stream: i64,
    /// Kernel, copy, memset or sync.
    pub kind: GpuKind,
    /// Kernels: demangled without parameters; others as the source names them.
    pub name: String,
    /// The name as the source wrote it.
    pub raw_name: String,
    /// Start on the device (ns since the Unix epoch).
    pub start_ns: i64,
    /// End on the device (ns since the Unix epoch).
    pub end_ns: i64,
    /// Bytes copied or set.
    pub bytes: Option<i64>,
    /// Correlation id of the launching call.
    pub correlation: Option<i64>,
    /// Grid of a kernel launch (x, y, z).
    pub grid: Option<[u32; 3]>,
    /// Block of a kernel launch (x, y, z).
    pub block: Option<[u32; 3]>,
}

/// One host range: a CPU op, an annotation, an NVTX range or a Python function (`ranges`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The op or annotation.
    pub name: String,
    /// cpu_op, user_annotation, nvtx or python_function.
    pub kind: &'static str,
    /// Opened (ns since the Unix epoch).
    pub start_ns: i64,
    /// Closed (ns since the Unix epoch).
    pub end_ns: i64,
    /// 0 = outermost on its thread.
    pub depth: u16,
}

/// One training step (`steps`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The step's index.
    pub step: i64,
    /// Began (ns since the Unix epoch).
    pub start_ns: i64,
    /// Ended (ns since the Unix epoch).
    pub end_ns: i64,
    /// profiler, nvtx or inferred.
    pub source: &'static str,
}

/// The correlation id of one stored runtime/driver call (`correlations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Correlation {
    /// `events.seq` of the call on the writer's node.
    pub seq: u64,
    /// The calling process.
    pub pid: u32,
    /// The call's correlation id.
    pub correlation: i64,
}

impl Writer {
    /// Appends rows of the device's timeline, stamped with the writer's node.
    pub fn add_gpu_activity(&mut self, rows: &[GpuActivity]) -> Result<()> {
        let (conn, path, node) = (self.conn(), self.path(), self.node());
        let mut app = conn
            .appender("gpu_activity")
            .ctx(path, "opening the gpu_activity appender")?;
        for r in rows {
            let g = |d: Option<[u32; 3]>, i: usize| d.map(|v| v[i]);
            app.append_row(params![
                node,
                r.pid,
                r.device,
                r.stream,
                r.kind.as_str(),
                r.name,
                r.raw_name,
                r.start_ns,
                r.end_ns,
                r.bytes,
                r.correlation,
                g(r.grid, 0),
                g(r.grid, 1),
                g(r.grid, 2),
                g(r.block, 0),
                g(r.block, 1),
                g(r.block, 2),
            ])
            .ctx(path, "writing device activity")?;
        }
        app.flush().ctx(path, "flushing device activity")
    }

    /// Appends host ranges, stamped with the writer's node.
    pub fn add_ranges(&mut self, rows: &[Range]) -> Result<()> {
        let (conn, path, node) = (self.conn(), self.path(), self.node());
        let mut app = conn
            .appender("ranges")
            .ctx(path, "opening the ranges appender")?;
        for r in rows {
            app.append_row(params![
                node, r.pid, r.tid, r.name, r.kind, r.start_ns, r.end_ns, r.depth
            ])
            .ctx(path, "writing ranges")?;
        }
        app.flush().ctx(path, "flushing ranges")
    }

    /// Appends training steps, stamped with the writer's node.
    pub fn add_steps(&mut self, rows: &[Step]) -> Result<()> {
        let (conn, path, node) = (self.conn(), self.path(), self.node());
        let mut app = conn
            .appender("steps")
            .ctx(path, "opening the steps appender")?;
        for r in rows {
            app.append_row(params![
                node, r.pid, r.tid, r.step, r.start_ns, r.end_ns, r.source
            ])
            .ctx(path, "writing steps")?;
        }
        app.flush().ctx(path, "flushing steps")
    }

    /// Appends the correlation ids of stored calls, stamped with the writer's node.
    pub fn add_correlations(&mut self, rows: &[Correlation]) -> Result<()> {
        let (conn, path, node) = (self.conn(), self.path(), self.node());
        let mut app = conn
            .appender("correlations")
            .ctx(path, "opening the correlations appender")?;
        for r in rows {
            app.append_row(params![node, r.seq, r.pid, r.correlation])
                .ctx(path, "writing correlations")?;
        }
        app.flush().ctx(path, "flushing correlations")
    }
}
