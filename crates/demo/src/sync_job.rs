//! A synchronous data-parallel job across nodes (one or more ranks per node): each step every rank
//! launches its kernels, enqueues an all-reduce and waits in `cudaStreamSynchronize` until the
//! collective completes, which happens when the last rank has arrived. An optional straggler
//! rank gets slower from a given moment because a competing task preempts its feeding thread.
//! Used by the straggler tests and benchmark (`8 ranks, one 30% slower from T`).

use std::path::Path;

use causeway_store::{StoreError, Writer, WriterOptions};

use super::model::{Gen, MS, PREEMPTED, T0, Thread, US};

/// Shape of the job.
#[derive(Debug, Clone)]
pub struct SyncJob {
    /// Ranks in all.
    pub ranks: usize,
    /// Ranks per node: 1 names the nodes `rank-0` ...; more puts consecutive ranks on nodes
    /// `node-0` ... as separate processes with RANK/LOCAL_RANK/WORLD_SIZE.
    pub ranks_per_node: usize,
    /// Trace length (ns).
    pub span_ns: i64,
    /// Compute time per step (ns) before the collective.
    pub compute_ns: i64,
    /// Time the all-reduce takes once every rank has arrived (ns).
    pub allreduce_ns: i64,
    /// The straggler: (rank, from ns after the start, extra compute fraction, e.g. 0.3).
    pub straggler: Option<(usize, i64, f64)>,
}

impl Default for SyncJob {
    fn default() -> Self {
        SyncJob {
            ranks: 8,
            ranks_per_node: 1,
            span_ns: 120_000 * MS,
            compute_ns: 80 * MS,
            allreduce_ns: 12 * MS,
            straggler: None,
        }
    }
}

const PID: u32 = 7000;
const LAUNCHES_PER_STEP: i64 = 16;

fn node_name(job: &SyncJob, rank: usize) -> String {
    if job.ranks_per_node <= 1 {
        format!("rank-{rank}")
    } else {
        format!("node-{}", rank / job.ranks_per_node)
    }
}

/// The process of a rank: one pid per local rank.
fn pid_of(job: &SyncJob, rank: usize) -> u32 {
    PID + (rank % job.ranks_per_node.max(1)) as u32
}

/// Generates the job's events per node, deterministically.
pub fn build(job: &SyncJob) -> Vec<(String, Gen)> {
    let mut gens: Vec<Gen> = (0..job.ranks)
        .map(|r| Gen::new(0x5EED + r as u64))
        .collect();
    let threads: Vec<Thread> = (0..job.ranks)
        .map(|r| {
            let pid = pid_of(job, r);
            Thread::new(pid, pid, "python3", (r % job.ranks_per_node.max(1)) as i16)
        })
        .collect();
    for (r, g) in gens.iter_mut().enumerate() {
        g.process(
            pid_of(job, r),
            1,
            "python3",
            &format!(
                "torchrun --node-rank {} train.py",
                r / job.ranks_per_node.max(1)
            ),
        );
        if let Some(p) = g.procs.last_mut() {
            p.rank = Some(r as i32);
            p.local_rank = Some((r % job.ranks_per_node.max(1)) as i32);
            p.world_size = Some(job.ranks as i32);
        }
    }
    let mut step_start = T0 + 10 * MS;
    while step_start < T0 + job.span_ns - 500 * MS {
        let mut entries = Vec::with_capacity(job.ranks);
        for (r, g) in gens.iter_mut().enumerate() {
            let t = &threads[r];
            let mut compute = g.jitter(job.compute_ns, 2);
            let slow = job
                .straggler
                .filter(|s| s.0 == r && step_start >= T0 + s.1)
                .map(|s| (job.compute_ns as f64 * s.2) as i64);
            let gap = compute / LAUNCHES_PER_STEP;
            let mut ts = step_start;
            for i in 0..LAUNCHES_PER_STEP {
                let d = g.jitter(12 * US, 20);
                g.ev(t, ts, d, "cudaLaunchKernel", 0x7f00 + i, 0);
                ts += gap;
            }
            if let Some(extra) = slow {
                // A competing task takes the CPU from the feeding thread mid-step.
                g.switch(t, step_start + compute / 2, extra, 31_337, PREEMPTED);
                compute += extra;
            }
            entries.push(step_start + compute);
        }
        let done = entries.iter().copied().max().unwrap_or(step_start) + job.allreduce_ns;
        for (r, g) in gens.iter_mut().enumerate() {
            let t = &threads[r];
            let enq = g.jitter(30 * US, 20);
            g.ev(t, entries[r], enq, "ncclAllReduce", 256 << 20, 0xc0);
            let wait_from = entries[r] + enq + 5 * US;
            let end = done + g.between(0, 200 * US);
            g.ev(t, wait_from, end - wait_from, "cudaStreamSynchronize", 0, 0);
        }
        step_start = done + 300 * US;
    }
    gens.into_iter()
        .enumerate()
        .map(|(r, mut g)| {
            for e in &mut g.events {
                e.rank = Some(r as i32);
            }
            (node_name(job, r), g)
        })
        .collect()
}

/// Writes the job into a new store at `path` through the collector's writer; returns events.
pub fn write(path: &Path, job: &SyncJob) -> Result<u64, StoreError> {
    let nodes = build(job);
    let mut w = Writer::create(
        path,
        WriterOptions {
            node: nodes[0].0.clone(),
            ..WriterOptions::default()
        },
    )?;
    let mut events = 0;
    for (node, g) in &nodes {
        w.set_node(node, "demo:sync-job", "demo")?;
        for p in &g.procs {
            w.upsert_process(p)?;
        }
        for e in &g.events {
            w.append(e)?;
        }
        events += g.events.len() as u64;
    }
    w.finish()?;
    Ok(events)
}
