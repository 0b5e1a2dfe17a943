//! `--stacks`: the user stacks of the stand-in workload's launches, symbolised to its real
//! function names and interned once per distinct stack.

use crate::{args, bpf_test, command_pid, db_path, open, q, standin, trace};

#[test]
fn stacks_resolve_to_the_workloads_function_names() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let mut a = args(&db, &[s.exe(), "stacks", "10"]);
    a.stacks = true;
    let summary = trace(&a);
    assert_eq!(summary.command_exit, Some(0));
    let pid = command_pid(&db);
    let launches = format!("FROM events WHERE op = 'cudaLaunchKernel' AND pid = {pid}");
    assert_eq!(q(&db, &format!("SELECT count(*) {launches}")), 20);
    assert_eq!(
        q(
            &db,
            &format!("SELECT count(*) {launches} AND stack_hash = 0")
        ),
        0
    );
    assert_eq!(
        q(
            &db,
            &format!("SELECT count(DISTINCT stack_hash) {launches}")
        ),
        2
    );
    // Each distinct stack's frames, innermost first, as the stacks view strings them together.
    let conn = open(&db);
    let mut st = conn
        .prepare(&format!(
            "SELECT frames FROM stacks WHERE stack_hash IN (SELECT stack_hash {launches}) ORDER BY depth DESC"
        ))
        .unwrap();
    let stacks: Vec<String> = st
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(stacks.len(), 2, "{stacks:?}");
    let order = |text: &str, names: &[&str]| {
        let pos: Vec<Option<usize>> = names.iter().map(|n| text.find(n)).collect();
        assert!(
            pos.iter().all(Option::is_some) && pos.windows(2).all(|w| w[0] < w[1]),
            "{names:?} not in order in {text}"
        );
    };
    order(
        &stacks[0],
        &[
            "cudaLaunchKernel (libcudart.so.12)",
            "launch+0x",
            "stack_leaf+0x",
            "stack_mid+0x",
            "stack_root+0x",
            "main+0x",
        ],
    );
    order(
        &stacks[1],
        &[
            "cudaLaunchKernel (libcudart.so.12)",
            "launch+0x",
            "stack_leaf+0x",
            "stack_root+0x",
            "main+0x",
        ],
    );
    assert!(!stacks[1].contains("stack_mid"), "{}", stacks[1]);
    assert!(stacks[0].contains("(workload)"), "{}", stacks[0]);
    assert_eq!(summary.stacks, 2);
}
