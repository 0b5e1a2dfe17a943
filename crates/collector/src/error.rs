//! The collector's errors: what failed, and a `hint:` line saying what to do about it.

use std::path::PathBuf;

use thiserror::Error;

/// Why a trace or check could not run.
#[derive(Debug, Error)]
pub enum CollectorError {
    /// Not root and without the BPF capabilities.
    #[error("tracing needs root or CAP_BPF + CAP_PERFMON (effective uid {uid})")]
    NotPrivileged {
        /// The effective uid.
        uid: u32,
    },
    /// The kernel exposes no BTF.
    #[error("the kernel has no BTF (/sys/kernel/btf/vmlinux is missing)")]
    NoBtf,
    /// Loading the BPF programs failed.
    #[error(transparent)]
    Load(#[from] causeway_bpf::load::LoadError),
    /// A program or probe could not be attached.
    #[error("attaching {what} failed: {source}")]
    Attach {
        /// What was being attached.
        what: String,
        /// libbpf's error.
        #[source]
        source: causeway_bpf::libbpf_rs::Error,
    },
    /// The --pid target does not exist.
    #[error("process {0} does not exist")]
    NoSuchProcess(u32),
    /// The command could not be started.
    #[error("starting `{command}` failed: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Bad combination of options.
    #[error("{0}")]
    Usage(String),
    /// --kube-pods (or its token or CA file) cannot be used.
    #[error("--kube-pods: {0}")]
    PodSource(String),
    /// The store failed.
    #[error("trace store {path}: {source}")]
    Store {
        /// The store file.
        path: PathBuf,
        /// The store's error (boxed: it is large).
        #[source]
        source: Box<causeway_store::StoreError>,
    },
    /// An OS call failed.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A BPF map operation failed.
    #[error("BPF map {map}: {source}")]
    Map {
        /// The map.
        map: &'static str,
        /// libbpf's error.
        #[source]
        source: causeway_bpf::libbpf_rs::Error,
    },
    /// The writer thread ended abnormally.
    /// A file or directory of the agent's data directory could not be used.
    #[error("{path}: {what} failed: {source}")]
    Io {
        /// The file or directory.
        path: std::path::PathBuf,
        /// What was being done.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    #[error("the store writer thread panicked")]
    WriterPanicked,
}

impl causeway_hint::Hint for CollectorError {
    /// What to do about it, when there is a fix.
    fn hint(&self) -> Option<String> {
        match self {
            Self::NotPrivileged { .. } => Some("run `sudo causeway trace ...`, or grant the capabilities: `sudo setcap cap_bpf,cap_perfmon,cap_sys_resource+ep $(command -v causeway)`".to_string()),
            Self::NoBtf => Some("use a kernel built with CONFIG_DEBUG_INFO_BTF=y (most distribution kernels >= 5.8 are)".to_string()),
            Self::Attach { .. } => Some("check `causeway check`; uprobes need a kernel with CONFIG_UPROBE_EVENTS".to_string()),
            Self::NoSuchProcess(v0, ..) => Some(format!("check the pid with `ps -p {v0}`")),
            Self::Spawn { .. } => Some("check the command name and that it is executable".to_string()),
            Self::PodSource(_) => Some("give a URL that answers a PodList (the kubelet's https://NODE:10250/pods) or `in-cluster` with NODE_NAME set, and readable --kube-token-file/--kube-ca-cert files".to_string()),
            Self::Store { source, .. } => source.hint(),
            Self::Load(e) => e.hint(),
            _ => None,
        }
    }
}

causeway_hint::register!(CollectorError);
