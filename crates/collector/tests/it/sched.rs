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

/// Who woke a thread, by design: a parent on one CPU blocks reading a pipe that its child, on
/// the other CPU, writes every 10 ms after a timer sleep, while a spinning process shares the
/// child's CPU. The parent's wakeups are the child's writes (a task, on another CPU: the kernel
/// queues them to the parent's idle CPU, whose interrupt then runs the idle task), and the
/// child's are its timer (an interrupt, which finds the spinner running). A waker read from
/// where the wakeup lands names the idle task for the first and the spinner for the second.
#[test]
fn a_wakeup_names_the_task_that_asked_and_not_the_one_an_interrupt_found() {
    let Some(_g) = bpf_test() else { return };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        eprintln!("one CPU: the test needs two");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let out = dir.path().join("pids.txt");
    let program = r#"
import os, sys, time
cpus = sorted(os.sched_getaffinity(0))
a, b = cpus[0], cpus[1]
r, w = os.pipe()
spinner = os.fork()
if spinner == 0:
    os.sched_setaffinity(0, {b})
    end = time.monotonic() + 3
    while time.monotonic() < end:
        pass
    os._exit(0)
child = os.fork()
if child == 0:
    os.close(r)
    os.sched_setaffinity(0, {b})
    for _ in range(100):
        time.sleep(0.01)
        os.write(w, b"x")
    os._exit(0)
os.close(w)
os.sched_setaffinity(0, {a})
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {child} {spinner}\n")
while os.read(r, 1):
    pass
os.waitpid(child, 0)
os.waitpid(spinner, 0)
"#;
    trace(&args(
        &db,
        &["python3", "-c", program, out.to_str().unwrap()],
    ));
    let text = std::fs::read_to_string(&out).unwrap();
    let pids: Vec<i64> = text
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let (parent, child, spinner) = (pids[0], pids[1], pids[2]);
    let woken = |tid: i64, by: &str| {
        q(
            &db,
            &format!(
                "SELECT count(*) FROM events WHERE op = 'sched_wakeup' AND tid = {tid} AND {by}"
            ),
        )
    };
    // The parent sleeps in read() before nearly every write; a busy machine may let a few
    // writes find it still running.
    let by_child = woken(parent, &format!("arg0 = {child}"));
    assert!(
        by_child >= 50,
        "the parent was woken {by_child} times by the child's writes, of 100"
    );
    // While the child writes (start-up's disk reads end in interrupts, by design too).
    let during = format!(
        "arg0 = 0 AND timestamp BETWEEN (SELECT min(timestamp) FROM events WHERE op = 'sched_wakeup' AND tid = {parent} AND arg0 = {child}) AND (SELECT max(timestamp) FROM events WHERE op = 'sched_wakeup' AND tid = {parent} AND arg0 = {child})"
    );
    assert!(
        woken(parent, &during) * 10 <= by_child,
        "the parent's wakeups are the child's writes, not interrupts"
    );
    // The child's timer sleeps end in an interrupt, most often while the spinner runs.
    let by_interrupt = woken(child, "arg0 = 0");
    assert!(
        by_interrupt >= 50,
        "the child's timer woke it {by_interrupt} times, of 100"
    );
    assert_eq!(
        woken(child, &format!("arg0 = {spinner}")),
        0,
        "the spinner the timer interrupted did not wake the child"
    );
}

/// A thread asleep in the kernel's I/O wait (dd reading with O_DIRECT: each read waits for the
/// device) has `ret_code` 1 on its blocked switches; one asleep in nanosleep (sleep's 0.3 s)
/// has 0.
#[test]
fn a_sleep_in_the_kernels_io_wait_is_marked() {
    let Some(_g) = bpf_test() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let data = dir.path().join("data.bin");
    std::fs::write(&data, vec![7u8; 4 << 20]).unwrap();
    let script = format!(
        "dd if={} of=/dev/null bs=4k count=1024 iflag=direct status=none && sleep 0.3",
        data.display()
    );
    trace(&args(&db, &["sh", "-c", &script]));
    let count = |sql: &str| {
        q(
            &db,
            &format!("SELECT count(*) FROM events WHERE op = 'sched_switch' AND {sql}"),
        )
    };
    let dd_io = count("comm = 'dd' AND arg1 = 1 AND ret_code = 1");
    assert!(
        dd_io >= 100,
        "{dd_io} of dd's switches in I/O wait, for 1,024 direct reads"
    );
    // (sleep may wait for the disk while exec loads it: its long sleep is the nanosleep)
    assert_eq!(
        count("comm = 'sleep' AND ret_code = 1 AND duration >= 200000000"),
        0
    );
    assert!(
        count("comm = 'sleep' AND arg1 = 1 AND ret_code = 0 AND duration >= 200000000") >= 1,
        "the 0.3-s nanosleep not recorded as a plain sleep"
    );
    // Only blocked switches carry it: a preempted thread is not waiting for anything.
    assert_eq!(count("arg1 = 0 AND ret_code <> 0"), 0);
}
