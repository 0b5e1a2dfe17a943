//! Writing what a profiler recorded beside the host's calls (schema version 13): the device's own
//! timeline (`gpu_activity`), host ranges (`ranges`), training steps (`steps`) and the
//! correlation ids of runtime calls (`correlations`), each appended in bulk (the large tables as
//! Arrow batches: binding values row by row cost more than DuckDB's own append).

use std::sync::Arc;

use duckdb::arrow::array::{
    ArrayRef, Int16Array, Int64Array, StringArray, UInt16Array, UInt32Array,
};
use duckdb::arrow::datatypes::{Field, Schema};
use duckdb::arrow::record_batch::RecordBatch;
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
    /// Opens one transaction for the rows the next `add_*` calls append (until
    /// [`Writer::commit_bulk`]): DuckDB writes each full row group of a large transaction to the
    /// file as it fills, where a commit per batch leaves partial row groups that every
    /// checkpoint scans and writes again.
    pub fn begin_bulk(&mut self) -> Result<()> {
        self.conn()
            .execute_batch("BEGIN TRANSACTION")
            .ctx(self.path(), "starting a bulk transaction")
    }

    /// Commits the transaction [`Writer::begin_bulk`] opened; rolls it back if that fails.
    pub fn commit_bulk(&mut self) -> Result<()> {
        let committed = self
            .conn()
            .execute_batch("COMMIT")
            .ctx(self.path(), "committing a bulk transaction");
        if committed.is_err() {
            let _ = self.conn().execute_batch("ROLLBACK");
        }
        committed
    }

    /// Rolls back the transaction [`Writer::begin_bulk`] opened (after a failed import).
    pub fn rollback_bulk(&mut self) -> Result<()> {
        self.conn()
            .execute_batch("ROLLBACK")
            .ctx(self.path(), "rolling back a bulk transaction")
    }

    /// Appends rows of the device's timeline, stamped with the writer's node.
    pub fn add_gpu_activity(&mut self, rows: &[GpuActivity]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let dim = |d: fn(&GpuActivity) -> Option<[u32; 3]>, i: usize| -> ArrayRef {
            Arc::new(UInt32Array::from_iter(
                rows.iter().map(|r| d(r).map(|v| v[i])),
            ))
        };
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("node", self.node_column(rows.len())),
            (
                "pid",
                Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.pid))),
            ),
            (
                "device",
                Arc::new(Int16Array::from_iter_values(rows.iter().map(|r| r.device))),
            ),
            (
                "stream",
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.stream))),
            ),
            (
                "kind",
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| r.kind.as_str()),
                )),
            ),
            (
                "name",
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.name))),
            ),
            (
                "raw_name",
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| &r.raw_name),
                )),
            ),
            (
                "start_ns",
                Arc::new(Int64Array::from_iter_values(
                    rows.iter().map(|r| r.start_ns),
                )),
            ),
            (
                "end_ns",
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.end_ns))),
            ),
            (
                "bytes",
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.bytes))),
            ),
            (
                "correlation",
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.correlation))),
            ),
            ("grid_x", dim(|r| r.grid, 0)),
            ("grid_y", dim(|r| r.grid, 1)),
            ("grid_z", dim(|r| r.grid, 2)),
            ("block_x", dim(|r| r.block, 0)),
            ("block_y", dim(|r| r.block, 1)),
            ("block_z", dim(|r| r.block, 2)),
        ];
        self.append_batch("gpu_activity", columns, "writing device activity")
    }

    /// Appends host ranges, stamped with the writer's node.
    pub fn add_ranges(&mut self, rows: &[Range]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("node", self.node_column(rows.len())),
            (
                "pid",
                Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.pid))),
            ),
            (
                "tid",
                Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.tid))),
            ),
            (
                "name",
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.name))),
            ),
            (
                "kind",
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.kind))),
            ),
            (
                "start_ns",
                Arc::new(Int64Array::from_iter_values(
                    rows.iter().map(|r| r.start_ns),
                )),
            ),
            (
                "end_ns",
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.end_ns))),
            ),
            (
                "depth",
                Arc::new(UInt16Array::from_iter_values(rows.iter().map(|r| r.depth))),
            ),
        ];
        self.append_batch("ranges", columns, "writing ranges")
    }

    /// The writer's node, `n` times.
    fn node_column(&self, n: usize) -> ArrayRef {
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
            self.node(),
            n,
        )))
    }

    /// Appends one Arrow batch of `columns` (the table's, in order) to `table`.
    fn append_batch(
        &mut self,
        table: &str,
        columns: Vec<(&str, ArrayRef)>,
        what: &'static str,
    ) -> Result<()> {
        let (conn, path) = (self.conn(), self.path());
        let schema = Schema::new(
            columns
                .iter()
                .map(|(name, a)| Field::new(*name, a.data_type().clone(), a.null_count() > 0))
                .collect::<Vec<_>>(),
        );
        let arrays = columns.into_iter().map(|(_, a)| a).collect();
        let batch = RecordBatch::try_new(Arc::new(schema), arrays).map_err(|e| {
            crate::error::StoreError::Query {
                message: format!("building a {table} batch: {e}"),
                hint: "this is a bug in causeway; please report it".into(),
            }
        })?;
        let mut app = conn.appender(table).ctx(path, "opening an appender")?;
        app.append_record_batch(batch).ctx(path, what)?;
        app.flush().ctx(path, what)
    }

    /// Appends training steps, stamped with the writer's node.
    pub fn add_steps(&mut self, rows: &[Step]) -> Result<()> {
        let node = self.node().to_string();
        self.add_steps_on(&node, rows)
    }

    /// Appends training steps stamped with `node` (a node the store holds).
    pub fn add_steps_on(&mut self, node: &str, rows: &[Step]) -> Result<()> {
        let (conn, path) = (self.conn(), self.path());
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
