//! Off-CPU attribution: a thread preempted by a busy thread pinned to the same CPU, and by a
//! process outside the trace, named in `tasks`.

use crate::{args, bpf_test, db_path, q, standin, trace};

#[test]
fn preemption_is_attributed_to_the_busy_thread() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let out = dir.path().join("tids.txt");
    trace(&args(
        &db,
        &[s.exe(), "preempt", out.to_str().unwrap(), "1000"],
    ));
    let text = std::fs::read_to_string(&out).unwrap();
    let tid = |name: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {text}"))
            .trim()
            .parse()
            .unwrap()
    };
    let (victim, busy) = (tid("victim "), tid("busy "));
    // The victim was switched out while runnable (arg1 = 0) with the busy thread running next.
    let preempted = q(
        &db,
        &format!(
            "SELECT count(*) FROM events WHERE op = 'sched_switch' AND tid = {victim} AND arg1 = 0 AND arg0 = {busy}"
        ),
    );
    assert!(
        preempted > 0,
        "no preemption of {victim} by {busy} recorded"
    );
    // The busy thread is traced too, its own preemptions attributed to its own tid and comm.
    let busy_preempted = q(
        &db,
        &format!(
            "SELECT count(*) FROM events WHERE op = 'sched_switch' AND tid = {busy} AND arg1 = 0 AND comm = 'busy'"
        ),
    );
    assert!(
        busy_preempted > 0,
        "no preemption of the busy thread {busy} recorded"
    );
    let comm = q(
        &db,
        &format!(
            "SELECT count(*) FROM events WHERE op = 'sched_switch' AND tid = {victim} AND comm = 'victim'"
        ),
    );
    assert!(comm > 0);
    // Off-CPU intervals are positive and the timestamp is the switch-out (before switch-in).
    assert_eq!(
        q(
            &db,
            &format!(
                "SELECT count(*) FROM events WHERE op = 'sched_switch' AND tid = {victim} AND duration <= 0"
            )
        ),
        0
    );
}

/// A process outside the trace (started before it, named by prctl) spins on the traced
/// threads' CPU: its thread id in sched_switch arg0 has one `tasks` row with its name and
/// process, and the traced busy thread, which preempts the victim too, has none.
#[test]
fn a_preemptor_outside_the_trace_is_named() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let out = dir.path().join("tids.txt");
    let mut hog = std::process::Command::new(s.exe())
        .args(["hog", "cw_hog", "4000"])
        .spawn()
        .unwrap();
    trace(&args(
        &db,
        &[s.exe(), "preempt", out.to_str().unwrap(), "1500"],
    ));
    let _ = hog.kill();
    let _ = hog.wait();
    let hog_pid = i64::from(hog.id());
    let text = std::fs::read_to_string(&out).unwrap();
    let busy: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("busy "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        q(
            &db,
            &format!("SELECT count(*) FROM events WHERE op = 'sched_switch' AND arg0 = {hog_pid}")
        ) > 0,
        "the hog never ran in a traced thread's place"
    );
    assert_eq!(
        q(
            &db,
            &format!(
                "SELECT count(*) FROM tasks WHERE tid = {hog_pid} AND pid = {hog_pid} AND comm = 'cw_hog'"
            )
        ),
        1
    );
    assert_eq!(
        q(
            &db,
            &format!("SELECT count(*) FROM tasks WHERE tid = {busy}")
        ),
        0
    );
    assert_eq!(
        q(&db, "SELECT count(*) - count(DISTINCT tid) FROM tasks"),
        0,
        "a task is named once"
    );
}
