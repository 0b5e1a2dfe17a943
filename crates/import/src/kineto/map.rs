//! How Kineto's events become store rows: runtime and driver call names to catalogue ops (with
//! the arguments the catalogue gives them), kernel names as people read them, step indexes,
//! and the nesting depth of host ranges.

use std::collections::HashMap;

use causeway_store::catalog::{OpInfo, Source, op_by_name};
use causeway_store::steps::StepFinder;
use causeway_store::{Range, Step};

/// Suffixes of versioned and per-thread-stream entry points (`cudaMemcpyAsync_ptsz`,
/// `cuMemAlloc_v2`): the call is the catalogue's op of the plain name.
const SUFFIXES: &[&str] = &["_ptsz", "_ptds", "_v2", "_v3"];

/// Launch entry points the catalogue counts as its plain launch.
const LAUNCH_VARIANTS: &[(&str, &str)] = &[
    ("cudaLaunchKernelExC", "cudaLaunchKernel"),
    ("cudaLaunchKernelEx", "cudaLaunchKernel"),
    ("cudaLaunchCooperativeKernel", "cudaLaunchKernel"),
    ("cuLaunchCooperativeKernel", "cuLaunchKernel"),
];

/// The catalogue op of a runtime or driver call named `name`, if it has one.
pub fn call_op(name: &str) -> Option<&'static OpInfo> {
    let mut n = name;
    loop {
        if let Some(op) = op_by_name(n).filter(|o| is_call(o)) {
            return Some(op);
        }
        match SUFFIXES.iter().find_map(|s| n.strip_suffix(s)) {
            Some(shorter) => n = shorter,
            None => break,
        }
    }
    // The extended-configuration launches (cudaLaunchKernelExC, what cudaLaunchKernelEx
    // calls) and cooperative launches start one kernel each, as the plain
    // launch does: NCCL's kernels and many of PyTorch's go through them.
    if let Some(plain) = LAUNCH_VARIANTS
        .iter()
        .find_map(|(variant, plain)| (n == *variant).then_some(*plain))
    {
        return op_by_name(plain);
    }
    // The driver's copy family (cuMemcpyHtoDAsync, cuMemcpy2D, ...) is one op each way, as the
    // collector probes it.
    if n.starts_with("cuMemcpy") {
        let family = if n.ends_with("Async") {
            "cuMemcpyAsync"
        } else {
            "cuMemcpy"
        };
        return op_by_name(family);
    }
    None
}

fn is_call(op: &OpInfo) -> bool {
    matches!(op.source, Source::Cuda | Source::Driver | Source::Graph)
}

/// What a trace says about one call, from the call itself or the device work it started.
#[derive(Debug, Default, Clone, Copy)]
pub struct Launched {
    /// Bytes copied, set or allocated.
    pub bytes: Option<i64>,
    /// Stream.
    pub stream: Option<i64>,
    /// CUDA device ordinal.
    pub device: Option<i64>,
    /// A copy's direction, as the catalogue numbers it (`arg1` of copies).
    pub direction: Option<i64>,
    /// A launch's grid size (blocks).
    pub grid: Option<i64>,
}

/// `arg0`/`arg1` of a call by what the catalogue says they hold: bytes for copies, memsets and
/// allocations, the stream for stream waits and graph launches, the direction of copies, the
/// grid of launches; 0 where the trace does not say (the catalogue's "unread").
pub fn call_args(op: &OpInfo, l: &Launched) -> (i64, i64) {
    let pick = |meaning: &str| {
        if meaning.starts_with("bytes") {
            l.bytes.unwrap_or(0)
        } else if meaning == "stream handle" {
            l.stream.unwrap_or(0)
        } else if meaning.starts_with("grid size") {
            l.grid.unwrap_or(0)
        } else if meaning.starts_with("direction") {
            l.direction.unwrap_or(0)
        } else {
            0
        }
    };
    (pick(op.arg0), pick(op.arg1))
}

/// The direction (the catalogue's, `arg1` of copies) of a device copy Kineto names by its CUPTI
/// kind: `Memcpy HtoD (Pageable -> Device)` is 1, `DtoH` 2, `DtoD` (and arrays, peers) 3,
/// `HtoH` 0.
pub fn copy_direction(name: &str) -> Option<i64> {
    let kind = name.strip_prefix("Memcpy ")?.split_whitespace().next()?;
    Some(match kind {
        "HtoH" => 0,
        "HtoD" | "HtoA" => 1,
        "DtoH" | "AtoH" => 2,
        "DtoD" | "DtoA" | "AtoD" | "AtoA" | "PtoP" => 3,
        _ => return None,
    })
}

/// A kernel's name as people read it: demangled when mangled, without the return type and the
/// parameter list profilers print (`void at::native::f<float>(int, float*)` becomes
/// `at::native::f<float>`), as in the `kernels` table.
pub fn kernel_name(raw: &str) -> String {
    if raw.starts_with("_Z") {
        return causeway_store::symbols::demangle(raw);
    }
    let mut name = raw.trim();
    if name.ends_with(')') {
        let mut depth = 0i32;
        for (i, c) in name.char_indices().rev() {
            match c {
                ')' => depth += 1,
                '(' => {
                    depth -= 1;
                    if depth == 0 {
                        name = name[..i].trim_end();
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    name.strip_prefix("void ")
        .unwrap_or(name)
        .trim()
        .to_string()
}

/// The index of a `ProfilerStep#N` range.
pub fn profiler_step(name: &str) -> Option<i64> {
    name.strip_prefix("ProfilerStep#")?.trim().parse().ok()
}

/// One thread's ranges waiting for their depth.
#[derive(Default)]
struct Thread {
    /// Ranges that start at `group_start`, in file order: the longest is the outermost.
    group: Vec<Range>,
    group_start: i64,
    /// Ends of the ranges open at the last range's start, outermost first.
    open: Vec<i64>,
}

/// Gives each host range its nesting depth on its thread. Profilers write a thread's ranges in
/// start order, but ranges that start at the same instant in any order, so those wait until a
/// later start shows that none of them can gain a parent (then the longest goes first).
#[derive(Default)]
pub struct Depths {
    threads: HashMap<(u32, u32), Thread>,
    /// Ranges that came before a range of their thread that started later (not in start
    /// order): their depth counts only the ranges open as far as seen.
    pub out_of_order: u64,
}

impl Depths {
    /// Adds `r`; pushes the ranges whose depth is now known onto `done`.
    pub fn push(&mut self, r: Range, done: &mut Vec<Range>) {
        let t = self.threads.entry((r.pid, r.tid)).or_default();
        if !t.group.is_empty() && r.start_ns != t.group_start {
            if r.start_ns < t.group_start {
                self.out_of_order += 1;
            }
            settle(t, done);
        }
        t.group_start = r.start_ns;
        t.group.push(r);
    }

    /// Gives every waiting range its depth.
    pub fn finish(&mut self, done: &mut Vec<Range>) {
        for t in self.threads.values_mut() {
            settle(t, done);
        }
    }
}

fn settle(t: &mut Thread, done: &mut Vec<Range>) {
    // Longest first: at the same start, a longer range holds the shorter ones.
    t.group.sort_by_key(|r| std::cmp::Reverse(r.end_ns));
    for mut r in t.group.drain(..) {
        while t.open.last().is_some_and(|&end| end <= r.start_ns) {
            t.open.pop();
        }
        r.depth = u16::try_from(t.open.len()).unwrap_or(u16::MAX);
        t.open.push(r.end_ns);
        done.push(r);
    }
}

/// Steps marked by annotation ranges (`record_function`, NVTX) other than `ProfilerStep#N`: the
/// outermost of each thread's annotation ranges, by the store's step rule, the collector's for
/// NVTX. Only the annotations count towards outermost: a trace recorded with Python stacks or
/// CPU ops has other ranges around and between them.
#[derive(Default)]
pub struct AnnotationSteps {
    depths: Depths,
    settled: Vec<Range>,
    finder: StepFinder,
}

impl AnnotationSteps {
    /// Notes one annotation range, `r.name` without its domain.
    pub fn push(&mut self, r: Range) {
        self.depths.push(r, &mut self.settled);
        self.settle();
    }

    fn settle(&mut self) {
        for r in self.settled.drain(..).filter(|r| r.depth == 0) {
            self.finder
                .push(r.pid, r.tid, &r.name, r.start_ns, r.end_ns);
        }
    }

    /// The steps found, source `nvtx`.
    pub fn steps(mut self) -> Vec<Step> {
        self.depths.finish(&mut self.settled);
        self.settle();
        self.finder.steps("nvtx")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_and_driver_names_map_to_catalogue_ops() {
        let name = |n: &str| call_op(n).map(|o| o.name);
        assert_eq!(name("cudaLaunchKernel"), Some("cudaLaunchKernel"));
        assert_eq!(name("cudaMemcpyAsync_ptsz"), Some("cudaMemcpyAsync"));
        assert_eq!(name("cuMemAlloc_v2"), Some("cuMemAlloc"));
        assert_eq!(name("cuMemcpyHtoDAsync_v2"), Some("cuMemcpyAsync"));
        assert_eq!(name("cuMemcpyDtoH_v2"), Some("cuMemcpy"));
        assert_eq!(name("cudaGraphLaunch"), Some("cudaGraphLaunch"));
        assert_eq!(name("cudaLaunchKernelExC"), Some("cudaLaunchKernel"));
        assert_eq!(name("cudaLaunchKernelExC_ptsz"), Some("cudaLaunchKernel"));
        assert_eq!(name("cuLaunchKernelEx"), Some("cuLaunchKernelEx"));
        assert_eq!(name("cudaEventQuery"), None);
        assert_eq!(name("INVALID"), None);
        // Host ops are not calls.
        assert_eq!(name("sched_switch"), None);
        let l = Launched {
            bytes: Some(4096),
            stream: Some(7),
            direction: Some(2),
            grid: Some(96),
            ..Launched::default()
        };
        let args = |n: &str| call_args(call_op(n).unwrap(), &l);
        assert_eq!(args("cudaMemcpyAsync"), (4096, 2));
        assert_eq!(args("cudaStreamSynchronize"), (7, 0));
        assert_eq!(args("cudaLaunchKernel"), (0, 96));
        let unknown = call_args(call_op("cudaMemcpy").unwrap(), &Launched::default());
        assert_eq!(unknown, (0, 0));
    }

    #[test]
    fn copy_names_give_their_direction() {
        assert_eq!(copy_direction("Memcpy HtoD (Pageable -> Device)"), Some(1));
        assert_eq!(copy_direction("Memcpy DtoH (Device -> Pinned)"), Some(2));
        assert_eq!(copy_direction("Memcpy DtoD (Device -> Device)"), Some(3));
        assert_eq!(copy_direction("Memcpy HtoH (Pinned -> Pinned)"), Some(0));
        assert_eq!(copy_direction("Memset (Device)"), None);
        assert_eq!(copy_direction("Memcpy"), None);
    }

    #[test]
    fn kernel_names_lose_return_type_and_parameters() {
        assert_eq!(
            kernel_name(
                "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<4u>, unsigned int, 1, 128, 1>(at::native::(anonymous namespace)::OpaqueType<4u>*, int (*)(int))"
            ),
            "at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<4u>, unsigned int, 1, 128, 1>"
        );
        assert_eq!(
            kernel_name(
                "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
            ),
            "ncclKernel_AllReduce_RING_LL_Sum_float"
        );
        assert_eq!(kernel_name("triton_poi_fused_0"), "triton_poi_fused_0");
        assert_eq!(kernel_name("_ZN2at6native4testEv"), "at::native::test");
        assert_eq!(profiler_step("ProfilerStep#551"), Some(551));
        assert_eq!(profiler_step("ProfilerStep#x"), None);
    }

    fn range(start: i64, end: i64) -> Range {
        Range {
            pid: 1,
            tid: 1,
            name: format!("{start}-{end}"),
            kind: "cpu_op",
            start_ns: start,
            end_ns: end,
            depth: 0,
        }
    }

    #[test]
    fn depth_counts_the_ranges_open_and_ties_put_the_longest_outside() {
        let mut d = Depths::default();
        let mut done = Vec::new();
        // A child written before its parent at the same start, a sibling, then a new outer range.
        for r in [
            range(0, 5),
            range(0, 10),
            range(6, 8),
            range(6, 7),
            range(10, 12),
        ] {
            d.push(r, &mut done);
        }
        d.finish(&mut done);
        let depths: Vec<(String, u16)> = done.into_iter().map(|r| (r.name, r.depth)).collect();
        assert_eq!(
            depths,
            [
                ("0-10", 0),
                ("0-5", 1),
                ("6-8", 1),
                ("6-7", 2),
                ("10-12", 0)
            ]
            .map(|(n, d)| (n.to_string(), d))
        );
        assert_eq!(d.out_of_order, 0);
    }
}
