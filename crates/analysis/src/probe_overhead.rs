//! What causeway's own probes cost the traced processes, for `stats`: the overhead controller's
//! per-process windows (estimated probe time against CPU time), its budget, the probe-mode
//! switches that explain why some calls have no stored event or no duration, the calibrated
//! per-call costs, and sampled ops' costs measured on the job itself. Absent from traces recorded without the controller (imports, schema 1).

use std::collections::BTreeMap;

use causeway_store::duckdb;
use causeway_store::{Reader, StoreError};
use serde::Serialize;

use crate::base::errors::duck;
use crate::window::Window;

/// Switches listed at most (the total is given).
pub const MAX_SWITCHES: usize = 20;

/// One change of an op's probe mode.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModeSwitch {
    /// When (ns since the Unix epoch).
    pub ts_ns: i64,
    /// Op name.
    pub op: String,
    /// Mode before.
    pub from: String,
    /// Mode after: full, aggregate, entry_only or sampled.
    pub to: String,
    /// forced, over_budget, under_budget, in_situ_check (sampled to measure its cost on the job)
    /// or checked (back after that check).
    pub reason: String,
    /// Estimated overhead of the worst traced process at the switch (%).
    pub overhead_pct: f64,
}

/// What a sampled op's probes cost the job, measured on it (the collector's last measurement
/// up to the window's end; schema 5).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct InSitu {
    /// Op name.
    pub op: String,
    /// The process measured (the most probe hits of the op).
    pub pid: u32,
    /// Share of the job's progress lost while the op's probes were attached.
    pub slowdown: f64,
    /// Its standard error.
    pub slowdown_se: f64,
    /// Time the job lost per probe hit (ns).
    pub lost_ns_per_hit: f64,
    /// The calibrated full-mode cost per call (ns).
    pub calibrated_ns_per_hit: f64,
    /// What the controller scaled the op's costs by (1: the calibration held).
    pub factor: f64,
    /// Time measured with the probes attached (ns).
    pub attached_ns: i64,
}

/// The probes' estimated cost in the window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Overhead {
    /// `--overhead-budget` (% of each traced process's CPU time).
    pub budget_pct: f64,
    /// Estimated probe time over the CPU time of the traced processes in the window (%).
    pub estimated_pct: f64,
    /// The worst single controller window of one process (%).
    pub peak_pct: f64,
    /// Estimated probe time (ns).
    pub probe_ns: u64,
    /// CPU time of the traced processes with probed calls (ns).
    pub cpu_ns: u64,
    /// Calibrated cost of one call in full mode, per kind of first instruction (ns).
    pub full_ns_per_call: BTreeMap<String, f64>,
    /// Sampled ops' probe costs measured on the job, by op.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub in_situ: Vec<InSitu>,
    /// Mode switches up to the window's end, oldest first (at most [`MAX_SWITCHES`]).
    pub switches: Vec<ModeSwitch>,
    /// Mode switches up to the window's end.
    pub switches_total: usize,
}

const WINDOWS_SQL: &str = "
SELECT coalesce((CASE WHEN sum(probe_ns) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(probe_ns) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(probe_ns) END), 0)::BIGINT, coalesce((CASE WHEN sum(cpu_ns) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(cpu_ns) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(cpu_ns) END), 0)::BIGINT,
       coalesce(max(probe_ns::DOUBLE / greatest(cpu_ns, probe_ns, 1)), 0) * 100,
       coalesce(max(budget_pct), 0)::DOUBLE, count(*)::BIGINT
FROM probe_overhead
WHERE window_end_ns >= ? AND window_start_ns <= ?
  AND (?::BIGINT < 0 OR pid = ?::BIGINT)
  AND (?::VARCHAR = '' OR node = ?::VARCHAR)";

const SWITCHES_SQL: &str = "
SELECT m.ts_ns, coalesce(o.op, 'op' || m.op_id::VARCHAR), m.previous, m.mode, m.reason, m.overhead_pct
FROM probe_modes m LEFT JOIN ops o ON o.op_id = m.op_id
WHERE m.ts_ns <= ? AND (?::VARCHAR = '' OR m.node = ?::VARCHAR)
ORDER BY m.ts_ns, m.op_id";

const COSTS_SQL: &str = "
SELECT first_insn, max(ns_per_call)::DOUBLE FROM probe_costs
WHERE mode = 'full' AND (?::VARCHAR = '' OR node = ?::VARCHAR)
GROUP BY first_insn ORDER BY first_insn";

const IN_SITU_SQL: &str = "
SELECT coalesce(o.op, 'op' || p.op_id::VARCHAR), p.pid, p.slowdown, p.slowdown_se,
       p.lost_ns_per_hit, p.calibrated_ns_per_hit, p.factor, p.attached_ns
FROM probe_in_situ p LEFT JOIN ops o ON o.op_id = p.op_id
WHERE p.ts_ns <= ? AND (?::VARCHAR = '' OR p.node = ?::VARCHAR)
QUALIFY row_number() OVER (PARTITION BY p.node, p.op_id ORDER BY p.ts_ns DESC) = 1
ORDER BY 1, p.node";

/// The overhead in `window` (pid < 0: every process, node '': every node); None when the trace
/// has no controller data.
pub fn overhead(
    r: &Reader,
    window: &Window,
    pid: i64,
    node: &str,
) -> Result<Option<Overhead>, StoreError> {
    if r.schema_version() < 2 {
        return Ok(None);
    }
    let (probe_ns, cpu_ns, peak_pct, budget_pct, windows): (i64, i64, f64, f64, i64) = r
        .prepare_trusted(WINDOWS_SQL)?
        .query_row(
            duckdb::params![window.from_ns, window.until_ns, pid, pid, node, node],
            causeway_store::row,
        )
        .map_err(duck(r, "reading probe overhead"))?;
    let switches = mode_switches(r, window.until_ns, node)?;
    let full_ns_per_call: BTreeMap<String, f64> = r
        .prepare_trusted(COSTS_SQL)?
        .query_map(
            duckdb::params![node, node],
            causeway_store::row::<(String, f64)>,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading probe costs"))?;
    // Recordings calibrate at start; imported traces have none of this.
    if windows == 0 && switches.is_empty() && full_ns_per_call.is_empty() {
        return Ok(None);
    }
    let cpu = (cpu_ns as f64).max(probe_ns as f64);
    let switches_total = switches.len();
    Ok(Some(Overhead {
        budget_pct,
        estimated_pct: if cpu > 0.0 {
            100.0 * probe_ns as f64 / cpu
        } else {
            0.0
        },
        peak_pct,
        probe_ns: probe_ns as u64,
        cpu_ns: cpu_ns as u64,
        full_ns_per_call,
        in_situ: in_situ(r, window.until_ns, node)?,
        switches: switches.into_iter().take(MAX_SWITCHES).collect(),
        switches_total,
    }))
}

/// The last in-situ measurement of each sampled op up to `until_ns` (node '': every node); none
/// in traces older than schema 5.
pub fn in_situ(r: &Reader, until_ns: i64, node: &str) -> Result<Vec<InSitu>, StoreError> {
    if r.schema_version() < 5 {
        return Ok(Vec::new());
    }
    r.prepare_trusted(IN_SITU_SQL)?
        .query_map(duckdb::params![until_ns, node, node], |row| {
            Ok(InSitu {
                op: row.get(0)?,
                pid: row.get(1)?,
                slowdown: row.get(2)?,
                slowdown_se: row.get(3)?,
                lost_ns_per_hit: row.get(4)?,
                calibrated_ns_per_hit: row.get(5)?,
                factor: row.get(6)?,
                attached_ns: row.get(7)?,
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading in-situ probe costs"))
}

/// Every probe-mode switch up to `until_ns` (node '': every node), oldest first; none in traces
/// older than the controller (schema 1).
pub fn mode_switches(r: &Reader, until_ns: i64, node: &str) -> Result<Vec<ModeSwitch>, StoreError> {
    if r.schema_version() < 2 {
        return Ok(Vec::new());
    }
    r.prepare_trusted(SWITCHES_SQL)?
        .query_map(duckdb::params![until_ns, node, node], |row| {
            Ok(ModeSwitch {
                ts_ns: row.get(0)?,
                op: row.get(1)?,
                from: row.get(2)?,
                to: row.get(3)?,
                reason: row.get(4)?,
                overhead_pct: row.get(5)?,
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading probe-mode switches"))
}

/// The stretches of `node` in which some GPU op's probes were not in full mode (sampled,
/// aggregated, entry only) up to `until_ns`, merged, oldest first: there, fewer calls were
/// stored than made, so a stretch without stored calls is not a stretch without calls.
pub fn sampled_spans(r: &Reader, until_ns: i64, node: &str) -> Result<Vec<(i64, i64)>, StoreError> {
    sampled_spans_of(r, until_ns, node, |_| true)
}

/// [`sampled_spans`] of the GPU ops `keep` accepts.
pub fn sampled_spans_of(
    r: &Reader,
    until_ns: i64,
    node: &str,
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<(i64, i64)>, StoreError> {
    let switches = mode_switches(r, until_ns, node)?;
    let mut open: BTreeMap<&str, i64> = BTreeMap::new();
    let mut spans: Vec<(i64, i64)> = Vec::new();
    for s in &switches {
        let gpu = causeway_store::catalog::op_by_name(&s.op)
            .is_some_and(|o| crate::opsets::is_gpu_source(o.source.name()))
            && keep(&s.op);
        if !gpu {
            continue;
        }
        if s.to == "full" {
            if let Some(from) = open.remove(s.op.as_str()) {
                spans.push((from, s.ts_ns));
            }
        } else {
            open.entry(s.op.as_str()).or_insert(s.ts_ns);
        }
    }
    spans.extend(open.into_values().map(|from| (from, i64::MAX)));
    Ok(crate::intervals::union(spans))
}

/// Whether `[a, b)` overlaps one of `spans` (sorted, disjoint).
pub fn in_sampled(spans: &[(i64, i64)], a: i64, b: i64) -> bool {
    let i = spans.partition_point(|s| s.1 <= a);
    spans.get(i).is_some_and(|s| s.0 < b)
}

/// The probe modes each op ran in during the window, from the switches (ops never switched ran
/// in full mode and are absent).
pub fn modes_in_window(switches: &[ModeSwitch], from_ns: i64) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in switches {
        let modes = out
            .entry(s.op.clone())
            .or_insert_with(|| vec![s.from.clone()]);
        if s.ts_ns <= from_ns {
            // Switched before the window: only the latest mode counts.
            *modes = vec![s.to.clone()];
        } else if modes.last() != Some(&s.to) {
            modes.push(s.to.clone());
        }
    }
    out.retain(|_, m| m.iter().any(|m| m != "full"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sw(ts_ns: i64, op: &str, from: &str, to: &str) -> ModeSwitch {
        ModeSwitch {
            ts_ns,
            op: op.into(),
            from: from.into(),
            to: to.into(),
            reason: "over_budget".into(),
            overhead_pct: 5.0,
        }
    }

    #[test]
    fn modes_in_a_window_follow_the_switches() {
        let s = [
            sw(10, "cudaLaunchKernel", "full", "entry_only"),
            sw(20, "cudaMalloc", "full", "aggregate"),
            sw(30, "cudaMalloc", "aggregate", "full"),
            sw(5, "cudaFree", "full", "entry_only"),
        ];
        let m = modes_in_window(&s, 8);
        assert_eq!(m["cudaLaunchKernel"], vec!["full", "entry_only"]);
        assert_eq!(m["cudaMalloc"], vec!["full", "aggregate", "full"]);
        assert_eq!(m["cudaFree"], vec!["entry_only"]);
        // Back to full before the window: nothing to say.
        let m = modes_in_window(&s, 40);
        assert!(!m.contains_key("cudaMalloc"), "{m:?}");
    }
}
