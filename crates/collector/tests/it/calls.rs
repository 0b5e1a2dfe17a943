//! CUDA runtime and driver calls: exact counts, argument values, return codes and durations.

use crate::{args, bpf_test, command_pid, db_path, op_totals, q, rows, standin, trace};

#[test]
fn runtime_and_driver_calls_are_counted_exactly_with_their_arguments() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let out = dir.path().join("out.txt");
    let summary = trace(&args(&db, &[s.exe(), "calls", out.to_str().unwrap()]));
    assert_eq!(summary.command_exit, Some(0));
    assert_eq!(summary.ringbuf_drops + summary.channel_drops, 0);
    let pid = command_pid(&db);
    let printed = std::fs::read_to_string(&out).unwrap();
    let mut f = printed.split_whitespace();
    let dev_ptr = i64::from_str_radix(f.next().unwrap().trim_start_matches("0x"), 16).unwrap();
    let kernel_fn = i64::from_str_radix(f.next().unwrap().trim_start_matches("0x"), 16).unwrap();

    let count = |op: &str| {
        q(
            &db,
            &format!("SELECT count(*) FROM events WHERE op = '{op}' AND pid = {pid}"),
        )
    };
    assert_eq!(count("cudaLaunchKernel"), 100);
    assert_eq!(count("cudaMemcpy"), 3);
    assert_eq!(count("cudaMemcpyAsync"), 1);
    assert_eq!(count("cudaMalloc"), 2);
    assert_eq!(count("cudaFree"), 1);
    // One of the two cudaMallocs allocated through the driver, as NVIDIA's runtime does: that
    // cuMemAlloc_v2 is the runtime's own work, not a second allocation (calls.h).
    assert_eq!(count("cuMemAlloc"), 1);
    // Its probe trapped all the same: the overhead controller costs it (a probe hit, not a call).
    let calls = q(
        &db,
        &format!(
            "SELECT sum(calls) FROM op_counts WHERE pid = {pid} AND (op_id < 100 OR op_id >= 200)"
        ),
    );
    let hits = q(
        &db,
        &format!("SELECT sum(calls) FROM probe_overhead WHERE pid = {pid}"),
    );
    assert_eq!(hits, calls + 1, "{hits} probe hits, {calls} calls");
    assert_eq!(count("cuMemcpy"), 2);
    assert_eq!(count("cuLaunchKernel"), 5);
    assert_eq!(count("cuMemFree"), 1);
    assert_eq!(count("cuCtxSynchronize"), 1);

    // Launch: kernel function pointer and grid size 4*2*1.
    let launch = rows(
        &db,
        &format!(
            "SELECT DISTINCT arg0, arg1 FROM events WHERE op = 'cudaLaunchKernel' AND pid = {pid}"
        ),
        2,
    );
    assert_eq!(launch, vec![vec![kernel_fn, 8]]);
    let cu = rows(
        &db,
        &format!("SELECT DISTINCT arg1 FROM events WHERE op = 'cuLaunchKernel' AND pid = {pid}"),
        1,
    );
    assert_eq!(cu, vec![vec![24]]);
    // Copies: bytes and direction, in call order.
    let copies = rows(
        &db,
        &format!(
            "SELECT arg0, arg1 FROM events WHERE op IN ('cudaMemcpy', 'cudaMemcpyAsync') AND pid = {pid} ORDER BY timestamp"
        ),
        2,
    );
    assert_eq!(
        copies,
        vec![vec![1024, 1], vec![2048, 2], vec![4096, 3], vec![512, 1]]
    );
    let cu_copies = rows(
        &db,
        &format!(
            "SELECT arg0, arg1 FROM events WHERE op = 'cuMemcpy' AND pid = {pid} ORDER BY timestamp"
        ),
        2,
    );
    assert_eq!(cu_copies, vec![vec![256, 1], vec![128, 2]]);
    // Allocation: bytes requested and the pointer returned; the failing one returns error 2.
    let mallocs = rows(
        &db,
        &format!(
            "SELECT arg0, arg1, ret_code FROM events WHERE op = 'cudaMalloc' AND pid = {pid} ORDER BY timestamp"
        ),
        3,
    );
    assert_eq!(
        mallocs,
        vec![vec![1 << 20, dev_ptr, 0], vec![1 << 41, 0, 2]]
    );
    assert_eq!(
        q(
            &db,
            &format!("SELECT arg0 FROM events WHERE op = 'cudaFree' AND pid = {pid}")
        ),
        dev_ptr
    );
    assert_eq!(
        q(
            &db,
            &format!("SELECT arg0 FROM events WHERE op = 'cuMemAlloc' AND pid = {pid}")
        ),
        4096
    );
    // The probes read the thread's name and cgroup through the task pointer (no helpers):
    // every event carries what the kernel reports for the caller.
    let cgroup = own_cgroup_v2_id();
    assert_eq!(
        q(
            &db,
            &format!(
                "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel' AND pid = {pid} \
                 AND comm = 'workload' AND cgroup_id = {cgroup}"
            )
        ),
        100
    );

    // Every call is also counted in the kernel, with nothing missing from the store.
    let kernel_calls = q(
        &db,
        &format!(
            "SELECT sum(calls) FROM op_counts o JOIN ops USING (op_id) WHERE ops.op = 'cudaLaunchKernel' AND pid = {pid}"
        ),
    );
    assert_eq!(kernel_calls, 100);
    let unstored = q(
        &db,
        &format!(
            "SELECT coalesce(sum(calls - stored), 0) FROM op_counts WHERE pid = {pid} AND op_id < 100"
        ),
    );
    assert_eq!(unstored, 0);
    assert_eq!(
        q(
            &db,
            &format!("SELECT sum(count) FROM op_histograms WHERE op_id = 3 AND pid = {pid}")
        ),
        100
    );
    assert_eq!(q(&db, "SELECT coalesce(sum(count), 0) FROM drops"), 0);
    // The process row exists with the workload's comm.
    assert_eq!(
        q(
            &db,
            &format!("SELECT count(*) FROM processes WHERE pid = {pid} AND comm = 'workload'")
        ),
        1
    );
}

#[test]
fn threads_sharing_an_in_flight_slot_are_each_timed_exactly() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let out = dir.path().join("tids.txt");
    let slots = causeway_bpf::abi::THREAD_SLOTS;
    let summary = trace(&args(
        &db,
        &[
            s.exe(),
            "collide",
            "50",
            &slots.to_string(),
            "20",
            out.to_str().unwrap(),
        ],
    ));
    assert_eq!(summary.command_exit, Some(0));
    let tids: Vec<i64> = std::fs::read_to_string(&out)
        .unwrap()
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    let (first, second) = (tids[0], tids[1]);
    assert!(first != second && first % i64::from(slots) == second % i64::from(slots));
    // The first thread holds the array slot; the second keeps its calls in task storage.
    for (tid, launches, syncs) in [(first, 100, 2), (second, 50, 1)] {
        assert_eq!(
            q(
                &db,
                &format!(
                    "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel' AND tid = {tid}"
                )
            ),
            launches
        );
        let d = rows(
            &db,
            &format!(
                "SELECT duration FROM events WHERE op = 'cudaStreamSynchronize' AND tid = {tid}"
            ),
            1,
        );
        assert_eq!(d.len(), syncs, "thread {tid}: {d:?}");
        // A 20 ms sleep never ends early; on a busy machine it ends late (30.5 ms seen at load
        // average 10). The three syncs run one after the other with thousands of thread
        // creations between them: one timed from another's entry would be far longer.
        for ms in d.iter().map(|r| r[0] as f64 / 1e6) {
            assert!(
                (19.5..100.0).contains(&ms),
                "thread {tid}: sync lasted {ms} ms, expected 20"
            );
        }
    }
}

/// Full-mode events wait in their thread's batch (calls.h) until it fills or the thread leaves
/// the CPU: a trace ending while a thread that made fewer calls than a batch holds is still
/// running on the CPU stores them all (read from the batch after the programs are detached).
#[test]
fn events_still_batched_when_the_trace_ends_are_stored() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let calls = causeway_bpf::abi::BATCH - 3;
    let mut a = args(&db, &[s.exe(), "spin", &calls.to_string(), "8000"]);
    // Long enough for a loaded machine to start the command (its libraries are looked at
    // while it waits), well within its 8 s of spinning.
    a.duration = Some(std::time::Duration::from_secs(4));
    let summary = trace(&a);
    let pid = command_pid(&db);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert_eq!(summary.command_exit, None, "the command was still running");
    assert_eq!(
        op_totals(&db, "cudaLaunchKernel"),
        (calls as i64, calls as i64),
        "(events, kernel calls)"
    );
    assert_eq!(summary.ringbuf_drops, 0);
}

#[test]
fn synchronize_durations_match_the_sleep() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    trace(&args(&db, &[s.exe(), "sync", "50"]));
    for op in [
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cuCtxSynchronize",
    ] {
        let d = rows(
            &db,
            &format!("SELECT duration FROM events WHERE op = '{op}'"),
            1,
        );
        assert_eq!(d.len(), 1, "{op}: {d:?}");
        let ms = d[0][0] as f64 / 1e6;
        assert!(
            (49.5..60.0).contains(&ms),
            "{op} lasted {ms} ms, expected 50 ms"
        );
    }
    assert_eq!(
        q(
            &db,
            "SELECT arg0 FROM events WHERE op = 'cudaStreamSynchronize'"
        ),
        5
    );
    // The sleeping thread was off-CPU, blocked (arg1 = 1), for about as long.
    let off = q(
        &db,
        "SELECT max(duration) FROM events WHERE op = 'sched_switch' AND arg1 = 1",
    );
    assert!(
        (49.0..60.0).contains(&(off as f64 / 1e6)),
        "longest blocked interval {off} ns"
    );
}

#[test]
fn classic_uprobes_record_the_same_calls() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let out = dir.path().join("out.txt");
    // The attach path of kernels without uprobe.multi, including an entry-only op (no return
    // probe attached for it).
    let mut a = args(&db, &[s.exe(), "calls", out.to_str().unwrap()]);
    a.classic_uprobes = true;
    a.probe_modes = vec![(1, causeway_collector::ProbeMode::EntryOnly)];
    let summary = trace(&a);
    assert_eq!(summary.command_exit, Some(0));
    let pid = command_pid(&db);
    let count = |op: &str| {
        q(
            &db,
            &format!("SELECT count(*) FROM events WHERE op = '{op}' AND pid = {pid}"),
        )
    };
    assert_eq!(count("cudaLaunchKernel"), 100);
    assert_eq!(count("cuMemcpy"), 2);
    assert_eq!(count("cudaMalloc"), 0);
    assert_eq!(
        q(
            &db,
            &format!("SELECT sum(calls) FROM op_counts WHERE op_id = 1 AND pid = {pid}")
        ),
        2
    );
}

/// The id of this process's cgroup v2 directory (its inode), which commands it starts inherit.
fn own_cgroup_v2_id() -> u64 {
    use std::os::unix::fs::MetadataExt;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let rel = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup v2 line in /proc/self/cgroup");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = mountinfo
        .lines()
        .find(|l| {
            l.split(" - ")
                .nth(1)
                .is_some_and(|t| t.starts_with("cgroup2 "))
        })
        .and_then(|l| l.split_whitespace().nth(4))
        .expect("cgroup2 mounted (/proc/self/mountinfo)");
    std::fs::metadata(format!("{mount}{rel}"))
        .expect("the cgroup v2 directory")
        .ino()
}
