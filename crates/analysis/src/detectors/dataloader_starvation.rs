//! `dataloader_starvation`: the training loop sleeps between steps waiting for input while the
//! data workers thrash (preempting each other, re-forked every epoch).
//!
//! Trigger: a launching thread is blocked (sleeping, arg1 = 1) inside gaps >= 1 ms between
//! its GPU calls for >= 10% of its span, not explained by its own socket or block I/O, and the
//! node shows input workers (threads named like DataLoader workers, or child processes of the
//! training process that make no GPU call).
//! Where a waiting GPU op (a sync, a copy) was sampled, a sleep in a gap may be inside one of
//! its calls: there only the sleeps an input worker's wakeup ended count (see waits).
//! When the workers spend at least half their lives in socket calls, the finding is
//! `network_wait` (slow remote input) instead; when they spend at least 4% reclaiming memory, or
//! free in their memory cgroup at its limit at least half of what they read from disk,
//! `host_memory_pressure` (their cgroup or the host is at its memory limit); when, for at least
//! half the trainer's wait, the worker whose wakeup ended it was waiting for the disk (in the
//! kernel's I/O wait, or asleep with its own reads in flight), the storage (the finding stays
//! `dataloader_starvation`, its root cause and fixes the storage's). When tasks outside
//! the job (not the trainer, its workers or its other children) took at least half the time the
//! workers were preempted, and that preemption is at least a tenth of the trainer's wait, the
//! cause is a busy machine, and the finding says who.
//! Time lost: blocked time in gaps minus own socket and I/O waits. Severity: the common rule.
//! Recommendation: more/persistent workers, pinned memory, prefetching, cheaper transforms.

use causeway_store::StoreError;

use super::{Finding, Input, d, lit, pct, severity, step};
use crate::chains::Chain;
use crate::fmt::{bytes, thousands};

// Op ids written into this file's SQL as literals.
causeway_ops::sql_id!("sched_switch", 100);

/// Share of the workers' lives spent reclaiming memory (percent) from which the starvation is
/// memory pressure's: the lab's limited job spends 10-14%, its unlimited twin none.
const RECLAIM_SHARE_PCT: i64 = 4;

/// Share of the trainer's input wait (percent) the workers must have spent preempted before
/// a busy machine is named: 11 ms of preemption does not explain 5.7 s of waiting.
const BUSY_PREEMPTED_PCT: i64 = 10;

/// Share of the trainer's input wait (percent) for which the worker delivering the batch must
/// have waited for the disk for the starvation to be the storage's: a cold dataset's first
/// epoch, a throttled or lazily restored volume (CI's recordings: 53% and 99%), against none
/// where the dataset is in the page cache.
const STORAGE_SHARE_PCT: i64 = 50;

/// The tasks that ran while the workers were preempted, most time first: (tid, ns).
pub(crate) const PREEMPTORS_SQL: &str = "
SELECT arg0, sum(duration)::BIGINT AS ns FROM event_data
WHERE op_id = 100 AND arg1 = 0 AND node = ? AND timestamp BETWEEN ? AND ?
  AND list_contains(string_split(?, ',')::UINTEGER[], tid)
GROUP BY arg0 ORDER BY ns DESC, arg0";

/// Who took the workers' CPUs: the tasks outside the job (not the trainer, a worker or another
/// child of the trainer) that ran while the workers were preempted, most time first (tid, ns),
/// and the workers' preempted time in all.
fn taken_by_outside(
    inp: &Input<'_>,
    node: &str,
    trainer: u32,
    workers: &[&crate::facts::ThreadFacts],
) -> Result<(Vec<(i64, i64)>, i64), StoreError> {
    let ctx = inp.ctx;
    let tids = workers
        .iter()
        .map(|x| x.tid.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let rows: Vec<(i64, i64)> = ctx
        .r
        .prepare_trusted(PREEMPTORS_SQL)?
        .query_map(
            causeway_store::duckdb::params![node, ctx.window.from_ns, ctx.window.until_ns, tids],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(crate::base::errors::duck(
            ctx.r,
            "reading who preempted the input workers",
        ))?;
    let all = rows.iter().map(|r| r.1).fold(0, i64::saturating_add);
    let job = |tid: i64| {
        ctx.threads.iter().any(|t| {
            t.node == node
                && i64::from(t.tid) == tid
                && (t.pid == trainer
                    || workers.iter().any(|w| w.pid == t.pid)
                    || is_child(ctx, node, t.pid, trainer))
        })
    };
    Ok((
        rows.into_iter().filter(|(tid, _)| !job(*tid)).collect(),
        all,
    ))
}

fn is_worker(comm: &str) -> bool {
    let c = comm.to_ascii_lowercase();
    c.contains("data_worker") || c.contains("dataloader") || c.starts_with("pt_data")
}

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let mut out = Vec::new();
    for w in inp.waits.iter().filter(|w| w.gaps > 0) {
        let Some(t) = ctx
            .threads
            .iter()
            .find(|t| t.node == w.node && t.tid == w.tid && t.pid == w.pid)
        else {
            continue;
        };
        let span = super::steady_span_ns(ctx, &t.node, t.pid, t.tid)
            .unwrap_or((t.last_ns - t.first_ns).max(1));
        let lost = (w.blocked_in_gaps_ns - t.net_ns - w.io_wait_ns).max(0);
        if (lost as f64) < 0.10 * span as f64 {
            continue;
        }
        let workers: Vec<_> = ctx
            .threads
            .iter()
            .filter(|x| {
                x.node == w.node
                    && x.gpu_calls == 0
                    && (is_worker(&x.comm)
                        || (x.pid != w.pid && is_child(ctx, &x.node, x.pid, w.pid)))
            })
            .collect();
        if workers.is_empty() {
            continue;
        }
        let wpids: std::collections::BTreeSet<u32> = workers.iter().map(|x| x.pid).collect();
        let preempted: i64 = workers
            .iter()
            .map(|x| x.preempted_ns)
            .fold(0, i64::saturating_add);
        let switches: u64 = workers.iter().map(|x| x.switches).sum();
        let io: u64 = workers.iter().map(|x| x.io_requests).sum();
        let forks = ctx
            .op(&w.node, w.pid, "process_fork")
            .map_or(0, |o| o.count);
        let memcpy = ctx.op(&w.node, w.pid, "cudaMemcpy");
        // Workers that mostly wait in socket calls: the input comes over the network, slowly.
        let net: i64 = workers
            .iter()
            .map(|x| x.net_ns)
            .fold(0, i64::saturating_add);
        // A worker's life is its process's, whatever threads it has.
        let mut lives: std::collections::BTreeMap<u32, (i64, i64)> = Default::default();
        for x in &workers {
            let l = lives.entry(x.pid).or_insert((x.first_ns, x.last_ns));
            *l = (l.0.min(x.first_ns), l.1.max(x.last_ns));
        }
        let life: i64 = lives
            .values()
            .map(|(a, b)| (b - a).max(0))
            .fold(0, i64::saturating_add);
        let starved = Starved {
            w,
            t,
            lost,
            span,
            wpids: &wpids,
            life,
        };
        if life > 0 && net * 2 >= life {
            out.push((w.pid, w.tid != w.pid, remote_input(inp, &starved, net)));
            continue;
        }
        // Workers that must free memory before they can allocate: their cgroup (or the host)
        // is at its limit, and the page cache cannot keep what they read.
        let rec = super::host_memory_pressure::reclaim_of(inp.reclaims, &w.node, &wpids);
        let (_, read_bytes, _) = super::host_memory_pressure::disk_reads(ctx, &w.node, &wpids);
        if life > 0
            && (rec.ns.saturating_mul(100) >= RECLAIM_SHARE_PCT * life
                || super::host_memory_pressure::revolving(&rec, read_bytes))
        {
            out.push((
                w.pid,
                w.tid != w.pid,
                super::host_memory_pressure::starved_input(inp, &starved, &rec),
            ));
            continue;
        }
        // The worker that delivered each awaited batch was asleep on its own disk reads for
        // at least half the trainer's wait: the storage, not the workers' CPU, sets the pace
        // (a cold dataset, a lazily restored volume).
        let sql = storage_sql(ctx, w, &starved);
        let rows = on_disk_rows(ctx, &sql);
        let all = rows.iter().fold(OnDisk::default(), |a, r| OnDisk {
            reads: a.reads + r.reads,
            read_bytes: a.read_bytes.saturating_add(r.read_bytes),
            slowest_read_ns: a.slowest_read_ns.max(r.slowest_read_ns),
            on_disk_ns: a.on_disk_ns.saturating_add(r.on_disk_ns),
            device_ns: a.device_ns.saturating_add(r.device_ns),
        });
        if all.on_disk_ns > 0 && all.on_disk_ns.saturating_mul(100) >= STORAGE_SHARE_PCT * lost {
            out.push((
                w.pid,
                w.tid != w.pid,
                storage_input(inp, &starved, all, sql),
            ));
            continue;
        }
        // Workers preempted mostly by tasks outside the job: the machine is busy, and more
        // workers would only queue for the same CPUs.
        let (outside, all_preempted) = taken_by_outside(inp, &w.node, w.pid, &workers)?;
        let outside_ns = outside.iter().map(|o| o.1).fold(0, i64::saturating_add);
        // A busy machine explains the wait only where the workers lost real time to it.
        let busy = all_preempted > 0
            && outside_ns * 2 >= all_preempted
            && all_preempted.saturating_mul(100) >= BUSY_PREEMPTED_PCT * lost;
        let busy_cause = outside.first().filter(|_| busy).map(|(tid, _)| {
            format!(
                "tasks outside the job took {} of the {} the workers were preempted (the task that ran instead most often: {} (tid {tid}))",
                pct(outside_ns, all_preempted),
                d(all_preempted),
                ctx.name(&w.node, *tid as u32)
            )
        });
        out.push((
            w.pid,
            w.tid != w.pid,
            Finding {
                detector: "dataloader_starvation",
                node: w.node.clone(),
                time_lost_ns: lost,
                severity: severity(lost, ctx.node_span_ns(&w.node)),
                summary: format!("{} (tid {}) slept {} waiting for input between steps ({} of its span)", t.comm, t.tid, d(lost), pct(lost, span)),
                root_cause: match &busy_cause {
                    Some(c) => format!("Input starvation from a busy machine: the DataLoader cannot produce batches as fast as the GPU consumes them because other tasks take its workers' CPUs; {c}"),
                    None => "Input starvation: the DataLoader cannot produce batches as fast as the GPU consumes them".into(),
                },
                explanation: format!(
                    "{} (pid {}, tid {}) had {} gaps of 1 ms or more between GPU calls, {} in total, and slept for {} of them with no socket or disk wait of its own. Meanwhile {} worker processes made {} context switches ({} preempted while runnable: more busy workers than free cores), issued {} block reads, and the trainer forked {forks} processes (workers re-created instead of persistent).{}",
                    t.comm, t.pid, t.tid, w.gaps, d(w.gap_ns), d(lost), wpids.len(), switches, d(preempted), io,
                    memcpy.map(|m| format!(" Each step also copies the batch synchronously from pageable memory: {} cudaMemcpy calls, p50 {}.", m.count, d(m.p50_ns))).unwrap_or_default()
                ),
                timeline: with_the_wait(
            vec![step("HOST", "pt_data_worker", format!("{} workers, {} preempted, {} reads", wpids.len(), d(preempted), io), preempted)],
                    lost,
                ),
                recommendations: busy_cause.iter().map(|_| "Give the job its CPUs: move or renice the other tasks, or pin the workers to cores of their own (cpuset, taskset); more workers would queue for the same cores.".to_string()).chain([
                    "Set persistent_workers=True so workers are not re-forked every epoch, and prefetch_factor >= 2.".into(),
                    format!("Match num_workers to free cores ({} workers were preempted for {}); move heavy decoding/augmentation to the GPU (DALI, torchvision.transforms.v2 on CUDA).", wpids.len(), d(preempted)),
                    "Use pin_memory=True and .to(device, non_blocking=True) so the copy overlaps compute.".into(),
                ]).collect(),
                // The thread's longest sleeps between GPU calls, each with the input wait's
                // totals (the summary's figure is waiting_for_input_ns).
                evidence_sql: format!(
                    "WITH {} SELECT gap_from, gap_ns, asleep_ns, (SELECT asleep_ns FROM input_wait) AS asleep_in_gaps_ns, (SELECT own_net_ns FROM input_wait) AS own_net_ns, (SELECT own_io_ns FROM input_wait) AS own_io_ns, (SELECT waiting_for_input_ns FROM input_wait) AS waiting_for_input_ns FROM slept ORDER BY asleep_ns DESC LIMIT 50",
                    input_wait_ctes(ctx, w)
                ),
            }
            .into_chain()
            .at(starved.resumed(ctx)),
        ));
    }
    // One finding per process, its main thread's where it launches: its launching threads wait
    // together (see waits), and the main thread is the one that asks for the next batch.
    out.sort_by(|a, b| {
        (&a.2.node, a.0, a.1, b.2.time_lost_ns).cmp(&(&b.2.node, b.0, b.1, a.2.time_lost_ns))
    });
    out.dedup_by(|b, a| a.2.node == b.2.node && a.0 == b.0);
    Ok(out.into_iter().map(|(_, _, c)| c).collect())
}

/// The starvation's cause is the network: the workers wait in socket calls for their samples.
fn remote_input(inp: &Input<'_>, s: &Starved<'_>, net: i64) -> Chain {
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
    Finding {
        detector: "network_wait",
        node: w.node.clone(),
        time_lost_ns: lost,
        severity: severity(lost, ctx.node_span_ns(&w.node)),
        summary: format!(
            "{} (tid {}) slept {} waiting for input ({} of its span) while its {} input workers waited on the network {} of their time",
            t.comm,
            t.tid,
            d(lost),
            pct(lost, span),
            wpids.len(),
            pct(net, life)
        ),
        root_cause: "Slow remote input: the DataLoader workers fetch samples over the network (object store, NFS, a sample server) and spend their time waiting in socket calls, so batches arrive slower than the GPU consumes them".into(),
        explanation: format!(
            "{} (pid {}, tid {}) had {} gaps of 1 ms or more between GPU calls and slept {} in them with no socket or disk wait of its own. Its input workers (pids {pids}) spent {} of their {} in socket calls: they are waiting for the network, not computing, so more CPU or cheaper transforms would not help.",
            t.comm,
            t.pid,
            t.tid,
            w.gaps,
            d(lost),
            d(net),
            d(life)
        ),
        timeline: with_the_wait(
            vec![step("NET", "socket", format!("input workers waiting on the network {}", d(net)), net)],
            lost,
        ),
        recommendations: vec![
            "Cache the dataset on local disk or in memory (or stage shards ahead of the epoch) instead of fetching every sample remotely.".into(),
            "Fetch in larger objects (sharded archives such as WebDataset/tar shards) and with more concurrent requests per worker; raise num_workers or prefetch_factor: waiting workers do not need CPU.".into(),
            "Check the link: bandwidth limits, retransmits (tcp_retransmit events) and the remote side's latency.".into(),
        ],
        // The workers' socket calls, each row with the trainer's input wait (the summary's
        // figure is waiting_for_input_ns) and how many workers there are.
        evidence_sql: format!(
            "WITH {}, wk AS (SELECT count(DISTINCT pid) AS n FROM events WHERE node = {node} AND pid IN ({pids})) SELECT e.pid, e.comm, e.op, count(*) AS calls, sum(e.duration) AS total_ns, any_value(input_wait.waiting_for_input_ns) AS trainer_waiting_for_input_ns, any_value(wk.n) AS workers FROM events e CROSS JOIN input_wait CROSS JOIN wk WHERE e.node = {node} AND e.source = 'NET' AND e.pid IN ({pids}) GROUP BY ALL ORDER BY total_ns DESC LIMIT 20",
            input_wait_ctes(ctx, w),
            node = lit(&w.node)
        ),
    }
    .into_chain()
    .at(s.resumed(ctx))
}

/// The CTEs and query that measure what a storage finding says, one row per input worker
/// process: its block reads (count, bytes, slowest), how much of the trainer's wait for input
/// ended with a wakeup from one of its threads (the batch it delivered: `trainer_waited_ns`),
/// and for how much of that wait the worker was asleep on the disk
/// (`on_disk_while_awaited_ns`; `all_workers_on_disk_ns` sums it: the finding's figure). The
/// trainer's wait is its sleeps inside gaps between GPU calls (as `input_wait_ctes` cuts them),
/// a worker's time on the disk its sleeps in the kernel's I/O wait (sched_switch `ret_code` 1:
/// also a read held by cgroup I/O throttling, before any block request exists) together with
/// its requests in flight overlapped with its off-CPU time.
fn storage_sql(
    ctx: &crate::facts::Ctx<'_>,
    w: &super::waits::ThreadWaits,
    s: &Starved<'_>,
) -> String {
    let node = lit(&w.node);
    let tid = w.tid;
    let pids = s.pids();
    let (from, until) = (ctx.window.from_ns, ctx.window.until_ns);
    format!(
        "WITH {}, \
         tw AS (SELECT sl.a sa, sl.b sb, greatest(sl.a, gaps.a) a, least(sl.b, gaps.b) b FROM gaps JOIN sl ON sl.tid={tid} AND sl.arg1=1 AND sl.a<gaps.b AND sl.b>gaps.a), \
         th AS (SELECT DISTINCT tid, pid FROM events WHERE node={node} AND pid IN ({pids})), \
         twk AS (SELECT tw.a, tw.b, arg_max(u.arg0, u.timestamp) waker FROM tw JOIN events u ON u.node={node} AND u.tid={tid} AND u.op='sched_wakeup' AND u.timestamp BETWEEN tw.sa AND tw.sb GROUP BY tw.a, tw.b), \
         awaited AS (SELECT twk.a, twk.b, th.pid FROM twk JOIN th ON th.tid=twk.waker), \
         wr AS (SELECT pid, tid, timestamp a, timestamp+duration b, max(timestamp+duration) OVER (PARTITION BY tid ORDER BY timestamp, duration ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) r FROM events WHERE node={node} AND pid IN ({pids}) AND source='IO' AND timestamp BETWEEN {from} AND {until}), \
         wru AS (SELECT any_value(pid) pid, tid, min(a) a, max(b) b FROM (SELECT pid, tid, a, b, sum((r IS NULL OR a>r)::INT) OVER (PARTITION BY tid ORDER BY a, b ROWS UNBOUNDED PRECEDING) k FROM wr) GROUP BY tid, k), \
         wsl AS (SELECT pid, tid, {st} a, {st}+duration b, ret_code iowait FROM events WHERE node={node} AND pid IN ({pids}) AND op='sched_switch'), \
         rs AS (SELECT pid, a, b FROM wsl WHERE iowait=1 UNION ALL SELECT wru.pid, greatest(wsl.a, wru.a) a, least(wsl.b, wru.b) b FROM wru JOIN wsl ON wsl.tid=wru.tid AND wsl.a<wru.b AND wsl.b>wru.a), \
         rsm AS (SELECT pid, a, b, max(b) OVER (PARTITION BY pid ORDER BY a, b ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) r FROM rs), \
         rsu AS (SELECT pid, min(a) a, max(b) b FROM (SELECT pid, a, b, sum((r IS NULL OR a>r)::INT) OVER (PARTITION BY pid ORDER BY a, b ROWS UNBOUNDED PRECEDING) k FROM rsm) GROUP BY pid, k), \
         hit AS (SELECT awaited.pid, sum(least(rsu.b, awaited.b)-greatest(rsu.a, awaited.a))::BIGINT ns FROM awaited JOIN rsu ON rsu.pid=awaited.pid AND rsu.a<awaited.b AND rsu.b>awaited.a GROUP BY awaited.pid), \
         waited AS (SELECT pid, sum(b-a)::BIGINT ns FROM awaited GROUP BY pid), \
         rd AS (SELECT pid, count(*) reads, coalesce(sum(arg0), 0)::BIGINT read_bytes, max(duration) slowest_read_ns, sum(duration)::BIGINT read_device_ns FROM events WHERE node={node} AND pid IN ({pids}) AND op='block_read' AND timestamp BETWEEN {from} AND {until} GROUP BY pid), \
         wp AS (SELECT DISTINCT pid FROM th) \
         SELECT wp.pid::BIGINT pid, coalesce(rd.reads, 0)::BIGINT reads, coalesce(rd.read_bytes, 0)::BIGINT read_bytes, rd.slowest_read_ns, coalesce(waited.ns, 0) trainer_waited_ns, coalesce(hit.ns, 0) on_disk_while_awaited_ns, sum(coalesce(hit.ns, 0)) OVER ()::BIGINT all_workers_on_disk_ns, (SELECT waiting_for_input_ns FROM input_wait) trainer_waiting_for_input_ns, coalesce(rd.read_device_ns, 0)::BIGINT read_device_ns \
         FROM wp LEFT JOIN rd USING (pid) LEFT JOIN waited USING (pid) LEFT JOIN hit USING (pid) ORDER BY on_disk_while_awaited_ns DESC, pid",
        input_wait_ctes(ctx, w),
        st = super::off_start(ctx, &w.node)
    )
}

/// One input worker's row of [`storage_sql`].
#[derive(Debug, Clone, Copy, Default)]
struct OnDisk {
    reads: i64,
    read_bytes: i64,
    slowest_read_ns: i64,
    /// Its time on the disk inside the trainer's waits it ended.
    on_disk_ns: i64,
    /// The device's time on its reads (issue to completion), summed.
    device_ns: i64,
}

/// The rows of [`storage_sql`] through the guard, as an agent runs the evidence; none where the
/// query does not run (a reader under a memory or time limit).
fn on_disk_rows(ctx: &crate::facts::Ctx<'_>, sql: &str) -> Vec<OnDisk> {
    let rows = super::guarded_rows(
        ctx,
        sql,
        None,
        "dataloader_starvation: the workers' waits on the disk",
    );
    rows.unwrap_or_default()
        .iter()
        .map(|r| {
            let i = |k: usize| r.get(k).and_then(serde_json::Value::as_i64).unwrap_or(0);
            OnDisk {
                reads: i(1),
                read_bytes: i(2),
                slowest_read_ns: i(3),
                on_disk_ns: i(5),
                device_ns: i(8),
            }
        })
        .collect()
}

/// The starvation's cause is the storage: while the trainer waited, the workers that delivered
/// its batches were waiting for the disk for at least half the wait (`all`: the workers' rows
/// of `sql`, summed).
fn storage_input(inp: &Input<'_>, s: &Starved<'_>, all: OnDisk, sql: String) -> Chain {
    let ctx = inp.ctx;
    let Starved {
        w,
        t,
        lost,
        span,
        wpids,
        ..
    } = *s;
    let OnDisk {
        reads,
        read_bytes,
        slowest_read_ns: slowest,
        on_disk_ns: on_disk,
        device_ns,
    } = all;
    // Most of the wait before the requests reached the device: held above it.
    let held = if device_ns.saturating_mul(2) < on_disk {
        format!(
            " The device itself took {} over all their reads: most of the wait came before the requests reached it (an I/O limit on the job's cgroup, such as io.max or blkio throttling, or a queue above the device).",
            d(device_ns)
        )
    } else {
        String::new()
    };
    let pids = s.pids();
    Finding {
        detector: "dataloader_starvation",
        node: w.node.clone(),
        time_lost_ns: lost,
        severity: severity(lost, ctx.node_span_ns(&w.node)),
        summary: format!(
            "{} (tid {}) slept {} waiting for input between steps ({} of its span); for {} of it the worker with the next batch was waiting for the disk",
            t.comm,
            t.tid,
            d(lost),
            pct(lost, span),
            d(on_disk)
        ),
        root_cause: "Input starvation on storage: the DataLoader workers wait for their disk reads, so batches come slower than the GPU consumes them; faster CPUs or cheaper transforms would not help".into(),
        explanation: format!(
            "{} (pid {}, tid {}) had {} gaps of 1 ms or more between GPU calls, {} in total, and slept for {} of them with no socket or disk wait of its own. Its {} (pids {pids}) issued {} block reads ({}, the slowest request {} on the device); for {} of the trainer's wait, the worker whose wakeup ended it (the one delivering the batch) was asleep waiting for the disk.{held}",
            t.comm,
            t.pid,
            t.tid,
            w.gaps,
            d(w.gap_ns),
            d(lost),
            if wpids.len() == 1 { "input worker".to_string() } else { format!("{} input workers", wpids.len()) },
            thousands(reads as u64),
            bytes(read_bytes),
            d(slowest),
            d(on_disk)
        ),
        timeline: with_the_wait(
            vec![step("IO", "block_read", format!("input workers waiting for the disk {} of the wait ({} block reads, the device's slowest {})", d(on_disk), thousands(reads as u64), d(slowest)), on_disk)],
            lost,
        ),
        recommendations: (!held.is_empty())
            .then(|| "Raise or lift the I/O limit on the job's cgroup (cgroup v2 io.max, v1 blkio.throttle.read_bps_device, systemd IOReadBandwidthMax, docker --device-read-bps) or that of its volume; the device served the reads quickly.".to_string())
            .into_iter()
            .chain([
            "Put the dataset where reads are fast: local NVMe, or memory (/dev/shm, the page cache warmed before training) when it fits; a volume restored from a snapshot (cloud block storage, a lazily loaded VM disk) reads slowly until every block was read once.".into(),
            "Read fewer, larger objects (sharded archives such as WebDataset tar shards, or one memory-mapped array) instead of a small file per sample; raise num_workers or prefetch_factor so reads overlap: workers that wait for the disk need no CPU.".into(),
            "Check the device while training runs: iostat -x (r_await, %util) against what the disk is rated for, and the block_read latencies in `causeway stats`.".into(),
        ])
        .collect(),
        // One row per worker: its reads, the trainer's wait it ended, its time on the disk
        // inside that wait (all_workers_on_disk_ns is the summary's second figure,
        // trainer_waiting_for_input_ns the first) and the device's time on its reads.
        evidence_sql: sql,
    }
    .into_chain()
    .at(s.resumed(ctx))
}

/// A starvation finding's timeline: what the workers did (`first`), then the training thread
/// asleep waiting for batches and the GPU idle for `lost`.
pub fn with_the_wait(
    mut first: Vec<crate::chains::TimelineItem>,
    lost: i64,
) -> Vec<crate::chains::TimelineItem> {
    first.extend([
        step(
            "HOST",
            "sched_switch",
            format!("training thread asleep {} waiting for batches", d(lost)),
            lost,
        ),
        step("GPU", "idle", "no work between steps".into(), lost),
    ]);
    first
}

/// A training thread that starves for input, and its input workers: what a finding that names
/// the workers' trouble (network, memory) starts from.
#[derive(Debug, Clone, Copy)]
pub struct Starved<'a> {
    /// The starving thread's waits.
    pub w: &'a super::waits::ThreadWaits,
    /// The starving thread.
    pub t: &'a crate::facts::ThreadFacts,
    /// Its sleep in gaps between GPU calls, less its own socket and disk waits (ns).
    pub lost: i64,
    /// Its span (ns).
    pub span: i64,
    /// The input workers' pids.
    pub wpids: &'a std::collections::BTreeSet<u32>,
    /// The workers' lives, summed (ns).
    pub life: i64,
}

impl Starved<'_> {
    /// The GPU calls that ended the thread's longest sleeps between calls (gaps it spent at
    /// least half asleep: the wait for a batch, real even where probes were sampled, since a
    /// sleeping thread makes no call), where it went back to work: the finding's call sites.
    pub fn resumed(&self, ctx: &crate::facts::Ctx<'_>) -> crate::sites::Scope {
        use crate::intervals::{Span, overlaps};
        let (node, tid) = (&self.t.node, self.t.tid);
        let gaps: Vec<Span<()>> = ctx.timelines.get(node).map_or_else(Vec::new, |tl| {
            tl.gaps
                .iter()
                .filter(|g| g.tid == tid)
                .map(|g| Span {
                    start: g.start,
                    end: g.end,
                    data: (),
                })
                .collect()
        });
        let mut asleep: std::collections::HashMap<(i64, i64), i64> = Default::default();
        overlaps(&gaps, ctx.switches.of(node, tid), |g, o, ns| {
            if o.data.state == 1 {
                *asleep.entry((g.start, g.end)).or_default() += ns;
            }
        });
        let mut waits: Vec<(i64, i64)> = asleep
            .into_iter()
            .filter(|&((a, b), ns)| ns * 2 >= b - a)
            .map(|((_, end), ns)| (ns, end))
            .collect();
        waits.sort_unstable_by(|a, b| b.cmp(a));
        crate::sites::Scope::thread(
            node,
            self.t.pid,
            tid,
            &[],
            "GPU calls after the longest waits for input",
        )
        .at_times(waits.iter().map(|w| w.1).collect())
    }

    /// The workers' pids as an SQL list.
    pub fn pids(&self) -> String {
        self.wpids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The CTEs that measure, from the trace, what "slept X waiting for input" says: `gaps` (1 ms or
/// more from one GPU call's end to the next call's start, after start-up), `asleep` (when the
/// thread and every other launching thread of its process sleep: the hand-over rule), `slept`
/// (the sleep inside the gaps per gap) and `input_wait` (one row: `asleep_ns` summed, the
/// thread's own socket time and its sleep while its own block I/O was in flight, and
/// `waiting_for_input_ns`, the first less the other two: the summary's figure). As the engine
/// does, in gaps inside stretches where waiting calls were sampled only the thread's sleeps that
/// an input task's wakeup ended count (`woke`), and in gaps where any GPU op was sampled the
/// thread's own sleeps count from 1 ms (the stretches and the input tasks given as literals).
pub fn input_wait_ctes(ctx: &crate::facts::Ctx<'_>, w: &super::waits::ThreadWaits) -> String {
    let node = lit(&w.node);
    let tid = w.tid;
    let steady = ctx
        .timelines
        .get(&w.node)
        .and_then(|tl| tl.steady_from.get(&tid))
        .copied()
        .unwrap_or(i64::MIN);
    let mut tids: Vec<u32> = ctx
        .feeders()
        .iter()
        .filter(|x| x.node == w.node && x.pid == w.pid)
        .map(|x| x.tid)
        .chain([tid])
        .collect();
    tids.sort_unstable();
    tids.dedup();
    let k = tids.len();
    // Gaps where a waiting op was sampled: only the sleeps an input task ended count there.
    let blind: Vec<String> = (ctx.sampled_waits.get(&w.node).into_iter().flatten())
        .map(|(a, b)| format!("(a<{b} AND b>{a})"))
        .collect();
    let inputs = super::waits::input_tasks(ctx, &w.node, w.pid);
    let inputs = if inputs.is_empty() {
        "-1".to_string()
    } else {
        crate::opsets::tid_list(inputs).replace(',', ", ")
    };
    let tids = tids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    // When every launching thread sleeps: a sweep over their sleeps (`n` asleep at once).
    let sweep = |name: &str, own_min: i64| {
        let which = format!("arg1=1 AND (tid<>{tid} OR b-a>={own_min})");
        format!(
            "p{name} AS (SELECT a t, 1 d FROM sl WHERE {which} UNION ALL SELECT b, -1 FROM sl WHERE {which}), \
             r{name} AS (SELECT t, sum(d) OVER (ORDER BY t, d ROWS UNBOUNDED PRECEDING) n, lead(t) OVER (ORDER BY t, d) t2 FROM p{name}), \
             {name} AS (SELECT t a, t2 b FROM r{name} WHERE n={k} AND t2>t)"
        )
    };
    let part = |name: &str, cond: &str| {
        format!(
            "SELECT gaps.a gap_from, gaps.b-gaps.a gap_ns, least(x.b, gaps.b)-greatest(x.a, gaps.a) ns FROM gaps JOIN {name} x ON x.a<gaps.b AND x.b>gaps.a AND {cond}"
        )
    };
    // In stretches where launches were sampled, the thread's own sleeps count from 1 ms.
    let sampled: Vec<String> = (ctx.sampled.get(&w.node).into_iter().flatten())
        .map(|(a, b)| format!("(a<{b} AND b>{a})"))
        .collect();
    let (smp, mut sweeps, mut parts) = if sampled.is_empty() {
        (
            "false".to_string(),
            sweep("asleep", 0),
            part("asleep", "NOT gaps.bl"),
        )
    } else {
        (
            sampled.join(" OR "),
            format!(
                "{}, {}",
                sweep("asleep", 0),
                sweep("asleep_long", super::waits::SAMPLED_MIN_SLEEP_NS)
            ),
            format!(
                "{} UNION ALL {}",
                part("asleep", "NOT gaps.s AND NOT gaps.bl"),
                part("asleep_long", "gaps.s AND NOT gaps.bl")
            ),
        )
    };
    let bl = if blind.is_empty() {
        "false".to_string()
    } else {
        sweeps.push_str(&format!(
            ", woke AS (SELECT a, b FROM sl WHERE tid={tid} AND arg1=1 AND EXISTS (SELECT 1 FROM events u WHERE u.node={node} AND u.tid={tid} AND u.op='sched_wakeup' AND u.timestamp BETWEEN sl.a AND sl.b AND u.arg0 IN ({inputs})))"
        ));
        parts.push_str(&format!(" UNION ALL {}", part("woke", "gaps.bl")));
        blind.join(" OR ")
    };
    format!(
        "g0 AS (SELECT lag(timestamp+duration) OVER (ORDER BY timestamp) a, timestamp b FROM events WHERE node={node} AND tid={tid} AND source IN ('CUDA','DRIVER','GRAPH','NCCL')), \
         gaps AS (SELECT *, {smp} s, {bl} bl FROM g0 WHERE b-a>=1000000 AND a>={steady}), \
         sl AS (SELECT tid, {s} a, {s}+duration b, arg1 FROM events WHERE node={node} AND tid IN ({tids}) AND op='sched_switch'), \
         {sweeps}, \
         slept AS (SELECT gap_from, gap_ns, sum(ns) asleep_ns FROM ({parts}) GROUP BY ALL), \
         io AS (SELECT timestamp a, timestamp+duration b, max(timestamp+duration) OVER (ORDER BY timestamp, duration ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) r FROM events WHERE node={node} AND tid={tid} AND source='IO' AND timestamp>={steady}), \
         iof AS (SELECT min(a) a, max(b) b FROM (SELECT a, b, sum((r IS NULL OR a>r)::INT) OVER (ORDER BY a, b ROWS UNBOUNDED PRECEDING) k FROM io) GROUP BY k), \
         w AS (SELECT coalesce((SELECT sum(asleep_ns) FROM slept), 0) asleep_ns, (SELECT coalesce(sum(duration), 0) FROM events WHERE node={node} AND tid={tid} AND source='NET') own_net_ns, (SELECT coalesce(sum(least(sl.b, iof.b)-greatest(sl.a, iof.a)), 0) FROM iof JOIN sl ON sl.tid={tid} AND sl.a<iof.b AND sl.b>iof.a) own_io_ns), \
         input_wait AS (SELECT *, greatest(asleep_ns-own_net_ns-own_io_ns, 0) waiting_for_input_ns FROM w)",
        s = super::off_start(ctx, &w.node)
    )
}

fn is_child(ctx: &crate::facts::Ctx<'_>, node: &str, pid: u32, parent: u32) -> bool {
    ctx.parents.get(&(node.to_string(), pid)) == Some(&parent)
}

#[cfg(test)]
mod tests {
    use crate::detectors::testutil::chains_of;
    use causeway_demo::Scenario;

    #[test]
    fn fires_when_the_loop_waits_for_batches() {
        let c = chains_of(
            Scenario::DataloaderStarvation,
            false,
            "dataloader_starvation",
        );
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(
            c[0].explanation.contains("6 worker processes"),
            "{}",
            c[0].explanation
        );
    }

    /// The starvation scenario with its synchronous copies in entry-only mode from the start (a
    /// sleep in any gap may be inside a copy), and a wakeup ending each of the trainer's sleeps,
    /// by `waker` (a worker's thread, or 0: an interrupt); no wakeups where `waker` is None.
    fn copies_untimed(waker: Option<i64>) -> Vec<crate::chains::Chain> {
        use causeway_store::Reader;
        let s = Scenario::DataloaderStarvation;
        let mut nodes = causeway_demo::build(s, false);
        let node = nodes[0].node.clone();
        let g = &mut nodes[0].trace;
        let copy = causeway_demo::model::op("cudaMemcpy");
        let (switch, wakeup) = (
            causeway_demo::model::op("sched_switch"),
            causeway_demo::model::op("sched_wakeup"),
        );
        let first = g.events.iter().map(|e| e.timestamp).min().unwrap();
        g.events.retain(|e| e.op_id != copy);
        if let Some(by) = waker {
            let main = causeway_demo::model::Thread::new(4242, 4242, "python3", 0);
            let sleeps: Vec<(i64, i64)> = g
                .events
                .iter()
                .filter(|e| e.tid == 4242 && e.op_id == switch && e.arg1 == 1)
                .map(|e| (e.timestamp, e.duration))
                .collect();
            for (ts, off) in sleeps {
                g.ev(&main, ts + off - 20_000, 20_000, "sched_wakeup", by, 0);
            }
            assert!(g.events.iter().any(|e| e.op_id == wakeup));
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("t.duckdb");
        causeway_demo::write_nodes(&p, s, nodes).expect("demo trace");
        {
            let c = causeway_store::duckdb::Connection::open(&p).expect("open");
            c.execute(
                "INSERT INTO probe_modes VALUES (?, ?, ?, 'entry_only', 'full', 'over_budget', 2.5)",
                causeway_store::duckdb::params![node, first - 1, i64::from(copy)],
            )
            .expect("probe_modes");
        }
        let r = Reader::open(&p).expect("reader");
        explained(&r)
    }

    /// The starvation scenario's `nodes`, as changed by a test, written and explained: its
    /// dataloader_starvation chains, their evidence checked.
    fn starvation_of(nodes: Vec<causeway_demo::scenarios::NodeTrace>) -> Vec<crate::chains::Chain> {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("t.duckdb");
        causeway_demo::write_nodes(&p, Scenario::DataloaderStarvation, nodes).expect("demo trace");
        let r = causeway_store::Reader::open(&p).expect("reader");
        explained(&r)
            .into_iter()
            .filter(|c| c.detector == "dataloader_starvation")
            .collect()
    }

    /// The trace's chains, each input-starvation chain's evidence checked: it gives back the
    /// summary's figures and the time lost.
    fn explained(r: &causeway_store::Reader) -> Vec<crate::chains::Chain> {
        let chains = crate::engine::explain(r, &crate::chains::ChainQuery::default())
            .expect("explain")
            .chains;
        for c in chains
            .iter()
            .filter(|c| c.detector == "dataloader_starvation")
        {
            let g = causeway_sqlguard::guard(&c.evidence_sql, r.policy(), None).expect("guard");
            let rows = r
                .query(&g, &causeway_store::QueryLimits::default())
                .expect("evidence");
            let missing = crate::detectors::figures_not_in_rows(&c.summary, &rows.rows);
            assert!(missing.is_empty(), "{missing:?}\n{}", c.evidence_sql);
            assert_eq!(
                crate::detectors::loss_in_rows(&c.detector, &c.summary, c.time_lost_ns, &rows.rows),
                Some(true),
                "{}",
                c.evidence_sql
            );
        }
        chains
    }

    #[test]
    fn where_copies_are_untimed_the_sleeps_a_worker_ended_are_the_wait_for_input() {
        let plain = chains_of(
            Scenario::DataloaderStarvation,
            false,
            "dataloader_starvation",
        );
        let of = |c: Vec<crate::chains::Chain>| -> Vec<crate::chains::Chain> {
            c.into_iter()
                .filter(|c| c.detector == "dataloader_starvation")
                .collect()
        };
        // Without wakeups a sleep between calls may be inside an untimed copy: nothing is said.
        assert!(of(copies_untimed(None)).is_empty());
        // An interrupt ended each sleep (a device, a timer): not a wait for a worker.
        assert!(of(copies_untimed(Some(0))).is_empty());
        // A worker (pid 4250, a child that makes no GPU call) ended each: the batch arrived.
        let c = of(copies_untimed(Some(4250)));
        assert_eq!(c.len(), 1, "{c:#?}");
        // Every sleep of the trainer between calls is a wait for a batch in this scenario, so
        // the time lost is the fully timed run's, less what the removed copies slept.
        let (got, full) = (c[0].time_lost_ns, plain[0].time_lost_ns);
        assert!(
            got >= full * 9 / 10 && got <= full * 11 / 10,
            "{got} against {full} with every call timed"
        );
        // A thread of a process that is not a child of the trainer does not count.
        assert!(of(copies_untimed(Some(4242 + 1))).is_empty());
    }

    /// The starvation scenario with two more input workers (pids 4300 and 4301, children of the
    /// trainer) asleep through each of the trainer's sleeps, 4300 in the kernel's I/O wait where
    /// `iowait`, and a wakeup from `waker` ending each of the trainer's sleeps: its
    /// dataloader_starvation chains, their evidence checked.
    fn one_slow_worker(iowait: bool, waker: u32) -> Vec<crate::chains::Chain> {
        use causeway_demo::model::Thread;
        let s = Scenario::DataloaderStarvation;
        let mut nodes = causeway_demo::build(s, false);
        let g = &mut nodes[0].trace;
        let switch = causeway_demo::model::op("sched_switch");
        let main = Thread::new(4242, 4242, "python3", 0);
        let slow = Thread::new(4300, 4300, "pt_data_worker", -1);
        let idle = Thread::new(4301, 4301, "pt_data_worker", -1);
        g.process(4300, 4242, "pt_data_worker", "python3 train.py");
        g.process(4301, 4242, "pt_data_worker", "python3 train.py");
        let sleeps: Vec<(i64, i64)> = g
            .events
            .iter()
            .filter(|e| e.tid == 4242 && e.op_id == switch && e.arg1 == 1)
            .map(|e| (e.timestamp, e.duration))
            .collect();
        assert!(sleeps.len() > 100, "{} sleeps", sleeps.len());
        let mut at = sleeps[0].0 - 10_000_000;
        for (ts, off) in sleeps {
            // The workers work 100 us before each of the trainer's sleeps and sleep through it.
            for w in [&slow, &idle] {
                if ts - 100_000 > at {
                    g.switch(w, at, ts - 100_000 - at, 0, 1);
                }
                g.switch(w, ts - 50_000, off + 40_000, 0, 1);
                if w.pid == slow.pid {
                    g.events.last_mut().unwrap().ret_code = i32::from(iowait);
                }
            }
            g.ev(
                &main,
                ts + off - 20_000,
                20_000,
                "sched_wakeup",
                i64::from(waker),
                0,
            );
            at = ts + off;
        }
        starvation_of(nodes)
    }

    #[test]
    fn the_storage_is_the_cause_where_the_worker_delivering_the_batch_waited_for_the_disk() {
        // The worker that woke the trainer slept in I/O wait through every wait: storage.
        let c = one_slow_worker(true, 4300);
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(
            c[0].root_cause.contains("on storage"),
            "{}",
            c[0].root_cause
        );
        assert!(
            c[0].summary
                .contains("the worker with the next batch was waiting for the disk"),
            "{}",
            c[0].summary
        );
        // The same sleeps not in I/O wait (a worker waiting for its next index): not storage.
        let c = one_slow_worker(false, 4300);
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(!c[0].root_cause.contains("storage"), "{}", c[0].root_cause);
        // In I/O wait, but another worker (asleep, not on the disk) delivered the batches: the
        // first one's wait is not the one the trainer waited for.
        let c = one_slow_worker(true, 4301);
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(!c[0].root_cause.contains("storage"), "{}", c[0].root_cause);
    }

    /// The starvation scenario with its workers' preemptions (6 x about 4.1 s) taken by a task
    /// outside the job (tid 5151), of which only every `keep`-th is kept.
    fn preempted_from_outside(keep: usize) -> Vec<crate::chains::Chain> {
        let s = Scenario::DataloaderStarvation;
        let mut nodes = causeway_demo::build(s, false);
        let g = &mut nodes[0].trace;
        let switch = causeway_demo::model::op("sched_switch");
        let mut n = 0usize;
        g.events.retain_mut(|e| {
            if e.op_id != switch || e.arg1 != 0 || !(4250..4256).contains(&e.pid) {
                return true;
            }
            e.arg0 = 5151;
            n += 1;
            n.is_multiple_of(keep)
        });
        starvation_of(nodes)
    }

    #[test]
    fn a_busy_machine_is_named_only_where_the_workers_lost_real_time_to_it() {
        // Every preemption by the outside task: 24 s against the trainer's 11-s wait.
        let c = preempted_from_outside(1);
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(
            c[0].root_cause.contains("busy machine"),
            "{}",
            c[0].root_cause
        );
        assert!(c[0].root_cause.contains("tid 5151"), "{}", c[0].root_cause);
        // One in 200 kept: about 0.12 s, under a tenth of the wait.
        let c = preempted_from_outside(200);
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(!c[0].root_cause.contains("busy"), "{}", c[0].root_cause);
    }

    #[test]
    fn quiet_when_workers_keep_up_or_the_thread_is_busy() {
        assert!(
            chains_of(
                Scenario::DataloaderStarvation,
                true,
                "dataloader_starvation"
            )
            .is_empty()
        );
        assert!(chains_of(Scenario::ThroughputDrop, false, "dataloader_starvation").is_empty());
    }
}
