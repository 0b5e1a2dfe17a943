//! Recording what the collector's overhead controller measured and decided (schema version 2):
//! calibrated probe costs, probe-mode switches, per-process overhead windows, and (version 4)
//! the attached time of sampled ops (version 6: and the part of the detached time spent
//! switching), and (version 5) their probes' cost measured in situ.

use duckdb::params;

use crate::error::{DuckContext, Result};
use crate::writer::Writer;

/// Calibrated cost of one probed call in one mode.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeCost {
    /// full, aggregate, entry_only, bare_pair or bare_entry.
    pub mode: String,
    /// Kind of the probed function's first instruction: push, nop, endbr64 or other.
    pub first_insn: String,
    /// ns the traced thread spends per call in that mode.
    pub ns_per_call: f64,
    /// How the figure was obtained.
    pub method: String,
}

/// One change of an op's probe mode.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModeSwitch {
    /// When (ns since the Unix epoch).
    pub ts_ns: i64,
    /// Catalogue op id.
    pub op_id: u16,
    /// The new mode.
    pub mode: String,
    /// The mode before.
    pub previous: String,
    /// forced, over_budget, under_budget, in_situ_check (sampled to measure its cost on the job)
    /// or checked (back after that check).
    pub reason: String,
    /// Estimated overhead of the worst traced process when switching (%).
    pub overhead_pct: f64,
}

/// Estimated probe cost against one process's CPU time in one controller window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OverheadWindow {
    /// Process id.
    pub pid: u32,
    /// Window start (ns).
    pub window_start_ns: i64,
    /// Window end (ns).
    pub window_end_ns: i64,
    /// CPU time of the process in the window (ns).
    pub cpu_ns: u64,
    /// Estimated time in probes (ns).
    pub probe_ns: u64,
    /// Probe hits in the window: calls counted, and driver calls the CUDA runtime made itself.
    pub calls: u64,
    /// Budget in force (%).
    pub budget_pct: f64,
}

/// What the estimated counts of one sampled op in one counts window rest on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampledWindow {
    /// Catalogue op id.
    pub op_id: u16,
    /// Window start (ns).
    pub window_start_ns: i64,
    /// Window end (ns).
    pub window_end_ns: i64,
    /// Time the op's probes were attached in the window (ns).
    pub observed_ns: u64,
    /// Calls counted while attached (all processes).
    pub counted: u64,
    /// Of the detached time, the part spent attaching or detaching the links (ns).
    pub switching_ns: u64,
}

/// The in-situ cost of one sampled op's probes, measured so far (cumulative).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct InSituRow {
    /// When measured (ns).
    pub ts_ns: i64,
    /// Catalogue op id.
    pub op_id: u16,
    /// The process measured.
    pub pid: u32,
    /// Time measured with the probes attached (ns).
    pub attached_ns: i64,
    /// Time measured with the probes detached (ns).
    pub detached_ns: i64,
    /// Progress calls per second while attached.
    pub attached_rate: f64,
    /// Progress calls per second while detached.
    pub detached_rate: f64,
    /// Probe hits of the op while attached.
    pub hits: u64,
    /// 1 - attached_rate / detached_rate.
    pub slowdown: f64,
    /// Its standard error.
    pub slowdown_se: f64,
    /// Time the job lost per probe hit (ns).
    pub lost_ns_per_hit: f64,
    /// The calibrated full-mode cost per call (ns).
    pub calibrated_ns_per_hit: f64,
    /// What the controller scales the op's costs by.
    pub factor: f64,
}

impl Writer {
    /// Stores the calibrated probe costs (a later calibration of the same mode replaces it).
    pub fn record_probe_costs(&mut self, costs: &[ProbeCost]) -> Result<()> {
        let (conn, path, node) = (self.conn(), self.path(), self.node().to_string());
        let mut st = conn
            .prepare("INSERT OR REPLACE INTO probe_costs VALUES (?, ?, ?, ?, ?)")
            .ctx(path, "preparing probe costs")?;
        for c in costs {
            st.execute(params![node, c.mode, c.first_insn, c.ns_per_call, c.method])
                .ctx(path, "recording probe costs")?;
        }
        Ok(())
    }

    /// Stores probe-mode switches.
    pub fn record_mode_switches(&mut self, switches: &[ModeSwitch]) -> Result<()> {
        let (conn, path, node) = (self.conn(), self.path(), self.node().to_string());
        let mut st = conn
            .prepare("INSERT INTO probe_modes VALUES (?, ?, ?, ?, ?, ?, ?)")
            .ctx(path, "preparing mode switches")?;
        for s in switches {
            st.execute(params![
                node,
                s.ts_ns,
                s.op_id,
                s.mode,
                s.previous,
                s.reason,
                s.overhead_pct
            ])
            .ctx(path, "recording a mode switch")?;
        }
        Ok(())
    }

    /// Stores overhead windows.
    pub fn record_overhead(&mut self, rows: &[OverheadWindow]) -> Result<()> {
        let (conn, path, node) = (self.conn(), self.path(), self.node().to_string());
        let mut app = conn
            .appender("probe_overhead")
            .ctx(path, "opening the probe_overhead appender")?;
        for r in rows {
            app.append_row(params![
                node,
                r.pid,
                r.window_start_ns,
                r.window_end_ns,
                r.cpu_ns,
                r.probe_ns,
                r.calls,
                r.budget_pct
            ])
            .ctx(path, "recording probe overhead")?;
        }
        app.flush().ctx(path, "flushing probe overhead")?;
        Ok(())
    }

    /// Stores the attached time of sampled ops per counts window.
    pub fn record_sampled(&mut self, rows: &[SampledWindow]) -> Result<()> {
        let (conn, path, node) = (self.conn(), self.path(), self.node().to_string());
        let mut app = conn
            .appender("probe_sampling")
            .ctx(path, "opening the probe_sampling appender")?;
        for r in rows {
            app.append_row(params![
                node,
                r.op_id,
                r.window_start_ns,
                r.window_end_ns,
                r.observed_ns,
                r.counted,
                r.switching_ns
            ])
            .ctx(path, "recording a sampled window")?;
        }
        app.flush().ctx(path, "flushing sampled windows")?;
        Ok(())
    }

    /// Stores in-situ measurements of sampled ops' probe costs.
    pub fn record_in_situ(&mut self, rows: &[InSituRow]) -> Result<()> {
        let (conn, path, node) = (self.conn(), self.path(), self.node().to_string());
        let mut app = conn
            .appender("probe_in_situ")
            .ctx(path, "opening the probe_in_situ appender")?;
        for r in rows {
            app.append_row(params![
                node,
                r.ts_ns,
                r.op_id,
                r.pid,
                r.attached_ns,
                r.detached_ns,
                r.attached_rate,
                r.detached_rate,
                r.hits,
                r.slowdown,
                r.slowdown_se,
                r.lost_ns_per_hit,
                r.calibrated_ns_per_hit,
                r.factor
            ])
            .ctx(path, "recording an in-situ measurement")?;
        }
        app.flush().ctx(path, "flushing in-situ measurements")?;
        Ok(())
    }
}

/// When tracing began for one process and library (`library_attach`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LibraryAttach {
    /// The process.
    pub pid: u32,
    /// The file whose probes were attached.
    pub library: String,
    /// before_start, held, hold_timeout, mapped, rescan or running.
    pub how: &'static str,
    /// When the process started (ns), where it was running before the trace.
    pub process_start_ns: Option<i64>,
    /// When it mapped or exec'd the file (ns), where seen.
    pub mapped_ns: Option<i64>,
    /// When the probes were attached (ns).
    pub attached_ns: i64,
    /// No call of the process into the library can be missing before `attached_ns`.
    pub complete: bool,
}

impl Writer {
    /// Records when tracing began for processes and libraries.
    pub fn record_library_attach(&mut self, rows: &[LibraryAttach]) -> Result<()> {
        let (conn, path, node) = (self.conn(), self.path(), self.node().to_string());
        let mut app = conn
            .appender("library_attach")
            .ctx(path, "opening the library_attach appender")?;
        for r in rows {
            app.append_row(params![
                node,
                r.pid,
                r.library,
                r.how,
                r.process_start_ns,
                r.mapped_ns,
                r.attached_ns,
                r.complete
            ])
            .ctx(path, "recording a library attach")?;
        }
        app.flush().ctx(path, "flushing library attaches")?;
        Ok(())
    }
}

/// The name of the kernel whose host stub one process launched from one address (`kernels`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KernelName {
    /// The launching process.
    pub pid: u32,
    /// The stub's address (events.arg0 of the launches).
    pub address: i64,
    /// One per (module, symbol).
    pub kernel_id: u32,
    /// Demangled, without parameters.
    pub name: String,
    /// The raw symbol.
    pub symbol: String,
    /// File name of the module holding the stub.
    pub module: String,
}

/// A task that is not traced but took a traced thread's CPU (`tasks`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TaskName {
    /// Thread id (sched_switch arg0).
    pub tid: u32,
    /// Its process.
    pub pid: u32,
    /// Its thread name.
    pub comm: String,
    /// When it was first seen (Unix ns).
    pub first_seen_ns: i64,
}

impl Writer {
    /// Records the names of tasks that are not traced.
    pub fn record_tasks(&mut self, rows: &[TaskName]) -> Result<()> {
        let (conn, path, node) = (self.conn(), self.path(), self.node().to_string());
        let mut app = conn
            .appender("tasks")
            .ctx(path, "opening the tasks appender")?;
        for r in rows {
            app.append_row(params![
                node,
                r.tid,
                r.pid,
                crate::sanitize::sanitize(&r.comm),
                r.first_seen_ns
            ])
            .ctx(path, "recording a task name")?;
        }
        app.flush().ctx(path, "flushing task names")?;
        Ok(())
    }

    /// Records kernel names.
    pub fn record_kernels(&mut self, rows: &[KernelName]) -> Result<()> {
        let (conn, path, node) = (self.conn(), self.path(), self.node().to_string());
        let mut app = conn
            .appender("kernels")
            .ctx(path, "opening the kernels appender")?;
        for r in rows {
            app.append_row(params![
                node,
                r.pid,
                r.address,
                r.kernel_id,
                r.name,
                r.symbol,
                r.module
            ])
            .ctx(path, "recording a kernel name")?;
        }
        app.flush().ctx(path, "flushing kernel names")?;
        Ok(())
    }
}
