//! The causal analysis engine behind `explain`, `get_causal_chains` and `run_demo`: gathers the
//! facts once, runs every detector, ranks the chains by estimated time lost, and reports the
//! off-CPU attribution, launch rates and (optionally) per-process statistics with imbalances.

use causeway_store::{Reader, StoreError};
use serde::Serialize;

use crate::attribution::{OffCpuSplit, ThreadAttribution, attribute, split};
use crate::chains::{Chain, ChainQuery};
use crate::detectors::{self, Input};
use crate::facts::Ctx;
use crate::fmt::dur;
use crate::rates::{RateSeries, launch_rates};
use crate::window::Window;

/// p50/p99 of one op in one process.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProcessOp {
    /// Source name.
    pub source: String,
    /// Op name.
    pub op: String,
    /// Calls.
    pub count: u64,
    /// Nearest-rank p50 (ns).
    pub p50_ns: i64,
    /// Nearest-rank p99 (ns).
    pub p99_ns: i64,
}

/// Per-op statistics of one process.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProcessStats {
    /// Node.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// Name.
    pub comm: String,
    /// GPU ops (CUDA, DRIVER, GRAPH, NCCL).
    pub ops: Vec<ProcessOp>,
    /// Imbalance warnings: this process's p50 of an op against the median of its peers.
    pub warnings: Vec<String>,
}

/// What `explain` returns.
#[derive(Debug, Clone, Serialize)]
pub struct Explain {
    /// Ranked chains, worst first (the required shape's `chains`).
    pub chains: Vec<Chain>,
    /// The window analysed.
    pub window: Window,
    /// Nodes in it.
    pub nodes: Vec<String>,
    /// Where the time of every GPU-calling thread and process went: a closed partition of
    /// each one's span (processes first).
    pub budgets: Vec<crate::budget::Budget>,
    /// GPU time per device of each process: measured on the device timeline where the trace
    /// has one, and the host-side estimate always.
    pub devices: Vec<crate::device::DeviceTime>,
    /// Where off-CPU time went.
    pub off_cpu: OffCpuSplit,
    /// Per-thread attribution of slow calls.
    pub attribution: Vec<ThreadAttribution>,
    /// Launch rate summaries of launching threads (per-second series omitted when long).
    pub rates: Vec<RateSeries>,
    /// Per-process statistics, with `--per-process`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_process: Option<Vec<ProcessStats>>,
    /// Things the reader should know (conventions, caveats).
    pub notes: Vec<String>,
}

/// Options beyond the chain query.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExplainOptions {
    /// Add per-process statistics with imbalance warnings.
    pub per_process: bool,
}

/// Runs the engine over `q` (window, pid, node, top_n).
pub fn explain(r: &Reader, q: &ChainQuery) -> Result<Explain, StoreError> {
    explain_with(r, q, ExplainOptions::default())
}

/// [`explain`] with options.
pub fn explain_with(
    r: &Reader,
    q: &ChainQuery,
    opts: ExplainOptions,
) -> Result<Explain, StoreError> {
    let ctx = Ctx::load(r, q)?;
    let budgets = crate::budget::budgets(&ctx)?;
    let devices = crate::device::device_times(&ctx, &budgets)?;
    let attr = attribute(&ctx)?;
    let off = split(&ctx, &attr);
    let mut rates = launch_rates(&ctx)?;
    let waits = detectors::waits::host_waits(&ctx)?;
    let reclaims = detectors::host_memory_pressure::reclaims(&ctx)?;
    let input = Input {
        ctx: &ctx,
        attr: &attr,
        split: &off,
        rates: &rates,
        waits: &waits,
        budgets: &budgets,
        reclaims: &reclaims,
        devices: &devices,
    };
    let mut chains = Vec::new();
    for (name, detect) in detectors::ALL {
        let found = detect(&input)?;
        tracing::debug!(detector = name, chains = found.len(), "detector ran");
        chains.extend(found);
    }
    chains.sort_by(|a, b| {
        b.time_lost_ns
            .cmp(&a.time_lost_ns)
            .then(b.severity.cmp(&a.severity))
            .then(a.detector.cmp(&b.detector))
            .then(a.node.cmp(&b.node))
    });
    for (i, c) in chains.iter_mut().enumerate() {
        c.id = format!("{}-{}", c.detector, i + 1);
    }
    if let Some(n) = q.top_n {
        chains.truncate(n);
    }
    crate::sites::cite(r, &ctx.window, &mut chains)?;
    crate::cost::price(r, &ctx, &mut chains, &q.prices)?;
    crate::step_cost::attach(r, &ctx.window, &mut chains)?;
    let mut notes = crate::coverage::notes(r, &ctx.window, q.pid, q.node.as_deref())?;
    notes.extend(detectors::feeding_stall::startup_notes(&ctx, &budgets));
    for n in &ctx.nodes {
        if ctx.resume_convention(n) {
            notes.push(format!("{n}: imported trace stamps sched_switch at switch-in; off-CPU intervals were read as [timestamp - duration, timestamp]"));
        }
    }
    if off.total_ns > 0 {
        notes.push(format!(
            "off-CPU {}: {} inside slow GPU calls, {} elsewhere on GPU-calling threads, {} on threads with no GPU call (not blamed on the GPU path)",
            dur(off.total_ns),
            dur(off.inside_slow_calls_ns),
            dur(off.feeders_elsewhere_ns),
            dur(off.non_gpu_threads_ns)
        ));
    }
    if ctx.threads.iter().all(|t| t.gpu_calls == 0) {
        notes.push(
            "no CUDA/driver call in this window: GPU-path detectors had nothing to examine".into(),
        );
    }
    if chains.is_empty() {
        notes.push(
            "no causal chain: nothing in this window costs the GPU path measurable time".into(),
        );
    }
    for s in &mut rates {
        if s.per_second.len() > 120 {
            s.per_second.clear();
        }
    }
    let per_process = opts.per_process.then(|| per_process(&ctx));
    Ok(Explain {
        chains,
        window: ctx.window,
        nodes: ctx.nodes.clone(),
        budgets,
        devices,
        off_cpu: off,
        attribution: attr,
        rates,
        per_process,
        notes,
    })
}

fn per_process(ctx: &Ctx<'_>) -> Vec<ProcessStats> {
    let gpu = ["CUDA", "DRIVER", "GRAPH", "NCCL"];
    let mut out: Vec<ProcessStats> = Vec::new();
    for o in ctx.ops.iter().filter(|o| gpu.contains(&o.source.as_str())) {
        let op = ProcessOp {
            source: o.source.clone(),
            op: o.op.clone(),
            count: o.count,
            p50_ns: o.p50_ns,
            p99_ns: o.p99_ns,
        };
        match out.iter_mut().find(|p| p.node == o.node && p.pid == o.pid) {
            Some(p) => p.ops.push(op),
            None => out.push(ProcessStats {
                node: o.node.clone(),
                pid: o.pid,
                comm: ctx.name(&o.node, o.pid),
                ops: vec![op],
                warnings: Vec::new(),
            }),
        }
    }
    // Imbalance: a process whose p50 of an op is >= 2x the median p50 of the processes with it.
    let snapshot = out.clone();
    for p in &mut out {
        for op in &p.ops {
            let mut peers: Vec<i64> = snapshot
                .iter()
                .filter_map(|q| {
                    q.ops
                        .iter()
                        .find(|x| x.op == op.op && x.count >= 10)
                        .map(|x| x.p50_ns)
                })
                .collect();
            if peers.len() < 2 || op.count < 10 {
                continue;
            }
            peers.sort_unstable();
            let med = peers[(peers.len() - 1) / 2];
            if op.p50_ns >= 2 * med.max(1) {
                p.warnings.push(format!(
                    "{} p50 {} is {:.1}x the median of {} processes ({})",
                    op.op,
                    dur(op.p50_ns),
                    op.p50_ns as f64 / med.max(1) as f64,
                    peers.len(),
                    dur(med)
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_demo::{Scenario, write_scenario};

    #[test]
    fn healthy_demo_has_no_chain_and_chains_are_ranked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("h.duckdb");
        write_scenario(&p, Scenario::Healthy, false).unwrap();
        let r = Reader::open(&p).unwrap();
        let e = explain(&r, &ChainQuery::default()).unwrap();
        assert!(e.chains.is_empty(), "{:#?}", e.chains);
        assert!(e.notes.iter().any(|n| n.starts_with("no causal chain")));

        let p = dir.path().join("i.duckdb");
        write_scenario(&p, Scenario::Incident, false).unwrap();
        let r = Reader::open(&p).unwrap();
        let e = explain_with(
            &r,
            &ChainQuery::default(),
            ExplainOptions { per_process: true },
        )
        .unwrap();
        assert!(e.chains.len() >= 2, "{:#?}", e.chains);
        assert!(
            e.chains
                .windows(2)
                .all(|w| w[0].time_lost_ns >= w[1].time_lost_ns)
        );
        assert_eq!(e.chains[0].detector, "cpu_contention");
        assert!(e.per_process.is_some_and(|p| !p.is_empty()));
    }
}
