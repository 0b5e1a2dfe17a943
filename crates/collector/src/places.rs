//! Where traced processes run: each new process's cgroup and GPUs are read with its other /proc
//! facts (once per process), and each new cgroup's row goes to the writer; pod names are asked
//! of Kubernetes on a thread of their own, so a slow or failing API server never holds up the
//! events.

use std::thread::JoinHandle;

use causeway_placement::{CgroupInfo, Placer, PodDirectory, PodSource, name_pod};
use causeway_store::ProcessInfo;
use crossbeam_channel::{Sender, unbounded};
use tracing::warn;

use crate::sink::Ctl;

/// The poll thread's placement state.
#[derive(Debug)]
pub struct Places {
    placer: Placer,
    /// Pod cgroups for the naming thread (None: no pod source, rows go straight out).
    pods: Option<Sender<CgroupInfo>>,
    join: Option<JoinHandle<()>>,
}

impl Places {
    /// Starts placement; with a pod source, the naming thread too.
    pub fn start(ctl: &Sender<Ctl>, source: Option<PodSource>) -> Places {
        let (pods, join) = match source {
            None => (None, None),
            Some(source) => {
                let (tx, rx) = unbounded::<CgroupInfo>();
                let ctl = ctl.clone();
                let spawned = std::thread::Builder::new()
                    .name("causeway-pods".into())
                    .spawn(move || {
                        let mut dir = PodDirectory::new(source);
                        if let Err(e) = &dir {
                            warn!(error = %e, "pod metadata source unusable: cgroups keep their container ids only");
                        }
                        for info in rx {
                            let info = match dir.as_mut() {
                                Ok(d) => name_pod(info, Some(d)),
                                Err(e) => {
                                    let mut info = info;
                                    info.note = format!("pod metadata source unusable: {e}");
                                    info
                                }
                            };
                            let _ = ctl.send(Ctl::Cgroup(info));
                        }
                    });
                match spawned {
                    Ok(j) => (Some(tx), Some(j)),
                    Err(e) => {
                        warn!(error = %e, "pod naming thread not started");
                        (None, None)
                    }
                }
            }
        };
        Places {
            placer: Placer::new(),
            pods,
            join,
        }
    }

    /// Fills in where `info`'s process runs (`environ`: its environment block) and sends its
    /// cgroup's row when the cgroup is new.
    pub fn place(&mut self, info: &mut ProcessInfo, environ: &[u8], ctl: &Sender<Ctl>) {
        let (place, cgroup) = self.placer.place(info.pid, environ);
        info.cgroup_id = place.cgroup_id;
        info.gpu_visible = place.gpu_visible;
        info.gpu_devices = place.gpu_devices;
        info.memory_limit = place.memory_limit;
        let Some(cgroup) = cgroup else {
            return;
        };
        match &self.pods {
            Some(tx) if !cgroup.pod_uid.is_empty() => {
                // The naming thread sends the row, named or with its note.
                let _ = tx.send(cgroup);
            }
            _ => {
                let _ = ctl.send(Ctl::Cgroup(name_pod(cgroup, None)));
            }
        }
    }

    /// Waits for the naming thread's last answers (each request is time-limited).
    pub fn finish(mut self) {
        drop(self.pods.take());
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}
