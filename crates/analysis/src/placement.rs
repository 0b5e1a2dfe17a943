//! Where the traced processes ran, for `stats` and the MCP tools alike: each process in a
//! container or pod with its runtime, container, pod and GPUs (store: `processes.cgroup_id`
//! joined with `cgroups`, schema 9 and later).

use causeway_store::{Reader, StoreError};
use serde::Serialize;

use crate::window::Window;

/// A traced process that ran in a container or pod.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PlacedProcess {
    /// Node.
    pub node: String,
    /// Process id.
    pub pid: u32,
    /// Process name.
    pub comm: String,
    /// Container runtime (containerd, cri-o, docker, podman, kubernetes).
    pub runtime: String,
    /// Container id (64 hex digits).
    pub container_id: String,
    /// Pod as namespace/name ("" when not a pod's, or not named: see note).
    pub pod: String,
    /// Pod uid.
    pub pod_uid: String,
    /// Container name within the pod.
    pub container: String,
    /// GPU visibility variables and GPU device files open.
    pub gpus: String,
    /// Why the pod is not named, when it is not.
    pub note: String,
}

impl PlacedProcess {
    /// "pod ml-jobs/trainer-0, container trainer (containerd 3f1c2a9be4d5)", the form people
    /// and agents read.
    pub fn describe(&self) -> String {
        let short = &self.container_id[..self.container_id.len().min(12)];
        let runtime = if short.is_empty() {
            self.runtime.clone()
        } else {
            format!("{} {short}", self.runtime)
        };
        match (self.pod.is_empty(), self.container.is_empty()) {
            (false, false) => format!("pod {}, container {} ({runtime})", self.pod, self.container),
            (false, true) => format!("pod {} ({runtime})", self.pod),
            (true, _) if !self.pod_uid.is_empty() => {
                format!("pod uid {} ({runtime})", self.pod_uid)
            }
            _ => format!("container ({runtime})"),
        }
    }
}

const SQL: &str = "
SELECT p.node, p.pid, p.comm, c.runtime, c.container_id,
       CASE WHEN c.pod_name = '' THEN '' ELSE c.namespace || '/' || c.pod_name END,
       c.pod_uid, c.container_name,
       concat_ws('; ', nullif(p.gpu_visible, ''), nullif('open ' || p.gpu_devices, 'open ')),
       c.note
FROM processes p JOIN cgroups c ON c.node = p.node AND c.cgroup_id = p.cgroup_id
WHERE (c.container_id <> '' OR c.pod_uid <> '')
  AND p.last_seen_ns >= ? AND p.first_seen_ns <= ?
  AND (? < 0 OR p.pid = ?) AND (? = '' OR p.node = ?)
ORDER BY p.node, p.pid
LIMIT ?
";

/// Up to `limit` processes seen in the window that ran in a container or pod; empty for stores
/// older than schema 9 (which do not record it).
pub fn placed(
    r: &Reader,
    window: &Window,
    pid: Option<u32>,
    node: Option<&str>,
    limit: usize,
) -> Result<Vec<PlacedProcess>, StoreError> {
    if r.schema_version() < 9 {
        return Ok(Vec::new());
    }
    r.prepare_trusted(SQL)?
        .query_map(window.scoped(pid, node, limit), |row| {
            Ok(PlacedProcess {
                node: row.get(0)?,
                pid: row.get(1)?,
                comm: row.get(2)?,
                runtime: row.get(3)?,
                container_id: row.get(4)?,
                pod: row.get(5)?,
                pod_uid: row.get(6)?,
                container: row.get(7)?,
                gpus: row.get(8)?,
                note: row.get(9)?,
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(crate::base::errors::duck(r, "listing where processes ran"))
}
