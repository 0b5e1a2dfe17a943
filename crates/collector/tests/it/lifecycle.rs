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
/// The workload's log for the signal tests' tracer (`logged` mode), how long it runs and its
/// probe mode.
const CHILD_LOG_ENV: &str = "CAUSEWAY_IT_TRACER_LOG";
const CHILD_MODE_ENV: &str = "CAUSEWAY_IT_TRACER_MODE";
const CHILD_MS_ENV: &str = "CAUSEWAY_IT_TRACER_MS";

/// Not a test on its own: the body of the tracer process that the signal tests start and kill.
#[test]
#[ignore = "helper run by the signal tests in a child process"]
fn tracer_child() {
    let db = std::env::var(CHILD_ENV).expect("run by the signal tests");
    let s = standin::get();
    let log = std::env::var(CHILD_LOG_ENV).expect("the workload's log");
    let ms = std::env::var(CHILD_MS_ENV).unwrap();
    let mut a = args(
        std::path::Path::new(&db),
        &[s.exe(), "logged", "5000", &ms, &log],
    );
    if std::env::var(CHILD_MODE_ENV).as_deref() == Ok("full") {
        a.probe_modes = vec![(3, causeway_collector::ProbeMode::Full)];
    }
    a.duration = Some(Duration::from_secs(120));
    trace(&a);
}

fn tracer_command(db: &std::path::Path) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--ignored",
        "--exact",
        "lifecycle::tracer_child",
        "--nocapture",
    ])
    .env(CHILD_ENV, db);
    c
}

#[test]
fn store_is_complete_after_sigint() {
    let Some(_g) = bpf_test() else { return };
    standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    // Interrupted once the workload has made 500 launches (its own log says so), not after a
    // fixed time: on a busy machine the tracer may take seconds to start.
    let log = dir.path().join("calls.log");
    let mut child = tracer_command(&db)
        .env(CHILD_LOG_ENV, &log)
        .env(CHILD_MS_ENV, "10000")
        .spawn()
        .unwrap();
    let waited = Instant::now();
    while read_log(&log).last().is_none_or(|(n, _)| *n < 500) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "tracer exited before the workload's 500th call"
        );
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "the workload did not make 500 calls in 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
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
    // The kernel counted every launch; with the default budget the launches may be sampled
    // at once (as on these machines), so fewer are stored, at least one.
    let counted = q(&db, "SELECT sum(calls) FROM op_counts WHERE op_id = 3");
    assert!(
        counted > 100 && launches >= 1,
        "{counted} launches counted, {launches} stored"
    );
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

/// The workload's log: (calls made, realtime ns after the last of them), in order.
fn read_log(path: &std::path::Path) -> Vec<(i64, i64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_once(' ')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect()
}

/// SIGKILL of the tracer loses at most the documented last stretch (`SIGKILL_LOSS_BOUND`), at
/// every moment of a recording, in full mode (every call stored: the count is checked against
/// the workload's own log) and with the default budget (launches sampled at once on these
/// machines: something is committed within the bound all the same). The store opens, and the
/// temporary directory DuckDB left is gone once it has been opened.
#[test]
fn store_opens_after_sigkill_with_what_was_flushed() {
    let Some(_g) = bpf_test() else { return };
    standin::get();
    let bound_ns = causeway_collector::SIGKILL_LOSS_BOUND.as_nanos() as i64;
    let mut report = Vec::new();
    for mode in ["full", "default"] {
        for moment_ms in [500u64, 1500, 2500, 5000] {
            let dir = tempfile::tempdir().unwrap();
            let db = db_path(&dir);
            let log = dir.path().join("calls.log");
            // The workload outlives the killed tracer by 2 s, then ends by itself.
            let mut child = tracer_command(&db)
                .env(CHILD_LOG_ENV, &log)
                .env(CHILD_MODE_ENV, mode)
                .env(CHILD_MS_ENV, (moment_ms + 2000).to_string())
                .spawn()
                .unwrap();
            let waited = Instant::now();
            while read_log(&log).is_empty() {
                assert!(
                    child.try_wait().unwrap().is_none(),
                    "tracer exited before the workload's first call"
                );
                assert!(
                    waited.elapsed() < Duration::from_secs(60),
                    "the workload never started"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            let first_ns = read_log(&log)[0].1;
            std::thread::sleep(Duration::from_millis(moment_ms));
            let killed_ns = causeway_store::now_ns();
            child.kill().unwrap();
            child.wait().unwrap();
            let calls = read_log(&log);
            // Calls made before the bound: every one of them must be stored (full mode).
            let safe_ns = killed_ns - bound_ns;
            let made_before = calls
                .iter()
                .filter(|(_, at)| *at <= safe_ns)
                .map(|(n, _)| *n)
                .max()
                .unwrap_or(0);
            let tmp = {
                let mut p = db.as_os_str().to_owned();
                p.push(".tmp");
                std::path::PathBuf::from(p)
            };
            let reader = causeway_store::Reader::open(&db).unwrap_or_else(|e| {
                panic!("{mode} at {moment_ms} ms: the store does not open: {e}")
            });
            assert!(!tmp.exists(), "{} is left after opening", tmp.display());
            drop(reader);
            let stored_before = q(
                &db,
                &format!(
                    "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel' AND timestamp <= {safe_ns}"
                ),
            );
            let stored = q(
                &db,
                "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel'",
            );
            let newest_ns = q(
                &db,
                "SELECT coalesce(max(timestamp), 0) FROM events WHERE op = 'cudaLaunchKernel'",
            );
            report.push(format!(
                "{mode} killed {:.2} s after the first call: {made_before} made before the bound, \
                 {stored_before} of them stored ({stored} in all, the newest {:.2} s before the kill)",
                (killed_ns - first_ns) as f64 / 1e9,
                (killed_ns - newest_ns) as f64 / 1e9
            ));
            if mode == "full" {
                assert!(stored_before >= made_before, "{}", report.join("\n"));
            } else if made_before > 0 {
                assert!(stored_before > 0, "{}", report.join("\n"));
            }
        }
    }
    eprintln!("{}", report.join("\n"));
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
    a.probe_modes = vec![(3, causeway_collector::ProbeMode::Full)];
    a.no_host = true;
    // 2.2M trapped calls take a minute beside a CPU load on both cores: not the 60 s default.
    a.duration = Some(std::time::Duration::from_secs(300));
    let summary = trace(&a);
    assert_eq!(summary.command_exit, Some(0), "the workload ran to its end");
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
