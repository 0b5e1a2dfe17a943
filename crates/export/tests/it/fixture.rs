//! A small two-node store written through the store's Writer with everything the metric exports
//! read: ranked processes, stored calls on both sides of every bucket bound, memcpy bytes,
//! off-CPU intervals in each state, kernel call counts and log2 histograms, and drops.

use std::path::{Path, PathBuf};

use causeway_store::{
    CgroupInfo, Event, HistogramBucket, OpCount, ProcessInfo, Writer, WriterOptions,
};

/// Start of the fixture's events (ns since the Unix epoch).
pub const T0: i64 = 1_774_000_000_000_000_000;
/// Op ids of the catalogue (`causeway_store::catalog`).
pub const LAUNCH: u16 = 3;
pub const MEMCPY: u16 = 4;
pub const SYNC: u16 = 5;
pub const SCHED_SWITCH: u16 = 100;
pub const ALLREDUCE: u16 = 200;
/// Calls of cudaLaunchKernel on gpu-a/100 that the kernel counted without storing them.
pub const UNSTORED_LAUNCHES: u64 = 5;

/// Durations on both sides of every power of two from 2 ns to 2^45 ns, plus 0 and 1.
pub fn boundary_durations() -> Vec<i64> {
    let mut d = vec![0, 1];
    for k in 1..=45 {
        let p = 1i64 << k;
        d.extend([p - 1, p, p + 1]);
    }
    d
}

/// Launch durations of gpu-a/100: the Prometheus bounds and their neighbours, and a long tail.
pub fn launch_durations() -> Vec<i64> {
    let mut d = Vec::new();
    for b in [1_000i64, 4_000, 16_000, 64_000, 1_024_000, 16_777_216_000] {
        d.extend([b - 1, b, b + 1]);
    }
    d.extend([3_000, 5_000, 7_000, 9_000, 2_000_000_000, 20_000_000_000]);
    d
}

fn process(pid: u32, comm: &str, rank: Option<i32>, cluster: &str) -> ProcessInfo {
    ProcessInfo {
        pid,
        ppid: 1,
        comm: comm.into(),
        cmdline: format!("{comm} train.py"),
        first_seen_ns: T0,
        last_seen_ns: T0 + 60_000_000_000,
        rank,
        local_rank: rank.map(|_| 0),
        world_size: rank.map(|_| 2),
        cluster: cluster.into(),
        ..ProcessInfo::default()
    }
}

/// The cgroup of gpu-a/100: a containerd container of pod ml-jobs/trainer-0.
pub const POD_CGROUP: u64 = 4242;
/// Its container id.
pub const CONTAINER_ID: &str = "3f1c2a9be4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b1";

fn event(t: i64, duration: i64, pid: u32, op_id: u16, arg0: i64, arg1: i64) -> Event {
    Event {
        timestamp: t,
        duration,
        pid,
        tid: pid,
        comm: "pt_main_thread".into(),
        op_id,
        arg0,
        arg1,
        ..Event::default()
    }
}

/// Writes the fixture into `dir` and returns its path. Node gpu-a is the writer's own (its host
/// name is this machine's), gpu-b is added like an imported node (no host name).
pub fn fixture(dir: &Path) -> PathBuf {
    let path = dir.join("fixture.duckdb");
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: "gpu-a".into(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    w.set_node("gpu-a", "recorded", "train-7").unwrap();
    w.upsert_process(&ProcessInfo {
        cgroup_id: POD_CGROUP,
        ..process(100, "python3", Some(0), "train-7")
    })
    .unwrap();
    w.add_cgroups(
        "gpu-a",
        &[CgroupInfo {
            cgroup_id: POD_CGROUP,
            container_id: CONTAINER_ID.into(),
            cgroup_path: "/kubepods.slice/x".into(),
            pod_name: "trainer-0".into(),
            namespace: "ml-jobs".into(),
            runtime: "containerd".into(),
            pod_uid: "0f3a5c1e-2b4d-4e6f-8a9b-0c1d2e3f4a5b".into(),
            container_name: "trainer".into(),
            note: String::new(),
        }],
    )
    .unwrap();
    w.upsert_process(&process(101, "tokenizer", None, ""))
        .unwrap();
    let mut t = T0;
    let launches = launch_durations();
    for &d in &launches {
        w.append(&event(t, d, 100, LAUNCH, 0x1000, 64)).unwrap();
        t += 1_000_000;
    }
    for bytes in [4096i64, 1 << 20, 3 << 20] {
        w.append(&event(t, 250_000, 100, MEMCPY, bytes, 1)).unwrap();
        t += 1_000_000;
    }
    for (state, d) in [
        (0, 5_000_000i64),
        (0, 7_000_000),
        (1, 40_000_000),
        (2, 1_000),
    ] {
        w.append(&event(t, d, 100, SCHED_SWITCH, 0, state)).unwrap();
        t += 50_000_000;
    }
    for &d in &boundary_durations() {
        w.append(&event(t, d, 101, SYNC, 7, 0)).unwrap();
        t += 1_000;
    }
    // The kernel counted every launch of pid 100 (some not stored) and timed them in log2
    // buckets; cudaStreamSynchronize of pid 100 was counted and timed only in the kernel.
    let mut hist = [0u64; 64];
    for &d in &launches {
        hist[(63 - (d as u64).leading_zeros()) as usize] += 1;
    }
    hist[12] += UNSTORED_LAUNCHES; // 4096 <= d < 8192
    let total: u64 = launches.iter().map(|&d| d as u64).sum::<u64>() + UNSTORED_LAUNCHES * 5_000;
    let (ws, we) = (T0 - 1_000_000, T0 + 120_000_000_000);
    w.record_op_counts(&[
        OpCount {
            pid: 100,
            op_id: LAUNCH,
            window_start_ns: ws,
            window_end_ns: we,
            calls: launches.len() as u64 + UNSTORED_LAUNCHES,
            stored: launches.len() as u64,
            total_ns: total,
            bytes: 0,
        },
        OpCount {
            pid: 100,
            op_id: SYNC,
            window_start_ns: ws,
            window_end_ns: we,
            calls: 12,
            stored: 0,
            total_ns: 12 * 3_000_000,
            bytes: 0,
        },
    ])
    .unwrap();
    let mut rows: Vec<HistogramBucket> = hist
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(b, n)| HistogramBucket {
            pid: 100,
            op_id: LAUNCH,
            window_start_ns: ws,
            window_end_ns: we,
            log2_bucket: b as u8,
            count: *n,
        })
        .collect();
    rows.push(HistogramBucket {
        pid: 100,
        op_id: SYNC,
        window_start_ns: ws,
        window_end_ns: we,
        log2_bucket: 21, // 2 ms <= d < 4 ms
        count: 12,
    });
    w.record_histogram(&rows).unwrap();
    w.record_drop("ringbuf_full", Some(LAUNCH), 7, "").unwrap();
    w.record_drop("sampled", None, 3, "").unwrap();

    w.set_node("gpu-b", "fixture", "train-7").unwrap();
    w.upsert_process(&process(200, "python3", Some(1), "train-7"))
        .unwrap();
    for (i, d) in [12_000i64, 15_000, 900_000].into_iter().enumerate() {
        w.append(&event(
            T0 + i as i64 * 1_000_000,
            d,
            200,
            LAUNCH,
            0x1000,
            64,
        ))
        .unwrap();
    }
    w.append(&event(
        T0 + 5_000_000,
        30_000_000,
        200,
        ALLREDUCE,
        1 << 24,
        0,
    ))
    .unwrap();
    w.append(&event(T0 + 9_000_000, 2_000_000, 200, SCHED_SWITCH, 0, 1))
        .unwrap();
    w.record_drop("channel_full", None, 2, "").unwrap();
    w.finish().unwrap();
    path
}
