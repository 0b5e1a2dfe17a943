//! The reference tool's node traces, imported one by one and merged, hold what its own
//! cluster file holds when imported: the same rows per node and op, and every node's chains.

use causeway_import::{ImportOptions, import};
use causeway_store::Reader;
use causeway_store::merge::merge;

use crate::shared;

fn per_node_ops(r: &Reader) -> Vec<(String, String, i64)> {
    r.prepare_trusted("SELECT node, op, count(*) FROM events GROUP BY ALL ORDER BY ALL")
        .unwrap()
        .query_map([], causeway_store::row)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn reference_node_traces_merge_to_their_cluster_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut parts = Vec::new();
    for n in ["01", "02", "03"] {
        let out = dir.path().join(format!("node-{n}.duckdb"));
        import(
            &[shared(&format!("sample-gpu-node-{n}.db"))],
            &out,
            false,
            &ImportOptions::default(),
            &mut |_| {},
        )
        .unwrap();
        parts.push(out);
    }
    let merged = dir.path().join("merged.duckdb");
    let report = merge(&parts, &merged, false).unwrap();
    assert_eq!(report.events, 600);
    let cluster = dir.path().join("cluster.duckdb");
    import(
        &[shared("sample-cluster.db")],
        &cluster,
        false,
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    let (m, c) = (
        Reader::open(&merged).unwrap(),
        Reader::open(&cluster).unwrap(),
    );
    assert_eq!(per_node_ops(&m), per_node_ops(&c));
    let chains = |r: &Reader| -> i64 {
        r.prepare_trusted("SELECT count(*) FROM chains")
            .unwrap()
            .query_row([], |row| row.get(0))
            .unwrap()
    };
    assert_eq!(
        chains(&m),
        report.sources.iter().map(|s| s.chains as i64).sum::<i64>()
    );
}
