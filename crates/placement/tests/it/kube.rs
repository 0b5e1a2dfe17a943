//! Pod metadata from a loopback HTTP server answering like the kubelet's /pods: names found and
//! cached, and every failure (unreachable, 401/403, malformed, a pod the list lacks) turned into
//! a note while the container id stays.

use std::net::TcpListener;
use std::time::Duration;

use causeway_placement::testing::{self, FakeKubelet};
use causeway_placement::{PodDirectory, PodSource, describe, name_pod};

const ID: &str = "3f1c2a9be4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b1";
const UID: &str = "0f3a5c1e-2b4d-4e6f-8a9b-0c1d2e3f4a5b";

fn pod_list() -> String {
    testing::pod_list(UID, "trainer-0", "ml-jobs", "trainer", ID)
}

/// A fake kubelet's URL and a way to read its request count.
fn serve(status: u16, body: String, token: Option<&'static str>) -> (String, FakeKubelet) {
    let k = FakeKubelet::start(status, body, token);
    (k.url.clone(), k)
}

fn directory(url: &str, token: Option<&str>) -> PodDirectory {
    let dir = tempfile::tempdir().unwrap();
    let token_file = token.map(|t| {
        let p = dir.path().join("token");
        std::fs::write(&p, format!("{t}\n")).unwrap();
        p
    });
    let mut src = PodSource::new(url, token_file.as_deref(), None).unwrap();
    src.timeout = Duration::from_secs(5);
    PodDirectory::new(src).unwrap()
}

fn pod_cgroup() -> causeway_placement::CgroupInfo {
    describe(
        42,
        &format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope",
            UID.replace('-', "_")
        ),
    )
}

#[test]
fn names_come_from_the_pod_list_and_are_cached() {
    let (url, hits) = serve(200, pod_list(), Some("sa-token"));
    let mut pods = directory(&url, Some("sa-token"));
    let info = name_pod(pod_cgroup(), Some(&mut pods));
    assert_eq!(
        (
            info.pod_name.as_str(),
            info.namespace.as_str(),
            info.container_name.as_str(),
            info.runtime.as_str(),
            info.note.as_str()
        ),
        ("trainer-0", "ml-jobs", "trainer", "containerd", "")
    );
    // The same pod again: from the cache.
    let again = name_pod(pod_cgroup(), Some(&mut pods));
    assert_eq!(again, info);
    assert_eq!(hits.hits(), 1, "one request for one pod");
    // Not a pod's cgroup: nothing asked.
    let plain = name_pod(describe(7, "/system.slice/nginx.service"), Some(&mut pods));
    assert_eq!(plain.note, "");
    assert_eq!(hits.hits(), 1);
}

#[test]
fn failures_become_notes_and_keep_the_container_id() {
    let check = |info: causeway_placement::CgroupInfo, want: &str| {
        assert_eq!(info.pod_name, "", "{info:?}");
        assert_eq!(info.container_id, ID, "the container id stays");
        assert_eq!(info.pod_uid, UID);
        assert!(
            info.note.contains(want),
            "note {:?} lacks {want:?}",
            info.note
        );
    };
    // Refused: 403, and a wrong token (401).
    let (url, _) = serve(403, r#"{"kind":"Status"}"#.into(), None);
    check(
        name_pod(pod_cgroup(), Some(&mut directory(&url, None))),
        "403",
    );
    check(
        name_pod(pod_cgroup(), Some(&mut directory(&url, None))),
        "get and list on pods",
    );
    let (url, _) = serve(200, pod_list(), Some("right"));
    check(
        name_pod(pod_cgroup(), Some(&mut directory(&url, Some("wrong")))),
        "token was not accepted",
    );
    // Malformed: not JSON, and JSON that is not a PodList.
    let (url, _) = serve(200, "<html>kubelet</html>".into(), None);
    check(
        name_pod(pod_cgroup(), Some(&mut directory(&url, None))),
        "malformed",
    );
    let (url, _) = serve(200, r#"{"kind":"Status"}"#.into(), None);
    check(
        name_pod(pod_cgroup(), Some(&mut directory(&url, None))),
        "not a PodList",
    );
    // Unreachable: a port nothing listens on.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/pods", closed.local_addr().unwrap());
    drop(closed);
    check(
        name_pod(pod_cgroup(), Some(&mut directory(&url, None))),
        "cannot reach",
    );
    // A pod the list lacks, asked again at once: one request, then the note without asking.
    let (url, hits) = serve(200, r#"{"kind":"PodList","items":[]}"#.into(), None);
    let mut pods = directory(&url, None);
    check(
        name_pod(pod_cgroup(), Some(&mut pods)),
        "not in the pod list",
    );
    check(
        name_pod(pod_cgroup(), Some(&mut pods)),
        "not in the pod list",
    );
    assert_eq!(hits.hits(), 1, "rate-limited");
    // No pod source configured: the note says how to get names.
    check(name_pod(pod_cgroup(), None), "--kube-pods");
}

#[test]
fn bad_sources_are_refused_up_front() {
    assert!(PodSource::new("kubelet:10250", None, None).is_err());
    let missing = std::path::Path::new("/nonexistent/token");
    let e = PodSource::new("https://127.0.0.1:10250/pods", Some(missing), None).unwrap_err();
    assert!(e.contains("/nonexistent/token"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, "not a certificate").unwrap();
    let src = PodSource::new("https://127.0.0.1:10250/pods", None, Some(&ca)).unwrap();
    assert!(
        PodDirectory::new(src)
            .unwrap_err()
            .contains("no PEM certificate")
    );
}
