//! The SQL guard's corpus run end to end: every accepted query executes against a real trace
//! file (a three-node cluster the store writes and merges itself) and neither the file's bytes
//! nor the filesystem outside it change; every rejected query is refused before it reaches
//! DuckDB, by both boundaries (the guard and the store's recheck).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use causeway_sqlguard::corpus::parse_corpus;
use causeway_sqlguard::guard;
use causeway_store::{QueryLimits, Reader};

const ACCEPT: &str = include_str!("../../../sqlguard/tests/corpus/accept.txt");
const REJECT: &str = include_str!("../../../sqlguard/tests/corpus/reject.txt");

/// Name, size and modification time of every file under `dir`.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), (m.len(), m.modified().unwrap()));
            }
        }
    }
    out
}

#[test]
fn accepted_corpus_queries_run_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::common::cluster_store(dir.path());
    let bytes = std::fs::read(&db).unwrap();
    let before = snapshot(dir.path());
    // The working directory (the crate) stands for "the filesystem outside the trace".
    let cwd = std::env::current_dir().unwrap();
    let cwd_before = snapshot(&cwd);

    let r = Reader::open(&db).unwrap();
    let entries = parse_corpus(ACCEPT).unwrap();
    assert!(
        entries.len() >= 50,
        "only {} accepted queries",
        entries.len()
    );
    let limits = QueryLimits {
        timeout: Duration::from_secs(5),
        ..QueryLimits::default()
    };
    let (mut ran, mut failed_at_run_time) = (0, Vec::new());
    for e in &entries {
        let g = guard(&e.sql, r.policy(), None)
            .unwrap_or_else(|rej| panic!("{} (line {}) was rejected: {rej}", e.name, e.line));
        match r.query(&g, &limits) {
            Ok(_) => ran += 1,
            Err(err) => failed_at_run_time.push(format!("{}: {err}", e.name)),
        }
    }
    drop(r);
    assert_eq!(std::fs::read(&db).unwrap(), bytes, "the trace file changed");
    assert_eq!(
        snapshot(dir.path()),
        before,
        "files next to the trace changed"
    );
    assert_eq!(
        snapshot(&cwd),
        cwd_before,
        "files in the working directory changed"
    );
    // Most of the corpus must actually execute, not just pass the guard.
    assert!(
        ran * 10 >= entries.len() * 9,
        "only {ran} of {} accepted queries ran; failures: {failed_at_run_time:#?}",
        entries.len()
    );
}

#[test]
fn rejected_corpus_queries_never_reach_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::common::small_store(dir.path(), 10);
    let r = Reader::open(&db).unwrap();
    let entries = parse_corpus(REJECT).unwrap();
    assert!(
        entries.len() >= 300,
        "only {} rejected queries",
        entries.len()
    );
    for e in &entries {
        assert!(
            guard(&e.sql, r.policy(), None).is_err(),
            "{} (line {}) was accepted: {}",
            e.name,
            e.line,
            e.sql
        );
    }
}
