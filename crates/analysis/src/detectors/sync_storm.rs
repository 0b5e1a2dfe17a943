//! `sync_storm`: the feeding thread synchronises with the GPU many times per step (the hidden
//! `.item()` / `.cpu()` / `.numpy()` pattern), so the host cannot run ahead of the GPU.
//!
//! Trigger: on one launching thread, >= 100 synchronisations (stream/device/context/event
//! syncs) per second of its span after start-up, more than 1 sync per 20 launches, and sync
//! time >= 5% of that span; counts and times from its budget, scaled to the kernel's counts
//! where the probes were sampled.
//! Time lost: sync time x (syncs - launches/20) / syncs: the waits beyond one sync per 20
//! launches (a generous healthy baseline: one per step).
//! Second trigger, from the thread's time budget (a host read is often a small device-to-host
//! copy that waits inside the copy, not an explicit sync: torch's `.item()`): >= 100 host
//! waits (syncs plus device-to-host copies) per second of the span after start-up, the time
//! inside those waits >= 2% of it (a read per step of a launch-bound loop waits microseconds:
//! the GPU idles there because launching is slow, not because of the reads), and the process's
//! GPU idle estimate (drained by a wait until the next launch; scaled as the waits' time is
//! where their probes were sampled) >= 20% of it (12% where a quarter of it is spent waiting in
//! the reads), while the thread works more than it sleeps between calls. Time lost: that idle
//! estimate.
//! Severity: the common rule.
//! Recommendation: remove per-step host reads of device values; batch them; use events.

use causeway_store::StoreError;

use super::{Finding, Input, d, pct, severity, steady_span, step, thread_budgets};
use crate::budget::{Budget, CallClass};
use crate::chains::Chain;
use crate::facts::Ctx;
use crate::opsets::SYNC_OPS;

/// Syncs per second that start to look like a storm.
pub const MIN_SYNCS_PER_S: f64 = 100.0;

/// Least share of the steady span spent inside host waits for the budget trigger.
pub const MIN_WAIT_SHARE: f64 = 0.02;

/// Least GPU idle estimate, as a share of the steady span, for the budget trigger: 20%, or 12%
/// where the thread spends a quarter of that span waiting in its reads (the lab's storm of 4
/// reads a step: idle ~16% by the estimate where its copies were aggregated, waits 42%; the
/// H200's healthy twin reading every 25 steps: idle ~14% of its span after start-up, waits
/// ~11% of its whole span).
fn idle_floor(waited: i64, span: i64) -> f64 {
    if waited as f64 >= 0.25 * span as f64 {
        0.12
    } else {
        0.20
    }
}

/// The thread's waits per op (and copy direction), as its budget scales them: the summary's
/// wait time is the sum of `scaled_ns`. With `reads`, its device-to-host copies too.
fn waits_sql(
    ctx: &Ctx<'_>,
    node: &str,
    pid: u32,
    tid: u32,
    scaled: crate::budget::Scaling,
    reads: bool,
) -> String {
    let syncs = SYNC_OPS.map(|o| format!("'{o}'")).join(", ");
    let which = if reads {
        format!(
            "(g.op IN ({syncs}) OR (g.op LIKE '%Memcpy%' AND g.op NOT LIKE '%Peer%' AND g.arg1 = 2))"
        )
    } else {
        format!("g.op IN ({syncs})")
    };
    let per_op = super::scaled_calls_sql(ctx, node, pid, tid, scaled, &which);
    if !reads {
        return per_op;
    }
    // The summary counts reads (copies: a direction) and syncs apart: each class's total.
    format!(
        "SELECT *, sum(calls) OVER (PARTITION BY direction IS NULL) AS class_calls FROM ({per_op}) ORDER BY scaled_ns DESC"
    )
}

/// The thread's kernel launches per op, scaled as its budget counts them.
fn launches_sql(
    ctx: &Ctx<'_>,
    node: &str,
    pid: u32,
    tid: u32,
    scaled: crate::budget::Scaling,
) -> String {
    let launches = crate::opsets::LAUNCH_NAMES.map(super::lit).join(", ");
    super::scaled_calls_sql(
        ctx,
        node,
        pid,
        tid,
        scaled,
        &format!("g.op IN ({launches})"),
    )
}

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let mut out = Vec::new();
    // The threads the first trigger named, so the second does not name them again.
    let mut named: Vec<(String, u32)> = Vec::new();
    // Per-op totals are per process: name the launching thread of the process that made the
    // most synchronisations itself (PyTorch's autograd thread launches more, the main thread
    // reads the values).
    let syncs_of = |node: &str, tid: u32| {
        thread_budgets(inp)
            .find(|b| b.node == node && b.tid == Some(tid))
            .and_then(|b| b.class(CallClass::Sync))
            .map_or(0, |c| c.calls)
    };
    let mut feeders = ctx.feeders();
    feeders.sort_by_cached_key(|t| {
        (
            t.node.clone(),
            t.pid,
            std::cmp::Reverse(syncs_of(&t.node, t.tid)),
            t.tid,
        )
    });
    feeders.dedup_by(|b, a| a.node == b.node && a.pid == b.pid);
    for t in feeders {
        // Per-op totals are per process; a feeding thread issues them in practice.
        let syncs: Vec<_> = ctx
            .ops
            .iter()
            .filter(|o| o.node == t.node && o.pid == t.pid && SYNC_OPS.contains(&o.op.as_str()))
            .collect();
        let n: u64 = syncs.iter().map(|o| o.count).sum();
        let sync_ns: i64 = syncs
            .iter()
            .map(|o| o.total_ns)
            .fold(0, i64::saturating_add);
        // Where the probes were sampled the stored calls are a part: the thread's budget scales
        // its classes by the kernel's counts.
        let budget = thread_budgets(inp).find(|b| b.node == t.node && b.tid == Some(t.tid));
        let scaling = budget.map_or(crate::budget::Scaling::None, Budget::scaling);
        let scaled = budget.is_some_and(Budget::scaled);
        let approx = if scaled { "~" } else { "" };
        let est = |c: CallClass| {
            budget
                .and_then(|b| b.class(c))
                .map_or((0, 0), |c| (c.estimated_calls(), c.estimated_total_ns()))
        };
        let (n, sync_ns) = (
            n.max(est(CallClass::Sync).0),
            sync_ns.max(est(CallClass::Sync).1),
        );
        let launches = t.launches.max(est(CallClass::Launch).0);
        let span = super::steady_span_ns(ctx, &t.node, t.pid, t.tid)
            .unwrap_or((t.last_ns - t.first_ns).max(1));
        let per_s = n as f64 / (span as f64 / 1e9);
        if per_s < MIN_SYNCS_PER_S
            || (n as f64) < launches as f64 / 20.0
            || (sync_ns as f64) < 0.05 * span as f64
        {
            continue;
        }
        let expected = launches as f64 / 20.0;
        let lost = (sync_ns as f64 * ((n as f64 - expected) / n as f64).max(0.0)) as i64;
        let d2h = ctx.op(&t.node, t.pid, "cudaMemcpy").map_or(0, |o| o.count);
        let main = syncs
            .iter()
            .max_by_key(|o| o.count)
            .map_or("cudaStreamSynchronize".to_string(), |o| o.op.clone());
        named.push((t.node.clone(), t.tid));
        out.push(
            Finding {
                detector: "sync_storm",
                node: t.node.clone(),
                time_lost_ns: lost,
                severity: severity(lost, ctx.node_span_ns(&t.node)),
                summary: format!("{approx}{} syncs/s on {} (tid {}): one per {:.1} launches, {approx}{} waiting ({} of its span){}", per_s.round(), t.comm, t.tid, launches as f64 / n.max(1) as f64, d(sync_ns), pct(sync_ns, span), if scaled { " (estimated from the stored calls: the probes were sampled)" } else { "" }),
                root_cause: "Sync storm: the training step reads device values on the host (.item(), .cpu(), .numpy(), printing a tensor), forcing a GPU synchronisation each time".into(),
                explanation: format!(
                    "{} (pid {}, tid {}) made {} synchronisations ({}) against {} kernel launches and {} synchronous cudaMemcpy calls. Each sync drains the GPU queue, so the host cannot enqueue the next kernels while the GPU works and the GPU idles while the host catches up. Beyond one sync per 20 launches, these waits cost an estimated {}.",
                    t.comm, t.pid, t.tid, n, main, launches, d2h, d(lost)
                ),
                timeline: vec![
                    step("CUDA", &main, format!("{n} syncs, {} total wait", d(sync_ns)), sync_ns),
                    step("GPU", "idle", "queue drained after every sync; host and GPU serialised".into(), lost),
                ],
                recommendations: vec![
                    "Find the host reads of device tensors in the step (.item(), .cpu(), .numpy(), bool(tensor), print) with torch.cuda.set_sync_debug_mode('warn').".into(),
                    "Keep metrics on the GPU and read them every N steps; replace data-dependent Python branches with tensor ops (torch.where).".into(),
                    "Where a host value is needed, copy asynchronously (non_blocking=True into pinned memory) and wait on a CUDA event later.".into(),
                ],
                // The thread's syncs per op, with its launches (scaled as the budget does) and
                // the time lost beyond one sync per 20 launches (lost_ns).
                evidence_sql: format!(
                    "WITH l AS (SELECT sum(calls) AS n FROM ({})) SELECT q.*, (SELECT n FROM l) AS launches, round(sum(q.scaled_ns) OVER () * greatest((sum(q.calls) OVER () - (SELECT n FROM l) / 20) / sum(q.calls) OVER (), 0))::BIGINT AS lost_ns FROM ({}) q ORDER BY q.scaled_ns DESC",
                    launches_sql(ctx, &t.node, t.pid, t.tid, scaling),
                    waits_sql(ctx, &t.node, t.pid, t.tid, scaling, false)
                ),
            }
            .into_chain()
            .at(crate::sites::Scope::process(&t.node, t.pid, &[CallClass::Sync], "syncs")),
        );
    }
    for b in thread_budgets(inp) {
        let tid = b.tid.unwrap_or_default();
        if named.contains(&(b.node.clone(), tid)) {
            continue;
        }
        let syncs = b.class(CallClass::Sync).map_or(0, |c| c.estimated_calls());
        let reads = b
            .class(CallClass::CopyD2h)
            .map_or(0, |c| c.estimated_calls());
        let span = steady_span(ctx, b);
        let per_s = (syncs + reads) as f64 / (span as f64 / 1e9);
        let o = &b.outside;
        let asleep = o.blocked_other_ns + o.blocked_net_ns + o.blocked_io_ns;
        let waits = [CallClass::Sync, CallClass::CopyD2h].map(|k| b.class(k));
        let waited: i64 = waits.iter().flatten().map(|c| c.estimated_total_ns()).sum();
        let stored: i64 = waits.iter().flatten().map(|c| c.total_ns).sum();
        // The idle estimate runs from each stored wait that drained the GPU: where the probes
        // of the waits were sampled, it is scaled to them as their time is.
        let scale = if stored > 0 {
            (waited as f64 / stored as f64).max(1.0)
        } else {
            1.0
        };
        let idle = ((b.gpu_idle_estimate_ns as f64 * scale) as i64).min(span);
        let scaled = waits
            .iter()
            .flatten()
            .any(|c| c.estimated_calls() > c.calls);
        let est = if scaled { "~" } else { "" };
        // A thread asleep more than it works between calls has nothing to launch (a server
        // waiting for requests): the GPU idles for want of work, not because of the waits.
        if per_s < MIN_SYNCS_PER_S
            || (waited as f64) < MIN_WAIT_SHARE * span as f64
            || (idle as f64) < idle_floor(waited, span) * span as f64
            || asleep >= o.on_cpu_ns
        {
            continue;
        }
        let launches = b
            .class(CallClass::Launch)
            .map_or(0, |c| c.estimated_calls());
        out.push(
            Finding {
                detector: "sync_storm",
                node: b.node.clone(),
                time_lost_ns: idle,
                severity: severity(idle, ctx.node_span_ns(&b.node)),
                summary: format!("{} host waits/s on {} (tid {tid}): {est}{reads} device-to-host reads and {est}{syncs} syncs, GPU idle {est}{} ({} of its span){}", per_s.round(), b.comm, d(idle), pct(idle, b.span_ns), if scaled { " (estimated from the stored calls: the probes were sampled)" } else { "" }),
                root_cause: "Sync storm: the step reads device values on the host (.item(), .cpu(), .numpy(), printing a tensor), and each read waits for the GPU to drain".into(),
                explanation: format!(
                    "{} (pid {}, tid {tid}) waited for the GPU {} times ({reads} device-to-host copies, which wait for the stream before copying, and {syncs} synchronisations) against {launches} kernel launches, {} in all. After each wait the GPU has nothing queued until the thread launches again: the process's GPU had no outstanding work for an estimated {} ({} of the span).",
                    b.comm, b.pid, syncs + reads, d(waited), d(idle), pct(idle, b.span_ns)
                ),
                timeline: vec![
                    step("CUDA", "cudaMemcpyAsync", format!("{reads} device-to-host reads and {syncs} syncs, {} waiting", d(waited)), waited),
                    step("GPU", "idle", "queue drained after every read; host and GPU serialised".into(), idle),
                ],
                recommendations: vec![
                    "Find the host reads of device tensors in the step (.item(), .cpu(), .numpy(), bool(tensor), print) with torch.cuda.set_sync_debug_mode('warn').".into(),
                    "Keep metrics on the GPU and read them every N steps; replace data-dependent Python branches with tensor ops (torch.where).".into(),
                    "Where a host value is needed, copy asynchronously (non_blocking=True into pinned memory) and wait on a CUDA event later.".into(),
                ],
                // Each class's calls and time, and the process's GPU idle estimate scaled as
                // the waits' time is (the summary's figure is gpu_idle_scaled_ns).
                evidence_sql: format!(
                    "WITH {} SELECT q.*, gpu_idle.idle_ns AS gpu_idle_ns, round(gpu_idle.idle_ns * greatest(sum(q.scaled_ns) OVER () / sum(q.stored_ns) OVER (), 1))::BIGINT AS gpu_idle_scaled_ns FROM ({}) q CROSS JOIN gpu_idle ORDER BY q.scaled_ns DESC",
                    super::gpu_idle_ctes(ctx, &b.node, b.pid),
                    waits_sql(ctx, &b.node, b.pid, tid, b.scaling(), true)
                ),
            }
            .into_chain()
            .at(crate::sites::Scope::thread(&b.node, b.pid, tid, &[CallClass::Sync, CallClass::CopyD2h], "host waits")),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::detectors::testutil::chains_of;
    use causeway_demo::Scenario;

    #[test]
    fn fires_on_per_step_item_calls() {
        let c = chains_of(Scenario::SyncStorm, false, "sync_storm");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(c[0].summary.contains("syncs/s"));
    }

    #[test]
    fn one_sync_per_step_is_healthy() {
        assert!(chains_of(Scenario::SyncStorm, true, "sync_storm").is_empty());
    }
}
