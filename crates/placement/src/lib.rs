//! Where a traced process runs: its cgroup (v2) and what the cgroup path says (container
//! runtime, container id, pod uid, systemd unit), the pod and container names Kubernetes gives
//! them, and the GPUs the process may use and has open. Resolved once per process and cached
//! per cgroup, off the event path.

pub mod cgroup;
pub mod gpus;
pub mod kube;
pub mod memory;
#[cfg(feature = "testing")]
pub mod testing;

use std::collections::HashSet;
use std::path::PathBuf;

pub use causeway_store::CgroupInfo;
pub use cgroup::{PathFacts, Runtime, classify};
pub use kube::{PodDirectory, PodMeta, PodSource};

/// Where one process runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessPlace {
    /// Its cgroup id (0 when unknown: exited, or no cgroup v2 hierarchy).
    pub cgroup_id: u64,
    /// GPU visibility variables.
    pub gpu_visible: String,
    /// GPU device files open.
    pub gpu_devices: String,
    /// The memory limit it runs under (bytes; 0: none, or unknown): its memory cgroup's or an
    /// ancestor's, the smallest.
    pub memory_limit: u64,
}

/// Finds where processes run, remembering each cgroup it has described.
#[derive(Debug)]
pub struct Placer {
    root: Option<PathBuf>,
    /// Where our own cgroup namespace is rooted in `root`'s hierarchy, once looked for.
    ns_root: Option<Option<String>>,
    /// Whether the cgroup2 hierarchy has the memory controller, once looked for.
    v2_memory: Option<bool>,
    described: HashSet<u64>,
}

impl Default for Placer {
    fn default() -> Self {
        Placer::new()
    }
}

impl Placer {
    /// A placer for this machine's cgroup2 hierarchy (found in /proc/self/mountinfo).
    pub fn new() -> Placer {
        Placer {
            root: cgroup::mount_point(),
            ns_root: None,
            v2_memory: None,
            described: HashSet::new(),
        }
    }

    /// Where `pid` runs (`environ` is its environment block, already read by the caller), and
    /// its cgroup's description the first time this placer meets that cgroup.
    pub fn place(&mut self, pid: u32, environ: &[u8]) -> (ProcessPlace, Option<CgroupInfo>) {
        let mut place = ProcessPlace {
            gpu_visible: gpus::visible(environ),
            gpu_devices: gpus::open_devices(pid),
            ..ProcessPlace::default()
        };
        let (Some(seen), Some(root)) = (cgroup::path_of(pid), self.root.clone()) else {
            place.memory_limit = memory::limit_of(pid, None);
            return (place, None);
        };
        let path = match self.ns_root(&root) {
            Some(ns_root) => cgroup::in_hierarchy(&ns_root, &seen),
            // Our own cgroup was not found: paths are taken as they read, but for those
            // that climb out of a namespace, which cannot be placed.
            None if seen.starts_with("/..") => return (place, None),
            None => seen,
        };
        // The unified hierarchy holds the limit where it has the memory controller; on hybrid
        // hosts the v1 memory hierarchy does.
        let v2_memory = *self
            .v2_memory
            .get_or_insert_with(|| memory::v2_has_memory(&root));
        place.memory_limit =
            memory::limit_of(pid, v2_memory.then_some((root.as_path(), path.as_str())));
        let Some(id) = cgroup::id_of(&root, &path) else {
            return (place, None);
        };
        place.cgroup_id = id;
        if !self.described.insert(id) {
            return (place, None);
        }
        (place, Some(describe(id, &path)))
    }
}

impl Placer {
    /// Our cgroup namespace's root in the hierarchy (`/` unless we run in a private cgroup
    /// namespace), looked for once.
    fn ns_root(&mut self, root: &std::path::Path) -> Option<String> {
        self.ns_root
            .get_or_insert_with(|| {
                let me = std::process::id();
                let own = cgroup::path_of(me)?;
                cgroup::namespace_root(root, me, &own)
            })
            .clone()
    }
}

/// A cgroup's row from its id and path (no pod names: those come from Kubernetes).
pub fn describe(cgroup_id: u64, path: &str) -> CgroupInfo {
    let facts = classify(path);
    CgroupInfo {
        cgroup_id,
        container_id: facts.container_id,
        cgroup_path: path.to_string(),
        runtime: facts.runtime.as_str().to_string(),
        pod_uid: facts.pod_uid,
        ..CgroupInfo::default()
    }
}

/// Fills in a pod cgroup's names from `pods`, or its note when they cannot be had; cgroups
/// that are not a pod's are returned unchanged.
pub fn name_pod(mut info: CgroupInfo, pods: Option<&mut PodDirectory>) -> CgroupInfo {
    if info.pod_uid.is_empty() {
        return info;
    }
    match pods {
        None => {
            info.note = "pod metadata not asked for (trace --kube-pods URL|in-cluster)".into();
        }
        Some(dir) => match dir.lookup(&info.pod_uid, &info.container_id) {
            Ok(meta) => {
                info.pod_name = meta.pod_name;
                info.namespace = meta.namespace;
                info.container_name = meta.container_name;
                info.note.clear();
            }
            Err(note) => info.note = note,
        },
    }
    info
}
