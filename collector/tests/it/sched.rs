//! Off-CPU attribution: a thread preempted by a busy thread pinned to the same CPU.

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
