//! Shared helpers: store builders (a small one, and a cluster trace like the reference tool's
//! sample) and a check of the reader's locked configuration.

use std::path::PathBuf;

use causeway_store::catalog::op_by_name;
use causeway_store::{
    CgroupInfo, ChainRow, Event, Frame, ProcessInfo, Reader, SessionInfo, SystemSnapshot, Writer,
    WriterOptions,
};

/// A store with `n` synthetic cudaLaunchKernel events (durations 1..=n us) on node "t".
pub fn small_store(dir: &std::path::Path, n: i64) -> PathBuf {
    let path = dir.join("small.duckdb");
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: "t".into(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for i in 0..n {
        w.append(&Event {
            timestamp: 1_000_000_000 + i * 1_000,
            duration: (i + 1) * 1_000,
            pid: 42,
            tid: 43,
            comm: "python3".into(),
            op_id: 3,
            ..Event::default()
        })
        .unwrap();
    }
    w.finish().unwrap();
    path
}

/// Whether `SET enable_external_access = true` succeeds on `r`: it must not on any reader (its
/// database's configuration is locked).
pub fn can_loosen(r: &Reader) -> bool {
    r.prepare_trusted("SET enable_external_access = true")
        .is_ok_and(|mut s| s.execute([]).is_ok())
}

/// A node of [`cluster_store`]: a session, a trainer and a loader process with a call stack
/// each, off-CPU switches, block reads and writes and cuMemAlloc calls, host snapshots, the
/// trainer's cgroup and one stored chain.
fn cluster_node(dir: &std::path::Path, k: i64) -> PathBuf {
    let node = format!("gpu-node-{:02}", k + 1);
    let path = dir.join(format!("{node}.duckdb"));
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: node.clone(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let t0 = 1_700_000_000_000_000_000 + k * 1_000_000;
    let session = w
        .begin_session(&SessionInfo {
            started_ns: t0,
            hostname: node.clone(),
            cpu_cores: 16,
            gpu_model: "NVIDIA A100".into(),
            ..SessionInfo::default()
        })
        .unwrap();
    let (trainer, loader) = (1_000 + k as u32 * 10, 1_001 + k as u32 * 10);
    for (pid, comm) in [(trainer, "python3"), (loader, "pt_data_worker")] {
        w.upsert_process(&ProcessInfo {
            pid,
            ppid: 1,
            comm: comm.into(),
            cmdline: format!("{comm} train.py"),
            first_seen_ns: t0,
            last_seen_ns: t0 + 2_000_000_000,
            cgroup_id: 77,
            ..ProcessInfo::default()
        })
        .unwrap();
        let frames: Vec<Frame> = ["cuMemAlloc_v2", "forward", "train_step"]
            .iter()
            .enumerate()
            .map(|(i, symbol)| Frame {
                ip: 0x1000 + i as u64 * 0x10,
                symbol: (*symbol).into(),
                module: "libcuda.so.1".into(),
                offset: i as u64,
            })
            .collect();
        w.add_stack(i64::from(pid), &frames).unwrap();
    }
    let ops = ["sched_switch", "block_read", "block_write", "cuMemAlloc"]
        .map(|name| op_by_name(name).unwrap().id);
    for i in 0..200i64 {
        let pid = if i % 3 == 0 { loader } else { trainer };
        let op_id = ops[(i % 4) as usize];
        w.append(&Event {
            timestamp: t0 + i * 10_000_000,
            duration: 20_000 + (i * 7_919) % 5_000_000,
            pid,
            tid: pid,
            comm: if pid == trainer {
                "python3"
            } else {
                "pt_data_worker"
            }
            .into(),
            op_id,
            arg0: 4_096 * (i % 16),
            arg1: i % 2,
            stack_hash: i64::from(pid),
            cgroup_id: 77,
            ..Event::default()
        })
        .unwrap();
    }
    w.add_system_snapshots(
        &node,
        &[0, 1].map(|s| SystemSnapshot {
            ts_ns: t0 + s * 1_000_000_000,
            cpu_pct: 85.0,
            mem_pct: 40.0,
            mem_avail_mb: 64_000,
            swap_mb: 0,
            load_avg: 12.5,
        }),
    )
    .unwrap();
    w.add_cgroups(
        &node,
        &[CgroupInfo {
            cgroup_id: 77,
            container_id: format!("c0ffee{k}"),
            cgroup_path: "/kubepods/pod-a/c0ffee".into(),
            pod_name: "trainer-0".into(),
            namespace: "ml".into(),
            runtime: "containerd".into(),
            ..CgroupInfo::default()
        }],
    )
    .unwrap();
    w.add_chains(&[ChainRow {
        chain_id: format!("io-{k}"),
        node: node.clone(),
        detector: "io_stall".into(),
        detected_ns: t0,
        severity: "HIGH".into(),
        summary: "block writes stall the training loop".into(),
        root_cause: "synchronous checkpoint writes".into(),
        recommendations: "[]".into(),
        timeline: "[]".into(),
        evidence_sql: "SELECT * FROM events WHERE op = 'block_write'".into(),
        time_lost_ns: 5_000_000,
        origin: "engine".into(),
        ..ChainRow::default()
    }])
    .unwrap();
    w.end_session(session, t0 + 2_000_000_000).unwrap();
    w.finish().unwrap();
    path
}

/// A three-node cluster trace shaped like the reference tool's sample cluster (its nodes
/// written by the writer, then merged): every relation a query over a trace reads has rows.
pub fn cluster_store(dir: &std::path::Path) -> PathBuf {
    let nodes: Vec<PathBuf> = (0..3).map(|k| cluster_node(dir, k)).collect();
    let out = dir.join("trace.duckdb");
    causeway_store::merge::merge(&nodes, &out, false).unwrap();
    for n in nodes {
        std::fs::remove_file(n).unwrap();
    }
    out
}
