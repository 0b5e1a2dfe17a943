//! `gpu_bound`: the thread that feeds the GPU spends most of its busy time waiting for the GPU,
//! and a few of those waits are far longer than its usual one: oversized work (a long prefill,
//! a huge batch, one slow kernel) holds the thread, and everything queued behind it, for that
//! long. The host is not the bottleneck; the device work is.
//!
//! Trigger (from the thread's time budget and its calls): waits for the GPU (synchronisations,
//! and device-to-host copies, which wait for the stream first; where sampled probes did not
//! store the call, a sleep that began right after a launch) take at least half of the thread's
//! busy time (its span less the time it slept outside GPU calls), and at least one of them
//! lasts at least 100 ms (a stall, [`crate::budget::STALL_MIN_NS`]) and 10x the thread's median
//! wait in that call (for a sleep, the largest median of its wait calls: the engine's "slow"
//! rule).
//! Not where the trace measures the device's own timeline and a device of the process sat idle
//! for 30% of the window or more: the waits were for a dependency then (`device_idle`).
//! Time lost: what those long waits took beyond the median wait: the time the thread, and the
//! work queued behind it, was held. Severity: the common rule.
//! What precedes them: the launches the thread queued since its previous wait, the largest grid
//! first (with the kernel's name where the trace names it).
//! Recommendation: split the oversized work (chunked prefill, smaller batches), or give it its
//! own stream or instance so it does not hold the rest.

use std::sync::LazyLock;

use causeway_store::StoreError;
use causeway_store::catalog::{self, SYNCS_SQL};

use super::{Finding, Input, d, lit, severity, step, thread_budgets};
use crate::base::errors::duck;
use crate::budget::{CallClass, STALL_MIN_NS};
use crate::chains::Chain;
use crate::opsets::LAUNCH_NAMES;

/// A long wait is at least this many times the thread's median wait in the same call.
const SLOW_FACTOR: i64 = 10;

/// Measured idle share of the window (percent) from which the device is not the bottleneck,
/// whatever the host waited for (`device_idle`'s HIGH).
const MEASURED_IDLE_PCT: f64 = 30.0;

/// Whether the trace's device timeline shows a device of the process idle for at least
/// [`MEASURED_IDLE_PCT`] of the window: the host's long waits were then for a dependency (a
/// stream's event, a collective's peers), not for device work, and `device_idle` says which.
fn measured_idle(inp: &Input<'_>, node: &str, pid: u32) -> bool {
    inp.devices.iter().any(|d| {
        d.node == node
            && d.pid == pid
            && d.gpu_idle_measured_pct
                .is_some_and(|p| p >= MEASURED_IDLE_PCT)
    })
}

/// Copy calls, as an SQL list (a device-to-host copy waits for its stream first).
pub(crate) static COPIES_SQL: LazyLock<String> = LazyLock::new(|| {
    catalog::OPS
        .iter()
        .filter(|o| CallClass::of(o.id, 2) == CallClass::CopyD2h)
        .map(|o| lit(o.name))
        .collect::<Vec<_>>()
        .join(", ")
});

/// The long waits of one thread in the window, longest first, each with the thread's median
/// wait in that call (for a sleep, the largest of its calls' medians) and the launches it
/// queued since its previous wait (the detector reads its finding from these rows). A wait is a stored
/// synchronisation or device-to-host copy, or a sleep that began right after a launch (the
/// thread's last stored call) outside any stored call: where sampled probes did not store the
/// wait call, the sleep is what remains of it. Another sleep outside stored calls is a wait
/// where its process's kernel histogram (kept in every timed mode, aggregate too) counted a
/// wait call as long as the sleep in its window: the call the probe mode did not store.
/// Parameters: $1 node, $2 tid, $3 and $4 the window, $5 the pid. A stored call
/// with other calls of its thread inside it is not one call (a sampled probe paired its entry
/// with a later exit) and is left out.
static WAITS_SQL: LazyLock<String> = LazyLock::new(|| {
    let launches = LAUNCH_NAMES.map(lit).join(", ");
    let copies = COPIES_SQL.as_str();
    let gpu = "('CUDA', 'DRIVER', 'GRAPH', 'NCCL')";
    format!(
        "WITH calls AS (SELECT timestamp, op, duration, median(duration) OVER (PARTITION BY op) AS median_ns FROM events WHERE node = $1 AND tid = $2 AND timestamp BETWEEN $3 AND $4 AND (op IN ({SYNCS_SQL}) OR (op IN ({copies}) AND arg1 = 2))), \
base AS (SELECT coalesce(max(median_ns), 0) AS m FROM calls), \
acts AS (SELECT timestamp, op, duration FROM events WHERE node = $1 AND tid = $2 AND timestamp BETWEEN $3 AND $4 AND op NOT IN ('sched_switch', 'sched_wakeup')), \
sl AS (SELECT s.timestamp, least(s.duration, $4 - s.timestamp) AS duration, (SELECT arg_max(a.op, a.timestamp) FROM acts a WHERE a.timestamp <= s.timestamp) AS last_op, (SELECT arg_max(a.timestamp + a.duration, a.timestamp) FROM acts a WHERE a.timestamp <= s.timestamp) AS last_end FROM events s WHERE s.node = $1 AND s.tid = $2 AND s.op = 'sched_switch' AND s.arg1 = 1 AND s.timestamp BETWEEN $3 AND $4 AND s.duration >= {STALL_MIN_NS}), \
sleeps AS (SELECT timestamp, 'asleep after ' || last_op AS op, duration, (SELECT m FROM base) AS median_ns FROM sl WHERE last_op IN ({launches}) AND last_end <= timestamp), \
hs AS (SELECT s.timestamp, s.duration, (SELECT arg_max(o.op, h.count) FROM op_histograms h JOIN ops o ON o.op_id = h.op_id WHERE h.node = $1 AND h.pid = $5 AND (o.op IN ({SYNCS_SQL}) OR o.op IN ({copies})) AND s.timestamp >= h.window_start_ns AND s.timestamp < h.window_end_ns AND h.log2_bucket BETWEEN floor(log2(s.duration)) AND floor(log2(s.duration)) + 1) AS hop FROM sl s WHERE NOT (coalesce(s.last_op IN ({launches}), false) AND s.last_end <= s.timestamp) AND NOT EXISTS (SELECT 1 FROM calls c WHERE c.timestamp <= s.timestamp AND c.timestamp + c.duration >= s.timestamp + s.duration)), \
counted AS (SELECT hs.timestamp, hop || '{NOT_STORED}' AS op, hs.duration, coalesce((SELECT max(c.median_ns) FROM calls c WHERE c.op = hs.hop), (SELECT m FROM base)) AS median_ns FROM hs WHERE hop IS NOT NULL), \
w AS (SELECT * FROM calls WHERE NOT EXISTS (SELECT 1 FROM events o WHERE o.node = $1 AND o.tid = $2 AND o.source IN {gpu} AND o.timestamp > calls.timestamp AND o.timestamp < calls.timestamp + calls.duration) UNION ALL SELECT * FROM sleeps UNION ALL SELECT * FROM counted), \
long AS (SELECT w.*, coalesce((SELECT max(c.timestamp + c.duration) FROM calls c WHERE c.timestamp + c.duration <= w.timestamp), $3) AS prev_end FROM w WHERE w.duration >= {STALL_MIN_NS} AND w.duration >= {SLOW_FACTOR} * w.median_ns) \
SELECT timestamp, op, duration, median_ns::BIGINT AS median_ns, (duration - median_ns)::BIGINT AS held_ns, \
(SELECT count(*) FROM events l WHERE l.node = $1 AND l.tid = $2 AND l.op IN ({launches}) AND l.timestamp BETWEEN long.prev_end AND long.timestamp) AS launches_before, \
(SELECT max(l.arg1) FROM events l WHERE l.node = $1 AND l.tid = $2 AND l.op IN ({launches}) AND l.timestamp BETWEEN long.prev_end AND long.timestamp) AS largest_grid, \
(SELECT arg_max(k.kernel, k.arg1) FROM kernel_launches k WHERE k.node = $1 AND k.tid = $2 AND k.timestamp BETWEEN long.prev_end AND long.timestamp) AS largest_kernel \
FROM long WHERE median_ns > 0 ORDER BY duration DESC LIMIT 20"
    )
});

/// The evidence: the detector's own query ([`WAITS_SQL`]) for the thread and window, so every
/// figure of the summary comes back from its rows (a shorter query of its own once disagreed
/// with the detector on a healthy twin's wait).
fn evidence(node: &str, pid: u32, tid: u32, from: i64, until: i64) -> String {
    // The node last: its literal is not searched for the others.
    WAITS_SQL
        .replace("$2", &tid.to_string())
        .replace("$3", &from.to_string())
        .replace("$4", &until.to_string())
        .replace("$5", &pid.to_string())
        .replace("$1", &lit(node))
}

/// Whether the kernel's histograms of `pid` hold a wait call (a sync or copy) as long as a
/// stall: a wait the probe mode did not store (aggregate, or sampled between slices).
fn long_in_histograms(
    ctx: &crate::facts::Ctx<'_>,
    node: &str,
    pid: u32,
) -> Result<bool, StoreError> {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        let copies = COPIES_SQL.as_str();
        // A bucket holds [2^b, 2^(b+1)) ns: one that reaches a stall.
        let bucket = (STALL_MIN_NS as f64).log2().floor() as i64;
        format!(
            "SELECT count(*)::BIGINT FROM op_histograms h JOIN ops o ON o.op_id = h.op_id WHERE h.node = ? AND h.pid = ? AND h.log2_bucket >= {bucket} AND (o.op IN ({SYNCS_SQL}) OR o.op IN ({copies}))"
        )
    });
    let n: i64 = ctx
        .r
        .prepare_trusted(SQL.as_str())?
        .query_row(causeway_store::duckdb::params![node, pid], |r| r.get(0))
        .map_err(duck(
            ctx.r,
            "looking for long waits in the kernel's histograms",
        ))?;
    Ok(n > 0)
}

/// How a wait found by its histogram alone is named after its call.
const NOT_STORED: &str = " (not stored: its histogram)";

/// One long wait (a row of [`WAITS_SQL`]).
type Wait = (i64, String, i64, i64, i64, i64, Option<i64>, Option<String>);

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let (from, until) = (ctx.window.from_ns, ctx.window.until_ns);
    let mut out = Vec::new();
    for b in thread_budgets(inp) {
        let tid = b.tid.unwrap_or_default();
        let waiting = b.waiting_ns();
        if waiting == 0 || measured_idle(inp, &b.node, b.pid) {
            continue;
        }
        // The waits' query is this detector's cost (half a second on 10M events): a thread
        // whose waits could not make half its busy time even if every sleep outside its calls
        // were one (the sleeps the query adds are some of those) is not asked.
        let o = &b.outside;
        let asleep_at_most = o.blocked_other_ns + o.blocked_net_ns + o.blocked_io_ns;
        if (waiting + asleep_at_most) * 2 < b.span_ns {
            continue;
        }
        // Nor one whose process has no stored wait, copy or sleep as long as a stall.
        let longest_wait = ctx
            .ops
            .iter()
            .filter(|x| x.node == b.node && x.pid == b.pid)
            .filter(|x| {
                catalog::op_by_name(&x.op).is_some_and(|c| {
                    matches!(CallClass::of(c.id, 2), CallClass::Sync | CallClass::CopyD2h)
                })
            })
            .map(|x| x.max_ns)
            .max()
            .unwrap_or(0);
        // The thread's own off-CPU stretches (the facts' ops hold no sched_switch rows).
        let long_sleep = ctx
            .switches
            .of(&b.node, tid)
            .iter()
            .any(|s| s.end - s.start >= STALL_MIN_NS);
        if longest_wait < STALL_MIN_NS && !long_sleep && !long_in_histograms(ctx, &b.node, b.pid)? {
            continue;
        }
        let waits: Result<Vec<Wait>, StoreError> =
            ctx.r.prepare_trusted(WAITS_SQL.as_str()).and_then(|mut q| {
                q.query_map(
                    causeway_store::duckdb::params![b.node, tid, from, until, b.pid],
                    causeway_store::row,
                )
                .and_then(|rows| rows.collect())
                .map_err(duck(ctx.r, "reading the longest waits for the GPU"))
            });
        // A reader under a memory or time limit (a live server's) can refuse this query: the
        // thread is left out of this detector rather than failing the whole analysis.
        let waits = match waits {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(tid, error = %e, "gpu_bound: the thread's waits could not be read; not judged");
                continue;
            }
        };
        // The longest wait whose preceding launches were stored (sampled launch probes can
        // miss them), else the longest.
        // Sleeps after a launch, and those a histogram places in a call, are waits the budget
        // could not place in a stored call (it counts them as asleep outside calls).
        let asleep: i64 = waits
            .iter()
            .filter(|w| w.1.starts_with("asleep") || w.1.ends_with(NOT_STORED))
            .map(|w| w.2)
            .sum();
        let waiting = waiting + asleep;
        let busy = b.span_ns - o.blocked_other_ns - o.blocked_net_ns - o.blocked_io_ns + asleep;
        if waiting * 2 < busy {
            continue;
        }
        let Some(longest) = waits.iter().find(|w| w.5 > 0).or(waits.first()) else {
            continue;
        };
        let held: i64 = waits.iter().map(|w| w.4).sum();
        let (at, op, dur, median, _, launches, grid, kernel) = longest;
        let queued = match (grid, kernel) {
            (Some(g), Some(k)) => {
                format!("{launches} launches queued before it, the largest {k} ({g} blocks)")
            }
            (Some(g), None) => {
                format!("{launches} launches queued before it, the largest {g} blocks")
            }
            _ if *launches > 0 => format!("{launches} launches queued before it"),
            _ => "no launch stored since its previous wait".to_string(),
        };
        let listed = waits
            .iter()
            .map(|w| format!("{} {} at +{}", w.1, d(w.2), d(w.0 - from)))
            .collect::<Vec<_>>()
            .join(", ");
        out.push(
            Finding {
                detector: "gpu_bound",
                node: b.node.clone(),
                time_lost_ns: held,
                severity: severity(held, ctx.node_span_ns(&b.node)),
                summary: format!(
                    "{} (tid {tid}) waited for the GPU far longer than usual {}: {} in all beyond its median wait; {op} {} at +{} (median {}), after {queued}",
                    b.comm,
                    match waits.len() {
                        1 => "once".to_string(),
                        n => format!("{n} times"),
                    },
                    d(held),
                    d(*dur),
                    d(at - from),
                    d(*median)
                ),
                root_cause: "GPU-bound: the feeding thread spends most of its busy time waiting for the GPU, and oversized work queued before a few waits holds it (and every request or step queued behind it) far longer than a usual step".into(),
                explanation: format!(
                    "{} (pid {}, tid {tid}) spent {} of its {} busy time (its span less {} asleep outside GPU calls, other than right after a launch) waiting for the GPU: in synchronisations and device-to-host copies, or asleep right after a launch where sampled probes did not store the wait call. {} of those waits lasted at least {} and {SLOW_FACTOR}x its median wait in that call: {listed}. Beyond the median they held the thread {} in all: the GPU was busy with the work queued before them ({queued}), and nothing else this thread serves could proceed meanwhile. The host is not the bottleneck here; the device work is.",
                    b.comm,
                    b.pid,
                    d(waiting),
                    d(busy),
                    d(b.span_ns - busy),
                    waits.len(),
                    d(STALL_MIN_NS),
                    d(held)
                ),
                timeline: vec![
                    step("CUDA", "cudaLaunchKernel", queued.clone(), 0),
                    step("CUDA", op, format!("waited {} (median {})", d(*dur), d(*median)), *dur),
                    step("HOST", "blocked", format!("{} long waits for the GPU, {} beyond the median", waits.len(), d(held)), held),
                ],
                recommendations: vec![
                    "Split the oversized work so that no single step holds the GPU for long: chunked prefill (vLLM --enable-chunked-prefill, a max-num-batched-tokens limit), smaller or bucketed batches.".into(),
                    "Keep latency-sensitive work from queueing behind it: a separate stream, instance or GPU for the large requests, or admission control on their size.".into(),
                ],
                evidence_sql: evidence(&b.node, b.pid, tid, from, until),
            }
            .into_chain(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use causeway_store::Reader;

    use crate::chains::{Chain, ChainQuery};
    use causeway_demo::Scenario;
    use causeway_demo::model::{Gen, MS, T0, Thread, US};
    use causeway_demo::scenarios::NodeTrace;

    /// 200 steps of 10 launches (64 blocks) and a 20 ms stream sync; the steps in `long` launch
    /// one 4,096-block kernel and their sync takes 600 ms; `between` of host work (on the CPU)
    /// separates the steps.
    fn explained(long: &[i64], between: i64) -> Vec<Chain> {
        explained_full(long, between, false, false)
    }

    /// [`explained`]; with `unstored`, the long steps' calls were not stored (their ops in
    /// aggregate or between sampled slices: only the thread's 600 ms sleep remains), and with
    /// `histogram` the kernel's histogram counted those syncs.
    fn explained_full(long: &[i64], between: i64, unstored: bool, histogram: bool) -> Vec<Chain> {
        let mut g = Gen::new(7);
        g.process(4242, 1, "python3", "python3 serve.py");
        let t = Thread::new(4242, 4242, "python3", 0);
        let mut at = T0;
        for step in 0..200 {
            if unstored && long.contains(&step) {
                g.switch(&t, at, 600 * MS, 0, 1);
                at += 600 * MS + between;
                continue;
            }
            for i in 0..10 {
                let grid = if long.contains(&step) && i == 9 {
                    4096
                } else {
                    64
                };
                g.ev(&t, at, 5 * US, "cudaLaunchKernel", 0, grid);
                at += 10 * US;
            }
            let sync = if long.contains(&step) {
                600 * MS
            } else {
                20 * MS
            };
            g.ev(&t, at, sync, "cudaStreamSynchronize", 0, 0);
            at += sync + between;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("t.duckdb");
        let nodes = vec![NodeTrace {
            node: "demo-node".into(),
            trace: g,
        }];
        causeway_demo::write_nodes(&p, Scenario::Healthy, nodes).expect("trace");
        if histogram {
            // 600 ms falls in the bucket [2^29, 2^30) ns.
            let sync = causeway_store::catalog::op_by_name("cudaStreamSynchronize").unwrap();
            let c = causeway_store::duckdb::Connection::open(&p).expect("open");
            c.execute(
                "INSERT INTO op_histograms VALUES ('demo-node', 4242, ?, ?, ?, 29, ?)",
                causeway_store::duckdb::params![sync.id, T0, at, long.len() as i64],
            )
            .expect("histogram");
        }
        let r = Reader::open(&p).expect("reader");
        crate::engine::explain(&r, &ChainQuery::default())
            .expect("explain")
            .chains
            .into_iter()
            .filter(|c| c.detector == "gpu_bound")
            .collect()
    }

    #[test]
    fn two_oversized_steps_hold_the_thread_beyond_its_median_wait() {
        let c = explained(&[50, 150], 0);
        assert_eq!(c.len(), 1, "{c:#?}");
        // By design: two syncs of 600 ms against a median of 20 ms.
        assert_eq!(c[0].time_lost_ns, 2 * 580 * MS);
        assert!(
            c[0].summary.contains("the largest 4096 blocks"),
            "{}",
            c[0].summary
        );
        assert!(explained(&[], 0).is_empty());
    }

    #[test]
    fn a_long_wait_only_the_kernels_histogram_counted_is_found_from_the_sleep_inside_it() {
        let c = explained_full(&[50, 150], 0, true, true);
        assert_eq!(c.len(), 1, "{c:#?}");
        // The sleeps are 600 ms against a median sync of 20 ms.
        assert_eq!(c[0].time_lost_ns, 2 * 580 * MS);
        assert!(
            c[0].summary
                .contains("cudaStreamSynchronize (not stored: its histogram) 600.00 ms"),
            "{}",
            c[0].summary
        );
        // Without the histogram's count a sleep after a sync is no wait for the GPU.
        assert!(explained_full(&[50, 150], 0, true, false).is_empty());
    }

    #[test]
    fn a_thread_busy_on_the_host_is_not_gpu_bound() {
        // 100 ms of host work a step against 20 ms of waiting: the GPU is not what it waits for.
        assert!(explained(&[50, 150], 100 * MS).is_empty());
    }
}
