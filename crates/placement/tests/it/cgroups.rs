//! Cgroup paths as each runtime names them (the forms below are the runtimes' documented
//! conventions: the kubelet's systemd and cgroupfs drivers, containerd's and CRI-O's scopes,
//! Docker's and Podman's), classified; then real directories with a real process in each.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command};

use causeway_placement::testing::CgroupTree;
use causeway_placement::{Placer, Runtime, classify};

const ID: &str = "3f1c2a9be4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b1";
const UID: &str = "0f3a5c1e-2b4d-4e6f-8a9b-0c1d2e3f4a5b";
const UID_: &str = "0f3a5c1e_2b4d_4e6f_8a9b_0c1d2e3f4a5b";

/// (path, runtime, container id?, pod uid?, unit)
fn cases() -> Vec<(String, Runtime, bool, bool, &'static str)> {
    vec![
        // kubelet, systemd driver, containerd.
        (
            format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope"
            ),
            Runtime::Containerd,
            true,
            true,
            "",
        ),
        // Guaranteed QoS has no QoS slice.
        (
            format!("/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{ID}.scope"),
            Runtime::Containerd,
            true,
            true,
            "",
        ),
        // kubelet, systemd driver, CRI-O; its conmon scope is not the container.
        (
            format!(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{ID}.scope"
            ),
            Runtime::CriO,
            true,
            true,
            "",
        ),
        (
            format!(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-conmon-{ID}.scope"
            ),
            Runtime::None,
            false,
            true,
            "",
        ),
        // kubelet, cgroupfs driver: runtime not in the path.
        (
            format!("/kubepods/burstable/pod{UID}/{ID}"),
            Runtime::Kubernetes,
            true,
            true,
            "",
        ),
        // Docker, systemd and cgroupfs drivers.
        (
            format!("/system.slice/docker-{ID}.scope"),
            Runtime::Docker,
            true,
            false,
            "",
        ),
        (format!("/docker/{ID}"), Runtime::Docker, true, false, ""),
        // Podman, root (machine.slice, process in the nested "container" group) and rootless.
        (
            format!("/machine.slice/libpod-{ID}.scope/container"),
            Runtime::Podman,
            true,
            false,
            "",
        ),
        (
            format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"),
            Runtime::Podman,
            true,
            false,
            "user@1000.service",
        ),
        // systemd units and plain groups.
        (
            "/system.slice/nginx.service".into(),
            Runtime::Systemd,
            false,
            false,
            "nginx.service",
        ),
        (
            "/user.slice/user-1000.slice/session-3.scope".into(),
            Runtime::Systemd,
            false,
            false,
            "session-3.scope",
        ),
        // A unit named like a runtime's scope is not a container.
        (
            "/system.slice/docker-compose.service".into(),
            Runtime::Systemd,
            false,
            false,
            "docker-compose.service",
        ),
        ("/".into(), Runtime::None, false, false, ""),
        ("/batch/job-7".into(), Runtime::None, false, false, ""),
    ]
}

#[test]
fn every_runtime_form_is_classified() {
    for (path, runtime, has_id, has_pod, unit) in cases() {
        let f = classify(&path);
        assert_eq!(f.runtime, runtime, "{path}");
        assert_eq!(f.container_id, if has_id { ID } else { "" }, "{path}");
        assert_eq!(f.pod_uid, if has_pod { UID } else { "" }, "{path}");
        assert_eq!(f.unit, unit, "{path}");
    }
}

/// The environment of `pid` once it runs `sleep`: spawn can return before the child's exec,
/// when /proc still shows the parent's image (or none).
fn environ_after_exec(pid: u32) -> Vec<u8> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        // exe changes early in exec, the environment is set up later in it.
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if exe.file_name().is_some_and(|n| n == "sleep") && !environ.is_empty() {
            return environ;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{pid} never ran sleep"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Kills and reaps the test's processes when dropped (before the tree is removed).
struct Reaper(Vec<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn processes_in_runtime_style_cgroups_are_placed() {
    let tree = CgroupTree::new("placement-test");
    let mut children = Reaper(Vec::new());
    let mut placer = Placer::new();
    for (path, runtime, has_id, has_pod, _) in cases() {
        if path == "/" {
            continue;
        }
        let (rel, dir) = tree.create(&path);
        let child = Command::new("sleep")
            .arg("60")
            .env("CUDA_VISIBLE_DEVICES", "1,0")
            .spawn()
            .unwrap();
        let pid = child.id();
        children.0.push(child);
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .and_then(|mut f| f.write_all(pid.to_string().as_bytes()))
            .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", dir.display()));
        let environ = environ_after_exec(pid);
        let (place, described) = placer.place(pid, &environ);
        assert_eq!(
            place.cgroup_id,
            std::fs::metadata(&dir).unwrap().ino(),
            "{rel}: the cgroup id is its directory's inode"
        );
        assert!(
            place.gpu_visible.contains("CUDA_VISIBLE_DEVICES=1,0"),
            "{place:?}"
        );
        assert_eq!(place.gpu_devices, "", "sleep opens no GPU");
        let info = described.expect("first process in this cgroup: described");
        assert_eq!(info.cgroup_path, rel);
        assert_eq!(info.runtime, runtime.as_str(), "{rel}");
        assert_eq!(info.container_id, if has_id { ID } else { "" }, "{rel}");
        assert_eq!(info.pod_uid, if has_pod { UID } else { "" }, "{rel}");
        // A second process in the same cgroup gets the id but no second description.
        let again = placer.place(pid, &environ);
        assert_eq!(again.0.cgroup_id, place.cgroup_id);
        assert!(again.1.is_none());
    }
    // A process that has exited is placed nowhere, without an error.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let (place, described) = placer.place(gone_pid, b"");
    assert_eq!(place.cgroup_id, 0);
    assert!(described.is_none());
    let top = tree.mount.join(&tree.top);
    drop(children);
    drop(tree);
    assert!(!top.exists(), "the test's cgroups are removed");
}

/// Run by the test below inside a private cgroup namespace: places `CW_PLACE_PID` and prints
/// what the namespace showed and what was found.
#[test]
#[ignore = "helper: run inside a private cgroup namespace by the test below"]
#[allow(clippy::print_stdout)] // its stdout is what the test below reads
fn place_from_inside_a_cgroup_namespace() {
    let Ok(pid) = std::env::var("CW_PLACE_PID") else {
        return;
    };
    let pid: u32 = pid.parse().unwrap();
    let seen = causeway_placement::cgroup::path_of(pid).unwrap();
    let (place, info) = Placer::new().place(pid, b"");
    let info = info.expect("placed");
    println!(
        "CW seen={seen} id={} path={} runtime={} container={} pod={}",
        place.cgroup_id, info.cgroup_path, info.runtime, info.container_id, info.pod_uid
    );
}

/// An agent in a pod with a private cgroup namespace (the default under cgroup v2) reads
/// another pod's path as `/../../...`; with the host's hierarchy mounted, it still finds the
/// cgroup, its id and its pod.
#[test]
fn a_placer_in_a_private_cgroup_namespace_places_other_pods_processes() {
    let tree = CgroupTree::new("cgroupns-test");
    let (rel, dir) = tree.create(&format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope"
    ));
    let (_, agent) = tree.create("/kubepods.slice/kubepods-besteffort.slice/agent.scope");
    let mut children = Reaper(Vec::new());
    let child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id();
    children.0.push(child);
    std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"echo $$ > "$1/cgroup.procs" && exec unshare --cgroup "$2" --ignored --exact cgroups::place_from_inside_a_cgroup_namespace --nocapture"#)
        .arg("sh")
        .arg(&agent)
        .arg(std::env::current_exe().unwrap())
        .env("CW_PLACE_PID", pid.to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("CW "))
        .unwrap_or_else(|| {
            panic!(
                "helper printed nothing: {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let field = |k: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(&format!("{k}=")))
            .unwrap_or_default()
            .to_string()
    };
    // What the namespace shows: up two levels from the agent's own group.
    assert_eq!(
        field("seen"),
        format!(
            "/../../kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope"
        )
    );
    assert_eq!(
        field("id"),
        std::fs::metadata(&dir).unwrap().ino().to_string()
    );
    assert_eq!(field("path"), rel);
    assert_eq!(field("runtime"), Runtime::Containerd.as_str());
    assert_eq!(field("container"), ID);
    assert_eq!(field("pod"), UID);
    drop(children);
}
