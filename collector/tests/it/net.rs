//! Socket calls: sends and receives of traced threads with their bytes, descriptors and blocked
//! time; pipes are not sockets.

use crate::{args, bpf_test, db_path, op_totals, rows, standin, trace};

#[test]
fn socket_calls_are_recorded_with_bytes_descriptor_and_blocked_time() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let out = dir.path().join("net.txt");
    let summary = trace(&args(&db, &[s.exe(), "net", "150", out.to_str().unwrap()]));
    assert_eq!(summary.command_exit, Some(0));
    let ids: Vec<i64> = std::fs::read_to_string(&out)
        .unwrap()
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    let (main, helper, fd0, fd1) = (ids[0], ids[1], ids[2], ids[3]);
    // Every socket call, and nothing for the pipe: events and the kernel's counts agree.
    assert_eq!(op_totals(&db, "net_send"), (4, 4), "(events, kernel calls)");
    assert_eq!(op_totals(&db, "net_recv"), (4, 4), "(events, kernel calls)");
    let calls = |op: &str| {
        rows(
            &db,
            &format!(
                "SELECT tid, arg0, arg1, duration FROM events WHERE op = '{op}' ORDER BY timestamp"
            ),
            4,
        )
    };
    let sends = calls("net_send");
    let recvs = calls("net_recv");
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
    // The main thread's recv(2) blocked until the helper sent, 150 ms after it started.
    let blocked_ms = recvs[0][3] as f64 / 1e6;
    assert!(
        (120.0..400.0).contains(&blocked_ms),
        "recv blocked {blocked_ms} ms, expected ~150"
    );
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
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let out = dir.path().join("net.txt");
    let mut a = args(&db, &[s.exe(), "net", "150", out.to_str().unwrap()]);
    a.net_syscalls = true;
    let summary = trace(&a);
    assert_eq!(summary.command_exit, Some(0));
    let ids: Vec<i64> = std::fs::read_to_string(&out)
        .unwrap()
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    let (main, helper, fd0, fd1) = (ids[0], ids[1], ids[2], ids[3]);
    assert_eq!(op_totals(&db, "net_send"), (2, 2), "send(2), sendto(2)");
    assert_eq!(
        op_totals(&db, "net_recv"),
        (3, 3),
        "recv(2), recvfrom(2), recv(2)"
    );
    let sends = rows(
        &db,
        "SELECT tid, arg0, arg1 FROM events WHERE op = 'net_send' ORDER BY timestamp",
        3,
    );
    assert_eq!(sends[0], [helper, 1000, fd1]);
    assert_eq!(sends[1][..2], [main, 64]);
    let recvs = rows(
        &db,
        "SELECT tid, arg0, arg1, duration FROM events WHERE op = 'net_recv' ORDER BY timestamp",
        4,
    );
    assert_eq!(recvs[0][..3], [main, 1000, fd0]);
    let ms = recvs[0][3] as f64 / 1e6;
    assert!(
        (120.0..400.0).contains(&ms),
        "recv took {ms} ms, expected ~150"
    );
    assert_eq!(
        recvs[1..].iter().map(|r| r[1]).collect::<Vec<_>>(),
        [64, 512]
    );
}
