//! `stats` and `explain` name where processes ran: a store with one process in a named pod, one in a pod
//! Kubernetes could not name, one in a Docker container and one in a login session, written
//! through the writer as the recorder writes them.

use causeway_analysis::{StatsQuery, trace_stats};
use causeway_store::{CgroupInfo, Event, ProcessInfo, Reader, Writer, WriterOptions};

const ID: &str = "3f1c2a9be4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b1";

#[test]
fn stats_lists_containerised_processes_with_their_pod() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("placed.duckdb");
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: "gpu-7".into(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let cgroup = |id: u64, runtime: &str, pod_uid: &str, pod: &str, container: &str, note: &str| {
        CgroupInfo {
            cgroup_id: id,
            container_id: if runtime.is_empty() { "" } else { ID }.into(),
            cgroup_path: format!("/cg/{id}"),
            pod_name: pod.into(),
            namespace: if pod.is_empty() { "" } else { "ml-jobs" }.into(),
            runtime: runtime.into(),
            pod_uid: pod_uid.into(),
            container_name: container.into(),
            note: note.into(),
        }
    };
    w.add_cgroups(
        "gpu-7",
        &[
            cgroup(11, "containerd", "u-1", "trainer-0", "trainer", ""),
            cgroup(12, "cri-o", "u-2", "", "", "pod metadata refused: 403"),
            cgroup(13, "docker", "", "", "", ""),
            cgroup(14, "", "", "", "", ""),
        ],
    )
    .unwrap();
    for (pid, cg, gpus) in [
        (100u32, 11u64, "CUDA_VISIBLE_DEVICES=2"),
        (101, 12, ""),
        (102, 13, ""),
        (103, 14, ""),
    ] {
        w.upsert_process(&ProcessInfo {
            pid,
            comm: "python3".into(),
            first_seen_ns: 1_000_000_000,
            last_seen_ns: 2_000_000_000,
            cgroup_id: cg,
            gpu_visible: gpus.into(),
            gpu_devices: if pid == 100 {
                "nvidia2".into()
            } else {
                String::new()
            },
            ..ProcessInfo::default()
        })
        .unwrap();
        w.append(&Event {
            timestamp: 1_500_000_000,
            duration: 5_000,
            pid,
            tid: pid,
            comm: "python3".into(),
            op_id: 3,
            cgroup_id: cg,
            ..Event::default()
        })
        .unwrap();
    }
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    let s = trace_stats(&r, &StatsQuery::default()).unwrap();
    let lines: Vec<(u32, String, String, String)> = s
        .placed
        .iter()
        .map(|p| (p.pid, p.describe(), p.gpus.clone(), p.note.clone()))
        .collect();
    assert_eq!(
        lines,
        vec![
            (
                100,
                "pod ml-jobs/trainer-0, container trainer (containerd 3f1c2a9be4d5)".into(),
                "CUDA_VISIBLE_DEVICES=2; open nvidia2".into(),
                String::new()
            ),
            (
                101,
                "pod uid u-2 (cri-o 3f1c2a9be4d5)".into(),
                String::new(),
                "pod metadata refused: 403".into()
            ),
            (
                102,
                "container (docker 3f1c2a9be4d5)".into(),
                String::new(),
                String::new()
            ),
        ],
        "the login-session process is not a container's"
    );
    // --pid narrows it like every other part of stats.
    let one = trace_stats(
        &r,
        &StatsQuery {
            pid: Some(102),
            ..StatsQuery::default()
        },
    )
    .unwrap();
    assert_eq!(one.placed.len(), 1);
    assert_eq!(one.placed[0].pid, 102);
    // explain's time budgets name the pod of each GPU-feeding process.
    let e =
        causeway_analysis::engine::explain(&r, &causeway_analysis::ChainQuery::default()).unwrap();
    let of = |pid: u32| {
        e.budgets
            .iter()
            .filter(|b| b.pid == pid)
            .map(|b| b.place.clone())
            .collect::<Vec<_>>()
    };
    assert!(!of(100).is_empty(), "pid 100 has a budget");
    assert!(
        of(100)
            .iter()
            .all(|p| p == "pod ml-jobs/trainer-0, container trainer (containerd 3f1c2a9be4d5)"),
        "{:?}",
        of(100)
    );
    assert!(of(103).iter().all(String::is_empty), "not a container's");
    let text = causeway_tools::print::explain::budgets(&e.budgets, e.window.from_ns);
    assert!(
        text.contains("python3 pid 100 tid 100, pod ml-jobs/trainer-0, container trainer"),
        "{text}"
    );
}
