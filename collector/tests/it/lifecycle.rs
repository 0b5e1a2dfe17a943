//! Process lifecycle: forked children followed, the store intact after SIGINT or SIGKILL of the
//! tracer (the tracer runs in a child copy of this test binary), and a long recording's store
//! closed and opened again on the way without losing an event.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::{args, bpf_test, db_path, open, q, rows, standin, trace};

#[test]
fn forked_children_are_followed() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let summary = trace(&args(&db, &[s.exe(), "fork", "3", "7"]));
    assert_eq!(summary.command_exit, Some(0));
    let fork = rows(
        &db,
        "SELECT pid, arg0 FROM events WHERE op = 'process_fork'",
        2,
    );
    assert_eq!(fork.len(), 1, "{fork:?}");
    let (parent, child) = (fork[0][0], fork[0][1]);
    assert_eq!(
        q(
            &db,
            &format!(
                "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel' AND pid = {parent}"
            )
        ),
        3
    );
    assert_eq!(
        q(
            &db,
            &format!("SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel' AND pid = {child}")
        ),
        7
    );
    // Both exits are recorded, with exit code 0 and a lifetime.
    let exits = rows(
        &db,
        "SELECT pid, arg0, duration FROM events WHERE op = 'process_exit' ORDER BY pid",
        3,
    );
    assert_eq!(exits.len(), 2, "{exits:?}");
    assert!(exits.iter().all(|e| e[1] == 0 && e[2] > 0), "{exits:?}");
    assert_eq!(
        q(
            &db,
            &format!("SELECT count(*) FROM processes WHERE pid IN ({parent}, {child})")
        ),
        2
    );
}

const CHILD_ENV: &str = "CAUSEWAY_IT_TRACER_DB";

/// Not a test on its own: the body of the tracer process that the signal tests start and kill.
#[test]
#[ignore = "helper run by the signal tests in a child process"]
fn tracer_child() {
    let db = std::env::var(CHILD_ENV).expect("run by the signal tests");
    let s = standin::get();
    let mut a = args(std::path::Path::new(&db), &[s.exe(), "hold", "8000"]);
    a.duration = Some(Duration::from_secs(120));
    trace(&a);
}

fn start_tracer(db: &std::path::Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "lifecycle::tracer_child",
            "--nocapture",
        ])
        .env(CHILD_ENV, db)
        .spawn()
        .unwrap()
}

/// Waits until the tracer has flushed some launches into the file (the WAL counts).
fn wait_for_events(child: &mut std::process::Child, secs: u64) {
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    assert!(child.try_wait().unwrap().is_none(), "tracer exited early");
    assert!(t.elapsed() >= Duration::from_secs(secs));
}

#[test]
fn store_is_complete_after_sigint() {
    let Some(_g) = bpf_test() else { return };
    standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let mut child = start_tracer(&db);
    wait_for_events(&mut child, 4);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "tracer after SIGINT: {status}");
    let launches = q(
        &db,
        "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel'",
    );
    assert!(launches > 100, "{launches} launches");
    // The session is closed and the kernel counters were written at the end.
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM sessions WHERE stopped_ns > started_ns"
        ),
        1
    );
    assert!(q(&db, "SELECT sum(calls) FROM op_counts WHERE op_id = 3") >= launches);
}

#[test]
fn store_opens_after_sigkill_with_what_was_flushed() {
    let Some(_g) = bpf_test() else { return };
    standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let mut child = start_tracer(&db);
    wait_for_events(&mut child, 4);
    child.kill().unwrap();
    child.wait().unwrap();
    // The traced workload runs on for a few seconds untraced; the file must open regardless.
    let conn = open(&db);
    let launches: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(launches > 100, "{launches} launches survived the SIGKILL");
}

/// Not a test on its own: traces the stand-in (with a fork) in a tracer process whose
/// environment the identity test sets, so the workload inherits torchrun's variables.
#[test]
#[ignore = "helper run by the identity test in a child process"]
fn identity_tracer_child() {
    let db = std::env::var(CHILD_ENV).expect("run by the identity test");
    let s = standin::get();
    trace(&args(
        std::path::Path::new(&db),
        &[s.exe(), "fork", "2", "2", "400"],
    ));
}

#[test]
fn rank_and_cluster_come_from_the_traced_environment() {
    let Some(_g) = bpf_test() else { return };
    standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "lifecycle::identity_tracer_child",
            "--nocapture",
        ])
        .env(CHILD_ENV, &db)
        .env("RANK", "3")
        .env("LOCAL_RANK", "1")
        .env("WORLD_SIZE", "4")
        .env("TORCHELASTIC_RUN_ID", "job-42")
        .status()
        .unwrap();
    assert!(status.success(), "tracer: {status}");
    let c = open(&db);
    type Row = (i64, Option<i32>, Option<i32>, Option<i32>, String);
    let procs: Vec<Row> = c
        .prepare(
            "SELECT pid, rank, local_rank, world_size, cluster FROM processes
             WHERE pid IN (SELECT pid FROM events WHERE op = 'cudaLaunchKernel') ORDER BY pid",
        )
        .unwrap()
        .query_map([], causeway_store::row)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(procs.len(), 2, "parent and forked child: {procs:?}");
    for p in &procs {
        assert_eq!(
            (p.1, p.2, p.3, p.4.as_str()),
            (Some(3), Some(1), Some(4), "job-42"),
            "{p:?}"
        );
    }
    // Every CUDA call carries the rank; the node carries the cluster.
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel'"
        ),
        4
    );
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel' AND rank IS DISTINCT FROM 3"
        ),
        0
    );
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM nodes WHERE node = 'test' AND cluster = 'job-42'"
        ),
        1
    );
}

/// Past 16 row groups (1,966,080 events) the writer reopens the store to free DuckDB's metadata
/// of the row groups written (and gives back the library pages the new database touched): every
/// call is still either stored, once, or counted as dropped.
#[test]
fn a_long_recording_reopens_its_store_and_loses_nothing() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let calls = 2_200_000;
    let mut a = args(&db, &[s.exe(), "rate", &calls.to_string()]);
    a.probe_modes = vec![(3, causeway_bpf::abi::ProbeMode::Full)];
    a.no_host = true;
    let summary = trace(&a);
    assert!(summary.store_reopens >= 1, "{summary:?}");
    let stored = q(
        &db,
        "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel'",
    );
    let dropped = q(
        &db,
        "SELECT coalesce(sum(count), 0) FROM drops WHERE op_id = 3",
    );
    assert_eq!(
        stored + dropped,
        calls,
        "stored {stored} + dropped {dropped}"
    );
    assert_eq!(
        q(&db, "SELECT count(DISTINCT seq) FROM events"),
        q(&db, "SELECT count(*) FROM events")
    );
    assert_eq!(
        summary.events_written as i64,
        q(&db, "SELECT count(*) FROM events")
    );
    // The session written before the reopens was closed after them.
    assert_eq!(
        q(&db, "SELECT count(*) FROM sessions WHERE stopped_ns > 0"),
        1
    );
}
