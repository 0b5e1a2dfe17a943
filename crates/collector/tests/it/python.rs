//! `--stacks` in CPython processes: a Python program calls the stand-in runtime through ctypes
//! from known functions at known lines, on two threads at once, and deeper than the walk limit;
//! the recorded Python frames must name exactly those files, functions and lines, each on its
//! own thread, for every interpreter on the machine (pyenv 3.10 to 3.13, Debian's 3.11).

use std::path::{Path, PathBuf};

use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use causeway_collector::{TraceHooks, run_trace_with};

use crate::{args, bpf_test, db_path, open, q, standin, trace};

/// The program: `leaf` makes every call; line numbers below are asserted.
const PROGRAM: &str = r#"import ctypes, sys, threading, time
rt = ctypes.CDLL(sys.argv[1])
go = threading.Barrier(2)

def leaf():
    rt.cudaDeviceSynchronize()

def mid():
    leaf()

class Worker:
    def run(self, n):
        for _ in range(n):
            mid()

def deep(k):
    if k == 0:
        rt.cudaDeviceSynchronize()
    else:
        deep(k - 1)

def worker_main():
    go.wait()
    Worker().run(40)

t = threading.Thread(target=worker_main, name="pyworker")
t.start()
go.wait()
for _ in range(40):
    mid()
t.join()
deep(40)
time.sleep(2)  # alive while the collector reads its code objects, on a busy machine too
"#;

/// Python lines of the program (1-based).
const LEAF: u32 = 6;
const MID: u32 = 9;
const RUN: u32 = 14;
const DEEP_CALL: u32 = 18;
const DEEP_REC: u32 = 20;
const WORKER_MAIN: u32 = 24;
const MAIN_LOOP: u32 = 30;

/// The interpreters on this machine (the test machines have them all).
fn interpreters() -> Vec<(String, PathBuf)> {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let mut out: Vec<(String, PathBuf)> = ["3.10.13", "3.11.7", "3.12.1", "3.13.0"]
        .iter()
        .map(|v| {
            (
                v.to_string(),
                PathBuf::from(format!("{home}/.pyenv/versions/{v}/bin/python3")),
            )
        })
        .collect();
    out.push(("debian-3.11".into(), PathBuf::from("/usr/bin/python3.11")));
    for (v, p) in &out {
        assert!(p.exists(), "CPython {v} is expected at {}", p.display());
    }
    out
}

/// (tid, status, frames as (file name, function, line)) of the recorded calls' stacks.
type Stack = (i64, String, Vec<(String, String, u32)>);

fn python_stacks(db: &Path, pid: i64) -> Vec<Stack> {
    let conn = open(db);
    let mut st = conn
        .prepare(&format!(
            "SELECT e.tid, s.status,
                    coalesce(list(f.file ORDER BY f.depth) FILTER (WHERE f.depth IS NOT NULL), []),
                    coalesce(list(f.function ORDER BY f.depth) FILTER (WHERE f.depth IS NOT NULL), []),
                    coalesce(list(f.line ORDER BY f.depth) FILTER (WHERE f.depth IS NOT NULL), [])
             FROM events e JOIN python_stacks s USING (stack_hash)
             LEFT JOIN python_frames f USING (stack_hash)
             WHERE e.op = 'cudaDeviceSynchronize' AND e.pid = {pid}
             GROUP BY e.id, e.tid, s.status ORDER BY e.id"
        ))
        .unwrap();
    st.query_map([], |r| {
        let files: Vec<String> = list(r.get_ref(2)?);
        let funcs: Vec<String> = list(r.get_ref(3)?);
        let lines: Vec<u32> = list(r.get_ref(4)?);
        let frames = files
            .into_iter()
            .zip(funcs)
            .zip(lines)
            .map(|((f, n), l)| (f, n, l))
            .collect();
        Ok((r.get(0)?, r.get(1)?, frames))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// A DuckDB list's items.
fn list<T: duckdb::types::FromSql>(v: duckdb::types::ValueRef<'_>) -> Vec<T> {
    use duckdb::types::Value;
    match v.to_owned() {
        Value::List(items) => items
            .into_iter()
            .map(|i| T::column_result(duckdb::types::ValueRef::from(&i)).unwrap())
            .collect(),
        other => panic!("not a list: {other:?}"),
    }
}

/// Runs the program under `python` and returns (pid, stacks of its calls).
fn run(
    python: &Path,
    extra: impl FnOnce(&mut causeway_collector::TraceArgs),
) -> (
    causeway_collector::TraceSummary,
    i64,
    Vec<Stack>,
    tempfile::TempDir,
) {
    run_program(python, "gpu_calls.py", PROGRAM, extra)
}

/// Runs `program` (as `name`) under `python`, every cudaDeviceSynchronize recorded with its
/// stack, and returns (pid, stacks of its calls); the store is `db_path` of the directory.
fn run_program(
    python: &Path,
    name: &str,
    program: &str,
    extra: impl FnOnce(&mut causeway_collector::TraceArgs),
) -> (
    causeway_collector::TraceSummary,
    i64,
    Vec<Stack>,
    tempfile::TempDir,
) {
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join(name);
    std::fs::write(&script, program).unwrap();
    let lib = s.dir.join("libcudart.so.12");
    let db = db_path(&dir);
    let mut a = args(
        &db,
        &[
            python.to_str().unwrap(),
            script.to_str().unwrap(),
            lib.to_str().unwrap(),
        ],
    );
    a.stacks = true;
    // Every call in full mode: the assertions count calls.
    a.exact_counts = false;
    a.probe_modes = vec![(
        causeway_store::catalog::op_by_name("cudaDeviceSynchronize")
            .unwrap()
            .id,
        causeway_collector::ProbeMode::Full,
    )];
    extra(&mut a);
    let summary = trace(&a);
    assert_eq!(summary.command_exit, Some(0), "{}", python.display());
    let pid = q(
        &db,
        "SELECT min(pid) FROM events WHERE op = 'cudaDeviceSynchronize'",
    );
    let stacks = python_stacks(&db, pid);
    (summary, pid, stacks, dir)
}

fn frame(f: &(String, String, u32)) -> (&str, &str, u32) {
    let file = Path::new(&f.0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    (file, f.1.as_str(), f.2)
}

#[test]
fn python_frames_name_the_files_functions_and_lines_of_each_thread() {
    let Some(_g) = bpf_test() else { return };
    for (version, python) in interpreters() {
        let (summary, pid, stacks, _dir) = run(&python, |_| {});
        eprintln!("{version}: python {:?}", summary.python);
        // 40 calls on each thread and one at the bottom of the deep recursion.
        assert_eq!(stacks.len(), 81, "{version}: {stacks:?}");
        let qual = |q: &'static str, plain: &'static str| {
            if version.starts_with("3.10") {
                plain
            } else {
                q
            }
        };
        let (mut main, mut worker, mut deep) = (0, 0, 0);
        for (tid, status, frames) in &stacks {
            let got: Vec<(&str, &str, u32)> = frames.iter().map(frame).collect();
            if got.first().map(|f| f.1) == Some("deep") {
                deep += 1;
                assert_eq!(*tid, pid, "{version}: deep runs on the main thread");
                assert_eq!(status, "truncated", "{version}");
                assert_eq!(got.len(), 32, "{version}: {got:?}");
                assert_eq!(got[0], ("gpu_calls.py", "deep", DEEP_CALL), "{version}");
                for f in &got[1..] {
                    assert_eq!(*f, ("gpu_calls.py", "deep", DEEP_REC), "{version}");
                }
                continue;
            }
            assert_eq!(status, "ok", "{version}: {got:?}");
            let inner = [("gpu_calls.py", "leaf", LEAF), ("gpu_calls.py", "mid", MID)];
            assert_eq!(&got[..2], &inner, "{version}");
            if *tid == pid {
                main += 1;
                assert_eq!(
                    &got[2..],
                    &[("gpu_calls.py", "<module>", MAIN_LOOP)],
                    "{version}: the main thread's frames"
                );
            } else {
                worker += 1;
                assert_eq!(
                    &got[2..4],
                    &[
                        ("gpu_calls.py", qual("Worker.run", "run"), RUN),
                        ("gpu_calls.py", "worker_main", WORKER_MAIN),
                    ],
                    "{version}: the worker thread's frames"
                );
                // Then threading's own frames, to the thread's start.
                assert!(
                    got[4..].iter().all(|f| f.0 == "threading.py") && got.len() > 4,
                    "{version}: {got:?}"
                );
            }
        }
        assert_eq!((main, worker, deep), (40, 40, 1), "{version}");
        assert!(summary.python.processes >= 1, "{version}");
        assert!(
            summary.python.walks >= 81 && summary.python.truncated >= 1,
            "{version}"
        );
        assert_eq!(summary.python.no_thread, 0, "{version}");
        // Held at its first mapping, the command's interpreter is known before its first call.
        assert_eq!(summary.python.early_stacks, 0, "{version}");
    }
}

#[test]
fn a_wrong_layout_records_no_python_frames_and_counts_them() {
    let Some(_g) = bpf_test() else { return };
    let python = interpreters().remove(1).1; // 3.11
    // 3.12's offsets on a 3.11 interpreter: its thread states are not found, or its frames do
    // not read as code objects. Either way no frame may be stored, and the loss is counted.
    let (summary, _pid, stacks, dir) = run(&python, |a| a.python_layout = Some("3.12".into()));
    assert_eq!(stacks.len(), 81, "{stacks:?}");
    assert!(
        stacks
            .iter()
            .all(|(_, st, f)| f.is_empty() && (st == "no_thread" || st == "rejected")),
        "{stacks:?}"
    );
    let db = db_path(&dir);
    assert_eq!(q(&db, "SELECT count(*) FROM python_frames"), 0);
    let dropped = q(
        &db,
        "SELECT coalesce(sum(count), 0)::BIGINT FROM drops WHERE kind = 'python_frames'",
    );
    assert!(dropped >= 81, "dropped {dropped}: {:?}", summary.python);
}

#[test]
fn an_unsupported_python_is_refused_and_counted() {
    let Some(_g) = bpf_test() else { return };
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let python = PathBuf::from(format!("{home}/.pyenv/versions/3.9.18/bin/python3"));
    assert!(
        python.exists(),
        "CPython 3.9 is expected at {}",
        python.display()
    );
    let (summary, _pid, stacks, dir) = run(&python, |_| {});
    // No layout for 3.9: the kernel walks nothing, so no stack has Python rows at all.
    assert!(stacks.is_empty(), "{stacks:?}");
    assert_eq!(summary.python.unsupported, 1, "{:?}", summary.python);
    let db = db_path(&dir);
    assert!(
        q(
            &db,
            "SELECT count(*) FROM events WHERE op = 'cudaDeviceSynchronize' AND stack_hash <> 0"
        ) >= 81
    );
    assert_eq!(
        q(
            &db,
            "SELECT coalesce(sum(count), 0)::BIGINT FROM drops WHERE kind = 'python_frames'"
        ),
        1
    );
}

/// Loads the runtime, says so, waits for a file, then calls from `leaf` (line 7) through `mid`
/// (line 10) from `<module>`.
const WAITING: &str = r#"import ctypes, os, sys, time
rt = ctypes.CDLL(sys.argv[1]); open(sys.argv[3], "w").close()
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)

def leaf():
    rt.cudaDeviceSynchronize()

def mid():
    leaf()

for _ in range(20):
    mid()
time.sleep(2)  # alive while the collector reads its code objects, on a busy machine too
"#;

/// A process already running when the trace starts (`--pid`), under a venv's python: its
/// interpreter is found when the trace starts, and its calls have their Python frames.
#[test]
fn a_running_venv_python_traced_by_pid_has_its_frames() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let base = interpreters().remove(2).1; // 3.12
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("venv");
    let st = Command::new(&base)
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(st.success(), "python -m venv");
    let script = dir.path().join("late.py");
    std::fs::write(&script, WAITING).unwrap();
    let (go, loaded) = (dir.path().join("go"), dir.path().join("loaded"));
    let mut child = Command::new(venv.join("bin/python"))
        .arg(&script)
        .arg(s.dir.join("libcudart.so.12"))
        .arg(&go)
        .arg(&loaded)
        .spawn()
        .unwrap();
    // Running, with the runtime mapped, before the trace starts.
    let since = std::time::Instant::now();
    while !loaded.exists() {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the program did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let db = db_path(&dir);
    let mut a = args(&db, &[]);
    a.pid = Some(child.id());
    a.stacks = true;
    a.overhead_budget = 100.0;
    let (ready_tx, ready_rx) = mpsc::channel();
    let hooks = TraceHooks {
        on_ready: Some(Box::new(move || ready_tx.send(()).unwrap())),
        ..TraceHooks::default()
    };
    let tracer = std::thread::spawn(move || run_trace_with(&a, hooks));
    ready_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the trace became ready");
    std::fs::write(&go, "").unwrap();
    assert!(child.wait().unwrap().success());
    let summary = tracer.join().unwrap().expect("trace");
    eprintln!("summary: {}", serde_json::to_string(&summary).unwrap());
    assert_eq!(summary.python.processes, 1, "{:?}", summary.python);
    let stacks = python_stacks(&db, i64::from(child.id()));
    assert_eq!(stacks.len(), 20, "{stacks:?}");
    for (tid, status, frames) in &stacks {
        assert_eq!((*tid, status.as_str()), (i64::from(child.id()), "ok"));
        let got: Vec<(&str, &str, u32)> = frames.iter().map(frame).collect();
        assert_eq!(
            got,
            [
                ("late.py", "leaf", 7),
                ("late.py", "mid", 10),
                ("late.py", "<module>", 13)
            ]
        );
    }
}

/// `leaf` is called from C (the builtin `map`), `outer` from `<module>` in Python: two C-level
/// calls of the eval loop (3.10: one per frame).
const ENTERED: &str = r#"import ctypes, sys, time
rt = ctypes.CDLL(sys.argv[1])

def leaf(_):
    rt.cudaDeviceSynchronize()

def outer():
    list(map(leaf, range(5)))

outer()
time.sleep(2)  # alive while the collector reads its code objects, on a busy machine too
"#;

/// The native frames of a stack that ran Python code are unwound from its copied stack memory
/// through libffi and libpython (built without frame pointers), and each Python frame says which
/// eval call ran it: readers place them at those `_PyEval_EvalFrameDefault` frames.
#[test]
fn native_frames_reach_the_eval_calls_that_ran_the_python_frames() {
    let Some(_g) = bpf_test() else { return };
    for (version, python) in interpreters() {
        let (summary, _, _, dir) = run_program(&python, "entered.py", ENTERED, |_| {});
        let db = db_path(&dir);
        let conn = open(&db);
        let hashes: Vec<i64> = conn
            .prepare("SELECT DISTINCT stack_hash FROM events WHERE op = 'cudaDeviceSynchronize'")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(hashes.len(), 1, "{version}: one stack for the 5 calls");
        let native: Vec<String> = conn
            .prepare("SELECT symbol FROM stack_frames WHERE stack_hash = ? ORDER BY depth")
            .unwrap()
            .query_map([hashes[0]], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let py: Vec<(String, bool)> = conn
            .prepare(
                "SELECT function, entry FROM python_frames WHERE stack_hash = ? ORDER BY depth",
            )
            .unwrap()
            .query_map([hashes[0]], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        eprintln!("{version}: native {native:?}\n  python {py:?}");
        let evals: Vec<usize> = (native.iter().enumerate())
            .filter(|(_, s)| s.starts_with("_PyEval_EvalFrameDefault"))
            .map(|(i, _)| i)
            .collect();
        let want: Vec<(&str, bool)> = if version.starts_with("3.10") {
            vec![("leaf", true), ("outer", true), ("<module>", true)]
        } else {
            vec![("leaf", true), ("outer", false), ("<module>", true)]
        };
        let got: Vec<(&str, bool)> = py.iter().map(|(f, e)| (f.as_str(), *e)).collect();
        assert_eq!(got, want, "{version}");
        // One eval frame per group of Python frames, innermost first, and map's C code between
        // the first two: leaf ran inside a call that map made.
        let groups = want.iter().filter(|(_, e)| *e).count();
        assert!(evals.len() >= groups, "{version}: {native:?}");
        assert!(native[0].starts_with("cudaDeviceSynchronize"), "{version}");
        assert!(evals[1] > evals[0] + 1, "{version}: {native:?}");
        // Debian's interpreter is stripped of its static functions' names.
        if !version.starts_with("debian") {
            assert!(
                native[evals[0]..evals[1]]
                    .iter()
                    .any(|s| s.starts_with("map_next")),
                "{version}: {native:?}"
            );
        }
        // The unwind reaches the program's start.
        assert!(
            native.last().is_some_and(|s| s.starts_with("_start")),
            "{version}: {native:?}"
        );
        assert!(summary.stacks_unwound >= 1, "{version}");
    }
}

/// A conda environment's python is an interpreter linked statically into its executable, in the
/// environment's own prefix (conda's own builds cannot be fetched here: Debian's statically
/// linked 3.11, copied into that layout, stands in for one). Found there, its frames are named.
#[test]
fn a_static_python_in_a_conda_style_prefix_has_its_frames() {
    let Some(_g) = bpf_test() else { return };
    let debian = interpreters().pop().unwrap().1;
    let env = tempfile::tempdir().unwrap();
    let bin = env.path().join("miniconda3/envs/train/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let python = bin.join("python3.11");
    std::fs::copy(&debian, &python).unwrap();
    let (summary, pid, stacks, _dir) = run(&python, |_| {});
    assert_eq!(summary.python.processes, 1, "{:?}", summary.python);
    assert_eq!(stacks.len(), 81, "{stacks:?}");
    let main: Vec<_> = (stacks.iter())
        .filter(|(tid, _, _)| *tid == pid)
        .filter(|(_, _, f)| f.first().is_some_and(|f| f.1 == "leaf"))
        .map(|(_, status, f)| (status.as_str(), f.iter().map(frame).collect::<Vec<_>>()))
        .collect();
    assert_eq!(main.len(), 40);
    for (status, got) in main {
        assert_eq!(status, "ok");
        assert_eq!(
            got,
            [
                ("gpu_calls.py", "leaf", LEAF),
                ("gpu_calls.py", "mid", MID),
                ("gpu_calls.py", "<module>", MAIN_LOOP)
            ]
        );
    }
}
