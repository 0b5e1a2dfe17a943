//! Test support for placement here and in the collector (built only with the `testing`
//! feature): a loopback HTTP server that answers like the kubelet's /pods (a PodList), counting
//! requests, optionally requiring a bearer token (401 otherwise) and answering any status and
//! body to test failures; and real cgroup v2 directories, removed when dropped.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A running fake kubelet (it serves until the test process exits).
#[derive(Debug, Clone)]
pub struct FakeKubelet {
    /// Its /pods URL.
    pub url: String,
    hits: Arc<AtomicUsize>,
}

impl FakeKubelet {
    /// Serves `status` and `body` to every request; with `token`, requests without
    /// `Authorization: Bearer TOKEN` get 401.
    pub fn start(status: u16, body: String, token: Option<&'static str>) -> FakeKubelet {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
        let url = format!(
            "http://{}/pods",
            listener.local_addr().expect("local address")
        );
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                h.fetch_add(1, Ordering::SeqCst);
                let Ok(read_half) = stream.try_clone() else {
                    continue;
                };
                let mut reader = BufReader::new(read_half);
                let mut auth = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("authorization: ") {
                        auth = v.trim().to_string();
                    }
                }
                let (code, body) = match token {
                    Some(t) if auth != format!("bearer {}", t.to_ascii_lowercase()) => {
                        (401, "{}".to_string())
                    }
                    _ => (status, body.clone()),
                };
                let mut s = stream;
                let _ = write!(
                    s,
                    "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        FakeKubelet { url, hits }
    }

    /// Requests answered so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// A PodList with one pod (`name` in `namespace`, uid `uid`) running container `container`
/// with id `container_id` under containerd, and one unrelated pod.
pub fn pod_list(
    uid: &str,
    name: &str,
    namespace: &str,
    container: &str,
    container_id: &str,
) -> String {
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","items":[
        {{"metadata":{{"name":"{name}","namespace":"{namespace}","uid":"{uid}"}},
          "status":{{"containerStatuses":[{{"name":"{container}","containerID":"containerd://{container_id}"}}]}}}},
        {{"metadata":{{"name":"other","namespace":"default","uid":"11111111-2222-3333-4444-555555555555"}},"status":{{}}}}]}}"#
    )
}

/// A cgroup directory tree created under the cgroup2 mount, removed (deepest first, after the
/// processes the test put there have exited) when dropped.
#[derive(Debug)]
pub struct CgroupTree {
    /// The cgroup2 mount.
    pub mount: std::path::PathBuf,
    /// The tree's top directory (relative to the mount).
    pub top: String,
}

impl CgroupTree {
    /// A new, empty top directory named for the test and this process.
    pub fn new(name: &str) -> CgroupTree {
        let mount = crate::cgroup::mount_point().expect(
            "no cgroup2 hierarchy in /proc/self/mountinfo: these tests need cgroup v2 (unified or hybrid)",
        );
        let top = format!("causeway-{name}-{}", std::process::id());
        std::fs::create_dir_all(mount.join(&top)).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (these tests run as root)",
                mount.join(&top).display()
            )
        });
        CgroupTree { mount, top }
    }

    /// Creates `path` (a cgroup path as /proc shows it) inside the tree; returns its path
    /// relative to the mount (`/TOP/PATH`) and its directory.
    pub fn create(&self, path: &str) -> (String, std::path::PathBuf) {
        let rel = format!("/{}/{}", self.top, path.trim_start_matches('/'));
        let dir = self.mount.join(rel.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        (rel, dir)
    }
}

impl Drop for CgroupTree {
    fn drop(&mut self) {
        let mut dirs = walk(&self.mount.join(&self.top));
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in dirs {
            // A group still holding a process stays; the next run's name differs.
            let _ = std::fs::remove_dir(&d);
        }
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&e.path()));
        }
    }
    out
}
