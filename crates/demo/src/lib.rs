//! Demo scenarios: realistic synthetic traces (no root, no GPU) written through the same
//! `causeway_store::Writer` the collector uses, so `explain` runs on them exactly as on a
//! recording. Deterministic: the same scenario always gives the same trace.

pub mod model;
pub mod scenarios;
pub mod sync_job;

use std::path::Path;

use causeway_store::{StoreError, Writer, WriterOptions};

pub use scenarios::SPAN;

/// A demo scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// CPU contention plus checkpoint stalls: a small production incident.
    Incident,
    /// A metrics agent preempts the launching thread inside its CUDA calls.
    CpuContention,
    /// The training loop waits for batches; workers thrash and are re-forked every epoch.
    DataloaderStarvation,
    /// A hidden `.item()`/`.cpu()` syncs the stream many times per step.
    SyncStorm,
    /// cudaMalloc/cudaFree churn with climbing latency and unfreed blocks.
    MemoryFragmentation,
    /// Synchronous checkpoint writes stall the training loop.
    IoStall,
    /// First launches load modules lazily: a slow first second.
    ColdStart,
    /// Three processes time-slice one GPU.
    GpuContention,
    /// Four nodes; one is throttled and holds the others back.
    Straggler,
    /// The loop waits on the network each step, with TCP retransmits.
    NetworkWait,
    /// Heavy page allocation and an OOM kill.
    HostMemoryPressure,
    /// Launch rate halves mid-run while the thread stays on the CPU.
    ThroughputDrop,
    /// A busy but sound training job: must produce no chain.
    Healthy,
}

impl Scenario {
    /// Every scenario, in listing order.
    pub const ALL: [Scenario; 13] = [
        Scenario::Incident,
        Scenario::CpuContention,
        Scenario::DataloaderStarvation,
        Scenario::SyncStorm,
        Scenario::MemoryFragmentation,
        Scenario::IoStall,
        Scenario::ColdStart,
        Scenario::GpuContention,
        Scenario::Straggler,
        Scenario::NetworkWait,
        Scenario::HostMemoryPressure,
        Scenario::ThroughputDrop,
        Scenario::Healthy,
    ];

    /// The CLI name (`cpu-contention`).
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Incident => "incident",
            Scenario::CpuContention => "cpu-contention",
            Scenario::DataloaderStarvation => "dataloader-starvation",
            Scenario::SyncStorm => "sync-storm",
            Scenario::MemoryFragmentation => "memory-fragmentation",
            Scenario::IoStall => "io-stall",
            Scenario::ColdStart => "cold-start",
            Scenario::GpuContention => "gpu-contention",
            Scenario::Straggler => "straggler",
            Scenario::NetworkWait => "network-wait",
            Scenario::HostMemoryPressure => "host-memory-pressure",
            Scenario::ThroughputDrop => "throughput-drop",
            Scenario::Healthy => "healthy",
        }
    }

    /// One line describing the scenario.
    pub fn description(self) -> &'static str {
        match self {
            Scenario::Incident => {
                "node_exporter preempts the launching thread; checkpoints stall the loop"
            }
            Scenario::CpuContention => {
                "a metrics agent preempts the GPU-feeding thread inside its launches"
            }
            Scenario::DataloaderStarvation => {
                "the loop waits for batches; 6 workers thrash and are re-forked every epoch"
            }
            Scenario::SyncStorm => "a hidden .item() syncs the stream 12 times per step",
            Scenario::MemoryFragmentation => {
                "cudaMalloc/cudaFree every step, latency climbing, 20% never freed"
            }
            Scenario::IoStall => "synchronous checkpoint writes on the training thread every 5 s",
            Scenario::ColdStart => "lazy module loading makes the first launches take tens of ms",
            Scenario::GpuContention => "three processes time-slice GPU 0",
            Scenario::Straggler => "four nodes, gpu-node-c throttled (multi-node)",
            Scenario::NetworkWait => "the loop blocks in net_recv each step; TCP retransmits",
            Scenario::HostMemoryPressure => "heavy page allocation and an OOM kill of a worker",
            Scenario::ThroughputDrop => {
                "Python overhead per launch grows mid-run: launch rate halves"
            }
            Scenario::Healthy => "a busy but sound training job (no chain expected)",
        }
    }

    /// The detector expected to rank first (None for `healthy`).
    pub fn expected_detector(self) -> Option<&'static str> {
        Some(match self {
            Scenario::Incident | Scenario::CpuContention => "cpu_contention",
            Scenario::DataloaderStarvation => "dataloader_starvation",
            Scenario::SyncStorm => "sync_storm",
            Scenario::MemoryFragmentation => "memory_fragmentation",
            Scenario::IoStall => "io_stall",
            Scenario::ColdStart => "cold_start",
            Scenario::GpuContention => "gpu_contention",
            Scenario::Straggler => "straggler",
            Scenario::NetworkWait => "network_wait",
            Scenario::HostMemoryPressure => "host_memory_pressure",
            Scenario::ThroughputDrop => "throughput_drop",
            Scenario::Healthy => return None,
        })
    }

    /// Looks a scenario up by CLI name.
    pub fn parse(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// What was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemoSummary {
    /// Events written.
    pub events: u64,
    /// Nodes written.
    pub nodes: usize,
}

/// Writes scenario `s` (or its healthy baseline) into a new store at `path` (which must not
/// exist), through the collector's writer.
pub fn write_scenario(path: &Path, s: Scenario, healthy: bool) -> Result<DemoSummary, StoreError> {
    write_nodes(path, s, scenarios::build(s, healthy))
}

/// Writes scenario `s` (or its healthy baseline) as `n` store files in `dir`, each holding the
/// events of one `n`-th of the trace's time (and every process), as an agent's closed segments:
/// the directory reads as the same trace as [`write_scenario`]'s file.
pub fn write_scenario_segments(
    dir: &Path,
    s: Scenario,
    healthy: bool,
    n: usize,
) -> Result<DemoSummary, StoreError> {
    let nodes = scenarios::build(s, healthy);
    let stamps = nodes
        .iter()
        .flat_map(|x| x.trace.events.iter().map(|e| e.timestamp));
    let (lo, hi) = stamps.fold((i64::MAX, i64::MIN), |(a, b), t| (a.min(t), b.max(t)));
    let n = n.max(1);
    let step = ((hi - lo) / n as i64).max(1);
    let mut summary = DemoSummary {
        events: 0,
        nodes: nodes.len(),
    };
    for k in 0..n {
        let from = lo + k as i64 * step;
        let last = k + 1 == n;
        let part: Vec<scenarios::NodeTrace> = nodes
            .iter()
            .map(|x| {
                let mut trace = x.trace.clone();
                trace
                    .events
                    .retain(|e| e.timestamp >= from && (last || e.timestamp < from + step));
                scenarios::NodeTrace {
                    node: x.node.clone(),
                    trace,
                }
            })
            .collect();
        summary.events += write_nodes(&dir.join(format!("seg-{k:04}.duckdb")), s, part)?.events;
    }
    Ok(summary)
}

/// A scenario's traces, for tests that add to them before [`write_nodes`].
pub fn build(s: Scenario, healthy: bool) -> Vec<scenarios::NodeTrace> {
    scenarios::build(s, healthy)
}

/// Writes traces built from scenario `s` to a new store at `path`.
pub fn write_nodes(
    path: &Path,
    s: Scenario,
    nodes: Vec<scenarios::NodeTrace>,
) -> Result<DemoSummary, StoreError> {
    let first = nodes
        .first()
        .map_or("demo-node".to_string(), |n| n.node.clone());
    let mut w = Writer::create(
        path,
        WriterOptions {
            node: first,
            ..WriterOptions::default()
        },
    )?;
    let mut events = 0u64;
    for n in &nodes {
        w.set_node(&n.node, &format!("demo:{}", s.name()), "demo")?;
        for p in &n.trace.procs {
            w.upsert_process(p)?;
        }
        for e in &n.trace.events {
            w.append(e)?;
        }
        events += n.trace.events.len() as u64;
    }
    w.finish()?;
    Ok(DemoSummary {
        events,
        nodes: nodes.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Scenario::ALL {
            assert_eq!(Scenario::parse(s.name()), Some(s));
        }
        assert_eq!(Scenario::parse("nope"), None);
        assert_eq!(Scenario::Healthy.expected_detector(), None);
    }
}
