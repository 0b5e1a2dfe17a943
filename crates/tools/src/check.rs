//! `get_check`: the shape of the tracing-readiness report and its sanitising. The machine is
//! inspected by the collector (`causeway_collector::check`, the one implementation behind both
//! `causeway check` and this tool); the binary hands that inspection to the tool [`Context`]
//! because this crate must build without the BPF toolchain.
//!
//! [`Context`]: crate::Context

use std::sync::Arc;

use causeway_store::sanitize::sanitize_with;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::context::Context;
use crate::error::ToolError;

/// What inspects the machine: called once per `get_check`.
pub type Checker = Arc<dyn Fn() -> CheckReport + Send + Sync>;

/// What `get_check` (and `causeway check --json`) reports.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub struct CheckReport {
    /// True when every item is ok: `causeway trace` can run here.
    pub can_trace: bool,
    /// Kernel release.
    pub kernel: String,
    /// Each requirement (kernel, btf, privileges, uprobes, tracefs): ok, what was found, the fix.
    pub items: Vec<CheckItem>,
    /// NVIDIA driver version, if loaded.
    pub nvidia_driver: Option<String>,
    /// GPU models the driver lists.
    pub gpus: Vec<String>,
    /// CUDA runtime/driver/NCCL libraries in standard locations (Python site-packages and conda included).
    pub libraries: Vec<LibraryOut>,
    /// Running processes with a CUDA library mapped.
    pub cuda_processes: Vec<CudaProcessOut>,
    /// The failing items as "name: detail; hint: fix" lines.
    pub problems: Vec<String>,
}

/// One checked requirement.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub struct CheckItem {
    /// What was checked.
    pub name: String,
    /// Whether it is fine.
    pub ok: bool,
    /// What was found.
    pub detail: String,
    /// What to do when not fine (empty when fine).
    pub hint: String,
}

/// A CUDA-related library file.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord)]
pub struct LibraryOut {
    /// cudart, cuda or nccl.
    pub kind: String,
    /// Path.
    pub path: String,
}

/// A running process that maps a CUDA library.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub struct CudaProcessOut {
    /// Process id.
    pub pid: u32,
    /// Its name (data from the machine).
    pub comm: String,
    /// The CUDA libraries it maps, and the files it maps that carry the CUDA runtime linked in
    /// (listed as cudart: CuPy's extension modules).
    pub libraries: Vec<LibraryOut>,
}

const MAX_LIBS: usize = 20;
const MAX_PROCS: usize = 20;

impl CheckReport {
    /// Builds the report from an inspection: derives `can_trace` and `problems` from the items,
    /// sanitises every string that came from the machine and caps the lists.
    pub fn new(
        kernel: String,
        items: Vec<CheckItem>,
        nvidia_driver: Option<String>,
        gpus: Vec<String>,
        mut libraries: Vec<LibraryOut>,
        mut cuda_processes: Vec<CudaProcessOut>,
    ) -> CheckReport {
        let clean_lib = |l: LibraryOut| LibraryOut {
            kind: sanitize_with(&l.kind, 16),
            path: sanitize_with(&l.path, 200),
        };
        libraries.sort();
        libraries.dedup();
        libraries.truncate(MAX_LIBS);
        cuda_processes.sort_by_key(|p| p.pid);
        cuda_processes.truncate(MAX_PROCS);
        let problems = items
            .iter()
            .filter(|i| !i.ok)
            .map(|i| format!("{}: {}; hint: {}", i.name, i.detail, i.hint))
            .collect();
        CheckReport {
            can_trace: items.iter().all(|i| i.ok),
            kernel: sanitize_with(&kernel, 80),
            items,
            nvidia_driver: nvidia_driver
                .filter(|d| !d.is_empty())
                .map(|d| sanitize_with(&d, 40)),
            gpus: gpus.iter().map(|g| sanitize_with(g, 80)).collect(),
            libraries: libraries.into_iter().map(clean_lib).collect(),
            cuda_processes: cuda_processes
                .into_iter()
                .map(|p| CudaProcessOut {
                    pid: p.pid,
                    comm: sanitize_with(&p.comm, 32),
                    libraries: p.libraries.into_iter().map(clean_lib).collect(),
                })
                .collect(),
            problems,
        }
    }
}

/// `get_check`: inspects the machine through the context's checker.
pub fn get_check(ctx: &Context) -> Result<CheckReport, ToolError> {
    let checker = ctx.checker().ok_or_else(|| {
        ToolError::failed(
            "this server has no machine inspection (it was embedded without the collector)",
            "run `causeway check` on the machine to trace, or serve with the causeway binary",
        )
    })?;
    Ok(checker())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, ok: bool) -> CheckItem {
        CheckItem {
            name: name.into(),
            ok,
            detail: "d".into(),
            hint: if ok { String::new() } else { "fix it".into() },
        }
    }

    #[test]
    fn failing_items_become_problems_with_their_hint() {
        let r = CheckReport::new(
            "6.1".into(),
            vec![item("kernel", true), item("btf", false)],
            Some(String::new()),
            vec![],
            vec![],
            vec![],
        );
        assert!(!r.can_trace);
        assert_eq!(r.problems, vec!["btf: d; hint: fix it".to_string()]);
        assert_eq!(r.nvidia_driver, None);
    }

    #[test]
    fn machine_strings_are_sanitised_and_lists_capped() {
        let lib = |i: usize| LibraryOut {
            kind: "cudart".into(),
            path: format!("/x/\u{202e}lib{i}\x1b[2J"),
        };
        let r = CheckReport::new(
            "6.1".into(),
            vec![item("kernel", true)],
            None,
            vec![],
            (0..30).map(lib).collect(),
            vec![CudaProcessOut {
                pid: 7,
                comm: "evil\u{202e}\ncomm".into(),
                libraries: vec![lib(1)],
            }],
        );
        assert!(r.can_trace);
        assert_eq!(r.libraries.len(), MAX_LIBS);
        let all = serde_json::to_string(&r).unwrap();
        assert!(
            !all.contains('\u{202e}') && !all.contains('\u{1b}'),
            "{all}"
        );
        assert!(!r.cuda_processes[0].comm.contains('\n'));
    }
}
