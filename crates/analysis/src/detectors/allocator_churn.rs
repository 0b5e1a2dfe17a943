//! `allocator_churn`: device memory is freed and allocated again every step (the pattern of
//! `torch.cuda.empty_cache()` in the loop, or of a caching allocator that keeps missing):
//! cudaFree synchronises the device before it returns, and cudaMalloc costs time on every
//! call, so the feeding thread waits where it should launch.
//!
//! Trigger (per thread, from its time budget; calls the kernel counted where probes were
//! sampled): at least 10 frees per second of its steady span (after start-up), and the time
//! inside allocations and frees at least 10% of it.
//! Time lost: the time inside the frees and allocations. Severity: the common rule.
//! Recommendation: drop `empty_cache()` from the loop; let the caching allocator keep blocks.

use causeway_store::StoreError;

use super::{Finding, Input, d, pct, severity, span_words, steady_span, step, thread_budgets};
use crate::budget::CallClass;
use crate::chains::Chain;

/// Frees per second that count as churn.
pub const MIN_FREES_PER_S: f64 = 10.0;

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let mut out = Vec::new();
    for b in thread_budgets(inp) {
        let tid = b.tid.unwrap_or_default();
        let (Some(free), alloc) = (b.class(CallClass::Free), b.class(CallClass::Alloc)) else {
            continue;
        };
        let frees = free.estimated_calls();
        let allocs = alloc.map_or(0, |a| a.estimated_calls());
        let free_ns = free.estimated_total_ns();
        let alloc_ns = alloc.map_or(0, |a| a.estimated_total_ns());
        let lost = free_ns.saturating_add(alloc_ns);
        let span = steady_span(ctx, b);
        let per_s = frees as f64 / (span as f64 / 1e9);
        if per_s < MIN_FREES_PER_S || (lost as f64) < 0.10 * span as f64 {
            continue;
        }
        let sampled =
            free.counted_calls.is_some() || alloc.is_some_and(|a| a.counted_calls.is_some());
        // The time is the calls' over the whole span, start-up's included: where start-up's
        // calls take it past the steady span (a slow start on a busy machine), it is given as
        // a share of the whole span, which holds every call.
        let shown = if lost > span { b.span_ns.max(1) } else { span };
        out.push(
            Finding {
                detector: "allocator_churn",
                node: b.node.clone(),
                time_lost_ns: lost,
                severity: severity(lost, ctx.node_span_ns(&b.node)),
                summary: format!(
                    "{} (tid {tid}) freed and reallocated device memory {}{:.0} times a second: {}{} inside cudaFree/cudaMalloc ({} of {})",
                    b.comm,
                    if sampled { "~" } else { "" },
                    per_s,
                    if sampled { "~" } else { "" },
                    d(lost),
                    pct(lost, shown),
                    span_words(shown, b.span_ns)
                ),
                root_cause: "Allocator churn: device memory is released and allocated again every step (torch.cuda.empty_cache() in the loop, or allocations the caching allocator cannot reuse); every cudaFree synchronises the device".into(),
                explanation: format!(
                    "{} (pid {}, tid {tid}) made {frees} frees ({}, {} blocked waiting for the device to drain) and {allocs} allocations ({}) in its {} span{}. A free waits for all queued GPU work before it returns, so the GPU runs dry before each one, and the next step pays for the allocations again; the process's GPU had no outstanding work for an estimated {} of the window.",
                    b.comm,
                    b.pid,
                    d(free_ns),
                    d(free.blocked_ns),
                    d(alloc_ns),
                    d(b.span_ns),
                    match (sampled, b.time_bound) {
                        (true, Some(_)) => " (counts from the kernel, times scaled from the stored calls and bounded by the span: the probes were sampled, and the sampled calls were the slower ones)",
                        (true, None) => " (counts from the kernel, times scaled from the stored calls: the probes were sampled)",
                        _ => "",
                    },
                    d(b.gpu_idle_estimate_ns)
                ),
                timeline: vec![
                    step("CUDA", "cudaFree", format!("{frees} frees, each synchronising the device"), free_ns),
                    step("CUDA", "cudaMalloc", format!("{allocs} allocations again"), alloc_ns),
                    step("GPU", "idle", "drained before every free".into(), b.gpu_idle_estimate_ns.min(lost)),
                ],
                recommendations: vec![
                    "Remove torch.cuda.empty_cache() from the training/inference loop (call it, if at all, between phases).".into(),
                    "Keep tensor shapes stable (or pad them) so the caching allocator reuses blocks; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation.".into(),
                ],
                // The summary's time is the sum of scaled_ns: a cudaMalloc's own cuMemAlloc is
                // nested in it and left out, as the budget leaves it out.
                evidence_sql: super::scaled_calls_sql(
                    ctx,
                    &b.node,
                    b.pid,
                    tid,
                    b.scaling(),
                    "(g.op LIKE '%Free%' OR g.op LIKE '%Malloc%' OR g.op LIKE '%MemAlloc%')",
                ),
            }
            .into_chain()
            .at(crate::sites::Scope::thread(&b.node, b.pid, tid, &[CallClass::Alloc, CallClass::Free], "allocations and frees")),
        );
    }
    Ok(out)
}
