//! Shared helpers: where the shared investigations live, and small store builders.

use std::path::PathBuf;

use causeway_store::{Event, Reader, Writer, WriterOptions};

/// `../shared/investigations` next to the repository, where the reference traces are.
pub fn shared(name: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/investigations");
    let p = root.join(name);
    assert!(
        p.exists(),
        "{} is missing: these tests read the reference traces from ../shared/investigations",
        p.display()
    );
    p
}

/// A store with `n` synthetic cudaLaunchKernel events (durations 1..=n us) on node "t".
pub fn small_store(dir: &std::path::Path, n: i64) -> PathBuf {
    let path = dir.join("small.duckdb");
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: "t".into(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for i in 0..n {
        w.append(&Event {
            timestamp: 1_000_000_000 + i * 1_000,
            duration: (i + 1) * 1_000,
            pid: 42,
            tid: 43,
            comm: "python3".into(),
            op_id: 3,
            ..Event::default()
        })
        .unwrap();
    }
    w.finish().unwrap();
    path
}

/// Whether `SET enable_external_access = true` succeeds on `r`: it must not on any reader (its
/// database's configuration is locked).
pub fn can_loosen(r: &Reader) -> bool {
    r.prepare_trusted("SET enable_external_access = true")
        .is_ok_and(|mut s| s.execute([]).is_ok())
}
