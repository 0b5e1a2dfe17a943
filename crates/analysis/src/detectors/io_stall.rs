//! `io_stall`: a workload thread sleeps on its own block I/O (synchronous checkpoint writes,
//! dataset reads on the training thread).
//!
//! Trigger: a thread that makes GPU calls (or, on a node where no GPU call was stored, e.g. a
//! sampled excerpt, any thread that is not a kernel thread or the tracer) is off the CPU
//! overlapping its own block I/O requests for >= 10 ms and >= 2% of the node's span.
//! Time lost: that overlap. Severity: the common rule.
//! Recommendation: write checkpoints asynchronously; prefetch reads in workers; faster storage.

use causeway_store::StoreError;

use super::{Finding, Input, d, is_system_thread, lit, pct, severity, step};
use crate::chains::Chain;

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let mut out = Vec::new();
    for w in inp.waits.iter().filter(|w| w.io_requests > 0) {
        let Some(t) = ctx
            .threads
            .iter()
            .find(|t| t.node == w.node && t.tid == w.tid && t.pid == w.pid)
        else {
            continue;
        };
        let node_has_gpu = ctx
            .threads
            .iter()
            .any(|x| x.node == w.node && x.gpu_calls > 0);
        let in_scope = t.gpu_calls > 0 || (!node_has_gpu && !is_system_thread(&t.comm));
        let span = ctx.node_span_ns(&w.node);
        if !in_scope || w.io_wait_ns < 10_000_000 || (w.io_wait_ns as f64) < 0.02 * span as f64 {
            continue;
        }
        let reads = ctx.op(&w.node, w.pid, "block_read");
        let writes = ctx.op(&w.node, w.pid, "block_write");
        let (kind, main) = match (reads, writes) {
            (Some(r), Some(wr)) if wr.total_ns > r.total_ns => ("writes", wr),
            (Some(r), _) => ("reads", r),
            (None, Some(wr)) => ("writes", wr),
            (None, None) => continue,
        };
        let caveat = if t.gpu_calls == 0 {
            " No GPU call was stored for this node (a sampled excerpt), so the thread is taken as the workload."
        } else {
            ""
        };
        out.push(
            Finding {
                detector: "io_stall",
                node: w.node.clone(),
                time_lost_ns: w.io_wait_ns,
                severity: severity(w.io_wait_ns, span),
                summary: format!("{} (tid {}) slept {} on its own block {kind} ({} of the trace)", t.comm, t.tid, d(w.io_wait_ns), pct(w.io_wait_ns, span)),
                root_cause: format!("I/O stall: the workload thread waits synchronously for block {kind} (p99 {}) instead of computing or launching", d(main.p99_ns)),
                explanation: format!(
                    "{} (pid {}, tid {}) issued {} block I/O requests ({} {}: p50 {}, p99 {}, {} in total) and was off the CPU for {} while its own requests were in flight.{caveat}",
                    t.comm, t.pid, t.tid, w.io_requests, main.count, main.op, d(main.p50_ns), d(main.p99_ns), super::super::fmt::bytes(main.arg0_sum), d(w.io_wait_ns)
                ),
                timeline: vec![
                    step("IO", &main.op, format!("{} requests, p99 {}", main.count, d(main.p99_ns)), main.total_ns),
                    step("HOST", "sched_switch", format!("{} asleep waiting for them", d(w.io_wait_ns)), w.io_wait_ns),
                    step("GPU", "idle", "no work launched while the thread sleeps on I/O".into(), w.io_wait_ns),
                ],
                recommendations: if kind == "writes" {
                    vec![
                        "Write checkpoints from a background thread or process (torch.distributed.checkpoint async_save, or copy state to CPU and save off the training thread).".into(),
                        "Checkpoint less often or shard it; put checkpoints on faster local storage and upload later.".into(),
                    ]
                } else {
                    vec![
                        "Read the dataset in DataLoader workers (num_workers > 0, prefetch_factor) rather than on the training thread.".into(),
                        "Cache or pre-shard the dataset on local NVMe; check the device with iostat -x.".into(),
                    ]
                },
                // The thread's stretches with its own requests in flight (requests in flight
                // together joined) and its off-CPU time inside each: the summary's time is
                // total_asleep_ns (a launching thread's start-up reads left out, as above).
                evidence_sql: format!(
                    "WITH io AS (SELECT timestamp AS a, timestamp + duration AS b, max(timestamp + duration) OVER (ORDER BY timestamp, duration ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach FROM events WHERE node = {node} AND tid = {tid} AND source = 'IO' AND timestamp >= {from}), k AS (SELECT a, b, sum(CASE WHEN reach IS NULL OR a > reach THEN 1 ELSE 0 END) OVER (ORDER BY a, b ROWS UNBOUNDED PRECEDING) AS k FROM io), f AS (SELECT min(a) AS a, max(b) AS b, count(*) AS requests FROM k GROUP BY k), s AS (SELECT timestamp AS a, timestamp + duration AS b FROM events WHERE node = {node} AND tid = {tid} AND op = 'sched_switch') SELECT f.a AS in_flight_from, f.b - f.a AS in_flight_ns, f.requests, sum(least(s.b, f.b) - greatest(s.a, f.a)) AS asleep_ns, sum(sum(least(s.b, f.b) - greatest(s.a, f.a))) OVER () AS total_asleep_ns FROM f JOIN s ON s.a < f.b AND s.b > f.a GROUP BY ALL ORDER BY asleep_ns DESC LIMIT 50",
                    node = lit(&w.node),
                    tid = w.tid,
                    from = ctx
                        .timelines
                        .get(&w.node)
                        .and_then(|tl| tl.steady_from.get(&w.tid))
                        .copied()
                        .unwrap_or(i64::MIN)
                ),
            }
            .into_chain(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::detectors::testutil::{chains_of, ev, explain_written};
    use causeway_demo::Scenario;

    #[test]
    fn fires_on_synchronous_checkpoints() {
        let c = chains_of(Scenario::IoStall, false, "io_stall");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(c[0].summary.contains("block writes"), "{}", c[0].summary);
    }

    /// Four writes in flight together over one 200 ms sleep are 200 ms of stall, not 800 ms;
    /// and a second asleep inside a device-to-host copy is not the disk's (the engine once added
    /// each request's overlap and capped the sum at all the thread's off-CPU time).
    #[test]
    fn requests_in_flight_together_count_their_sleep_once() {
        const T0: i64 = 1_700_000_000_000_000_000;
        const MS: i64 = 1_000_000;
        let e = explain_written(|w| {
            let mut t = T0;
            while t < T0 + 4_000 * MS {
                if t == T0 + 1_500 * MS {
                    for _ in 0..4 {
                        w.append(&ev(t, 200 * MS, "block_write", 4 << 20, 0))
                            .unwrap();
                    }
                    w.append(&ev(t, 200 * MS, "sched_switch", 0, 1)).unwrap();
                    t += 201 * MS;
                } else if t == T0 + 2_500 * MS {
                    w.append(&ev(t, 1_000 * MS, "cudaMemcpy", 64 << 20, 2))
                        .unwrap();
                    w.append(&ev(t + 10 * MS, 980 * MS, "sched_switch", 0, 1))
                        .unwrap();
                    t += 1_001 * MS;
                } else {
                    w.append(&ev(t, 20_000, "cudaLaunchKernel", 1, 0)).unwrap();
                    t += MS;
                }
            }
        });
        let c = e
            .chains
            .iter()
            .find(|c| c.detector == "io_stall")
            .unwrap_or_else(|| panic!("{:#?}", e.chains));
        assert_eq!(c.time_lost_ns, 200 * MS, "{}", c.summary);
    }

    #[test]
    fn background_checkpoints_and_worker_reads_are_not_stalls() {
        assert!(chains_of(Scenario::IoStall, true, "io_stall").is_empty());
        assert!(chains_of(Scenario::Healthy, false, "io_stall").is_empty());
    }
}
