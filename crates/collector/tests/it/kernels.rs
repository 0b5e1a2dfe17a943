//! Kernel names: every launch through cudaLaunchKernel is named after its kernel (the host
//! stub's symbol in the module that maps it), stored once per (process, address) in `kernels`
//! and grouped in `kernel_launches`: exact counts per kernel, as the workload was written.

use std::path::{Path, PathBuf};

use causeway_collector::TraceSummary;
use causeway_store::symbols::demangle;

use crate::standin::{KERNELS, kernels_module, launches_of};
use crate::{args, bpf_test, db_path, q, rows, standin, trace};

/// Traces the loader opening the kernel module and calling `entry` at once, with every launch
/// stored (the default budget would move them to a cheaper mode, without events) in a ring
/// that holds them; checks that every launch the module makes was recorded.
fn trace_kernel_module(dir: &Path, entry: &str) -> (PathBuf, TraceSummary) {
    let db = dir.join("t.duckdb");
    let mut a = args(
        &db,
        &[
            standin::get().loader.to_str().unwrap(),
            kernels_module().to_str().unwrap(),
            "0",
            entry,
        ],
    );
    a.overhead_budget = 100.0;
    a.ringbuf_size = 64 << 20;
    let summary = trace(&a);
    assert_eq!(summary.command_exit, Some(0));
    let total: usize = (0..KERNELS).map(launches_of).sum();
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel'"
        ),
        total as i64
    );
    (db, summary)
}

/// A module of 1,000 kernels, opened with dlopen and launched at once (~103k launches): each
/// kernel is named `standin::kernel<I>` and launched exactly as often as the module does.
#[test]
fn every_launch_is_named_after_its_kernel() {
    let Some(_g) = bpf_test() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (db, summary) = trace_kernel_module(dir.path(), "standinLaunchKernels");
    let total: usize = (0..KERNELS).map(launches_of).sum();
    let k = &summary.kernels;
    assert_eq!(
        (k.launches, k.addresses, k.named, k.kernels),
        (total as u64, KERNELS as u64, KERNELS as u64, KERNELS as u64),
        "{k:?}"
    );
    eprintln!(
        "{} launches of {} kernels: poll thread {} us, naming thread {} us",
        k.launches, k.kernels, k.poll_us, k.naming_us
    );
    // Names as the module's author wrote them, each launched as often as the module does.
    let got = rows(
        &db,
        "SELECT regexp_extract(kernel, 'standin::kernel<(\\d+)>', 1)::BIGINT AS i, count(*),
                count(DISTINCT kernel_id), min((kernel_module = 'libstandin_kernels.so')::INT)
         FROM kernel_launches GROUP BY i ORDER BY i",
        4,
    );
    let want: Vec<Vec<i64>> = (0..KERNELS)
        .map(|i| vec![i as i64, launches_of(i) as i64, 1, 1])
        .collect();
    assert_eq!(got, want);
    // The raw symbol is kept for exact matching, and names it.
    let raw = rows(
        &db,
        "SELECT count(*) FROM kernels WHERE symbol = '_ZN7standin6kernelILi7EEEvPf'
                                       AND name = 'standin::kernel<7>'",
        1,
    );
    assert_eq!(raw, [[1]]);
    assert_eq!(
        demangle("_ZN7standin6kernelILi7EEEvPf"),
        "standin::kernel<7>"
    );
}

/// CUDA 13's way: a handle per kernel from `__cudaGetKernel`, then launches through
/// `__cudaLaunchKernel(handle, ...)` (a thunk into cudaLaunchKernel): every launch counted once
/// and named after the stub its handle was made for.
#[test]
fn launches_through_kernel_handles_are_named_after_their_stubs() {
    let Some(_g) = bpf_test() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = trace_kernel_module(dir.path(), "standinLaunchKernelsByHandle");
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM events WHERE op = 'cudaGetKernel' AND arg1 <> 0"
        ),
        KERNELS as i64
    );
    let got = rows(
        &db,
        "SELECT regexp_extract(kernel, 'standin::kernel<(\\d+)>', 1)::BIGINT AS i, count(*)
         FROM kernel_launches GROUP BY i ORDER BY i",
        2,
    );
    let want: Vec<Vec<i64>> = (0..KERNELS)
        .map(|i| vec![i as i64, launches_of(i) as i64])
        .collect();
    assert_eq!(got, want);
}

/// Kernels loaded through the driver by name, as Triton does (cuModuleGetFunction, and
/// cuLibraryGetKernel + cuKernelGetFunction), launched with cuLaunchKernel: each launch named
/// after the name its function was got by, read from the process's memory.
#[test]
fn driver_launches_are_named_after_the_names_their_functions_were_got_by() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let (n, rounds) = (40, 25);
    let mut a = args(&db, &[s.exe(), "jit", &n.to_string(), &rounds.to_string()]);
    a.overhead_budget = 100.0;
    let summary = trace(&a);
    assert_eq!(summary.command_exit, Some(0));
    let got = rows(
        &db,
        "SELECT regexp_extract(kernel, 'triton_poi_fused_add_(\\d+)', 1)::BIGINT AS i, count(*),
                min((kernel_module = '')::INT), max(length(kernel_symbol)),
                min((kernel = kernel_symbol OR kernel = left('at::native::' || regexp_extract(kernel_symbol, '^_ZN2at6native\\d+(.*)Ev$', 1), 1024))::INT)
         FROM kernel_launches WHERE op = 'cuLaunchKernel' GROUP BY i ORDER BY i",
        5,
    );
    // The workload's design: function i launched rounds x (1 + i % 3) times; every fifth name
    // is mangled C++ of 300 bytes' identifier (3,000 for every tenth), stored whole and
    // demangled to at::native::IDENT, of which the first 1,024 characters are kept (workload.c
    // jit_name).
    let symbol_len = |i: i64| -> i64 {
        match (i % 5, i % 10) {
            (4, 9) => "_ZN2at6native3000Ev".len() as i64 + 3000,
            (4, _) => "_ZN2at6native300Ev".len() as i64 + 300,
            _ => format!("triton_poi_fused_add_{i}").len() as i64,
        }
    };
    let want: Vec<Vec<i64>> = (0..n)
        .map(|i| vec![i, rounds * (1 + i % 3), 1, symbol_len(i), 1])
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM events WHERE op IN ('cuModuleGetFunction', 'cuLibraryGetKernel', 'cuKernelGetFunction') AND arg1 <> 0"
        ),
        n + n / 2
    );
}
