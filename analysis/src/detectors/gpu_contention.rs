//! `gpu_contention`: several processes feed the same GPU at the same time and time-slice it.
//!
//! Trigger: on one (node, gpu_id), >= 2 processes each with >= 100 launches whose active spans
//! overlap for >= 50% of the shorter one.
//! Time lost: the synchronisation wait of those processes x (n - 1) / n: with n processes
//! sharing a GPU, each waits that share of its syncs for the others' kernels.
//! Severity: the common rule.
//! Recommendation: one process per GPU, MPS or MIG, or batch the requests in one server.

use causeway_store::StoreError;

use super::{Finding, Input, d, lit, severity, step};
use crate::chains::Chain;
use crate::facts::SYNC_OPS;

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let rows: Vec<(&String, i16, u32, u64, i64, i64)> = ctx
        .gpu_launches
        .iter()
        .map(|g| (&g.node, g.gpu_id, g.pid, g.launches, g.first_ns, g.last_ns))
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let j = rows[i..]
            .iter()
            .take_while(|r| r.0 == rows[i].0 && r.1 == rows[i].1)
            .count()
            + i;
        let group = &rows[i..j];
        i = j;
        if group.len() < 2 {
            continue;
        }
        let (from, until) = (
            group.iter().map(|r| r.4).max().unwrap_or(0),
            group.iter().map(|r| r.5).min().unwrap_or(0),
        );
        let shortest = group.iter().map(|r| r.5 - r.4).min().unwrap_or(1).max(1);
        if ((until - from) as f64) < 0.5 * shortest as f64 {
            continue;
        }
        let (node, gpu) = (group[0].0, group[0].1);
        let n = group.len() as i64;
        let sync_ns: i64 = group
            .iter()
            .flat_map(|r| {
                ctx.ops.iter().filter(move |o| {
                    &o.node == node && o.pid == r.2 && SYNC_OPS.contains(&o.op.as_str())
                })
            })
            .map(|o| o.total_ns)
            .sum();
        let lost = sync_ns * (n - 1) / n;
        let procs: Vec<String> = group
            .iter()
            .map(|r| format!("{} (pid {}, {} launches)", ctx.name(node, r.2), r.2, r.3))
            .collect();
        out.push(
            Finding {
                detector: "gpu_contention",
                node: node.clone(),
                time_lost_ns: lost,
                severity: severity(lost, ctx.node_span_ns(node)),
                summary: format!("{n} processes share GPU {gpu} for {}: {} of sync waits, ~{} for each other's kernels", d(until - from), d(sync_ns), d(lost)),
                root_cause: format!("GPU contention: {n} processes time-slice GPU {gpu}, so each one's kernels queue behind the others'"),
                explanation: format!(
                    "On GPU {gpu}, {} launched work concurrently for {}. Their synchronisations waited {} in total; with {n} processes time-slicing one GPU, about {} of that is waiting for the other processes' kernels rather than their own.",
                    procs.join(", "), d(until - from), d(sync_ns), d(lost)
                ),
                timeline: vec![
                    step("CUDA", "cudaLaunchKernel", procs.join("; "), 0),
                    step("CUDA", "cudaStreamSynchronize", format!("{} waiting, ~{} for other processes", d(sync_ns), d(lost)), lost),
                ],
                recommendations: vec![
                    format!("Give each process its own GPU (CUDA_VISIBLE_DEVICES), or serve the {n} workloads from one process that batches their requests."),
                    "If they must share, enable MPS (nvidia-cuda-mps-control -d) or partition with MIG so kernels run side by side instead of time-slicing.".into(),
                ],
                evidence_sql: format!(
                    "SELECT pid, comm, count(*) FILTER (WHERE op IN ('cudaLaunchKernel', 'cuLaunchKernel')) AS launches, sum(duration) FILTER (WHERE op = 'cudaStreamSynchronize') AS sync_ns FROM events WHERE node = {} AND gpu_id = {gpu} GROUP BY pid, comm ORDER BY launches DESC",
                    lit(node)
                ),
            }
            .into_chain(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::demo::Scenario;
    use crate::detectors::testutil::chains_of;

    #[test]
    fn fires_when_processes_share_a_gpu() {
        let c = chains_of(Scenario::GpuContention, false, "gpu_contention");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(
            c[0].summary.starts_with("3 processes share GPU 0"),
            "{}",
            c[0].summary
        );
    }

    #[test]
    fn one_process_per_gpu_is_fine() {
        assert!(chains_of(Scenario::GpuContention, true, "gpu_contention").is_empty());
    }
}
