//! `host_memory_pressure`: the host runs short of memory: the OOM killer fires, or traced
//! processes allocate pages at a sustained high rate.
//!
//! Trigger: any oom_kill / pod_oom_kill event, or page allocations >= 4 GiB/s over the node's
//! span with >= 1,000 allocation events (busy DataLoader workers reach 1-2 GiB/s healthily).
//! Time lost: for OOM kills, the time from the first kill to the end of the window (the
//! killed process's work is gone); otherwise the blocked off-CPU time of GPU-calling threads,
//! an upper bound (stated in the explanation).
//! Severity: HIGH on any OOM kill, else the common rule.
//! Recommendation: lower host memory use (workers, pinned buffers, prefetch), add limits.

use std::sync::LazyLock;

use causeway_store::StoreError;
use causeway_store::duckdb;

use super::{Finding, Input, d, lit, severity, step};
use crate::chains::{Chain, Severity};
use crate::facts::duck;
use crate::fmt::bytes;
use crate::opsets::named;

static OOM_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT node, min(timestamp), count(*)::BIGINT, min(arg0) FROM event_data
WHERE {} AND timestamp BETWEEN ? AND ? AND (?::VARCHAR = '' OR node = ?::VARCHAR)
GROUP BY node ORDER BY node",
        named(&["oom_kill", "pod_oom_kill"])
    )
});

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let ooms: Vec<(String, i64, i64, i64)> = ctx
        .r
        .prepare_trusted(OOM_SQL.as_str())?
        .query_map(
            duckdb::params![ctx.window.from_ns, ctx.window.until_ns, ctx.node, ctx.node],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(ctx.r, "looking for OOM kills"))?;
    let mut out = Vec::new();
    for node in &ctx.nodes {
        let span = ctx.node_span_ns(node);
        let pages: Vec<_> = ctx
            .ops
            .iter()
            .filter(|o| &o.node == node && o.op == "mm_page_alloc")
            .collect();
        let n: u64 = pages.iter().map(|o| o.count).sum();
        let b: i64 = pages.iter().map(|o| o.arg0_sum).sum();
        let rate = b as f64 / (span as f64 / 1e9);
        let oom = ooms.iter().find(|o| &o.0 == node);
        let pressure = n >= 1_000 && rate >= (4u64 << 30) as f64;
        if oom.is_none() && !pressure {
            continue;
        }
        let (lost, sev) = match oom {
            Some((_, first, _, _)) => ((ctx.window.until_ns - first).max(0), Severity::High),
            None => {
                let blocked: i64 = ctx
                    .threads
                    .iter()
                    .filter(|t| &t.node == node && t.gpu_calls > 0)
                    .map(|t| t.blocked_ns)
                    .sum();
                (blocked, severity(blocked, span))
            }
        };
        let top = pages
            .iter()
            .max_by_key(|o| o.arg0_sum)
            .map(|o| format!("{} (pid {})", ctx.name(node, o.pid), o.pid));
        let oom_text = oom.map(|(_, ts, count, pid)| {
            format!("The OOM killer fired {count} time(s), first at {} into the window, killing pid {pid} ({}). ", d(ts - ctx.window.from_ns), ctx.name(node, *pid as u32))
        });
        out.push(
            Finding {
                detector: "host_memory_pressure",
                node: node.clone(),
                time_lost_ns: lost,
                severity: sev,
                summary: format!(
                    "{}{} of page allocations ({}/s){}",
                    if oom.is_some() { "OOM kill; " } else { "" },
                    bytes(b), bytes(rate as i64), top.as_ref().map(|t| format!(", mostly {t}")).unwrap_or_default()
                ),
                root_cause: "Host memory pressure: traced processes allocate memory faster than the host can supply it".into(),
                explanation: format!(
                    "{}Traced processes allocated {} in {n} page-allocation events over {} ({}/s){}. {}",
                    oom_text.clone().unwrap_or_default(), bytes(b), d(span), bytes(rate as i64),
                    top.as_ref().map(|t| format!(", the largest share by {t}")).unwrap_or_default(),
                    if oom.is_some() { format!("Time lost is counted from the first kill to the end of the window ({}): the killed process's work and its restart.", d(lost)) } else { format!("Time lost is an upper bound: the sleeping time of GPU-calling threads ({}).", d(lost)) }
                ),
                timeline: vec![
                    step("HOST", "mm_page_alloc", format!("{} at {}/s", bytes(b), bytes(rate as i64)), 0),
                    step("HOST", "oom_kill", oom_text.unwrap_or_else(|| "no OOM kill".into()), lost),
                ],
                recommendations: vec![
                    "Reduce host memory per DataLoader worker (fewer workers, smaller prefetch_factor, avoid copying the dataset into each worker).".into(),
                    "Set memory limits per process/cgroup so one component cannot take the node down, and watch /proc/pressure/memory.".into(),
                ],
                evidence_sql: format!(
                    "SELECT pid, comm, op, count(*) AS events, sum(arg0) AS bytes FROM events WHERE node = {} AND op IN ('mm_page_alloc', 'oom_kill', 'pod_oom_kill') GROUP BY ALL ORDER BY bytes DESC LIMIT 20",
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
    use crate::chains::Severity;
    use crate::demo::Scenario;
    use crate::detectors::testutil::chains_of;

    #[test]
    fn fires_on_oom_and_heavy_allocation() {
        let c = chains_of(Scenario::HostMemoryPressure, false, "host_memory_pressure");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert_eq!(c[0].severity, Severity::High);
        assert!(c[0].summary.starts_with("OOM kill"), "{}", c[0].summary);
    }

    #[test]
    fn modest_allocation_is_fine() {
        assert!(chains_of(Scenario::HostMemoryPressure, true, "host_memory_pressure").is_empty());
    }
}
