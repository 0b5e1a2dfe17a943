//! Which ops the engine's queries select, as `op_id` lists for SQL built once from the op
//! table (causeway-ops: ids are stable; every store's `ops` table is written from it).
//! Filtering on `op_id` literals lets DuckDB drop rows in the scan instead of probing a join
//! with the `ops` table for every event.

use std::sync::LazyLock;

use causeway_ops::Class;
use causeway_store::catalog::{self, OpInfo, Source};

/// Ops whose job is to wait for the GPU: the sync class, in the order evidence queries have
/// always shown it (snapshots pin it; the build checks the set).
pub const SYNC_OPS: [&str; 5] = [
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cudaEventSynchronize",
];
const _: () = assert!(causeway_ops::is_class(&SYNC_OPS, causeway_ops::Class::Sync));

/// Kernel launches (the GPU-feeding calls): the launch class, in the order evidence queries
/// have always shown it (snapshots pin it; the build checks the set).
pub const LAUNCH_NAMES: [&str; 4] = [
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaGraphLaunch",
];
const _: () = assert!(causeway_ops::is_class(&LAUNCH_NAMES, Class::Launch));

/// Whether an op comes from a GPU library (CUDA runtime, driver, graphs, NCCL), by source name.
pub fn is_gpu_source(source: &str) -> bool {
    Source::ALL
        .into_iter()
        .any(|s| s.is_call() && s.name() == source)
}

/// Whether an op is a synchronisation (its job is to wait).
pub fn is_sync(op: &str) -> bool {
    SYNC_OPS.contains(&op)
}

/// Whether an op is a kernel launch.
pub fn is_launch(op: &str) -> bool {
    LAUNCH_NAMES.contains(&op)
}

fn gpu(o: &OpInfo) -> bool {
    o.source.is_call()
}

/// A SQL predicate on `op_id` true exactly for the catalogue ops matching `keep`, written as
/// ranges of consecutive ids (`(op_id BETWEEN 1 AND 14 OR op_id = 30)`): a few comparisons
/// per row, where a long IN list becomes a join.
pub fn op_filter(keep: impl Fn(&OpInfo) -> bool) -> String {
    let mut kept: Vec<u16> = catalog::OPS
        .iter()
        .filter(|o| keep(o))
        .map(|o| o.id)
        .collect();
    kept.sort_unstable();
    let mut ranges: Vec<(u16, u16)> = Vec::new();
    for id in kept {
        match ranges.last_mut() {
            Some(r) if r.1.checked_add(1) == Some(id) => r.1 = id,
            _ => ranges.push((id, id)),
        }
    }
    if ranges.is_empty() {
        return "FALSE".into();
    }
    let parts: Vec<String> = ranges
        .iter()
        .map(|&(a, b)| {
            if a == b {
                format!("op_id = {a}")
            } else {
                format!("op_id BETWEEN {a} AND {b}")
            }
        })
        .collect();
    format!("({})", parts.join(" OR "))
}

/// Every GPU-library op.
pub static GPU: LazyLock<String> = LazyLock::new(|| op_filter(gpu));
/// GPU-library ops that are not synchronisations (the calls per-call attribution examines).
pub static GPU_NOT_SYNC: LazyLock<String> =
    LazyLock::new(|| op_filter(|o| gpu(o) && !is_sync(o.name)));
/// A cheap superset of [`GPU`] for scans over every event: the catalogue's other ops are one
/// id range (checked by a test); callers keep only catalogue GPU ops afterwards.
pub static GPU_PREFILTER: LazyLock<String> = LazyLock::new(|| {
    let other = catalog::OPS.iter().filter(|o| !gpu(o)).map(|o| o.id);
    let (lo, hi) = (other.clone().min().unwrap_or(0), other.max().unwrap_or(0));
    format!("NOT (op_id BETWEEN {lo} AND {hi})")
});
/// Kernel launches.
pub static LAUNCH: LazyLock<String> = LazyLock::new(|| op_filter(|o| is_launch(o.name)));
/// Block I/O requests.
pub static IO: LazyLock<String> = LazyLock::new(|| op_filter(|o| o.source == Source::Io));

/// [`op_filter`] of the named ops (unknown names are skipped).
pub fn named(names: &[&str]) -> String {
    op_filter(|o| names.contains(&o.name))
}

/// A comma-separated list of thread ids, for `list_contains(string_split(?, ',')::UINTEGER[], tid)`.
pub fn tid_list(tids: impl IntoIterator<Item = u32>) -> String {
    let v: Vec<String> = tids.into_iter().map(|t| t.to_string()).collect();
    v.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Evaluates an `op_filter` predicate for one id, the way SQL would.
    fn eval(pred: &str, id: u16) -> bool {
        pred.trim_matches(|c| c == '(' || c == ')')
            .split(" OR ")
            .any(|p| match p.strip_prefix("op_id BETWEEN ") {
                Some(r) => {
                    let (a, b) = r.split_once(" AND ").unwrap();
                    (a.parse().unwrap()..=b.parse().unwrap()).contains(&id)
                }
                None => p
                    .strip_prefix("op_id = ")
                    .is_some_and(|x| x.parse() == Ok(id)),
            })
    }

    #[test]
    fn filters_select_exactly_their_catalogue_ops() {
        for id in 0..=u16::MAX {
            let o = catalog::op_by_id(id);
            let src = o.map(|o| o.source.name());
            let name = o.map_or("", |o| o.name);
            assert_eq!(eval(&GPU, id), src.is_some_and(is_gpu_source), "{id}");
            let not_sync = src.is_some_and(is_gpu_source) && !is_sync(name);
            assert_eq!(eval(&GPU_NOT_SYNC, id), not_sync, "{id}");
            assert_eq!(eval(&LAUNCH, id), o.is_some() && is_launch(name), "{id}");
            assert_eq!(eval(&IO, id), src == Some("IO"), "{id}");
        }
        assert_eq!(named(&["oom_kill", "nope"]), "(op_id = 103)");
        assert_eq!(&*GPU_PREFILTER, "NOT (op_id BETWEEN 100 AND 171)");
        for o in catalog::OPS.iter().filter(|o| gpu(o)) {
            assert!(
                !(100..=171).contains(&o.id),
                "{} inside the prefilter's gap",
                o.name
            );
        }
        assert_eq!(named(&["nope"]), "FALSE");
        assert_eq!(
            &*GPU,
            "(op_id BETWEEN 1 AND 15 OR op_id BETWEEN 30 AND 33 OR op_id BETWEEN 50 AND 61 OR op_id BETWEEN 200 AND 207)"
        );
        for s in SYNC_OPS {
            assert!(catalog::op_by_name(s).is_some(), "{s}");
        }
        assert_eq!(tid_list([3, 4]), "3,4");
    }

    /// The few queries written with op ids as literals (constants, for DuckDB's scan) use the
    /// op table's ids.
    #[test]
    fn op_id_literals_in_queries_are_the_tables() {
        use crate::detectors::{cold_start, dataloader_starvation, lateness};
        use causeway_ops::id;
        let switch = format!("op_id = {}", id("sched_switch"));
        for sql in [
            crate::stats::OFF_CPU_SQL,
            crate::scan::THREAD_OPS_SQL,
            lateness::OFF_CPU_SQL,
            dataloader_starvation::PREEMPTORS_SQL,
        ] {
            assert!(sql.contains(&switch), "{sql}");
        }
        let wakeup = format!("op_id = {}", id("sched_wakeup"));
        assert!(lateness::RUN_QUEUE_SQL.contains(&wakeup));
        let launches = format!(
            "op_id IN ({}, {})",
            id("cudaLaunchKernel"),
            id("cuLaunchKernel")
        );
        assert!(cold_start::FIRST_USE_SQL.contains(&launches));
    }
}
