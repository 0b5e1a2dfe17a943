//! Where a process ran survives the trip from a recording node to `causeway collect`: a store
//! with a process in a pod's container is exported as OTLP metrics (the sender's path), decoded
//! (the receiver's) and written into a cluster store, whose processes and cgroups then say the
//! same as the recording's.

use causeway_ingest::received::CollectedStore;
use causeway_store::{CgroupInfo, Event, ProcessInfo, Reader, Writer, WriterOptions};

const ID: &str = "3f1c2a9be4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b1";

#[test]
fn pod_attribution_travels_over_otlp() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("node.duckdb");
    let mut w = Writer::create(
        &src,
        WriterOptions {
            node: "gpu-7".into(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let pod = CgroupInfo {
        cgroup_id: 4242,
        container_id: ID.into(),
        cgroup_path: "/kubepods.slice/x".into(),
        pod_name: "trainer-0".into(),
        namespace: "ml-jobs".into(),
        runtime: "containerd".into(),
        pod_uid: "0f3a5c1e-2b4d-4e6f-8a9b-0c1d2e3f4a5b".into(),
        container_name: "trainer".into(),
        note: String::new(),
    };
    w.add_cgroups("gpu-7", std::slice::from_ref(&pod)).unwrap();
    for (pid, cgroup_id) in [(100u32, 4242u64), (101, 0)] {
        w.upsert_process(&ProcessInfo {
            pid,
            comm: "python3".into(),
            first_seen_ns: 1_000_000_000,
            last_seen_ns: 2_000_000_000,
            cgroup_id,
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
            ..Event::default()
        })
        .unwrap();
    }
    w.finish().unwrap();

    let req = causeway_export::otlp::metrics_request(&Reader::open(&src).unwrap()).unwrap();
    let decoded = causeway_ingest::decode::metrics(&req);
    assert_eq!(decoded.rejected, 0, "{}", decoded.error);
    let cluster = dir.path().join("cluster.duckdb");
    let mut store = CollectedStore::create(&cluster, WriterOptions::default()).unwrap();
    store.store(&decoded.rows).unwrap();
    store.finish().unwrap();

    let r = Reader::open(&cluster).unwrap();
    type Row = (i64, String, String, String, String, String, String, String);
    let got: Vec<Row> = r
        .prepare_trusted(
            "SELECT p.pid::BIGINT, c.container_id, c.runtime, c.pod_name, c.namespace, c.pod_uid,
                    c.container_name, p.node
             FROM processes p JOIN cgroups c USING (node, cgroup_id) ORDER BY 1",
        )
        .unwrap()
        .query_map([], causeway_store::row)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        got,
        vec![(
            100,
            ID.to_string(),
            "containerd".into(),
            "trainer-0".into(),
            "ml-jobs".into(),
            pod.pod_uid.clone(),
            "trainer".into(),
            "gpu-7".into()
        )],
        "pid 100 in its pod, pid 101 in none"
    );
}
