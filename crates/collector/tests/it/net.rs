//! Socket calls: sends and receives of traced threads with their bytes, descriptors and blocked
//! time; pipes are not sockets.

use std::path::{Path, PathBuf};

use crate::{args, bpf_test, db_path, op_totals, rows, standin, trace};

/// The workload's `net` pattern (recv blocked 150 ms) traced into a fresh store; returns the
/// store's directory, its path and (main tid, helper tid, pair fd 0, pair fd 1).
fn trace_net(net_syscalls: bool) -> (tempfile::TempDir, PathBuf, [i64; 4]) {
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let out = dir.path().join("net.txt");
    let mut a = args(&db, &[s.exe(), "net", "150", out.to_str().unwrap()]);
    a.net_syscalls = net_syscalls;
    assert_eq!(trace(&a).command_exit, Some(0));
    let ids: Vec<i64> = std::fs::read_to_string(&out)
        .unwrap()
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    (dir, db, [ids[0], ids[1], ids[2], ids[3]])
}

/// (tid, bytes, descriptor, duration) of each event of `op`, in time order.
fn calls(db: &Path, op: &str) -> Vec<Vec<i64>> {
    rows(
        db,
        &format!(
            "SELECT tid, arg0, arg1, duration FROM events WHERE op = '{op}' ORDER BY timestamp"
        ),
        4,
    )
}

/// The first receive (the main thread's recv(2)) waited for the helper's send, 150 ms.
fn assert_blocked_150_ms(call: &[i64]) {
    let ms = call[3] as f64 / 1e6;
    assert!(
        (120.0..400.0).contains(&ms),
        "recv blocked {ms} ms, expected ~150"
    );
}

#[test]
fn socket_calls_are_recorded_with_bytes_descriptor_and_blocked_time() {
    let Some(_g) = bpf_test() else { return };
    let (_dir, db, [main, helper, fd0, fd1]) = trace_net(false);
    // Every socket call, and nothing for the pipe: events and the kernel's counts agree.
    assert_eq!(op_totals(&db, "net_send"), (4, 4), "(events, kernel calls)");
    assert_eq!(op_totals(&db, "net_recv"), (4, 4), "(events, kernel calls)");
    let sends = calls(&db, "net_send");
    let recvs = calls(&db, "net_recv");
    // (tid, bytes) of each, in order: send(2) and write(2) on the pair, UDP, sendfile(2).
    let who = |v: &[Vec<i64>]| v.iter().map(|r| (r[0], r[1])).collect::<Vec<_>>();
    assert_eq!(
        who(&sends),
        [(helper, 1000), (main, 300), (main, 64), (main, 512)]
    );
    assert_eq!(
        who(&recvs),
        [(main, 1000), (helper, 300), (main, 64), (main, 512)]
    );
    assert_eq!(
        (sends[0][2], sends[1][2]),
        (fd1, fd0),
        "descriptors of the sends"
    );
    assert_eq!(
        (recvs[0][2], recvs[1][2]),
        (fd0, fd1),
        "descriptors of the receives"
    );
    assert_blocked_150_ms(&recvs[0]);
    // The datagram was waiting: its receive did not block.
    assert!(recvs[2][3] < 5_000_000, "recvfrom took {} ns", recvs[2][3]);
    // sendfile(2)'s descriptor is its socket (its first argument).
    assert_eq!(
        sends[3][2],
        recvs[3][2] - 1,
        "sendfile on one end, recv on the other"
    );
}

/// `--net-syscalls` (and kernels without the socket tracepoints): the send/recv family timed
/// from system call entry to exit; read/write/sendfile on sockets are not seen.
#[test]
fn socket_system_calls_are_timed_from_entry_to_exit() {
    let Some(_g) = bpf_test() else { return };
    let (_dir, db, [main, helper, fd0, fd1]) = trace_net(true);
    assert_eq!(op_totals(&db, "net_send"), (2, 2), "send(2), sendto(2)");
    assert_eq!(
        op_totals(&db, "net_recv"),
        (3, 3),
        "recv(2), recvfrom(2), recv(2)"
    );
    let sends = calls(&db, "net_send");
    assert_eq!(sends[0][..3], [helper, 1000, fd1]);
    assert_eq!(sends[1][..2], [main, 64]);
    let recvs = calls(&db, "net_recv");
    assert_eq!(recvs[0][..3], [main, 1000, fd0]);
    assert_blocked_150_ms(&recvs[0]);
    assert_eq!(
        recvs[1..].iter().map(|r| r[1]).collect::<Vec<_>>(),
        [64, 512]
    );
}
