//! `host_memory_pressure`: the host runs short of memory: the OOM killer fires, or traced
//! processes allocate pages at a sustained high rate.
//!
//! Trigger: any oom_kill / pod_oom_kill event; or GPU-calling threads reclaiming memory
//! themselves (`mm_reclaim`: direct, or in their memory cgroup at its limit) for at least
//! 20 ms and 2% of the node's span; or page allocations of at least 4 GiB/s over the node's
//! span in at least 1,000 allocation events (busy DataLoader workers reach 1-2 GiB/s
//! healthily). Input workers that reclaim while the trainer starves are
//! `dataloader_starvation`'s trigger, handed over here ([`starved_input`]).
//! Time lost: for OOM kills, the time from the first kill to the end of the window (the
//! killed process's work is gone); for reclaim, the GPU-calling threads' time in it; otherwise
//! the blocked off-CPU time of GPU-calling threads, an upper bound (stated in the explanation).
//! Severity: HIGH on any OOM kill, else the common rule.
//! Recommendation: lower host memory use (workers, pinned buffers, prefetch), add limits.

use std::sync::LazyLock;

use causeway_store::StoreError;
use causeway_store::duckdb;

use super::dataloader_starvation::Starved;
use super::{Finding, Input, d, lit, pct, severity, step};
use crate::base::errors::duck;
use crate::chains::{Chain, Severity};
use crate::fmt::{bytes, thousands};
use crate::opsets::named;

static OOM_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT node, min(timestamp), count(*)::BIGINT, min(arg0) FROM event_data
WHERE {} AND timestamp BETWEEN ? AND ? AND (?::VARCHAR = '' OR node = ?::VARCHAR)
GROUP BY node ORDER BY node",
        named(&["oom_kill", "pod_oom_kill"])
    )
});

/// Reclaim by GPU-calling threads that is a finding: at least this much, and 2% of the span.
const OWN_RECLAIM_MIN_NS: i64 = 20_000_000;

static RECLAIM_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT node, pid::UBIGINT, tid::UBIGINT, count(*)::UBIGINT, sum(duration)::BIGINT,
  sum(arg0)::BIGINT, count(*) FILTER (WHERE arg1 = 1)::UBIGINT FROM event_data
WHERE {} AND timestamp BETWEEN ? AND ? AND (?::VARCHAR = '' OR node = ?::VARCHAR)
GROUP BY ALL ORDER BY ALL",
        named(&["mm_reclaim"])
    )
});

/// The memory reclaim one thread did itself in the window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reclaim {
    /// Node.
    pub node: String,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Reclaims.
    pub count: u64,
    /// Time spent in them (ns).
    pub ns: i64,
    /// Bytes they freed.
    pub bytes: i64,
    /// Reclaims in the thread's memory cgroup at its limit (the rest: host-wide direct reclaim).
    pub memcg: u64,
}

impl Reclaim {
    fn add(&mut self, o: &Reclaim) {
        self.count += o.count;
        self.ns = self.ns.saturating_add(o.ns);
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.memcg += o.memcg;
    }

    /// "in their memory cgroup at its limit" / "host-wide (direct reclaim)" / both, by count;
    /// `limit`: the limit in words where it was recorded ("" where not).
    pub fn where_words(&self, limit: &str) -> String {
        match (self.memcg, self.count - self.memcg) {
            (_, 0) if !limit.is_empty() => {
                format!("in their memory cgroup, which was at its limit of {limit}")
            }
            (_, 0) => "in their memory cgroup, which was at its limit".into(),
            (0, _) => "host-wide (direct reclaim: the host was short of memory)".into(),
            (m, h) => format!(
                "{} in their memory cgroup at its limit, {} host-wide",
                thousands(m),
                thousands(h)
            ),
        }
    }
}

/// Reclaim per thread in the window (every node, or the query's).
pub fn reclaims(ctx: &crate::facts::Ctx<'_>) -> Result<Vec<Reclaim>, StoreError> {
    ctx.r
        .prepare_trusted(RECLAIM_SQL.as_str())?
        .query_map(
            duckdb::params![ctx.window.from_ns, ctx.window.until_ns, ctx.node, ctx.node],
            |row| {
                Ok(Reclaim {
                    node: row.get(0)?,
                    pid: row.get::<_, u64>(1)? as u32,
                    tid: row.get::<_, u64>(2)? as u32,
                    count: row.get(3)?,
                    ns: row.get(4)?,
                    bytes: row.get(5)?,
                    memcg: row.get(6)?,
                })
            },
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(ctx.r, "reading memory reclaim"))
}

/// First schema with `processes.memory_limit`.
const LIMIT_SCHEMA: u32 = 11;

const LIMITS_SQL: &str = "SELECT pid::UBIGINT, memory_limit FROM processes WHERE node = ? AND memory_limit > 0 ORDER BY pid";

/// The memory limits `pids` on `node` ran under, distinct, smallest first ("" when none was
/// recorded), as words: "320 MiB", "256 MiB and 320 MiB".
pub fn limit_words(
    ctx: &crate::facts::Ctx<'_>,
    node: &str,
    pids: &std::collections::BTreeSet<u32>,
) -> Result<String, StoreError> {
    if ctx.r.schema_version() < LIMIT_SCHEMA {
        return Ok(String::new());
    }
    let rows: Vec<(u64, u64)> = ctx
        .r
        .prepare_trusted(LIMITS_SQL)?
        .query_map(duckdb::params![node], causeway_store::row)
        .and_then(|rows| rows.collect())
        .map_err(duck(ctx.r, "reading processes' memory limits"))?;
    let mut limits: Vec<u64> = rows
        .into_iter()
        .filter(|(pid, _)| pids.contains(&(*pid as u32)))
        .map(|(_, l)| l)
        .collect();
    limits.sort_unstable();
    limits.dedup();
    let words: Vec<String> = limits.iter().map(|l| bytes(*l as i64)).collect();
    Ok(match words.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    })
}

/// The reclaim of the given processes on `node`, summed.
pub fn reclaim_of(all: &[Reclaim], node: &str, pids: &std::collections::BTreeSet<u32>) -> Reclaim {
    let mut sum = Reclaim {
        node: node.into(),
        ..Reclaim::default()
    };
    for r in all
        .iter()
        .filter(|r| r.node == node && pids.contains(&r.pid))
    {
        sum.add(r);
    }
    sum
}

/// Block reads of `pids` on `node`: (requests, bytes, ns in flight).
pub fn disk_reads(
    ctx: &crate::facts::Ctx<'_>,
    node: &str,
    pids: &std::collections::BTreeSet<u32>,
) -> (u64, i64, i64) {
    ctx.ops
        .iter()
        .filter(|o| o.node == node && o.op == "block_read" && pids.contains(&o.pid))
        .fold((0, 0, 0), |a, o| {
            (
                a.0 + o.count,
                a.1.saturating_add(o.arg0_sum),
                a.2.saturating_add(o.total_ns),
            )
        })
}

/// Disk reads from which a page cache that frees as much as it takes in cannot be chance.
const REVOLVING_MIN_READ_BYTES: i64 = 32 << 20;

/// The page cache is a revolving door: threads at their memory cgroup's limit freed at least
/// half of what they read from disk (`read_bytes`, at least 32 MiB), so what they read does
/// not stay for the next epoch. Unlike a share of their time, this holds however slow the
/// disk is: there the reads, not the reclaim, take the workers' time.
pub fn revolving(rec: &Reclaim, read_bytes: i64) -> bool {
    rec.memcg > 0
        && read_bytes >= REVOLVING_MIN_READ_BYTES
        && rec.bytes.saturating_mul(2) >= read_bytes
}

/// The starvation's cause is memory: the input workers reclaim pages before they can allocate,
/// so the page cache cannot keep what they read (`dataloader_starvation` hands over).
pub fn starved_input(inp: &Input<'_>, s: &Starved<'_>, rec: &Reclaim) -> Chain {
    let ctx = inp.ctx;
    let Starved {
        w,
        t,
        lost,
        span,
        wpids,
        life,
    } = *s;
    let pids = s.pids();
    let (nreads, read_bytes, read_ns) = disk_reads(ctx, &w.node, wpids);
    let mut job = wpids.clone();
    job.insert(w.pid);
    let limit = limit_words(ctx, &w.node, &job).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "the job's memory limit could not be read");
        String::new()
    });
    let reread = if read_bytes > 0 && rec.bytes * 2 >= read_bytes {
        format!(
            " They freed {} while they read {} from disk: the page cache is emptied as fast as it fills, so what they read once is read from disk again.",
            bytes(rec.bytes),
            bytes(read_bytes)
        )
    } else {
        String::new()
    };
    Finding {
        detector: "host_memory_pressure",
        node: w.node.clone(),
        time_lost_ns: lost,
        severity: severity(lost, ctx.node_span_ns(&w.node)),
        summary: if revolving(rec, read_bytes) {
            format!(
                "{} (tid {}) slept {} waiting for input ({} of its span) while its {} input workers, at their memory limit, freed {} to read {} from disk",
                t.comm,
                t.tid,
                d(lost),
                pct(lost, span),
                wpids.len(),
                bytes(rec.bytes),
                bytes(read_bytes)
            )
        } else {
            format!(
                "{} (tid {}) slept {} waiting for input ({} of its span) while its {} input workers spent {} of their time reclaiming memory",
                t.comm,
                t.tid,
                d(lost),
                pct(lost, span),
                wpids.len(),
                pct(rec.ns, life)
            )
        },
        root_cause: "Memory pressure on the input pipeline: the job is at its memory limit (its cgroup's, or the host's), so the DataLoader workers free pages before each allocation and the page cache cannot keep the dataset; evicted samples are read from disk again".into(),
        explanation: format!(
            "{} (pid {}, tid {}) had {} gaps of 1 ms or more between GPU calls and slept {} in them with no socket or disk wait of its own. Its input workers (pids {pids}) reclaimed memory {} times {}, {} in all ({} of their {}), freeing {}, and issued {} block reads ({}, {} in flight).{reread}",
            t.comm,
            t.pid,
            t.tid,
            w.gaps,
            d(lost),
            thousands(rec.count),
            rec.where_words(&limit),
            d(rec.ns),
            pct(rec.ns, life),
            d(life),
            bytes(rec.bytes),
            thousands(nreads),
            bytes(read_bytes),
            d(read_ns),
        ),
        timeline: super::dataloader_starvation::with_the_wait(
            vec![step("HOST", "mm_reclaim", format!("input workers reclaiming memory {} ({} times, {} freed)", d(rec.ns), thousands(rec.count), bytes(rec.bytes)), rec.ns),
            step("IO", "block_read", format!("{} block reads, {}", thousands(nreads), bytes(read_bytes)), read_ns)],
            lost,
        ),
        recommendations: vec![
            format!("Raise the job's memory limit ({}the cgroup's memory.max, a pod's resources.limits.memory) above what it holds (pinned buffers, model, workers) plus the dataset's working set, or run where the host has that much free.", if limit.is_empty() { String::new() } else { format!("{limit} now: ") }),
            "Hold less inside the limit: fewer DataLoader workers or a smaller prefetch_factor, a smaller pinned-memory pool, no per-worker copies of the dataset.".into(),
            "Make the dataset fit: a compressed or smaller-resolution format, or shards read once per epoch in order; watch the cgroup's memory.events (max) and memory.stat (workingset_refault_file).".into(),
        ],
        // The workers' reclaim and reads, each row with the trainer's input wait (the
        // summary's figure is waiting_for_input_ns).
        evidence_sql: format!(
            "WITH {} SELECT e.pid, e.comm, e.op, CASE WHEN e.op = 'mm_reclaim' THEN e.arg1 END AS memcg, count(*) AS events, sum(e.duration) AS total_ns, sum(e.arg0) AS bytes, any_value(input_wait.waiting_for_input_ns) AS trainer_waiting_for_input_ns FROM events e CROSS JOIN input_wait WHERE e.node = {} AND e.op IN ('mm_reclaim', 'block_read') AND e.pid IN ({pids}) GROUP BY ALL ORDER BY total_ns DESC LIMIT 20",
            super::dataloader_starvation::input_wait_ctes(ctx, w),
            lit(&w.node)
        ),
    }
    .into_chain()
    .at(s.resumed(ctx))
}

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
        // Reclaim the GPU-calling threads did themselves: time they could not feed the GPU.
        let mut own = Reclaim::default();
        let mut own_pids = std::collections::BTreeSet::new();
        for r in inp.reclaims.iter().filter(|r| &r.node == node) {
            if ctx
                .threads
                .iter()
                .any(|t| t.node == r.node && t.pid == r.pid && t.tid == r.tid && t.gpu_calls > 0)
            {
                own.add(r);
                own_pids.insert(r.pid);
            }
        }
        let reclaiming = own.ns >= OWN_RECLAIM_MIN_NS && own.ns.saturating_mul(50) >= span;
        if oom.is_none() && !pressure && !reclaiming {
            continue;
        }
        let limit = limit_words(ctx, node, &own_pids)?;
        let (lost, sev) = match oom {
            Some((_, first, _, _)) => ((ctx.window.until_ns - first).max(0), Severity::High),
            None if reclaiming => (own.ns, severity(own.ns, span)),
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
                summary: [
                    oom.map(|_| "OOM kill".to_string()),
                    (own.count > 0).then(|| format!("GPU-calling threads spent {} reclaiming memory ({} reclaims, {} freed)", d(own.ns), thousands(own.count), bytes(own.bytes))),
                    (n > 0).then(|| format!("{} of page allocations ({}/s){}", bytes(b), bytes(rate as i64), top.as_ref().map(|t| format!(", mostly {t}")).unwrap_or_default())),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("; "),
                root_cause: if oom.is_none() && reclaiming {
                    "Memory pressure: the GPU-feeding threads' cgroup (or the host) is at its memory limit, so their allocations wait while the kernel frees pages".into()
                } else {
                    "Host memory pressure: traced processes allocate memory faster than the host can supply it".into()
                },
                explanation: format!(
                    "{}{}{}{}",
                    oom_text.clone().unwrap_or_default(),
                    if own.count > 0 { format!("GPU-calling threads reclaimed memory {} times {}, {} in all ({} of the span), freeing {}: an allocation that finds no free page waits while the kernel frees one. ", thousands(own.count), own.where_words(&limit), d(own.ns), pct(own.ns, span), bytes(own.bytes)) } else { String::new() },
                    if n > 0 { format!("Traced processes allocated {} in {n} page-allocation events over {} ({}/s){}. ", bytes(b), d(span), bytes(rate as i64), top.as_ref().map(|t| format!(", the largest share by {t}")).unwrap_or_default()) } else { String::new() },
                    if oom.is_some() { format!("Time lost is counted from the first kill to the end of the window ({}): the killed process's work and its restart.", d(lost)) } else if reclaiming { format!("Time lost is the GPU-calling threads' time in reclaim ({}): they could not feed the GPU meanwhile.", d(lost)) } else { format!("Time lost is an upper bound: the sleeping time of GPU-calling threads ({}).", d(lost)) }
                ),
                timeline: [
                    (n > 0).then(|| step("HOST", "mm_page_alloc", format!("{} at {}/s", bytes(b), bytes(rate as i64)), 0)),
                    (own.count > 0).then(|| step("HOST", "mm_reclaim", format!("GPU-calling threads reclaiming {} ({} times, {} freed)", d(own.ns), thousands(own.count), bytes(own.bytes)), own.ns)),
                    Some(step("HOST", "oom_kill", oom_text.unwrap_or_else(|| "no OOM kill".into()), if oom.is_some() { lost } else { 0 })),
                ]
                .into_iter()
                .flatten()
                .collect(),
                recommendations: vec![
                    "Reduce host memory per DataLoader worker (fewer workers, smaller prefetch_factor, avoid copying the dataset into each worker).".into(),
                    if reclaiming { format!("Raise the job's memory limit ({}the cgroup's memory.max, a pod's resources.limits.memory) above what it holds, or allocate pinned host buffers once at start-up instead of per step.", if limit.is_empty() { String::new() } else { format!("{limit} now: ") }) } else { "Set memory limits per process/cgroup so one component cannot take the node down, and watch /proc/pressure/memory.".into() },
                ],
                evidence_sql: format!(
                    "SELECT pid, comm, op, count(*) AS events, sum(duration) AS total_ns, sum(arg0) AS bytes FROM events WHERE node = {} AND op IN ('mm_page_alloc', 'mm_reclaim', 'oom_kill', 'pod_oom_kill') GROUP BY ALL ORDER BY bytes DESC LIMIT 20",
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
    use causeway_store::Reader;

    use crate::chains::{Chain, ChainQuery, Severity};
    use crate::detectors::testutil::chains_of;
    use causeway_demo::Scenario;
    use causeway_demo::model::{Thread, op};

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

    const MS: i64 = 1_000_000;

    /// Explains `s` with a reclaim of `reclaim_ns` (memory cgroup) freeing `freed` bytes,
    /// ending 100 us before each block read (1 MiB) of its input workers, and `trainer`
    /// (every, duration) reclaims by the trainer's main thread.
    fn explained(
        s: Scenario,
        reclaim_ns: i64,
        freed: i64,
        trainer: Option<(i64, i64)>,
    ) -> Vec<Chain> {
        let mut nodes = causeway_demo::build(s, false);
        let g = &mut nodes[0].trace;
        let read = op("block_read");
        let reads: Vec<(Thread, i64)> = g
            .events
            .iter()
            .filter(|e| e.op_id == read && reclaim_ns > 0)
            .map(|e| (Thread::new(e.pid, e.tid, &e.comm, -1), e.timestamp))
            .collect();
        for (w, ts) in reads {
            g.ev(
                &w,
                ts - reclaim_ns - 100_000,
                reclaim_ns,
                "mm_reclaim",
                freed,
                1,
            );
        }
        if reclaim_ns > 0 {
            // The job runs in a memory cgroup limited to 320 MiB.
            for p in &mut g.procs {
                p.memory_limit = 320 << 20;
            }
        }
        if let Some((every, dur)) = trainer {
            let main = Thread::new(4242, 4242, "python3", 0);
            let (first, last) = g
                .events
                .iter()
                .filter(|e| e.tid == 4242)
                .fold((i64::MAX, 0), |a, e| {
                    (a.0.min(e.timestamp), a.1.max(e.timestamp))
                });
            let mut at = first + every;
            while at + dur < last {
                g.ev(&main, at, dur, "mm_reclaim", 2 << 20, 0);
                at += every;
            }
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("t.duckdb");
        causeway_demo::write_nodes(&p, s, nodes).expect("demo trace");
        let r = Reader::open(&p).expect("reader");
        crate::engine::explain(&r, &ChainQuery::default())
            .expect("explain")
            .chains
    }

    #[test]
    fn starved_input_whose_workers_reclaim_is_memory_pressure() {
        let plain = explained(Scenario::DataloaderStarvation, 0, 0, None);
        let starved = plain
            .iter()
            .find(|c| c.detector == "dataloader_starvation")
            .expect("the scenario starves");
        // 0.5 ms before each 5 ms read of a worker that also works 2 ms: about 7% of its life.
        let c = explained(Scenario::DataloaderStarvation, MS / 2, 64 << 10, None);
        assert_eq!(c[0].detector, "host_memory_pressure", "{c:#?}");
        assert!(
            c.iter().all(|c| c.detector != "dataloader_starvation"),
            "{c:#?}"
        );
        assert_eq!(c[0].time_lost_ns, starved.time_lost_ns);
        assert!(
            c[0].explanation
                .contains("in their memory cgroup, which was at its limit of 320.0 MiB"),
            "{}",
            c[0].explanation
        );
        assert!(
            c[0].recommendations[0].contains("(320.0 MiB now:"),
            "{:?}",
            c[0].recommendations
        );
        assert!(
            c[0].timeline.iter().any(|s| s.op == "mm_reclaim"),
            "{:#?}",
            c[0].timeline
        );
        // A little reclaim (0.1 ms a read, about 1.5%) freeing 64 KiB a 1-MiB read leaves the
        // starvation the workers'.
        let c = explained(Scenario::DataloaderStarvation, MS / 10, 64 << 10, None);
        assert_eq!(c[0].detector, "dataloader_starvation", "{c:#?}");
        assert!(
            c.iter().all(|c| c.detector != "host_memory_pressure"),
            "{c:#?}"
        );
        // The same short reclaims freeing what each read brings in (a slow disk: the reads, not
        // the reclaim, take the workers' time): the page cache keeps nothing, memory pressure.
        let c = explained(Scenario::DataloaderStarvation, MS / 10, 1 << 20, None);
        assert_eq!(c[0].detector, "host_memory_pressure", "{c:#?}");
        assert_eq!(c[0].time_lost_ns, starved.time_lost_ns);
        assert!(
            c[0].summary.contains("at their memory limit, freed ")
                && c[0].summary.contains(" to read "),
            "{}",
            c[0].summary
        );
    }

    #[test]
    fn a_trainer_that_reclaims_loses_that_time() {
        // 2 ms every 50 ms: 4% of its span, all of it time the trainer could not feed the GPU.
        let c: Vec<_> = explained(Scenario::Healthy, 0, 0, Some((50 * MS, 2 * MS)))
            .into_iter()
            .filter(|c| c.detector == "host_memory_pressure")
            .collect();
        assert_eq!(c.len(), 1, "{c:#?}");
        let n = c[0]
            .explanation
            .split(" times")
            .next()
            .and_then(|s| s.rsplit(' ').next());
        let n: i64 = n
            .and_then(|n| n.replace(',', "").parse().ok())
            .expect("a count");
        assert_eq!(c[0].time_lost_ns, n * 2 * MS, "{}", c[0].explanation);
        assert_eq!(c[0].severity, Severity::Medium);
        assert!(
            c[0].explanation.contains("host-wide (direct reclaim"),
            "{}",
            c[0].explanation
        );
        // 1 ms every 100 ms (1%) is not a finding.
        let c = explained(Scenario::Healthy, 0, 0, Some((100 * MS, MS)));
        assert!(
            c.iter().all(|c| c.detector != "host_memory_pressure"),
            "{c:#?}"
        );
    }
}
