//! `slow_copies`: host-device copies that the calling thread performs itself, slowly: a copy
//! from pageable (not page-locked) memory is staged through a pinned buffer by the driver on
//! the calling thread, so the call takes the CPU for the whole transfer and cannot overlap the
//! GPU's work. Every such copy is slow, so no copy is an outlier against its own median: the
//! detector reads the thread's time budget instead.
//!
//! Trigger (per thread, per direction): >= 64 MiB copied, the thread on the CPU inside those
//! copies for >= 20% of its span (waiting for the GPU inside a copy is not counted: that is the
//! GPU being busy), at under [`MAX_GBPS`] GB/s of that CPU time.
//! Time lost: the on-CPU time inside the copies (an asynchronous copy from pinned memory
//! returns at once). Severity: the common rule.
//! Recommendation: pinned memory (`pin_memory=True`), `non_blocking=True`, copies on a side
//! stream.

use causeway_store::StoreError;
use causeway_store::catalog;

use super::{Finding, Input, d, lit, pct, severity, step, thread_budgets};
use crate::budget::CallClass;
use crate::chains::Chain;

/// Below this rate (bytes per second of the thread's CPU time in the copies) a copy is the
/// thread's own memcpy, not a DMA transfer it waits for (PCIe 4.0 x16 moves ~25 GB/s, 5.0
/// ~50). A single thread's memcpy reaches 12-13 GB/s on the development VM when it is quiet
/// (the lab's staged copies missed at 12), and real staged copies ran at 6.7 GB/s on the H200.
pub const MAX_GBPS: f64 = 16.0;

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let mut out = Vec::new();
    for b in thread_budgets(inp) {
        let tid = b.tid.unwrap_or_default();
        for (class, dir, name) in [
            (CallClass::CopyH2d, 1, "host-to-device"),
            (CallClass::CopyD2h, 2, "device-to-host"),
        ] {
            let Some(row) = b.class(class) else { continue };
            let bytes = row.bytes.unwrap_or(0);
            let scale = row.estimated_calls() as f64 / row.calls.max(1) as f64;
            let cpu = ((row.on_cpu_ns + row.unknown_ns) as f64 * scale) as i64;
            let bytes_est = (bytes as f64 * scale) as i64;
            let gbps = bytes_est as f64 / cpu.max(1) as f64;
            let scaled = scale > 1.0;
            let est = if scaled { "~" } else { "" };
            if bytes_est < 64 << 20 || (cpu as f64) < 0.20 * b.span_ns as f64 || gbps >= MAX_GBPS {
                continue;
            }
            let copy_ops = catalog::OPS
                .iter()
                .filter(|o| o.name.contains("Memcpy") && !o.name.contains("Peer"))
                .map(|o| lit(o.name))
                .collect::<Vec<_>>()
                .join(", ");
            out.push(
                Finding {
                    detector: "slow_copies",
                    node: b.node.clone(),
                    time_lost_ns: cpu,
                    severity: severity(cpu, ctx.node_span_ns(&b.node)),
                    summary: format!(
                        "{} (tid {tid}) spent {est}{} ({} of its span) copying {est}{} {name} at {:.1} GB/s on its own CPU{}",
                        b.comm,
                        d(cpu),
                        pct(cpu, b.span_ns),
                        crate::fmt::bytes(bytes_est),
                        gbps,
                        if scaled {
                            format!(" (estimated: {} of ~{} copies stored)", row.calls, row.estimated_calls())
                        } else {
                            String::new()
                        }
                    ),
                    root_cause: "Slow host-device copies: the copies come from pageable memory, so the driver stages them through a pinned buffer on the calling thread, which copies instead of launching".into(),
                    explanation: format!(
                        "{} (pid {}, tid {tid}) made {} {name} copies moving {}: {} inside them, {} of it on the CPU (the thread's own memcpy into the driver's staging buffer) and {} asleep waiting for the GPU. On the CPU that is {:.1} GB/s, well under a PCIe link's ~25 GB/s, and nothing else can run on the thread meanwhile: the GPU waits for the next launch. Copies from page-locked memory are DMA transfers that an asynchronous copy queues and returns from at once.",
                        b.comm,
                        b.pid,
                        row.estimated_calls(),
                        crate::fmt::bytes(bytes_est),
                        d((row.total_ns as f64 * scale) as i64),
                        d(cpu),
                        d((row.blocked_ns as f64 * scale) as i64),
                        gbps
                    ),
                    timeline: vec![
                        step("CUDA", "cudaMemcpyAsync", format!("{} {name} copies, {} on the CPU", row.estimated_calls(), d(cpu)), cpu),
                        step("GPU", "idle", "no launches while the thread copies".into(), cpu),
                    ],
                    recommendations: vec![
                        "Copy from pinned memory: DataLoader(pin_memory=True), tensor.pin_memory(), or a preallocated pinned buffer (torch.empty(..., pin_memory=True)) reused every step.".into(),
                        "Then copy asynchronously, .to(device, non_blocking=True), ideally on a side stream so the transfer overlaps compute.".into(),
                    ],
                    // The summary's time and bytes are the sums of on_cpu_ns and bytes: each
                    // op's calls less the thread's off-CPU time inside them, scaled by its
                    // sampling as the budget scales them.
                    evidence_sql: format!(
                        "{}, c AS (SELECT g.* FROM g WHERE NOT g.nested AND g.op IN ({copy_ops}) AND g.arg1 = {dir}), s AS (SELECT timestamp AS a, timestamp + duration AS b FROM events WHERE node = {node} AND tid = {tid} AND op = 'sched_switch'), off AS (SELECT c.op, sum(least(s.b, c.timestamp + c.duration) - greatest(s.a, c.timestamp)) AS off_ns FROM c JOIN s ON s.a < c.timestamp + c.duration AND s.b > c.timestamp GROUP BY c.op) SELECT c.op, count(*) AS stored_calls, round(count(*) * any_value(coalesce(r.scale, 1)))::BIGINT AS calls, round(sum(c.arg0) * any_value(coalesce(r.scale, 1)))::BIGINT AS bytes, sum(c.duration) AS stored_ns, any_value(coalesce(off.off_ns, 0)) AS off_cpu_ns, round((sum(c.duration) - any_value(coalesce(off.off_ns, 0))) * any_value(coalesce(r.time_scale, 1)))::BIGINT AS on_cpu_ns, sum(c.arg0) / ((sum(c.duration) - any_value(coalesce(off.off_ns, 0))) / 1e9) / 1e9 AS gb_per_s_on_cpu FROM c LEFT JOIN r ON r.op = c.op LEFT JOIN off ON off.op = c.op GROUP BY c.op",
                        super::budget_calls_cte(ctx, &b.node, b.pid, tid, b.scaling()),
                        node = lit(&b.node)
                    ),
                }
                .into_chain()
            .at(crate::sites::Scope::thread(&b.node, b.pid, tid, &[class], "copies")),
            );
        }
    }
    Ok(out)
}
