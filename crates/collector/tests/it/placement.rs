//! Where traced processes run: a traced command that moves itself into a cgroup named the way
//! containerd names a Kubernetes pod's container, with pod names from a fake kubelet on
//! loopback. Its processes' rows carry the cgroup and GPU visibility, the cgroup's row the
//! runtime, container, pod uid and names, and its events the same cgroup id (the kernel's).

use std::os::unix::fs::MetadataExt;

use causeway_placement::testing::{self, CgroupTree, FakeKubelet};

use crate::{args, bpf_test, db_path, open, q, standin, trace};

const ID: &str = "3f1c2a9be4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b1";
const UID: &str = "0f3a5c1e-2b4d-4e6f-8a9b-0c1d2e3f4a5b";

fn container_path() -> String {
    format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope",
        UID.replace('-', "_")
    )
}

#[test]
fn processes_in_a_pod_are_attributed_to_it() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let tree = CgroupTree::new("collector-placement");
    let (rel, cgdir) = tree.create(&container_path());
    let cgroup_id = std::fs::metadata(&cgdir).unwrap().ino();
    let kubelet = FakeKubelet::start(
        200,
        testing::pod_list(UID, "trainer-0", "ml-jobs", "trainer", ID),
        Some("sa-token"),
    );
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "sa-token\n").unwrap();
    let db = db_path(&dir);
    // The command enters the container's cgroup, then runs the workload (which forks).
    let script = format!(
        "echo $$ > {}/cgroup.procs && CUDA_VISIBLE_DEVICES=2 exec {} fork 3 7",
        cgdir.display(),
        s.exe()
    );
    let mut a = args(&db, &["sh", "-c", &script]);
    a.kube_pods = Some(kubelet.url.clone());
    a.kube_token_file = Some(token);
    let summary = trace(&a);
    assert_eq!(summary.command_exit, Some(0));

    // Both CUDA processes (parent and forked child) are in the container's cgroup.
    let launchers = "SELECT DISTINCT pid FROM events WHERE op = 'cudaLaunchKernel'";
    assert_eq!(q(&db, &format!("SELECT count(*) FROM ({launchers})")), 2);
    assert_eq!(
        q(
            &db,
            &format!(
                "SELECT count(*) FROM processes WHERE pid IN ({launchers}) AND cgroup_id = {cgroup_id}
                 AND gpu_visible = 'CUDA_VISIBLE_DEVICES=2'"
            )
        ),
        2,
        "processes carry the cgroup and their GPU visibility"
    );
    // The kernel's cgroup id on every event is the same as ours.
    assert_eq!(
        q(
            &db,
            &format!(
                "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel' AND cgroup_id <> {cgroup_id}"
            )
        ),
        0
    );
    let c = open(&db);
    let row: (String, String, String, String, String, String, String, String) = c
        .query_row(
            &format!(
                "SELECT cgroup_path, runtime, container_id, pod_uid, pod_name, namespace, container_name, note
                 FROM cgroups WHERE cgroup_id = {cgroup_id}"
            ),
            [],
            causeway_store::row,
        )
        .unwrap();
    assert_eq!(
        row,
        (
            rel,
            "containerd".into(),
            ID.into(),
            UID.into(),
            "trainer-0".into(),
            "ml-jobs".into(),
            "trainer".into(),
            String::new()
        )
    );
    assert_eq!(kubelet.hits(), 1, "one pod, one request");
    drop(tree);
}

#[test]
fn an_unreachable_kubelet_costs_names_not_events() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let tree = CgroupTree::new("collector-placement-down");
    let (_, cgdir) = tree.create(&container_path());
    let cgroup_id = std::fs::metadata(&cgdir).unwrap().ino();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/pods", closed.local_addr().unwrap());
    drop(closed);
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec {} fork 3 7",
        cgdir.display(),
        s.exe()
    );
    let mut a = args(&db, &["sh", "-c", &script]);
    a.kube_pods = Some(url);
    let summary = trace(&a);
    assert_eq!(summary.command_exit, Some(0));
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel'"
        ),
        10,
        "every call recorded"
    );
    let c = open(&db);
    let (container, pod_name, note): (String, String, String) = c
        .query_row(
            &format!(
                "SELECT container_id, pod_name, note FROM cgroups WHERE cgroup_id = {cgroup_id}"
            ),
            [],
            causeway_store::row,
        )
        .unwrap();
    assert_eq!(container, ID, "the container id stays");
    assert_eq!(pod_name, "");
    assert!(note.contains("cannot reach"), "{note}");
    drop(tree);
}
