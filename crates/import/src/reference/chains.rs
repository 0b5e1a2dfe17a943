//! The reference trace's causal chains as ours: detector names from chain ids, our op names,
//! times in ns, and evidence SQL against the imported events.

use causeway_store::catalog::{self, op_by_name};
use causeway_store::{ChainRow, Writer};

use super::SqliteTrace;
use crate::{ImportError, ImportOptions};

impl SqliteTrace {
    pub(super) fn copy_chains(
        &self,
        w: &mut Writer,
        node: &str,
        origin: &str,
        opts: &ImportOptions,
    ) -> Result<u64, ImportError> {
        if !self.tables.contains("causal_chains") {
            return Ok(0);
        }
        let node_expr = if opts.node.is_none() && self.has_col("causal_chains", "node") {
            "node"
        } else {
            "''"
        };
        let sql = format!(
            "SELECT id, detected_at, severity, summary, root_cause, explanation, recommendations,
                    cuda_op, cuda_p99_us, cuda_p50_us, tail_ratio, timeline, {node_expr}
             FROM causal_chains ORDER BY detected_at"
        );
        let mut st = self.sq(self.conn.prepare(&sql))?;
        let chains: Vec<ChainRow> = self.sq(st
            .query_map([], |r| {
                let row_node: String = r.get(12)?;
                let recs: String = r.get(6)?;
                let op: String = r.get(7)?;
                let (p99_us, p50_us): (i64, i64) = (r.get(8)?, r.get(9)?);
                let id: String = r.get(0)?;
                Ok(reference_chain(
                    id,
                    row_node,
                    node,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    &recs,
                    &op,
                    p50_us,
                    p99_us,
                    r.get(10)?,
                    &r.get::<_, String>(11)?,
                    origin,
                ))
            })
            .and_then(|rows| rows.collect()))?;
        w.add_chains(&chains)?;
        Ok(chains.len() as u64)
    }
}

/// A reference chain as ours: recommendations as a JSON array, our op names, times in ns, and
/// evidence SQL that returns the op's slowest calls on its node.
#[allow(clippy::too_many_arguments)]
fn reference_chain(
    id: String,
    row_node: String,
    file_node: &str,
    detected_ns: i64,
    severity: String,
    summary: String,
    root_cause: String,
    explanation: String,
    recs: &str,
    op: &str,
    p50_us: i64,
    p99_us: i64,
    tail_ratio: f64,
    timeline: &str,
    origin: &str,
) -> ChainRow {
    let node = if row_node.is_empty() {
        file_node.to_string()
    } else {
        row_node
    };
    let recommendations = if recs.trim_start().starts_with('[') {
        recs.to_string()
    } else {
        serde_json::to_string(&[recs]).unwrap_or_default()
    };
    // The reference tool's op names are ours where they differ (cudaDeviceSync).
    let op = op_by_name(op).map_or(op, |o| o.name).to_string();
    let evidence_sql = if op.is_empty() {
        String::new()
    } else {
        format!(
            "SELECT * FROM events WHERE op = '{}' AND node = '{}' ORDER BY duration DESC LIMIT 20",
            op.replace('\'', "''"),
            node.replace('\'', "''")
        )
    };
    ChainRow {
        detector: reference_detector(&id),
        chain_id: id,
        node,
        detected_ns,
        severity,
        summary,
        root_cause,
        explanation,
        recommendations,
        timeline: convert_timeline(timeline),
        evidence_sql,
        time_lost_ns: 0,
        cuda_op: op,
        p50_ns: p50_us * 1000,
        p99_ns: p99_us * 1000,
        tail_ratio,
        origin: origin.to_string(),
    }
}

fn reference_detector(id: &str) -> String {
    let descriptor = id.rsplit(':').next().unwrap_or(id);
    let kind = descriptor.split('-').next().unwrap_or("");
    match kind {
        "tail" => "tail_latency".into(),
        "drop" => "throughput_drop".into(),
        "" => "imported".into(),
        other => other.replace('-', "_"),
    }
}

fn convert_timeline(text: &str) -> String {
    let Ok(items) = serde_json::from_str::<Vec<serde_json::Value>>(text) else {
        return "[]".into();
    };
    let out: Vec<serde_json::Value> = items
        .into_iter()
        .map(|it| {
            let s = |k: &str| it.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
            let dur_us = it.get("dur_us").and_then(|v| v.as_i64()).unwrap_or(0);
            serde_json::json!({
                "layer": s("layer"),
                "op": catalog::op_by_name(&s("op")).map(|o| o.name.to_string()).unwrap_or_else(|| s("op")),
                "detail": s("detail"),
                "duration_ns": dur_us * 1000,
            })
        })
        .collect();
    serde_json::to_string(&out).unwrap_or_else(|_| "[]".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detectors_from_reference_ids() {
        assert_eq!(
            reference_detector("tail-medium-cudaLaunchKernel"),
            "tail_latency"
        );
        assert_eq!(
            reference_detector("gpu-node-01:drop-high-cuLaunchKernel"),
            "throughput_drop"
        );
    }

    #[test]
    fn timeline_units_become_ns() {
        let t = convert_timeline(
            r#"[{"layer":"CUDA","op":"cudaDeviceSync","detail":"x","dur_us":13}]"#,
        );
        assert_eq!(
            t,
            r#"[{"detail":"x","duration_ns":13000,"layer":"CUDA","op":"cudaDeviceSynchronize"}]"#
        );
    }
}
