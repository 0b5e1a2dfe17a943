//! One builder per demo scenario: a realistic node (a PyTorch-style trainer `python3`, its
//! `pt_data_worker` processes, an idle API thread) with one pathology injected, or, with
//! `healthy`, the same workload shape without it (the corpus's healthy baseline).

use super::Scenario;
use super::model::{BLOCKED, Gen, Knobs, MS, T0, Thread, US, feed_loop, idle_thread, worker_loop};

/// Length of every demo trace.
pub const SPAN: i64 = 20_000 * MS;
const MAIN: u32 = 4242;

/// One node's worth of events.
#[derive(Debug)]
pub struct NodeTrace {
    /// Node name.
    pub node: String,
    /// Its events and processes.
    pub trace: Gen,
}

fn trainer(g: &mut Gen) -> Thread {
    g.process(MAIN, 1, "python3", "python3 train.py --epochs 3");
    Thread::new(MAIN, MAIN, "python3", 0)
}

/// The companions every node has: an API/metrics thread that sleeps, and two data workers.
fn companions(g: &mut Gen, workers: u32, read_ns: i64, contention: f64) {
    idle_thread(
        g,
        &Thread::new(MAIN, MAIN + 1, "python3", -1),
        T0,
        SPAN,
        100 * MS,
    );
    for w in 0..workers {
        let pid = 4250 + w;
        g.process(
            pid,
            MAIN,
            "pt_data_worker",
            "python3 -c from multiprocessing.spawn import spawn_main",
        );
        let rival = 4250 + (w + 1) % workers.max(1);
        worker_loop(
            g,
            &Thread::new(pid, pid, "pt_data_worker", -1),
            T0 + i64::from(w) * 150 * US,
            SPAN,
            read_ns,
            rival,
            contention,
        );
    }
}

fn single(seed: u64, knobs: Knobs, workers: u32, read_ns: i64, contention: f64) -> Vec<NodeTrace> {
    let mut g = Gen::new(seed);
    let t = trainer(&mut g);
    feed_loop(&mut g, &t, T0 + 5 * MS, SPAN, &knobs);
    companions(&mut g, workers, read_ns, contention);
    vec![NodeTrace {
        node: "demo-node".into(),
        trace: g,
    }]
}

/// Builds the nodes of `s` (`healthy` = the same workload without the pathology).
pub fn build(s: Scenario, healthy: bool) -> Vec<NodeTrace> {
    let seed = s as u64 * 1000 + u64::from(healthy);
    let base = Knobs::default();
    match s {
        Scenario::Healthy => single(seed, base, 2, 300 * US, 0.0),
        Scenario::CpuContention | Scenario::Incident => {
            let mut k = base;
            if !healthy {
                k.preempt = (0.3, MS, 6 * MS);
                k.preempt_by = 5151;
            }
            if s == Scenario::Incident && !healthy {
                k.checkpoint = Some((5_000 * MS, 6, 30 * MS));
            }
            let mut nodes = single(seed, k, 2, 300 * US, 0.0);
            let g = &mut nodes[0].trace;
            g.process(
                5151,
                1,
                "node_exporter",
                "/usr/bin/node_exporter --collector.textfile",
            );
            let hog = Thread::new(5151, 5151, "node_exporter", -1);
            idle_thread(g, &hog, T0, SPAN, 250 * MS);
            nodes
        }
        Scenario::DataloaderStarvation => {
            let mut k = base;
            let (workers, read, contention) = if healthy {
                (4, 400 * US, 0.0)
            } else {
                k.wait_batch_ns = 25 * MS;
                k.sync_memcpy_ns = 2 * MS;
                (6, 5 * MS, 0.6)
            };
            let mut nodes = single(seed, k, workers, read, contention);
            if !healthy {
                // persistent_workers=False: the pool is torn down and forked again every epoch.
                let g = &mut nodes[0].trace;
                let main = Thread::new(MAIN, MAIN, "python3", 0);
                let mut t = T0 + 2_000 * MS;
                while t < T0 + SPAN {
                    for w in 0..workers {
                        g.ev(&main, t, 0, "process_fork", i64::from(4250 + w), 0);
                        g.ev(
                            &Thread::new(4250 + w, 4250 + w, "pt_data_worker", -1),
                            t - MS,
                            2_000 * MS,
                            "process_exit",
                            0,
                            0,
                        );
                    }
                    t += 2_000 * MS;
                }
            }
            nodes
        }
        Scenario::SyncStorm => {
            let mut k = base;
            if !healthy {
                k.syncs_per_step = 12;
            }
            single(seed, k, 2, 300 * US, 0.0)
        }
        Scenario::MemoryFragmentation => {
            let mut k = base;
            k.malloc = Some(if healthy {
                (40 * US, 40 * US, 1.0)
            } else {
                (40 * US, 3 * MS, 0.8)
            });
            single(seed, k, 2, 300 * US, 0.0)
        }
        Scenario::IoStall => {
            let mut k = base;
            if !healthy {
                k.checkpoint = Some((5_000 * MS, 10, 40 * MS));
            }
            let mut nodes = single(seed, k, 2, 300 * US, 0.0);
            if healthy {
                // The same checkpoints, written by a background thread: the loop never waits.
                let g = &mut nodes[0].trace;
                let w = Thread::new(MAIN, MAIN + 2, "ckpt_writer", -1);
                let mut t = T0 + 5_000 * MS;
                while t < T0 + SPAN {
                    for i in 0..10 {
                        let at = t + i * 41 * MS;
                        g.ev(&w, at, 40 * MS, "block_write", 8 << 20, 259 << 20);
                        g.switch(&w, at + 10 * US, 40 * MS - 5 * US, 0, BLOCKED);
                    }
                    t += 5_000 * MS;
                }
            }
            nodes
        }
        Scenario::ColdStart => {
            let mut k = base;
            if !healthy {
                k.cold_launch_ns = 40 * MS;
            }
            single(seed, k, 2, 300 * US, 0.0)
        }
        Scenario::NetworkWait => {
            let mut k = base;
            if !healthy {
                k.net_wait_ns = 9 * MS;
            }
            let mut nodes = single(seed, k, 2, 300 * US, 0.0);
            if !healthy {
                let g = &mut nodes[0].trace;
                let t = Thread::new(MAIN, MAIN, "python3", 0);
                for i in 0..40 {
                    g.ev(&t, T0 + i * 480 * MS, 0, "tcp_retransmit", 29500, 2);
                }
            }
            nodes
        }
        Scenario::HostMemoryPressure => {
            let mut nodes = single(seed, base, 2, 300 * US, 0.0);
            let g = &mut nodes[0].trace;
            let t = Thread::new(MAIN, MAIN, "python3", 0);
            let (every, bytes) = if healthy {
                (50 * MS, 4 << 20)
            } else {
                (MS, 8 << 20)
            };
            let mut at = T0;
            while at < T0 + SPAN {
                g.ev(&t, at, 0, "mm_page_alloc", bytes, 9);
                at += every;
            }
            if !healthy {
                let w = Thread::new(4251, 4251, "pt_data_worker", -1);
                g.ev(&w, T0 + 15_000 * MS, 0, "oom_kill", 4251, 3_800_000);
            }
            nodes
        }
        Scenario::ThroughputDrop => {
            let mut k = base;
            if !healthy {
                k.slowdown = Some((10_000 * MS, 3 * MS));
            }
            single(seed, k, 2, 300 * US, 0.0)
        }
        Scenario::GpuContention => {
            let mut g = Gen::new(seed);
            for (i, pid) in [MAIN, 4300, 4400].into_iter().enumerate() {
                let gpu = if healthy { i as i16 } else { 0 };
                g.process(pid, 1, "python3", "python3 serve.py");
                let t = Thread::new(pid, pid, "python3", gpu);
                let mut k = Knobs::default();
                if !healthy {
                    k.gpu_step_ns *= 3;
                }
                feed_loop(&mut g, &t, T0 + i as i64 * 3 * MS, SPAN, &k);
            }
            vec![NodeTrace {
                node: "demo-node".into(),
                trace: g,
            }]
        }
        Scenario::Straggler => ["gpu-node-a", "gpu-node-b", "gpu-node-c", "gpu-node-d"]
            .into_iter()
            .enumerate()
            .map(|(i, node)| {
                let mut g = Gen::new(seed + i as u64);
                let t = trainer(&mut g);
                let mut k = Knobs {
                    nccl: true,
                    ..Knobs::default()
                };
                if !healthy && node == "gpu-node-c" {
                    // A throttled host: every launch costs 4x, the step 1.5x.
                    k.launch_ns *= 4;
                    k.gpu_step_ns = k.gpu_step_ns * 3 / 2;
                }
                feed_loop(&mut g, &t, T0 + 5 * MS, SPAN, &k);
                idle_thread(
                    &mut g,
                    &Thread::new(MAIN, MAIN + 1, "python3", -1),
                    T0,
                    SPAN,
                    100 * MS,
                );
                NodeTrace {
                    node: node.into(),
                    trace: g,
                }
            })
            .collect(),
    }
}
