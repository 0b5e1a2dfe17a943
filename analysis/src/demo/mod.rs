//! Demo scenarios: realistic synthetic traces (no root, no GPU) written through the same
//! `causeway_store::Writer` the collector uses, so `explain` runs on them exactly as on a
//! recording. Deterministic: the same scenario always gives the same trace.

pub mod model;
pub(crate) mod scenarios;
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

/// A scenario's traces, for tests that add to them before [`write_nodes`].
#[cfg(test)]
pub(crate) fn build(s: Scenario, healthy: bool) -> Vec<scenarios::NodeTrace> {
    scenarios::build(s, healthy)
}

/// Writes traces built from scenario `s` to a new store at `path`.
pub(crate) fn write_nodes(
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
